"""nccl_env_version (issue 24) on simulated nodes: a profile naming a container image and an
environment module reads their NCCL through the simulated docker and `module` (the real
recorded image environment); the healthy node's matches the host's and passes, another minor
release fails, another patch level warns, an image that cannot be read errors, and a profile
naming neither skips saying so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from stetho.evidence.bundle import Bundle, ProbeRecord

pytestmark = pytest.mark.xdist_group("ncclenv")

NODES = {"healthy": [], "skew": ["nccl-env-skew"], "patch": ["nccl-env-skew=2.21.3"],
         "module": ["nccl-env-skew=module:2.18.3"]}
PROFILE = """profile: h100-jobenv
extends: h100-sxm-8gpu
nccl:
  container_image: pytorch:24.05-py3
  env_module: nccl/2.21.5
"""


@pytest.fixture(scope="module")
def profile(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ncclenv-profile") / "h100-jobenv.yml"
    path.write_text(PROFILE)
    return str(path)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, profile: str) -> dict[str, Bundle]:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root: Path = tmp_path_factory.mktemp("ncclenv")
    out = {}
    for name, faults in NODES.items():
        build_node(root / name, name, faults)
        env, node = collect.sim_environment(str(root / name))
        out[name] = collect.collect(profiles.load(profile), replace(env, timeout_cap=10.0), node)
    return out


def _run(bundle: Bundle, profile: str, check: str | None = "nccl_env_version") -> list:
    from stetho.checking import run as checkrun

    return [r for r in checkrun.run([bundle], profile=profile).results
            if check is None or r.check == check]


def _one(results: list, subject: str):  # type: ignore[no-untyped-def]
    return next(r for r in results if r.subject == subject)


def test_healthy_node_passes_everything(bundles, profile) -> None:
    results = _run(bundles["healthy"], profile, check=None)
    assert [(r.check, r.subject, r.message) for r in results
            if r.status in ("fail", "error", "warn")] == []
    env = [r for r in results if r.check == "nccl_env_version"]
    assert {r.subject: r.status for r in env} == {"container": "pass", "module": "pass"}
    assert "NCCL_VERSION=2.21.5-1" in _one(env, "container").evidence
    assert "setenv" in _one(env, "module").evidence


def test_another_minor_release_in_the_image_fails(bundles, profile) -> None:
    results = _run(bundles["skew"], profile)
    r = _one(results, "container")
    assert r.status == "fail"
    assert "pytorch:24.05-py3 brings NCCL 2.20.5, the host has 2.21.5" in r.message
    assert "NCCL_VERSION=2.20.5-1" in r.evidence and "libnccl2" in r.remediation
    assert _one(results, "module").status == "pass"


def test_another_patch_level_warns(bundles, profile) -> None:
    r = _one(_run(bundles["patch"], profile), "container")
    assert r.status == "warn" and "another patch level" in r.message


def test_an_exact_match_policy_fails_another_patch_level(bundles, tmp_path) -> None:
    path = tmp_path / "exact.yml"
    path.write_text(PROFILE.replace("h100-jobenv", "h100-jobenv-exact")
                    + "  env_match: exact\n")
    r = _one(_run(bundles["patch"], str(path)), "container")
    assert r.status == "fail"
    assert r.message.endswith("another patch level (nccl.env_match: exact)")
    bad = tmp_path / "bad.yml"
    bad.write_text(PROFILE + "  env_match: major\n")
    from stetho import profiles
    from stetho.errors import ConfigError

    with pytest.raises(ConfigError, match="env_match must be minor or exact"):
        profiles.load(str(bad))


def test_module_skew_fails(bundles, profile) -> None:
    results = _run(bundles["module"], profile)
    r = _one(results, "module")
    assert r.status == "fail" and "nccl/2.21.5 brings NCCL 2.18.3" in r.message
    assert _one(results, "container").status == "pass"


def test_an_image_that_cannot_be_read_errors(bundles, profile) -> None:
    healthy = bundles["healthy"]
    rec = healthy.probes["nccl_image"]
    gone = replace(rec, status="failed", rc=1, stdout="",
                   reason="exited 1: Error: No such image: pytorch:24.05-py3")
    results = _run(replace(healthy, probes={**healthy.probes, "nccl_image": gone}), profile)
    r = _one(results, "container")
    assert r.status == "error" and "No such image" in r.message
    assert "docker image inspect" in r.remediation
    dropped = {k: v for k, v in healthy.probes.items() if k != "nccl_module"}
    r = _one(_run(replace(healthy, probes=dropped), profile), "module")
    assert r.status == "error" and "probe nccl_module was not collected" in r.message
    garbled = replace(healthy.probes["nccl_module"], stdout="sh: 1: module: not found\n")
    r = _one(_run(replace(healthy, probes={**healthy.probes, "nccl_module": garbled}), profile),
             "module")
    assert r.status == "error" and "module show" in r.message


def test_a_profile_naming_neither_skips(bundles) -> None:
    results = _run(bundles["healthy"], "h100-sxm-8gpu")
    assert len(results) == 1 and results[0].status == "skip"
    assert "names no job environment (nccl.container_image, nccl.env_module)" in \
        results[0].message


def test_probes_are_collected_only_where_the_profile_names_them(bundles) -> None:
    from stetho import profiles
    from stetho.evidence import collect

    names = {p.name for p in collect.probes_for(profiles.load("h100-sxm-8gpu"))}
    assert not names & {"nccl_image", "nccl_module"}
    assert bundles["healthy"].probes["nccl_image"].status == "ok"
    assert isinstance(bundles["healthy"].probes["nccl_module"], ProbeRecord)
