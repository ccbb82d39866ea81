"""InfiniBand ports: state, physical state, rate, link layer and error counters; the port count.

A port that renegotiated from 400 to 200 Gb/s, or one with climbing symbol errors, drags every
collective that crosses it. Counters are named as perfquery names them, whatever the source.
Ports come from /sys/class/infiniband, or from ibstat and perfquery where that tree is absent
(stetho.facts.ib); each verdict names its source, and where both exist a disagreement warns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts.ib import port_counters
from stetho.facts.iblinks import with_cable
from stetho.facts.node import Unavailable
from stetho.facts.window import count
from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.ib import Reading
    from stetho.facts.node import NodeFacts
    from stetho.facts.window import Counted
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
    "PortLocalPhysicalErrors": "physical errors on this port: clean or replace the cable",
    "PortMalformedPktErrors": "malformed packets: check the cable and the peer port",
    "PortBufferOverrunErrors": "receive buffer overruns: check flow control and the switch",
}

_LINK_TYPE_FIX = ("if the HCA should run the profile's link layer, set its port type with MFT: "
                  "`mlxconfig -d {dev} set LINK_TYPE_P1=1` (1 = InfiniBand, 2 = Ethernet) and "
                  "reboot; if the node is meant to be a RoCE node, give it a RoCE profile")


def _source(facts: NodeFacts, port: IbPort) -> str:
    return "ibstat" if facts.ib_source() == "ibstat" else \
        f"/sys/class/infiniband/{port.device}/ports/{port.port}"


def _expects(profile: Profile, port: IbPort) -> None:
    """Port checks judge the ports the profile expects on its InfiniBand link layer."""
    want = profile.ib.link_layer_of(port.device)
    if want != profile.ib.link_layer:
        pytest.skip(f"{port.device} is in a {want} port group of profile {profile.name}")
    if port.link_layer and port.link_layer != want:
        pytest.skip(f"{port.link_layer} port where profile {profile.name} expects {want}: "
                    "judged by ib_link_layer")


def test_ib_port_state(ib_port: IbPort, facts: NodeFacts, profile: Profile,
                       verdict: Verdict) -> None:
    p = ib_port
    _expects(profile, p)
    rate = p.rate_gbps
    group = profile.ib.group_of(p.device)
    want_rate = group.rate_gbps if group and group.rate_gbps else profile.ib.rate_gbps
    verdict.measure(f"{p.state} {p.phys_state} {rate:g} Gb/s" if rate is not None
                    else f"{p.state} {p.phys_state}",
                    expected=f"{profile.ib.state} {profile.ib.phys_state}"
                    + (f" {want_rate:g} Gb/s" if want_rate else ""))
    disagree = facts.ibstat_disagreements().get(p.id, [])
    verdict.cite(f"{_source(facts, p)}: state={p.state_code}: {p.state}, "
                 f"phys_state={p.phys_state_code}: {p.phys_state}, rate={p.rate_text}"
                 + (f"; ibstat disagrees: {'; '.join(disagree)}" if disagree else ""),
                 facts.ib_source())
    if p.state != profile.ib.state or p.phys_state != profile.ib.phys_state:
        verdict.fail(with_cable(f"port {p.id} is {p.state}/{p.phys_state}, expected "
                                f"{profile.ib.state}/{profile.ib.phys_state}", facts, p.device,
                                p.port),
                     remediation=f"check the cable and the switch port; `ibstat {p.device} "
                     f"{p.port}`, `mlxlink -d {p.device} -p {p.port}`; if Polling, the peer is "
                     "down or the cable is bad; if Init, the subnet manager has not configured it")
    if want_rate and (rate is None or rate < want_rate):
        verdict.fail(with_cable(f"port {p.id} at {_rate(rate)} Gb/s ({p.rate_text}), expected "
                                f"{want_rate:g}", facts, p.device, p.port),
                     remediation=f"the link trained down: reseat or replace the cable/"
                     f"transceiver; `mlxlink -d {p.device} -p {p.port}` shows the lanes and "
                     "BER; check the switch port's configured speed")
    if disagree:
        verdict.warn(f"port {p.id}: sysfs and ibstat disagree: {'; '.join(disagree)}",
                     remediation="one of them is stale or wrong: rerun `ibstat` and read "
                     f"/sys/class/infiniband/{p.device}/ports/{p.port}; check the driver "
                     "(rdma-core, mlx5_ib) versions")
        return
    verdict.ok(f"{p.state} {p.phys_state} {p.rate_text} (from {facts.ib_source()})")


def _rate(rate: float | None) -> str:
    return "unknown" if rate is None else f"{rate:g}"


def test_ib_link_layer(ib_port: IbPort, profile: Profile, verdict: Verdict) -> None:
    """The link layer of each port is its port group's (InfiniBand or Ethernet/RoCE)."""
    p = ib_port
    if not profile.ib.port_groups:
        pytest.skip(f"profile {profile.name} declares no port groups")
    group = profile.ib.group_of(p.device)
    if group is None:
        pytest.skip(f"{p.device} is in no port group of profile {profile.name}")
    verdict.measure(p.link_layer, expected=group.link_layer)
    verdict.cite(f"{p.id}: link layer {p.link_layer or 'unknown'}; profile {profile.name} "
                 f"group {group.name} ({', '.join(group.devices)}) expects {group.link_layer}",
                 "ib_sysfs")
    if p.link_layer is None:
        verdict.error(f"{p.device}: link layer unknown (neither sysfs nor ibstat names it), "
                      f"profile expects {group.link_layer}")
    if p.link_layer != group.link_layer:
        verdict.fail(f"{p.device}: link layer {p.link_layer}, profile expects "
                     f"{group.link_layer}", remediation=_LINK_TYPE_FIX.format(dev=p.device))
    verdict.ok(f"{p.link_layer} ({group.name})")


