"""``posgeom run``: chapters re-executed by papermill under a profile, each into
``<out>/<chapter>/`` (the notebook, ``results.json`` with provenance, ``failed.json``,
resumable ``checkpoints/``; a resumed run's wall time sums its attempts).
Chapter: *Reproduction ledger*."""

from __future__ import annotations

import contextlib
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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from types import SimpleNamespace as _Plan
from typing import Any
from unittest.mock import patch

from .. import __version__, checks
from ..cache import read_json, write_json
from ..models import device_name
from ..scale.sweeps import ENVIRONMENT, EXECUTORS
from .paths import place_problem
from .profiles import PROFILES, SIZE_PARAMETERS
from .reference import RESULTS_ROOT, read_run, stale_results  # noqa: F401 - API
from .results import CHECKPOINT_ENV, RESULTS_ENV
from .sources import REPO_ROOT, code_hash, declared_parameters

#: library versions recorded in the provenance (a missing one is recorded as null)
LIBRARIES = tuple(
    "numpy scipy torch transformers tokenizers datasets scikit-learn "  # noqa: SIM905
    "papermill myst-nb".split()
)
#: provenance that must match to skip a chapter, or to resume from its checkpoints
SKIP_KEYS = ("profile", "requested_parameters", "package_version", "code_hash")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class RunError(ValueError):
    """A bad request to :func:`run_chapters`; ``argument`` names the CLI option.
    Chapter: *Reproduction ledger*."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass
class RunSummary:
    """The chapters :func:`run_chapters` ran, skipped and failed, with this call's wall
    times. Chapter: *Reproduction ledger*."""

    out: Path
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no chapter failed. Chapter: *Reproduction ledger*."""
        return not self.failed

    def __str__(self) -> str:
        counts = f"{len(self.ran)} ran, {len(self.skipped)} skipped, "
        counts += f"{len(self.failed)} failed in {sum(self.seconds.values()):.1f} s"
        why = f" (failed: {', '.join(self.failed)}; see <chapter>/failed.json)"
        return f"{counts}; results in {self.out}{why if self.failed else ''}"


