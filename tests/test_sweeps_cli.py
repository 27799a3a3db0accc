"""``posgeom run --executor/--workers/--scheduler``: the options reach the chapters that declare them, are
recorded in the provenance but not in the skip key, and a chapter's sweep gives the same results serially and
on 2 Dask workers, resuming across executors after an interruption.

The chapters here are tiny fake MyST notebooks (a kernel start each); the real chapters' serial and Dask smoke
runs are compared by hand (see the task's report) because they take minutes on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgeom_utils.repro.runner import RunError, execution_parameters, run_chapters
from test_cli import run_cli  # tests/ is on sys.path under pytest (no __init__.py)
from test_runner import chapter, quiet, results, write

#: a chapter with a sweep, written as the book's chapters write theirs
SWEEPER = chapter("sweeper", """
    profile = "default"
    train_steps = 20
    executor = "serial"  # where independent training runs execute: "serial" or "dask"
    workers = None  # Dask workers when executor is "dask"
    scheduler = None  # address of a running Dask scheduler
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
    swept = run_sweep(train, runs, executor=executor, workers=workers, scheduler=scheduler,
                      directory=checkpoint_dir("sweep"))
    glue("losses", [r["loss"] for r in swept])
    glue("weight_sums", [r["weight_sum"] for r in swept])
    """)
PLAIN = chapter("plain", """
    profile = "default"
    k = 3
    """, 'glue("cube", k ** 3)')


def calls(source: Path) -> list[str]:
    log = source / "calls.log"
    return sorted(log.read_text().split()) if log.exists() else []


def test_execution_parameters_go_only_to_chapters_that_declare_them():
    declared = {"executor": "serial", "workers": None, "scheduler": None, "n": 3}
    assert execution_parameters(declared, "dask", 2, "tcp://h:8786") == {
        "executor": "dask", "workers": 2, "scheduler": "tcp://h:8786"}
    assert execution_parameters(declared, "dask") == {"executor": "dask"}
    assert execution_parameters({"n": 3}, "dask", 2) == {}
    assert execution_parameters(declared) == {}


def test_sweep_is_identical_serially_and_on_dask_and_resumes_across_executors(tmp_path):
    source = write(tmp_path / "src", sweeper=SWEEPER, plain=PLAIN)
    out = tmp_path / "out"
    (source / "calls.log.fail").touch()  # the first attempt is interrupted at its third run
    first = run_chapters("smoke", out=out, source_dir=source, log=quiet)
    assert first.failed == ["sweeper"] and first.ran == ["plain"]
    failed = json.loads((out / "sweeper" / "failed.json").read_text())
    assert "seed2" in failed["message"] and "interrupted" in failed["message"]
    assert calls(source) == ["seed0", "seed1", "seed2"]
    sweep_dir = out / "sweeper" / "checkpoints" / "sweep"
    assert sorted(p.name for p in sweep_dir.glob("*.json")) == ["seed0.json", "seed1.json"]

    (source / "calls.log.fail").unlink()
    (source / "calls.log").unlink()
    second = run_chapters("smoke", out=out, source_dir=source, log=quiet, executor="dask", workers=2)
    assert second.ran == ["sweeper"] and second.skipped == ["plain"]  # plain: current, whatever the executor
    assert calls(source) == ["seed2", "seed3"]  # the finished runs were read back, not recomputed
    on_dask = results(out, "sweeper")
    assert on_dask["parameters"]["executor"] == "dask" and on_dask["parameters"]["workers"] == 2
    prov = on_dask["provenance"]
    assert prov["execution"] == {"executor": "dask", "workers": 2}
    assert not {"executor", "workers", "scheduler"} & set(prov["requested_parameters"])
    assert results(out, "plain")["provenance"]["execution"] == {}

    lines = []
    third = run_chapters("smoke", out=out, source_dir=source, log=lines.append)  # serial: still current
    assert third.skipped == ["plain", "sweeper"] and "sweeper: skipped (current)" in "\n".join(lines)

    (source / "calls.log").unlink()
    fresh = run_chapters("smoke", ["sweeper"], out=tmp_path / "serial", source_dir=source, log=quiet)
    assert fresh.ran == ["sweeper"] and calls(source) == ["seed0", "seed1", "seed2", "seed3"]
    serial = results(tmp_path / "serial", "sweeper")
    assert serial["parameters"]["executor"] == "serial" and serial["provenance"]["execution"] == {}
    assert serial["results"] == on_dask["results"]  # bit for bit (JSON float reprs)
    assert len(set(serial["results"]["weight_sums"])) == 4  # the seeds do differ: the check can fail


@pytest.mark.parametrize("kwargs, argument", [
    ({"executor": "spark"}, "--executor"),
    ({"executor": "dask", "workers": 0}, "--workers"),
    ({"executor": "dask", "workers": True}, "--workers"),
    ({"workers": 2}, "--workers"),
    ({"executor": "serial", "scheduler": "tcp://127.0.0.1:8786"}, "--scheduler"),
    ({"executor": "dask", "scheduler": " "}, "--scheduler"),
])
def test_bad_execution_options_are_refused_before_anything_runs(tmp_path, kwargs, argument):
    source = write(tmp_path / "src", plain=PLAIN)
    with pytest.raises(RunError) as caught:
        run_chapters("smoke", out=tmp_path / "out", source_dir=source, log=quiet, **kwargs)
    assert caught.value.argument == argument
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, words", [
    (["--executor", "spark"], ["--executor", "invalid choice"]),
    (["--executor", "dask", "--workers", "0"], ["--workers", ">= 1", "--workers 2"]),
    (["--workers", "2"], ["--workers", "--executor dask"]),
    (["--scheduler", "tcp://127.0.0.1:8786"], ["--scheduler", "--executor dask"]),
])
def test_cli_usage_errors_exit_2(tmp_path, capsys, argv, words):
    source = write(tmp_path / "src", plain=PLAIN)
    code, stdout, stderr = run_cli(["run", "--profile", "smoke", "--source-dir", str(source),
                                    "--out", str(tmp_path / "o"), *argv], capsys)
    assert code == 2 and not stdout
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("posgeom run: error:") and all(w in last for w in words), stderr
    assert not (tmp_path / "o").exists()


def test_help_documents_the_execution_options(capsys):
    code, stdout, _ = run_cli(["run", "--help"], capsys)
    assert code == 0
    for words in ("--executor {serial,dask}", "--workers N", "--scheduler ADDRESS",
                  "--executor dask --workers 2", "not part of the"):
        assert words in " ".join(stdout.split()), words


@pytest.mark.parametrize("name", ["necessity", "separation", "low_rank", "monotonicity"])
def test_the_sweeping_chapters_declare_the_execution_parameters(name):
    """With serial defaults, and on lines papermill can parse (one '=' per line: it skips the others)."""
    import jupytext

    from posgeom_utils.repro.runner import declared_parameters, default_source_dir

    nb = jupytext.read(default_source_dir() / f"{name}.md")
    declared = declared_parameters(nb)
    assert {k: declared.get(k, "missing") for k in ("executor", "workers", "scheduler")} == {
        "executor": "serial", "workers": None, "scheduler": None}
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert not [line for line in cell.source.splitlines() if line.count("=") > 1]
    body = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "run_sweep(" in body and "executor=executor" in body and "workers=workers" in body
