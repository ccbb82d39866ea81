"""Profiles: the shipped ones load; malformed ones name file and line; versions order right."""

from __future__ import annotations

import pytest

from stetho import profiles
from stetho.core.versioning import Version
from stetho.errors import ConfigError


def test_generic_declares_no_hardware():
    p = profiles.load("generic")
    assert p.gpu.count is None and p.gpu.clocks is None and p.host.governor is None
    assert p.ib.ports is None and p.versions == {} and not p.nccl.enabled
    assert p.ib.counter_max["SymbolErrorCounter"] == 10


def test_h100_profile():
    p = profiles.load("h100-sxm-8gpu")
    assert p.gpu.count == 8 and p.gpu.clocks.sm_mhz == 1980 and p.gpu.clocks.mem_mhz == 2619
    assert p.host.governor == "performance" and p.host.rotational_devices == ("nvme*",)
    assert p.ib.ports == 8 and p.ib.rate_gbps == 400.0 and p.ib.state == "ACTIVE"
    assert p.ib.counter_max["PortXmitDiscards"] == 1000  # inherited from generic
    assert p.ib.link_flaps_max == 0 and p.ib.optics.rx_power_fail_dbm == -11.0
    assert p.versions["hca_firmware"].minimum == "28.39.1002"
    assert p.nccl.run and p.nccl.argv[:3] == ("all_reduce_perf", "-b", "8")
    assert p.nccl.min_size_bytes == 64 << 20 and p.nccl.tolerance_pct == 5.0
    assert p.nccl.baseline.busbw_gbps[8 << 30] == 479.0
    assert p.nccl.baseline.measured_with == {"driver": "535.161.08", "cuda": "12.2",
                                             "nccl": "2.21.5"}
    assert "460 GB/s" in p.nccl.baseline.source


def _write(tmp_path, text, name="site.yml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, line, needle", [
    ("profile: x\ngpu:\n  count: eight\n", 3, "gpu.count must be an integer"),
    ("profile: x\ngpu:\n  cloks: {}\n", 3, "unknown key gpu.cloks"),
    ("profile: x\nextends: generic\nib:\n  counter_max:\n    SymbolErrorCounter: -1\n", 5,
     "must not be negative"),
    ("profile: x\nversions:\n  driver: {min: banana}\n", 3, "'banana' is not a version"),
    ("profile: x\nversions:\n  firmware: {min: '1.0'}\n", 3, "unknown version component"),
    ("profile: x\nnccl:\n  min_size: huge\n", 3, "not a message size"),
    ("profile: x\nnccl:\n  run: true\n", 3, "nccl.argv is empty"),
    ("profile: x\ngpu: [1, 2\n", 2, "invalid YAML"),
    ("profile: x\nprofile: y\n", 2, "duplicate key"),
    ("gpu: {}\n", 1, "missing required key profile"),
    ("profile: x\nextends: nope\n", None, "unknown profile 'nope'"),
    # out of range: a negative tolerance would make every NCCL size fail
    ("profile: x\nnccl:\n  tolerance_pct: -5\n", 3,
     "nccl.tolerance_pct must be between 0 and 100, not -5"),
    ("profile: x\ngpu:\n  temperature: {warn_c: 400}\n", 3, "must be between 0 and 150"),
    ("profile: x\nib:\n  rate_gbps: 0\n", 3, "ib.rate_gbps must be more than 0"),
    ("profile: x\nfleet:\n  busbw_min_drop_pct: 120\n", 3, "between 0 and 100"),
    # a median over one node is the node itself
    ("profile: x\nfleet:\n  min_peers: 1\n", 3, "fleet.min_peers must be at least 2, not 1"),
    ("profile: x\ngpu:\n  ecc: maybe\n", 3, "gpu.ecc must be required or any"),
    ("profile: x\ngpu:\n  power_limit: 500\n", 3, "power_limit"),
    ("profile: x\ngpu:\n  compute_mode: exclusive\n", 3,
     "gpu.compute_mode must be one of Default, Exclusive_Process, Prohibited"),
    ("profile: x\ngpu:\n  nvswitch: maybe\n", 3, "nvswitch"),
    ("profile: x\nib:\n  port_groups:\n    a: {devices: [mlx5_*], link_layer: RoCE}\n", 3,
     "link layer must be one of InfiniBand, Ethernet"),
    ("profile: x\nnccl:\n  baseline:\n    shape: {collective: allreduce}\n", 4,
     "unknown collective 'allreduce'"),
    # the one pre-FEC BER limit for every link became a table per FEC mode and lane speed
    ("profile: x\nib:\n  pre_fec_ber_warn: 1.0e-7\n", 3,
     "ib.pre_fec_ber_warn is replaced by the table ib.pre_fec_ber"),
    ("profile: x\nib:\n  pre_fec_ber: {}\n", 3, "ib.pre_fec_ber needs at least one row"),
    ("profile: x\nib:\n  optics:\n    rx_power_warn_dbm: -12\n", 4,
     "rx_power_warn_dbm must not be below rx_power_fail_dbm"),
    ("profile: x\nib:\n  optics:\n    rx_dbm: -12\n", 4, "unknown key ib.optics.rx_dbm"),
    ("profile: x\nib:\n  link_flaps_max: -1\n", 3, "ib.link_flaps_max must be at least 0"),
    ("profile: x\nib:\n  pre_fec_ber: [1, 2]\n", 3, "expected a mapping"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: kp4, warn: 1.0e-6, fail: 1.0e-5}\n", 4,
     "unknown FEC mode 'kp4' (known: rs544, rs528, rs272, firecode, none)"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: none, warn: 1.0e-3, fail: 1.0e-5}\n", 4,
     "warn 0.001 must not exceed fail 1e-05"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: none, warn: 1.0e-6}\n", 4,
     "missing required key ib.pre_fec_ber.a.fail"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: none, warn: 1.0e-6, fail: 2}\n", 4,
     "ib.pre_fec_ber.a.fail must be a BER between 0 and 1, not 2"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: none, lane_gbps: [-25], warn: 1.0e-6, "
     "fail: 1.0e-5}\n", 4, "lane_gbps must be positive numbers"),
    ("profile: x\nib:\n  pre_fec_ber:\n    a: {fec: none, speed: 25, warn: 1.0e-6, "
     "fail: 1.0e-5}\n", 4, "unknown key ib.pre_fec_ber.a.speed"),
])
def test_malformed_profiles_name_file_and_line(tmp_path, text, line, needle):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        profiles.load(path)
    assert needle in str(err.value)
    if line is not None:
        assert f"{path}:{line}:" in str(err.value)


