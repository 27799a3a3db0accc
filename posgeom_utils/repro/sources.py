"""What a chapter's numbers depend on: its source, the science package and the pinned environment.

Chapter: *How this book is built* (README). The execution cache of the book build
(``scripts/build_book.sh``) and the freshness of a committed ``results.json`` (:mod:`.runner`) are keyed by
these files only. The reproduction machinery (this subpackage, :mod:`posgeom_utils.repro`) is left out on
purpose: editing the ledger's wording or the command line cannot change a number, so it must not re-execute
a chapter or mark its results stale. So are the exercise checks (:mod:`posgeom_utils.teaching`) and the
scale-out subpackage (:mod:`posgeom_utils.scale`), whose every path returns what the single-process path
returns (tested: counts and sweeps exactly).

``python -m posgeom_utils.repro.sources`` prints :func:`science_hash` (used by ``scripts/build_book.sh``).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

#: the repository holding the package (``posgeom_utils/`` and the environment files live here)
REPO_ROOT = Path(__file__).resolve().parents[2]
#: the science package's folder; only its top-level modules count (not ``repro/``)
SCIENCE_PACKAGE = "posgeom_utils"
#: the pinned environment
ENVIRONMENT_FILES = ("requirements.txt", "pyproject.toml")


def science_files(root: Path = REPO_ROOT) -> list[Path]:
    """The science modules (``posgeom_utils/*.py``, not the ``repro`` subpackage) and the environment files
    of the checkout at ``root``, in a fixed order."""
    root = Path(root)
    modules = sorted((root / SCIENCE_PACKAGE).glob("*.py"))
    if not modules:
        raise FileNotFoundError(f"no {SCIENCE_PACKAGE}/*.py under root={str(root)!r}: pass the repository root")
    return modules + [root / name for name in ENVIRONMENT_FILES if (root / name).is_file()]


def _digest(paths: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        try:
            name = path.resolve().relative_to(Path(root).resolve()).as_posix()
        except ValueError:  # a chapter outside the checkout (``--source-dir``): its name is enough
            name = path.name
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def science_hash(root: Path = REPO_ROOT) -> str:
    """sha256 over :func:`science_files` (relative names and contents)."""
    return _digest(science_files(root), root)


def source_hash(source: Path, root: Path = REPO_ROOT) -> str:
    """sha256 over the chapter ``source`` and :func:`science_files`: two runs with the same hash ran the same
    chapter code on the same science code and environment."""
    return _digest([Path(source), *science_files(root)], root)


if __name__ == "__main__":
    print(science_hash(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT))
