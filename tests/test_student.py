"""The student edition (``make student``, ``scripts/make_student.py``) of *Teaching with this book*, checked
by structure, nothing executed: no worked solution reaches a student, every exercise and its cell stay, the
parameters are the class profile's, outputs are cleared and each notebook is valid nbformat; no MyST markup
is left in the prose, glued values are the reference results' numbers (formatted by myst-nb's own
formatter) and every ``{literalinclude}`` is the source it includes."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import re
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest
from myst_nb.core.variables import format_plain_text

from posgeom_utils.repro.profiles import chapter_parameters

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.md"))
spec = importlib.util.spec_from_file_location("make_student", ROOT / "scripts" / "make_student.py")
make_student = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make_student)
#: MyST markup a Jupyter user would read raw: a directive fence, a role, a ``(label)=`` target
RAW = re.compile(
    r"(`{3,}|:{3,})\{|\{prf:|\{ref\}|\{glue|\{doc\}|\{cite|\{numref\}|\{eq\}|\{math\}"
    r"|^[ \t>]*\([^()\s]+\)=[ \t]*$",
    re.M,
)
#: a Markdown code block (a listing: its text is source code, docstring roles included, not markup)
CODE_BLOCK = re.compile(r"^[ \t>]*(`{3,})[\w+-]*[ \t]*\n.*?^[ \t>]*\1[ \t]*$", re.M | re.S)
#: a ``{literalinclude}`` of a chapter: its path and its option lines
INCLUDE = re.compile(r"^`{3,}\{literalinclude\} (\S+)\n((?::[\w-]+:.*\n)*)", re.M)


@pytest.fixture(scope="module")
def student(tmp_path_factory: pytest.TempPathFactory) -> dict[str, nbformat.NotebookNode]:
    out = tmp_path_factory.mktemp("student")
    assert make_student.main(["--out", str(out)]) == 0
    return {chapter: nbformat.read(out / f"{chapter}.ipynb", as_version=4) for chapter in CHAPTERS}


def solution_lines(chapter: str) -> dict[str, list[str]]:
    """Per worked solution of ``chapter`` with code (by label), the lines of its python blocks that the
    chapter prints nowhere outside its solutions."""
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    outside = make_student.SOLUTION.sub("", text)
    for path, lines in INCLUDE.findall(outside):  # the book prints the code its listings include too
        options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", lines, re.M))
        options = {key: value.strip('"') for key, value in options.items()}
        outside += make_student.included_source(ROOT / "notebooks" / path, options)
    lines = {}
    for solution in make_student.SOLUTION.finditer(text):
        code = "\n".join(re.findall(r"```python\n(.*?)```", solution[0], re.S)).splitlines()
        label = solution[0].split("\n", 1)[0].split()[-1]
        if code:
            lines[label] = [s for s in map(str.strip, code) if s and s not in outside]
    return lines


def leaks(chapter: str, notebook: nbformat.NotebookNode) -> list[str]:
    text = "\n".join(cell.source for cell in notebook.cells)
    return [line for lines in solution_lines(chapter).values() for line in lines if line in text]


def markdown_of(notebook: nbformat.NotebookNode) -> str:
    return "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")


def source_markdown(chapter: str) -> str:
    """The markdown of ``chapter``'s source, its worked solutions removed (what a student may see)."""
    return markdown_of(jupytext.read(ROOT / "notebooks" / f"{chapter}.md")).replace("\r", "")


def reference(chapter: str) -> dict:
    """The ``results`` mapping of ``chapter``'s committed reference results."""
    path = ROOT / "book" / "results" / "reference" / chapter / "results.json"
    return json.loads(path.read_text())["results"]


