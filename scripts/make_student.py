#!/usr/bin/env python
"""Write the student edition: ``student/<chapter>.ipynb`` for every chapter (``make student``).

Chapter: *Teaching with this book*. From each chapter source (``notebooks/<chapter>.md``):

- every worked solution (a ``{solution}`` block of a markdown cell) is removed;
- the exercises stay, and their code cells (tagged ``exercise``) stay as stubs, ``answer = None`` followed
  by the call of the chapter's check (``posgeom_utils.teaching``), which says whether an answer is right
  without revealing it;
- the MyST markup becomes Markdown that Jupyter shows: a glued number (``{glue:text}`key:.3f```) is the
  value of the committed reference results (``book/results/reference/<chapter>/results.json``) in its
  format; a theorem, definition, exercise ... (``{prf:...}``, ``{exercise}``) is a bold heading and its
  body; an admonition is a block quote; a cross-reference (``{ref}``, ``{prf:ref}``, ``{numref}``,
  ``{eq}``, ``{doc}``) is the title of what it names; a citation is author and year
  (``book/references.bib``); a ``{literalinclude}`` is the listing of the code it includes, as a Markdown
  code block (read, not run: the chapter imports the function from the package); a figure's caption is
  a markdown cell under the cell that draws it; a first cell says where the prose's numbers come from
  and defines the book's LaTeX macros (``\\dH``, ``\\stress``, ...) for Jupyter's MathJax;
- outputs are cleared, and the parameters cell is set to the ``class`` profile (sizes at which a chapter
  runs top to bottom in class within ten minutes on two CPU cores and shows its effect), with a comment
  saying how to get the book's scale back.

The notebooks need the package and the data like the book does (``pip install -e .``, ``POSGEOM_DATA_DIR``).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import textwrap
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jupytext  # noqa: E402
import nbformat  # noqa: E402
import yaml  # noqa: E402

from posgeom_utils.repro.profiles import chapter_parameters  # noqa: E402

SOURCES = ROOT / "notebooks"
#: the committed reference results, whose numbers the student edition's prose quotes
REFERENCE = ROOT / "book" / "results" / "reference"
#: a ``{solution}`` directive in a markdown cell, fenced by 3+ backticks or colons, up to its closing fence
SOLUTION = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}.*?^(?P=fence)[ \t]*\n?", re.M | re.S)
#: a glued value in the prose (``{glue:text}`key:.3f```): the key (group 1) and the rest of the role
GLUE = re.compile(r"\{glue(?::\w+)?\}`([^`:]+)(?::[^`]*)?`")
#: a MyST role, ``{name}`content```
ROLE = re.compile(r"\{(?P<name>[a-z]+(?::[a-z]+)?)\}`(?P<content>[^`]*)`")
#: a fence opening a code block or a directive (3+ backticks or colons, then its info)
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})(?P<info>.*)$")
#: a ``(label)=`` target line, and the display-math closing fence with a label, ``$$ (eq-label)``
TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=[ \t]*$")
EQUATION = re.compile(r"^\$\$[ \t]*\((?P<label>[^()\s]+)\)[ \t]*$")
#: admonition directives: their heading in the student edition (``admonition`` takes its own title)
ADMONITIONS = {
    name: name.capitalize()
    for name in "attention caution danger error hint important note tip warning".split()
} | {"seealso": "See also", "admonition": ""}
#: how myst-nb coerces a glued value before formatting it, by the format's type (``.0f``: float)
COERCE = {**dict.fromkeys("bcdoxX", int), **dict.fromkeys("eEfFgGn%", float), "s": str}
#: a theorem-like directive (``{prf:...}``, ``{exercise}``) with a ``:label:`` among its first options
LABELLED = re.compile(
    r"^[`:]{3,}\{(prf:\w+|exercise)\}[ \t]*(.*)\n(?:[ \t]*:[\w-]+:.*\n)*?[ \t]*:label:[ \t]*(\S+)", re.M
)
#: the profile a student notebook runs (posgeom_utils.repro.profiles)
PROFILE = "class"
#: the comment on top of a student's parameters cell
NOTE = (
    "# Student edition: the class profile (a run in class takes minutes and shows the chapter's\n"
    '# effect). For the book\'s scale set profile = "reference" and restore notebooks/<chapter>.md.\n'
)
#: the first cell of a student notebook: where the numbers of the prose come from
PREAMBLE = (
    "*Student edition. The numbers quoted in the text are the book's reference results; this notebook "
    "runs the smaller `class` profile, so the numbers its cells print differ.*"
)
#: cell tags that only shape the rendered book
BOOK_TAGS = set(
    "remove-cell remove-input remove-output hide-input hide-output hide-cell nbval-check-output "
    "nbval-ignore-output nbval-skip".split()
)


class Page(NamedTuple):
    """One chapter's markdown as the student edition renders it: its name, its reference values (key ->
    value) and the folder of its source. Chapter: *Teaching with this book*."""

    chapter: str
    results: dict
    source_dir: Path = SOURCES

    @property
    def path(self) -> Path:
        return (self.source_dir / f"{self.chapter}.md").resolve()


def reference_results(chapter: str, folder: Path = REFERENCE) -> dict:
    """The values ``chapter`` glues, from its committed reference results, and ``provenance``, a phrase
    saying where they come from. Chapter: *Teaching with this book*."""
    path = folder / chapter / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{chapter}: no reference results {path}: the prose has no numbers")
    payload = json.loads(path.read_text())
    prov = payload.get("provenance", {})
    line = (
        f"the book's reference results (profile {prov.get('profile', 'reference')}, commit "
        f"{str(prov.get('commit') or 'unknown')[:7]}, {str(prov.get('finished', ''))[:10]}), not "
        "this notebook's class run"
    )
    return {"provenance": line, **payload["results"]}


def glued(content: str, page: Page) -> str:
    """``{glue:text}`key:spec``` on ``page``: the reference value of ``key`` in the format ``spec``, coerced
    as myst-nb does (``d``: int, ``f``/``%``/...: float). Chapter: *Teaching with this book*."""
    key, _, spec = content.strip().partition(":")
    if key not in page.results:
        raise LookupError(
            f"{page.chapter}: the glued key {key!r} has no value in "
            f"{REFERENCE.relative_to(ROOT) / page.chapter / 'results.json'}"
        )
    value = COERCE.get(spec[-1:], lambda same: same)(page.results[key])
    return format(value, spec) if spec else str(value)


def words(label: str) -> str:
    """A label in plain words (``eq-best-scale``: ``best scale``). Chapter: *Teaching with this book*."""
    return label.removeprefix("eq-").replace("-", " ").replace("_", " ")


def _figures(text: str) -> list[dict]:
    """The ``mystnb.figure`` settings (name, caption) of a page's code cells, in order."""
    found = []
    for block in re.findall(r"^`{3,}\{code-cell\}[^\n]*\n---\n(.*?)\n---$", text, re.M | re.S):
        if figure := ((yaml.safe_load(block) or {}).get("mystnb") or {}).get("figure"):
            found.append(figure)
    return found


