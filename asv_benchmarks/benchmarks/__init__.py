"""asv benchmarks for sgmc (run ``asv`` from ``asv_benchmarks/``; see its README)."""
