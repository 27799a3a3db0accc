"""Memoised runs, keyed by configuration and the chapter's normalised code: committed
in ``book/results/store/<chapter>/<name>/`` at the ``reference`` profile (what the book
shows), kept only in ``posgeom run``'s checkpoints at the others.
Chapter: *Reproduction ledger*."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..scale.sweeps import _load, config_hash, run_sweep
from .results import _RUN, CHECKPOINT_ENV, RESULTS_ENV
from .sources import REPO_ROOT, code_hash, declared_parameters

#: the committed store, one folder per chapter
STORE = REPO_ROOT / "book" / "results" / "store"


class StaleStoreError(RuntimeError):
    """A memoised reference run is missing from the store or was computed by other
    code. Chapter: *Reproduction ledger*."""


def as_written(source: Path, parameters: dict[str, Any]) -> bool:
    """Whether ``parameters`` hold the literal values of the ``parameters`` cell of the
    chapter ``source`` (papermill's ``-p`` changes them: a reader's own run, not the
    book's). Chapter: *Reproduction ledger*."""
    import jupytext

    declared = declared_parameters(jupytext.read(source)).items()
    return all(
        json.dumps(value) == json.dumps(parameters[name])
        for name, value in declared
        if value is not ... and name in parameters
    )


def memoised_sweep(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    runs: Sequence[dict[str, Any]],
    *,
    chapter: str,
    name: str,
    profile: str,
    executor: str | None = None,
    desc: str | None = None,
    code: str | None = None,
) -> list[dict[str, Any]]:
    """:func:`~posgeom_utils.scale.sweeps.run_sweep` of ``fn`` over ``runs``, keyed also
    by ``code`` (default: the chapter's code hash) and the parameters; at the
    ``reference`` profile, outside ``posgeom run``, a run missing from the store raises
    :class:`StaleStoreError` before anything trains; a reader's own parameters
    (papermill ``-p``) compute their runs and never touch the store.
    Chapter: *Reproduction ledger*."""
    source = REPO_ROOT / "notebooks" / f"{chapter}.md"
    if not source.is_file() and profile == "reference":
        raise FileNotFoundError(
            f"chapter={chapter!r}: the memoised reference runs are keyed by the code "
            f"of {source}, which does not exist; run the book's own checkout"
        )
    if code is None:  # an installed package: only posgeom run's checkpoints use it
        code = code_hash(source) if source.is_file() else "no chapter source"
    parameters = {k: v for k, v in _RUN["parameters"].items() if k != "profile"}
    runs = [dict(run, code=code, parameters=parameters) for run in runs]
    root = os.environ.get(CHECKPOINT_ENV)
    directory = Path(root) / name if root else None
    book = profile == "reference" and (
        not source.is_file() or as_written(source, parameters)
    )
    if book:  # the book's own runs: the committed store
        directory = STORE / chapter / name
        load = (_load(directory / f"{r['name']}.json", config_hash(r)) for r in runs)
        stale = [r["name"] for r, found in zip(runs, load) if found is None]
        if stale and not os.environ.get(RESULTS_ENV):
            fix = f"posgeom run --profile reference --chapters {chapter} --out "
            raise StaleStoreError(
                f"{len(stale)} of the {len(runs)} memoised reference runs {name!r} of "
                f"{chapter!r} are not in {directory} for this code (e.g. "
                f"{stale[0]!r}): refresh them with `{fix}book/results/reference` and "
                "commit book/results"
            )
    return run_sweep(
        fn, runs, executor=executor, directory=directory, desc=desc or name
    )


def memoised(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    config: dict[str, Any],
    **options: Any,
) -> dict[str, Any]:
    """``fn(config)`` memoised as a sweep of one run named ``options["name"]`` (options
    as for :func:`memoised_sweep`). Chapter: *Reproduction ledger*."""
    return memoised_sweep(fn, [dict(config, name=options["name"])], **options)[0]
