"""Stage 6: the SQLite history of runs and metrics, baselines recorded from healthy runs, and
drift of a node against its own past (with the statistics it needs)."""
