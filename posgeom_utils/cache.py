"""Content-addressed, atomically written cache entries and JSON files (marginals,
``posgeom run`` results). Chapter: *Reproduction ledger*."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .settings import cache_dir

T = TypeVar("T")
#: the user's umask: files written here get the mode ``open`` would give them
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def cache_key(**parts: Any) -> str:
    """A stable hex key of parameters. Chapter: *Positions in real text*."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def cache_path(kind: str, key: str, suffix: str) -> Path:
    """The cache file ``kind/key.suffix``. Chapter: *Positions in real text*."""
    folder = cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{key}{suffix}"


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into
    place: a reader never sees a half-written file. Chapter: *Reproduction ledger*."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=path.parent
    )
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes it 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_or_discard(path: Path, read: Callable[[Path], T]) -> T | None:
    """``read(path)``, or ``None`` if the file is missing or damaged (then it is removed
    with a warning, to be computed afresh). Chapter: *Reproduction ledger*."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return read(path)
    except Exception as exc:  # noqa: BLE001 - damaged files fail in many ways
        why = f"{type(exc).__name__}: {exc}"
        warnings.warn(
            f"{path} is damaged ({why}): removed, computing it afresh", stacklevel=2
        )
        path.unlink(missing_ok=True)
        return None


def write_json(path: Path, data: Any) -> Path:
    """Write ``data`` as key-sorted JSON, atomically. Chapter: *Reproduction ledger*."""
    text = json.dumps(data, indent=1, sort_keys=True, allow_nan=True)
    return atomic_write(Path(path), lambda tmp: tmp.write_text(text))


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or ``None``. Chapter: *Reproduction ledger*."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
