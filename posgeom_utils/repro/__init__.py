"""The reproduction machinery of the book: profiles, ``posgeom run``, results with provenance, claims and the
reproduction ledger, the command line, and the paper's reported values.

Nothing in the science package (:mod:`posgeom_utils` without this subpackage) imports from here (tested in
``tests/test_package_split.py``), and nothing here can change a number a chapter computes: the book's
execution cache and the freshness of committed results are keyed by the chapter source, the science modules
and the pinned environment only (:mod:`.sources`). Chapter: *How this book is built* (README).

- :mod:`.results`: glued values of a chapter and ``save_results``; the "Parameters used" table;
- :mod:`.profiles`: ``smoke`` / ``default`` / ``paper`` parameter overrides;
- :mod:`.runner`: ``posgeom run`` (papermill reruns with provenance, skipping and resuming);
- :mod:`.sources`: what a chapter's results depend on (source hashes);
- :mod:`.claims` and :mod:`.ledger`: the prose's claims and the paper comparison, checked on results;
- :mod:`.paper`: the numbers the paper reports;
- :mod:`.cli`: the ``posgeom`` command line.
"""
