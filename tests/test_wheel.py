"""The wheel a user installs: built from the sources, installed into a fresh venv that sees the
pinned dependencies but not this checkout; ``posgeom`` then runs from a folder outside it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from posgeom_utils.marginals import PositionalMarginals
from posgeom_utils.models import DEFAULT_MODEL

REPO = Path(__file__).resolve().parents[1]
SMOKE_CHAPTER = "layerwise"  # the fastest chapter at the smoke profile (book/results/smoke)


def run(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    """(the venv with the freshly built wheel installed, its environment, an empty folder)."""
    root = tmp_path_factory.mktemp("wheel")
    src, wheels, venv, work = root / "src", root / "wheels", root / "venv", root / "work"
    work.mkdir()
    shutil.copytree(
        REPO / "posgeom_utils", src / "posgeom_utils", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):  # a copy: the build leaves build/ in its source
        shutil.copy(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    offline = ["--no-deps", "--no-index", "-q", "--disable-pip-version-check"]
    build = ["wheel", *offline, "--no-build-isolation", "-w", wheels, src]
    run([sys.executable, "-m", "pip", *build], root, env)
    run([sys.executable, "-m", "venv", "--without-pip", venv], root, env)
    python = venv / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root, env)
    # the dependencies (pip among them): this environment's site-packages as a plain path line, so
    # the .pth files in it, the editable install of the checkout among them, are not processed
    (Path(site.stdout.strip()) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    (wheel,) = wheels.glob("posgeom_utils-*.whl")  # --ignore-installed: not the editable install
    run([python, "-m", "pip", "install", *offline, "--ignore-installed", wheel], root, env)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return venv, env, work


def test_installed_wheel_has_every_subpackage_and_the_command(installed):
    venv, env, work = installed
    imports = (
        "import posgeom_utils.scale.sweeps, posgeom_utils.scale.counting, posgeom_utils.teaching"
    )
    where = run(
        [venv / "bin" / "python", "-c", f"{imports}; print(posgeom_utils.__file__)"], work, env
    )
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout  # not the checkout
    assert "stress" in run([venv / "bin" / "posgeom", "--help"], work, env).stdout
    texts = ["the film was good", "a very dull story", "not funny and long", "great"]
    (work / "shard.txt").write_text("".join(t + "\n" for t in texts))
    argv = f"count shard.txt --model {DEFAULT_MODEL} --n 4 --serial --out c.npz".split()
    done = run([venv / "bin" / "posgeom", *argv], work, env)
    assert "counted 4 texts" in done.stdout, done.stdout
    assert PositionalMarginals.load(work / "c.npz").n == 4  # the counts: tests/test_count_cli.py


@pytest.mark.data
def test_installed_wheel_runs_a_chapter(installed, data_dir, tmp_path):
    venv, env, work = installed
    shutil.copytree(
        REPO / "notebooks", tmp_path / "notebooks", ignore=shutil.ignore_patterns("*.ipynb")
    )
    argv = ["run", "--profile", "smoke", "--source-dir", tmp_path / "notebooks"]
    argv += ["--chapters", SMOKE_CHAPTER, "--out", tmp_path / "out"]
    done = run([venv / "bin" / "posgeom", *argv], work, env | {"POSGEOM_DATA_DIR": str(data_dir)})
    assert "1 ran, 0 skipped, 0 failed" in done.stdout, done.stdout
    assert (tmp_path / "out" / SMOKE_CHAPTER / "results.json").is_file()
