"""``posgeom run``: re-execute chapters through papermill under a profile and keep their results with provenance.

Chapter: *How this book is built* (README) and *Reproduction ledger*.

Each chapter ``<chapter>`` gets a folder ``<out>/<chapter>/`` holding

- ``<chapter>.ipynb``: the executed notebook (also written, up to the failing cell, when a cell fails);
- ``results.json``: ``{"chapter", "parameters", "results", "provenance"}``, the chapter's effective
  parameters and every glued number (written by its last cell, :func:`posgeom_utils.repro.results.save_results`)
  plus where and how they were computed;
- ``failed.json``: why the last attempt failed (removed by a later success);
- ``checkpoints/``: resumable training checkpoints (:func:`posgeom_utils.repro.results.checkpoint_dir`), kept
  between attempts of the same run, so an interrupted training run resumes; cleared when the run's
  parameters, code or profile change, or with ``force``.

A chapter whose ``results.json`` was made with the same profile, requested parameters, package version and
source hash (:func:`posgeom_utils.repro.sources.source_hash`: the chapter, the science modules and the pinned
environment; not the machinery, and not the git commit) is skipped. The commit is still recorded.

Where a chapter's independent training runs execute (``executor``, ``workers``, ``scheduler``: serially or on
Dask, :func:`posgeom_utils.scale.sweeps.run_sweep`) is injected into the chapters that declare those
parameters and recorded in the provenance (``execution``), but it is not a requested parameter: it enters
neither the skip key nor the checkpoints' owner, because both executors give the same results by construction
(tested). A chapter run serially is therefore current for a Dask run, and an interrupted run resumes from its
checkpoints whichever executor the next attempt uses.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..cache import read_json, write_json
from .profiles import PROFILES, chapter_parameters
from ..models import device_name
from .results import CHECKPOINT_ENV, RESULTS_ENV
from .sources import REPO_ROOT, source_hash

#: parameters that size a run (texts, examples, steps); ``cap`` bounds each of them (``None``, meaning
#: "the whole corpus", becomes ``cap`` too)
SIZE_PARAMETERS = ("sample_size", "task_size", "train_steps", "finetune_steps", "synthetic_sequences",
                   "planted_sequences", "num_sequences", "other_sample_size", "width_steps")
#: library versions recorded in the provenance (distribution names; a missing one is recorded as null)
LIBRARIES = ("numpy", "scipy", "torch", "transformers", "tokenizers", "datasets", "scikit-learn", "papermill",
             "myst-nb")
#: provenance fields that must match for a chapter to be skipped
SKIP_KEYS = ("profile", "requested_parameters", "package_version", "source_hash")
#: provenance fields that must match for the checkpoints of an earlier attempt to be reused
RESUME_KEYS = ("profile", "requested_parameters", "package_version", "source_hash")
#: where the independent training runs execute: injected when declared, recorded as ``execution``, and kept
#: out of the skip key (the results do not depend on it; see the module docstring)
EXECUTION_PARAMETERS = ("executor", "workers", "scheduler")
EXECUTORS = ("serial", "dask")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class RunError(ValueError):
    """A bad request to :func:`run_chapters` (nothing has run yet); ``argument`` names the CLI option."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass
class RunSummary:
    """What :func:`run_chapters` did: chapters ran, skipped (results current) and failed, with wall times."""

    out: Path
    profile: str
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no chapter failed."""
        return not self.failed

    def __str__(self) -> str:
        total = sum(self.seconds.values())
        line = (f"{len(self.ran)} ran, {len(self.skipped)} skipped, {len(self.failed)} failed "
                f"in {total:.1f} s; results in {self.out}")
        if self.failed:
            line += f" (failed: {', '.join(self.failed)}; see <chapter>/failed.json)"
        return line


# --------------------------------------------------------------------------- chapters and parameters

def default_source_dir() -> Path:
    """The repository's ``notebooks/`` folder, found from the package location."""
    return REPO_ROOT / "notebooks"


