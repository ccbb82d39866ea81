"""NVMe health: each controller's SMART / Health log (`nvme smart-log -o json`, or
`smartctl -j -a`) has no critical warning, spare capacity over its threshold and no media
errors; wear and a growing error log are warnings.

A drive that raises a critical warning (spare used up, reliability degraded, read-only) is
on its way out: checkpoints and datasets written to it are at risk, and a read-only scratch
disk kills the next job that writes. Media errors are unrecovered reads: data already lost.
They count over the drive's life, so their growth within the counter window is judged where
history has an earlier reading (any media error at all where it has none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts import nvme as facts_nvme
from stetho.facts.window import Counted, count

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_host_nvme_health(nvme: str, facts: NodeFacts, profile: Profile,
                          verdict: Verdict) -> None:
    log = facts_nvme.smart(facts, nvme)
    verdict.measure(log.critical_warning, "critical warning", expected=0)
    verdict.cite(f"/dev/{nvme} ({log.source}): critical_warning 0x{log.critical_warning:02x}, "
                 f"available_spare {log.available_spare}% (threshold {log.spare_threshold}%), "
                 f"percentage_used {log.percentage_used}%, media_errors {log.media_errors}, "
                 f"num_err_log_entries {log.err_log_entries}"
                 + (f", temperature {log.temperature_c} C" if log.temperature_c is not None
                    else ""), f"{facts_nvme.PROBE}:{nvme}")
    find = (f"`nvme error-log /dev/{nvme}` lists the errors; `nvme id-ctrl /dev/{nvme}` and "
            "`nvme list` give the model and serial for the RMA")
    w = facts.windows()
    media = w.count(("host", nvme, "nvme_media_errors"), log.media_errors)
    errlog = w.count(("host", nvme, "nvme_err_log_entries"), log.err_log_entries)
    bad = []
    if log.critical_warning:
        bad.append(f"critical warning 0x{log.critical_warning:02x}: "
                   + "; ".join(log.warnings()))
    if log.available_spare < log.spare_threshold:
        bad.append(f"available spare {log.available_spare}%, under its threshold "
                   f"{log.spare_threshold}%")
    if media.amount > 0:
        bad.append(_lifetime(media, "media_errors"))
    if bad:
        verdict.fail(f"{nvme}: {', '.join(bad)} ({w.basis()})",
                     remediation=f"copy off what the node keeps on {nvme} and replace the drive; "
                     f"{find}")
    warns, fix = [], find
    if log.percentage_used >= profile.host.nvme_used_warn_pct:
        warns.append(f"{log.percentage_used}% of its rated endurance used (warn from "
                     f"{profile.host.nvme_used_warn_pct:g}%, host.nvme_used_warn_pct)")
        fix = f"plan the replacement of {nvme}; {find}"
    if errlog.growth is not None and errlog.amount > profile.host.nvme_err_log_max:
        warns.append(f"{_lifetime(errlog, 'num_err_log_entries')} (max "
                     f"{profile.host.nvme_err_log_max}, host.nvme_err_log_max)")
    if warns:
        verdict.warn(f"{nvme}: {'; '.join(warns)}", remediation=fix)
        return
    verdict.ok(f"{nvme}: no critical warning, spare {log.available_spare}% (threshold "
               f"{log.spare_threshold}%), {log.percentage_used}% used, "
               f"{_lifetime(media, 'media_errors')} ({w.basis()})")


def _lifetime(counted: Counted, name: str) -> str:
    """Growth in the window, or the count over the drive's life (SMART counters never reset)."""
    if counted.growth is None:
        return f"{name}={count(counted.now)} over the drive's life"
    return counted.describe(name)
