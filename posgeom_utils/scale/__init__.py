"""Beyond one process: the science of the book on a Dask cluster, or data-parallel under
Accelerate.

Chapter: *Beyond one machine*. :mod:`.counting` counts sharded corpora, :mod:`.sweeps`
runs many training runs (and starts the Dask clusters), :mod:`.data_parallel` runs the
per-layer probe and fine-tuning under ``accelerate launch`` or ``torchrun``. Every path
calls the single-process functions and returns what the single-process path returns
(tested), which is why this subpackage is not part of the science hash."""
