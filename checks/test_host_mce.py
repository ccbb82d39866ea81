"""Machine checks (MCE) in the kernel log: an uncorrected or fatal one within the counter
window fails; corrected ones are judged as a count within the window.

An uncorrected machine check has killed a process or the node (or will: a poisoned page); a
fatal one (processor context corrupt) panicked it. Corrected ones cost nothing by themselves,
but a storm of them on one bank is a CPU cache or a DIMM on its way to an uncorrected one.
The kernel log holds the events since boot; each is judged by its time against the window
(`counters.window_h`), and one whose time the line does not carry counts as recent (fail
closed). `Machine check events logged` notices tell no severity (mcelog or rasdaemon read
the records): they count as events, never as uncorrected ones.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from stetho.facts import xid_time

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.mce import MceEvent
    from stetho.profiles import Profile


def test_host_mce(node: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    log = node.kernel_log()
    now = xid_time.collected_at(node.bundle.collected_at)
    window = timedelta(hours=profile.counters.window_h)
    old = [e for e in log.mces if e.time is not None and now is not None and now - e.time > window]
    recent = [e for e in log.mces if e not in old]
    bad = [e for e in recent if e.severity in ("uncorrected", "fatal")]
    records = [e for e in recent if e.kind == "record"]
    events = max(len(records), sum(e.kind == "notice" for e in recent))
    corrected = events - len(bad)
    verdict.measure(len(bad), "uncorrected machine checks", expected=0,
                    threshold=f"within {xid_time.hours(window)} (counters.window_h)")
    if log.mces:
        verdict.cite("\n".join(e.line for e in log.mces[-20:]), "kernel log")
    find = ("`ras-mc-ctl --errors` (rasdaemon) or `mcelog --client` decodes the bank and "
            "address; `ipmitool sel list` has the BMC's record")
    if bad:
        verdict.fail(f"{len(bad)} uncorrected machine check(s) within the window, the last "
                     f"{xid_time.stamp(bad[-1].time, now)}: {_said(bad)}",
                     remediation=f"drain the node; {find}; a fatal one (processor context "
                     "corrupt) or a repeat on one bank means a CPU or DIMM replacement")
    limit = profile.counters.mce_corrected_max
    if corrected > limit:
        verdict.warn(f"{corrected} corrected machine-check events within "
                     f"{xid_time.hours(window)} (max {limit}, counters.mce_corrected_max)"
                     + (f": {_said(records)}" if records else ""),
                     remediation=f"{find}; a storm on one bank is a part wearing out: "
                     "schedule its replacement")
        return
    old_bad = [e for e in old if e.severity in ("uncorrected", "fatal")]
    if old_bad:
        verdict.warn(f"{len(old_bad)} uncorrected machine check(s) older than the window, the "
                     f"last {xid_time.stamp(old_bad[-1].time, now)}: {_said(old_bad)}",
                     remediation=f"{find}; watch for a repeat")
        return
    verdict.ok(f"no uncorrected machine check; {corrected} corrected within "
               f"{xid_time.hours(window)} (max {limit})")


def _said(events: list[MceEvent]) -> str:
    parts = sorted({f"{e.severity} on CPU {e.cpu} bank {e.bank}" if e.bank is not None
                    else e.severity for e in events})
    return "; ".join(parts)
