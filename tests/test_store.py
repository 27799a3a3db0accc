"""posgeom_utils.repro.store: memoised reference runs, keyed by configuration and by the chapter's normalised code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from posgeom_utils.repro import store
from posgeom_utils.repro.results import RESULTS_ENV
from posgeom_utils.repro.store import StaleStoreError, memoised, memoised_sweep

HEADER = "---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n---\n\n"
CHAPTERS = {
    "v1": HEADER + '```{code-cell} ipython3\ndef run(config):\n    """Twice a."""\n    return {"x": config["a"] * 2}\n```\n',
    # the same code: another docstring, a comment, another layout, other prose
    "v2": HEADER + "Some prose.\n\n```{code-cell} ipython3\ndef run(config):\n    \"\"\"Two times a.\"\"\"\n"
          '    # double it\n    return {"x": config["a"]*2}\n```\n',
    "v3": HEADER + '```{code-cell} ipython3\ndef run(config):\n    """Twice a."""\n    return {"x": config["a"] * 3}\n```\n',
}


def double(config):
    return {"x": config["a"] * 2}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A checkout with one chapter, ``toy``, and its store; ``toy(version)`` writes the chapter's code."""
    monkeypatch.setattr(store, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(store, "STORE", tmp_path / "store")
    monkeypatch.delenv("POSGEOM_EXECUTOR", raising=False)
    (tmp_path / "notebooks").mkdir()
    shutil.copy(Path(store.__file__).resolve().parents[2] / "requirements.txt", tmp_path / "requirements.txt")

    def write(version: str) -> None:
        (tmp_path / "notebooks" / "toy.md").write_text(CHAPTERS[version])
    return write


def sweep(profile="reference"):
    runs = [{"name": f"a{a}", "a": a} for a in (1, 2)]
    return [r["x"] for r in memoised_sweep(double, runs, chapter="toy", name="double", profile=profile)]


def test_the_book_build_reads_the_store_and_refuses_a_stale_one(tmp_path, toy, monkeypatch):
    toy("v1")
    with pytest.raises(StaleStoreError, match=r"posgeom run --profile reference --chapters toy"):
        sweep()  # nothing stored yet: the book build stops before computing
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results.json"))  # under `posgeom run`: computed, stored
    assert sweep() == [2, 4]
    folder = tmp_path / "store" / "toy" / "double"
    assert sorted(p.name for p in folder.iterdir()) == ["a1.json", "a2.json"]
    monkeypatch.delenv(RESULTS_ENV)
    # the same code (a docstring, a comment, a reformat, prose): read from the store, not recomputed
    toy("v2")
    (folder / "a1.json").write_text((folder / "a1.json").read_text().replace('"x": 2', '"x": 99'))
    assert sweep() == [99, 4]
    toy("v3")  # a change of behaviour: stale, never shown silently
    with pytest.raises(StaleStoreError, match="2 of the 2"):
        sweep()


def test_other_profiles_never_touch_the_store(tmp_path, toy):
    toy("v1")
    assert sweep(profile="smoke") == [2, 4]
    assert not (tmp_path / "store").exists()
    assert memoised(double, {"a": 5}, chapter="toy", name="one", profile="default") == {"x": 10}
    assert memoised(double, {"a": 5}, chapter="gone", name="one", profile="default") == {"x": 10}
    with pytest.raises(FileNotFoundError, match="chapter='gone'"):
        memoised(double, {"a": 5}, chapter="gone", name="one", profile="reference")


def test_a_narrower_code_key_and_the_configuration(tmp_path, toy, monkeypatch):
    """``code=`` (the learned-geometry chapter keys its runs by the modules they use) replaces the
    chapter's hash: an edit of the chapter's cells keeps the runs; a new key or configuration does not."""
    toy("v1")
    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "results.json"))
    runs = [{"name": "a1", "a": 1}]
    options = dict(chapter="toy", name="keyed", profile="reference")
    assert memoised_sweep(double, runs, code="modules-1", **options) == [{"x": 2}]
    monkeypatch.delenv(RESULTS_ENV)
    toy("v3")  # another chapter code: the narrower key still holds
    assert memoised_sweep(lambda c: 1 / 0, runs, code="modules-1", **options) == [{"x": 2}]
    with pytest.raises(StaleStoreError, match="1 of the 1"):
        memoised_sweep(double, runs, code="modules-2", **options)
    with pytest.raises(StaleStoreError, match="1 of the 1"):
        memoised_sweep(double, [{"name": "a1", "a": 3}], code="modules-1", **options)


def test_a_readers_own_parameters_compute_and_never_touch_the_store(tmp_path, toy, monkeypatch):
    """papermill ``-p`` at the reference profile (the README's example): the runs are the reader's, not
    the book's, so they are computed, not refused, and nothing is written to the committed store."""
    from posgeom_utils.repro.results import _RUN

    toy("v1")
    cell = '```{code-cell} ipython3\n:tags: [parameters]\n\nscale = 2  # how much\n```\n\n'
    (tmp_path / "notebooks" / "toy.md").write_text(HEADER + cell + CHAPTERS["v1"][len(HEADER):])
    monkeypatch.setitem(_RUN, "parameters", {"profile": "reference", "scale": 2})
    with pytest.raises(StaleStoreError, match="2 of the 2"):
        sweep()  # the values as written: the book's runs, refused when missing
    monkeypatch.setitem(_RUN, "parameters", {"profile": "reference", "scale": 3})
    assert sweep() == [2, 4]  # -p scale 3: computed
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "notebooks").glob("*.md")))
def test_every_chapter_as_written_is_the_book_run(chapter: str) -> None:
    """The book build reads the store only when a chapter's parameters are its cell's values as written:
    every chapter's own values must read as written, or its build would recompute instead."""
    import jupytext

    from posgeom_utils.repro.results import _plain
    from posgeom_utils.repro.store import as_written

    source = Path(__file__).resolve().parents[1] / "notebooks" / f"{chapter}.md"
    cell = next(c for c in jupytext.read(source).cells if "parameters" in c.metadata.get("tags", []))
    namespace: dict = {}
    exec(cell.source, namespace)  # noqa: S102 - the chapter's own literal parameters cell
    values = {k: _plain(v) for k, v in namespace.items() if not k.startswith("_")}
    assert as_written(source, values)
    changed = next(k for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool))
    assert not as_written(source, {**values, changed: values[changed] + 1})
