"""``posgeom run`` (posgeom_utils.repro.runner): results with provenance, skipping, failures, resume, cap,
the executor, the CLI, and the freshness of the committed results.

The tests execute tiny fake MyST chapters written here (a kernel start each, a few seconds); the real chapters
run in the book build and under nbval, not here.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

import pytest

from posgeom_utils.repro import runner
from posgeom_utils.repro.runner import RunError, RunSummary, requested_parameters, run_chapters
from posgeom_utils.repro.sources import code_hash
from test_cli import run_cli  # tests/ is on sys.path under pytest (no __init__.py)

HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# {name}
"""

PROVENANCE = ("profile", "requested_parameters", "package_version", "commit", "dirty", "code_hash", "execution",
              "libraries", "device_name", "cap", "started", "finished", "wall_seconds", "hostname", "platform",
              "cpu")


def cell(source: str, tags: str | None = None) -> str:
    meta = f":tags: [{tags}]\n\n" if tags else ""
    return f"\n```{{code-cell}} ipython3\n{meta}{textwrap.dedent(source).strip()}\n```\n"


def chapter(name: str, parameters: str, body: str, show: bool = True) -> str:
    """A fake chapter in the book's layout: parameters, the one ``show_parameters`` call, then the body."""
    text = HEADER.format(name=name)
    text += cell(parameters, tags="parameters")
    call = f'show_parameters("{name}", globals())' if show else ""
    text += cell(f"from posgeom_utils.repro.results import glue, show_parameters\n{call}")
    text += cell(body)
    return text


ALPHA = chapter("alpha", """
    profile = "default"
    n = 3
    sample_size = 100  # capped by --cap
    train_steps = None  # None means 'all', capped by --cap
    device = "auto"
    """, """
    glue("total", n * sample_size)
    glue("label", f"n={n}")
    """)
BETA = chapter("beta", """
    profile = "default"
    k = 7
    """, """
    glue("square", k * k)
    """)
BROKEN = chapter("broken", 'profile = "default"', """
    glue("before", 1)
    raise ValueError("deliberate failure in a fake chapter")
    """)
SILENT = chapter("silent", 'profile = "default"', 'glue("x", 1)', show=False)
TRAINER = chapter("trainer", """
    profile = "default"
    train_steps = 20
    """, """
    import os

    import torch
    from torch import nn

    from posgeom_utils.repro.results import checkpoint_dir
    from posgeom_utils.training import TrainConfig, train_classifier

    g = torch.Generator().manual_seed(0)
    X = torch.randn(96, 4, generator=g)
    y = (X[:, 0] > 0).long()
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    seen = []


    def callback(step, model):
        seen.append(step)
        if step == 10 and os.path.exists("INTERRUPT"):  # relative to the chapter folder, as in the book
            raise RuntimeError("interrupted at step 10")


    config = TrainConfig(steps=train_steps, batch_size=16, eval_every=10, checkpoint_every=5, device="cpu",
                         threads=1, checkpoint_dir=checkpoint_dir("linear"))
    history = train_classifier(model, X[:64], y[:64], X[64:], y[64:], config, callback=callback)
    glue("callback_steps", seen)
    glue("history_steps", history.step)
    glue("weight_sum", float(model.weight.sum()))
    """)


