"""Where things live and how chatty the helpers are (environment variables, one place).

Chapter: *How this book is built* (README) and every chapter's set-up cell.

=====================  ===========================================================
variable               meaning
=====================  ===========================================================
``POSGEOM_DATA_DIR``   folder laid out like ``shared/data`` (``sst2/*.tsv``,
                       ``imdb/*.jsonl.gz``); used when no ``data_dir`` is passed
``POSGEOM_CACHE_DIR``  where computed marginals and other results are cached
                       (default ``~/.cache/posgeom``)
``POSGEOM_PROGRESS``   ``0`` silences every progress bar (tests, nbval)
=====================  ===========================================================
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from tqdm.auto import tqdm

DATA_ENV = "POSGEOM_DATA_DIR"
CACHE_ENV = "POSGEOM_CACHE_DIR"
PROGRESS_ENV = "POSGEOM_PROGRESS"


def cache_dir() -> Path:
    """The on-disk cache folder (created on demand)."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "posgeom")
    path.mkdir(parents=True, exist_ok=True)
    return path


def progress_enabled() -> bool:
    """False when ``POSGEOM_PROGRESS=0`` (or ``TQDM_DISABLE`` is set)."""
    if os.environ.get("TQDM_DISABLE"):
        return False
    return os.environ.get(PROGRESS_ENV, "1") not in {"0", "false", "False", "no"}


def progress(iterable: Iterable[Any] | None = None, **kwargs: Any) -> tqdm:
    """A tqdm bar that obeys ``POSGEOM_PROGRESS`` (chapter: *Positions in real text*)."""
    kwargs.setdefault("disable", not progress_enabled())
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def hub_offline() -> bool:
    """True when the Hugging Face libraries were told to stay offline."""
    return any(
        os.environ.get(v, "0") not in {"0", "", "false", "False"}
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    )
