"""Host memory errors (EDAC): none uncorrected; corrected ones judged as a rate.

An uncorrected DRAM error kills the process that touched it (or the node): a training job
dies with a SIGBUS or the node panics. Corrected errors cost nothing by themselves, but a
DIMM whose count climbs is on its way to an uncorrected one. They count since the EDAC driver
loaded, so their growth within the counter window is judged, with that time base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts import hygiene

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_host_memory_errors(node: NodeFacts, facts: NodeFacts, profile: Profile,
                            verdict: Verdict) -> None:
    mcs = hygiene.edac(facts)
    ue = sum(m.ue for m in mcs)
    ce = sum(m.ce for m in mcs)
    verdict.measure(ue, "uncorrected memory errors", expected=0)
    verdict.cite("\n".join(f"/sys/devices/system/edac/mc/{m.name}: ce_count {m.ce}, "
                           f"ue_count {m.ue}" for m in mcs), "edac")
    find = ("`ras-mc-ctl --errors` (rasdaemon) or `edac-util -v` names the DIMM slot; "
            "`ipmitool sel list` has the BMC's record")
    if ue:
        where = ", ".join(f"{m.name}: {m.ue}" for m in mcs if m.ue)
        verdict.fail(f"{ue} uncorrected memory error(s) since the EDAC driver loaded ({where})",
                     remediation=f"drain the node; {find}; replace that DIMM before returning "
                     "the node to service")
    w = facts.windows()
    limit = profile.counters.edac_corrected_max
    counted = w.count(("host", "", "edac_ce"), ce)
    if counted.amount > limit:
        verdict.warn(f"{counted.describe('corrected memory errors')} (max {limit}): a DIMM "
                     f"degrading; {w.basis()}",
                     remediation=f"{find}; schedule its replacement")
        return
    verdict.ok(f"no uncorrected memory errors on {len(mcs)} memory controller(s); "
               f"{counted.describe('corrected')} ({w.basis()})")
