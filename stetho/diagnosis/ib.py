"""InfiniBand signals, read from the IB checks' structured results (a port's measured state
and rate against the expected one, its counters, its BER) and the node's per-port metrics,
never from a check's message. Each names the HCA and port (`where`: device, port), and its
command looks at that port only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from stetho.diagnosis.context import NodeContext, from_results, quantity_of
from stetho.diagnosis.model import Evidence
from stetho.results import Result


def _ib_dev(where: dict[str, str], fallback: str = "") -> tuple[str, str]:
    return where.get("device", fallback), where.get("port", "1")


def _ib_cmd(kind: str) -> Callable[[dict[str, str]], str]:
    def build(w: dict[str, str]) -> str:
        dev, port = _ib_dev(w)
        if not dev:
            return "ibstat"
        if kind == "state":
            return f"ibstat {dev} {port}; mlxlink -d {dev} -p {port}"
        if kind == "counters":
            return f"perfquery -x -C {dev} -P {port}; mlxlink -d {dev} -p {port} -c"
        return f"mlxlink -d {dev} -p {port} -m -c"
    return build


def _port_state(value: object) -> tuple[str, str, float | None] | None:
    """ib_port_state's measured value "ACTIVE LinkUp 400 Gb/s" (or "DOWN Polling"):
    (state, physical state, rate); None when it is not that shape."""
    m = re.fullmatch(r"(\S+) (\S+)(?: ([\d.]+) Gb/s)?", str(value or "").strip())
    if not m:
        return None
    return m.group(1), m.group(2), float(m.group(3)) if m.group(3) else None


def _state_off(r: Result) -> bool | None:
    """True: the port's state or physical state is not the expected one; False: it is (the
    failure is its rate); None: the result does not say."""
    got, want = _port_state(r.value), _port_state(r.expected)
    if got is None or want is None:
        return None
    return got[:2] != want[:2]


def ib_rate_low(ctx: NodeContext) -> list[Evidence]:
    """A port in its expected state that trained below its rate."""
    rows = [r for r in ctx.results_of("ib_port_state", ("fail",)) if _state_off(r) is False]
    return from_results(ctx, rows, "ib_rate_low", commands=_ib_cmd("state"))


def ib_port_down(ctx: NodeContext) -> list[Evidence]:
    """A port not in its expected state (DOWN, Polling, Init), or in none it could report."""
    rows = [r for r in ctx.results_of("ib_port_state", ("fail",)) if _state_off(r) is not False]
    return from_results(ctx, rows, "ib_port_down", commands=_ib_cmd("state"))


#: Physical-layer IB counters: errors on the wire (cable, connector, transceiver).
_LINK_COUNTERS = ("SymbolErrorCounter", "LinkErrorRecoveryCounter",
                  "LocalLinkIntegrityErrors")


def ib_symbol_errors(ctx: NodeContext) -> list[Evidence]:
    """ib_counters failing on a port whose physical-layer counters are not zero (the node's
    metrics), or the drift check failing on one of those counters (its subject names it)."""
    errs = {s for m in _LINK_COUNTERS for s, v in ctx.metric("ib", m) if v > 0}
    rows = [r for r in ctx.results_of("ib_counters", ("fail",)) if r.subject in errs]
    rows += [r for r in ctx.results_of("drift_counter", ("fail",))
             if any(m in r.subject for m in _LINK_COUNTERS[:2])]
    return from_results(ctx, rows, "ib_symbol_errors", commands=_ib_cmd("counters"),
                        quantity=quantity_of("SymbolErrorCounter"))


def ib_link_flap(ctx: NodeContext) -> list[Evidence]:
    """A port whose link went down and came back (ib_link_flaps: LinkDownedCounter growth)."""
    return from_results(ctx, ctx.results_of("ib_link_flaps", ("fail", "warn")), "ib_link_flap",
                        commands=_ib_cmd("counters"), quantity=quantity_of("LinkDownedCounter"))


def ber_high(ctx: NodeContext) -> list[Evidence]:
    return from_results(ctx, ctx.results_of("ib_link_ber"), "ber_high", commands=_ib_cmd("ber"),
                        quantity=quantity_of("pre_fec_ber"))


def ber_trend(ctx: NodeContext) -> list[Evidence]:
    rows = [r for r in ctx.results_of("drift_trend", ("warn",)) if "pre_fec_ber" in r.subject]
    return from_results(ctx, rows, "ber_trend", f"stetho history {ctx.node} --metric pre_fec_ber",
                        quantity=quantity_of("pre_fec_ber"))


SIGNALS = (ib_rate_low, ib_port_down, ib_link_flap, ib_symbol_errors, ber_high, ber_trend)
