"""The fleet's reliability figures (`stetho stats`): incidents, MTBF, MTTR, time to detect and
to localize, false positives, lemon nodes and the ETTR a job can expect, from the history
database, the drain ledger, the knowledge base and the override repository.

The incident model (the README's "Reliability figures" says the same):

* Each node's signed `node_runs` rows, in time order, are read as states: **fail** (a failing
  check), **pass** (nothing failing, nothing in error) or **unknown** (an error and no fail).
* An incident opens at a failing run after a non-failing one and closes at the next passing
  run; unknown runs neither open nor close one. Its cause is the checks failing in its
  opening run, read from that run's results blob (the only blobs decoded, with those of the
  warnings before an incident).
* Rows failing their integrity check (stetho.history.integrity) are excluded and counted.

Layers: `timeline` (the one scan of node_runs), `sources` (ledger, Slurm's drain stamps,
knowledge base, overrides), `drains` (the ledger's and Slurm's drains merged), `figures` (the
arithmetic), `render` (table, JSON-ready dict, Prometheus text).
"""
