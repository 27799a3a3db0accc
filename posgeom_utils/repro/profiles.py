"""Named parameter sets overriding the chapters' ``parameters`` cells: ``smoke``
(seconds, for tests), ``class`` (each chapter's effects within 10 minutes on 2 CPU
cores), ``default`` (minutes on a laptop), ``reference`` (the cells as they are),
``paper`` (a GPU, the paper's model). Chapter: *Reproduction ledger*."""

from __future__ import annotations

import ast
from typing import Any

from ..checks import choice
from .sources import parse_code

#: the paper's model (needs the Hugging Face hub or a local copy)
BERT = "bert-base-uncased"
# fmt: off
#: what sizes a run; ``posgeom run --cap`` bounds each (``None`` becomes the cap)
SIZE_PARAMETERS = ("sample_size", "task_size", "train_steps", "finetune_steps",
                   "synthetic_sequences", "planted_sequences", "num_sequences",
                   "other_sample_size", "width_steps")
#: the corpus sizes shared by the chapters that count real text
_TEXT = {"sample_size": 3000, "n": 64, "min_count": 20}
_PAPER_TEXT = {"model_name": BERT, "sample_size": None, "n": 512, "min_count": 100}

# a table, one entry per chapter
PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "smoke": {
        "positions_in_real_text": {**_TEXT, "n": 128, "replicates": 30},
        "mds_optimality": {**_TEXT, "synthetic_n": 32, "synthetic_sequences": 1000,
                           "replicates": 10},
        "stress_forensics": {**_TEXT, "replicates": 10},
        "low_rank": {**_TEXT, "planted_sequences": 3000, "task_size": 1500,
                     "train_steps": 40, "n_seeds": 2, "probe_size": 200,
                     "probe_len": 16, "probe_ranks": [0, 2], "replicates": 5},
        "necessity": {"task_len": 16, "synthetic_n": 8, "sample_size": 300,
                      "n_seeds": 2, "train_steps": 30},
        "separation": {"train_steps": 30, "task_size": 600, "synthetic_sequences": 600,
                       "n_seeds": 2, "control_seeds": 2, "gd_sequences": 64,
                       "gd_steps": 10, "sample_size": 64, "finetune_len": 16,
                       "finetune_steps": 4, "finetune_eval_every": 2,
                       "finetune_seeds": 2},
        "monotonicity": {**_TEXT, "n": 24, "n_max": 64,
                         "random_tables": 5, "task_size": 1000, "train_steps": 20,
                         "synthetic_sequences": 600, "widths": [8, 32],
                         "width_steps": 30, "width_seeds": 1, "replicates": 5,
                         "ntk_widths": [8, 32], "ntk_seeds": 2, "ntk_steps": 20,
                         "flow_width": 64, "flow_steps": 200},
        "layerwise": {"n": 16, "other_n": 24, "sample_size": 300,
                      "other_sample_size": 30, "probe_min_count": 5, "groups": 10,
                      "replicates": 50},
        "learned_geometry": {"n": 16, "other_n": 12, "vocab_size": 100,
                             "sample_size": 1500, "eval_size": 100, "d": 16,
                             "train_steps": 20, "eval_every": 10, "n_seeds": 2,
                             "encoding_seeds": 2, "ranks": [2], "random_tables": 5},
    },
    # a chapter in minutes on a laptop (the parameters cells hold the reference profile)
    "default": {
        "positions_in_real_text": {"replicates": 200},
        "mds_optimality": {"replicates": 10},
        "stress_forensics": {"replicates": 10},
        "low_rank": {"probe_size": 800, "probe_ranks": [0, 1, 2, 4, 8], "n_seeds": 5,
                     "task_size": 4000, "train_steps": 200, "replicates": 20,
                     "rank_replicates": 5},
        "necessity": {"sample_size": 1500, "n_seeds": 5, "train_steps": 200},
        "separation": {"n_seeds": 5, "control_seeds": 3, "d": 16, "n_layers": 1,
                       "train_steps": 110, "task_size": 4000, "gd_sequences": 256,
                       "gd_steps": 100, "finetune_steps": 40, "finetune_eval_every": 10,
                       "finetune_seeds": 3},
        "monotonicity": {"replicates": 60, "ntk_seeds": 5, "ntk_steps": 100,
                         "width_seeds": 2, "width_steps": 60, "flow_steps": 2000},
        "layerwise": {"sample_size": 4000, "other_sample_size": 300, "replicates": 200},
        "learned_geometry": {"n": 32, "other_n": 24, "vocab_size": 500,
                             "sample_size": 8000, "eval_size": 500, "d": 32,
                             "train_steps": 300, "eval_every": 50, "n_seeds": 2,
                             "encoding_seeds": 2, "ranks": [2]},
    },
    # what the book shows: each chapter's parameters cell as it is
    "reference": {chapter: {} for chapter in (
        "positions_in_real_text", "mds_optimality", "stress_forensics", "low_rank",
        "necessity", "separation", "monotonicity", "layerwise", "learned_geometry")},
    "paper": {
        "positions_in_real_text": _PAPER_TEXT,
        "mds_optimality": {**_PAPER_TEXT, "synthetic_sequences": 20000},
        "stress_forensics": _PAPER_TEXT,
        "low_rank": {**_PAPER_TEXT, "task_size": 60000, "train_steps": 3000,
                     "n_seeds": 5},
        "necessity": {"model_name": BERT, "task_len": 64, "sample_size": None, "d": 128,
                      "n_seeds": 10, "train_steps": 3000},
        "separation": {"model_name": BERT, "synthetic_n": 64, "d": 128,
                       "train_steps": 3000, "task_size": 60000, "sample_size": 8000,
                       "finetune_len": 64, "finetune_seeds": 5, "finetune_steps": 1000},
        "monotonicity": {"model_name": BERT, "sample_size": None, "random_tables": 100,
                         "task_size": 60000, "train_steps": 3000,
                         "synthetic_sequences": 20000, "widths": [64, 256, 1024],
                         "width_steps": 3000, "width_seeds": 5},
        "layerwise": {"model_name": BERT, "n": 54, "other_n": 512, "sample_size": None,
                      "other_sample_size": 25000, "probe_min_count": 100,
                      "batch_size": 128},
        # BERT-small sized (4 layers, width 256), full vocabulary: 80 runs, untimed
        "learned_geometry": {"model_name": BERT, "n": 128, "other_n": 64,
                             "vocab_size": None, "d": 256, "n_layers": 4,
                             "train_steps": 3000, "batch_size": 128, "lr": 0.001,
                             "encoding_seeds": 5},
    },
}
#: in class (``book/course.md``): every chapter within 10 minutes on a 2-core CPU, with
#: its effects visible (tests/test_class_profile.py); smoke's sizes cannot be reused
#: under another name: the chapters' ``profile != "smoke"`` checks would run on them
PROFILES["class"] = {
    # the other chapters at their default sizes (necessity's: "a before b" is learned
    # with positions, at chance without)
    **{chapter: dict(sizes) for chapter, sizes in PROFILES["default"].items()},
    # wider than default (the table is written by step 200 and the row control stays
    # in the band), three seeds, evaluated every 25 steps to find the peak
    "learned_geometry": {"n": 32, "other_n": 24, "vocab_size": 500,
                         "sample_size": 8000, "eval_size": 500, "d": 64,
                         "train_steps": 250, "eval_every": 25, "n_seeds": 3,
                         "encoding_seeds": 2, "ranks": [2]},
}
# fmt: on


