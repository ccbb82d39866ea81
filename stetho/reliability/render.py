"""The figures as a terminal table and as Prometheus text (node_exporter's textfile
collector). Pure: the figures dict in, text out. A None figure is shown as "unknown" (or
"-" where nothing was there to measure) and has no Prometheus sample, never a 0."""

from __future__ import annotations

import time
from typing import Any

from stetho import __version__
from stetho.sinks.prometheus import escape


def _h(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.1f} h" if x >= 1 else f"{x * 60:,.1f} min"


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(t))


def _dist(d: dict[str, Any], extra: str) -> str:
    if d.get("absent"):
        return f"not measured ({d['absent']})"
    if d.get("unknown"):
        return f"unknown ({d['unknown']})"
    if not d["n"]:
        return f"- (nothing to measure; {extra})"
    return f"mean {_h(d['mean'])}, median {_h(d['median'])} over {d['n']} ({extra})"


def lines(f: dict[str, Any]) -> list[tuple[str, str]]:
    """(figure, value in words): the table's body, and the run page's figures block."""
    out = [("incidents", f"{f['incidents']} ({f['open']} still open)")]
    m = f["mtbf_hours"]
    if m["per_node"] is None:
        out.append(("MTBF", f"- (no incident in {m['at_least']:,.0f} node-hours)"))
    else:
        out.append(("MTBF", f"{_h(m['per_node'])} per node, {_h(m['per_1000_gpus'])} per "
                    f"1,000 GPUs ({m['gpus_per_node']} GPUs a node; {f['node_hours']:,.0f} "
                    "node-hours, each node's first to last run)"))
    r = f["mttr_hours"]
    by = ", ".join(f"{n} {s}" for s, n in r.get("drains_by_source", {}).items() if n)
    out.append(("MTTR", _dist(r, f"{r.get('from_drains', 0)} drain -> resume"
                              + (f" from {by}" if by else "")
                              + f", {r.get('from_passes', 0)} fail -> pass")))
    if r.get("drain_still_open"):
        out.append(("", f"{r['drain_still_open']} incident(s) with the drain still open: "
                    "ongoing, not in the mean"))
    slurm = f["sources"].get("slurm", {})
    if slurm.get("absent"):
        out.append(("", slurm["absent"]))
    d = f.get("drains", {})
    if d.get("open"):
        out.append(("open drains", f"{d['open']} drains still open, oldest since "
                    f"{_day(d['oldest_open_since'])} UTC (not resumed: not in MTTR)"))
    d = f["time_to_detect_hours"]
    out.append(("time to detect", _dist(d, "first warning -> fail or drain; "
                                        f"{d['without_warning']} without a warning")))
    t = f["time_to_localize_hours"]
    out.append(("time to localize", _dist(t, "first fail -> report; "
                                          f"{t.get('without_report', 0)} without a report")))
    fp = f["false_positives"]
    if fp["rate"] is None:
        out.append(("false positives", f"unknown ({fp.get('unknown', 'no incident')})"))
    else:
        out.append(("false positives", f"{fp['count']} of {f['incidents']} ({fp['rate']:.1%}; "
                    f"from {', '.join(fp['basis'])})"))
    lem = f["lemons"]
    names = ", ".join(f"{n} ({c})" for n, c in lem["nodes"].items()) or "none"
    out.append(("lemon nodes", f"{names} (>= {lem['k']} incidents in {lem['days']:g} d)"))
    e = f["ettr"]
    ettr = f"{e['ettr']:.3f}" if e["ettr"] is not None else "unknown (no MTBF)"
    out.append(("ETTR", f"{ettr} for {e['gpus']} GPUs on {e['nodes']} nodes, checkpoint "
                f"{_h(e['checkpoint_hours'])}, restart {_h(e['restart_hours'])}"))
    out.append(("", f"model: {e['model']}"))
    out.append(("", f"after {e['source']}"))
    acted = "; ".join(f"{a}: " + ", ".join(f"{o} {n}" for o, n in by.items())
                      for a, by in f.get("remedies", {}).items())
    out.append(("stetho acted", acted or "nothing by itself in the window"))
    return out


def header(f: dict[str, Any]) -> list[str]:
    """The window, what was read, what was left out, and the sources not there."""
    w, rows = f["window"], f["rows"]
    out = [f"{_day(w['since'])} .. {_day(w['until'])} UTC ({w['days']:g} d), "
           f"{f['nodes']:,} nodes, {rows['read']:,} node-runs read"]
    if rows["excluded"]:
        n = rows["excluded"]
        out.append(f"{n} row{'s' if n != 1 else ''} unverified, excluded: {rows['why'][0]}")
    return out + list(f["notes"])


def table(f: dict[str, Any]) -> str:
    head = header(f)
    out = [f"stetho stats: {head[0]}", *(f"  {h}" for h in head[1:]), ""]
    out += [f"{label:<18}{text}" for label, text in lines(f)]
    out.append("")
    out += _group_table(f["groups"])
    out += _drain_table(f.get("drains", {}))
    return "\n".join(out) + "\n"