@cache
def targets(root: Path = ROOT) -> tuple[dict[str, tuple[str, Path]], dict[Path, str]]:
    """Every label of the book's pages (heading targets, theorems and exercises, figures, equations) ->
    (how a reference to it reads, its page), and each page's title. Chapter: *Teaching with this book*."""
    labels, titles = {}, {}
    for path in sorted([*(root / "notebooks").glob("*.md"), *(root / "book").glob("*.md")]):
        text, path = path.read_text(), path.resolve()
        title = re.search(r"^# +(.+)$", text, re.M)
        titles[path] = title[1].strip() if title else words(path.stem)
        headings = re.findall(r"^\(([^()\s]+)\)=\s*\n\s*#+ (.+)", text, re.M)
        found = [(label, f"*{heading.strip()}*") for label, heading in headings]
        for kind, name, label in LABELLED.findall(text):
            kind = kind.split(":")[-1].capitalize()
            found.append((label, f"{kind} *{name.strip()}*" if name.strip() else f"{kind} {words(label)}"))
        equations = re.findall(r"^\$\$[ \t]*\((\S+)\)", text, re.M)
        found += [(label, f"equation ({words(label)})") for label in equations]
        figures = enumerate(_figures(text), 1)
        found += [(figure["name"], f"Figure {k}") for k, figure in figures if figure.get("name")]
        labels.update((label, (reading, path)) for label, reading in found)
    return labels, titles