def tagged(notebook: nbformat.NotebookNode, tag: str) -> list[str]:
    return [c.source for c in notebook.cells if tag in c.metadata.get("tags", [])]


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_solution_reaches_a_student(student: dict, chapter: str) -> None:
    notebook = student[chapter]
    assert not leaks(chapter, notebook), f"{chapter}: solution code in the student notebook"
    assert "{solution" not in "\n".join(cell.source for cell in notebook.cells)
    assert leaks(chapter, jupytext.read(ROOT / "notebooks" / f"{chapter}.md")), "the check can fail"
    assert all(solution_lines(chapter).values()), "a solution whose code the check cannot see"
    text = (ROOT / "notebooks" / f"{chapter}.md").read_text()
    for label in re.findall(r"^:label: (ex-\S+)", text, re.M):
        assert f"{{solution}} {label}" in text, f"{label} has no worked solution"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_exercises_stay_and_parameters_are_class(student: dict, chapter: str) -> None:
    notebook, source = student[chapter], jupytext.read(ROOT / "notebooks" / f"{chapter}.md")
    nbformat.validate(notebook)
    assert tagged(notebook, "exercise") == tagged(source, "exercise") != []
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    exercises = (ROOT / "notebooks" / f"{chapter}.md").read_text().count("{exercise}")
    # an exercise is a bold heading in the student edition (its directive markup is gone)
    assert markdown.count("**Exercise (") == exercises >= 3 and "{glue" not in markdown
    (parameters,) = tagged(notebook, "parameters")
    assert parameters.startswith(make_student.NOTE)
    assert make_student.PROFILE == "class"  # sized to show each chapter's effect in class
    for name, value in chapter_parameters(chapter, "class").items():
        assert re.search(rf"^{name} = {re.escape(repr(value))}(\s+#|$)", parameters, re.M), name
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert notebook.metadata["posgeom"] == {
        "edition": "student",
        "chapter": chapter,
        "profile": "class",
    }


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_myst_markup_is_left(student: dict, chapter: str) -> None:
    prose = CODE_BLOCK.sub("", markdown_of(student[chapter]))
    raw = [match[0] for match in RAW.finditer(prose)]
    assert not raw, f"{chapter}: raw MyST in the student notebook: {raw[:5]}"
    assert RAW.search(CODE_BLOCK.sub("", source_markdown(chapter))), "the check can fail"


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_glued_values_are_the_reference_numbers(student: dict, chapter: str) -> None:
    markdown = markdown_of(student[chapter])
    source, results = make_student.SOLUTION.sub("", source_markdown(chapter)), reference(chapter)
    roles = re.findall(r"\{glue(?::\w+)?\}`([^`]+)`", source)
    assert roles, f"{chapter} glues nothing"
    for role in roles:
        key, _, fmt = role.partition(":")
        assert key in results or key == "provenance", f"{chapter}: {key} is not in the reference results"
        if key in results:  # the book's own formatter: what the rendered book shows
            assert format_plain_text(repr(results[key]), fmt or "s") in markdown, (chapter, role)
    bare = make_student.GLUE.sub("", source)  # a key's name in backticks where the chapter writes it
    for key in {role.partition(":")[0] for role in roles}:
        assert markdown.count(f"`{key}`") <= bare.count(f"`{key}`"), f"{chapter}: bare glue name {key}"
    assert "the book's reference results" in markdown


def test_a_glued_interval_reads_as_numbers(student: dict) -> None:
    results = reference("learned_geometry")
    low, peak, high = (results[f"peak_real{end}"] for end in ("_low", "", "_high"))
    assert f"{peak:.2f} [{low:.2f}, {high:.2f}]" in markdown_of(student["learned_geometry"])
    assert "`peak_real`" not in markdown_of(student["learned_geometry"])


