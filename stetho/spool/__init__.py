"""The result spool: nodes report into it, the controller ingests from it (issue 31).

Every node-local run (a health check, a prolog, an epilog, a nightly `srun`, a Slurm-driven
sweep) leaves its whole outcome (results, JUnit, evidence, summary) as one file in its own
folder of a shared path: `<spool>/<node>/<run_id>.json`, written under a dot-name, fsync'd and
renamed, so a reader never sees half of one. `stetho ingest` (stetho.fleet.ingest) reads them.

A node speaks only for itself: the node a file is about is the folder it lies in, never what
its content says; a file whose content names another node is that folder's node's error. With
a controller secret configured, each file must also carry an HMAC with the node's own key,
derived from the secret and the node's name (stetho.spool.keys), so a node holding its key can
sign for no other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stetho.spool.files import (
    KINDS,
    SpoolError,
    SpoolFile,
    node_dir,
    pending,
    write,
)
from stetho.spool.keys import node_key, sign, verify

if TYPE_CHECKING:
    from stetho.spool.reader import Entry, read


def __getattr__(name: str) -> Any:
    """`read` and `Entry` on first use: they load the outcome's parsers, which a node's
    `stetho --help` or a prolog's start-up must not pay for."""
    if name in ("read", "Entry"):
        from stetho.spool import reader as module

        return getattr(module, name)
    raise AttributeError(f"module 'stetho.spool' has no attribute {name!r}")


__all__ = ["KINDS", "Entry", "SpoolError", "SpoolFile", "node_dir", "node_key", "pending",
           "read", "sign", "verify", "write"]
