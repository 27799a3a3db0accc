"""SST-2 and IMDB (from ``data_dir``, ``POSGEOM_DATA_DIR`` or the hub) and seeded
synthetic corpora with known geometry. Chapter: *Positions in real text*."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import checks
from .settings import DATA_ENV, hub_offline

#: split name -> file name, per dataset, in a folder laid out like ``shared/data``
LOCAL_FILES: dict[str, dict[str, str]] = {
    "sst2": {
        "train": "sst2/train.tsv",
        "validation": "sst2/dev.tsv",
        "test": "sst2/test.tsv",
    },
    "imdb": {"train": "imdb/train.jsonl.gz", "test": "imdb/test.jsonl.gz"},
}
#: the same corpora on the Hugging Face hub: (dataset id, config, text column)
HUB_IDS: dict[str, tuple[str, str | None, str]] = {
    "sst2": ("nyu-mll/glue", "sst2", "sentence"),
    "imdb": ("stanfordnlp/imdb", None, "text"),
}
SYNTHETIC_KINDS = ("stationary", "drift", "shift", "lowrank")


@dataclass
class Corpus:
    """Texts and labels (0/1; -1 where hidden). Chapter: *Positions in real text*."""

    name: str
    split: str
    texts: list[str]
    labels: np.ndarray
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def _subset(self, idx: np.ndarray, **meta) -> Corpus:
        texts, meta = [self.texts[i] for i in idx], {**self.meta, **meta}
        return Corpus(self.name, self.split, texts, self.labels[idx], self.source, meta)

    def sample(self, size: int | None, seed: int = 0) -> Corpus:
        """``size`` seeded random texts, in order. Chapter: *Positions in real text*."""
        if size is None:
            return self
        size = checks.integer(size, "sample size")
        if size >= len(self):
            return self
        rng = np.random.default_rng(seed)
        idx = np.sort(rng.choice(len(self), size=size, replace=False))
        return self._subset(idx, sample_size=size, sample_seed=seed)

    def halves(self, seed: int = 0) -> tuple[Corpus, Corpus]:
        """Two disjoint random halves (seeded). Chapter: *Positions in real text*."""
        if len(self) < 2:
            raise ValueError(f"a corpus needs 2 texts to be halved, it has {len(self)}")
        perm = np.random.default_rng(seed).permutation(len(self))
        parts = np.sort(perm[: len(self) // 2]), np.sort(perm[len(self) // 2 :])
        return tuple(
            self._subset(idx, half=h, half_seed=seed) for h, idx in enumerate(parts)
        )

    @property
    def key(self) -> dict:
        """Identifies the corpus in a cache key. Chapter: *Positions in real text*."""
        key = {"name": self.name, "split": self.split, "n_texts": len(self)}
        return {**key, **self.meta}


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 file, gunzipped if ``.gz``; a read error raises a
    ``ValueError`` naming the file and the last line read."""
    opener = gzip.open if path.suffix == ".gz" else open
    k = 0
    try:
        with opener(path, "rt", encoding="utf-8", newline="\n") as fh:
            for k, line in enumerate(fh, 1):
                yield k, line.rstrip("\r\n")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as exc:
        raise ValueError(
            f"{path}, after line {k}: {type(exc).__name__}: {exc}; check the file "
            "(truncated? compressed as its name says? UTF-8?)"
        ) from exc


def _label(value: object, where: str) -> int:
    if isinstance(value, (int, str)) and str(value).strip() in ("0", "1"):
        return int(value)
    raise ValueError(f"{where}: label {value!r} is not 0 or 1")


def _read_sst2(path: Path) -> tuple[list[str], np.ndarray]:
    lines = _lines(path)
    header = next(lines, (1, ""))[1].split("\t")
    if header not in (["sentence", "label"], ["index", "sentence"]):
        raise ValueError(
            f"{path}, line 1: header {header!r}, expected 'sentence<TAB>label' (or "
            "'index<TAB>sentence' for the GLUE test split, whose labels are hidden)"
        )
    texts, labels = [], []
    for k, line in lines:
        row = line.split("\t")
        if not line.strip():
            continue
        if len(row) != 2:
            raise ValueError(
                f"{path}, line {k}: {len(row)} tab-separated fields, "
                f"expected 2 ({' and '.join(header)})"
            )
        texts.append(row[header.index("sentence")].strip())
        where = f"{path}, line {k}"
        labels.append(_label(row[1], where) if header[1] == "label" else -1)
    return texts, np.asarray(labels, dtype=np.int64)


