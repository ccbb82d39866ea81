"""Transceiver optics: module temperature and per-lane Rx/Tx power and bias from mlxlink -m.

A dirty connector or a failing laser shows in the module's own readings before the link
drops: one lane's Rx power sinks toward the receiver's floor while BER still looks fine.
Each reading is judged against the [low..high] threshold pair the module prints beside it
(outside fails; within `ib.optics.warn_margin_*` of it warns); where a module prints none,
the profile's `ib.optics` limits stand in, and the message says which judged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts.iblinks import with_cable
from stetho.facts.node import Unavailable
from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.parsers.ib_common import IbPort
    from stetho.parsers.mlxlink_model import MlxlinkLane, MlxlinkModule, Range
    from stetho.profiles import OpticsSpec, Profile


def _low(rng: Range | None, default: float | None, margin: float,
         default_warn: float | None) -> tuple[float | None, float | None, str]:
    """(fail below, warn below, whose) from the module's range, else the profile's."""
    if rng is not None and rng.low is not None:
        return rng.low, rng.low + margin, "the module's"
    return default, default_warn, "the profile's"


def _high(rng: Range | None, default: float | None, margin: float,
          default_warn: float | None) -> tuple[float | None, float | None, str]:
    if rng is not None and rng.high is not None:
        return rng.high, rng.high - margin, "the module's"
    return default, default_warn, "the profile's"


def _lane_findings(lanes: tuple[MlxlinkLane, ...], m: MlxlinkModule, o: OpticsSpec
                   ) -> tuple[list[str], list[str], list[str]]:
    """(fails, warns, unknowns) over the lanes' Rx/Tx power and bias."""
    fails: list[str] = []
    warns: list[str] = []
    unknown: list[str] = []
    rx_fail, rx_warn, rx_whose = _low(m.rx_power_range, o.rx_power_fail_dbm, o.warn_margin_db,
                                      o.rx_power_warn_dbm)
    rx_hi = m.rx_power_range.high if m.rx_power_range is not None else None
    for ln in lanes:
        name = f"lane {ln.index}"
        if ln.rx_dark:
            fails.append(f"{name} Rx power -inf dBm (no light)")
        elif ln.rx_power_dbm is None:
            unknown.append(f"{name} Rx power")
        elif rx_fail is not None and ln.rx_power_dbm < rx_fail:
            fails.append(f"{name} Rx power {ln.rx_power_dbm:g} dBm under {rx_whose} low "
                         f"threshold {rx_fail:g} dBm")
        elif rx_hi is not None and ln.rx_power_dbm > rx_hi:
            fails.append(f"{name} Rx power {ln.rx_power_dbm:g} dBm over the module's high "
                         f"threshold {rx_hi:g} dBm (receiver overload)")
        elif rx_warn is not None and ln.rx_power_dbm < rx_warn:
            warns.append(f"{name} Rx power {ln.rx_power_dbm:g} dBm within "
                         f"{rx_warn - (rx_fail or rx_warn):g} dB of {rx_whose} low threshold "
                         f"{rx_fail:g} dBm" if rx_fail is not None else
                         f"{name} Rx power {ln.rx_power_dbm:g} dBm under {rx_warn:g} dBm")
        if ln.tx_dark:
            fails.append(f"{name} Tx power -inf dBm (laser off)")
        elif ln.tx_power_dbm is not None and m.tx_power_range is not None \
                and not m.tx_power_range.contains(ln.tx_power_dbm):
            fails.append(f"{name} Tx power {ln.tx_power_dbm:g} dBm outside the module's "
                         f"{_rng(m.tx_power_range)} dBm")
        if ln.bias_ma is not None and m.bias_range is not None \
                and not m.bias_range.contains(ln.bias_ma):
            fails.append(f"{name} bias {ln.bias_ma:g} mA outside the module's "
                         f"{_rng(m.bias_range)} mA")
    return fails, warns, unknown


def _rng(r: Range) -> str:
    return f"[{'' if r.low is None else f'{r.low:g}'}..{'' if r.high is None else f'{r.high:g}'}]"


