"""The sources beside the history: the drain ledger (when stetho drained and resumed a node),
Slurm's own drain/resume stamps (`--slurm`: every drain, an operator's by hand included),
the knowledge base (when a report diagnosed an incident, and whether the technician found no
fault) and the override repository (a block a person overrode: a false positive).

Each loads into a `Source`: its data, or a line saying it was not given, or the error that
stopped it. The figures that rest on a source that failed are unknown (None), never 0, and the
line is printed with them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from stetho.errors import StethoError


class Drain(NamedTuple):
    """A node out of service from `at` to `released` (None: still out), as `source` told:
    "ledger" (stetho's grants), "slurm-events" (sacctmgr) or "slurm-current" (sinfo -R)."""

    node: str
    at: float
    released: float | None
    source: str
    reason: str = ""


@dataclass
class Source:
    """One source as loaded: `items` when usable; `absent` or `error` say why not."""

    name: str
    where: str = ""
    items: list[Any] = field(default_factory=list)
    absent: str | None = None
    error: str | None = None
    #: loaded, but with something left out that the reader must be told
    note: str | None = None
    #: drains Slurm lists as open now with no time (sinfo %H `Unknown`): `at` means nothing;
    #: each confirms an open drain of its node, or is named as out with its start unknown
    undated: list[Drain] = field(default_factory=list)
    _by_node: dict[str, list[Any]] | None = field(default=None, repr=False)

    def of(self, node: str) -> list[Any]:
        """The items about one node (a drain tuple's first field, a report's `node`), in
        their order: looked up per incident, indexed once."""
        if self._by_node is None:
            self._by_node = {}
            for it in self.items if self.usable else ():
                key = it[0] if isinstance(it, tuple) else it.node
                self._by_node.setdefault(key, []).append(it)
        return self._by_node.get(node, [])

    @property
    def usable(self) -> bool:
        return self.absent is None and self.error is None

    def to_json(self) -> dict[str, object]:
        return {"where": self.where or None, "loaded": self.usable,
                "items": len(self.items) if self.usable else None,
                "absent": self.absent, "error": self.error, "note": self.note}


def drains(path: Path | None, since: float, explicit: bool) -> Source:
    """Every drain stetho granted since `since`, with its release (stetho resumed the node).
    A ledger that is not there was never written (stetho drained nothing here) unless a path
    was given; one that cannot be read is an error."""
    src = Source("drain ledger", str(path) if path else "")
    if path is None or not path.exists():
        if explicit and path is not None:
            src.error = f"drain ledger {path}: no such file (check --ledger)"
        else:
            src.absent = (f"no drain ledger at {path}: repair times are fail -> next pass"
                          if path else "no drain ledger: repair times are fail -> next pass")
        return src
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            src.items = [Drain(str(n), float(at), None if rel is None else float(rel),
                               "ledger", str(why or ""))
                         for n, at, rel, why in con.execute(
                             "SELECT node, at, released_at, reason FROM grants WHERE at >= ? "
                             "ORDER BY at", (since,))]
        finally:
            con.close()
    except (sqlite3.Error, TypeError, ValueError) as exc:
        src.error = (f"drain ledger {path}: cannot read its grants ({exc}); repair times "
                     "are unknown")
    return src


def slurm(env: Mapping[str, str] | None, since: float) -> Source:
    """Slurm's drains: the nodes out of service now (sinfo -R, always) and the past node
    events slurmdbd keeps (sacctmgr, when there is one; said when not). Asked for and not
    reachable is an error: the repair times would silently miss every hand-made drain.
    `env` (the commands' environment, from the edge) None: Slurm not asked."""
    src = Source("slurm", "sinfo -R, sacctmgr show event" if env is not None else "")
    if env is None:
        src.absent = ("Slurm not asked (--slurm adds Slurm's own drain/resume stamps, "
                      "an operator's by hand included)")
        return src
    from stetho.jobs import node_events

    try:
        now = node_events.current(env)
        past, why = node_events.history(since, env)
    except node_events.NodeEventsError as exc:
        src.error = f"Slurm: {exc}; repair times are unknown (or leave out --slurm)"
        return src
    src.note = why or None
    src.items = [Drain(e.node, e.start, e.end, e.source, e.reason)
                 for e in [*(past or []), *now] if e.start is not None
                 and (e.source == "slurm-current" or e.start >= since)]
    src.undated = [Drain(e.node, 0.0, None, e.source, f"{e.state}: {e.reason}".strip(": "))
                   for e in now if e.start is None]
    return src


def reports(repo: str | None) -> Source:
    """The knowledge base's reports (diagnosed incidents and their resolutions)."""
    src = Source("knowledge base", repo or "")
    if not repo:
        src.absent = ("no knowledge base given (--kb): false-positive rate from overrides "
                      "only; time to localize not measured")
        return src
    from stetho.publish import kb

    try:
        src.items = kb.reports(repo)
    except (StethoError, OSError) as exc:
        src.error = f"knowledge base {repo}: {exc}"
    return src


def overrides(repo: str | None) -> Source:
    """Overrides the gate honoured when they were approved: blocks a person said were wrong.
    Each is verified as the gate would (stetho.gate.override_check, against its policy's
    allowed signers) at the time of its approval; a revoked one is not counted (the block was
    right after all). An override file that cannot be read, or one whose signatures do not
    verify, makes the source unusable: counting it, or leaving it out, would each make the
    false-positive rate say something nobody signed."""
    src = Source("overrides", repo or "")
    if not repo:
        src.absent = ("no override repository given (--override-repo): false-positive rate "
                      "from the knowledge base's no-fault-found resolutions only")
        return src
    from stetho.gate.override_store import OverrideStore

    try:
        snap = OverrideStore(repo).read()
        bad = snap.unreadable()
        if bad:
            raise StethoError(f"{len(bad)} file(s) unreadable, first {bad[0][0]}: {bad[0][1]}")
        src.items = _honoured(snap)
    except (StethoError, OSError) as exc:
        src.error = (f"override repository {repo}: {exc}; the false-positive rate is unknown "
                     "until it is fixed")
    return src


def _honoured(snap: Any) -> list[Any]:
    from stetho.gate.override_check import judging
    from stetho.gate.overrides import parse_ts
    from stetho.gate.policy import load_override_policy

    approved = [o for o in snap.overrides() if o.approvals]
    out = []
    for name in sorted({o.policy for o in approved}):
        policy = load_override_policy(name)
        with judging(policy, snap.root, snap.revocations, snap.problem) as judge:
            for o in (o for o in approved if o.policy == name):
                at = min(parse_ts(a.approved_at) for a in o.approvals)
                c = judge.verify(o, at + 1)
                if c.valid:
                    out.append(o)
                elif c.state != "revoked":
                    raise StethoError(f"override {o.id} does not verify ({c.state}: "
                                      f"{c.reason})")
    return out