def test_error_in_parent_profile_points_at_the_parent(tmp_path, monkeypatch, stetho_env):
    _write(tmp_path, "profile: base\ngpu:\n  temperature:\n    warn_c: hot\n", "base.yml")
    child = _write(tmp_path, "profile: child\nextends: base\nhost: {governor: performance}\n")
    stetho_env.setenv("STETHO_BASELINES", str(tmp_path))
    with pytest.raises(ConfigError, match=r"base\.yml:4: gpu\.temperature\.warn_c"):
        profiles.load(child)


def test_extends_loop(tmp_path, monkeypatch, stetho_env):
    _write(tmp_path, "profile: a\nextends: b\n", "a.yml")
    _write(tmp_path, "profile: b\nextends: a\n", "b.yml")
    stetho_env.setenv("STETHO_BASELINES", str(tmp_path))
    with pytest.raises(ConfigError, match="loop"):
        profiles.load("a")


def test_site_profile_overrides_a_key(tmp_path, monkeypatch, stetho_env):
    _write(tmp_path, "profile: mine\nextends: h100-sxm-8gpu\ngpu:\n  count: 4\n", "mine.yml")
    stetho_env.setenv("STETHO_BASELINES", str(tmp_path))
    p = profiles.load("mine")
    assert p.gpu.count == 4 and p.gpu.clocks.sm_mhz == 1980 and p.ib.ports == 8


@pytest.mark.parametrize("a, b, expect", [
    ("535.161.08", "535.54.03", 1), ("28.41.1000", "28.39.1002", 1), ("12.2", "12.10", -1),
    ("96.00.74.00.0D", "96.00.74.00.0A", 1), ("96.00.74.00.0D", "96.00.74.00.1A", -1),
    ("2.21.5+cuda12.4", "2.21.5", 0), ("5.15.0-105-generic", "5.15.0-91-generic", 1),
    ("1.2", "1.2.1", -1), ("24.04-0.6.6.0", "23.10-1.1.9.0", 1), ("v2.18.3", "2.18.3", 0),
])
def test_version_ordering_is_not_string_ordering(a, b, expect):
    got = (Version(a) > Version(b)) - (Version(a) < Version(b))
    assert got == expect


@pytest.mark.parametrize("bad", ["", "N/A", "abc"])
def test_not_a_version(bad):
    with pytest.raises(ValueError):
        Version(bad)


def test_pre_fec_ber_rows_by_fec_mode_and_lane_speed():
    """generic.yml's table: the row for the link's FEC and lane speed, else the strictest."""
    ib = profiles.load("h100-sxm-8gpu").ib
    assert [r.name for r in ib.pre_fec_ber] == ["rs544", "rs528", "rs272", "no-fec"]
    ndr = ib.ber_limits("rs544", 100.0)
    assert ndr.exact and (ndr.row.name, ndr.row.warn, ndr.row.fail) == ("rs544", 1e-5, 1e-4)
    assert ib.ber_limits("rs544", 50.0).row.name == "rs544"  # HDR
    assert ib.ber_limits("rs528", 25.0).row.name == "rs528"
    edr = ib.ber_limits("none", 25.0)
    assert edr.exact and (edr.row.warn, edr.row.fail) == (1e-15, 1e-12)
    assert ib.ber_limits("firecode", 10.0).row.name == "no-fec"
    for fec, lane in ((None, 100.0), ("rs544", None), ("rs544", 25.0)):
        unknown = ib.ber_limits(fec, lane)
        assert not unknown.exact and unknown.row.name == "no-fec", (fec, lane)
    assert ib.ber_trend_threshold == 1e-4


def test_a_profile_table_replaces_the_parents_whole(tmp_path):
    path = _write(tmp_path, "profile: x\nextends: generic\nib:\n  pre_fec_ber:\n"
                  "    ndr: {fec: rs544, lane_gbps: 100, warn: 1.0e-6, fail: 2.0e-5}\n")
    ib = profiles.load(path).ib
    assert [(r.name, r.fec, r.lane_gbps) for r in ib.pre_fec_ber] == [
        ("ndr", ("rs544",), (100.0,))]
    assert ib.ber_limits("rs528", 25.0).row.name == "ndr"  # the strictest, and only, row
    assert not ib.ber_limits("rs528", 25.0).exact