def reference(content: str, page: Page, role: str = "ref") -> str:
    """How a cross-reference (``{ref}``, ``{prf:ref}``, ``{numref}``, ``{eq}``, ``{doc}``) reads on
    ``page``: its explicit text, else what it names, and on which page when another. Chapter: *Teaching
    with this book*."""
    explicit = re.fullmatch(r"(?s)(.*?\S)\s*<([^<>]+)>", content.strip())
    text, label = explicit.groups() if explicit else ("", content.strip())
    if text and not re.search(r"%s|\{number\}|\{name\}", text):
        return text
    labels, titles = targets()
    if role == "doc":
        path = (ROOT / label.lstrip("/") if label.startswith("/") else page.source_dir / label)
        return f"*{titles.get(path.with_suffix('.md').resolve(), words(Path(label).name))}*"
    reading, where = labels.get(label, (words(label), page.path))
    if where != page.path and reading != f"*{titles[where]}*":
        reading += f" in *{titles[where]}*"
    return re.sub(r"%s|\{number\}|\{name\}", lambda _: reading, text) if text else reading


@cache
def bibliography(path: Path = ROOT / "book" / "references.bib") -> dict[str, tuple[str, str]]:
    """``key -> (authors, year)`` of the book's bibliography (``("Vaswani et al.", "2017")``).
    Chapter: *Teaching with this book*."""
    entries = {}
    for entry in re.split(r"^@", path.read_text(), flags=re.M)[1:]:
        key = re.match(r"\w+\s*\{\s*([^,\s]+)", entry)
        author = re.search(r"^\s*(?:author|editor)\s*=\s*[{\"](.*)[}\"]\s*,?\s*$", entry, re.M)
        year = re.search(r"^\s*year\s*=\s*[{\"]?(\d{4})", entry, re.M)
        if key and author and year:
            people = re.split(r"\s+and\s+", author[1])
            names = [re.sub(r"[{}\\]", "", p.split(",")[0] if "," in p else p.split()[-1]) for p in people]
            who = " and ".join(names) if len(names) <= 2 else f"{names[0]} et al."
            entries[key[1]] = (who, year[1])
    return entries


def citation(content: str, role: str = "cite:p") -> str:
    """``{cite:p}`key1,key2``` as ``(Author, year; ...)``, ``{cite:t}`` as ``Author (year)``; a key the
    bibliography lacks as ``[key]``. Chapter: *Teaching with this book*."""
    bib, keys = bibliography(), [k.strip() for k in content.split(",") if k.strip()]
    if role.startswith("cite:t"):
        return ", ".join(f"{bib[k][0]} ({bib[k][1]})" if k in bib else f"[{k}]" for k in keys)
    return "(" + "; ".join(", ".join(bib[k]) if k in bib else k for k in keys) + ")"


def inline(text: str, page: Page) -> str:
    """``text`` with its MyST roles rendered (glued values, references, citations, ``{math}``).
    Chapter: *Teaching with this book*."""

    def role(match: re.Match) -> str:
        name, content = match["name"], match["content"]
        if name in ("glue", "glue:text", "glue:md"):
            return glued(content, page)
        if name == "math":
            return f"${content}$"
        if name.startswith("cite"):
            return citation(content, name)
        if name in ("ref", "prf:ref", "numref", "eq", "doc"):
            return reference(content, page, name)
        raise ValueError(f"{page.chapter}: the student edition cannot render the role {{{name}}}")

    return ROLE.sub(role, text)


def python_object(text: str, dotted: str, path: Path) -> tuple[int, int]:
    """First and last line (1-based, decorators included) of the function or class ``dotted``
    (``Class.method``) of the Python source ``text``. Chapter: *Teaching with this book*."""
    node: ast.AST = ast.parse(text)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for name in dotted.split("."):
        scope = node
        inner = (n for n in ast.walk(scope) if isinstance(n, kinds) and n is not scope)
        node = next((n for n in inner if n.name == name), None)
        if node is None:
            raise ValueError(f"{path}: no function or class {dotted!r} (:pyobject: of a literalinclude)")
    return min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno


def line_numbers(spec: str, total: int) -> list[int]:
    """The 0-based indices of a ``:lines:`` spec (``1,3,5-10,20-``, 1-based). Chapter: *Teaching with this
    book*."""
    indices = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        first, dash, last = part.partition("-")
        start, stop = int(first or 1), (int(last) if last else total) if dash else int(first)
        indices += range(start - 1, min(stop, total))
    return indices


