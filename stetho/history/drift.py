"""Drift: a node's latest measurements against its own history.

Three questions, each a check run where the history database is (the controller for a sweep,
the node for a local check), before the current run is recorded:

- `drift_counter`: cumulative counters (IB symbol/recovery/downed, ECC, PCIe replays, NVLink
  replay/recovery/CRC): delta and rate since the previous run. A counter growing faster than
  the profile allows fails even while its absolute value is under the static threshold; a
  counter that went down (reset, reboot) is a reset, never a negative delta.
- `drift_shift`: gauges (temperatures, power, clocks, busbw) against the same node's last days:
  robust z-score (median/MAD), and with enough samples a two-sample Kolmogorov-Smirnov test;
  beyond the profile's bounds it warns.
- `drift_trend`: metrics that should stay flat (pre-FEC BER, correctable ECC, symbol errors):
  a least-squares line; if it crosses the threshold within the horizon, warn now with the date.

A check that needs more history than there is says `skip` and how much it needs.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from stetho.facts import metrics as M
from stetho.history import stats
from stetho.history.ks import ks_2samp
from stetho.history.store import History
from stetho.profiles import DriftSpec, Profile
from stetho.results import Result

DAY = 86400.0


@dataclass(frozen=True)
class Current:
    check: str
    subject: str
    metric: str
    value: float
    unit: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.check, self.subject, self.metric)


def evaluate(history: History, node: str, profile: Profile, current: Iterable[list[Any]],
             now: float | None = None) -> list[Result]:
    now = now if now is not None else time.time()
    spec = profile.drift
    cur = [Current(c, s, m, float(v), u or "") for c, s, m, v, u in current]
    series = {(c, s, m): sid for sid, c, s, m, _ in history.series_of(node)}
    lookback = max(spec.window_days, spec.trend_days) * DAY
    samples = history.samples(node, sorted(series.values()), since=now - lookback,
                              until=now - 1)
    past = {k: samples.get(sid, []) for k, sid in series.items()}
    out: list[Result] = []
    out += _counters(node, spec, [c for c in cur if M.is_counter(c.metric)], past, now)
    out += _shifts(node, spec, [c for c in cur if M.is_gauge(c.metric)], past, now)
    out += _trends(node, spec, profile, [c for c in cur if M.is_flat(c.metric)], past, now)
    return out


def _label(c: Current) -> str:
    return f"{c.subject}:{c.metric}" if c.subject else c.metric


def _counters(node: str, spec: DriftSpec, cur: list[Current], past: dict[Any, list[Any]],
              now: float) -> list[Result]:
    if not cur:
        return []
    with_prev = [(c, past.get(c.key, [])[-1]) for c in cur if past.get(c.key)]
    if not with_prev:
        return [Result(node, "drift_counter", "", "skip",
                       "needs 1 earlier run with these counters; the history has none",
                       probe="history")]
    out = []
    resets = []
    for c, prev in with_prev:
        d = stats.counter_delta(prev.value, c.value)
        if d.reset:
            resets.append(_label(c))
        days = max((now - prev.time) / DAY, 1e-6)
        rate = d.delta / days
        limit = spec.counter_rate_max.get(c.metric)
        if limit is not None and rate > limit:
            out.append(Result(
                node, "drift_counter", _label(c), "fail",
                f"{c.metric} on {c.subject} grew by {d.delta:g} in {days:.2g} days "
                f"({rate:.3g}/day, limit {limit:g}/day)"
                + (" after a reset" if d.reset else ""),
                value=rate, unit="per day", expected=f"<= {limit:g}/day",
                threshold=f"{limit:g}/day", probe="history",
                remediation="the link or device is degrading now, below the static "
                            "threshold: schedule the fix before it fails (cable, optics, GPU)"))
    ok = len(with_prev) - len(out)
    msg = f"{ok} counters within their growth limits since the previous run"
    if resets:
        msg += f"; reset since then (reboot or counter clear): {', '.join(sorted(resets)[:5])}"
    out.append(Result(node, "drift_counter", "", "pass", msg, value=len(with_prev),
                      unit="counters", probe="history"))
    return out


def _shifts(node: str, spec: DriftSpec, cur: list[Current], past: dict[Any, list[Any]],
            now: float) -> list[Result]:
    if not cur:
        return []
    since = now - spec.window_days * DAY
    out = []
    judged = 0
    short = 0
    for c in cur:
        ref = [p.value for p in past.get(c.key, []) if p.time >= since]
        if len(ref) < spec.min_samples:
            short += 1
            continue
        judged += 1
        z = stats.robust_z(c.value, ref)
        ks = None
        if len(ref) + 1 >= spec.ks_min_samples:
            series = ref + [c.value]
            k = max(3, len(series) // 3)
            ks = ks_2samp(series[-k:], series[:-k])
        beyond_z = z is not None and abs(z) > spec.z_bound
        beyond_ks = ks is not None and ks.pvalue < spec.ks_alpha
        if beyond_z or beyond_ks:
            med = stats.median(ref)
            why = []
            if beyond_z and z is not None:
                why.append(f"robust z {z:+.1f} (bound {spec.z_bound:g})")
            if beyond_ks and ks is not None:
                why.append(f"KS p={ks.pvalue:.2g} (alpha {spec.ks_alpha:g})")
            out.append(Result(
                node, "drift_shift", _label(c), "warn",
                f"{c.metric} on {c.subject or node} is {c.value:g} {c.unit}, its last "
                f"{spec.window_days:g} days' median is {med:g}: " + ", ".join(why),
                value=c.value, unit=c.unit, expected=f"~{med:g} (own {spec.window_days:g}-day "
                f"median)", threshold=f"|z| <= {spec.z_bound:g}", probe="history",
                remediation="compare with the node's peers (fleet checks) and its other "
                            "signals; a shift that persists is a change on this node"))
    if judged == 0:
        return [Result(node, "drift_shift", "", "skip",
                       f"needs {spec.min_samples} runs in the last {spec.window_days:g} days "
                       f"per metric; the history has fewer", probe="history")]
    out.append(Result(node, "drift_shift", "", "pass",
                      f"{judged - len(out)} of {judged} metrics within their own history"
                      + (f" ({short} with too little history)" if short else ""),
                      value=judged, unit="metrics", probe="history"))
    return out


def _trends(node: str, spec: DriftSpec, profile: Profile, cur: list[Current],
            past: dict[Any, list[Any]], now: float) -> list[Result]:
    if not cur:
        return []
    since = now - spec.trend_days * DAY
    out = []
    judged = 0
    for c in cur:
        threshold = _threshold(profile, spec, c.metric)
        if threshold is None:
            continue
        pts = [p for p in past.get(c.key, []) if p.time >= since]
        if len(pts) + 1 < spec.min_samples:
            continue
        judged += 1
        fit = stats.linear_fit([p.time for p in pts] + [now], [p.value for p in pts] + [c.value])
        if fit is None:
            continue
        when = stats.crossing_time(fit, threshold)
        if when is None or c.value >= threshold:
            continue  # not heading there, or already there (the static check says so)
        if when - now <= spec.horizon_days * DAY:
            date = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d")
            out.append(Result(
                node, "drift_trend", _label(c), "warn",
                f"{c.metric} on {c.subject} is {c.value:g} and rising {fit.slope * DAY:.3g}/day:"
                f" predicted to reach {threshold:g} on {date} "
                f"({(when - now) / DAY:.1f} days)",
                value=c.value, unit=c.unit, expected=f"< {threshold:g}",
                threshold=f"crossing within {spec.horizon_days:g} days", probe="history",
                remediation="drain and fix before it crosses: reseat/replace the cable or "
                            "transceiver for link errors and BER, schedule the GPU for ECC"))
    if judged == 0:
        return [Result(node, "drift_trend", "", "skip",
                       f"needs {spec.min_samples} runs in the last {spec.trend_days:g} days "
                       "for a trend; the history has fewer", probe="history")]
    out.append(Result(node, "drift_trend", "", "pass",
                      f"{judged - len(out)} of {judged} flat metrics not heading for their "
                      f"threshold within {spec.horizon_days:g} days", value=judged,
                      unit="metrics", probe="history"))
    return out


def _threshold(profile: Profile, spec: DriftSpec, metric: str) -> float | None:
    if metric in spec.thresholds:
        return spec.thresholds[metric]
    # The static limits the checks fail at are the trends' thresholds too: one number each.
    if metric in profile.ib.counter_max:
        return float(profile.ib.counter_max[metric])
    if metric == "pre_fec_ber":
        return profile.ib.pre_fec_ber_fail
    return None