def chapter_parameters(chapter: str, profile: str = "default") -> dict[str, Any]:
    """The papermill parameters of ``chapter`` under ``profile``, ``profile`` included.
    Chapter: *Reproduction ledger*."""
    choice(profile, "profile", sorted(PROFILES))
    choice(chapter, "chapter", sorted(PROFILES[profile]))
    check_injected(chapter)
    return {"profile": profile, **PROFILES[profile][chapter]}


def _assigned(source: str) -> set[str]:
    """The names a cell's top-level assignments bind."""
    try:
        body = parse_code(source).body
    except SyntaxError:
        return set()
    return {
        t.id
        for node in body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name)
    }


def check_injected(chapter: str) -> None:
    """In a kernel run by papermill: stop on a ``-p`` name that ``chapter``'s parameters
    cell does not define, naming the ones it does. Chapter: *Reproduction ledger*."""
    try:
        from IPython import get_ipython
    except ImportError:  # not in a kernel
        return
    shell = get_ipython()  # In[-1] is the cell calling us
    cells = [str(c) for c in (shell.user_ns.get("In", []) if shell else [])][:-1]
    names = [_assigned(cell) for cell in cells]
    first = next((i for i, found in enumerate(names) if found), len(names))
    known = {"profile", *(names[first] if names[first:] else ())}
    known |= {k for chapters in PROFILES.values() for k in chapters.get(chapter, {})}
    papermill = [  # papermill's injected cell opens with "# Parameters"
        found
        for cell, found in zip(cells[first + 1 :], names[first + 1 :])
        if cell.lstrip().startswith("# Parameters")
    ]
    if unknown := sorted(set().union(*papermill) - known):
        raise ValueError(
            f"papermill -p {', '.join(unknown)}: not a parameter of {chapter}; its "
            f"parameters are {', '.join(sorted(known))} (check the spelling)"
        )
