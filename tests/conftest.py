"""Shared fixtures for the posgeom_utils unit tests.

- Progress bars are off and the Hugging Face libraries stay offline (set at import, before any
  test module imports transformers/datasets).
- ``POSGEOM_CACHE_DIR`` points at a session-wide temporary folder, so no test touches ``~/.cache``;
  a test that needs an empty cache asks for ``fresh_cache``.
- ``data_dir`` is the folder of the real corpora (``POSGEOM_DATA_DIR``): tests that need it are
  skipped when it is unset, except under CI (``CI`` set), where that is a failure.
- ``tokenizer`` is the packaged all-MiniLM-L6-v2 tokenizer (works offline), loaded once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("POSGEOM_PROGRESS", "0")
for _var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_var, "1")

DATA_ENV = "POSGEOM_DATA_DIR"
CACHE_ENV = "POSGEOM_CACHE_DIR"


@pytest.fixture(scope="session", autouse=True)
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory):
    """Point the package cache at a temporary folder for the whole session (restored afterwards)."""
    path = tmp_path_factory.mktemp("posgeom-cache")
    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(path)
    yield path
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache folder for one test (the session folder comes back afterwards)."""
    path = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(path))
    return path


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The folder of the real corpora, from ``POSGEOM_DATA_DIR``."""
    value = os.environ.get(DATA_ENV)
    if not value:
        reason = (f"{DATA_ENV} is not set: point it at a folder laid out like shared/data "
                  f"(sst2/*.tsv, imdb/*.jsonl.gz) to run the tests on the real corpora")
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI must set it)")
        pytest.skip(reason)
    path = Path(value).expanduser()
    if not path.is_dir():
        pytest.fail(f"{DATA_ENV}={value!r} is not a folder")
    return path


@pytest.fixture(scope="session")
def tokenizer():
    """The packaged all-MiniLM-L6-v2 tokenizer (BERT uncased WordPiece), loaded once."""
    from posgeom_utils.models import load_tokenizer

    return load_tokenizer()


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """Small models train far faster on one intra-op thread than on two on the 2-core machines (docs/performance.md, Threads)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_bert():
    """A tiny random BERT (2 layers, width 32, 64 positions), seeded: the probes' and the order probe's model."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    return BertModel(config).eval()

