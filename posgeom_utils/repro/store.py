"""The committed store of memoised reference runs: what the book shows without retraining.

Chapter: *Reproduction ledger*. The book is built at the ``reference`` profile. Its
expensive steps (training runs, probes, bootstrap grids) go through
:func:`memoised_sweep`, which keys every run by its configuration and by everything
that can change its result: the chapter's code cells and the package code they import,
normalised (:func:`~posgeom_utils.repro.sources.code_hash`: a docstring, a comment, a
reformat or a move of a function between those modules keeps the key; any change of
a code cell or of behaviour makes the chapter's runs stale). At
the ``reference`` profile finished runs live in ``book/results/store/<chapter>/<name>/``,
committed; a book build that finds one missing or stale stops before any work and
names the command that refreshes the store (``posgeom run`` recomputes instead). At
the other profiles runs are kept only under ``posgeom run`` (its checkpoints)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..scale.sweeps import _load, config_hash, run_sweep
from .results import _RUN, CHECKPOINT_ENV, RESULTS_ENV
from .sources import REPO_ROOT, code_hash

#: the committed store, one folder per chapter
STORE = REPO_ROOT / "book" / "results" / "store"


class StaleStoreError(RuntimeError):
    """A memoised reference run is missing from the store or was computed by other
    code. Chapter: *Reproduction ledger*."""


def stale_runs(
    runs: Sequence[dict[str, Any]], directory: str | os.PathLike
) -> list[str]:
    """Names of the ``runs`` with no current result in ``directory`` (none there, or
    one stored for another configuration or code). Chapter: *Reproduction ledger*."""
    return [
        run["name"]
        for run in runs
        if _load(Path(directory) / f"{run['name']}.json", config_hash(run)) is None
    ]


def memoised_sweep(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    runs: Sequence[dict[str, Any]],
    *,
    chapter: str,
    name: str,
    profile: str,
    executor: str | None = None,
    desc: str | None = None,
) -> list[dict[str, Any]]:
    """:func:`~posgeom_utils.scale.sweeps.run_sweep` of ``fn`` over ``runs``, memoised.

    Every run's configuration gains ``code``, the code hash of the chapter
    ``notebooks/<chapter>.md`` (its code cells and the package code they import), and
    the chapter's parameters as executed (:func:`show_parameters`). At
    the ``reference`` profile the runs live in
    ``book/results/store/<chapter>/<name>/``; outside ``posgeom run`` a missing or
    stale run raises :class:`StaleStoreError` with the refresh command before anything
    trains. ``executor`` as for ``run_sweep`` (``"serial"`` for runs that are
    multi-threaded themselves). Chapter: *Reproduction ledger*."""
    source = REPO_ROOT / "notebooks" / f"{chapter}.md"
    if not source.is_file() and profile == "reference":
        raise FileNotFoundError(
            f"chapter={chapter!r}: the memoised reference runs are keyed by the code of "
            f"{source}, which does not exist; run the book's own checkout"
        )
    # outside the checkout (an installed package) only posgeom run's checkpoints use it
    code = code_hash(source) if source.is_file() else "no chapter source"
    # the chapter's parameters as executed (papermill may override its cell)
    parameters = {k: v for k, v in _RUN["parameters"].items() if k != "profile"}
    runs = [dict(run, code=code, parameters=parameters) for run in runs]
    if profile == "reference":
        directory: Path | None = STORE / chapter / name
        stale = stale_runs(runs, directory)
        if stale and not os.environ.get(RESULTS_ENV):
            raise StaleStoreError(
                f"{len(stale)} of the {len(runs)} memoised reference runs {name!r} of "
                f"{chapter!r} are not in {directory} for this code (e.g. {stale[0]!r}): "
                f"refresh them with `posgeom run --profile reference --chapters {chapter} "
                "--out book/results/reference` and commit book/results"
            )
    else:
        root = os.environ.get(CHECKPOINT_ENV)
        directory = Path(root) / name if root else None
    return run_sweep(
        fn, runs, executor=executor, directory=directory, desc=desc or name
    )


def memoised(
    fn: Callable[[dict[str, Any]], dict[str, Any]],
    config: dict[str, Any],
    **options: Any,
) -> dict[str, Any]:
    """``fn(config)`` memoised as a sweep of one run (``options`` as for
    :func:`memoised_sweep`; the run is named ``options["name"]``).
    Chapter: *Reproduction ledger*."""
    return memoised_sweep(fn, [dict(config, name=options["name"])], **options)[0]