def test_a_glued_key_without_a_value_names_chapter_and_key() -> None:
    page = make_student.Page("learned_geometry", {})
    with pytest.raises(LookupError, match=r"learned_geometry: the glued key 'peak_real'"):
        make_student.render_markdown("within-lag correlation {glue:text}`peak_real:.2f`", page)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_literalincludes_are_their_source(student: dict, chapter: str) -> None:
    markdown = markdown_of(student[chapter])
    source = make_student.SOLUTION.sub("", source_markdown(chapter))
    includes = INCLUDE.findall(source)
    blocks = len(re.findall(r"^```python$", source, re.M)) + len(includes)
    assert len(re.findall(r"^[ >]*`{3,}python$", markdown, re.M)) == blocks >= len(includes) > 0
    for path, lines in includes:
        options = dict(re.findall(r"^:([\w-]+):[ \t]*(.*)$", lines, re.M))
        module, (first, *rest) = Path(path).with_suffix("").parts[1:], options["pyobject"].split(".")
        if module[0] != "posgeom_utils" or first.startswith("_"):
            continue  # a script, or a class defined inside a function: counted above
        obj = getattr(importlib.import_module(".".join(module)), first)
        for name in rest:
            obj = getattr(obj, name)
        code = inspect.getsource(getattr(obj, "fget", obj))  # Python's own source, decorators included
        if "start-after" in options:
            code = code.split(options["start-after"].strip('"'), 1)[1].split("\n", 1)[1]
        code = textwrap.dedent(code) if "dedent" in options else code
        assert code.rstrip("\n") in markdown, f"{chapter}: {options['pyobject']} is not listed"


def test_the_learned_geometry_listings(student: dict) -> None:
    markdown = markdown_of(student["learned_geometry"])
    for name in ("within_lag_correlation", "mask_batch", "reference_geometries"):
        assert f"\n```python\ndef {name}(" in markdown, name
    assert "class LowRankPositionalEncoding(nn.Module):" in markdown_of(student["low_rank"])


def test_markup_of_every_kind(tmp_path: Path) -> None:
    code = tmp_path / "code.py"
    code.write_text(
        "import x\n\n\n@decorated\ndef f(a):\n    # start\n    b = a\n    # end\n    return b\n"
    )
    text = f"""(sec-x)=
## A section

::::{{prf:theorem}} Big
:label: thm-big

Says {{math}}`x^2`, see {{ref}}`the section <sec-x>` and {{ref}}`chap-mds`;
{{cite:t}}`vaswani2017attention`.

:::{{note}}
Nested, {{cite:p}}`nobody2000,kruskal1964nonmetric`.
:::

```{{literalinclude}} {code}
:pyobject: f
:start-after: "# start"
:end-before: "# end"
:dedent:
```
::::

{{prf:ref}}`thm-big`, {{prf:ref}}`def-hellinger`, {{numref}}`fig-layers`, {{doc}}`../book/scale_out`.
"""
    page = make_student.Page("layerwise", {}, ROOT / "notebooks")
    out = make_student.render_markdown(text, page)
    assert not RAW.search(CODE_BLOCK.sub("", out)), out
    assert "**Theorem (Big).**" in out and "Says $x^2$, see the section and *The optimal encoding: " in out
    assert "Vaswani et al. (2017)" in out and "> **Note**\n>\n> Nested, (nobody2000; Kruskal, 1964)." in out
    assert "```python\nb = a\n```" in out and "# end" not in out
    assert "thm big, Definition *Hellinger distance* in *Notation" in out and "Figure 1," in out
    assert "*Beyond one machine*." in out
    assert make_student.included_source(code, {"pyobject": "f"}).startswith("@decorated\ndef f(a):")
    assert make_student.included_source(code, {"lines": "1,5-"}) == "import x\ndef f(a):\n" + "".join(
        code.read_text().splitlines(True)[5:]
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_figure_has_its_caption_under_it(student: dict, chapter: str) -> None:
    cells = student[chapter].cells
    drawn = [i for i, c in enumerate(cells) if "figure" in c.metadata.get("mystnb", {})]
    assert drawn, f"{chapter} draws no captioned figure"
    for k, i in enumerate(drawn, 1):
        assert cells[i + 1].source.startswith(f"**Figure {k}.** "), f"{chapter}: figure {k} has no caption"


def test_a_numbered_figure_reference() -> None:
    page = make_student.Page("layerwise", {})
    text = "({numref}`fig-layers`, top left; {numref}`fig-layers-sinusoidal`)"
    out = make_student.render_markdown(text, page)
    assert out == "(Figure 1, top left; Figure 3)"