def _is_notebook(path: Path) -> bool:
    head = path.read_text(encoding="utf-8", errors="replace")[:2000]
    return head.startswith("---") and "jupytext" in head.split("\n---", 1)[0]


def available_chapters(source_dir: Path) -> list[str]:
    """The chapter names in ``source_dir``: every ``*.md`` that is a jupytext (MyST) notebook."""
    return sorted(p.stem for p in Path(source_dir).glob("*.md") if _is_notebook(p))


def _read_notebook(source: Path) -> Any:
    import jupytext

    return jupytext.read(source)


def declared_parameters(nb: Any) -> dict[str, Any]:
    """The names and default values assigned in the notebook's cell tagged ``parameters``.

    A value that is not a literal (e.g. ``2 * n``) is recorded as ``...`` (Ellipsis): declared, default unknown.
    """
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            declared: dict[str, Any] = {}
            for node in ast.parse(source).body:
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
                for target in targets:
                    if isinstance(target, ast.Name):
                        try:
                            declared[target.id] = ast.literal_eval(node.value)
                        except (ValueError, SyntaxError, TypeError):
                            declared[target.id] = ...
            return declared
    return {}


def requested_parameters(chapter: str, profile: str, declared: dict[str, Any], device: str | None = None,
                         cap: int | None = None, model: str | None = None) -> dict[str, Any]:
    """The parameters injected into ``chapter``: the profile's, ``device`` and ``model`` (as ``model_name``)
    when the chapter declares them, and every size parameter (:data:`SIZE_PARAMETERS`) bounded by ``cap``
    (a ``None`` or unknown size becomes ``cap``). A chapter absent from the profile gets
    ``{"profile": profile}`` only.
    """
    if chapter in PROFILES[profile]:
        params = chapter_parameters(chapter, profile)
    else:
        params = {"profile": profile}
    if device is not None and "device" in declared:
        params["device"] = device
    if model is not None and "model_name" in declared:
        params["model_name"] = model
    if cap is not None:
        for name in SIZE_PARAMETERS:
            if name in params or name in declared:
                value = params[name] if name in params else declared[name]
                if value is None or value is ... or not isinstance(value, int) or isinstance(value, bool):
                    params[name] = cap
                else:
                    params[name] = min(value, cap)
    return params


def execution_parameters(declared: dict[str, Any], executor: str | None = None, workers: int | None = None,
                         scheduler: str | None = None) -> dict[str, Any]:
    """The execution options (:data:`EXECUTION_PARAMETERS`) given (not ``None``) that the chapter declares:
    injected next to :func:`requested_parameters`, recorded as the provenance's ``execution``, never part of
    the skip key."""
    given = {"executor": executor, "workers": workers, "scheduler": scheduler}
    return {name: value for name, value in given.items() if value is not None and name in declared}


def _check_execution(executor: Any, workers: Any, scheduler: Any) -> None:
    if executor is not None and executor not in EXECUTORS:
        raise RunError("--executor", f"unknown executor {executor!r}: choose serial or dask")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise RunError("--workers", f"must be an integer >= 1, got {workers!r}; pass e.g. --workers 2")
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise RunError("--scheduler", f"must be a Dask scheduler address such as tcp://127.0.0.1:8786, "
                                      f"got {scheduler!r}")
    for name, value in (("--workers", workers), ("--scheduler", scheduler)):
        if value is not None and executor != "dask":
            raise RunError(name, "is used only by the Dask executor: add --executor dask")


# --------------------------------------------------------------------------- provenance

def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the repository holding the package; ``(None, None)`` outside a git checkout."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git("status", "--porcelain")
    return commit, (bool(status) if status is not None else None)


