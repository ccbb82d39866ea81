"""Drift: a node's latest measurements against its own history.

Three questions, each a check run where the history database is (the controller for a sweep,
the node for a local check), before the current run is recorded:

- `drift_counter`: cumulative counters (IB symbol/recovery/downed, ECC, PCIe replays, NVLink
  replay/recovery/CRC): delta and rate since the previous run. A counter growing faster than
  the profile allows fails even while its absolute value is under the static threshold; a
  counter that went down (reset, reboot) is a reset, never a negative delta.
- `drift_shift`: gauges (temperatures, power, clocks, busbw) against the same node's last days
  (at the same hour for a metric with a daily rhythm): robust z-score (median/MAD) on a scale
  never finer than the metric's resolution or its minimum meaningful change over the bound
  (stetho.facts.kinds), and with enough samples on both sides a two-sample Kolmogorov-Smirnov
  test whose shift must also be a meaningful change; beyond the profile's bounds it warns.
- `drift_trend`: metrics that should stay flat (pre-FEC BER, correctable ECC, symbol errors):
  a least-squares line; if it crosses the threshold within the horizon, warn now with the date.
  A gauge whose sustained slope (r² over the bound) has moved it by a meaningful change warns
  too: a slow decline never shows as a jump against last week's median.

A verdict needs enough history (min_samples runs over min_span_days); without it the check
says `skip` with the counts, never a silent pass. Warnings are grouped: one per metric and node,
its subjects strongest first (stetho.history.reference).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from stetho.core.record import record
from stetho.facts import kinds
from stetho.facts.kinds import MetricKind
from stetho.history import stats
from stetho.history.backend import HistoryBackend
from stetho.history.ks import ks_2samp
from stetho.history.reference import (
    DAY,
    Finding,
    Reference,
    counts,
    enough,
    group,
    needs,
    reference,
)
from stetho.history.store import Sample
from stetho.profiles import DriftSpec, Profile
from stetho.results import Result


@record
class Current:
    check: str
    subject: str
    metric: str
    value: float
    unit: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.check, self.subject, self.metric)


def evaluate(history: HistoryBackend, node: str, profile: Profile, current: Iterable[list[Any]],
             now: float | None = None) -> list[Result]:
    now = now if now is not None else time.time()
    spec = profile.drift
    cur = [Current(c, s, m, float(v), u or "") for c, s, m, v, u in current]
    kind_of = {c.metric: kinds.resolve(c.metric, spec.metrics) for c in cur}
    weekly = any(k is not None and k.rhythm == "weekly" for k in kind_of.values())
    series = {(c, s, m): sid for sid, c, s, m, _ in history.series_of(node)}
    lookback = max(spec.window_days, spec.trend_days,
                   spec.weekly_weeks * 7 if weekly else 0.0) * DAY
    samples = history.samples(node, sorted(series.values()), since=now - lookback,
                              until=now)
    past = {k: samples.get(sid, []) for k, sid in series.items()}
    declared = [(c, k) for c in cur if (k := kind_of[c.metric]) is not None]
    out: list[Result] = []
    out += _counters(node, spec, [c for c, k in declared if k.kind == "counter"], past, now)
    shifts, shifted = _shifts(node, spec, [(c, k) for c, k in declared if k.kind == "gauge"],
                              past, now)
    out += shifts
    out += _trends(node, spec, profile, [(c, k) for c, k in declared
                                         if k.trend or k.kind == "gauge"], past, now, shifted)
    undeclared = sorted({_label(c) for c in cur if kind_of[c.metric] is None})
    if undeclared:
        out.append(Result(
            node, "drift_shift", "undeclared", "skip",
            f"{len(undeclared)} metrics declare no kind, so drift cannot judge them: "
            + ", ".join(undeclared[:5]) + (" ..." if len(undeclared) > 5 else ""),
            value=len(undeclared), unit="metrics", probe="history",
            remediation="declare each metric's kind and resolution under drift.metrics in "
                        "the profile (stetho.facts.kinds lists the fields)"))
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


Gauge = tuple[Current, MetricKind]
Past = dict[tuple[str, str, str], list[Sample]]

_SHIFT_FIX = ("compare with the node's peers (fleet checks) and its other signals; a shift that "
              "persists is a change on this node")


def _shifts(node: str, spec: DriftSpec, gauges: list[Gauge], past: Past, now: float
            ) -> tuple[list[Result], set[tuple[str, str, str]]]:
    """Warnings grouped per metric, and the keys that shifted (their trend would repeat it)."""
    if not gauges:
        return [], set()
    findings: list[Finding] = []
    judged = 0
    short: list[tuple[str, str]] = []
    for c, k in gauges:
        ref = reference(spec, k, past.get(c.key, []), now, spec.window_days)
        if ref.short:
            short.append((_label(c), ref.short))
            continue
        judged += 1
        f = _shift(spec, c, k, ref)
        if f is not None:
            findings.append(f)
    if judged == 0:
        return [Result(node, "drift_shift", "", "skip",
                       f"{needs(spec)} in the last {spec.window_days:g} days per metric; "
                       f"none of {len(gauges)} gauges has that: "
                       + ", ".join(f"{lbl} {why}" for lbl, why in short[:3]),
                       value=len(gauges), unit="metrics", probe="history")], set()
    out = group(node, findings)
    out.append(Result(node, "drift_shift", "", "pass",
                      f"{judged - len(findings)} of {judged} gauges within their own history",
                      value=judged, unit="metrics", probe="history"))
    if short:
        out.append(_short(node, "drift_shift", spec, short))
    keys = {(c.check, c.subject, c.metric) for c, _ in gauges
            if any(f.label == _label(c) for f in findings)}
    return out, keys


def _short(node: str, check: str, spec: DriftSpec, short: list[tuple[str, str]]) -> Result:
    """The metrics left unjudged: a skip of its own, so a pass never hides them."""
    return Result(node, check, "short-history", "skip",
                  f"{len(short)} metrics without a verdict, {needs(spec)}: "
                  + "; ".join(f"{lbl} has {why}" for lbl, why in short[:3])
                  + (f"; and {len(short) - 3} more" if len(short) > 3 else ""),
                  value=len(short), unit="metrics", probe="history")


def _shift(spec: DriftSpec, c: Current, k: MetricKind, ref: Reference) -> Finding | None:
    values = ref.values
    med = stats.median(values)
    meaningful = k.meaningful(med)
    scale_floor = max(k.resolution, meaningful / spec.z_bound)
    z = stats.robust_z(c.value, values, floor=scale_floor)
    beyond_z = z is not None and abs(z) > spec.z_bound
    why, strength = [], 0.0
    if beyond_z and z is not None:
        why.append(f"robust z {z:+.1f} (bound {spec.z_bound:g})")
        strength = abs(z) / spec.z_bound
    series = values + [c.value]
    recent_n = len(series) // 3
    if min(recent_n, len(series) - recent_n) >= spec.ks_min_samples:
        recent, older = series[-recent_n:], series[:-recent_n]
        ks = ks_2samp(recent, older)
        effect = stats.median(recent) - stats.median(older)
        least = max(k.meaningful(stats.median(older)), k.resolution)
        if ks.pvalue < spec.ks_alpha and abs(effect) > least:
            why.append(f"KS p={ks.pvalue:.2g} (alpha {spec.ks_alpha:g}) for a {effect:+.3g} "
                       f"{c.unit} shift".replace("  ", " "))
            strength = max(strength, abs(effect) / least)
    if not why:
        return None
    where = c.subject or "the node"
    return Finding("drift_shift", c.metric, c.subject, _label(c), strength,
                   f"{where} is {c.value:g} {c.unit} vs median {med:g} ({ref.how}): "
                   .replace("  ", " ") + ", ".join(why),
                   c.value, c.unit, f"~{med:g} (own median, {ref.how})",
                   f"|z| <= {spec.z_bound:g}, change > {meaningful:.3g} {c.unit}".strip(),
                   _SHIFT_FIX)


def _trends(node: str, spec: DriftSpec, profile: Profile, cur: list[Gauge], past: Past,
            now: float, shifted: set[tuple[str, str, str]]) -> list[Result]:
    """Crossings ahead of a threshold, and gauges sliding steadily (unless their shift already
    said so: one line per cause)."""
    if not cur:
        return []
    findings: list[Finding] = []
    judged = 0
    short: list[tuple[str, str]] = []
    for c, k in cur:
        threshold = _threshold(profile, spec, c.metric) if k.trend else None
        slides = k.kind == "gauge" and c.key not in shifted
        if threshold is None and not slides:
            continue
        if k.rhythm == "none":
            pts = [p for p in past.get(c.key, []) if p.time >= now - spec.trend_days * DAY]
            ok, why = enough(spec, pts, now), counts(pts, now)
        else:
            ref = reference(spec, k, past.get(c.key, []), now, spec.trend_days)
            pts, ok, why = ref.points, not ref.short, ref.short
        if not ok:
            short.append((_label(c), why))
            continue
        judged += 1
        fit = stats.linear_fit([p.time for p in pts] + [now], [p.value for p in pts] + [c.value])
        if fit is None:
            continue
        f = _crossing(spec, c, fit, threshold, now) if threshold is not None else None
        if f is None and slides:
            f = _slope(spec, c, k, fit, pts, now)
        if f is not None:
            findings.append(f)
    if judged == 0:
        if not short:
            return []
        return [Result(node, "drift_trend", "", "skip",
                       f"{needs(spec)} in the last {spec.trend_days:g} days for a trend; "
                       + ", ".join(f"{lbl} has {why}" for lbl, why in short[:3]),
                       probe="history")]
    out = group(node, findings)
    out.append(Result(node, "drift_trend", "", "pass",
                      f"{judged - len(findings)} of {judged} metrics neither heading for their "
                      f"threshold within {spec.horizon_days:g} days nor sliding", value=judged,
                      unit="metrics", probe="history"))
    if short:
        out.append(_short(node, "drift_trend", spec, short))
    return out


def _crossing(spec: DriftSpec, c: Current, fit: stats.Fit, threshold: float, now: float
              ) -> Finding | None:
    when = stats.crossing_time(fit, threshold)
    if when is None or c.value >= threshold:
        return None  # not heading there, or already there (the static check says so)
    if when - now > spec.horizon_days * DAY:
        return None
    date = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d")
    days = (when - now) / DAY
    return Finding(
        "drift_trend", c.metric, c.subject, _label(c), spec.horizon_days / max(days, 0.1),
        f"{c.subject or 'the node'} is {c.value:g} and rising {fit.slope * DAY:.3g}/day: "
        f"predicted to reach {threshold:g} on {date} ({days:.1f} days)",
        c.value, c.unit, f"< {threshold:g}", f"crossing within {spec.horizon_days:g} days",
        "drain and fix before it crosses: reseat/replace the cable or transceiver for link "
        "errors and BER, schedule the GPU for ECC")


def _slope(spec: DriftSpec, c: Current, k: MetricKind, fit: stats.Fit, pts: list[Sample],
           now: float) -> Finding | None:
    """A gauge sliding steadily: the line explains most of its variance and has moved it by
    more than a meaningful change over the trend window."""
    start = fit.slope * pts[0].time + fit.intercept
    moved = fit.slope * (now - pts[0].time)
    least = max(k.meaningful(start), k.resolution)
    if fit.r2 < spec.trend_r2 or abs(moved) <= least:
        return None
    span = (now - pts[0].time) / DAY
    pct = f" ({moved / start * 100:+.1f} %)" if start else ""
    return Finding(
        "drift_trend", c.metric, c.subject, _label(c), abs(moved) / least,
        f"{c.subject or 'the node'} moved {moved:+.3g} {c.unit}{pct} over {span:.1f} days "
        f"({fit.slope * DAY:+.3g} {c.unit}/day, r² {fit.r2:.2f}), now {c.value:g}"
        .replace("  ", " "),
        c.value, c.unit, f"~{start:.4g} (where its line started {span:.0f} days ago)",
        f"change <= {least:.3g} {c.unit} over {spec.trend_days:g} days".replace("  ", " "),
        "a steady slide is wear or a change creeping in (cooling, cabling, firmware): "
        "compare with the node's peers and schedule a look before it crosses a limit")

def _threshold(profile: Profile, spec: DriftSpec, metric: str) -> float | None:
    if metric in spec.thresholds:
        return spec.thresholds[metric]
    # The static limits the checks fail at are the trends' thresholds too: one number each.
    if metric in profile.ib.counter_max:
        return float(profile.ib.counter_max[metric])
    if metric == "pre_fec_ber":  # no FEC mode per port in history: the loosest row's fail
        return profile.ib.ber_trend_threshold
    return None
