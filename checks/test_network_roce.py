"""RoCE (Ethernet RDMA) ports: congestion and loss counters, and the QoS a lossless fabric needs.

RoCEv2 is only as good as its lossless priority: without DSCP trust the NIC puts RoCE on the
wrong priority, without PFC there the fabric drops, without ECN there DCQCN cannot slow a sender
down before PFC pauses the link. Counters name how it behaves: CNPs and ECN marks and PFC
pauses are congestion (they warn over the profile's limits), sequence errors, ack timeouts and
discards are losses (they fail). Judged on each port of a profile's Ethernet port groups where
the profile has a `roce` section (stetho.facts.roce.applies); the counters by their growth
within the counter window, from the history stetho records under check "roce".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts import roce

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.facts.window import Counted
    from stetho.parsers.ib_common import IbPort
    from stetho.profiles import Profile

_FIX_CONGESTION = ("the fabric is congested on the RoCE priority: check the switch's ECN "
                   "thresholds and buffers on this port's path and the job's traffic pattern; "
                   "a PFC pause storm comes from a receiver that stopped draining (a hung host "
                   "or NIC): `ethtool -S {netdev} | grep -E 'pause|storm'` on both ends")
_FIX_LOSS = ("packets are lost on a priority meant to be lossless: check that PFC is enabled on "
             "it end to end (`mlnx_qos -i {netdev}`, the switch port's PFC and buffer "
             "configuration), the cable (`mlxlink -d {device}`), and the switch's drop counters")


def _applies(profile: Profile, port: IbPort) -> None:
    why = roce.applies(profile, port)
    if why is not None:
        pytest.skip(why)


def test_roce_congestion(ib_port: IbPort, facts: NodeFacts, profile: Profile,
                         verdict: Verdict) -> None:
    """CNPs, ECN marks and PFC pauses over `roce.congestion_max` warn; sequence errors, ack
    timeouts and discards over `roce.error_max` fail; each by its growth within the counter
    window where history has an earlier reading, else by its count since boot or reset."""
    p = ib_port
    _applies(profile, p)
    assert profile.roce is not None
    limits = {**profile.roce.congestion_max, **profile.roce.error_max}
    if not limits:
        pytest.skip(f"profile {profile.name} sets no roce counter limits")
    dev = roce.netdev(facts, p.device)
    values = roce.counters(facts, p)
    w = facts.windows()
    counted = {k: w.count(("roce", p.id, k), values[k]) for k in limits if k in values}
    absent = [k for k in limits if k not in values]
    verdict.measure(sum(c.amount for c in counted.values()), "events",
                    expected="under per-counter limits",
                    threshold=", ".join(f"{k}<={v}" for k, v in limits.items()))
    verdict.cite(", ".join(c.describe(k) for k, c in counted.items())
                 + (f"\nnot exposed: {', '.join(absent)}" if absent else "")
                 + f"\n{w.basis()}", f"roce_sysfs, ethtool_stats:{p.device}")
    if not counted:
        verdict.error(f"port {p.id} ({dev}): none of the counters profile {profile.name} "
                      f"limits is exposed ({', '.join(absent)})")
    errors = [k for k in profile.roce.error_max if k in counted
              and counted[k].amount > profile.roce.error_max[k]]
    if errors:
        verdict.fail(f"port {p.id} ({dev}): " + ", ".join(
            _over(k, counted[k], profile.roce.error_max[k]) for k in errors) + f"; {w.basis()}",
            remediation=_FIX_LOSS.format(netdev=dev, device=p.device))
    congested = [k for k in profile.roce.congestion_max if k in counted
                 and counted[k].amount > profile.roce.congestion_max[k]]
    if congested:
        verdict.warn(f"port {p.id} ({dev}): congestion: " + ", ".join(
            _over(k, counted[k], profile.roce.congestion_max[k]) for k in congested)
            + f"; {w.basis()}", remediation=_FIX_CONGESTION.format(netdev=dev))
        return
    if absent:  # unknown is never pass
        verdict.warn(f"port {p.id} ({dev}): counters under limits, but not exposed: "
                     f"{', '.join(absent)}",
                     remediation="update the driver (mlx5_core/mlx5_ib) or drop the counter "
                     f"from profile {profile.name}'s roce limits if this NIC has none")
        return
    verdict.ok(f"congestion and loss counters under limits ({w.basis()})")


def _over(name: str, counted: Counted, limit: int) -> str:
    return f"{counted.describe(name)} (max {limit})"


def test_roce_qos(ib_port: IbPort, facts: NodeFacts, profile: Profile,
                  verdict: Verdict) -> None:
    """The trust state, the PFC priority and ECN on it are what the profile's `roce` says."""
    p = ib_port
    _applies(profile, p)
    spec = profile.roce
    assert spec is not None
    dev = roce.netdev(facts, p.device)
    q = roce.qos(facts, p.device)
    prio = spec.pfc_priority
    ecn = roce.ecn(facts, dev, prio) if spec.ecn else {}
    want_pfc = tuple(i == prio for i in range(8))
    verdict.measure(f"trust {q.trust}, PFC on {list(q.pfc_enabled)}"
                    + "".join(f", {r} {_flag(v)}" for r, v in ecn.items()),
                    expected=f"trust {spec.trust}, PFC on [{prio}]"
                    + (f", ECN on priority {prio}" if spec.ecn else ""))
    verdict.cite(f"mlnx_qos -i {dev}: Priority trust state: {q.trust}; PFC enabled on "
                 f"{list(q.pfc_enabled)}" + "".join(
                     f"\n{roce.ecn_path(dev, r, prio)} = {_flag(v)}" for r, v in ecn.items()),
                 f"mlnx_qos:{p.device}")
    if q.trust != spec.trust:
        verdict.fail(f"{p.id} ({dev}): trust state {q.trust}, profile {profile.name} expects "
                     f"{spec.trust}: RoCE traffic lands on the wrong priority",
                     remediation=f"`mlnx_qos -i {dev} --trust {spec.trust}` (persist it in the "
                     "node's network configuration)")
    if tuple(i in q.pfc_enabled for i in range(8)) != want_pfc:
        flags = ",".join("1" if f else "0" for f in want_pfc)
        verdict.fail(f"{p.id} ({dev}): PFC enabled on {list(q.pfc_enabled)}, profile "
                     f"{profile.name} expects priority {prio} only",
                     remediation=f"`mlnx_qos -i {dev} --pfc {flags}`; the switch port must "
                     f"enable PFC on priority {prio} too")
    off = [r for r, v in ecn.items() if v is False]
    unknown = [r for r, v in ecn.items() if v is None]
    fix = "; ".join(f"`echo 1 > {roce.ecn_path(dev, r, prio)}`" for r in off + unknown)
    if off:
        verdict.fail(f"{p.id} ({dev}): ECN off on priority {prio} ({', '.join(off)}): DCQCN "
                     "cannot slow senders before PFC pauses the link", remediation=fix)
    if unknown:
        verdict.error(f"{p.id} ({dev}): ECN state on priority {prio} not readable "
                      f"({', '.join(roce.ecn_path(dev, r, prio) for r in unknown)} absent)",
                      remediation=fix)
    verdict.ok(f"trust {q.trust}, PFC on priority {prio} only"
               + (f", ECN on priority {prio}" if spec.ecn else ""))


def _flag(v: bool | None) -> str:
    return "unknown" if v is None else ("1" if v else "0")
