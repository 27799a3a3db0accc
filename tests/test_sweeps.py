"""Sweeps of independent training runs (posgeom_utils.scale.sweeps): serial and Dask
give the same numbers in the same order, an interrupted sweep resumes, a changed
configuration is recomputed, bad input is refused naming the parameter, and each GPU
gets its own worker.

The training function is defined as a chapter defines it: in ``__main__`` (exec'd here
into a namespace named ``__main__``), reading its data from a global, so Dask must ship
it by value (cloudpickle).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from posgeom_utils.scale import sweeps
from posgeom_utils.scale.sweeps import SweepError, config_hash, run_sweep

#: a chapter's run function, verbatim as a notebook cell would hold it
RUN_CELL = '''
import torch

from posgeom_utils.tasks import planted_task
from posgeom_utils.training import TrainConfig, train_classifier
from posgeom_utils.transformer import PositionalTransformer

task = planted_task("precedes", L=8, V=16, num_sequences=256, seed=0)


def train_one(config):
    """Train one tiny classifier; return its numbers."""
    torch.manual_seed(config["seed"])
    net = PositionalTransformer(task.vocab_size, d=16, n_heads=2, n_layers=1, max_len=8,
                                positional=config["positional"])
    train_config = TrainConfig(steps=config["steps"], batch_size=32, eval_every=10,
                               seed=config["seed"], device="cpu", threads=1,
                               checkpoint_dir=config.get("checkpoint_dir"))
    history = train_classifier(net, task.X_train, task.y_train, task.X_eval,
                               task.y_eval, train_config)
    weights = torch.cat([p.detach().flatten() for p in net.parameters()])
    return {"accuracy": history.final_accuracy(), "eval_loss": history.eval_loss,
            "train_loss": history.train_loss,
            "weight_sum": float(weights.double().sum())}
'''


def notebook_namespace() -> dict:
    namespace = {"__name__": "__main__"}
    exec(compile(RUN_CELL, "<notebook cell>", "exec"), namespace)  # noqa: S102
    return namespace


NOTEBOOK = notebook_namespace()
train_one = NOTEBOOK["train_one"]


def grid(steps: int = 20, seeds=(0, 1), positionals=("none", "learned")) -> list[dict]:
    return [
        {"name": f"{p}-seed{s}", "positional": p, "seed": s, "steps": steps}
        for p in positionals
        for s in seeds
    ]


@pytest.fixture(scope="module")
def serial_results() -> list[dict]:
    return run_sweep(train_one, grid())


@pytest.fixture(scope="module")
def cluster():
    """One 2-worker cluster (as run_sweep starts it), passed by its address."""
    with sweeps.start_local_cluster(2) as c:
        yield c


def test_serial_and_two_dask_workers_give_identical_numbers(serial_results):
    """The default Dask path (2 single-threaded workers): bitwise the same."""
    distributed = run_sweep(train_one, grid(), executor="dask", workers=2)
    assert distributed == serial_results
    assert json.dumps(distributed) == json.dumps(serial_results)  # bit for bit
    assert [len(r["eval_loss"]) for r in distributed] == [2] * 4


def test_the_equality_check_can_fail(serial_results):
    """Negative control: different seeds and mechanisms give different numbers."""
    by_name = dict(zip((c["name"] for c in grid()), serial_results))
    learned, none = by_name["learned-seed0"], by_name["none-seed0"]
    assert learned["weight_sum"] != by_name["learned-seed1"]["weight_sum"]
    assert none["eval_loss"] != learned["eval_loss"]
    assert run_sweep(train_one, grid()[::-1]) == serial_results[::-1]  # config order


def test_results_come_back_in_config_order_on_dask(cluster, serial_results):
    configs = grid()
    slow_first = [{**configs[0], "steps": 60}, *configs[1:]]  # ends last, comes first
    address = cluster.scheduler_address
    results = run_sweep(train_one, slow_first, executor="dask", scheduler=address)
    assert results[1:] == serial_results[1:]
    assert results[0] != serial_results[0] and len(results[0]["eval_loss"]) == 6


def counted(config: dict) -> dict:
    """``train_one``, logging each call to ``config['log']`` and failing on request."""
    with open(config["log"], "a") as log:
        log.write(config["name"] + "\n")
    if config["name"] == config.get("fail") and Path(config["log"] + ".fail").exists():
        raise RuntimeError("deliberate interruption")
    return train_one(config)


def calls(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, serial_results):
    log = tmp_path / "calls.log"
    configs = [
        {
            **c,
            "log": str(log),
            "fail": grid()[2]["name"],
            "checkpoint_dir": str(tmp_path / "ckpt" / c["name"]),
        }
        for c in grid()
    ]
    Path(str(log) + ".fail").touch()
    with pytest.raises(
        SweepError, match=r"run 'learned-seed0' \(configs\[2\]\).*deliberate"
    ) as caught:
        run_sweep(counted, configs, directory=tmp_path / "runs")
    assert caught.value.name == configs[2]["name"] == "learned-seed0"
    assert "finished runs are kept" in str(caught.value)
    assert calls(log) == [c["name"] for c in configs[:3]]  # the 4th never started
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.json")) == sorted(
        f"{c['name']}.json" for c in configs[:2]
    )

    Path(str(log) + ".fail").unlink()
    log.unlink()
    resumed = run_sweep(counted, configs, directory=tmp_path / "runs")
    assert calls(log) == [c["name"] for c in configs[2:]]  # runs 1-2 were read back
    assert resumed == serial_results  # the same numbers as an uninterrupted sweep

    log.unlink()
    assert run_sweep(counted, configs, directory=tmp_path / "runs") == serial_results
    assert calls(log) == []  # everything finished: nothing recomputed


def test_changed_config_is_recomputed(tmp_path):
    log = tmp_path / "calls.log"
    configs = [{**c, "log": str(log)} for c in grid(steps=10)]
    first = run_sweep(counted, configs, directory=tmp_path)
    log.unlink()
    changed = [dict(c) for c in configs]
    changed[1]["steps"] = 20
    second = run_sweep(counted, changed, directory=tmp_path)
    assert calls(log) == [configs[1]["name"]]
    assert second[0] == first[0] and second[2:] == first[2:] and second[1] != first[1]
    stored = json.loads((tmp_path / f"{configs[1]['name']}.json").read_text())
    assert stored["config_hash"] == config_hash(changed[1]) != config_hash(configs[1])
    assert stored["result"] == second[1]
    assert list(stored["result"]) == list(second[1])  # the key order
    damaged = tmp_path / f"{configs[0]['name']}.json"
    damaged.write_text("{not json")  # recomputed
    log.unlink()
    assert run_sweep(counted, changed, directory=tmp_path) == second
    assert calls(log) == [configs[0]["name"]]


def test_failure_on_dask_names_the_run_and_keeps_finished_runs(
    cluster, tmp_path, serial_results
):
    log = tmp_path / "calls.log"
    configs = [{**c, "log": str(log), "fail": grid()[2]["name"]} for c in grid()]
    Path(str(log) + ".fail").touch()
    dask = {"executor": "dask", "scheduler": cluster.scheduler_address}
    dask["directory"] = tmp_path / "runs"
    with pytest.raises(
        SweepError, match=r"run 'learned-seed0'.*Error: deliberate"
    ) as caught:
        run_sweep(counted, configs, **dask)
    assert caught.value.name == configs[2]["name"]
    kept = {p.stem for p in (tmp_path / "runs").glob("*.json")}
    assert configs[2]["name"] not in kept
    Path(str(log) + ".fail").unlink()
    log.unlink()
    assert run_sweep(counted, configs, **dask) == serial_results
    # a set: a run of the first sweep cancelled as it started may still log its call
    assert set(calls(log)) == {c["name"] for c in configs} - kept


def twice(config: dict) -> dict:
    return {"value": 2 * config["x"]}


@pytest.mark.parametrize(
    "kwargs, env, words",
    [
        ({"executor": "spark"}, {}, ["executor", "'serial', 'dask'", "spark"]),
        ({"executor": "dask", "workers": 0}, {}, ["workers", ">= 1", "workers=2"]),
        ({"scheduler": "tcp://127.0.0.1:8786"}, {}, ["scheduler", "executor='dask'"]),
        ({"executor": "dask", "scheduler": ""}, {}, ["scheduler", "address"]),
        ({}, {"POSGEOM_EXECUTOR": "spark"}, ["POSGEOM_EXECUTOR", "spark"]),
        ({}, {"POSGEOM_WORKERS": "two"}, ["POSGEOM_WORKERS", "'two'"]),
        ({}, {"POSGEOM_WORKERS": "0"}, ["POSGEOM_WORKERS", ">= 1"]),
        ({}, {"POSGEOM_SCHEDULER": "tcp://h"}, ["POSGEOM_SCHEDULER", "EXECUTOR=dask"]),
    ],
)
def test_bad_options(monkeypatch, kwargs, env, words):
    """Arguments, or the environment variables standing in for them, checked first."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as caught:
        run_sweep(twice, [{"name": "a", "x": 1}], **kwargs)
    assert all(w in str(caught.value) for w in words), caught.value


