"""``posgeom run``: re-execute chapters through papermill under a profile and keep their
results with provenance.

Chapter: *Reproduction ledger*. Each chapter gets a folder ``<out>/<chapter>/`` with the
executed notebook, ``results.json`` (``chapter``, ``parameters``, ``results``: every
glued number, and ``provenance``), on failure ``failed.json`` (removed by a later
success), and ``checkpoints/`` (resumable training runs, kept between attempts of the
same run). A chapter whose ``results.json`` has the same profile, requested parameters,
package version and code hash (:func:`~posgeom_utils.repro.sources.code_hash`) is
skipped; the git commit is recorded, not compared. Where the independent training runs
execute (``executor``, ``workers``, ``scheduler``) reaches the chapters as
``POSGEOM_EXECUTOR`` / ``POSGEOM_WORKERS`` / ``POSGEOM_SCHEDULER`` and is recorded as
``execution``; it is not part of the skip key, since every executor gives the same
results."""

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
import time
import traceback
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Callable
from unittest.mock import patch

from .. import checks
from ..cache import read_json, write_json
from ..models import device_name
from .profiles import PROFILES, chapter_parameters
from .results import CHECKPOINT_ENV, RESULTS_ENV
from .reference import RESULTS_ROOT
from .sources import REPO_ROOT, code_hash

#: parameters that size a run; ``cap`` bounds each of them (``None``, "the whole corpus", becomes ``cap``)
SIZE_PARAMETERS = tuple(
    "sample_size task_size train_steps finetune_steps synthetic_sequences "
    "planted_sequences "
    "num_sequences other_sample_size width_steps".split()
)
#: library versions recorded in the provenance (a missing one is recorded as null)
LIBRARIES = tuple(
    "numpy scipy torch transformers tokenizers datasets scikit-learn papermill "
    "myst-nb".split()
)
#: provenance fields that must match to skip a chapter, or to resume from its checkpoints
SKIP_KEYS = ("profile", "requested_parameters", "package_version", "code_hash")
#: where independent training runs execute: environment variables read by ``scale.sweeps.run_sweep``
EXECUTION_ENV = {
    name: f"POSGEOM_{name.upper()}" for name in ("executor", "workers", "scheduler")
}
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class RunError(ValueError):
    """A bad request to :func:`run_chapters` (nothing has run yet); ``argument`` names
    the CLI option. Chapter: *Reproduction ledger*."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass
class RunSummary:
    """What :func:`run_chapters` did: chapters ran, skipped (results current) and
    failed, with wall times. Chapter: *Reproduction ledger*."""

    out: Path
    profile: str
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no chapter failed. Chapter: *Reproduction ledger*."""
        return not self.failed

    def __str__(self) -> str:
        failed = (
            f" (failed: {', '.join(self.failed)}; see <chapter>/failed.json)"
            if self.failed
            else ""
        )
        return (
            f"{len(self.ran)} ran, {len(self.skipped)} skipped, {len(self.failed)} "
            "failed in "
            f"{sum(self.seconds.values()):.1f} s; results in {self.out}{failed}"
        )


def default_source_dir() -> Path:
    """The checkout's ``notebooks/`` folder. Chapter: *Reproduction ledger*."""
    return REPO_ROOT / "notebooks"


def available_chapters(source_dir: Path) -> list[str]:
    """The chapters in ``source_dir``: every ``*.md`` with a jupytext header.
    Chapter: *Reproduction ledger*."""

    def is_notebook(path: Path) -> bool:
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        return head.startswith("---") and "jupytext" in head.split("\n---", 1)[0]

    return sorted(p.stem for p in Path(source_dir).glob("*.md") if is_notebook(p))