def test_ib_counters(ib_port: IbPort, facts: NodeFacts, profile: Profile,
                     verdict: Verdict) -> None:
    """Each error counter under its profile threshold. Where sysfs and perfquery both read a
    counter, the higher reading is judged (stetho.facts.ib.port_counters, the same number
    history records) and the message names its source; the disagreement itself warns."""
    p = ib_port
    limits = {k: v for k, v in profile.ib.counter_max.items()
              if not (k == _FLAPS and profile.ib.link_flaps_max is not None)}  # ib_link_flaps'
    merged = port_counters(facts, p)
    readings, notes = merged.readings, list(merged.notes)
    if facts.ib_source() == "ibstat" and not p.errors():
        if notes:  # ibstat has no counters: perfquery was the only source, and it failed
            verdict.error(f"port {p.id}: no counters: " + "; ".join(notes))
    disagree = [r.describe(k) for k, r in merged.disagree.items()]
    checked = {k: r.value for k, r in readings.items() if k in limits}
    # a time base: each counter's growth within the window where history has an earlier
    # reading (a reset starts a new epoch), else its count since the last reset
    w = facts.windows()
    counted = {k: w.count(("ib", p.id, k), v) for k, v in checked.items()}
    over = [k for k, c in counted.items() if c.amount > limits[k]]
    verdict.measure(sum(c.amount for c in counted.values()), "errors",
                    expected="under per-counter thresholds",
                    threshold=", ".join(f"{k}<={limits[k]}" for k in checked))
    verdict.cite(", ".join(r.describe(k) for k, r in readings.items())
                 + "".join(f"\n{n}" for n in notes) + f"\n{w.basis()}", facts.ib_source())
    if not checked:
        if notes:
            verdict.error(f"port {p.id}: no counters the profile thresholds: " + "; ".join(notes))
        pytest.skip(f"port {p.id} exposes none of the counters the profile thresholds")
    if over:
        verdict.fail(with_cable(f"port {p.id}: " + ", ".join(
            _over(k, counted[k], readings[k], limits[k]) for k in over) + f"; {w.basis()}",
            facts, p.device, p.port),
                     remediation=f"{_COUNTER_FIX.get(over[0], 'check the link')}; reset the "
                     f"counters after the fix: `perfquery -R -x <lid> {p.port}`")
    if notes or disagree:
        why = notes + ([f"the sources disagree, the higher judged: {'; '.join(disagree)}"]
                       if disagree else [])
        verdict.warn(f"port {p.id}: counters under thresholds, but " + "; ".join(why),
                     remediation=f"compare `perfquery -x -C {p.device} -P 1` with /sys/class/"
                     f"infiniband/{p.device}/ports/1/counters; update infiniband-diags if "
                     "it cannot read this HCA")
        return
    verdict.ok(f"error counters under thresholds ({w.basis()})")


