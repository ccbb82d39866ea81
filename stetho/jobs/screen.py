"""`stetho job`'s one screen: the answer first, then the timeline it rests on.

The answer is one of: a likely hardware fault (the node, its part, since when, its report,
and the leaf it shares with the job's other nodes), a likely leaf switch (several nodes under
one leaf failing in the window), no finding (with how many nodes had history and which had
none), or "cannot tell" (no record at all, or rows that failed their integrity check). Pure:
`verdict` and `render` take data and return data or text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from stetho.jobs.sacct import Job
from stetho.jobs.stragglers import Straggler
from stetho.jobs.timeline import Event, Timeline

#: exit codes: no finding on a complete window, a hardware finding, could not tell
NO_FINDING, FINDING, CANNOT_TELL = 0, 1, 3
_MESSAGE = 110
#: the headline's share of a check's message: the answer must stay one readable line
_HEADLINE = 60


@dataclass(frozen=True)
class Verdict:
    code: int
    headline: str


def clock(t: float, day: bool = False) -> str:
    """Local time, as Slurm prints the job's times (so they read side by side)."""
    return time.strftime("%Y-%m-%d %H:%M" if day else "%H:%M", time.localtime(t))


def zone(t: float) -> str:
    """The zone the clock times are in (`UTC`, `CET`): a line pasted into a ticket alone
    must say which 14:05 it means."""
    return time.strftime("%Z", time.localtime(t)) or time.strftime("%z", time.localtime(t))


def window(tl: Timeline) -> str:
    same_day = time.localtime(tl.since)[:3] == time.localtime(tl.until)[:3]
    return f"{clock(tl.since, True)}–{clock(tl.until, not same_day)} {zone(tl.until)}"


def _short(text: str, most: int = _MESSAGE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 1] + "…"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _switch_incident(tl: Timeline) -> tuple[str, list[str], list[str]] | None:
    """(leaf, failing job nodes, failing other nodes) of a leaf with two or more nodes failing
    in the window, the most first: one switch incident, not N node incidents."""
    if not tl.leaves:
        return None
    failing = {e.node for e in tl.of("fail")}
    best = None
    for leaf in sorted(set(tl.leaves.values())):
        mine = sorted(n for n in failing if tl.leaves.get(n) == leaf)
        theirs = sorted({e.node for e in tl.neighbours if e.leaf == leaf})
        if len(mine) + len(theirs) >= 2 and (best is None or
                                              len(mine) + len(theirs) > len(best[1]) +
                                              len(best[2])):
            best = (leaf, mine, theirs)
    return best


def _shared_leaf(tl: Timeline, node: str) -> str:
    if node not in tl.leaves:
        return ""
    leaf = tl.leaves[node]
    others = [n for n in tl.nodes if n != node and tl.leaves.get(n) == leaf]
    return f", shared leaf {leaf} with {_plural(len(others), 'other node')} of this job"


def _finding(tl: Timeline, first: Event) -> str:
    part = f"{first.subject} ({first.check})" if first.subject else first.check
    began = min(e.time for e in tl.of("fail") if e.node == first.node
                and e.check == first.check and e.subject == first.subject)
    since = f"{clock(began)} {zone(began)}"
    if began <= tl.first_row.get(first.node, began - 1):
        since = f"at least {since} (its first record in the window)"
    text = (f"likely hardware: node {first.node}'s {part}: "
            f"{_short(first.message, _HEADLINE)} since {since}")
    if first.reports:
        text += f" (report {first.reports[0]})"
    text += _shared_leaf(tl, first.node)
    others = sorted({e.node for e in tl.of("fail")} - {first.node})
    if others:
        text += f"; also failing: {', '.join(others[:8])}" + (
            f" and {len(others) - 8} more" if len(others) > 8 else "")
    return text