def declared_parameters(nb: Any) -> dict[str, Any]:
    """The names and literal defaults of the notebook's ``parameters`` cell (``...``
    where not a literal). Chapter: *Reproduction ledger*."""
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.get("metadata", {}).get(
            "tags", []
        ):
            source = "\n".join(
                l
                for l in cell.source.splitlines()
                if not l.lstrip().startswith(("%", "!"))
            )
            declared: dict[str, Any] = {}
            for node in ast.parse(source).body:
                for target in node.targets if isinstance(node, ast.Assign) else []:
                    if isinstance(target, ast.Name):
                        try:
                            declared[target.id] = ast.literal_eval(node.value)
                        except (ValueError, SyntaxError, TypeError):
                            declared[target.id] = ...
            return declared
    return {}


def requested_parameters(
    chapter: str,
    profile: str,
    declared: dict[str, Any],
    device: str | None = None,
    cap: int | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """The parameters injected into ``chapter``: the profile's, ``device`` and ``model``
    (as ``model_name``) where declared, and every size parameter bounded by ``cap``.
    Chapter: *Reproduction ledger*."""
    params = (
        chapter_parameters(chapter, profile)
        if chapter in PROFILES[profile]
        else {"profile": profile}
    )
    for name, value in (("device", device), ("model_name", model)):
        if value is not None and name in declared:
            params[name] = value
    for name in SIZE_PARAMETERS if cap is not None else ():
        if name in params or name in declared:
            value = params.get(name, declared.get(name))
            ok = isinstance(value, int) and not isinstance(value, bool)
            params[name] = min(value, cap) if ok else cap
    return params


def _option(option: str, check: Callable[..., Any], value: Any, *args: Any) -> None:
    """Check a ``posgeom run`` option that was given; a bad value is a :class:`RunError`
    naming it."""
    try:
        if value is not None:
            check(value, option, *args)
    except ValueError as exc:
        raise RunError(option, str(exc)) from None


def _check_request(
    profile: str, cap: Any, executor: Any, workers: Any, scheduler: Any
) -> None:
    _option("--profile", checks.choice, profile, sorted(PROFILES))
    _option("--cap", checks.integer, cap, 1, None, "pass e.g. --cap 2000")
    _option("--executor", checks.choice, executor, ("serial", "dask"))
    _option("--workers", checks.integer, workers, 1, None, "pass e.g. --workers 2")
    if scheduler is not None and not (isinstance(scheduler, str) and scheduler.strip()):
        raise RunError(
            "--scheduler",
            "must be a Dask scheduler address such as tcp://127.0.0.1:8786, got "
            f"{scheduler!r}",
        )
    for name, value in (("--workers", workers), ("--scheduler", scheduler)):
        if value is not None and executor != "dask":
            raise RunError(
                name, "is used only by the Dask executor: add --executor dask"
            )


def _check_out(out: Path) -> None:
    """``out`` is a folder, or can be made as one (:func:`.cli.place_problem`)."""
    from .cli import place_problem

    if problem := place_problem(out, folder=True):
        raise RunError("--out", f"{out}: {problem}")


def _chapters(
    source_dir: Path | None, chapters: list[str] | None
) -> tuple[Path, list[str]]:
    source_dir = Path(source_dir) if source_dir is not None else default_source_dir()
    if not source_dir.is_dir():
        raise RunError(
            "--source-dir",
            f"chapter folder {str(source_dir)!r} does not exist: pass --source-dir "
            "DIR (the folder holding the chapters' .md notebooks)",
        )
    valid = available_chapters(source_dir)
    if not valid:
        raise RunError(
            "--source-dir",
            f"{str(source_dir)!r} holds no MyST notebook (*.md with a jupytext "
            "header): pass --source-dir DIR",
        )
    chapters = [
        c.removesuffix(".md") for c in (valid if chapters is None else chapters)
    ]
    unknown = [c for c in chapters if c not in valid]
    if unknown:
        raise RunError(
            "--chapters",
            f"unknown chapter(s) {', '.join(unknown)}: choose from {', '.join(valid)}",
        )
    return source_dir, list(dict.fromkeys(chapters))


def _device(device: str | None, profile: str, cap: int | None) -> str:
    where = device_name(device or "auto")
    if where.startswith("unavailable"):
        fix = (
            "run it on a machine with a CUDA GPU, or pass --device cpu --cap N (e.g. "
            "--cap 2000) for a "
            "capped run on CPU"
            if profile == "paper" and cap is None
            else "pass --device auto or --device cpu"
        )
        raise RunError("--device", f"{device!r} is {where}: {fix}")
    if profile == "paper" and where == "cpu" and cap is None:
        raise RunError(
            "--profile paper",
            "the paper profile is sized for a GPU: pass --cap N (e.g. --cap 2000) "
            "to run a capped version on CPU, or --device cuda",
        )
    return where


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout holding the package; ``(None, None)`` outside
    git. Chapter: *Reproduction ledger*."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(REPO_ROOT), *args],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # results that runs write into book/results are outputs, not code: they leave the tree clean
    outputs = f":(exclude){RESULTS_ROOT.relative_to(REPO_ROOT)}"
    status = git("status", "--porcelain", "--", ".", outputs) if commit else None
    return commit, (None if status is None else bool(status))


def library_versions() -> dict[str, str | None]:
    """Python and the :data:`LIBRARIES` versions (``None`` when not installed).
    Chapter: *Reproduction ledger*."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


@dataclass
class _Plan:
    chapter: str
    source: Path
    notebook: Any
    folder: Path
    parameters: dict[str, Any]
    identity: dict[str, Any]


def _plan(
    chapter: str, source_dir: Path, out: Path, profile: str, options: dict[str, Any]
) -> _Plan:
    import jupytext

    from .. import __version__

    source = source_dir / f"{chapter}.md"
    nb = jupytext.read(source)
    try:
        declared = declared_parameters(nb)
    except SyntaxError as exc:
        raise RunError(
            "--chapters",
            f"{chapter}: its parameters cell is not valid Python ({exc}); fix "
            f"{source} or leave the chapter out",
        ) from exc
    params = json.loads(
        json.dumps(
            requested_parameters(chapter, profile, declared, **options), default=str
        )
    )
    identity = {
        "profile": profile,
        "requested_parameters": params,
        "package_version": __version__,
        "code_hash": code_hash(source),
    }
    return _Plan(chapter, source, nb, out / chapter, params, identity)


def _common(where: str, cap: int | None, execution: dict[str, Any]) -> dict[str, Any]:
    """The provenance every chapter of one run shares."""
    commit, dirty = git_state()
    return {
        "commit": commit,
        "dirty": dirty,
        "device_name": where,
        "cap": cap,
        "execution": execution,
        "libraries": library_versions(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
    }


def cpu_model() -> str:
    """The processor and its core count: trained numbers can differ in their last digits
    (and, through training, beyond) between processors. Chapter: *Reproduction ledger*."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    names = [
        line.split(":", 1)[1].strip()
        for line in info.splitlines()
        if line.startswith("model name")
    ]
    flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
    simd = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    name = names[0] if names else platform.processor() or platform.machine()
    return f"{name}, {os.cpu_count()} cores, {simd}"


