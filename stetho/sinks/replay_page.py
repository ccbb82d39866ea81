"""The run page's gate replay section: `stetho gate replay --json`'s figures, formatted for
the template (stetho.sinks.runpage), the same numbers the command printed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stetho.errors import ConfigError

#: blocks added or removed listed per policy on the page
SHOWN = 40


def _ratio(x: object) -> str:
    return "n/a" if x is None else f"{float(x):.0%}"  # type: ignore[arg-type]


def view(doc: Mapping[str, Any], source: str = "replay JSON") -> dict[str, Any]:
    """The section's view model; ConfigError naming `source` when `doc` is not a replay."""
    try:
        policies = []
        for p in doc["policies"]:
            o, pts = p["outcomes"], p["decision_points"]
            policies.append({
                "policy": str(p["policy"]), "role": str(p["role"]),
                "node_days": int(p["node_days_blocked"]), "block": int(pts["block"]),
                "go": int(pts["go"]), "unevaluated": int(pts["unevaluated"]),
                "tp": int(o["true_positive"]), "fp": int(o["false_positive"]),
                "miss": int(o["miss"]), "unknown": int(o["unknown_blocks"]),
                "precision": _ratio(o["precision"]), "recall": _ratio(o["recall"]),
                "against": str(p.get("against", "")),
                "added": [_change(c, "was") for c in p.get("added", [])[:SHOWN]],
                "added_total": len(p.get("added", [])),
                "removed": [_change(c, "now") for c in p.get("removed", [])[:SHOWN]],
                "removed_total": len(p.get("removed", []))})
        return {"since": str(doc["since"]), "until": str(doc["until"]),
                "points": int(doc["decision_points"]), "nodes": int(doc["nodes"]),
                "horizon_h": float(doc["horizon_s"]) / 3600,
                "excluded": int(doc["excluded"]["total"]), "policies": policies,
                "sources": ", ".join(k.replace("_", " ") for k, v in
                                     doc["outcome_sources"].items() if v) or "none"}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(f"{source}: not the JSON of `stetho gate replay --json` "
                          f"({type(exc).__name__}: {exc}); write one with stetho gate replay "
                          "--policy CANDIDATE --against CURRENT --json FILE") from None


def _change(c: Mapping[str, Any], key: str) -> dict[str, str]:
    return {"node": str(c["node"]), "time": str(c["time"]),
            "checks": ", ".join(map(str, c["checks"])), "other": str(c[key])}
