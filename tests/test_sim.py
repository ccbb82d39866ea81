"""The simulator: node layout, shims that replay the recorded outputs, faults in copies."""

from __future__ import annotations

import json
import subprocess

import pytest

from stetho.core.resources import shipped
from stetho.errors import ConfigError
from stetho.parsers import ib_sysfs, nvidia_smi_text, nvidia_smi_xml
from stetho.sim import builder, draft
from stetho.sim.faults import FAULTS

REAL = shipped("fixtures/real")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    return builder.build_node(tmp_path_factory.mktemp("sim") / "node01", "node01")


def _run(node, *argv):
    return subprocess.run([str(node / "bin" / argv[0]), *argv[1:]], capture_output=True,
                          text=True, timeout=10)


def test_layout(node):
    meta = json.loads((node / "node.json").read_text())
    assert meta["name"] == "node01" and meta["faults"] == [] and meta["gpus"] == 8
    for tool in ("nvidia-smi", "dmesg", "ibstat", "lspci", "all_reduce_perf"):
        assert (node / "bin" / tool).stat().st_mode & 0o111
    govs = list((node / "sysroot/sys/devices/system/cpu").glob("cpu*/cpufreq/scaling_governor"))
    assert len(govs) == draft.CPUS


def test_shims_replay_recorded_outputs(node):
    # ibstat and perfquery print what the node's sysfs IB tree holds, in the recorded layouts
    from stetho.parsers import ibstat, perfquery
    from stetho.sim import ibtools

    tree = ibtools.read_tree(node / "sysroot")
    shown = ibstat.parse(_run(node, "ibstat").stdout)
    assert [(d.name, d.fw_ver) for d in shown.devices] == [(d.name, d.fw_ver) for d in tree]
    assert [(p.id, p.state, p.rate_gbps, p.link_layer) for p in shown.ports] == \
        [(p.id, p.state, p.rate_gbps, p.link_layer) for d in tree for p in d.ports]
    recorded = (REAL / builder.IBSTAT).read_text().splitlines()
    assert _run(node, "ibstat").stdout.splitlines()[1][:9] == recorded[1][:9]  # "\tCA type:"
    pq = perfquery.parse(_run(node, "perfquery", "-x", "-C", "mlx5_0", "-P", "1").stdout)
    assert pq[0].errors() == tree[0].ports[0].errors()
    text = _run(node, "nvidia-smi", "-q").stdout
    report = nvidia_smi_text.parse(text)
    real = nvidia_smi_text.parse((REAL / builder.H100_Q).read_text())
    assert len(report.gpus) == 8 and report.driver_version == real.driver_version
    # the healthy node differs from the recording only where documented: power brake cleared,
    # serials and UUIDs made per node
    for g, r in zip(report.gpus, real.gpus, strict=True):
        assert r.reasons.hw_power_brake_slowdown and not g.reasons.hw_power_brake_slowdown
        assert (g.app_graphics_mhz, g.pcie_replays, g.vbios_version) == \
            (r.app_graphics_mhz, r.pcie_replays, r.vbios_version)
        assert g.uuid != r.uuid
    xml = nvidia_smi_xml.parse(_run(node, "nvidia-smi", "-q", "-x").stdout)
    assert xml == report
    bad = _run(node, "nvidia-smi", "--bogus")
    assert bad.returncode == 2 and "unsupported arguments" in bad.stderr


def test_sysfs_is_the_recorded_tree(node):
    files = {str(p.relative_to(node / "sysroot/sys/class/infiniband")): p.read_text()
             for p in (node / "sysroot/sys/class/infiniband").rglob("*") if p.is_file()}
    real = {str(p.relative_to(REAL / builder.IB_TREE)): p.read_text()
            for p in (REAL / builder.IB_TREE).rglob("*") if p.is_file()}
    assert set(files) == set(real)
    diff = {k for k in real if files[k] != real[k]}
    assert diff == {"mlx5_1/ports/1/counters/link_downed"}  # the saturated 255, documented
    devices = ib_sysfs.parse(files)
    assert [d.name for d in devices][:2] == ["mlx5_0", "mlx5_1"]


@pytest.mark.parametrize("spec", sorted(FAULTS))
def test_every_fault_builds(tmp_path, spec):
    arg = {"busbw-drop": "=30", "xid": "=94"}.get(spec, "")
    root = builder.build_node(tmp_path / "n", "n", [spec + arg])
    assert json.loads((root / "node.json").read_text())["faults"] == [spec + arg]


def test_fault_arguments_are_validated(tmp_path):
    with pytest.raises(ConfigError, match="expected gpu0..gpu7"):
        builder.build_node(tmp_path / "n", "n", ["clocks-unlocked=gpu9"])
    with pytest.raises(ConfigError, match="between 0 and 100"):
        builder.build_node(tmp_path / "n", "n", ["busbw-drop=150"])
    with pytest.raises(ConfigError, match="NODE=FAULT"):
        builder.parse_faults(["busbw-drop"])


def test_cluster_names_and_faults(tmp_path):
    names = builder.build_cluster(tmp_path, 3, faults={"node02": ["nvme-rotational"]})
    assert names == ["node01", "node02", "node03"]
    assert (tmp_path / "node02/sysroot/sys/block/nvme3n1/queue/rotational").read_text() == "1\n"
    assert (tmp_path / "node01/sysroot/sys/block/nvme3n1/queue/rotational").read_text() == "0\n"