def run_chapters(
    profile: str,
    chapters: list[str] | None = None,
    device: str | None = None,
    out: Path | None = None,
    cap: int | None = None,
    force: bool = False,
    source_dir: Path | None = None,
    log: Callable[[str], Any] = print,
    model: str | None = None,
    executor: str | None = None,
    workers: int | None = None,
    scheduler: str | None = None,
) -> RunSummary:
    """Execute ``chapters`` (default: all in ``source_dir``) under ``profile`` into
    ``out`` (default ``runs/<profile>-<date>/``), writing each one's ``results.json``
    with provenance; chapters whose results are current are skipped unless ``force``,
    and a failing chapter does not stop the others. Bad requests raise :class:`RunError`
    before anything runs. Chapter: *Reproduction ledger*."""
    _check_request(profile, cap, executor, workers, scheduler)
    source_dir, chapters = _chapters(source_dir, chapters)
    where = _device(device, profile, cap)
    default_out = Path.cwd() / "runs" / f"{profile}-{date.today().isoformat()}"
    out = Path(out) if out is not None else default_out
    _check_out(out)
    import papermill  # noqa: F401 - fail before any chapter when papermill is missing

    options = {"device": device, "cap": cap, "model": model}
    plans = [_plan(chapter, source_dir, out, profile, options) for chapter in chapters]
    execution = dict(zip(EXECUTION_ENV, (executor, workers, scheduler)))
    execution = {k: v for k, v in execution.items() if v is not None}
    common = _common(where, cap, execution)
    summary = RunSummary(out=out, profile=profile)
    settings = (("cap", cap), *execution.items())
    extra = "".join(f", {k} {v}" for k, v in settings if v is not None)
    log(
        f"posgeom run: profile {profile}, {len(plans)} chapter(s), device "
        f"{where}{extra}"
        f" -> {out}"
    )
    for k, plan in enumerate(plans, 1):
        prefix = f"[{k}/{len(plans)}] {plan.chapter}:"
        previous = (read_json(plan.folder / "results.json") or {}).get("provenance", {})
        if not force and all(previous.get(x) == plan.identity[x] for x in SKIP_KEYS):
            summary.skipped.append(plan.chapter)
            summary.seconds[plan.chapter] = 0.0
            log(f"{prefix} skipped (current)")
        else:
            log(f"{prefix} {_run_logged(plan, force, common, summary, log)}")
    log(f"posgeom run: {summary}")
    return summary


