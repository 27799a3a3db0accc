"""Every chapter is registered in every place that CONTRIBUTING.md (*Adding a
chapter*) lists, and nothing is registered that is not a chapter.

The chapters are those of the ``reference`` profile (``posgeom_utils.repro.profiles``:
what the book shows); ``notebooks/*.md`` and the ``notebooks/`` pages of ``_toc.yml``
must name the same ones. One test per chapter and checklist item, so a failure names
both; then, registry by registry, the reverse. The student edition has no registry of
its own (``scripts/make_student.py`` takes every ``notebooks/*.md``; it needs the
``class`` profile entry and the reference results, both checked here). The checks are
plain functions of a checkout, planted first on a made-up chapter they must fail.

Cheap: files read as text, YAML or JSON; no chapter executed, no code hash computed
(``tests/test_runner.py`` checks that the committed results are fresh).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
import yaml

from posgeom_utils.repro.ledger import load_claims
from posgeom_utils.repro.profiles import PROFILES
from posgeom_utils.teaching import SESSIONS

ROOT = Path(__file__).resolve().parents[1]
#: the chapters: what the book shows
CHAPTERS = sorted(PROFILES["reference"])
#: the profiles whose results are committed, every chapter each
#: (``book/results/<profile>/<chapter>/results.json``)
COMMITTED = ("reference", "class", "smoke")
#: the other folders of ``book/results``: not a profile's runs
OTHER_RESULTS = {
    "store": "the memoised reference runs, <chapter>/<sweep>/<run>.json",
    "forensics": "the grid of scripts/stress_forensics.py",
    "sensitivity": "the grid of scripts/sensitivity.py",
}
#: chapters that no row of book/paper_claims.yaml names (as ``chapter`` or in
#: ``also``), and why; test_every_exception_is_still_needed keeps this list true
NO_LEDGER_ROW = {
    # chapter 1 measures the object the paper's results are about (the positional
    # marginals); the paper reports no number for it (repro.paper.REPORTED) and the
    # chapter weighs the paper's intuitions on starts and ends in its own prose
    "positions_in_real_text": "judges no claim of the paper's ledger",
}
#: memoised sweeps whose reference runs are not committed yet, {(chapter, sweep): why}
STORE_PENDING: dict[tuple[str, str], str] = {}
#: a code cell of a MyST chapter: its fence, options and code
CELL = re.compile(
    r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1[ \t]*$", re.MULTILINE | re.DOTALL
)
MEMOISE = {"memoised", "memoised_sweep"}


# ------------------------------------------------------------------ reading a checkout


def text(root: Path, path: str) -> str:
    """The file ``path`` of the checkout ``root``, empty if it does not exist."""
    file = root / path
    return file.read_text(encoding="utf-8") if file.is_file() else ""


def code_cells(source: str) -> list[tuple[str, str]]:
    """(options, code) of every code cell of a MyST chapter: the options are its leading
    ``:key: value`` lines or ``---`` block, the code has no IPython magic or shell
    line."""
    cells = []
    for _, body in CELL.findall(source):
        options = ""
        if body.startswith("---\n") and "\n---\n" in body[3:]:
            options, body = body[4:].split("\n---\n", 1)
        lines = body.splitlines()
        while lines and lines[0].startswith(":"):
            options += "\n" + lines.pop(0)
        code = [line for line in lines if not line.lstrip().startswith(("%", "!"))]
        cells.append((options, "\n".join(code)))
    return cells


def tags(options: str) -> list[str]:
    """The tags a code cell's options give it."""
    found = re.search(r"tags:\s*\[([^\]]*)\]", options)
    return [t.strip(" '\"") for t in found[1].split(",")] if found else []


@cache
def memoised_sweeps(root: Path, chapter: str) -> dict[str, str]:
    """``{sweep name: chapter it is stored under}`` of every ``memoised(...)`` and
    ``memoised_sweep(...)`` call with literal ``name=`` in ``chapter``'s code cells."""
    found = {}
    for _, code in code_cells(text(root, f"notebooks/{chapter}.md")):
        for node in ast.walk(ast.parse(code)):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", getattr(node.func, "attr", None))
            if called not in MEMOISE:
                continue
            kw = {k.arg: k.value for k in node.keywords}
            if isinstance(name := kw.get("name"), ast.Constant):
                under = kw.get("chapter")
                found[name.value] = getattr(under, "value", chapter)
    return found


