"""The stored baseline as a second opinion beside the canaries-vs-controls verdict.

Why it never decides: a release changes NCCL, driver or image, and a baseline measured on the
old one is stale precisely then ("baseline: stale (NCCL 2.21.5 vs 2.19.3)"). It is printed so
a reader sees what the old way of gating would have said, and where it is current, how far the
canaries are from it.
"""

from __future__ import annotations

from stetho.profiles import NcclBaseline, Profile


def _baseline(profile: Profile, nodes: int, gpus_per_node: int | None,
              ranks: int | None) -> NcclBaseline | None:
    for base in profile.nccl.baselines:
        if base.shape.matches("all_reduce", ranks, nodes, gpus_per_node):
            return base
    return None


def opinion(profile: Profile | None, nodes: int, gpus_per_node: int | None,
            ranks: int | None, size_bytes: int | None, canary_gbps: float | None,
            nccl: str | None) -> str:
    """One phrase: `baseline: none ...`, `stale (...)`, `unknown (...)` or the delta."""
    from stetho.parsers.nccl_tests import format_size

    if profile is None:
        return "baseline: none (no profile given)"
    base = _baseline(profile, nodes, gpus_per_node, ranks)
    shape = f"{nodes}x{gpus_per_node or '?'}"
    if base is None:
        return f"baseline: none for all_reduce {shape} in profile {profile.name}"
    was = base.measured_with.get("nccl") or profile.reference_fingerprint().get("nccl")
    if nccl is None:
        return "baseline: unknown (the runs do not print NCCL's version)"
    if was != nccl:
        return f"baseline: stale (NCCL {nccl} vs {was or 'unrecorded'})"
    if size_bytes is None or canary_gbps is None or size_bytes not in base.busbw_gbps:
        at = format_size(size_bytes) if size_bytes else "the measured size"
        return f"baseline: none at {at} for all_reduce {shape}"
    want = base.busbw_gbps[size_bytes]
    delta = (canary_gbps - want) / want * 100 if want else 0.0
    within = abs(delta) <= profile.nccl.tolerance_pct or delta > 0
    return (f"baseline: {want:g} GB/s at {format_size(size_bytes)}, canaries {delta:+.1f}% "
            f"({'within' if within else 'beyond'} its {profile.nccl.tolerance_pct:g}% "
            "tolerance)")