def _run_logged(
    plan: _Plan, force: bool, common: dict[str, Any], summary: RunSummary, log: Callable
) -> str:
    """Run one chapter into ``summary``; what the log says about it."""
    try:
        ok, seconds, message = _run_one(plan, force, common)
    except KeyboardInterrupt:
        where = plan.folder / "interrupted.json"
        log(f"{plan.chapter}: interrupted ({where}); rerun the same command to resume")
        raise
    summary.seconds[plan.chapter] = seconds
    (summary.ran if ok else summary.failed).append(plan.chapter)
    if ok:
        return f"ran in {seconds:.1f} s"
    return f"FAILED after {seconds:.1f} s: {message} (see {plan.folder}/failed.json)"


def stale_results(
    results_dir: Path, source_dir: Path | None = None, chapter: str = "*"
) -> dict[str, str]:
    """``{chapter: why}`` for every ``<results_dir>/<chapter>/results.json`` (``chapter``:
    one, or ``"*"`` for all) whose code hash differs from the current chapter's, or whose
    chapter is gone; empty when all are fresh. Chapter: *Reproduction ledger*."""
    source_dir = Path(source_dir) if source_dir is not None else default_source_dir()
    stale: dict[str, str] = {}
    for path in sorted(Path(results_dir).glob(f"{chapter}/results.json")):
        chapter, source = path.parent.name, source_dir / f"{path.parent.name}.md"
        recorded = (read_json(path) or {}).get("provenance", {}).get("code_hash")
        if not source.is_file():
            stale[chapter] = f"no chapter {source} any more"
        elif recorded != (current := code_hash(source)):
            stale[chapter] = (
                f"code hash {str(recorded)[:12]} != current {current[:12]}: rerun "
                f"`posgeom run --chapters {chapter} --out {Path(results_dir)}`"
            )
    return stale


def _prepare_checkpoints(plan: _Plan, force: bool) -> Path:
    """The chapter's checkpoint folder: kept when it belongs to an earlier attempt of
    this very run."""
    folder, current = (
        plan.folder / "checkpoints",
        {k: plan.identity[k] for k in SKIP_KEYS},
    )
    owner = read_json(folder / "run.json")
    if folder.exists() and (
        force or owner is None or {k: owner.get(k) for k in SKIP_KEYS} != current
    ):
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "run.json").exists():
        write_json(folder / "run.json", current)
    return folder


