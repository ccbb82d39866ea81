"""The clock is synchronised (chronyd), and within the profile's offset of NTP time.

Clocks apart break what compares times across nodes: Kerberos and munge credentials (munge
rejects a credential from a clock more than its TTL off), NCCL and Slurm timeouts read
against another node's stamps, logs and traces that cannot be lined up, and this project's
own counter windows and Xid ages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts import hygiene

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_host_time_sync(node: NodeFacts, facts: NodeFacts, profile: Profile,
                        verdict: Verdict) -> None:
    if not profile.host.time_sync:
        pytest.skip(f"profile {profile.name} does not ask for time sync (host.time_sync)")
    limit = profile.host.time_offset_max_ms
    t = hygiene.tracking(facts)
    offset_ms = t.offset_s * 1000
    verdict.measure(round(offset_ms, 3), "ms", expected=f"synchronised, |offset| <= {limit:g} ms")
    verdict.cite(f"Reference ID : {t.reference_id} ({t.reference_name}); Stratum : {t.stratum}; "
                 f"System time : {abs(t.offset_s):.9f} seconds "
                 f"{'fast' if t.offset_s >= 0 else 'slow'} of NTP time; "
                 f"Leap status : {t.leap_status}", "chrony")
    if not t.synchronised:
        verdict.fail(f"clock not synchronised (Leap status: {t.leap_status}, reference "
                     f"{t.reference_id})",
                     remediation="`chronyc sources -v` shows why no source is selectable "
                     "(unreachable: firewall on UDP 123, a wrong `server` line in "
                     "/etc/chrony/chrony.conf); `sudo systemctl restart chronyd`, then "
                     "`sudo chronyc makestep` once a source is selected")
    if abs(offset_ms) > limit:
        verdict.fail(f"clock {abs(offset_ms):.1f} ms {'ahead of' if offset_ms > 0 else 'behind'}"
                     f" NTP time (limit {limit:g} ms)",
                     remediation="`sudo chronyc makestep` steps it now (drain the node first: "
                     "a jump disturbs running jobs); `chronyc sources -v` for a bad source")
    verdict.ok(f"synchronised to {t.reference_name or t.reference_id} (stratum {t.stratum}), "
               f"offset {offset_ms:+.3f} ms")
