"""Everything `stetho stats` reads, in one call: the history's timeline, the sources beside
it and the topology, into the figures (stetho.reliability.figures)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stetho.errors import ConfigError
from stetho.history.store import History
from stetho.reliability import figures, sources, timeline


def leaves(topology: Path) -> dict[str, str]:
    """node -> leaf switch, from a Slurm topology.conf."""
    from stetho.localize.topology import from_slurm

    try:
        text = topology.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--topology {topology}: cannot read it ({exc})") from None
    try:
        topo = from_slurm(text)
    except ConfigError as exc:
        raise ConfigError(f"--topology {topology}: {exc}") from None
    return {n: topo.leaf(n) for n in topo.nodes}


def stats(db: Path, window_s: float, p: figures.Params, *, ledger: Path | None,
          ledger_given: bool, kb: str | None, override_repo: str | None,
          topology: Path | None, now: float | None = None,
          slurm_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`slurm_env`: the environment to run sinfo/sacctmgr in (--slurm); None: not asked."""
    until = int(now if now is not None else time.time())
    since = int(until - window_s)
    if p.by == "switch" and topology is None:
        raise ConfigError("--by switch needs --topology FILE (a Slurm topology.conf)")
    leaf_of = leaves(topology) if topology is not None else None
    if not db.exists():
        raise ConfigError(f"history database {db} does not exist (--db, STETHO_DB)")
    with History(db) as h:
        tl = timeline.scan(h, since, until)
        remedies = _remedies(h, since, until)
    out = figures.compute(tl, sources.drains(ledger, since, ledger_given),
                          sources.reports(kb), sources.overrides(override_repo), p, leaf_of,
                          sources.slurm(slurm_env, since))
    out["history"] = str(db)
    out["remedies"] = remedies
    return out


def _remedies(h: History, since: int, until: int) -> dict[str, dict[str, int]]:
    """What stetho did by itself in the window: action -> outcome -> count."""
    out: dict[str, dict[str, int]] = {}
    for action, outcome, n in h.conn.execute(
            "SELECT action, outcome, count(*) FROM remedies WHERE time >= ? AND time <= ? "
            "GROUP BY action, outcome ORDER BY action, outcome", (since, until)):
        out.setdefault(str(action), {})[str(outcome)] = int(n)
    return out
