"""Beyond one process: the same science, run on a Dask cluster or data-parallel under
Accelerate.

Chapter: *Beyond one machine*. Nothing here computes a new quantity: every function
returns what the single-process path of the science package returns (exactly for counts
and sweeps, to float tolerance for data-parallel probes and fine-tuning), which the
tests check. That is why this subpackage, like :mod:`posgeom_utils.repro`, is not part
of the science hash (:mod:`posgeom_utils.repro.sources`).

- :mod:`.counting`: positional counts of a sharded corpus, per shard, merged by a tree
  reduction on Dask.
- :mod:`.sweeps`: many independent training runs, serially or on a Dask cluster,
  resumable.
- :mod:`.data_parallel`: per-layer probes and fine-tuning under ``accelerate
  launch``/``torchrun``.
"""