def included_source(path: Path, options: dict[str, str]) -> str:
    """What a ``{literalinclude}`` of ``path`` shows, its options applied in Sphinx's order: ``pyobject``,
    ``start-at``/``start-after``, ``end-at``/``end-before``, ``lines``, ``dedent``. Chapter: *Teaching
    with this book*."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    if "pyobject" in options:
        first, last = python_object(text, options["pyobject"], path)
        lines = lines[first - 1 : last]
    for option in ("start-at", "start-after", "end-at", "end-before"):
        if option in options:
            at = next((i for i, line in enumerate(lines) if options[option] in line), None)
            if at is None:
                where = f"(:{option}: of a literalinclude)"
                raise ValueError(f"{path}: no line has {options[option]!r} {where}")
            cut = {"start-at": (at, None), "start-after": (at + 1, None), "end-at": (0, at + 1)}
            lines = lines[slice(*cut.get(option, (0, at)))]
    if options.get("lines"):
        lines = [lines[i] for i in line_numbers(options["lines"], len(lines))]
    if "dedent" in options:
        width = options["dedent"].strip()
        dedented = textwrap.dedent("".join(lines)).splitlines(keepends=True)
        lines = [line[int(width) :] for line in lines] if width else dedented
    return "".join(lines)


def options_and_body(body: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's options (``:key: value`` lines or a ``---`` YAML block; quotes removed) and content.
    Chapter: *Teaching with this book*."""
    stripped = [line.strip() for line in body]
    if stripped[:1] == ["---"] and "---" in stripped[1:]:
        end = stripped.index("---", 1)
        loaded = yaml.safe_load("\n".join(body[1:end])) or {}
        return {key: "" if v is None else str(v) for key, v in loaded.items()}, body[end + 1 :]
    options, i = {}, 0
    while i < len(body) and (option := re.match(r"^\s*:([\w-]+):(?:\s+(.*))?$", body[i])):
        value = (option[2] or "").strip()
        quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "'\""
        options[option[1]] = value[1:-1] if quoted else value
        i += 1
    return options, body[i:]


def listing(argument: str, options: dict[str, str], page: Page) -> list[str]:
    """The Markdown code block a ``{literalinclude}`` of ``page`` becomes, under a line naming the file and
    object it comes from. Chapter: *Teaching with this book*."""
    path = (page.source_dir / argument.strip()).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{page.chapter}: a literalinclude of {argument!r}, which does not exist")
    code = included_source(path, options).rstrip("\n")
    fence = "`" * max([3, *(len(run) + 1 for run in re.findall(r"`{3,}", code))])
    where = f"`{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}`"
    where += f", `{options['pyobject']}`" if "pyobject" in options else ""
    where += f" (after `{options['start-after']}`)" if "start-after" in options else ""
    language = options.get("language", "python" if path.suffix == ".py" else "")
    return [f"*From {where}:*", "", fence + language, *code.splitlines(), fence]


def directive(info: str, body: list[str], page: Page) -> list[str]:
    """The Markdown lines of a directive (``{name} argument`` and its body): a theorem or exercise as a bold
    heading and its body, an admonition as a block quote, a listing as a code block. Chapter: *Teaching
    with this book*."""
    name, _, argument = info.strip()[1:].partition("}")
    options, content = options_and_body(body)
    if name == "literalinclude":
        return listing(argument, options, page)
    title = inline(argument.strip(), page)
    if name in ("glue", "glue:any", "glue:figure"):
        note = f"*The figure `{argument.strip()}` is drawn by the code cells of this notebook.*"
        return [note, "", *render_markdown("\n".join(content), page).splitlines()]
    inner = render_markdown("\n".join(content), page).strip("\n").splitlines()
    if name.startswith("prf:") or name == "exercise":
        kind = name.split(":")[-1].capitalize()
        return [f"**{kind} ({title}).**" if title else f"**{kind}.**", "", *inner]
    if name in ADMONITIONS:
        heading = (title or "Note") if name == "admonition" else ADMONITIONS[name]
        inner = inner if name == "admonition" or not title else [title, *inner]
        return [f"> {line}".rstrip() for line in [f"**{heading}**", "", *inner]]
    if name == "math":
        return ["$$", *content, "$$"]
    raise ValueError(f"{page.chapter}: the student edition cannot render the directive {{{name}}}")


def closing(lines: list[str], start: int, fence: str) -> int:
    """The index of the line closing the fence ``fence`` opened at ``lines[start]`` (``len(lines)``: none).
    Chapter: *Teaching with this book*."""
    for i in range(start + 1, len(lines)):
        line = lines[i].strip()
        if line and set(line) == {fence[0]} and len(line) >= len(fence):
            return i
    return len(lines)


