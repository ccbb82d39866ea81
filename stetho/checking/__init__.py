"""Stage 4: the pytest integration. The plugin parametrizes checks over subjects (nodes, GPUs,
ports, ...), runs them one item per subject or in batches, and turns each outcome into one
Result; `run` drives pytest in-process; `fleet` holds the checks that compare nodes."""