def _read_imdb(path: Path, strip_html: bool) -> tuple[list[str], np.ndarray]:
    texts, labels = [], []
    for k, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}, line {k}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"{where}: not JSON ({exc.msg}); expected one object "
                "per line with 'text' and 'label'"
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            found = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(  # noqa: TRY004 (the file's content is wrong, not an argument)
                f"{where}: expected a 'text' string and a 'label', found {found}"
            )
        labels.append(_label(row.get("label"), where))
        texts.append(row["text"].replace("<br />", " ") if strip_html else row["text"])
    return texts, np.asarray(labels, dtype=np.int64)


def _from_hub(
    dataset: str, split: str, strip_html: bool
) -> tuple[list[str], np.ndarray]:
    import datasets  # imported late: slow, and only needed online

    repo, config, column = HUB_IDS[dataset]
    datasets.disable_progress_bars()
    ds = datasets.load_dataset(repo, config, split=split)
    if dataset == "imdb" and strip_html:
        texts = [t.replace("<br />", " ") for t in ds[column]]
    else:
        texts = [t.strip() for t in ds[column]]
    return texts, np.asarray(ds["label"], dtype=np.int64)


def _no_data(dataset: str, why: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"No data for dataset {dataset!r}: no data_dir was given, ${DATA_ENV} is not "
        f"set, and {why}. Fix: pass data_dir='/path/to/data' or `export "
        f"{DATA_ENV}=/path/to/data`, where the folder holds "
        f"{', '.join(LOCAL_FILES[dataset].values())} (laid out like shared/data); "
        f"or go online so that `datasets` can download {HUB_IDS[dataset][0]!r}."
    )


def load_corpus(
    dataset: str,
    split: str = "train",
    data_dir: str | Path | None = None,
    strip_html: bool = True,
) -> Corpus:
    """Load ``sst2`` or ``imdb`` as a :class:`Corpus` (``strip_html``: IMDB's ``<br />``
    become spaces). Chapter: *Positions in real text*."""
    checks.choice(dataset, "dataset", sorted(LOCAL_FILES))
    splits = sorted(LOCAL_FILES[dataset])
    checks.choice(split, "split", splits, f"the splits of dataset {dataset!r}")
    source_dir = data_dir if data_dir is not None else os.environ.get(DATA_ENV)
    if source_dir:
        root = Path(source_dir).expanduser()
        path = root / LOCAL_FILES[dataset][split]
        if not path.is_file():
            origin = "data_dir" if data_dir is not None else f"${DATA_ENV}"
            raise FileNotFoundError(
                f"{origin}={str(root)!r} has no {LOCAL_FILES[dataset][split]!r}. "
                f"Point {origin} at a folder laid out like shared/data: "
                "sst2/train.tsv, sst2/dev.tsv, sst2/test.tsv, imdb/train.jsonl.gz, "
                "imdb/test.jsonl.gz "
                "(see shared/data/README.md)."
            )
        texts, labels = (
            _read_sst2(path) if dataset == "sst2" else _read_imdb(path, strip_html)
        )
        source = str(path)
    elif hub_offline():
        raise _no_data(dataset, "the hub is disabled (offline)")
    else:
        try:
            texts, labels = _from_hub(dataset, split, strip_html)
        except Exception as exc:  # network errors come in many types
            raise _no_data(dataset, f"download failed: {exc}") from exc
        source = "hf-hub:" + HUB_IDS[dataset][0]
    if not texts:
        raise ValueError(
            f"{dataset}/{split} from {source} is empty: check the data files"
        )
    meta = {"strip_html": strip_html} if dataset == "imdb" else {}
    return Corpus(dataset, split, texts, labels, source, meta)


