"""``POSGEOM_DATA_DIR``, ``POSGEOM_CACHE_DIR``, ``POSGEOM_PROGRESS`` (``0``: no bars),
``POSGEOM_BLAS_THREADS``. Chapter: *Positions in real text*."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

DATA_ENV = "POSGEOM_DATA_DIR"
CACHE_ENV = "POSGEOM_CACHE_DIR"
PROGRESS_ENV = "POSGEOM_PROGRESS"
BLAS_THREADS_ENV = "POSGEOM_BLAS_THREADS"
#: BLAS threads when ``POSGEOM_BLAS_THREADS`` is unset (2 stall a busy 2-core machine)
DEFAULT_BLAS_THREADS = 1


def cache_dir() -> Path:
    """The cache folder (created on demand). Chapter: *Positions in real text*."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "posgeom")
    path.mkdir(parents=True, exist_ok=True)
    return path


def progress_enabled() -> bool:
    """False when ``POSGEOM_PROGRESS=0``. Chapter: *Positions in real text*."""
    if os.environ.get("TQDM_DISABLE"):
        return False
    return os.environ.get(PROGRESS_ENV, "1") not in {"0", "false", "False", "no"}


def progress(iterable: Iterable[Any] | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar that obeys ``POSGEOM_PROGRESS``. Chapter: *Positions in real text*."""
    kwargs.setdefault("disable", not progress_enabled())
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def hub_offline() -> bool:
    """True when the hub is offline. Chapter: *Positions in real text*."""
    return any(
        os.environ.get(v, "0") not in {"0", "", "false", "False"}
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def blas_thread_limit() -> int | None:
    """BLAS threads from ``POSGEOM_BLAS_THREADS`` (``None``: the library's own; default
    1). Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    value = os.environ.get(BLAS_THREADS_ENV, "").strip()
    if not value:
        return DEFAULT_BLAS_THREADS
    if value.lower() in {"0", "default", "none"}:
        return None
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(
            f"{BLAS_THREADS_ENV}={value!r} is not a thread count: set it to an "
            "integer >= 1, or to 0 / 'default' for the BLAS library's own choice"
        )
    return threads


@contextlib.contextmanager
def blas_threads() -> Iterator[None]:
    """Limit BLAS to :func:`blas_thread_limit` threads in the block. Chapter: *The
    optimal encoding: classical MDS on Hellinger geometry*."""
    limit = blas_thread_limit()
    if limit is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limit, user_api="blas"):
        yield