def _error_record(exc: BaseException) -> dict[str, Any]:
    from papermill.exceptions import PapermillExecutionError

    if isinstance(exc, PapermillExecutionError):
        return {
            "error": exc.ename,
            "message": str(exc.evalue),
            "cell_index": exc.cell_index,
            "traceback": _ANSI.sub("", "\n".join(exc.traceback)).splitlines()[-20:],
        }
    lines = "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__)
    ).splitlines()
    return {"error": type(exc).__name__, "message": str(exc), "traceback": lines[-20:]}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _execute(
    plan: _Plan, force: bool, common: dict[str, Any], partial: Path
) -> dict[str, Any]:
    """Execute the chapter with its environment; return what it saved (its parameters
    and results)."""
    import papermill

    env = {
        RESULTS_ENV: str(partial.resolve()),
        CHECKPOINT_ENV: str(_prepare_checkpoints(plan, force).resolve()),
        **{EXECUTION_ENV[k]: str(v) for k, v in common["execution"].items()},
    }
    with patch.dict(os.environ, env):
        papermill.execute_notebook(
            plan.notebook,
            str(plan.folder / f"{plan.chapter}.ipynb"),
            parameters=plan.parameters,
            kernel_name="python3",
            cwd=str(plan.source.parent),
            progress_bar=False,
        )
    payload = read_json(partial)
    if payload is None:
        raise RuntimeError(
            "the chapter saved no results: call "
            "posgeom_utils.repro.results.show_parameters"
            "(chapter, globals()) in the cell after its parameters cell"
        )
    return payload


def _attempt(
    plan: _Plan, common: dict[str, Any], started: str, t0: float
) -> dict[str, Any]:
    """What a failed or interrupted record says about the attempt."""
    return {
        "chapter": plan.chapter,
        "started": started,
        "wall_seconds": round(time.perf_counter() - t0, 3),
        "requested_parameters": plan.parameters,
        "execution": common["execution"],
        "notebook": str(plan.folder / f"{plan.chapter}.ipynb"),
    }


def _run_one(
    plan: _Plan, force: bool, common: dict[str, Any]
) -> tuple[bool, float, str]:
    """Execute one chapter and write its ``results.json`` (or ``failed.json``); returns
    (succeeded, wall seconds, the error in one line)."""
    plan.folder.mkdir(parents=True, exist_ok=True)
    partial, failed = plan.folder / "results.partial.json", plan.folder / "failed.json"
    partial.unlink(missing_ok=True)
    started, t0 = _now(), time.perf_counter()
    try:
        payload = _execute(plan, force, common, partial)
        seconds = time.perf_counter() - t0
        provenance = {
            **plan.identity,
            **common,
            "started": started,
            "finished": _now(),
            "wall_seconds": round(seconds, 3),
        }
        write_json(
            plan.folder / "results.json",
            {
                "chapter": plan.chapter,
                "provenance": provenance,
                "parameters": payload.get("parameters", {}),
                "results": payload.get("results", {}),
            },
        )
        failed.unlink(missing_ok=True)
        (plan.folder / "interrupted.json").unlink(missing_ok=True)
        return True, seconds, ""
    except KeyboardInterrupt:  # recorded; the checkpoints stay for the rerun
        record = _attempt(plan, common, started, t0)
        record["resume"] = "rerun the same command: training resumes from checkpoints/"
        write_json(plan.folder / "interrupted.json", record)
        raise
    except Exception as exc:  # noqa: BLE001 - recorded; the other chapters still run
        record = {**_attempt(plan, common, started, t0), **_error_record(exc)}
        write_json(failed, record)
        message = " ".join(record["message"].split())[:200]
        return False, record["wall_seconds"], f"{record['error']}: {message}"
    finally:
        partial.unlink(missing_ok=True)