_FLAPS = "LinkDownedCounter"
_FLAP_FIX = ("a link that went down and came back flapped: reseat, clean or replace the cable/"
             "transceiver of {port} (`mlxlink -d {dev} -p {pn} -m` shows its optics), then the "
             "switch port; reset the counters after the fix: `perfquery -R -x <lid> {pn}`")


def test_ib_link_flaps(ib_port: IbPort, facts: NodeFacts, profile: Profile,
                       verdict: Verdict) -> None:
    """Link flaps: LinkDownedCounter's growth within the counter window (the same window,
    history key and reading as ib_counters), over `ib.link_flaps_max`. A flap is named as one:
    it drops every job on the port, and the cable or transceiver is the usual cause."""
    p = ib_port
    _expects(profile, p)
    limit = profile.ib.link_flaps_max
    if limit is None:
        pytest.skip(f"profile {profile.name} sets no ib.link_flaps_max (ib_counters judges "
                    f"{_FLAPS})")
    merged = port_counters(facts, p)
    reading = merged.readings.get(_FLAPS)
    if reading is None:
        verdict.error(f"port {p.id}: no {_FLAPS} reading"
                      + (": " + "; ".join(merged.notes) if merged.notes else ""))
    w = facts.windows()
    c = w.count(("ib", p.id, _FLAPS), reading.value)
    n = c.amount
    where = c.growth.span() if c.growth is not None else "since boot or the last counter reset"
    verdict.measure(n, "flaps", expected=f"<= {limit}", threshold=Limit(limit, "<=", "flaps"))
    verdict.cite(f"{c.describe(_FLAPS)}; {reading.describe(_FLAPS)}; {w.basis()}",
                 facts.ib_source())
    if n > limit:
        verdict.fail(with_cable(f"port {p.id}: link flapped {n:g} time{'s' if n != 1 else ''} "
                                f"{where} ({_FLAPS}; max {limit})", facts, p.device, p.port),
                     remediation=_FLAP_FIX.format(port=p.id, dev=p.device, pn=p.port))
    verdict.ok(f"no link flaps {where} ({_FLAPS} {n:g}, max {limit})")


def _over(name: str, counted: Counted, reading: Reading, limit: int) -> str:
    """'SymbolErrorCounter +4096 in the last 24 h (SymbolErrorCounter=4096 now) (max 10)', or
    'SymbolErrorCounter=5000 (perfquery -x; sysfs read 0) since boot or its last reset ...'."""
    g = counted.growth
    if g is None:
        return f"{reading.describe(name)} since boot or its last reset (max {limit})"
    return f"{name} +{count(g.delta)} {g.span()} ({reading.describe(name)} now) (max {limit})"


def test_ib_port_count(node: NodeFacts,
                       facts: NodeFacts,
                       profile: Profile,
                       verdict: Verdict) -> None:
    want = profile.ib.ports
    if not want:
        pytest.skip(f"profile {profile.name} sets no InfiniBand port count")
    layer = profile.ib.link_layer
    every = facts.ib_ports()
    ports = [p for p in every if p.link_layer in (None, layer)
             and profile.ib.link_layer_of(p.device) == layer]
    other = [p for p in every if p.link_layer not in (None, layer)
             and profile.ib.link_layer_of(p.device) == layer]
    up = [p for p in ports if p.state == profile.ib.state]
    verdict.measure(len(up), "ports up", expected=want)
    excerpt = ", ".join(f"{p.id}={p.state}/{p.link_layer}" for p in ports + other)
    panic, ibstat_note = None, None
    try:
        panic = facts.ibstat().panic
    except Unavailable as u:
        if u.status != "skip":
            ibstat_note = f"ibstat: {u.reason}"
    verdict.cite(excerpt + (f"\nibstat: ibpanic: {panic}" if panic else "")
                 + (f"\n{ibstat_note}" if ibstat_note else ""), facts.ib_source())
    if len(up) < want and other and len(ports) < want:
        verdict.fail(f"{len(up)} of {want} {layer} ports up: {len(other)} ports the profile "
                     f"expects on {layer} are {other[0].link_layer} ("
                     + ", ".join(p.device for p in other[:8]) + ")",
                     remediation=_LINK_TYPE_FIX.format(dev=other[0].device))
    if len(up) < want:
        verdict.fail(f"{len(up)} of {want} {layer} ports up ({len(ports)} present)",
                     remediation="find the missing ports with `ibstat`; check cables, "
                     "transceivers and that the HCAs are detected (`lspci | grep Mellanox`)")
    if panic:
        verdict.fail(f"ibstat aborted: {panic}",
                     remediation="an RDMA device vanished or its driver is wedged: check "
                     "`dmesg | grep mlx5`, reload mlx5_ib or reboot")
    if ibstat_note:
        verdict.warn(f"{len(up)} {layer} ports up, but {ibstat_note}",
                     remediation="run `ibstat` by hand; update infiniband-diags (rdma-core) "
                     "if its output format is not readable")
        return
    verdict.ok(f"{len(up)} {layer} ports up (from {facts.ib_source()})")


