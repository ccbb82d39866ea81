"""Evidence: what stetho ran or read on a node, kept raw so checks can be replayed later.

Probes are data (`probes.py`), one runner executes them (`runner.py`), and a versioned JSON
bundle per node holds every output (`bundle.py`). Nothing here interprets an output: that is
the parsers' job.
"""
