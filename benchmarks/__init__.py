"""symjac's benchmark suite: problems written once, timed through symjac and its peers.

Run ``python -m benchmarks.run`` (``--quick`` for a partial run); it
regenerates ``benchmarks/RESULTS.md``.  See ``benchmarks/README.md``.
"""