def toc_pages(root: Path) -> list[str]:
    """Every page of ``_toc.yml`` (``notebooks/necessity``), nested sections too."""
    toc = yaml.safe_load(text(root, "_toc.yml")) or {}
    pages, todo = [toc["root"]] if "root" in toc else [], [toc]
    while todo:
        node = todo.pop(0)
        for entry in [*node.get("parts", []), *node.get("chapters", [])]:
            pages += [entry["file"]] if "file" in entry else []
            todo.append({"chapters": entry.get("chapters", [])})
            todo.append({"chapters": entry.get("sections", [])})
    return pages


@cache
def ledger_chapters(root: Path) -> list[str]:
    """The chapters the ledger's rows name (``chapter``, ``also``), once per row."""
    path = root / "book" / "paper_claims.yaml"
    claims = load_claims(path) if path.is_file() else []
    return [c for claim in claims for c in dict.fromkeys([claim.chapter, *claim.also])]


def stored(root: Path, chapter: str, sweep: str) -> bool:
    """Whether the store holds runs of ``sweep`` of ``chapter``."""
    return any((root / "book/results/store" / chapter / sweep).glob("*.json"))


# ------------------------------------------------------------------ the checklist


def check_notebook(name: str, root: Path) -> list[str]:
    """The chapter source: a jupytext MyST notebook, one ``parameters`` cell, the
    parameters block and the provenance line of this chapter."""
    path = f"notebooks/{name}.md"
    source = text(root, path)
    if not source:
        return [f"no {path}"]
    problems = []
    header = source.split("\n---", 1)[0]
    if not source.startswith("---") or "format_name: myst" not in header:
        problems.append(f"{path} has no jupytext MyST header")
    cells = code_cells(source)
    tagged = [c for c in cells if "parameters" in tags(c[0])]
    if len(tagged) != 1:
        problems.append(f"{path} has {len(tagged)} cells tagged `parameters`, not 1")
    for call in (f'show_parameters("{name}", globals())', f'glue_provenance("{name}")'):
        if not any(call in code for _, code in cells):
            problems.append(f"{path} does not call {call}")
    return problems


def check_toc(name: str, root: Path) -> list[str]:
    """A page of ``_toc.yml``."""
    found = f"notebooks/{name}" in toc_pages(root)
    return [] if found else [f"_toc.yml lists no `- file: notebooks/{name}`"]


def check_profiles(name: str, root: Path) -> list[str]:
    """An entry in every profile of ``posgeom_utils/repro/profiles.py``."""
    where = "posgeom_utils/repro/profiles.py"
    return [
        f"{where}: no entry in PROFILES[{p!r}]"
        for p in PROFILES
        if name not in PROFILES[p]
    ]


def check_results(name: str, root: Path) -> list[str]:
    """Committed results of every committed profile, of this chapter, from a clean
    tree."""
    problems = []
    for profile in COMMITTED:
        path = f"book/results/{profile}/{name}/results.json"
        if not (payload := text(root, path)):
            fix = f"posgeom run --profile {profile} --chapters {name}"
            problems.append(f"no {path} ({fix} --out book/results/{profile})")
            continue
        run = json.loads(payload)
        prov = run.get("provenance", {})
        if run.get("chapter") != name or prov.get("profile") != profile:
            got = (run.get("chapter"), prov.get("profile"))
            problems.append(f"{path} holds the results of (chapter, profile) {got}")
        if prov.get("dirty") is not False:
            problems.append(f"{path}: provenance dirty is {prov.get('dirty')!r}")
    return problems


def check_store(name: str, root: Path) -> list[str]:
    """The committed reference runs of every sweep the chapter memoises."""
    problems = []
    for sweep, under in memoised_sweeps(root, name).items():
        if under != name:
            problems.append(f"notebooks/{name}.md memoises {sweep!r} as {under!r}")
        elif (name, sweep) not in STORE_PENDING and not stored(root, name, sweep):
            problems.append(f"no runs in book/results/store/{name}/{sweep}/")
    return problems


def check_nbval(name: str, root: Path) -> list[str]:
    """The nbval reference, ``scripts/make_references.py``."""
    path = f"tests/notebooks/{name}.ipynb"
    found = (root / path).is_file()
    return [] if found else [f"no {path} (scripts/make_references.py {name})"]


