"""Helpers of the book *The Geometry of Positional Encodings*; each public object's
docstring names its chapter. Chapter: *Preface*."""

from .corpus import Corpus, SyntheticCorpus, load_corpus, synthetic_corpus, synthetic_mu
from .geometry import bhattacharyya, fisher_rao_distances, hellinger_distances
from .marginals import PositionalMarginals, marginals_from_ids, positional_marginals
from .models import load_model, load_tokenizer, resolve_model, select_device
from .seeding import seed_everything

__version__ = "0.1.0"

__all__ = [
    "Corpus",
    "PositionalMarginals",
    "SyntheticCorpus",
    "bhattacharyya",
    "fisher_rao_distances",
    "hellinger_distances",
    "load_corpus",
    "load_model",
    "load_tokenizer",
    "marginals_from_ids",
    "positional_marginals",
    "resolve_model",
    "seed_everything",
    "select_device",
    "synthetic_corpus",
    "synthetic_mu",
]
