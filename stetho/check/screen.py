"""Which nodes a baseline may be measured on: every node's checks run (stetho.check) and the
nodes that fail or error are left out, named with why (`stetho baseline record`)."""

from __future__ import annotations

from pathlib import Path

from stetho.check.pipeline import run
from stetho.check.request import CheckRequest
from stetho.errors import ConfigError
from stetho.history.baselines import MIN_NODES, Screened
from stetho.profiles import Profile


def screen(bundle_paths: list[Path], profile: Profile, *, include_failing: bool = False,
           min_nodes: int = MIN_NODES) -> Screened:
    """Evaluate every node's checks and leave out nodes that fail or error (unless
    `include_failing`): a median over broken nodes makes the next regression look healthy.
    Refuses (ConfigError) when fewer than `min_nodes` remain, naming what was left out."""
    from stetho.evidence.bundle import load

    bundles = {p: load(p) for p in bundle_paths}
    checked = run(CheckRequest(command="baseline", bundles=tuple(bundles.values()),
                               profile=profile.source))
    bad: dict[str, dict[str, set[str]]] = {}
    for r in checked.results:
        if r.status in ("fail", "error"):
            bad.setdefault(r.node, {}).setdefault(r.status, set()).add(r.check)
    excluded = {n: "; ".join(f"{st}: {', '.join(sorted(c))}" for st, c in sorted(by.items()))
                for n, by in sorted(bad.items())}
    kept = [p for p, b in bundles.items() if include_failing or b.node not in excluded]
    if len(kept) < min_nodes:
        left = "".join(f"\n  {n}: {why}" for n, why in excluded.items())
        hint = ("" if include_failing or not excluded else
                "; --include-failing keeps them (only if their failures are not what the "
                "baseline measures)")
        raise ConfigError(f"baseline not recorded: {len(kept)} healthy node(s), the minimum is "
                          f"{min_nodes} (--min-nodes){hint}"
                          + (f"; left out:{left}" if left and not include_failing else ""))
    return Screened(kept, {} if include_failing else excluded)
