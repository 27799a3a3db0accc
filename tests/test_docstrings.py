"""Every public function, class and method of the package (all subpackages) names the chapter that explains
it as ``Chapter: *<title>*``, where the titles are the ``# `` headings of the pages listed in ``_toc.yml``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from booktools import toc_files  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "posgeom_utils").rglob("*.py"))


def title(name: str) -> str:
    """The ``# `` heading of a page of the table of contents (``notebooks/necessity``)."""
    page = next(p for p in ROOT.glob(f"{name}.*") if p.suffix in (".md", ".ipynb"))
    return next(line[2:].strip() for line in page.read_text().splitlines() if line.startswith("# "))


TITLES = {title(name) for name in toc_files()}


def public_objects(source: str):
    """(qualified name, docstring) of the public module-level functions, the public classes (also those
    built inside a function) and their public methods."""

    def walk(node: ast.AST, prefix: str, top: bool):
        for child in ast.iter_child_nodes(node):
            public = not (getattr(child, "name", None) or "_").startswith("_")
            if isinstance(child, ast.ClassDef) and public:
                yield prefix + child.name, ast.get_docstring(child)
                for item in child.body:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                        yield f"{prefix}{child.name}.{item.name}", ast.get_docstring(item)
            elif isinstance(child, ast.FunctionDef):
                if top and public:
                    yield prefix + child.name, ast.get_docstring(child)
                yield from walk(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, (ast.If, ast.Try, ast.With)):
                yield from walk(child, prefix, top)

    return list(walk(ast.parse(source), "", True))


def problems(doc: str | None) -> list[str]:
    """What is wrong with a docstring's chapter reference: none, or titles that are not the book's."""
    if not doc or not re.search(r"Chapter: \*[^*]+\*", doc):
        return ["no 'Chapter: *<title>*'"]
    cited = re.findall(r"\*([^*\s][^*]*?)\*", doc[doc.index("Chapter:") :].split("\n\n")[0])
    return [f"unknown title *{t}*" for t in cited if " ".join(t.split()) not in TITLES]


@pytest.mark.parametrize("module", MODULES)
def test_every_public_object_names_its_chapter(module: str):
    source = (ROOT / module).read_text()
    bad = [f"{name}: {p}" for name, doc in public_objects(source) for p in problems(doc)]
    module_doc = ast.get_docstring(ast.parse(source))
    if module_doc and "Chapter:" in module_doc:
        bad += [f"module docstring: {p}" for p in problems(module_doc)]
    assert not bad, f"{module}: " + "; ".join(bad)


def test_the_check_can_fail():
    source = '''
def documented():
    """Does a thing. Chapter: *Positions in real text*."""

def undocumented():
    """Says nowhere where it is explained."""

def old_title():
    """Does a thing. Chapter: *MDS optimality*."""

def _private():
    pass

def factory():
    class Built:
        """Built lazily. Chapter: *Related work* (and *Low rank*)."""

        def method(self):
            pass

        def _helper(self):
            pass

    def nested():
        pass
'''
    found = {name: problems(doc) for name, doc in public_objects(source)}
    assert set(found) == {"documented", "undocumented", "old_title", "factory", "factory.Built",
                          "factory.Built.method"}
    assert found["documented"] == [] and found["undocumented"] == ["no 'Chapter: *<title>*'"]
    assert found["old_title"] == ["unknown title *MDS optimality*"]
    assert found["factory.Built"] == ["unknown title *Low rank*"]
