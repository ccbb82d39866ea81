"""pcie_p2p_settings beyond the fault cluster (tests/test_checks_on_faults.py has the failing
nodes): the profile keys are validated, a profile pinning neither skips, lspci run without
root errors, and an IOMMU the profile wants off fails where groups exist."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stetho import profiles
from stetho.errors import ConfigError
from stetho.evidence.bundle import Bundle

pytestmark = pytest.mark.xdist_group("p2p")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("p2p") / "n"
    build_node(root, "n", [])
    env, node = collect.sim_environment(str(root))
    return collect.collect(profiles.load("h100-sxm-8gpu"), replace(env, timeout_cap=10.0), node)


def _run(bundle: Bundle, profile: str):  # type: ignore[no-untyped-def]
    from stetho.checking import run as checkrun

    rows = [r for r in checkrun.run([bundle], profile=profile).results
            if r.check == "pcie_p2p_settings"]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("key, value", [("pcie_acs", "enabled"), ("iommu", "pt")])
def test_profile_values_are_checked(tmp_path, key, value) -> None:
    path = tmp_path / "x.yml"
    path.write_text(f"profile: x\nhost:\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=f"{key} must be"):
        profiles.load(str(path))


def test_a_profile_pinning_neither_skips(healthy) -> None:
    r = _run(healthy, "generic")
    assert r.status == "skip" and "pins neither host.pcie_acs nor host.iommu" in r.message


def test_lspci_without_root_errors(healthy) -> None:
    rec = healthy.probes["lspci"]
    denied = replace(rec, stdout="17:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch "
                     "(rev b0)\n\tCapabilities: <access denied>\n")
    r = _run(replace(healthy, probes={**healthy.probes, "lspci": denied}), "h100-sxm-8gpu")
    assert r.status == "error" and "run stetho as root" in r.message


def test_iommu_off_fails_where_groups_exist(healthy, tmp_path) -> None:
    path = tmp_path / "off.yml"
    path.write_text("profile: iommu-off\nextends: h100-sxm-8gpu\nhost:\n  iommu: 'off'\n")
    r = _run(healthy, str(path))
    assert r.status == "fail" and "IOMMU active (24 groups), profile expects none" in r.message
