"""Content-addressed, atomically written cache entries (used by ``marginals`` and later chapters)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from .settings import cache_dir


def cache_key(**parts: Any) -> str:
    """A stable hex key for a set of JSON-serialisable parameters."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def cache_path(kind: str, key: str, suffix: str) -> Path:
    """Where the entry ``kind/key.suffix`` lives under :func:`~posgeom_utils.settings.cache_dir`."""
    folder = cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{key}{suffix}"


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place.

    A reader never sees a half-written file; an interrupted write leaves the old entry (or none).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