def library_versions() -> dict[str, str | None]:
    """Python and the :data:`LIBRARIES` versions (``None`` when not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------- results of an executed notebook

def glued_values(nb: Any) -> dict[str, Any]:
    """The values glued (``myst_nb.glue``) in an executed notebook, read back from their text form."""
    values: dict[str, Any] = {}
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            meta = output.get("metadata", {}).get("scrapbook")
            if not meta:
                continue
            text = output.get("data", {}).get(meta.get("mime_prefix", "") + "text/plain")
            if text is None:
                continue
            text = "".join(text) if isinstance(text, list) else text
            try:
                values[meta["name"]] = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                values[meta["name"]] = text.strip("'\"")
    return values


def _error_record(exc: BaseException) -> dict[str, Any]:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        lines = _ANSI.sub("", "\n".join(exc.traceback)).splitlines()
        return {"error": exc.ename, "message": str(exc.evalue), "cell_index": exc.cell_index,
                "traceback": lines[-20:]}
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    return {"error": type(exc).__name__, "message": str(exc), "traceback": lines[-20:]}


# --------------------------------------------------------------------------- the runner

@dataclass
class _Plan:
    chapter: str
    source: Path
    notebook: Any  # the chapter as jupytext read it (read once: parameters, then execution)
    folder: Path
    parameters: dict[str, Any]
    declared: dict[str, Any]
    identity: dict[str, Any]
    execution: dict[str, Any] = field(default_factory=dict)  # injected too, not part of the identity


def run_chapters(profile: str, chapters: list[str] | None = None, device: str | None = None,
                 out: Path | None = None, cap: int | None = None, force: bool = False,
                 source_dir: Path | None = None, log: Callable[[str], Any] = print,
                 model: str | None = None, executor: str | None = None, workers: int | None = None,
                 scheduler: str | None = None) -> RunSummary:
    """Execute ``chapters`` (default: every chapter in ``source_dir``) under ``profile`` into ``out``
    (default ``runs/<profile>-<YYYY-MM-DD>/``) and write each one's ``results.json`` with provenance.

    ``device`` is injected into chapters that declare a ``device`` parameter, ``model`` into those that
    declare ``model_name`` (e.g. the packaged MiniLM for a capped paper run offline); ``cap`` bounds every size
    parameter (:data:`SIZE_PARAMETERS`). ``executor``, ``workers`` and ``scheduler`` (where independent
    training runs execute: ``serial`` or ``dask``) go to the chapters that declare them, are recorded as the
    provenance's ``execution`` and are not part of the skip key (:data:`EXECUTION_PARAMETERS`).
    Chapters whose results are current are skipped unless ``force``;
    a failing chapter is recorded in its ``failed.json`` and the others still run. Bad requests raise
    :class:`RunError` before anything runs. Chapter: *How this book is built* (README), *Reproduction ledger*.
    """
    if profile not in PROFILES:
        raise RunError("--profile", f"unknown profile {profile!r}: choose one of {', '.join(sorted(PROFILES))}")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise RunError("--cap", f"must be an integer >= 1, got {cap!r}; pass e.g. --cap 2000")
    _check_execution(executor, workers, scheduler)
    source_dir = Path(source_dir) if source_dir is not None else default_source_dir()
    if not source_dir.is_dir():
        raise RunError("--source-dir", f"chapter folder {str(source_dir)!r} does not exist: pass --source-dir DIR "
                                       f"(the folder holding the chapters' .md notebooks)")
    valid = available_chapters(source_dir)
    if not valid:
        raise RunError("--source-dir", f"{str(source_dir)!r} holds no MyST notebook (*.md with a jupytext "
                                       f"header): pass --source-dir DIR")
    if chapters is None:
        chapters = valid
    chapters = [c[:-3] if c.endswith(".md") else c for c in chapters]
    unknown = [c for c in chapters if c not in valid]
    if unknown:
        raise RunError("--chapters", f"unknown chapter(s) {', '.join(unknown)}: choose from {', '.join(valid)}")
    chapters = list(dict.fromkeys(chapters))
    where = device_name(device or "auto")
    if where.startswith("unavailable"):
        fix = ("run it on a machine with a CUDA GPU, or pass --device cpu --cap N (e.g. --cap 2000) for a "
               "capped run on CPU" if profile == "paper" and cap is None else "pass --device auto or --device cpu")
        raise RunError("--device", f"{device!r} is {where}: {fix}")
    if profile == "paper" and where == "cpu" and cap is None:
        raise RunError("--profile paper", "the paper profile is sized for a GPU: pass --cap N (e.g. --cap 2000) "
                                          "to run a capped version on CPU, or --device cuda")
    out = Path(out) if out is not None else Path.cwd() / "runs" / f"{profile}-{date.today().isoformat()}"

    import papermill  # noqa: F401 - fail early (before any chapter) when papermill is missing
    from .. import __version__

    commit, dirty = git_state()
    plans = []
    for chapter in chapters:
        source = source_dir / f"{chapter}.md"
        nb = _read_notebook(source)
        try:
            declared = declared_parameters(nb)
        except SyntaxError as exc:
            raise RunError("--chapters", f"{chapter}: its parameters cell is not valid Python ({exc}); fix "
                                         f"{source} or leave the chapter out") from exc
        params = _jsonable(requested_parameters(chapter, profile, declared, device, cap, model))
        identity = {"profile": profile, "requested_parameters": params, "package_version": __version__,
                    "commit": commit, "source_hash": source_hash(source)}
        execution = _jsonable(execution_parameters(declared, executor, workers, scheduler))
        plans.append(_Plan(chapter, source, nb, out / chapter, params, declared, identity, execution))

    summary = RunSummary(out=out, profile=profile)
    common = {"package_version": __version__, "commit": commit, "dirty": dirty, "device_name": where, "cap": cap,
              "libraries": library_versions(), "hostname": socket.gethostname(), "platform": platform.platform()}
    log(f"posgeom run: profile {profile}, {len(plans)} chapter(s), device {where}"
        + (f", cap {cap}" if cap is not None else "")
        + (f", executor {executor}" if executor is not None else "")
        + (f" ({workers} workers)" if workers is not None else "")
        + (f" at {scheduler}" if scheduler is not None else "") + f" -> {out}")
    for k, plan in enumerate(plans, 1):
        prefix = f"[{k}/{len(plans)}] {plan.chapter}:"
        previous = read_json(plan.folder / "results.json")
        if not force and previous is not None and all(
                previous.get("provenance", {}).get(key) == plan.identity[key] for key in SKIP_KEYS):
            summary.skipped.append(plan.chapter)
            summary.seconds[plan.chapter] = 0.0
            log(f"{prefix} skipped (current)")
            continue
        ok, seconds, message = _run_one(plan, force, common)
        summary.seconds[plan.chapter] = seconds
        if ok:
            summary.ran.append(plan.chapter)
            log(f"{prefix} ran in {seconds:.1f} s{message}")
        else:
            summary.failed.append(plan.chapter)
            log(f"{prefix} FAILED after {seconds:.1f} s: {message} (see {plan.folder / 'failed.json'})")
    log(f"posgeom run: {summary}")
    return summary


def stale_results(results_dir: Path, source_dir: Path | None = None) -> dict[str, str]:
    """``{chapter: why}`` for every ``<results_dir>/<chapter>/results.json`` that no longer matches the code it
    came from: its recorded source hash (:func:`~posgeom_utils.repro.sources.source_hash`: the chapter, the
    science modules and the pinned environment) differs from the current one, or its chapter is gone.
    An empty dict means every committed result is fresh. Chapter: *Reproduction ledger*.
    """
    source_dir = Path(source_dir) if source_dir is not None else default_source_dir()
    stale: dict[str, str] = {}
    for path in sorted(Path(results_dir).glob("*/results.json")):
        chapter = path.parent.name
        source = source_dir / f"{chapter}.md"
        recorded = (read_json(path) or {}).get("provenance", {}).get("source_hash")
        if not source.is_file():
            stale[chapter] = f"no chapter {source} any more"
            continue
        current = source_hash(source)
        if recorded != current:
            stale[chapter] = (f"source hash {str(recorded)[:12]} != current {current[:12]}: "
                              f"rerun `posgeom run --chapters {chapter} --out {Path(results_dir)}`")
    return stale


def _prepare_checkpoints(plan: _Plan, force: bool) -> Path:
    """The chapter's checkpoint folder: kept when it belongs to an earlier attempt of this very run, else emptied."""
    folder = plan.folder / "checkpoints"
    marker = folder / "run.json"
    owner = read_json(marker)
    current = {key: plan.identity[key] for key in RESUME_KEYS}
    if folder.exists() and (force or owner is None or {k: owner.get(k) for k in RESUME_KEYS} != current):
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        write_json(marker, current)
    return folder