def check_texts(texts: object, name: str = "texts") -> list[str]:
    """``texts`` (non-empty strings) as a list. Chapter: *Positions in real text*."""
    if isinstance(texts, Corpus):
        texts = texts.texts
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise TypeError(
            f"{name} must be a sequence of strings, got {type(texts).__name__}"
        )
    if len(texts) == 0:
        raise ValueError(f"{name} is empty: the corpus has no texts to count")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise TypeError(
            f"{name}[{bad}] is a {type(texts[bad]).__name__}, not a str: pass texts"
        )
    return list(texts)


@dataclass
class SyntheticCorpus:
    """Token-id sequences drawn position by position from known ``mu`` (n x V).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""

    kind: str
    ids: np.ndarray  # (num_sequences, n) token ids
    mu: np.ndarray  # (n, V) the true positional distributions
    params: dict

    @property
    def n(self) -> int:
        """Positions. Chapter: *The optimal encoding: classical MDS on Hellinger
        geometry*."""
        return self.mu.shape[0]

    @property
    def V(self) -> int:
        """Vocabulary size. Chapter: *The optimal encoding: classical MDS on Hellinger
        geometry*."""
        return self.mu.shape[1]


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def synthetic_mu(
    kind: str, n: int, V: int, seed: int = 0, rank: int = 3, strength: float = 2.0
) -> np.ndarray:
    """The true distributions of a synthetic corpus (``SYNTHETIC_KINDS``).
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    checks.choice(kind, "kind", SYNTHETIC_KINDS)
    checks.integer(n, "n")
    checks.integer(V, "V", 2, fix="a distribution needs 2 tokens")
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 1.0, n)[:, None]
    base = rng.normal(size=(1, V))
    if kind == "stationary":
        return np.repeat(_softmax(base), n, axis=0)
    if kind == "drift":
        modes = rng.normal(size=(4, V))
        wave = sum(np.cos(np.pi * (k + 1) * t) * modes[k] / (k + 1) for k in range(4))
        return _softmax(base + strength * wave)
    if kind == "shift":
        angle = 2 * np.pi * (np.arange(V)[None, :] / V - np.arange(n)[:, None] / n)
        return _softmax(strength * np.cos(angle))
    checks.integer(rank, "rank", 1, V)
    blocks = np.array_split(rng.permutation(V), rank)
    phase = rng.uniform(0, 2 * np.pi, size=rank)
    freq = rng.uniform(0.5, 1.5, size=rank)
    # (n, rank), smooth in i
    weights = _softmax(strength * np.sin(2 * np.pi * freq * t + phase))
    mu = np.zeros((n, V))
    for k, block in enumerate(blocks):
        mu[:, block] = weights[:, k : k + 1] * _softmax(rng.normal(size=block.size))
    return mu


def synthetic_corpus(
    kind: str = "drift",
    n: int = 64,
    V: int = 512,
    num_sequences: int = 5000,
    seed: int = 0,
    rank: int = 3,
    strength: float = 2.0,
) -> SyntheticCorpus:
    """``num_sequences`` sequences of length ``n`` drawn from :func:`synthetic_mu`
    (seeded). Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    checks.integer(num_sequences, "num_sequences")
    mu = synthetic_mu(kind, n, V, seed=seed, rank=rank, strength=strength)
    ids = draw_positions(mu, np.random.default_rng(seed + 1).random((num_sequences, n)))
    params = {
        "kind": kind,
        "n": n,
        "V": V,
        "num_sequences": num_sequences,
        "seed": seed,
        "rank": rank,
        "strength": strength,
    }
    return SyntheticCorpus(kind, ids, mu, params)


def draw_positions(mu: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Token ids, position ``i`` drawn from ``mu[i]`` by inverse CDF at ``u[:, i]``.
    Chapter: *The optimal encoding: classical MDS on Hellinger geometry*."""
    cdf = np.cumsum(mu, axis=1)
    cdf[:, -1] = 1.0
    ids = np.empty(u.shape, dtype=np.int64)
    for i in range(mu.shape[0]):  # one vectorised draw per position
        ids[:, i] = np.searchsorted(cdf[i], u[:, i], side="right")
    return ids
