"""NCCL all_reduce: the run completed with correct results, and busbw holds up to the baseline.

busbw per message size, from the profile's minimum up, is compared with the baseline; a drop
over the tolerance fails. `#wrong` > 0 is data corruption, and nccl-tests' own FAILED
(`Out of bounds values : N FAILED`, `Avg bus bandwidth ... FAILED`) a fail, with no baseline
needed. A failed or truncated run is an error, never a pass. A baseline measured on other
driver/CUDA/NCCL versions is reported stale, one the node cannot tell its versions against is
reported unknown. The baseline is the one recorded for the run's shape (collective, ranks,
nodes, GPUs per node): a 2-node run is never judged against a single-node baseline. The
collective is what the output says or, where it does not, what the profile or the probe's
command declares; a run nothing tells is an error, not a skip.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from stetho.benchmarks.verdict import judge
from stetho.core.versioning import Version
from stetho.results import Limit

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import BusbwPoint, NcclBaseline, Profile


def test_nccl_run(node: NodeFacts, facts: NodeFacts, verdict: Verdict) -> None:
    run = facts.nccl_run()
    verdict.measure(run.avg_busbw_gbps, "GB/s avg busbw")
    tail = "\n".join(filter(None, [run.failure] + [
        f"{r.size_bytes:>12} B busbw {r.oop_busbw_gbps} GB/s #wrong {r.oop_wrong}"
        for r in run.rows[-3:]]))
    verdict.cite(tail or "no result rows", "nccl-tests")
    said = judge("nccl_tests", run)  # nccl-tests' own verdict, shared with bench_verdict
    assert said is not None
    if said.status == "fail":
        verdict.fail(said.summary, remediation="drain the node now; run `dcgmi diag -r 3` and "
                     "check Xid/ECC and NVLink errors; a GPU or link is corrupting data"
                     if run.total_wrong else "rerun to confirm; nccl-tests' own check "
                     "failed (its words are in the message)")
    if said.status == "error":
        verdict.error(said.summary, remediation="run nccl-tests with -c 1 (it checks its "
                      "results)" if run.rows and not run.validated else None)
    verdict.ok(f"{len(run.rows)} sizes, 0 wrong, avg busbw {run.avg_busbw_gbps} GB/s")


def test_nccl_transport(node: NodeFacts, facts: NodeFacts, profile: Profile,
                        verdict: Verdict) -> None:
    """NCCL's network is its HCAs (NET/IB, RoCE included), not TCP sockets, where the profile
    gives the node HCAs. A single-node run moves its data over NVLink/PCIe and never uses the
    network, so its busbw cannot show a socket fallback: the INFO lines NCCL prints at init
    (`NET/IB : No device found`, `Using network Socket`) are where a multi-node job's would."""
    import pytest

    if not profile.ib.ports:
        pytest.skip(f"profile {profile.name} gives the node no HCAs")
    log = facts.nccl_log()
    if log.transport is None:
        pytest.skip("the nccl-tests output has no NCCL_DEBUG=INFO network lines")
    verdict.measure(f"NET/{log.transport}", expected="NET/IB")
    verdict.cite(f"network {log.net_plugin}; IB devices {', '.join(log.ib_devices) or 'none'}; "
                 f"socket interfaces {', '.join(log.socket_interfaces) or 'none'}"
                 + ("; NET/IB: No device found" if log.ib_not_found else ""), "nccl-tests")
    if log.transport != "IB":
        verdict.fail(f"NCCL chose NET/{log.transport} on "
                     f"{', '.join(log.socket_interfaces) or 'a TCP interface'}"
                     + (" after finding no IB device" if log.ib_not_found else "")
                     + ": a multi-node job here runs over TCP sockets",
                     remediation="check NCCL_IB_HCA (it must name this node's HCAs: `ls "
                     "/sys/class/infiniband`), that NCCL_IB_DISABLE is unset, the mlx5_ib "
                     "driver (`lsmod | grep mlx5_ib`) and the NCCL net plugin path")
    verdict.ok(f"NET/IB on {len(log.ib_devices)} HCA port(s)")