def test_the_environment_chooses_the_executor_and_arguments_win(monkeypatch):
    monkeypatch.setenv("POSGEOM_EXECUTOR", "dask")
    monkeypatch.setenv("POSGEOM_WORKERS", "3")
    monkeypatch.setenv("POSGEOM_SCHEDULER", "tcp://10.0.0.1:8786")
    assert sweeps.sweep_options() == ("dask", 3, "tcp://10.0.0.1:8786")
    monkeypatch.setenv("POSGEOM_SCHEDULER", "")  # empty: unset
    assert sweeps.sweep_options() == ("dask", 3, None)
    assert sweeps.sweep_options("serial", 1, None) == ("serial", 1, None)
    for name in ("POSGEOM_EXECUTOR", "POSGEOM_WORKERS", "POSGEOM_SCHEDULER"):
        monkeypatch.delenv(name)
    assert sweeps.sweep_options() == ("serial", None, None)


@pytest.mark.parametrize(
    "fn, configs, error, words",
    [
        (twice, [{"name": "a"}] * 2, ValueError, ["duplicate", "'a'", "own name"]),
        (twice, [("a", 1)], ValueError, ["configs[0]", "dict"]),
        (twice, [{"name": "../up"}], ValueError, ["configs[0]", "name", "'../up'"]),
        (twice, [{"name": "a", "x": object()}], TypeError, ["object", "global"]),
        (lambda c: [1], [{"name": "a"}], TypeError, ["run 'a'", "dict", "[1]"]),
        (
            lambda c: {"v": torch.tensor(1.0)},
            [{"name": "a"}],
            TypeError,
            ["run 'a'", "JSON-serialisable", "float(x)"],
        ),
    ],
)
def test_bad_input(fn, configs, error, words):
    with pytest.raises(error) as caught:
        run_sweep(fn, configs)
    assert all(w in str(caught.value) for w in words), caught.value


