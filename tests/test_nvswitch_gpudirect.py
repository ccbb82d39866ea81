"""nvswitch_count skips on a PCIe profile; gpudirect_rdma takes DMA-BUF as the alternative to
nvidia_peermem under `required`, and holds a `peermem` profile to the module."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytestmark = pytest.mark.xdist_group("faultsim2")


def _bundle(tmp_path, name, faults, profile="h100-sxm-8gpu"):
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    build_node(tmp_path / name, name, faults)
    env, node = collect.sim_environment(str(tmp_path / name))
    return collect.collect(profiles.load(profile), replace(env, timeout_cap=5.0), node)


def _result(bundle, check, profile):
    from stetho.checking.run import run

    [r] = [r for r in run([bundle], profile=profile, fleet=False).results if r.check == check]
    return r


def test_dmabuf_is_enough_under_required_not_under_peermem(tmp_path):
    b = _bundle(tmp_path, "dmabuf", ["dmabuf-only"])
    r = _result(b, "gpudirect_rdma", "h100-sxm-8gpu")
    assert r.status == "pass" and r.value == "DMA-BUF"
    assert "DMA-BUF (open kernel module" in r.message and "kernel 5.15" in r.message
    strict = tmp_path / "peermem.yml"
    strict.write_text("profile: h100-peermem\nextends: h100-sxm-8gpu\n"
                      "gpu:\n  gpudirect_rdma: peermem\n")
    r = _result(b, "gpudirect_rdma", str(strict))
    assert r.status == "fail" and "nvidia_peermem is not loaded" in r.message
    assert "DMA-BUF is available, but the profile asks for peermem" in r.message


def test_nvswitch_count_skips_on_a_pcie_profile(tmp_path):
    b = _bundle(tmp_path, "pcie", [], profile="generic")
    r = _result(b, "nvswitch_count", "generic")
    assert r.status == "skip" and "expects no NVSwitch" in r.message