def requested_parameters(
    chapter: str,
    profile: str,
    declared: dict[str, Any],
    device: str | None = None,
    cap: int | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """The parameters injected into ``chapter``: the profile's, ``device`` and ``model``
    (as ``model_name``) where declared, each size parameter bounded by ``cap``.
    Chapter: *Reproduction ledger*."""
    params = {"profile": profile, **PROFILES[profile].get(chapter, {})}
    for name, value in (("device", device), ("model_name", model)):
        if value is not None and name in declared:
            params[name] = value
    for name in SIZE_PARAMETERS if cap is not None else ():
        if name in params or name in declared:
            value = params.get(name, declared.get(name))
            ok = isinstance(value, int) and not isinstance(value, bool)
            params[name] = min(value, cap) if ok else cap
    return params


def _check_request(profile, cap, executor, workers, scheduler) -> None:
    """The Python API's own check of what argparse checks on the command line: a
    :class:`RunError` naming the first bad option."""
    option = "--profile"
    try:
        checks.choice(profile, option, sorted(PROFILES))
        option = "--cap"
        checks.integer(cap, option, fix="pass e.g. --cap 2000", optional=True)
        option = "--executor"
        if executor is not None:
            checks.choice(executor, option, EXECUTORS)
        option = "--workers"
        checks.integer(workers, option, fix="pass e.g. --workers 2", optional=True)
        option, address = (
            "--scheduler",
            isinstance(scheduler, str) and scheduler.strip(),
        )
        example = "a Dask scheduler address such as tcp://127.0.0.1:8786"
        checks.require(scheduler is None or address, option, example, scheduler)
    except ValueError as exc:
        raise RunError(option, str(exc)) from None
    for option, value in (("--workers", workers), ("--scheduler", scheduler)):
        if value is not None and executor != "dask":
            dask = "is used only by the Dask executor: add --executor dask"
            raise RunError(option, dask)


def _chapters(source_dir: Path, chapters: list[str] | None) -> list[str]:
    """The chapters to run (default: all MyST notebooks in ``source_dir``)."""
    fix = "pass --source-dir DIR"
    if not source_dir.is_dir():
        what = "(the folder holding the chapters' .md notebooks)"
        message = f"chapter folder {str(source_dir)!r} does not exist: {fix} {what}"
        raise RunError("--source-dir", message)

    def is_notebook(path: Path) -> bool:
        head = path.read_text(encoding="utf-8", errors="replace")[:2000]
        return head.startswith("---") and "jupytext" in head.split("\n---", 1)[0]

    valid = sorted(p.stem for p in source_dir.glob("*.md") if is_notebook(p))
    if not valid:
        what = "holds no MyST notebook (*.md with a jupytext header)"
        raise RunError("--source-dir", f"{str(source_dir)!r} {what}: {fix}")
    chapters = valid if chapters is None else chapters
    chapters = [c.removesuffix(".md") for c in chapters]
    if unknown := ", ".join(c for c in chapters if c not in valid):
        message = f"unknown chapter(s) {unknown}: choose from {', '.join(valid)}"
        raise RunError("--chapters", message)
    return list(dict.fromkeys(chapters))


def _device(device: str | None, profile: str, cap: int | None) -> str:
    """Where the chapters run, refusing an uncapped paper run on the CPU."""
    where, cap_it = device_name(device or "auto"), "--cap N (e.g. --cap 2000)"
    uncapped_paper = profile == "paper" and cap is None
    if where.startswith("unavailable"):
        fix = "pass --device auto or --device cpu"
        if uncapped_paper:
            fix = f"run it on a machine with a CUDA GPU, or pass --device cpu {cap_it} "
            fix += "for a capped run on CPU"
        raise RunError("--device", f"{device!r} is {where}: {fix}")
    if uncapped_paper and where == "cpu":
        fix = f"pass {cap_it} to run a capped version on CPU, or --device cuda"
        message = f"the paper profile is sized for a GPU: {fix}"
        raise RunError("--profile paper", message)
    return where


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the package's checkout, ``(None, None)`` outside git; results
    under ``book/results`` leave the tree clean. Chapter: *Reproduction ledger*."""

    def git(*args: str) -> str | None:
        command = ["git", "-C", str(REPO_ROOT), *args]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=30, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    outputs = f":(exclude){RESULTS_ROOT.relative_to(REPO_ROOT)}"
    status = git("status", "--porcelain", "--", ".", outputs) if commit else None
    return commit, (None if status is None else bool(status))


def library_versions(*extra: str) -> dict[str, str | None]:
    """Python's version and those of :data:`LIBRARIES` and ``extra`` (``None``: absent).
    Chapter: *Reproduction ledger*."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in (*LIBRARIES, *extra):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _machine(where: str, cap: int | None, execution: dict) -> dict[str, Any]:
    """The provenance every chapter of one run shares: code state and machine
    (processor, cores and SIMD too: trained numbers can differ between processors)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = (line.split(":", 1)[1].strip() for line in lines if "model name" in line)
    flags = next((line for line in lines if line.startswith("flags")), "")
    simd = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    cpu = next(names, None) or platform.processor() or platform.machine()
    commit, dirty = git_state()
    common = {"commit": commit, "dirty": dirty, "device_name": where, "cap": cap}
    common |= {"execution": execution, "libraries": library_versions()}
    common["cpu"] = f"{cpu}, {os.cpu_count()} cores, {simd}"
    return common | {"hostname": socket.gethostname(), "platform": platform.platform()}


def _plan(chapter: str, source_dir: Path, out: Path, options: dict) -> _Plan:
    """What to run for ``chapter``: its notebook, parameters and identity."""
    import jupytext

    source = source_dir / f"{chapter}.md"
    nb = jupytext.read(source)
    try:
        declared = declared_parameters(nb)
    except SyntaxError as exc:
        fix = f"fix {source} or leave the chapter out"
        message = f"{chapter}: its parameters cell is not valid Python ({exc}); {fix}"
        raise RunError("--chapters", message) from exc
    params = requested_parameters(chapter, declared=declared, **options)
    params = json.loads(json.dumps(params, default=str))
    identity = (options["profile"], params, __version__, code_hash(source))
    return _Plan(
        chapter=chapter,
        source=source,
        notebook=nb,
        folder=out / chapter,
        parameters=params,
        identity=dict(zip(SKIP_KEYS, identity)),
    )


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
    """Execute ``chapters`` (default: all) under ``profile`` into ``out`` (default
    ``runs/<profile>-<date>/``), skipping current ones unless ``force``; a failing
    chapter does not stop the others, a bad request raises :class:`RunError` before
    anything runs. Chapter: *Reproduction ledger*."""
    _check_request(profile, cap, executor, workers, scheduler)
    source_dir = Path(source_dir or REPO_ROOT / "notebooks")
    chapters = _chapters(source_dir, chapters)
    where = _device(device, profile, cap)
    out = Path(out or Path.cwd() / "runs" / f"{profile}-{date.today().isoformat()}")
    if problem := place_problem(out, folder=True):
        raise RunError("--out", f"{out}: {problem}")
    import papermill  # noqa: F401 - fail before any chapter when papermill is missing

    options = {"profile": profile, "device": device, "cap": cap, "model": model}
    plans = [_plan(chapter, source_dir, out, options) for chapter in chapters]
    execution = dict(zip(ENVIRONMENT, (executor, workers, scheduler)))
    execution = {k: v for k, v in execution.items() if v is not None}
    common = _machine(where, cap, execution)
    extra = "".join(f", {k} {v}" for k, v in {"cap": cap, **execution}.items() if v)
    head = f"posgeom run: profile {profile}, {len(plans)} chapter(s), device {where}"
    log(f"{head}{extra} -> {out}")
    summary = RunSummary(out)
    for k, plan in enumerate(plans, 1):
        previous = (read_run(out, plan.chapter) or {}).get("provenance", {})
        if not force and all(previous.get(x) == plan.identity[x] for x in SKIP_KEYS):
            summary.skipped.append(plan.chapter)
            summary.seconds[plan.chapter] = 0.0
            log(f"[{k}/{len(plans)}] {plan.chapter}: skipped (current)")
            continue
        try:
            ok, seconds, message = _run_one(plan, force, common)
        except KeyboardInterrupt:
            stop = f"{plan.chapter}: interrupted ({plan.folder}/interrupted.json)"
            log(f"{stop}; rerun the same command to resume")
            raise
        summary.seconds[plan.chapter] = seconds
        (summary.ran if ok else summary.failed).append(plan.chapter)
        done = f"ran in {seconds:.1f} s" + (f" ({message})" if message else "")
        why = f"FAILED after {seconds:.1f} s: {message} (see {plan.folder}/failed.json)"
        log(f"[{k}/{len(plans)}] {plan.chapter}: {done if ok else why}")
    log(f"posgeom run: {summary}")
    return summary


def _logged_kernel(path: Path) -> type:
    """A kernel manager whose kernel writes its own log to ``path``, not to our
    terminal: a Ctrl-C that stops it mid-cell leaves its ZMQ traceback there."""
    from jupyter_client.manager import AsyncKernelManager

    class LoggedKernel(AsyncKernelManager):
        """The kernel's stderr in the chapter's ``kernel.log``. Chapter: *Reproduction
        ledger*."""

        async def start_kernel(self, **kw: Any) -> None:
            with open(path, "ab") as log:  # noqa: ASYNC230 - a local file, at once
                await super().start_kernel(stderr=log, **kw)

    return LoggedKernel


def _execute(plan: _Plan, common: dict, partial: Path) -> dict:
    """Run the notebook with its checkpoints; what it saved (parameters and results)."""
    import papermill

    checkpoints = str((plan.folder / "checkpoints").resolve())
    env = {RESULTS_ENV: str(partial.resolve()), CHECKPOINT_ENV: checkpoints}
    env |= {ENVIRONMENT[k]: str(v) for k, v in common["execution"].items()}
    notebook, cwd = str(plan.folder / f"{plan.chapter}.ipynb"), str(plan.source.parent)
    options = {"kernel_name": "python3", "cwd": cwd, "progress_bar": False}
    options["kernel_manager_class"] = _logged_kernel(
        (plan.folder / "kernel.log").resolve()
    )
    with patch.dict(os.environ, env):
        papermill.execute_notebook(plan.notebook, notebook, plan.parameters, **options)
    if (payload := read_json(partial)) is None:
        raise RuntimeError(
            "the chapter saved no results: call posgeom_utils.repro.results."
            "show_parameters(chapter, globals()) in the cell after its parameters cell"
        )
    return payload


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _run_one(plan: _Plan, force: bool, common: dict) -> tuple[bool, float, str]:
    """Run one chapter into ``results.json`` (``failed.json``, ``interrupted.json``):
    (succeeded, this attempt's wall seconds, the error or resumed total). An attempt of
    this very run (same identity, no ``force``) resumes; wall time sums ``segments``."""
    from papermill.exceptions import PapermillExecutionError

    folder, partial = plan.folder, plan.folder / "results.partial.json"
    checkpoints, t0, earlier = folder / "checkpoints", time.perf_counter(), []
    execution, notebook = common["execution"], str(folder / f"{plan.chapter}.ipynb")
    attempt = {"chapter": plan.chapter, "started": _now(), "execution": execution}
    attempt |= {"requested_parameters": plan.parameters, "notebook": notebook}

    def stopped(name: str, record: dict) -> dict:  # its time for the next attempt
        spent = [*earlier, round(time.perf_counter() - t0, 3)]
        record |= {"wall_seconds": spent[-1], "segments": spent}
        write_json(folder / name, record)
        with contextlib.suppress(OSError):  # then the next attempt counts from zero
            write_json(checkpoints / "segments.json", {"segments": spent})
        return record

    folder.mkdir(parents=True, exist_ok=True)
    partial.unlink(missing_ok=True)
    try:
        if force or read_json(checkpoints / "run.json") != plan.identity:
            shutil.rmtree(checkpoints, ignore_errors=True)
        checkpoints.mkdir(parents=True, exist_ok=True)
        write_json(checkpoints / "run.json", plan.identity)
        earlier = (read_json(checkpoints / "segments.json") or {}).get("segments")
        valid = isinstance(earlier, list) and all(
            type(s) in (int, float) for s in earlier
        )
        earlier = earlier if valid else []
        payload = _execute(plan, common, partial)
        spent = [*earlier, round(time.perf_counter() - t0, 3)]
        provenance = {**plan.identity, **common, "started": attempt["started"]}
        provenance |= {"finished": _now(), "wall_seconds": round(sum(spent), 3)}
        provenance["segments"] = spent
        results = {k: payload.get(k, {}) for k in ("parameters", "results")}
        record = {"chapter": plan.chapter, "provenance": provenance, **results}
        write_json(folder / "results.json", record)
        for name in ("failed.json", "interrupted.json", "checkpoints/segments.json"):
            (folder / name).unlink(missing_ok=True)
        total = f"{sum(spent):.1f} s over {len(spent)} attempts of this run"
        return True, spent[-1], total if earlier else ""
    except KeyboardInterrupt:  # recorded; the checkpoints stay for the rerun
        resume = "rerun the same command: training resumes from checkpoints/"
        stopped("interrupted.json", attempt | {"resume": resume})
        raise
    except Exception as exc:  # noqa: BLE001 - recorded; the other chapters still run
        lines = "".join(traceback.format_exception(exc)).splitlines()
        error = {"error": type(exc).__name__, "message": str(exc)}
        if isinstance(exc, PapermillExecutionError):  # the notebook cell's error
            lines = _ANSI.sub("", "\n".join(exc.traceback)).splitlines()
            error = {"error": exc.ename, "message": str(exc.evalue)}
            error["cell_index"] = exc.cell_index
        record = stopped("failed.json", attempt | error | {"traceback": lines[-20:]})
        message = " ".join(record["message"].split())[:200]
        return False, record["wall_seconds"], f"{record['error']}: {message}"
    finally:
        partial.unlink(missing_ok=True)