def test_ib_link_ber(ib_port: IbPort, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    """Raw (pre-FEC) BER from mlxlink: optics and cables degrade here first. How much raw BER
    a link tolerates depends on its FEC and lane speed: the profile's ib.pre_fec_ber row for
    the mode and speed mlxlink reports judges it; a link no row is for, the strictest row."""
    _expects(profile, ib_port)
    try:
        r = facts.mlxlink_for(ib_port.device)  # this device's bad output errors this port only
    except Unavailable as u:
        if u.status == "skip":
            pytest.skip(f"no BER readings: {u.reason}")
        raise
    if not r.ok:
        verdict.error(f"mlxlink failed on {ib_port.device}: {r.message}")
    raw, eff = r.pre_fec_ber, r.post_fec_ber
    fec, lane = r.fec_mode, r.lane_gbps
    choice = profile.ib.ber_limits(fec, lane)
    row = choice.row
    warn_at, fail_at = row.warn, row.fail
    link = f"{_speed(r.port_gbps, lane, r.speed)}, FEC {r.fec or 'not reported'}"
    applied = (f"row {row.name}" if choice.exact else
               f"no row of profile {profile.name} is for {fec or 'an unknown FEC'} at "
               f"{_rate(lane)} Gb/s per lane: the strictest row {row.name} judges it")
    verdict.measure(raw, "BER", expected=f"< {warn_at:g}",
                    threshold=Limit(fail_at, "<", note=f"warns from {warn_at:g}; {applied}"))
    verdict.cite(f"mlxlink -d {ib_port.device}: Speed {r.speed}, Width {r.width}, FEC {r.fec}, "
                 f"Raw Physical BER {raw}, Effective Physical BER {eff}, module "
                 f"{r.module.part_number if r.module else '?'}", f"mlxlink:{ib_port.device}")
    fix = (f"clean or replace the transceiver/cable of {ib_port.id} "
           f"(`mlxlink -d {ib_port.device} -m` shows per-lane rx power); rising BER precedes "
           "link flaps")
    if not choice.exact:
        fix += (f"; add an ib.pre_fec_ber row for FEC {r.fec!r} at {_rate(lane)} Gb/s per lane "
                f"to profile {profile.name} if this link is meant to run so")
    if eff:
        verdict.fail(with_cable(f"{ib_port.id}: {eff:g} errors per bit left after FEC ({link})",
                                facts, ib_port.device, ib_port.port),
                     remediation=fix)
    if raw is None:
        verdict.error("mlxlink reports no raw physical BER")
    if raw >= fail_at:
        verdict.fail(with_cable(f"{ib_port.id}: pre-FEC BER {raw:g} >= {fail_at:g} ({link}; "
                                f"{applied})", facts, ib_port.device, ib_port.port),
                     remediation=fix)
    if raw >= warn_at:
        verdict.warn(with_cable(f"{ib_port.id}: pre-FEC BER {raw:g} above {warn_at:g} ({link}; "
                                f"{applied})", facts, ib_port.device, ib_port.port),
                     remediation=fix)
        return
    verdict.ok(f"pre-FEC BER {raw:g} under {warn_at:g} ({link}; {applied})")


def _speed(port: float | None, lane: float | None, text: str | None) -> str:
    """'400 Gb/s (100 per lane)', or what mlxlink printed where it cannot be read."""
    if port is not None and lane is not None:
        return f"{port:g} Gb/s ({lane:g} per lane)"
    return f"speed {text or 'not reported'}"