def test_ib_optics(ib_port: IbPort, facts: NodeFacts, profile: Profile, verdict: Verdict) -> None:
    p = ib_port
    o = profile.ib.optics
    try:
        r = facts.mlxlink_for(p.device)
    except Unavailable as u:
        if u.status == "skip":
            pytest.skip(f"no module readings: {u.reason}")
        raise
    if not r.ok:
        verdict.error(f"mlxlink failed on {p.device}: {r.message}")
    m = r.module
    if m is None:
        verdict.error(f"mlxlink -d {p.device} -m printed no Module Info")
    if m.passive:
        pytest.skip(f"{p.id}: passive copper cable ({m.cable_type}): no optics to judge")
    if m.ddm is False:
        pytest.skip(f"{p.id}: module {m.part_number or '?'} has no digital diagnostics (DDM)")
    lanes = tuple(ln for ln in r.lanes if ln.rx_power_dbm is not None or ln.rx_dark
                  or ln.tx_power_dbm is not None or ln.tx_dark or ln.bias_ma is not None)
    fails, warns, unknown = _lane_findings(lanes, m, o)
    t_fail, t_warn, t_whose = _high(m.temperature_range, o.temperature_fail_c, o.warn_margin_c,
                                    o.temperature_warn_c)
    t = m.temperature_c
    if t is None:
        unknown.append("module temperature")
    elif t_fail is not None and t > t_fail:
        fails.append(f"module at {t:g} C over {t_whose} high threshold {t_fail:g} C")
    elif t_warn is not None and t > t_warn:
        warns.append(f"module at {t:g} C within {t_fail - t_warn:g} C of {t_whose} high "
                     f"threshold {t_fail:g} C" if t_fail is not None else
                     f"module at {t:g} C over {t_warn:g} C")
    rx = [ln.rx_power_dbm for ln in lanes if ln.rx_power_dbm is not None]
    rx_fail, _, rx_whose = _low(m.rx_power_range, o.rx_power_fail_dbm, o.warn_margin_db,
                                o.rx_power_warn_dbm)
    verdict.measure(min(rx) if rx else None, "dBm", expected="lanes and temperature within "
                    "the module's thresholds",
                    threshold=Limit(rx_fail, ">", "dBm", note=f"lowest lane Rx power; "
                                    f"{rx_whose} low threshold") if rx_fail is not None
                    else None)
    what = (f"{m.vendor or '?'} {m.part_number or '?'} SN {m.serial_number or '?'}")
    verdict.cite(f"mlxlink -d {p.device} -m: {what}; Temperature {t} "
                 f"{_rng(m.temperature_range) if m.temperature_range else '(no thresholds)'}; "
                 f"Rx dBm {','.join(_v(ln.rx_power_dbm, ln.rx_dark) for ln in lanes)} "
                 f"{_rng(m.rx_power_range) if m.rx_power_range else '(no thresholds)'}; "
                 f"Tx dBm {','.join(_v(ln.tx_power_dbm, ln.tx_dark) for ln in lanes)}; "
                 f"bias mA {','.join(_v(ln.bias_ma, False) for ln in lanes)}",
                 f"mlxlink:{p.device}")
    fix = (f"clean the fibre and connectors of {p.id} (module {what}) and reseat the "
           f"transceiver; if the lane stays low, replace the transceiver, then the cable; "
           f"`mlxlink -d {p.device} -m` rereads the module")
    if fails:
        verdict.fail(with_cable(f"{p.id}: " + "; ".join(fails), facts, p.device, p.port),
                     remediation=fix)
    if not lanes:
        verdict.error(f"{p.id}: module {what} printed no lane readings")
    if unknown:  # unknown is never pass
        verdict.error(f"{p.id}: module {what}: no reading of {', '.join(unknown)}"
                      + (f"; {'; '.join(warns)}" if warns else ""))
    if warns:
        verdict.warn(with_cable(f"{p.id}: " + "; ".join(warns), facts, p.device, p.port),
                     remediation=fix)
        return
    verdict.ok(f"{len(lanes)} lanes, Rx {min(rx):g}..{max(rx):g} dBm over {rx_whose} low "
               f"threshold {rx_fail:g} dBm, module {t:g} C" if rx and rx_fail is not None
               and t is not None else f"{len(lanes)} lanes within thresholds")


def _v(v: float | None, dark: bool) -> str:
    return "-inf" if dark else "N/A" if v is None else f"{v:g}"