#: the drain table shows the latest this many; --json lists every one
DRAIN_ROWS = 20


def _drain_table(d: dict[str, Any]) -> list[str]:
    """Each drain interval and the sources that told of it (ledger, slurm-events,
    slurm-current)."""
    rows = d.get("intervals") or []
    if not rows:
        return []
    head = ["node", "drained (UTC)", "resumed (UTC)", "repair", "source", "reason"]
    body = [[r["node"], _day(r["start"]), "still open" if r["open"] else _day(r["end"]),
             "-" if r["hours"] is None else _h(r["hours"]), "+".join(r["sources"]),
             r["reason"][:40]] for r in rows[-DRAIN_ROWS:]]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    out = ["", f"drains ({len(rows)}):"]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in [head, *body]]
    if len(rows) > DRAIN_ROWS:
        out.append(f"... {len(rows) - DRAIN_ROWS} earlier (--json lists every one)")
    return out


def _group_table(g: dict[str, Any]) -> list[str]:
    if g["by"] == "node":
        head = ["node", "incidents", "node-hours", "MTBF"]
        body = [[r["node"], str(r["incidents"]), f"{r['node_hours']:,.0f}", _h(r["mtbf_hours"])]
                for r in g["rows"]]
    elif g["by"] == "switch":
        head = ["switch", "incidents", "shared", "node incidents", "nodes"]
        body = [[r["switch"], str(r["incidents"]), str(r["shared"]), str(r["node_incidents"]),
                 ",".join(r["nodes"])] for r in g["rows"]]
    else:
        head = ["cause", "incidents"]
        body = [[r["cause"], str(r["incidents"])] for r in g["rows"]]
    if not body:
        return [f"no incident to group by {g['by']}"]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    return ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
            for line in [head, *body]]


_HELP = {
    "stetho_stats_window_seconds": "Length of the window the reliability figures cover.",
    "stetho_incidents": "Incidents opened in the window, per cause (failing check).",
    "stetho_mtbf_seconds": "Mean time between incidents: observed node-time / incidents.",
    "stetho_mttr_seconds": "Mean time to repair: drain -> resume, else fail -> next pass.",
    "stetho_time_to_detect_seconds": "Mean time from the first warning to the failure.",
    "stetho_time_to_localize_seconds": "Mean time from the first failure to its report.",
    "stetho_false_positive_ratio": "Share of incidents overridden or found no fault.",
    "stetho_lemon_node": "1 for a node with at least K incidents in W days.",
    "stetho_ettr_ratio": "Expected effective training time ratio of a job of N GPUs.",
    "stetho_stats_rows_excluded": "History rows that failed their integrity check.",
    "stetho_drains_open": "Drains not resumed yet (ledger and, with --slurm, Slurm).",
}


def prometheus(f: dict[str, Any]) -> str:
    """Seconds, not hours: Prometheus' base unit. An unknown figure has no sample."""
    fam: dict[str, list[str]] = {k: [] for k in _HELP}
    w = f["window"]
    fam["stetho_stats_window_seconds"].append(f"stetho_stats_window_seconds "
                                              f"{w['until'] - w['since']}")
    fam["stetho_stats_rows_excluded"].append(f"stetho_stats_rows_excluded "
                                             f"{f['rows']['excluded']}")
    for cause, n in f["by_cause"].items():
        fam["stetho_incidents"].append(f'stetho_incidents{{cause="{escape(cause)}"}} {n}')
    m = f["mtbf_hours"]
    for scope, key in (("node", "per_node"), ("1000_gpus", "per_1000_gpus")):
        if m[key] is not None:
            fam["stetho_mtbf_seconds"].append(
                f'stetho_mtbf_seconds{{scope="{scope}"}} {m[key] * 3600:.0f}')
    for name, key in (("stetho_mttr_seconds", "mttr_hours"),
                      ("stetho_time_to_detect_seconds", "time_to_detect_hours"),
                      ("stetho_time_to_localize_seconds", "time_to_localize_hours")):
        if f[key]["mean"] is not None:
            fam[name].append(f"{name} {f[key]['mean'] * 3600:.0f}")
    if f["false_positives"]["rate"] is not None:
        fam["stetho_false_positive_ratio"].append(
            f"stetho_false_positive_ratio {f['false_positives']['rate']}")
    for node in f["lemons"]["nodes"]:
        fam["stetho_lemon_node"].append(f'stetho_lemon_node{{node="{escape(node)}"}} 1')
    if f.get("drains", {}).get("open") is not None:
        fam["stetho_drains_open"].append(f"stetho_drains_open {f['drains']['open']}")
    e = f["ettr"]
    if e["ettr"] is not None:
        fam["stetho_ettr_ratio"].append(f'stetho_ettr_ratio{{gpus="{e["gpus"]}"}} {e["ettr"]}')
    out = [f"# stetho {escape(__version__)} stats"]
    for name, lines in fam.items():
        if lines:
            out += [f"# HELP {name} {_HELP[name]}", f"# TYPE {name} gauge", *lines]
    return "\n".join(out) + "\n"
