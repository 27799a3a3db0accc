"""Where ``posgeom`` may write: the check shared by the command line and ``posgeom
run``, below both (it imports nothing of the package). Chapter: *Reproduction
ledger*."""

from __future__ import annotations

import tempfile
from pathlib import Path


def place_problem(path: Path, folder: bool = False) -> str | None:
    """Why nothing can be written at ``path`` (a file, or a ``folder``), or ``None``;
    missing folders are made. Chapter: *Reproduction ledger*."""
    if folder and path.exists() and not path.is_dir():
        return "is a file: pass a folder"
    if not folder and path.is_dir():
        return "is a folder: pass a file in it"
    where = path if folder else path.parent
    try:
        where.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=where).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return f"cannot write in {str(where)!r} ({reason}); pass a writable place"
    return None