def _run_one(plan: _Plan, force: bool, common: dict[str, Any]) -> tuple[bool, float, str]:
    """Execute one chapter; returns (succeeded, wall seconds, a note or the error in one line)."""
    import nbformat
    import papermill

    plan.folder.mkdir(parents=True, exist_ok=True)
    partial = plan.folder / "results.partial.json"
    failed = plan.folder / "failed.json"
    notebook = plan.folder / f"{plan.chapter}.ipynb"
    partial.unlink(missing_ok=True)
    started, t0 = _now(), time.perf_counter()
    saved = {name: os.environ.get(name) for name in (RESULTS_ENV, CHECKPOINT_ENV)}
    note = ""
    try:
        checkpoints = _prepare_checkpoints(plan, force)
        os.environ[RESULTS_ENV] = str(partial.resolve())
        os.environ[CHECKPOINT_ENV] = str(checkpoints.resolve())
        try:
            papermill.execute_notebook(
                plan.notebook, str(notebook), parameters={**plan.parameters, **plan.execution},
                kernel_name="python3",
                cwd=str(plan.source.parent), progress_bar=False,
            )
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        payload = read_json(partial)
        if payload is None:
            values = glued_values(nbformat.read(notebook, as_version=4))
            if not values:
                raise RuntimeError(
                    "the chapter wrote no results: its last cell must call "
                    "posgeom_utils.repro.results.save_results() (and it glued no values to fall back on)")
            declared = {k: v for k, v in plan.declared.items() if v is not ...}
            payload = {"parameters": _jsonable({**declared, **plan.parameters, **plan.execution}),
                       "results": values}
            note = " (no save_results: results read from the glued outputs)"
        finished, seconds = _now(), time.perf_counter() - t0
        provenance = {**plan.identity, **common, "requested_parameters": plan.parameters,
                      "execution": plan.execution,
                      "results_source": "glue outputs" if note else "save_results",
                      "started": started, "finished": finished, "wall_seconds": round(seconds, 3)}
        write_json(plan.folder / "results.json",
                    {"chapter": plan.chapter, "parameters": payload.get("parameters", {}),
                     "results": payload.get("results", {}), "provenance": provenance})
        partial.unlink(missing_ok=True)
        failed.unlink(missing_ok=True)
        return True, seconds, note
    except Exception as exc:  # noqa: BLE001 - any failure of one chapter is recorded, the others still run
        seconds = time.perf_counter() - t0
        record = {"chapter": plan.chapter, **_error_record(exc), "started": started, "finished": _now(),
                  "wall_seconds": round(seconds, 3), "requested_parameters": plan.parameters,
                  "execution": plan.execution,
                  "notebook": str(notebook)}
        try:
            write_json(failed, record)
        except OSError as write_error:  # pragma: no cover - the out folder itself is unwritable
            print(f"posgeom run: cannot write {failed}: {write_error}", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return False, seconds, f"{record['error']}: {' '.join(record['message'].split())[:200]}"
