"""The numbers Cirrincione (2026) reports, as stated in our sources (abstract and a
third-party summary): quoted beside ours, never used in a computation.

Chapter: *Reproduction ledger*."""

from __future__ import annotations

from ..checks import choice

#: key -> (reported value, what it is)
# fmt: off
REPORTED: dict[str, tuple[float, str]] = {
    "synthetic_mds_stress": (0.009, "stress of the MDS encoding, synthetic corpus"),
    "sst2_mds_stress": (0.0, "stress of the MDS encoding on SST-2 ('about 0')"),
    "imdb_mds_stress": (0.0, "stress of the MDS encoding on IMDB ('about 0')"),
    "sst2_alibi_stress": (0.563, "stress of ALiBi on SST-2"),
    "sst2_sinusoidal_stress": (272.0, "stress of the sinusoidal encoding on SST-2"),
    "sst2_rope_stress": (279.0, "stress of RoPE on SST-2"),
    "synthetic_lowrank_r": (3, "rank of the low-rank encoding on the synthetic corpus"),
    "synthetic_lowrank_stress_reduction":
        (0.998, "stress reduction of the r = 3 encoding, synthetic corpus"),
    "synthetic_lowrank_param_saving":
        (0.88, "fewer parameters than a free n x d table"),
    "mds_violation_rate": (0.22, "monotonicity violation rate of the MDS encoding"),
    "pretrained_violation_rate":
        (0.254, "monotonicity violation rate of the pre-trained model"),
    "chance_violation_rate": (0.5, "monotonicity violation rate by chance"),
    "bert_stress_peak_layer":
        (3, "layer of the sharp stress peak in pre-trained BERT-base (of 12)"),
}
# fmt: on


def reported(key: str) -> float:
    """The paper's number ``REPORTED[key]``. Chapter: *Reproduction ledger*."""
    return REPORTED[choice(key, "key", sorted(REPORTED))][0]
