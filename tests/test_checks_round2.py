"""Issue 11, round 2: each defect on a simulated node built from the real recorded outputs with
one fault (stetho/sim/faults_facts.py), checked in-process against the H100 profile. Every
fault node is judged wrong where the fault is, and only there."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytestmark = pytest.mark.xdist_group("faultsim2")

NODES: dict[str, list[str]] = {
    "ok": [],
    "appdep": ["appclocks-deprecated"],
    "appdepidle": ["appclocks-deprecated=unlocked"],
    "model": ["wrong-model"],
    "eccna": ["ecc-unknown"],
    "throttlena": ["throttle-unknown"],
    "nopsi": ["psi-missing"],
    "multinode": ["nccl-multinode"],
    "ncclnew": ["nccl-version"],
    "ncclnone": ["nccl-version=none"],
    "mlxbad": ["mlxlink-garbage"],
    "pqbad": ["perfquery-garbage"],
    "container": ["no-ib-sysfs"],
    "containerdown": ["no-ib-sysfs", "ib-port-down"],
    "roce": ["roce"],
    "disagree": ["ibstat-disagrees"],
    "rcverr": ["rcv-errors"],
    "gpubad": ["gpu-unreadable"],
    "diskbad": ["disk-unreadable"],
    "eccremapped": ["ecc-dbe-remapped"],
}

Rows = dict[str, list]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Rows:
    from dataclasses import replace

    from stetho import profiles
    from stetho.checking.run import run
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("round2")
    prof = profiles.load("h100-sxm-8gpu")
    bundles = []
    for name, faults in NODES.items():
        build_node(root / name, name, faults)
        env, node = collect.sim_environment(str(root / name))
        bundles.append(collect.collect(prof, replace(env, timeout_cap=5.0), node))
    by_node: Rows = {n: [] for n in NODES}
    for r in run(bundles, profile="h100-sxm-8gpu").results:
        by_node[r.node].append(r)
    return by_node


def _rows(results: Rows, node: str, check: str, status: str | None = None,
          subject: str | None = None) -> list:
    return [r for r in results[node] if r.check == check
            and (status is None or r.status == status)
            and (subject is None or r.subject == subject)]


def _bad(results: Rows, node: str) -> list:
    return [r for r in results[node] if r.status in ("fail", "error", "warn")]


def _only(results: Rows, node: str, keep: Callable[[object], bool]) -> None:
    """Every fail/error/warn on `node` is one `keep` accepts, and there is at least one."""
    bad = _bad(results, node)
    assert bad, f"{node} looks healthy"
    stray = [(r.check, r.subject, r.status, r.message) for r in bad if not keep(r)]
    assert stray == []


def test_healthy_node_is_all_pass_with_the_new_checks(results):
    assert _bad(results, "ok") == []
    assert {r.check for r in results["ok"] if r.status == "pass"} >= {
        "ib_link_layer", "ib_counters", "ib_port_state", "gpu_clocks", "nccl_busbw"}


# -- 1: baselines keyed by run shape -------------------------------------------------------------

def test_multinode_run_is_not_judged_against_the_single_node_baseline(results):
    rows = _rows(results, "multinode", "nccl_busbw")
    assert len(rows) == 1 and rows[0].status == "skip", rows
    assert "no baseline for all_reduce 16 ranks / 2 nodes" in rows[0].message
    assert not _rows(results, "multinode", "nccl_busbw", "fail")


# -- 2: the NCCL version the run reports wins; unknown staleness is reported ---------------------

def test_run_nccl_version_wins_over_the_library(results):
    versions = _rows(results, "ncclnew", "versions", subject="nccl")[0]
    assert versions.value == "2.23.4" and "nccl-tests output" in versions.evidence
    rows = _rows(results, "ncclnew", "nccl_busbw")
    assert rows and all(r.status == "warn" and "nccl 2.21.5 (baseline) vs 2.23.4 (node)"
                        in r.message for r in rows)


def test_unknown_nccl_version_is_reported_not_skipped(results):
    rows = _rows(results, "ncclnone", "nccl_busbw")
    assert rows and all(r.status == "warn" and "staleness unknown" in r.message
                        and "nccl" in r.message for r in rows)
    assert _rows(results, "ncclnone", "versions", subject="nccl")[0].status == "error"


# -- 3: clocks on drivers that deprecate application clocks --------------------------------------

def test_locked_clocks_pass_where_application_clocks_are_deprecated(results):
    rows = _rows(results, "appdep", "gpu_clocks")
    assert len(rows) == 8 and all(r.status == "pass" for r in rows)
    assert all("current clocks (application clocks deprecated" in r.message for r in rows)
    assert _bad(results, "appdep") == []


def test_unlocked_clocks_fail_where_application_clocks_are_deprecated(results):
    rows = _rows(results, "appdepidle", "gpu_clocks")
    assert len(rows) == 8 and all(r.status == "fail" for r in rows)
    assert "SM 86 MHz (target 1980)" in rows[0].message and "idles down" in rows[0].message
    assert "-lgc 1980,1980" in rows[0].remediation and "deprecated" in rows[0].remediation


# -- 4: ibstat and perfquery evaluated -----------------------------------------------------------

def test_a_node_without_the_sysfs_ib_tree_is_judged_from_ibstat(results):
    assert _bad(results, "container") == []
    state = _rows(results, "container", "ib_port_state", "pass")
    assert len(state) == 8 and all(r.probe == "ibstat" for r in state)
    counters = _rows(results, "container", "ib_counters", "pass")
    assert len(counters) == 9  # from perfquery -x and -E, per HCA
    assert all("SymbolErrorCounter=0" in r.evidence and "PortMalformedPktErrors=0" in r.evidence
               for r in counters)
    fw = _rows(results, "container", "versions", subject="hca_firmware")[0]
    assert fw.status == "pass" and "ibstat" in fw.evidence


def test_a_port_down_is_seen_through_ibstat_alone(results):
    _only(results, "containerdown", lambda r: r.subject in ("mlx5_7:1", "")
          and r.check in ("ib_port_state", "ib_port_count", "ib_rail_cabling"))
    r = _rows(results, "containerdown", "ib_port_state", subject="mlx5_7:1")[0]
    assert r.status == "fail" and r.probe == "ibstat"
    # no far end answers through a Down port: the node's cabling cannot be confirmed
    r = _rows(results, "containerdown", "ib_rail_cabling")[0]
    assert r.status == "error" and "mlx5_7 port 1 -> far end unknown" in r.message


def test_sysfs_and_ibstat_disagreeing_warns_on_that_port(results):
    _only(results, "disagree", lambda r: r.subject == "mlx5_5:1")
    r = _rows(results, "disagree", "ib_port_state", subject="mlx5_5:1")[0]
    assert r.status == "warn" and "state ACTIVE in sysfs, DOWN in ibstat" in r.message


def test_unreadable_perfquery_warns_on_its_port_only(results):
    _only(results, "pqbad", lambda r: r.subject == "mlx5_4:1" and r.check == "ib_counters")
    r = _rows(results, "pqbad", "ib_counters", subject="mlx5_4:1")[0]
    assert r.status == "warn" and "perfquery" in r.message and "cannot parse" in r.message


def test_perfquery_rcv_error_details_name_the_cause(results):
    r = _rows(results, "rcverr", "ib_counters", subject="mlx5_6:1")[0]
    assert r.status == "fail" and "PortMalformedPktErrors=512" in r.message
    _only(results, "rcverr", lambda r: r.subject == "mlx5_6:1")


# -- 5: one device's bad mlxlink output ------------------------------------------------------------

def test_one_bad_mlxlink_output_errors_that_port_only(results):
    _only(results, "mlxbad", lambda r: r.subject == "mlx5_1:1"
          and r.check in ("ib_link_ber", "ib_optics"))
    # both read that port's mlxlink output; optics are judged on the Ethernet bond too
    for check, passing in (("ib_link_ber", 7), ("ib_optics", 8)):
        r = _rows(results, "mlxbad", check, subject="mlx5_1:1")[0]
        assert r.status == "error" and "mlxlink" in r.message
        assert len(_rows(results, "mlxbad", check, "pass")) == passing


def test_one_unreadable_gpu_errors_that_gpu_only(results):
    _only(results, "gpubad", lambda r: r.subject == "gpu4" and r.status == "error")
    rows = [r for r in results["gpubad"] if r.subject == "gpu4"]
    assert rows and all("cannot parse nvidia-smi output for GPU 4" in r.message for r in rows)
    assert len(_rows(results, "gpubad", "gpu_clocks", "pass")) == 7
    assert _rows(results, "gpubad", "gpu_count")[0].status == "pass"


def test_one_unreadable_disk_errors_that_disk_only(results):
    _only(results, "diskbad", lambda r: r.subject == "nvme5n1" and r.status == "error")
    assert len(_rows(results, "diskbad", "disk_rotational", "pass")) == 7


# -- 6: model before count -------------------------------------------------------------------------

def test_wrong_model_is_named_not_a_lost_gpu(results):
    r = _rows(results, "model", "gpu_count")[0]
    assert r.status == "fail"
    assert "GPU model NVIDIA A100-SXM4-80GB is not profile h100-sxm-8gpu's" in r.message
    assert "reseat" not in (r.remediation or "") and "profile" in r.remediation


# -- 7: link layer per port group ------------------------------------------------------------------

def test_roce_node_under_an_infiniband_profile_is_named(results):
    layer = _rows(results, "roce", "ib_link_layer", "fail")
    assert len(layer) == 8
    assert any(r.message == "mlx5_4: link layer Ethernet, profile expects InfiniBand"
               for r in layer)
    count = _rows(results, "roce", "ib_port_count")[0]
    assert count.status == "fail" and "Ethernet" in count.message
    assert "cable" not in count.remediation and "LINK_TYPE_P1" in count.remediation
    fw = _rows(results, "roce", "versions", subject="hca_firmware")[0]
    assert fw.status == "pass" and fw.value == "28.41.1000"


# -- 8: unknown is never pass ----------------------------------------------------------------------

def test_ecc_fields_all_unknown_error_on_a_profile_that_requires_ecc(results):
    r = _rows(results, "eccna", "gpu_ecc", subject="gpu2")[0]
    assert r.status == "error" and "all N/A" in r.message
    assert "unknown" in r.evidence and "=0" not in r.evidence.split("ECC unknown")[-1][:60]


def test_throttle_reasons_all_unknown_are_an_error(results):
    r = _rows(results, "throttlena", "gpu_throttle", subject="gpu5")[0]
    assert r.status == "error" and "no clock event reasons" in r.message


def test_memory_pressure_unread_is_not_a_pass(results):
    r = _rows(results, "nopsi", "host_memory")[0]
    assert r.status == "warn" and "memory pressure unknown" in r.message


# -- issue 23: the hardware as it is now ---------------------------------------------------------

def test_a_dbe_remapped_and_reset_is_history_not_a_failure(results):
    """After a DBE, a row remap, a reset and a reboot, only the lifetime count remembers it: the
    GPU warns (history), it is not failed forever by an error the reset already cleared."""
    _only(results, "eccremapped", lambda r: (r.check, r.subject, r.status) ==
          ("gpu_ecc", "gpu5", "warn"))
    r = _rows(results, "eccremapped", "gpu_ecc", subject="gpu5")[0]
    assert r.message == ("2 uncorrectable errors in the GPU's lifetime, remapped; none since "
                         "the last reset")
    assert r.value == 0 and "drain" not in r.remediation


def _bundle(node: str, xml: str):
    from stetho.evidence.bundle import Bundle, ProbeRecord

    rec = ProbeRecord("nvidia_smi", "command", "ok", argv=("nvidia-smi", "-q", "-x"), rc=0,
                      stdout=xml)
    return Bundle(node=node, collected_at="2026-01-01T00:00:00+00:00", stetho_version="0",
                  profile="generic", probes={"nvidia_smi": rec})


def _xml_of_text(text: str) -> str:
    """A recorded `nvidia-smi -q` text as `-q -x` prints it (the simulator's renderer)."""
    from stetho.parsers import nvidia_smi_text
    from stetho.sim import smi_xml

    return smi_xml.render(nvidia_smi_text.parse(text))


def _checked(tmp_path, bundles: list, clocks: tuple[int, int] | None = None,
             ecc: str = "any") -> dict[str, list]:
    from stetho.checking.run import run

    prof = tmp_path / f"p{len(list(tmp_path.glob('p*.yml')))}.yml"
    body = f"profile: {prof.stem}\nextends: generic\ngpu:\n  ecc: {ecc}\n"
    if clocks:
        body += f"  clocks:\n    sm_mhz: {clocks[0]}\n    mem_mhz: {clocks[1]}\n"
    prof.write_text(body)
    out: dict[str, list] = {b.node: [] for b in bundles}
    for r in run(bundles, profile=str(prof), select="gpu_clocks or gpu_ecc").results:
        out[r.node].append(r)
    return out


#: The real XML recordings: (file, the GPU's max SM/memory clocks, what an off-target verdict
#: must say, the clocks it holds when it is not idling down).
REAL_XML = [
    ("a100-sxm4-80gb-drv535-mig.xml", (1410, 1593), "clocks are not locked", (1275, 1593)),
    ("a10g-drv515-throttle-reasons.xml", (1710, 6251), "idles down (P8, GPU idle Active)", None),
    ("tesla-t4-drv515.xml", (1590, 5001), "clocks are not locked", (585, 5001)),
    ("dual-rtx-a5000-drv590-v13-appclocks-deprecated-2gpus.xml", (2100, 8001),
     "idles down (P8, GPU idle Active)", None),
    ("rtx4000-sff-ada-drv595-v13-appclocks-deprecated.xml", (3105, 7001),
     "idles down (P8, GPU idle Active)", None),
]


@pytest.mark.parametrize(("name", "maximum", "why", "held"), REAL_XML,
                         ids=[x[0] for x in REAL_XML])
def test_real_gpus_judged_by_their_current_clocks(tmp_path, real_dir, name, maximum, why, held):
    """Against a target at the GPU's max clocks each real recording fails, saying why from
    what the GPU reports (idling in P8, or held below the target in P0); a GPU held at its
    clocks in P0 passes against a target of those clocks."""
    xml = (real_dir / "01-nvidia-smi-xml" / name).read_text()
    rows = [r for r in _checked(tmp_path, [_bundle("real", xml)], maximum)["real"]
            if r.check == "gpu_clocks"]
    assert rows and all(r.status == "fail" and why in r.message for r in rows), rows
    assert all("judged from current clocks" in r.message and "-lgc" in r.remediation
               for r in rows)
    if held:
        rows = [r for r in _checked(tmp_path, [_bundle("real", xml)], held)["real"]
                if r.check == "gpu_clocks"]
        assert rows and all(r.status == "pass" for r in rows), rows


def test_application_clocks_set_apart_from_the_defaults_are_cited(tmp_path, real_dir):
    """Someone ran `-ac`: the T4's application clocks differ from its defaults. Not judged
    (the current clocks are), but the verdict says so."""
    xml = (real_dir / "01-nvidia-smi-xml" / "tesla-t4-drv515.xml").read_text()
    edited = xml.replace("<applications_clocks>\n            <graphics_clock>585 MHz",
                         "<applications_clocks>\n            <graphics_clock>1590 MHz", 1)
    assert edited != xml
    r = [r for r in _checked(tmp_path, [_bundle("t4", edited)], (1590, 5001))["t4"]
         if r.check == "gpu_clocks"][0]
    assert r.status == "fail" and "SM 585 MHz (target 1590)" in r.message
    assert "application clocks set to 1590/5001 MHz (-ac), not the defaults 585/5001" in \
        r.message


def test_boost_floating_above_the_target_is_not_locked(tmp_path, real_dir):
    xml = (real_dir / "01-nvidia-smi-xml" / "tesla-t4-drv515.xml").read_text()
    r = [r for r in _checked(tmp_path, [_bundle("t4", xml)], (300, 5001))["t4"]
         if r.check == "gpu_clocks"][0]
    assert r.status == "fail" and "SM 585 MHz (target 300)" in r.message
    assert "float above the target" in r.message


A10 = "02-nvidia-smi-q/a10-drv535-remapped-rows-pending.txt"
A100_PENDING = "06-nvlink-rowremap/nvidia-smi-q-a100-row-remap-pending-EXCERPT-elided.txt"


def _edit(text: str, *fields: tuple[tuple[str, ...], str]) -> str:
    """The recording with GPU 0's fields set, as the simulator's faults edit it."""
    from stetho.sim.qtext import SmiText

    smi = SmiText(text)
    for path, value in fields:
        smi.set(0, path, value)
    return str(smi)


def test_memory_errors_on_real_recordings_judged_as_they_are_now(tmp_path, real_dir):
    """The real A10 and A100 outputs with a row remap pending, and minimal edits of the A10
    one: a volatile DBE or a remap failure fails; a pending remap alone warns with the reset;
    the same GPU after its reset (pending No, the 4 uncorrectable rows and their errors in the
    lifetime count) warns as history; a lifetime count with no volatile count and no remap
    record is unknown, an error."""
    a10 = (real_dir / A10).read_text()
    dram, rows = ("ECC Errors", "Volatile", "DRAM Uncorrectable"), "Remapped Rows"
    volatile_dbe = _edit(a10, (dram, "1"))
    failed = _edit(a10, ((rows, "Remapping Failure Occurred"), "Yes"))
    reset = _edit(a10, (("ECC Errors", "Aggregate", "DRAM Uncorrectable"), "4"),
                  ((rows, "Pending"), "No"))
    unknown = _edit(reset, *(((*p, k), "N/A") for p in (("ECC Errors", "Volatile"),
                                                        ("ECC Errors", "Aggregate"))
                             for k in ("SRAM Uncorrectable", "DRAM Uncorrectable")),
                    (("ECC Errors", "Aggregate", "DRAM Uncorrectable"), "4"),
                    *(((rows, k), "N/A") for k in ("Correctable Error", "Uncorrectable Error",
                                                   "Pending", "Remapping Failure Occurred")))
    texts = {"a10": a10, "a100": (real_dir / A100_PENDING).read_text(), "dbe": volatile_dbe,
             "failed": failed, "reset": reset, "unknown": unknown}
    out = _checked(tmp_path, [_bundle(n, _xml_of_text(t)) for n, t in texts.items()])
    ecc = {n: [r for r in rows if r.check == "gpu_ecc"][0] for n, rows in out.items()}
    for n in ("a10", "a100"):
        assert ecc[n].status == "warn" and "row remapping pending" in ecc[n].message
        assert ecc[n].remediation.startswith("`sudo nvidia-smi -r -i 0` (or reboot)")
    assert ecc["dbe"].status == "fail" and ecc["dbe"].message.startswith(
        "1 uncorrectable ECC errors since the last reset")
    assert ecc["dbe"].message.endswith("; row remapping pending")
    assert ecc["failed"].status == "fail" and "row remapping failed" in ecc["failed"].message
    assert "RMA" in ecc["failed"].remediation
    assert ecc["reset"].status == "warn" and ecc["reset"].message == (
        "4 uncorrectable errors in the GPU's lifetime, remapped; none since the last reset")
    assert ecc["unknown"].status == "error" and "cannot be told" in ecc["unknown"].message