def test_hashes_and_file_format_are_stable(tmp_path):
    """The committed store is keyed by these hashes (arrays by content) and read in
    this format."""
    import numpy as np

    config = {"name": "a", "x": 1, "y": [0.5, None, True], "z": {"b": "s"}}
    config |= {"t": np.arange(3.0), "i": np.int64(2)}
    assert config_hash(config) == "8c0ffd4cb22ea48272f4ce80"
    assert config_hash({**config, "t": np.arange(3.0) + 1}) != config_hash(config)
    assert run_sweep(twice, []) == []
    path = tmp_path / "a.json"
    sweeps._save(path, "h", {"b": 1, "a": 2})
    expected = (
        '{\n "format": 1,\n "name": "a",\n "config_hash": "h",\n '
        '"result": {\n  "b": 1,\n  "a": 2\n }\n}'
    )
    assert path.read_text() == expected
    assert sweeps._load(path, "h") == {"b": 1, "a": 2}
    assert sweeps._load(path, "g") is None


def gpus(workers=None) -> list:
    return [e.get("CUDA_VISIBLE_DEVICES") for e in sweeps.worker_environments(workers)]


def test_worker_environments_one_per_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert gpus() == ["0", "1", "2"] and gpus(2) == ["0", "1"]
    assert gpus(4) == ["0", "1", "2", "0"]
    assert all(e["OMP_NUM_THREADS"] == "1" for e in sweeps.worker_environments())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6,7")  # a job scheduler's share
    assert gpus() == ["4", "6", "7"]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr("dask.system.CPU_COUNT", 5)
    assert gpus() == [None] * 5 and len(gpus(2)) == 2
    with pytest.raises(ValueError, match="workers"):
        sweeps.worker_environments(0)


def test_each_gpu_worker_sees_its_own_gpu(monkeypatch):
    """On a (mocked) 2-GPU machine worker i has CUDA_VISIBLE_DEVICES=i, one OpenMP
    thread, and no MALLOC_TRIM_THRESHOLD_ (distributed's default, 1.4x slower)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with sweeps.dask_client(None, None, runs=8) as client:
        seen = client.run(
            lambda: (
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                os.environ.get("OMP_NUM_THREADS"),
                os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            )
        )
    assert sorted(seen.values()) == [("0", "1", None), ("1", "1", None)]


def test_no_more_workers_than_runs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with sweeps.start_local_cluster(workers=4, runs=1) as cluster:
        assert len(cluster.workers) == 1


def test_every_run_is_single_threaded_and_threads_are_restored():
    """One thread for every run, wherever it runs: what makes the executors agree."""
    from threadpoolctl import threadpool_info

    def threads(config: dict) -> dict:
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        return {"torch": torch.get_num_threads(), "blas": blas}

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        (seen,) = run_sweep(threads, [{"name": "a"}])
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen["torch"] == 1 and all(n == 1 for n in seen["blas"])
