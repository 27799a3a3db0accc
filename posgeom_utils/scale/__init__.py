"""Beyond one process: counting, training sweeps and probes on a Dask cluster or under
Accelerate, each path returning what the single-process path returns (tested), so this
subpackage is not part of the science hash. Chapter: *Beyond one machine*."""