def write(folder: Path, **chapters: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in chapters.items():
        (folder / f"{name}.md").write_text(text)
    return folder


def results(out: Path, name: str) -> dict:
    return json.loads((out / name / "results.json").read_text())


def quiet(_line: str) -> None:
    pass


# --------------------------------------------------------------------------- results, provenance, skipping

@pytest.fixture(scope="module")
def two_chapters(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, RunSummary]:
    """alpha and beta executed once with the smoke profile."""
    root = tmp_path_factory.mktemp("run")
    source = write(root / "src", alpha=ALPHA, beta=BETA)
    (source / "README.md").write_text("# not a notebook\n")  # plain markdown is not a chapter
    out = root / "out"
    return source, out, run_chapters("smoke", out=out, source_dir=source, log=quiet)


def test_results_json_has_parameters_results_and_provenance(two_chapters):
    _, out, summary = two_chapters
    assert summary.ok and summary.ran == ["alpha", "beta"] and not summary.skipped
    assert set(summary.seconds) == {"alpha", "beta"}
    a = results(out, "alpha")
    assert a["chapter"] == "alpha"
    assert a["results"] == {"total": 300, "label": "n=3"}
    assert a["parameters"]["profile"] == "smoke" and a["parameters"]["n"] == 3
    assert a["parameters"]["sample_size"] == 100 and a["parameters"]["device_name"] == a["provenance"]["device_name"]
    prov = a["provenance"]
    assert set(PROVENANCE) <= set(prov)
    assert prov["profile"] == "smoke" and prov["requested_parameters"] == {"profile": "smoke"}
    assert prov["cap"] is None and prov["execution"] == {}
    assert len(prov["code_hash"]) == 64 and prov["wall_seconds"] > 0
    assert prov["started"] <= prov["finished"] and prov["started"].endswith("+00:00")
    assert set(runner.LIBRARIES) | {"python"} <= set(prov["libraries"]) and prov["libraries"]["numpy"]
    assert results(out, "beta")["results"] == {"square": 49}
    for name in ("alpha", "beta"):
        folder = out / name
        assert (folder / f"{name}.ipynb").is_file() and (folder / "checkpoints").is_dir()
        assert not (folder / "results.partial.json").exists() and not (folder / "failed.json").exists()


def test_second_run_skips_and_changes_rerun(two_chapters, tmp_path):
    source, out, _ = two_chapters
    lines: list[str] = []
    again = run_chapters("smoke", out=out, source_dir=source, log=lines.append)
    assert again.skipped == ["alpha", "beta"] and not again.ran and again.ok
    assert any("alpha: skipped (current)" in line for line in lines)
    before = results(out, "alpha")["provenance"]["started"]
    # another profile, force, and an edited source each rerun the chapter
    assert run_chapters("default", ["alpha"], out=out, source_dir=source, log=quiet).ran == ["alpha"]
    assert results(out, "alpha")["parameters"]["profile"] == "default"
    assert run_chapters("default", ["alpha.md"], out=out, source_dir=source, log=quiet).skipped == ["alpha"]
    assert run_chapters("default", ["alpha"], out=out, source_dir=source, force=True, log=quiet).ran == ["alpha"]
    edited = tmp_path / "src"
    write(edited, alpha=ALPHA.replace("n = 3", "n = 4"))
    assert run_chapters("default", ["alpha"], out=out, source_dir=edited, log=quiet).ran == ["alpha"]
    a = results(out, "alpha")
    assert a["results"]["total"] == 400 and a["provenance"]["started"] >= before


# --------------------------------------------------------------------------- failures

def test_a_failing_chapter_does_not_stop_the_others(tmp_path, capsys):
    source = write(tmp_path / "src", alpha=ALPHA, broken=BROKEN, silent=SILENT)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(["run", "--profile", "smoke", "--source-dir", str(source), "--out", str(out)],
                                   capsys)
    assert code == 1, stderr
    assert "broken: FAILED" in stdout and "alpha: ran" in stdout and "1 ran, 0 skipped, 2 failed" in stdout
    failed = json.loads((out / "broken" / "failed.json").read_text())
    assert failed["error"] == "ValueError" and "deliberate failure" in failed["message"]
    assert any("deliberate failure" in line for line in failed["traceback"]) and failed["wall_seconds"] > 0
    assert not (out / "broken" / "results.json").exists() and (out / "broken" / "broken.ipynb").is_file()
    # a chapter that never calls show_parameters saves nothing: a failure that says what to add
    silent = json.loads((out / "silent" / "failed.json").read_text())
    assert "show_parameters" in silent["message"]
    assert results(out, "alpha")["results"]["total"] == 300

    # once fixed, the chapter runs, failed.json goes, and the others are skipped
    write(source, broken=BROKEN.replace('raise ValueError("deliberate failure in a fake chapter")', ""))
    summary = run_chapters("smoke", ["alpha", "broken"], out=out, source_dir=source, log=quiet)
    assert summary.ok and summary.ran == ["broken"] and summary.skipped == ["alpha"]
    assert not (out / "broken" / "failed.json").exists() and results(out, "broken")["results"] == {"before": 1}


# --------------------------------------------------------------------------- resume

def test_interrupted_training_resumes_from_its_checkpoint(tmp_path):
    source = write(tmp_path / "src", trainer=TRAINER)
    out = tmp_path / "out"
    (source / "INTERRUPT").touch()
    first = run_chapters("smoke", out=out, source_dir=source, log=quiet)
    assert first.failed == ["trainer"]
    assert "interrupted at step 10" in json.loads((out / "trainer" / "failed.json").read_text())["message"]
    checkpoint = out / "trainer" / "checkpoints" / "linear" / "checkpoint.pt"
    assert checkpoint.is_file()  # written at step 5, before the interruption
    failed_seconds = json.loads((out / "trainer" / "failed.json").read_text())["wall_seconds"]

    (source / "INTERRUPT").unlink()
    resumed = run_chapters("smoke", out=out, source_dir=source, log=quiet)
    assert resumed.ran == ["trainer"]
    r = results(out, "trainer")["results"]
    # the failed attempt's wall time counts in the run's
    segments = results(out, "trainer")["provenance"]["segments"]
    assert segments == [failed_seconds, pytest.approx(resumed.seconds["trainer"], abs=1e-3)]
    # a fresh run calls back at 0, 10, 20; the resumed one started after step 5, so never at 0
    assert r["callback_steps"] == [10, 20] and r["history_steps"] == [10, 20]

    fresh = run_chapters("smoke", out=out, source_dir=source, force=True, log=quiet)  # force: from scratch
    assert fresh.ran == ["trainer"]
    f = results(out, "trainer")["results"]
    assert f["callback_steps"] == [0, 10, 20]
    assert f["weight_sum"] == pytest.approx(r["weight_sum"], abs=1e-6)  # resuming changes nothing

    # a different run (another profile: other parameters) never reuses these checkpoints
    other = run_chapters("default", out=out, source_dir=source, log=quiet)
    assert other.ran == ["trainer"] and results(out, "trainer")["results"]["callback_steps"] == [0, 10, 20]


def test_resumed_runs_sum_the_wall_time_of_every_attempt(tmp_path, monkeypatch):
    """Two simulated Ctrl-C, then a run to the end: results.json's wall_seconds sums the three attempts
    (``segments``); --force, or another identity (an edited chapter), counts from zero."""
    import papermill

    source, out = write(tmp_path / "src", alpha=ALPHA), tmp_path / "out"
    execute = papermill.execute_notebook

    def ctrl_c(*args, **kwargs):  # Ctrl-C a little into the notebook
        time.sleep(0.3)
        raise KeyboardInterrupt

    def interrupt(profile: str = "smoke", force: bool = False) -> dict:
        monkeypatch.setattr(papermill, "execute_notebook", ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            run_chapters(profile, out=out, source_dir=source, force=force, log=quiet)
        monkeypatch.setattr(papermill, "execute_notebook", execute)
        return json.loads((out / "alpha" / "interrupted.json").read_text())

    first, second = interrupt(), interrupt()
    assert first["wall_seconds"] >= 0.3 and first["segments"] == [first["wall_seconds"]]
    assert second["wall_seconds"] >= 0.3 and second["segments"] == [first["wall_seconds"], second["wall_seconds"]]
    lines: list[str] = []
    done = run_chapters("smoke", out=out, source_dir=source, log=lines.append)
    assert done.ran == ["alpha"] and "over 3 attempts" in " ".join(lines)
    prov = results(out, "alpha")["provenance"]
    assert prov["segments"][:2] == second["segments"] and len(prov["segments"]) == 3
    assert prov["segments"][2] == pytest.approx(done.seconds["alpha"], abs=1e-3)
    assert prov["wall_seconds"] == pytest.approx(sum(prov["segments"]), abs=1e-3)
    assert prov["wall_seconds"] >= done.seconds["alpha"] + 0.6  # not only the last attempt
    assert not (out / "alpha" / "interrupted.json").exists()
    assert not (out / "alpha" / "checkpoints" / "segments.json").exists()

    assert len(interrupt(force=True)["segments"]) == 1  # forced: a new run
    forced = run_chapters("smoke", out=out, source_dir=source, force=True, log=quiet)  # and again
    prov = results(out, "alpha")["provenance"]
    assert forced.ran == ["alpha"] and prov["segments"] == [prov["wall_seconds"]]
    assert prov["wall_seconds"] == pytest.approx(forced.seconds["alpha"], abs=1e-3)

    assert len(interrupt("default")["segments"]) == 1  # another profile: another run
    write(source, alpha=ALPHA.replace("n = 3", "n = 4"))  # and the chapter edited: yet another
    edited = run_chapters("default", out=out, source_dir=source, log=quiet)
    prov = results(out, "alpha")["provenance"]
    assert edited.ran == ["alpha"] and results(out, "alpha")["results"]["total"] == 400
    assert prov["segments"] == [prov["wall_seconds"]]


# --------------------------------------------------------------------------- cap, device, usage errors

NOISY = chapter("noisy", 'profile = "default"', """
    import os

    os.write(2, b"the kernel's own stderr\\n")  # what a kernel prints outside any cell's output
    glue("x", 1)
    """)


def test_the_kernel_logs_to_its_chapter_folder_not_the_terminal(tmp_path, capfd, monkeypatch):
    """The kernel's own stderr (its warnings; the ZMQ traceback of a kernel stopped by Ctrl-C mid-cell) goes to
    OUT/<chapter>/kernel.log, a relative OUT included: the terminal shows posgeom's lines only."""
    monkeypatch.chdir(tmp_path)
    out = Path("out")
    summary = run_chapters("smoke", out=out, source_dir=write(tmp_path / "src", noisy=NOISY), log=quiet)
    assert summary.ok
    assert "the kernel's own stderr" in (out / "noisy" / "kernel.log").read_text()
    assert "the kernel's own stderr" not in capfd.readouterr().err


def test_cap_bounds_every_size_parameter():
    declared = {"profile": "default", "sample_size": 8000, "task_size": 20000, "train_steps": 300, "n": 64,
                "planted_sequences": 500, "device": "auto"}
    params = requested_parameters("low_rank", "paper", declared, device="cuda", cap=2000)
    # the profile's None (whole corpus) and large values are capped; declared defaults too; others untouched
    assert params["sample_size"] == 2000 and params["task_size"] == 2000 and params["train_steps"] == 2000
    assert params["planted_sequences"] == 500 and params["n"] == 512 and params["device"] == "cuda"
    assert params["profile"] == "paper"
    # device is injected only into chapters that declare it; a chapter absent from the profile gets its name
    assert requested_parameters("fake", "smoke", {"n": 3}, device="cpu") == {"profile": "smoke"}
    assert set(runner.SIZE_PARAMETERS) >= {"sample_size", "train_steps", "finetune_steps", "width_steps"}
    # --model replaces the profile's model_name (the paper's bert-base-uncased) where a chapter has one
    assert params["model_name"] == "bert-base-uncased"
    declared["model_name"] = None
    assert requested_parameters("low_rank", "paper", declared, model="other/model")["model_name"] == "other/model"
    assert "model_name" not in requested_parameters("fake", "paper", {"n": 3}, model="x")


def test_cap_is_injected_and_recorded(two_chapters, tmp_path):
    source, _, _ = two_chapters
    out = tmp_path / "out"
    summary = run_chapters("smoke", ["alpha"], out=out, source_dir=source, cap=40, device="cpu", log=quiet)
    assert summary.ran == ["alpha"]
    a = results(out, "alpha")
    assert a["provenance"]["cap"] == 40
    assert a["provenance"]["requested_parameters"] == {"profile": "smoke", "sample_size": 40,
                                                       "train_steps": 40, "device": "cpu"}
    assert a["parameters"]["sample_size"] == 40 and a["parameters"]["train_steps"] == 40
    assert a["results"]["total"] == 3 * 40


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every device resolve to the CPU (as on the book's build machines), GPU or not."""
    monkeypatch.setattr(runner, "device_name", lambda device="auto": "cpu")


def test_usage_errors(two_chapters, tmp_path, on_cpu):
    source, _, _ = two_chapters
    with pytest.raises(RunError, match=r"--cap N \(e.g. --cap 2000\)") as info:
        run_chapters("paper", out=tmp_path, source_dir=source, log=quiet)
    assert info.value.argument == "--profile paper"
    with pytest.raises(RunError, match="choose from alpha, beta"):
        run_chapters("smoke", ["gamma"], out=tmp_path, source_dir=source, log=quiet)
    with pytest.raises(RunError, match="pass --source-dir DIR"):
        run_chapters("smoke", out=tmp_path, source_dir=tmp_path / "missing", log=quiet)
    with pytest.raises(RunError, match=">= 1"):
        run_chapters("smoke", out=tmp_path, source_dir=source, cap=0, log=quiet)
    with pytest.raises(RunError, match="--profile must be one of"):
        run_chapters("huge", out=tmp_path, source_dir=source, log=quiet)
    assert not any(tmp_path.iterdir())  # nothing ran


@pytest.mark.parametrize("argv, words", [
    (["--profile", "paper", "--device", "cpu"], ["--profile paper", "--cap 2000", "--device cuda"]),
    (["--profile", "smoke", "--chapters", "gamma"], ["--chapters", "gamma", "alpha, beta"]),
    (["--profile", "huge"], ["--profile", "invalid choice"]),
])
def test_cli_usage_errors_exit_2(two_chapters, tmp_path, on_cpu, capsys, argv, words):
    source, _, _ = two_chapters
    code, stdout, stderr = run_cli(["run", *argv, "--source-dir", str(source), "--out", str(tmp_path / "o")],
                                   capsys)
    assert code == 2 and not stdout
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("posgeom run: error:") and all(w in last for w in words), stderr
    assert not (tmp_path / "o").exists()


# --------------------------------------------------------------------------- freshness of committed results

COMMITTED = Path(__file__).resolve().parents[1] / "book" / "results"


def test_stale_results_names_edited_and_missing_chapters(tmp_path):
    source = write(tmp_path / "src", alpha=ALPHA, beta=BETA)
    out = tmp_path / "out"
    for name in ("alpha", "beta"):  # results as posgeom run records them, for the sources as they are
        (out / name).mkdir(parents=True)
        (out / name / "results.json").write_text(json.dumps(
            {"results": {}, "provenance": {"code_hash": code_hash(source / f"{name}.md")}}))
    assert runner.stale_results(out, source) == {}
    edited = write(tmp_path / "edited", alpha=ALPHA.replace("n = 3", "n = 5"))
    stale = runner.stale_results(out, edited)
    assert set(stale) == {"alpha", "beta"}  # alpha edited; beta's source is absent from the edited folder
    assert "posgeom run --chapters alpha" in stale["alpha"] and "no chapter" in stale["beta"]


@pytest.mark.parametrize("profile", sorted(p.name for p in COMMITTED.iterdir() if p.is_dir()))
def test_committed_results_are_fresh(profile):
    """Every committed results.json was computed by the chapter and science code of this checkout."""
    stale = runner.stale_results(COMMITTED / profile)
    assert not stale, f"stale committed {profile} results: {stale}"


def test_parameters_block_shows_values_and_meanings():
    from posgeom_utils.repro import results as report

    namespace: dict = {"In": [""]}
    source = 'profile = "default"  # smoke | default | paper\nn = 32  # positions compared\nseed = 0\n'
    for cell_source in (source, "n = 16\n", "show_parameters(...)"):  # parameters, papermill's, this cell
        exec(cell_source if "=" in cell_source else "", namespace)  # noqa: S102 - as the kernel runs them
        namespace["In"].append(cell_source)
    block = report.show_parameters("chapter", namespace)
    frame = block.frame
    assert frame.loc["n", "value"] == "16" and frame.loc["n", "meaning"] == "positions compared"
    assert frame.loc["seed", "meaning"] == "" and "In" not in frame.index
    html = block._repr_html_()
    assert html.startswith("<details") and "<code>default</code>" in html and "positions compared" in html
    assert list(frame.index) == ["profile", "n", "seed"]


# --------------------------------------------------------------------------- where the sweeps run

#: a chapter with a sweep, written as the book's chapters write theirs
SWEEPER = chapter("sweeper", """
    profile = "default"
    train_steps = 20
    """, """
    import os

    import torch
    from torch import nn

    from posgeom_utils.repro.results import checkpoint_dir
    from posgeom_utils.scale.sweeps import run_sweep
    from posgeom_utils.training import TrainConfig, train_classifier

    g = torch.Generator().manual_seed(0)
    X = torch.randn(96, 4, generator=g)
    y = (X[:, 0] > 0).long()


    def train(run):
        with open(run["log"], "a") as log:  # which runs were computed (not read back)
            log.write(run["name"] + "\\n")
        if run["name"] == "seed2" and os.path.exists(run["log"] + ".fail"):
            raise RuntimeError("interrupted")
        torch.manual_seed(run["seed"])
        model = nn.Linear(4, 2)
        config = TrainConfig(steps=run["steps"], batch_size=16, eval_every=10, seed=run["seed"],
                             device="cpu", threads=1, checkpoint_dir=run["checkpoint_dir"])
        history = train_classifier(model, X[:64], y[:64], X[64:], y[64:], config)
        return {"loss": history.eval_loss[-1], "weight_sum": float(model.weight.detach().sum())}


    runs = [{"name": f"seed{s}", "seed": s, "steps": train_steps, "log": os.path.abspath("calls.log"),
             "checkpoint_dir": checkpoint_dir(f"seed{s}")} for s in range(4)]
    swept = run_sweep(train, runs, directory=checkpoint_dir("sweep"))
    glue("executor", os.environ.get("POSGEOM_EXECUTOR", "unset"))
    glue("weight_sums", [r["weight_sum"] for r in swept])
    """)


def calls(source: Path) -> list[str]:
    log = source / "calls.log"
    return sorted(log.read_text().split()) if log.exists() else []


def test_sweep_is_identical_serially_and_on_dask_and_resumes_across_executors(tmp_path):
    source = write(tmp_path / "src", sweeper=SWEEPER, beta=BETA)
    out = tmp_path / "out"
    (source / "calls.log.fail").touch()  # the first attempt is interrupted at its third run
    first = run_chapters("smoke", out=out, source_dir=source, log=quiet)
    assert first.failed == ["sweeper"] and first.ran == ["beta"]
    assert calls(source) == ["seed0", "seed1", "seed2"]

    (source / "calls.log.fail").unlink()
    (source / "calls.log").unlink()
    second = run_chapters("smoke", out=out, source_dir=source, log=quiet, executor="dask", workers=2)
    assert second.ran == ["sweeper"] and second.skipped == ["beta"]  # beta: current, whatever the executor
    assert calls(source) == ["seed2", "seed3"]  # the finished runs were read back, not recomputed
    on_dask = results(out, "sweeper")
    assert on_dask["results"]["executor"] == "dask"
    assert on_dask["provenance"]["execution"] == {"executor": "dask", "workers": 2}
    assert on_dask["provenance"]["requested_parameters"] == {"profile": "smoke"}

    third = run_chapters("smoke", out=out, source_dir=source, log=quiet)  # serial: still current
    assert third.skipped == ["beta", "sweeper"]
    (source / "calls.log").unlink()
    fresh = run_chapters("smoke", ["sweeper"], out=tmp_path / "serial", source_dir=source, log=quiet)
    assert fresh.ran == ["sweeper"] and calls(source) == ["seed0", "seed1", "seed2", "seed3"]
    serial = results(tmp_path / "serial", "sweeper")
    assert serial["results"]["executor"] == "unset" and serial["provenance"]["execution"] == {}
    assert serial["results"]["weight_sums"] == on_dask["results"]["weight_sums"]  # bit for bit
    assert len(set(serial["results"]["weight_sums"])) == 4  # the seeds do differ: the check can fail


@pytest.mark.parametrize("kwargs, argument", [
    ({"executor": "spark"}, "--executor"),
    ({"executor": "dask", "workers": 0}, "--workers"),
    ({"workers": 2}, "--workers"),
    ({"executor": "serial", "scheduler": "tcp://127.0.0.1:8786"}, "--scheduler"),
])
def test_bad_execution_options_are_refused_before_anything_runs(tmp_path, kwargs, argument):
    source = write(tmp_path / "src", beta=BETA)
    with pytest.raises(RunError) as caught:
        run_chapters("smoke", out=tmp_path / "out", source_dir=source, log=quiet, **kwargs)
    assert caught.value.argument == argument
    assert not (tmp_path / "out").exists()


def test_results_written_into_the_book_leave_the_tree_clean(tmp_path, monkeypatch):
    """A run's outputs under book/results are not code: a second profile run after the first is clean."""
    import subprocess

    repo = tmp_path / "repo"
    (repo / "book" / "results" / "smoke").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "init", "--allow-empty"], check=True)
    monkeypatch.setattr(runner, "REPO_ROOT", repo)
    monkeypatch.setattr(runner, "RESULTS_ROOT", repo / "book" / "results")
    (repo / "book" / "results" / "smoke" / "results.json").write_text("{}")
    assert runner.git_state()[1] is False
    (repo / "code.py").write_text("x = 2\n")
    assert runner.git_state()[1] is True
