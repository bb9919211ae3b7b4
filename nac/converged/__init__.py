"""The converged profile run in pieces: ``pieces`` (the plan, fingerprints, the store, the metrics
tree they make) and ``jobs`` (what one piece computes). ``tools/run_converged.py`` runs them."""