def check_ledger(name: str, root: Path) -> list[str]:
    """A row of ``book/paper_claims.yaml``, unless excused (NO_LEDGER_ROW)."""
    if name in NO_LEDGER_ROW or name in ledger_chapters(root):
        return []
    return [f"no row of book/paper_claims.yaml has chapter: {name} or also: [{name}]"]


def check_course(name: str, root: Path) -> list[str]:
    """One session of the course plan (``posgeom_utils.teaching.SESSIONS``)."""
    count = sum(name in s.chapters for s in SESSIONS)
    if count == 1:
        return []
    return [f"posgeom_utils/teaching: {count} sessions of SESSIONS hold {name}, not 1"]


def check_preface(name: str, root: Path) -> list[str]:
    """A line of the preface's *What is in this edition*."""
    link = f"{{doc}}`../notebooks/{name}`"
    return (
        [] if link in text(root, "book/preface.md") else [f"book/preface.md: no {link}"]
    )


def check_readme(name: str, root: Path) -> list[str]:
    """A place in the README's *Reading path*."""
    path = f"`notebooks/{name}.md`"
    return [] if path in text(root, "README.md") else [f"README.md: no {path}"]


ITEMS: dict[str, Callable[[str, Path], list[str]]] = {
    "notebook": check_notebook,
    "toc": check_toc,
    "profiles": check_profiles,
    "results": check_results,
    "store": check_store,
    "nbval": check_nbval,
    "ledger": check_ledger,
    "course": check_course,
    "preface": check_preface,
    "readme": check_readme,
}


def missing(name: str, root: Path = ROOT) -> dict[str, list[str]]:
    """``{item: problems}`` of every checklist item ``name`` fails."""
    found = {item: check(name, root) for item, check in ITEMS.items()}
    return {item: problems for item, problems in found.items() if problems}


# ------------------------------------------------------------------ the reverse


def registered(root: Path = ROOT) -> dict[str, list[tuple[str, str]]]:
    """``{registry: [(name, where)]}``: every name each registry gives a chapter."""
    results, store = root / "book" / "results", root / "book" / "results" / "store"
    folders = sorted(p for p in results.glob("*") if p.is_dir())
    runs = [
        (p.name, f"book/results/{profile.name}/{p.name}/")
        for profile in folders
        if profile.name in PROFILES
        for p in sorted(profile.glob("*"))
    ]
    runs += [(p.name, f"book/results/{p.name}/") for p in folders]
    runs = [(n, w) for n, w in runs if n not in PROFILES and n not in OTHER_RESULTS]
    chapters = sorted(p for p in store.glob("*") if p.is_dir())
    sweeps = [(c.name, f"book/results/store/{c.name}/") for c in chapters]
    sweeps += [
        (
            c.name if s.name in memoised_sweeps(root, c.name) else "",
            f"{s.relative_to(root)}/",
        )
        for c in chapters
        for s in sorted(p for p in c.glob("*") if p.is_dir())
    ]
    readme, preface = text(root, "README.md"), text(root, "book/preface.md")
    return {
        "notebooks": [(p.stem, "notebooks/") for p in root.glob("notebooks/*.md")],
        "toc": [
            (page.removeprefix("notebooks/"), "_toc.yml")
            for page in toc_pages(root)
            if page.startswith("notebooks/")
        ],
        "profiles": [(c, f"PROFILES[{p!r}]") for p in PROFILES for c in PROFILES[p]],
        "results": runs,
        "store": sweeps,
        "nbval": [
            (p.stem, "tests/notebooks/") for p in root.glob("tests/notebooks/*.ipynb")
        ],
        "ledger": [(c, "book/paper_claims.yaml") for c in ledger_chapters(root)],
        "course": [(c, "SESSIONS") for s in SESSIONS for c in s.chapters],
        "preface": [
            (c, "book/preface.md")
            for c in re.findall(r"`\.\./notebooks/(\w+)`", preface)
        ],
        "readme": [
            (c, "README.md") for c in re.findall(r"notebooks/(\w+)\.md", readme)
        ],
    }


def strays(root: Path = ROOT, chapters: list[str] = CHAPTERS) -> dict[str, list[str]]:
    """``{registry: [where]}`` of every registration that names no chapter."""
    found = {}
    for registry, pairs in registered(root).items():
        places = [(name or "(a sweep no chapter memoises)", w) for name, w in pairs]
        if stray := [f"{w}: {n}" for n, w in places if n not in chapters]:
            found[registry] = stray
    return found


