"""The reproduction machinery: results with provenance, profiles, ``posgeom run``,
freshness, the ledger and the command line. The science package imports nothing from
here. Chapter: *Reproduction ledger*."""