def verdict(job: Job, tl: Timeline) -> Verdict:
    n = len(tl.nodes)
    fails = tl.of("fail")
    switch = _switch_incident(tl)
    if switch is not None:
        leaf, mine, theirs = switch
        who = [f"{', '.join(mine)} of this job"] if mine else []
        if theirs:
            who.append(f"{', '.join(theirs)} outside it")
        text = (f"likely the leaf switch {leaf}: {len(mine) + len(theirs)} nodes under it "
                f"failing in the window ({'; '.join(who)})")
        if fails:
            text += "; first: " + _finding(tl, fails[0]).removeprefix("likely hardware: ")
        return Verdict(FINDING, text)
    if fails:
        return Verdict(FINDING, _finding(tl, fails[0]))
    span = window(tl)
    distrusted = tl.distrusted
    if not tl.had_history:
        why = (f"; rows of {', '.join(distrusted)} failed their integrity check"
               if distrusted else "")
        return Verdict(CANNOT_TELL, f"cannot tell: no history record for any of the job's "
                       f"{_plural(n, 'node')} in the window {span}{why} (no evidence either "
                       "way: run `stetho sweep` or check the --db)")
    missing = tl.missing
    errors = sorted({e.node for e in tl.of("error")})
    text = (f"no hardware finding on any of the job's {_plural(n, 'node')} in the window "
            f"{span} ({len(tl.had_history)} had history; {len(missing)} missing"
            + (f": {', '.join(missing[:8])}{' …' if len(missing) > 8 else ''} — no evidence"
               if missing else "") + ")")
    if distrusted:
        text += f"; history rows of {', '.join(distrusted)} failed their integrity check"
    if errors:
        text += f"; checks could not be evaluated on {', '.join(errors)}"
    warns = tl.of("warn")
    if warns:
        text += f"; {_plural(len(warns), 'warning')} (first: {warns[0].node} {warns[0].check})"
    code = CANNOT_TELL if (missing or distrusted or errors) else NO_FINDING
    return Verdict(code, text)


def _event_line(e: Event) -> str:
    what = {"fail": "FAIL", "error": "ERROR", "warn": "DRIFT" if e.drift else "WARN",
            "drain": "DRAIN", "integrity": "INTEGRITY", "unverified": "UNVERIFIED",
            "neighbour": "LEAF"}[e.kind]
    head = f"  {clock(e.time, True)}  {what:<10} {e.node}"
    if e.check:
        head += f" {e.check}" + (f" {e.subject}" if e.subject else "")
    line = f"{head}: {_short(e.message)}" if e.message else head
    if e.leaf:
        line += f" [under {e.leaf}]"
    if e.reports:
        line += f"\n{'':14}report {e.reports[0]}"
    return line


def render(job: Job, tl: Timeline, v: Verdict, stragglers: list[Straggler] | None = None,
           straggler_note: str = "", limit: int = 40) -> str:
    gpus = f", {job.gpus} GPUs" if job.gpus is not None else ""
    out = [v.headline, "",
           f"job {job.id} ({job.name or '?'}, user {job.user or '?'}, partition "
           f"{job.partition or '?'}, {job.state}{gpus}; from {job.source}): "
           f"{_plural(len(tl.nodes), 'node')}, window {window(tl)}"]
    if tl.leaves:
        by_leaf: dict[str, list[str]] = {}
        for node, leaf in tl.leaves.items():
            by_leaf.setdefault(leaf, []).append(node)
        out.append("leaves: " + "; ".join(f"{leaf}: {len(ns)} of the job's nodes"
                                          for leaf, ns in sorted(by_leaf.items())))
    if tl.missing and tl.had_history:
        out.append(f"no history in the window (no evidence): {', '.join(tl.missing)}")
    shown = [*tl.events, *tl.neighbours]
    shown.sort(key=lambda e: (e.time, e.node))
    if shown:
        out.append("")
        out.append(f"timeline ({_plural(len(shown), 'event')}"
                   + (f", first {limit} shown: --json has all" if len(shown) > limit else "")
                   + "):")
        out += [_event_line(e) for e in shown[:limit]]
    if stragglers is not None or straggler_note:
        out.append("")
        out.append("stragglers" + (f" ({straggler_note})" if straggler_note else "") + ":")
        for s in stragglers or []:
            stray = (s.place is not None and s.place.host not in tl.nodes)
            out.append(f"  rank {s.rank}: {s.where}: median step {s.median_s:.3f} s against "
                       f"the job's {s.job_median_s:.3f} s (robust z {s.z:.1f})"
                       + (" — not one of the job's nodes: is the log this job's?"
                          if stray else ""))
        if stragglers == []:
            out.append("  none: every rank's median step is within the threshold")
    for note in tl.notes:
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"
