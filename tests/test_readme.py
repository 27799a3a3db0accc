"""Every command in the README runs exactly as written, from the repository root.

The commands are those of the README's ```bash blocks (``\\`` continuations joined, ``# ...`` comments
dropped). The ``make`` commands (the book build, the tests, the PDF: half an hour) must appear literally in
``.ci/run``, which runs them on a fresh clone. Every other block is run here as one ``bash -e`` script from
the repository root, offline, with no ``POSGEOM_*`` variable inherited (a command that works only because
``make test`` exported an absolute ``POSGEOM_DATA_DIR`` would fail a newcomer) and a fresh cache; whatever it
writes under ``runs/`` (git-ignored) is removed afterwards. Commands that cannot run here (a GPU, a Dask
cluster, the hub) belong in ``docs/``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"
DATA = ROOT.parent / "shared" / "data"  # ../shared/data, as the README writes it
POSGEOM = ROOT / ".venv" / "bin" / "posgeom"
TIMEOUT_S = 300  # per block; together they take about a minute and a half on the 2-core machine
#: what a README command must not need: a GPU, a cluster, the hub, a path of the reader's own
UNAVAILABLE = ("cuda", "tcp://", "s3://", "--hub", "accelerate ", "torchrun", "bert-base-uncased",
               "/path/to", "<chapter>")
#: entries at the top of the checkout that tools may create while the tests run
TOLERATED = {".pytest_cache", ".hypothesis", ".cache", "__pycache__", "runs"}


def strip_comment(line: str) -> str:
    """``line`` without its shell comment: a ``#`` outside quotes, at the start or after a blank."""
    quote, k = None, 0
    while k < len(line):
        ch = line[k]
        if quote:
            if ch == "\\" and quote == '"':
                k += 1  # an escaped character inside double quotes
            elif ch == quote:
                quote = None
        elif ch == "\\":
            k += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k].rstrip()
        k += 1
    return line.rstrip()


def commands(script: str) -> list[str]:
    """The commands of a shell script, one string each: ``\\`` continuations joined, comments and blank
    lines dropped, blanks squeezed."""
    out, pending = [], ""
    for raw in script.splitlines():
        line = strip_comment(raw)
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        line, pending = (pending + line.strip()).strip(), ""
        if line:
            out.append(" ".join(line.split()))
    if pending.strip():
        out.append(" ".join(pending.split()))
    return out


def programs(command: str) -> list[str]:
    """The programs a command line calls: the first word of each part of a pipeline or list, after any
    ``NAME=value`` prefixes (quotes respected)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    found, start = [], True
    for token in lexer:
        if token and set(token) <= set("|&;()<>"):
            start = token not in {">", ">>", "<", "2>"}
            continue
        if start and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token):
            found.append(token)
            start = False
    return found


def bash_blocks(text: str) -> list[str]:
    """The bodies of the ```bash fenced blocks of a Markdown text, in order."""
    return re.findall(r"^```bash[ \t]*\n(.*?)^```[ \t]*$", text, flags=re.M | re.S)


def is_long(command: str) -> bool:
    """A ``make`` command: run by ``.ci/run``, too long to run here."""
    return command.split()[0] == "make"


BLOCKS = bash_blocks(README.read_text(encoding="utf-8"))
RUN_BLOCKS = [b for b in BLOCKS if commands(b) and not any(is_long(c) for c in commands(b))]


def test_extraction_joins_continuations_and_drops_comments():
    script = (
        "# a comment line\n"
        "make book X=../d   # builds\n"
        "\n"
        ".venv/bin/jupytext --to ipynb -o - a.md \\\n"
        "  | .venv/bin/papermill - runs/x.ipynb -p n 128   # trailing\n"
        "echo '# not a comment' \"a # b\" x#y\n"
    )
    assert commands(script) == [
        "make book X=../d",
        ".venv/bin/jupytext --to ipynb -o - a.md | .venv/bin/papermill - runs/x.ipynb -p n 128",
        "echo '# not a comment' \"a # b\" x#y",
    ]
    assert programs("X=1 .venv/bin/a b | Y=2 .venv/bin/c && mkdir -p runs") == [
        ".venv/bin/a", ".venv/bin/c", "mkdir"]
    assert programs(""".venv/bin/python -c "import a; a.b('x')" > out.txt""") == [".venv/bin/python"]
    text = "text\n```bash\nls\n```\n\n```python\nx = 1\n```\n```bash\npwd \\\n  -L\n```\n"
    assert [commands(b) for b in bash_blocks(text)] == [["ls"], ["pwd -L"]]


def test_the_readme_has_its_two_commands_and_runnable_blocks():
    found = [c for b in BLOCKS for c in commands(b)]
    assert any(c.startswith("make book ") for c in found), found
    assert any(c.startswith("make test ") for c in found), found
    assert RUN_BLOCKS, "the README has no block of commands to try"


def test_make_commands_are_the_ones_ci_runs():
    """CI runs the README's make commands literally, so CI fails when the README would."""
    ci = set(commands(CI.read_text(encoding="utf-8")))
    for block in BLOCKS:
        cmds = commands(block)
        if not any(is_long(c) for c in cmds):
            continue
        others = [c for c in cmds if not is_long(c)]
        assert not others, f"a block with make commands holds others, which nothing runs: {others}"
        for command in cmds:
            assert command in ci, f"the README's {command!r} is not run, as written, by .ci/run"


def test_no_readme_command_needs_what_a_fresh_clone_lacks():
    for block in BLOCKS:
        for command in commands(block):
            bad = [word for word in UNAVAILABLE if word in command]
            assert not bad, f"{command!r} needs {bad}: move it to docs/"
            for program in programs(command):
                if program in {"mkdir", "export", "make", "cd"}:
                    continue
                assert program.startswith(".venv/bin/"), (
                    f"{command!r} calls {program!r}: call the checkout's tools as .venv/bin/..., "
                    "the virtual environment is not on a newcomer's PATH")


def _environment(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POSGEOM_")}
    env.update(POSGEOM_CACHE_DIR=str(cache), POSGEOM_PROGRESS="0", HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return env


def _block_id(block: str) -> str:
    first = commands(block)[-1].split()
    return " ".join(w.removeprefix(".venv/bin/") for w in first[:3])


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[_block_id(b) for b in RUN_BLOCKS])
def test_readme_block_runs_as_written(block, tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"no data folder at {DATA} (the README's commands read ../shared/data)")
    if not POSGEOM.exists():
        pytest.skip(f"{POSGEOM.relative_to(ROOT)} is missing: run `make env` first")
    runs = ROOT / "runs"
    had_runs = runs.exists()
    before = set(os.listdir(runs)) if had_runs else set()
    top = set(os.listdir(ROOT))
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", block], cwd=ROOT,
                            env=_environment(tmp_path / "cache"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the block and what it started (a kernel, workers)
        output, _ = proc.communicate()
        pytest.fail(f"the README block ran past {TIMEOUT_S} s:\n{block}\n{output[-3000:]}")
    finally:
        if runs.exists():
            if had_runs:
                for name in set(os.listdir(runs)) - before:
                    path = runs / name
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            else:
                shutil.rmtree(runs)
    assert proc.returncode == 0, (
        f"the README block exited with {proc.returncode}:\n{block}\n--- output (tail) ---\n{output[-4000:]}")
    stray = set(os.listdir(ROOT)) - top - TOLERATED
    assert not stray, f"the README block wrote {sorted(stray)} into the checkout: write under runs/"