def render_markdown(text: str, page: Page) -> str:
    """``text`` (MyST Markdown of ``page``) as Markdown that Jupyter shows: directives, roles, targets and
    equation labels rendered, code blocks kept. Chapter: *Teaching with this book*."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line, fence = lines[i], FENCE.match(lines[i])
        if fence and (fence["fence"][0] == "`" or fence["info"].strip().startswith("{")):
            end = closing(lines, i, fence["fence"])
            if fence["info"].strip().startswith("{"):
                rendered = directive(fence["info"], lines[i + 1 : end], page)
                out += [fence["indent"] + l if l else l for l in rendered]
            else:
                out += lines[i : end + 1]
            i = end + 1
            continue
        if (equation := EQUATION.match(line)) is not None:
            out += [rf"\tag{{{words(equation['label'])}}}", "$$"]
        elif not TARGET.match(line):
            out.append(inline(line, page))
        i += 1
    return "\n".join(out)


def macros(config: Path = ROOT / "_config.yml") -> str:
    """The book's MathJax macros (``\\dH``, ``\\stress``, ...) as ``\\newcommand`` definitions for Jupyter's
    MathJax. Chapter: *Teaching with this book*."""
    settings = yaml.safe_load(config.read_text()) if config.is_file() else {}
    tex = (((settings or {}).get("sphinx") or {}).get("config") or {}).get("mathjax3_config") or {}
    found = (tex.get("tex") or {}).get("macros") or {}
    definitions = []
    for name, value in found.items():
        body, count = (value[0], value[1]) if isinstance(value, list) else (value, 0)
        definitions.append(rf"\newcommand{{\{name}}}" + (f"[{count}]" if count else "") + f"{{{body}}}")
    return f"${' '.join(definitions)}$" if definitions else ""


def class_parameters(source: str, overrides: dict) -> str:
    """The parameters cell ``source`` with each overridden name's value replaced (its comment kept).
    Chapter: *Teaching with this book*."""
    for name, value in overrides.items():
        pattern = re.compile(rf"^{re.escape(name)}\s*=\s*.*?(\s+#.*)?$", re.M)
        line = f"{name} = {value!r}"
        source, found = pattern.subn(lambda match: line + (match.group(1) or ""), source, count=1)
        if not found:
            raise ValueError(
                f"the parameters cell declares no {name!r}: profiles and chapter disagree"
            )
    return NOTE + source


def student_notebook(chapter: str, source_dir: Path = SOURCES) -> nbformat.NotebookNode:
    """The student edition of ``chapter`` (see the module docstring). Chapter: *Teaching with this book*."""
    nb = jupytext.read(source_dir / f"{chapter}.md")
    overrides = chapter_parameters(chapter, PROFILE)
    page = Page(chapter, reference_results(chapter), source_dir)
    figures = 0
    cells = [nbformat.v4.new_markdown_cell("\n\n".join(filter(None, [PREAMBLE, macros()])))]
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if cell.cell_type == "markdown":
            cell.source = render_markdown(SOLUTION.sub("", cell.source), page)
            if not cell.source.strip():
                continue
        elif cell.cell_type == "code":
            if "parameters" in tags:
                cell.source = class_parameters(cell.source, overrides)
            cell.outputs, cell.execution_count = [], None
        kept = [t for t in tags if t not in BOOK_TAGS]
        if kept:
            cell.metadata["tags"] = kept
        else:
            cell.metadata.pop("tags", None)
        cells.append(cell)
        if cell.cell_type == "code" and (figure := (cell.metadata.get("mystnb") or {}).get("figure")):
            figures += 1  # the book's caption, under the cell that draws the figure
            caption = inline(" ".join(str(figure.get("caption", "")).split()), page)
            cells.append(nbformat.v4.new_markdown_cell(f"**Figure {figures}.** {caption}".rstrip()))
    nb.cells = cells
    nb.metadata.pop("jupytext", None)
    nb.metadata["posgeom"] = {"edition": "student", "chapter": chapter, "profile": PROFILE}
    return nb


def main(argv: list[str] | None = None) -> int:
    """``make student``: write the student notebooks. Chapter: *Teaching with this book*."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*", help="chapter names (default: every notebooks/*.md)")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "student", help="output folder (default: student/)"
    )
    args = parser.parse_args(argv)
    chapters = args.chapters or sorted(p.stem for p in SOURCES.glob("*.md"))
    args.out.mkdir(parents=True, exist_ok=True)
    for chapter in chapters:
        path = args.out / f"{chapter}.ipynb"
        nbformat.write(student_notebook(chapter), path)
        print(f"student edition: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
