"""InfiniBand ports: state, physical state, rate, and error counters; and the port count.

A port that renegotiated from 400 to 200 Gb/s, or one with climbing symbol errors, drags every
collective that crosses it. Counters are named as perfquery names them, whatever the source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.ib_common import IbPort
    from stetho.profiles import Profile


_COUNTER_FIX = {
    "SymbolErrorCounter": "clean or replace the cable/transceiver (physical layer errors)",
    "LinkErrorRecoveryCounter": "the link retrains: check the cable, transceiver and switch port",
    "LinkDownedCounter": "the link went down: check the cable, transceiver and switch port",
    "PortRcvErrors": "malformed packets received: check the cable and the peer port",
    "PortRcvRemotePhysicalErrors": "errors on the remote side: check the switch port",
    "LocalLinkIntegrityErrors": "replace the cable/transceiver",
    "ExcessiveBufferOverrunErrors": "flow-control problem: check the cable and the switch",
    "PortXmitDiscards": "congestion or a down peer: check the fabric (ibdiagnet) and routing",
}


def _expects(profile: Profile, port: IbPort) -> None:
    want = profile.ib.link_layer
    if want and port.link_layer and port.link_layer != want:
        pytest.skip(f"{port.link_layer} port; profile {profile.name} checks {want} ports")


def test_ib_port_state(ib_port: IbPort, profile: Profile, verdict: Verdict) -> None:
    p = ib_port
    _expects(profile, p)
    rate = p.rate_gbps
    want_rate = profile.ib.rate_gbps
    verdict.measure(f"{p.state} {p.phys_state} {rate:g} Gb/s" if rate is not None
                    else f"{p.state} {p.phys_state}",
                    expected=f"{profile.ib.state} {profile.ib.phys_state}"
                    + (f" {want_rate:g} Gb/s" if want_rate else ""))
    verdict.cite(f"/sys/class/infiniband/{p.device}/ports/{p.port}: state={p.state_code}: "
                 f"{p.state}, phys_state={p.phys_state_code}: {p.phys_state}, rate={p.rate_text}",
                 "ib_sysfs")
    if p.state != profile.ib.state or p.phys_state != profile.ib.phys_state:
        verdict.fail(f"port {p.id} is {p.state}/{p.phys_state}, expected "
                     f"{profile.ib.state}/{profile.ib.phys_state}",
                     remediation=f"check the cable and the switch port; `ibstat {p.device} "
                     f"{p.port}`, `mlxlink -d {p.device} -p {p.port}`; if Polling, the peer is "
                     "down or the cable is bad; if Init, the subnet manager has not configured it")
    if want_rate and (rate is None or rate < want_rate):
        verdict.fail(f"port {p.id} at {rate:g} Gb/s ({p.rate_text}), expected {want_rate:g}",
                     remediation=f"the link trained down: reseat or replace the cable/"
                     f"transceiver; `mlxlink -d {p.device} -p {p.port}` shows the lanes and "
                     "BER; check the switch port's configured speed")
    verdict.ok(f"{p.state} {p.phys_state} {p.rate_text}")


def test_ib_counters(ib_port: IbPort, profile: Profile, verdict: Verdict) -> None:
    p = ib_port
    limits = profile.ib.counter_max
    errors = p.errors()
    checked = {k: v for k, v in errors.items() if k in limits}
    over = {k: v for k, v in checked.items() if v > limits[k]}
    verdict.measure(sum(checked.values()), "errors", expected="under per-counter thresholds",
                    threshold=", ".join(f"{k}<={limits[k]}" for k in checked))
    verdict.cite(", ".join(f"{k}={v}" for k, v in errors.items()), "ib_sysfs")
    if not checked:
        pytest.skip(f"port {p.id} exposes none of the counters the profile thresholds")
    if over:
        first = next(iter(over))
        verdict.fail(f"port {p.id}: " + ", ".join(f"{k}={v} (max {limits[k]})"
                                                  for k, v in over.items()),
                     remediation=f"{_COUNTER_FIX.get(first, 'check the link')}; reset the "
                     f"counters after the fix: `perfquery -R -x <lid> {p.port}`")
    verdict.ok("error counters under thresholds")


def test_ib_port_count(node: NodeFacts,
                       facts: NodeFacts,
                       profile: Profile,
                       verdict: Verdict) -> None:
    want = profile.ib.ports
    if not want:
        pytest.skip(f"profile {profile.name} sets no InfiniBand port count")
    ports = [p for p in facts.ib_ports() if p.link_layer in (None, profile.ib.link_layer)]
    up = [p for p in ports if p.state == profile.ib.state]
    verdict.measure(len(up), "ports up", expected=want)
    excerpt = ", ".join(f"{p.id}={p.state}" for p in ports)
    panic = None
    try:
        panic = facts.ibstat().panic
    except Exception:  # ibstat is a cross-check only; sysfs is the source of truth
        panic = None
    verdict.cite(excerpt + (f"\nibstat: ibpanic: {panic}" if panic else ""), "ib_sysfs")
    if len(up) < want:
        verdict.fail(f"{len(up)} of {want} {profile.ib.link_layer} ports up "
                     f"({len(ports)} present)",
                     remediation="find the missing ports with `ibstat`; check cables, "
                     "transceivers and that the HCAs are detected (`lspci | grep Mellanox`)")
    if panic:
        verdict.fail(f"ibstat aborted: {panic}",
                     remediation="an RDMA device vanished or its driver is wedged: check "
                     "`dmesg | grep mlx5`, reload mlx5_ib or reboot")
    verdict.ok(f"{len(up)} {profile.ib.link_layer} ports up")


def test_ib_link_ber(ib_port: IbPort, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    """Raw (pre-FEC) BER from mlxlink: optics and cables degrade here first."""
    _expects(profile, ib_port)
    reports = {r.device: r for r in facts.mlxlink()}
    if not reports:
        pytest.skip("mlxlink (NVIDIA MFT) is not installed: no BER readings")
    r = reports.get(ib_port.device)
    if r is None:
        verdict.error(f"mlxlink gave no report for {ib_port.device}")
    if not r.ok:
        verdict.error(f"mlxlink failed on {ib_port.device}: {r.message}")
    raw, eff = r.pre_fec_ber, r.post_fec_ber
    warn_at, fail_at = profile.ib.pre_fec_ber_warn, profile.ib.pre_fec_ber_fail
    verdict.measure(raw, "BER", expected=f"< {warn_at:g}",
                    threshold=Limit(fail_at, "<", note=f"warns from {warn_at:g}"))
    verdict.cite(f"mlxlink -d {ib_port.device}: Raw Physical BER {raw}, Effective Physical "
                 f"BER {eff}, module {r.module.part_number if r.module else '?'}", "mlxlink")
    fix = (f"clean or replace the transceiver/cable of {ib_port.id} "
           f"(`mlxlink -d {ib_port.device} -m` shows per-lane rx power); rising BER precedes "
           "link flaps")
    if eff:
        verdict.fail(f"{ib_port.id}: {eff:g} errors per bit left after FEC", remediation=fix)
    if raw is None:
        verdict.error("mlxlink reports no raw physical BER")
    if raw >= fail_at:
        verdict.fail(f"{ib_port.id}: pre-FEC BER {raw:g} >= {fail_at:g}", remediation=fix)
    if raw >= warn_at:
        verdict.warn(f"{ib_port.id}: pre-FEC BER {raw:g} above {warn_at:g}", remediation=fix)
        return
    verdict.ok(f"pre-FEC BER {raw:g}")