def test_nccl_busbw(nccl_size: BusbwPoint, facts: NodeFacts, profile: Profile,
                    verdict: Verdict) -> None:
    spec = profile.nccl
    base, size = nccl_size.baseline, nccl_size.size_bytes
    want = base.busbw_gbps[size]
    floor = want * (1 - spec.tolerance_pct / 100)
    run = facts.nccl_run()
    if run.failed or not run.rows:
        verdict.error(f"no busbw: nccl-tests failed ({run.failure or 'no result table'})")
    row = run.row(size)
    if row is None:
        verdict.error(f"nccl-tests output has no row for {size} B "
                      f"(maxBytes {run.max_bytes}; truncated={run.truncated})")
    got = run.busbw(size)
    if got is None:
        verdict.error(f"nccl-tests printed no out-of-place busbw for {size} B")
    drop = (want - got) / want * 100
    verdict.measure(got, "GB/s", expected=f"{want:g} GB/s (baseline)",
                    threshold=Limit(round(floor, 3), ">=", "GB/s",
                                    note=f"baseline -{spec.tolerance_pct:g}%"), reference=want)
    collective, signals = facts.nccl_collective()
    shape = run.shape.describe()
    if run.shape.collective is None and collective is not None:
        shape = shape.replace("unknown collective", collective, 1)
    reference = _reference(profile, base)
    stale, unknown = _stale(facts, reference)
    verdict.cite(f"size {size} B: busbw {got} GB/s out-of-place, {row.ip_busbw_gbps} "
                 f"in-place ({shape}; collective from: {'; '.join(signals)}); baseline "
                 f"{want:g} GB/s "
                 f"({base.shape.describe()}) measured with "
                 + ", ".join(f"{k} {v}" for k, v in reference.items())
                 + (f"; node runs {stale}" if stale else "")
                 + (f"; node reports no {', '.join(unknown)}" if unknown else ""), "nccl-tests")
    stale_note = f" (baseline stale: measured with {stale})" if stale else ""
    if got < floor:
        verdict.fail(f"busbw {got:g} GB/s is {drop:.1f}% below the baseline {want:g} GB/s"
                     + stale_note,
                     remediation=_SLOW_FIX_ONE_NODE if (run.shape.nodes or 1) == 1
                     else _SLOW_FIX_MULTI_NODE)
    fix = ("re-record the baseline on healthy nodes: `stetho baseline record --from "
           f"runs/<id> --profile {profile.name}`")
    if stale:
        message = (f"baseline stale: busbw {got:g} GB/s within {spec.tolerance_pct:g}% of a "
                   f"baseline measured with {stale}")
        if profile.baseline.on_stale == "fail":
            verdict.fail(message, remediation=fix)
        verdict.warn(message, remediation=fix)
        return
    if unknown:
        verdict.warn(f"baseline staleness unknown: the node reports no "
                     f"{', '.join(unknown)} (baseline measured with "
                     + ", ".join(f"{k} {reference[k]}" for k in unknown) + ")",
                     remediation="make the version readable on the node (nccl-tests prints "
                     "`NCCL version` with NCCL_DEBUG=INFO; nvidia-smi the driver and CUDA)")
        return
    verdict.ok(f"busbw {got:g} GB/s ({-drop:+.1f}% vs baseline)")


_SLOW_FIX_ONE_NODE = ("check NVLink (`nvidia-smi nvlink -s`), clocks and throttle reasons, PCIe "
                      "AER and NCCL's transport (NCCL_DEBUG=INFO); rerun to confirm, then drain")
_SLOW_FIX_MULTI_NODE = ("a multi-node run crosses the network: check NCCL's transport "
                        "(NCCL_DEBUG=INFO: NET/IB, not NET/Socket), IB port rates and counters "
                        "(`ibstat`, `perfquery -x`) on every node of the run, then NVLink and "
                        "clocks; rerun to find the slow node")


def _reference(profile: Profile, base: NcclBaseline) -> dict[str, str]:
    """What the baseline was measured on: the profile's recorded fingerprint for its first
    baseline, else the versions this baseline names."""
    if base is profile.nccl.baseline and profile.baseline.fingerprint:
        return profile.baseline.fingerprint
    return dict(base.measured_with)


def _stale(facts: NodeFacts, reference: dict[str, str]) -> tuple[str, list[str]]:
    """('driver 535.161.08 (baseline) vs 550.54.15 (node); ...', [components the node cannot
    tell]): an unknown version is reported, never taken as the same."""
    mine = facts.fingerprint()
    diffs, unknown = [], []
    for comp, base_v in reference.items():
        v = mine.get(comp)
        if v is None:
            unknown.append(comp)
            continue
        if not _same_version(v, base_v):
            diffs.append(f"{comp} {base_v} (baseline) vs {v} (node)")
    return "; ".join(diffs), unknown


@lru_cache(maxsize=1024)
def _same_version(found: str, baseline: str) -> bool:
    """Asked for every message size of every node, of the same few version pairs."""
    try:
        return Version(found) == Version(baseline)
    except ValueError:
        return found == baseline
