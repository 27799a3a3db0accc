"""Every public function, class and method of the science modules (``posgeom_utils/*.py``, not ``repro``)
names the chapter that explains it, in the house form ``Chapter: *<Chapter title>*.`` (the README promises it).
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

import posgeom_utils

PACKAGE_DIR = Path(posgeom_utils.__file__).parent
SCIENCE_MODULES = sorted(f"posgeom_utils.{p.stem}" for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__")
#: the chapters' titles (notebooks/*.md, short forms as the book's prose uses them) and the README section
CHAPTER_TITLES = {
    "Positions in real text", "Why a Transformer needs positions", "Do distinct positions get distinct vectors?",
    "MDS optimality", "Low rank", "Monotonicity", "Positions layer by layer", "How this book is built",
    "Beyond one machine", "Related work",
}
#: the scale-out subpackage (``posgeom_utils/scale``): the same house rule
SCALE_MODULES = sorted(f"posgeom_utils.scale.{p.stem}" for p in (PACKAGE_DIR / "scale").glob("*.py")
                       if p.stem != "__init__")


def _public(name: str) -> bool:
    return not name.startswith("_")


def _members(module: ModuleType):
    """(qualified name, object) of the public functions and classes defined in ``module`` and of the public
    methods and properties those classes define themselves (inherited ones are the parent's business)."""
    names = set(dir(module)) | set(getattr(module, "__all__", ()))  # __all__: lazily built classes (__getattr__)
    for name in sorted(filter(_public, names)):
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)) or obj.__module__ != module.__name__:
            continue  # constants, and names imported from elsewhere
        yield name, obj
        if inspect.isclass(obj):
            for attr, value in vars(obj).items():
                if not _public(attr):
                    continue
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if inspect.isfunction(value) or isinstance(value, property):
                    yield f"{name}.{attr}", value


def missing_chapter(module: ModuleType) -> list[str]:
    """Public names of ``module`` whose docstring does not name a chapter."""
    return [f"{module.__name__}.{qualname}" for qualname, obj in _members(module)
            if "Chapter" not in (inspect.getdoc(obj) or "")]


def chapter_titles(doc: str | None) -> list[str]:
    """The *starred* titles in the paragraph of ``doc`` that starts at its first "Chapter"."""
    if not doc or "Chapter" not in doc:
        return []
    return re.findall(r"\*([^*\s][^*]*?)\*", doc[doc.index("Chapter"):].split("\n\n")[0])


def test_scale_modules_found():
    assert {"posgeom_utils.scale.counting", "posgeom_utils.scale.sweeps",
            "posgeom_utils.scale.data_parallel"} <= set(SCALE_MODULES)


def test_science_modules_found():
    assert {"posgeom_utils.geometry", "posgeom_utils.encodings", "posgeom_utils.training",
            "posgeom_utils.models", "posgeom_utils.settings"} <= set(SCIENCE_MODULES)
    assert not any(".repro" in m for m in SCIENCE_MODULES)


@pytest.mark.parametrize("module_name", SCIENCE_MODULES + SCALE_MODULES)
def test_every_public_name_names_its_chapter(module_name: str):
    module = importlib.import_module(module_name)
    assert list(_members(module)), f"{module_name}: the walk found nothing to check"
    missing = missing_chapter(module)
    assert not missing, "docstrings without 'Chapter: *<title>*.': " + ", ".join(missing)


@pytest.mark.parametrize("module_name", SCIENCE_MODULES + SCALE_MODULES)
def test_chapter_titles_are_real(module_name: str):
    """A docstring names a chapter by its title, not by an old or invented name."""
    module = importlib.import_module(module_name)
    docs = [(module_name, inspect.getdoc(module))]
    docs += [(f"{module_name}.{q}", inspect.getdoc(obj)) for q, obj in _members(module)]
    unknown = [(name, t) for name, doc in docs for t in chapter_titles(doc) if t not in CHAPTER_TITLES]
    assert not unknown, f"unknown chapter titles (known: {sorted(CHAPTER_TITLES)}): {unknown}"


def test_title_check_can_fail():
    assert chapter_titles("Does x. Chapter: *Layer-wise geometry* (and *Low rank*).") == [
        "Layer-wise geometry", "Low rank"]
    assert chapter_titles("No chapter here, only *emphasis*.") == []


def test_the_check_can_fail():
    """A synthetic module with a function, a class and a method lacking the word is reported, name by name."""
    fake = ModuleType("posgeom_utils_fake")

    def documented():
        """Does a thing. Chapter: *MDS optimality*."""

    def undocumented():
        """Does a thing, and says nowhere where it is explained."""

    def bare():
        pass

    class Thing:
        """A thing. Chapter: *Low rank*."""

        def method(self):
            """Has no chapter."""

        @property
        def size(self):
            return 1

        def _private(self):
            pass

    for obj in (documented, undocumented, bare, Thing):
        obj.__module__ = fake.__name__
        setattr(fake, obj.__name__, obj)
    fake.imported = inspect.getdoc  # defined elsewhere: not this module's business
    assert missing_chapter(fake) == [f"{fake.__name__}.{n}" for n in ("Thing.method", "Thing.size", "bare",
                                                                      "undocumented")]