# ------------------------------------------------------------------ planted first


def test_a_planted_chapter_misses_every_item(tmp_path: Path) -> None:
    """A made-up chapter with a source that memoises a sweep fails every item."""
    header = "---\njupytext:\n  text_representation:\n    format_name: myst\n---\n\n"
    cell = '```{code-cell} ipython3\nrows = memoised_sweep(f, runs, name="grid")\n```\n'
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "planted.md").write_text(header + cell)
    found = missing("planted", tmp_path)
    assert sorted(found) == sorted(ITEMS), found
    # no parameters cell, no parameters block, no provenance line
    assert len(found["notebook"]) == 3, found["notebook"]
    assert len(found["profiles"]) == len(PROFILES)
    assert len(found["results"]) == len(COMMITTED)
    assert found["store"] == ["no runs in book/results/store/planted/grid/"]


def test_a_made_up_name_misses_every_item_in_this_checkout() -> None:
    """Without a source there is no sweep to store: every other item is reported."""
    found = missing("no_such_chapter")
    assert sorted(found) == sorted(set(ITEMS) - {"store"}), found
    assert found["notebook"] == ["no notebooks/no_such_chapter.md"]


def test_planted_strays_are_caught(tmp_path: Path) -> None:
    """Registrations of non-chapters in a made-up checkout are each reported."""
    for path in (
        "book/results/reference/ghost",
        "book/results/nightly",
        "book/results/store/necessity/ghost-sweep",
        "tests/notebooks",
    ):
        (tmp_path / path).mkdir(parents=True)
    (tmp_path / "tests/notebooks/ghost.ipynb").write_text("{}")
    toc = "root: x\nchapters:\n  - file: notebooks/ghost\n"
    (tmp_path / "_toc.yml").write_text(toc)
    found = strays(tmp_path)
    assert sorted(found) == ["nbval", "results", "store", "toc"], found
    assert len(found["results"]) == 2  # a non-chapter folder and a non-profile folder
    sweep = "book/results/store/necessity/ghost-sweep/"
    assert found["store"] == [f"{sweep}: (a sweep no chapter memoises)"]


# ------------------------------------------------------------------ this checkout


def test_the_chapter_lists_agree() -> None:
    """The reference profile, the chapter sources and the table of contents."""
    assert CHAPTERS, "the reference profile names no chapter"
    sources = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
    toc = sorted(
        p.removeprefix("notebooks/")
        for p in toc_pages(ROOT)
        if p.startswith("notebooks/")
    )
    assert CHAPTERS == sources, "PROFILES['reference'] and notebooks/*.md disagree"
    assert CHAPTERS == toc, (
        "PROFILES['reference'] and the notebooks/ pages of _toc.yml disagree"
    )
    assert set(COMMITTED) <= set(PROFILES)


@pytest.mark.parametrize(
    ("chapter", "item"),
    [(c, i) for c in CHAPTERS for i in ITEMS],
    ids=[f"{c}-{i}" for c in CHAPTERS for i in ITEMS],
)
def test_every_chapter_is_registered(chapter: str, item: str) -> None:
    problems = ITEMS[item](chapter, ROOT)
    assert not problems, f"{chapter}, {item}: " + "; ".join(problems)


@pytest.mark.parametrize("registry", sorted(registered()))
def test_nothing_registered_is_not_a_chapter(registry: str) -> None:
    places = strays().get(registry, [])
    assert not places, f"{registry} names what is not a chapter: {places}"


def test_every_exception_is_still_needed() -> None:
    """An exception names a chapter that really lacks what it excuses: remove it once
    the registration is there."""
    for chapter in NO_LEDGER_ROW:
        assert chapter in CHAPTERS, f"NO_LEDGER_ROW names {chapter}, not a chapter"
        assert chapter not in ledger_chapters(ROOT), (
            f"a ledger row names {chapter} now: remove it from NO_LEDGER_ROW"
        )
    for chapter, sweep in STORE_PENDING:
        assert sweep in memoised_sweeps(ROOT, chapter), (
            f"{chapter} no longer memoises {sweep!r}: remove it from STORE_PENDING"
        )
        assert not stored(ROOT, chapter, sweep), (
            f"book/results/store/{chapter}/{sweep}/ is committed now: remove it from "
            "STORE_PENDING"
        )
