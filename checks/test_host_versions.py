"""Versions: driver, VBIOS, CUDA, NCCL, HCA firmware, kernel and OFED against the profile.

Compared with real version ordering (535.161.08 > 535.54.03), never as strings. A component the
profile pins that cannot be found is an error: an unknown version is not a good version. A
component the profile does not pin is reported (pass with its version, skip where the node has
none), and an unreadable one warns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.core.versioning import Version
from stetho.facts.ib import firmware_by_model
from stetho.facts.nccl_env import SOURCES, job_nccl, skew
from stetho.facts.node import Unavailable

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


_HOW = {
    "driver": "install the required NVIDIA driver branch (and reboot)",
    "vbios": "flash the VBIOS with the vendor's firmware bundle (nvfwupd / OEM tool)",
    "cuda": "install the required CUDA toolkit / driver-bundled CUDA version",
    "nccl": "install the required NCCL (libnccl2) version",
    "hca_firmware": "update the ConnectX firmware: `sudo mlxfwmanager -u` (MFT) then reset "
                    "the HCA or reboot",
    "kernel": "boot the required kernel",
    "ofed": "install the required MLNX_OFED / DOCA-OFED release",
}


def test_versions(version_component: str,
                  facts: NodeFacts,
                  profile: Profile,
                  verdict: Verdict) -> None:
    comp = version_component
    rule = profile.versions.get(comp)
    if rule is None:  # not pinned: reported, so an unreadable version probe is still an error
        try:
            seen, where = facts.version(comp)
        except Unavailable as u:
            if u.status == "error":  # not pinned: nothing to block on, but never a pass
                verdict.warn(f"{comp} version unreadable: {u.reason}",
                             remediation=f"read the {comp} version by hand on the node")
                return
            pytest.skip(f"{comp}: {u.reason}")
        verdict.measure(", ".join(seen) or None, expected="any (not pinned)")
        verdict.cite(f"{comp}: {', '.join(seen) or 'not found'} (from {where})", where)
        if not seen:
            pytest.skip(f"{comp} not reported by {where}; profile {profile.name} pins none")
        verdict.ok(f"{comp} {', '.join(seen)} (profile {profile.name} pins none)")
        return
    expected = (f">= {rule.minimum}" if rule.minimum else "") + \
        (f" one of {', '.join(rule.allowed)}" if rule.allowed else "")
    try:
        found, source = facts.version(comp)
    except Unavailable as u:
        verdict.error(f"{comp} version unknown: {u.reason} (profile {profile.name} requires "
                      f"{expected.strip()})")
    verdict.measure(", ".join(found) or None, expected=expected.strip())
    verdict.cite(f"{comp}: {', '.join(found) or 'not found'} (from {source})", source)
    if not found:
        verdict.error(f"{comp} version not reported by {source}")
    bad = []
    for v in found:
        if rule.minimum and Version(v) < Version(rule.minimum):
            bad.append(f"{v} < {rule.minimum}")
        elif rule.allowed and not any(Version(v) == Version(a) for a in rule.allowed):
            bad.append(f"{v} not in {', '.join(rule.allowed)}")
    if bad:
        verdict.fail(f"{comp} {'; '.join(bad)}", remediation=_HOW.get(comp))
    if len(found) > 1 and comp == "hca_firmware":
        # each HCA model has its own firmware line (ConnectX-7 28.x, BlueField-3 32.x)
        models = firmware_by_model(facts)
        drift = {m: v for m, v in models.items() if len(v) > 1}
        if not drift:
            verdict.ok("hca_firmware " + "; ".join(f"{m} {', '.join(v)}"
                                                   for m, v in models.items()))
            return
        found = tuple(v for vs in drift.values() for v in vs)
    if len(found) > 1:
        verdict.warn(f"{comp} differs across devices on this node: {', '.join(found)}",
                     remediation=_HOW.get(comp))
        return
    verdict.ok(f"{comp} {found[0]}")


def test_nccl_env_version(nccl_env: tuple[str, str], facts: NodeFacts, profile: Profile,
                          verdict: Verdict) -> None:
    """The NCCL of the job's environment (`nccl.container_image`, `nccl.env_module`) against
    the host's: another minor release fails, another patch level warns."""
    kind, name = nccl_env
    probe, what, ask = SOURCES[kind]
    ask = ask.format(name=name)
    try:
        job = job_nccl(facts, kind)
    except Unavailable as u:
        verdict.error(f"{what} {name}: {u.reason}",
                      remediation=f"`{ask}` on the node: pull the image / install the module "
                      "the profile names, or correct the profile")
    verdict.cite(f"{what} {name}: {job.evidence}", probe)
    if job.version is None:
        verdict.error(f"{what} {name} names no NCCL version ({job.evidence})",
                      remediation=f"`{ask}`: set NCCL_VERSION in the image or module, or "
                      "read the libnccl.so.X.Y.Z it ships by hand")
    try:
        found, where = facts.version("nccl")
    except Unavailable as u:
        if u.status == "error":
            verdict.error(f"host NCCL version unreadable: {u.reason}")
        pytest.skip(f"{what} {name} brings NCCL {job.version}; the host has none to skew "
                    f"against ({u.reason})")
    if not found:
        verdict.error(f"host NCCL version not reported by {where}")
    host = found[-1]
    exact = profile.nccl.env_match == "exact"
    verdict.measure(job.version, expected=f"{host} (host, from {where})",
                    threshold="the same version" if exact else "same major.minor")
    fix = (f"rebuild or re-pick the {what} with NCCL {host}, or install NCCL {job.version} "
           "on the host (libnccl2), so a job's ranks and the host's NCCL plugins (net/tuner) "
           "run one release")
    drift = skew(host, job.version)
    other = "minor release" if drift == "minor" else "patch level"
    if drift == "minor" or (drift and exact):
        verdict.fail(f"{what} {name} brings NCCL {job.version}, the host has {host}: another "
                     f"{other}" + (" (nccl.env_match: exact)" if drift == "patch" else ""),
                     remediation=fix)
    if drift == "patch":
        verdict.warn(f"{what} {name} brings NCCL {job.version}, the host has {host}: another "
                     "patch level", remediation=fix)
        return
    verdict.ok(f"{what} {name}: NCCL {job.version}, as the host's")
