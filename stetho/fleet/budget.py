"""How long a node's check can take, so that the sweep's per-host timeout is never the thing
that cuts it short: the serial sum of every probe's timeout on that host's profile (per-device
probes once per HCA, each fallback command too, the busy question before anything invasive),
the --bench suite's benchmarks, and a margin for start-up and the checks themselves.

A probe timeout cap (STETHO_PROBE_TIMEOUT, `probe_timeout`) in force on the node bounds each
probe's part: the runner never lets a probe run past it.

The serial sum is the safe bound: probes run 8 (per-device ones 16) at once, so a node
normally finishes far sooner, but a bound that assumed the concurrency would be too short the
night the tools hang one after another behind a stuck driver.
"""

from __future__ import annotations

#: Python start-up, reading the profile, evaluating ~100 checks, printing the outcome.
MARGIN_S = 120
#: HCAs assumed where a profile does not say how many IB ports it has.
DEFAULT_DEVICES = 8


def bench_budget(suite: str, profile_name: str) -> tuple[float, list[str]]:
    """The longest a node can spend in the suite's benchmarks: each one's timeout x repeats
    (x the profile's GPUs or IB ports, 8 if it does not say, for per: gpu/hca)."""
    from stetho import profiles
    from stetho.evidence.bench_run import suite as suite_of

    prof = profiles.load(profile_name)
    total, parts = 0.0, []
    for b in suite_of(suite):
        per = {"gpu": prof.gpu.count, "hca": prof.ib.ports}.get(b.per, 1) or DEFAULT_DEVICES
        seconds = b.timeout_s * b.repeats * per
        total += seconds
        parts.append(f"{b.name} {seconds:g} s")
    return total, parts


def probe_budget(profile_name: str, cap: float | None = None) -> tuple[float, list[str]]:
    """The longest the profile's probes can take one after another, with each one's part,
    each probe's timeout cut to `cap` where one is in force (as the runner cuts it)."""
    from stetho import profiles
    from stetho.evidence import busy
    from stetho.evidence.collect import probes_for

    prof = profiles.load(profile_name)
    devices = prof.ib.ports or DEFAULT_DEVICES
    total, parts = 0.0, []
    probes = probes_for(prof)
    if any(p.invasive for p in probes):  # asked before: Slurm, then nvidia-smi
        ask = min(busy.TIMEOUT_S, cap or busy.TIMEOUT_S)
        total += 2 * ask
        parts.append(f"{busy.PROBE} 2x{ask:g} s")
    for p in probes:
        if not p.argv:
            continue  # a file read has no timeout of its own: the node's deadline bounds it
        runs = 1 + len(p.fallbacks)
        times = devices if p.per_device else 1
        timeout = min(p.timeout_s, cap or p.timeout_s)
        total += timeout * runs * times
        how = "x".join(str(n) for n in (times, runs) if n > 1)
        parts.append(f"{p.name} {how + 'x' if how else ''}{timeout:g} s")
    if cap:
        parts.append(f"each probe capped at {cap:g} s (STETHO_PROBE_TIMEOUT)")
    return total, parts


def host_budget(profile_name: str, bench: str | None, probe_cap: float | None = None
                ) -> tuple[int, list[str]]:
    """The per-host timeout a node of this profile needs, in whole seconds, with its parts.
    `probe_cap`: the probe timeout cap the node runs under; only a caller that makes it the
    node's own may pass it (a cap the node does not have would cut its checks short)."""
    total, parts = probe_budget(profile_name, probe_cap)
    if bench:
        seconds, bench_parts = bench_budget(bench, profile_name)
        total += seconds
        parts += [f"{bench} benchmarks: " + ", ".join(bench_parts)]
    parts.append(f"start-up and checks {MARGIN_S} s")
    return int(total + MARGIN_S + 0.999), parts
