"""Every check passes on a healthy simulated node and fails, naming the right subject and a
remediation, on the node carrying its fault. One check run covers the whole fault cluster."""

from __future__ import annotations

import re

import pytest

from tests.conftest import FAULT_NODES

pytestmark = pytest.mark.xdist_group("faultsim")


def _rows(results, node, check, status=None, subject=None):
    return [r for r in results[node] if r["check"] == check
            and (status is None or r["status"] == status)
            and (subject is None or r["subject"] == subject)]


def _one(results, node, check, subject=""):
    rows = _rows(results, node, check, subject=subject)
    assert len(rows) == 1, f"{node} {check} {subject}: {rows}"
    return rows[0]


def test_every_fault_node_was_checked(fault_results):
    assert set(fault_results) == set(FAULT_NODES)


def test_healthy_node_passes_everything(fault_results):
    bad = [r for r in fault_results["healthy"] if r["status"] in ("fail", "error", "warn")]
    assert bad == []
    checks = {r["check"] for r in fault_results["healthy"] if r["status"] == "pass"}
    assert checks >= {"gpu_count", "gpu_clocks", "gpu_throttle", "gpu_temperature", "gpu_ecc",
                      "gpu_xid", "gpu_bus_loss", "gpu_nvlink", "pcie_link", "pcie_aer",
                      "cpu_governor", "disk_rotational", "versions", "ib_port_state",
                      "ib_counters", "ib_port_count", "nccl_run", "nccl_busbw",
                      "ib_link_ber", "host_memory", "gpu_fabric", "gpu_driver_verdict",
                      "gpu_settings", "fabric_manager", "nvswitch_sxid", "host_filesystems",
                      "host_time_sync", "host_services", "host_limits", "host_memory_errors",
                      "host_nvme_health", "host_mce", "pcie_p2p_settings", "nvswitch_count",
                      "ib_rail_cabling", "gpudirect_rdma"}


@pytest.mark.parametrize("node", [n for n in FAULT_NODES if n != "healthy"])
def test_every_fault_is_caught(fault_results, node):
    statuses = {r["status"] for r in fault_results[node]}
    assert statuses & {"fail", "error", "warn"}, f"{node} ({FAULT_NODES[node]}) looks healthy"


def test_governor(fault_results):
    r = _one(fault_results, "governor", "cpu_governor")
    assert r["status"] == "fail"
    assert "cpu 8-15" in r["message"] and "powersave" in r["message"]
    assert "cpupower frequency-set -g performance" in r["remediation"]


def test_rotational(fault_results):
    r = _one(fault_results, "rotational", "disk_rotational", "nvme3n1")
    assert r["status"] == "fail" and r["value"] == 1 and r["expected"] == 0
    assert "queue/rotational" in r["remediation"] and "udev" in r["remediation"]
    others = _rows(fault_results, "rotational", "disk_rotational", "pass")
    assert len(others) == 7


def test_clocks(fault_results):
    """An H100 never locked reads default application clocks equal to the target (1980/2619):
    only its current clocks, idling at 86 MHz in P8, show it is not locked."""
    r = _one(fault_results, "clocks", "gpu_clocks", "gpu3")
    assert r["status"] == "fail" and "SM 86 MHz (target 1980)" in r["message"]
    assert "idles down (P8, GPU idle Active)" in r["message"]
    assert "judged from current clocks (application clocks 1980/2619 MHz, the defaults" in \
        r["message"]
    assert "nvidia-smi -i 3 -lgc 1980,1980" in r["remediation"]
    assert "-lmc 2619,2619" in r["remediation"]
    assert len(_rows(fault_results, "clocks", "gpu_clocks", "pass")) == 7


def test_healthy_gpus_are_locked_at_the_target(fault_results):
    rows = _rows(fault_results, "healthy", "gpu_clocks")
    assert len(rows) == 8 and all(r["status"] == "pass" for r in rows)
    assert rows[0]["value"] == "SM 1980 / mem 2619"
    assert "judged from current clocks" in rows[0]["message"]


def test_power_brake_holds_clocks_below_target_named_as_throttling(fault_results):
    rows = _rows(fault_results, "powerbrake", "gpu_clocks")
    assert len(rows) == 8 and all(r["status"] == "fail" for r in rows)
    assert "SM 86 MHz (target 1980)" in rows[0]["message"]
    assert "throttled by HW slowdown, HW power brake slowdown, not unlocked" in rows[0]["message"]
    assert "gpu_throttle" in rows[0]["remediation"] and "-lgc 1980,1980" in rows[0]["remediation"]


def test_busbw_drop(fault_results):
    rows = _rows(fault_results, "busbw", "nccl_busbw")
    assert rows and all(r["status"] == "fail" for r in rows)
    big = _one(fault_results, "busbw", "nccl_busbw", "allreduce@8GiB")
    assert 370 < big["value"] < 395 and "below the baseline 479" in big["message"]


def test_faults_change_only_the_outputs_their_hardware_does(fault_results):
    """The nodes' nccl-tests run is one node of 8 SXM GPUs: it goes over NVLink only. A
    marginal PCIe link (riser) and an NCCL fallen back to sockets leave its busbw alone (a
    multi-node job's would suffer); the socket fallback shows in NCCL's own INFO lines
    (nccl_transport). One NVLink of 18 down costs that GPU, and so the ring, 1/18."""
    for node in ("riser", "ncclsocket"):
        assert {r["status"] for r in _rows(fault_results, node, "nccl_busbw")} == {"pass"}, node
    sock = _one(fault_results, "ncclsocket", "nccl_transport")
    assert sock["status"] == "fail" and sock["value"] == "NET/Socket"
    assert _one(fault_results, "healthy", "nccl_transport")["status"] == "pass"
    full = _one(fault_results, "healthy", "nccl_busbw", "allreduce@8GiB")["value"]
    one_down = _one(fault_results, "nvlink", "nccl_busbw", "allreduce@8GiB")
    assert "fail" in {r["status"] for r in _rows(fault_results, "nvlink", "nccl_busbw")}
    assert abs(one_down["value"] / full - 17 / 18) < 0.015, (one_down["value"], full)


def test_nccl_wrong_is_data_corruption(fault_results):
    r = _one(fault_results, "ncclwrong", "nccl_run")
    assert r["status"] == "fail" and "wrong elements" in r["message"]
    assert "corruption" in r["message"]


def test_nccl_failed_run_is_an_error(fault_results):
    r = _one(fault_results, "ncclfail", "nccl_run")
    assert r["status"] == "error" and "system not yet initialized" in r["message"]
    assert all(x["status"] == "error" for x in _rows(fault_results, "ncclfail", "nccl_busbw"))


def test_nccl_truncated_is_an_error_not_a_pass(fault_results):
    assert _one(fault_results, "nccltrunc", "nccl_run")["status"] == "error"
    statuses = {r["status"] for r in _rows(fault_results, "nccltrunc", "nccl_busbw")}
    assert statuses == {"error"}


def test_ib_rate(fault_results):
    r = _one(fault_results, "ibrate", "ib_port_state", "mlx5_4:1")
    assert r["status"] == "fail" and "200 Gb/s" in r["message"] and "400" in r["message"]
    assert "mlxlink -d mlx5_4" in r["remediation"]


def test_ib_symbol_errors(fault_results):
    r = _one(fault_results, "ibsymbol", "ib_counters", "mlx5_5:1")
    assert r["status"] == "fail" and "SymbolErrorCounter=4096" in r["message"]
    assert "cable" in r["remediation"]


def test_ib_port_down(fault_results):
    assert _one(fault_results, "ibdown", "ib_port_state", "mlx5_7:1")["status"] == "fail"
    count = _one(fault_results, "ibdown", "ib_port_count")
    assert count["status"] == "fail" and count["value"] == 7


def test_hca_firmware(fault_results):
    r = _one(fault_results, "hcafw", "versions", "hca_firmware")
    assert r["status"] == "fail" and "28.36.1010 < 28.39.1002" in r["message"]
    assert "mlxfwmanager" in r["remediation"]


def test_xid79_gpu_off_the_bus(fault_results):
    loss = _one(fault_results, "xid79", "gpu_bus_loss")
    assert loss["status"] == "fail" and "0000:4c:00" in loss["message"]
    assert _one(fault_results, "xid79", "gpu_count")["value"] == 7
    aer = _one(fault_results, "xid79", "pcie_aer")
    assert aer["status"] == "fail" and "Surprise Down Error" in aer["message"]


def test_xid13_application_error_warns(fault_results):
    r = _one(fault_results, "xid13", "gpu_xid", "gpu2")
    assert r["status"] == "warn" and "Xid 13" in r["message"]


def test_xid48_fails_with_the_catalog_action(fault_results):
    r = _one(fault_results, "xid48", "gpu_xid", "gpu2")
    assert r["status"] == "fail" and "Xid 48" in r["message"]
    assert r["remediation"].startswith("Xid 48:")
    # the simulated dmesg stamps it minutes before collection, and the message says so
    assert re.search(r"Xid 48 x1 \(Double Bit ECC Error\) at \d{4}-\d\d-\d\dT[\d:]+Z "
                     r"\(0\.\d h ago\)", r["message"]), r["message"]
    assert "24.0 h window" in r["message"]


def test_xid48_before_a_driver_reload_is_history_not_a_fault(fault_results):
    r = _one(fault_results, "xidhealed", "gpu_xid", "gpu5")
    assert r["status"] == "warn" and "history, not a present fault" in r["message"]
    assert "(3.0 h ago)" in r["message"] and "driver was loaded" in r["message"]
    assert not r.get("remediation")
    assert not _rows(fault_results, "xidhealed", "gpu_xid", "fail")


def test_xid48_three_days_old_warns(fault_results):
    r = _one(fault_results, "xidold", "gpu_xid", "gpu5")
    assert r["status"] == "warn" and "older than the window" in r["message"]
    assert "(3.0 days ago)" in r["message"]


def test_ecc_dbe(fault_results):
    r = _one(fault_results, "eccdbe", "gpu_ecc", "gpu5")
    assert r["status"] == "fail"
    assert "2 uncorrectable ECC errors since the last reset" in r["message"]
    assert r["value"] == 2 and "nvidia-smi -r -i 5" in r["remediation"]
    assert _one(fault_results, "eccdbe", "gpu_xid", "gpu5")["status"] == "fail"


def test_rowremap_pending_is_a_reset_due_not_a_failure(fault_results):
    """NVIDIA: running work is unaffected by a pending remap; reset at the next opportunity,
    which on an idle node before a job is now. A warning with the reset, never a pass."""
    r = _one(fault_results, "rowremap", "gpu_ecc", "gpu6")
    assert r["status"] == "warn" and "row remapping pending" in r["message"]
    assert r["remediation"].startswith("`sudo nvidia-smi -r -i 6` (or reboot)")
    assert "check again" in r["remediation"]


def test_pcie_width(fault_results):
    r = _one(fault_results, "pciewidth", "pcie_link", "gpu1")
    assert r["status"] == "fail" and "x8" in r["message"]


def test_thermal(fault_results):
    assert _one(fault_results, "thermal", "gpu_throttle", "gpu4")["status"] == "fail"
    t = _one(fault_results, "thermal", "gpu_temperature", "gpu4")
    assert t["status"] == "fail" and t["value"] == 91


def test_hbm_temperature_is_judged_apart_from_the_die(fault_results):
    """HBM at 97 C above a cool die (as recorded): the die alone would pass the node."""
    t = _one(fault_results, "hbmhot", "gpu_temperature", "gpu6")
    assert t["status"] == "fail" and "memory (HBM) at 97 C, limit 95 C" in t["message"]
    assert t["value"] < 40  # the die reads as recorded: cool
    ok = _one(fault_results, "hbmhot", "gpu_temperature", "gpu0")
    assert ok["status"] == "pass" and "memory 39 C" in ok["message"]


def test_power_brake_on_every_gpu(fault_results):
    rows = _rows(fault_results, "powerbrake", "gpu_throttle")
    assert len(rows) == 8 and all(r["status"] == "fail" for r in rows)
    assert "power brake" in rows[0]["message"]


def test_nvlink_down(fault_results):
    r = _one(fault_results, "nvlink", "gpu_nvlink", "gpu0")
    assert r["status"] == "fail" and "17 of 18" in r["message"]


@pytest.mark.parametrize("node", ["garbage", "badxml"])
def test_unparsable_gpu_output_is_an_error_naming_the_probe(fault_results, node):
    rows = [r for r in fault_results[node] if r["check"].startswith("gpu_")
            and r["check"] != "gpu_bus_loss"]
    assert rows and all(r["status"] == "error" for r in rows)
    assert all("nvidia-smi" in r["message"] for r in rows)
    others = [r for r in fault_results[node] if r["check"] == "cpu_governor"]
    assert others[0]["status"] == "pass"  # the other checks still ran


def test_hung_probe_is_killed_and_reported(fault_results):
    rows = _rows(fault_results, "hang", "pcie_link")
    assert len(rows) == 1 and rows[0]["status"] == "error"
    assert "timeout" in rows[0]["message"] and "lspci" in rows[0]["message"]
    assert _one(fault_results, "hang", "gpu_count")["status"] == "pass"


def test_optics_pre_fec_ber(fault_results):
    """4e-05 on a 400G RS(544,514) link: over the row's warning, under its failure; the value
    and threshold read as the numbers they are (not '0' and '< 0')."""
    r = _one(fault_results, "optics", "ib_link_ber", "mlx5_8:1")
    assert r["status"] == "warn" and r["value"] == 4e-05
    assert r["message"].startswith(
        "mlx5_8:1: pre-FEC BER 4e-05 above 1e-05 (400 Gb/s (100 per lane), "
        "FEC Standard_RS-FEC - (544,514); row rs544); mlx5_8 port 1 -> cable to "
        "MF0;su1-leaf-r6:MQM9700/U1 port ")
    assert r["threshold"] == "< 0.0001 (warns from 1e-05; row rs544)"
    assert "transceiver" in r["remediation"]
    assert _one(fault_results, "healthy", "ib_link_ber", "mlx5_8:1")["value"] == 5e-10


def test_perfquery_reading_over_the_threshold_fails_where_sysfs_read_lower(fault_results):
    """sysfs read SymbolErrorCounter 0 a moment before perfquery -x read 5000: counters only
    grow, so 5000 is judged, and the message names perfquery as its source."""
    r = _one(fault_results, "pqhigher", "ib_counters", "mlx5_0:1")
    assert r["status"] == "fail"
    assert ("SymbolErrorCounter=5000 (perfquery -x; sysfs read 0) since boot or its last "
            "reset (max 10)") in r["message"]
    assert "cable/transceiver" in r["remediation"]


def test_host_memory_pressure(fault_results):
    r = _one(fault_results, "hostoom", "host_memory")
    assert r["status"] == "fail" and "OOM killer ran 1 time(s), last on pt_data_worker" in \
        r["message"] and "95% of swap in use" in r["message"]


def test_fabric_not_started(fault_results):
    rows = _rows(fault_results, "fabric", "gpu_fabric", "fail")
    assert len(rows) == 8
    assert "State Not Started" in rows[0]["message"] and "not fit for a job" in rows[0]["message"]
    assert "nvidia-fabricmanager" in rows[0]["remediation"]
    assert _rows(fault_results, "healthy", "gpu_fabric", "pass") and len(
        _rows(fault_results, "healthy", "gpu_fabric", "pass")) == 8


def test_reset_required(fault_results):
    [r] = _rows(fault_results, "resetreq", "gpu_driver_verdict", "fail")
    assert r["subject"] == "gpu2"
    assert "Reset Required: Yes" in r["message"] and "Drain and Reset Recommended: Yes" in r[
        "message"]
    assert "nvidia-smi -r -i" in r["remediation"]
    assert len(_rows(fault_results, "resetreq", "gpu_driver_verdict", "pass")) == 7


def test_persistence_off(fault_results):
    [r] = _rows(fault_results, "persistoff", "gpu_settings", "fail")
    assert r["subject"] == "gpu1"
    assert "persistence mode is disabled" in r["message"]
    assert "nvidia-smi -i 00000000:" in r["remediation"] and "-pm 1" in r["remediation"]


def test_power_capped(fault_results):
    [r] = _rows(fault_results, "powercap", "gpu_settings", "fail")
    assert r["subject"] == "gpu6" and r["value"] == 500.0
    assert "500 W is below the default limit 700 W" in r["message"]
    assert "-pl 700" in r["remediation"]


def test_fabric_manager_down(fault_results):
    r = _one(fault_results, "fmdown", "fabric_manager")
    assert r["status"] == "fail" and r["value"] == "failed" and r["expected"] == "active"
    assert "nvidia-fabricmanager is failed" in r["message"]
    assert "systemctl enable --now nvidia-fabricmanager" in r["remediation"]
    # the GPUs still read a trained fabric: only the service shows the fault
    assert len(_rows(fault_results, "fmdown", "gpu_fabric", "pass")) == 8
    assert _one(fault_results, "healthy", "fabric_manager")["status"] == "pass"


def test_sxid_fatal(fault_results):
    r = _one(fault_results, "sxid", "nvswitch_sxid")
    assert r["status"] == "fail" and r["value"] == 2
    assert "SXid 20034 (LTSSM Fault Up) on nvidia-nvswitch0 link 63" in r["message"]
    assert "SXid 20034 (LTSSM Fault Up) on nvidia-nvswitch1 link 48" in r["message"]
    assert "ago)" in r["message"] and "reboot" in r["remediation"]
    assert _one(fault_results, "healthy", "nvswitch_sxid")["status"] == "pass"


def test_ecc_pending_off(fault_results):
    [r] = _rows(fault_results, "eccpending", "gpu_settings", "warn")
    assert r["subject"] == "gpu4"
    assert "ECC mode pending disabled, current enabled: a reset applies it" in r["message"]
    assert "nvidia-smi -r -i" in r["remediation"]
    assert _one(fault_results, "eccpending", "gpu_ecc", "gpu4")["status"] == "pass"


def test_ib_link_flap(fault_results):
    """A port whose LinkDownedCounter reads 3: named a flap by ib_link_flaps, with the cable
    remediation; ib_counters leaves that counter to it; the other ports pass."""
    r = _one(fault_results, "ibflap", "ib_link_flaps", "mlx5_1:1")
    assert r["status"] == "fail" and r["value"] == 3
    assert "link flapped 3 times since boot or the last counter reset" in r["message"]
    assert "cable/transceiver of mlx5_1:1" in r["remediation"]
    # the technician is told which cable: the switch and port at its far end (iblinkinfo)
    assert re.search(r"; mlx5_1 port 1 -> cable to MF0;su1-leaf-r1:MQM9700/U1 port \d+ "
                     r"\(GUID 0x[0-9a-f]{16}\)$", r["message"]), r["message"]
    assert _one(fault_results, "ibflap", "ib_counters", "mlx5_1:1")["status"] == "pass"
    assert len(_rows(fault_results, "ibflap", "ib_link_flaps", "pass")) == 7
    assert _one(fault_results, "healthy", "ib_link_flaps", "mlx5_1:1")["status"] == "pass"


def test_optics_rx_low(fault_results):
    """One lane at -12 dBm under the module's own -9.914 dBm: ib_optics names the lane and
    value and the module's threshold; the other ports, and the healthy node, pass."""
    r = _one(fault_results, "rxlow", "ib_optics", "mlx5_4:1")
    assert r["status"] == "fail" and r["value"] == -12
    assert "lane 1 Rx power -12 dBm under the module's low threshold -9.914 dBm" in r["message"]
    assert "clean the fibre" in r["remediation"] and "replace the transceiver" in r["remediation"]
    assert len(_rows(fault_results, "rxlow", "ib_optics", "pass")) >= 7
    h = _one(fault_results, "healthy", "ib_optics", "mlx5_4:1")
    assert h["status"] == "pass" and h["value"] == 2.658
    assert "over the module's low threshold -9.914 dBm, module 61 C" in h["message"]


def test_peermem_missing(fault_results):
    r = _one(fault_results, "nopeermem", "gpudirect_rdma")
    assert r["status"] == "fail" and "nvidia_peermem is not loaded" in r["message"]
    assert "modprobe nvidia_peermem" in r["remediation"]
    h = _one(fault_results, "healthy", "gpudirect_rdma")
    assert h["status"] == "pass" and h["value"] == "nvidia_peermem live"


def test_nic_wrong_socket(fault_results):
    r = _one(fault_results, "nicsocket", "gpu_nic_affinity", "gpu3")
    assert r["status"] == "fail" and "gpu3: no NIC on its PCIe switch" in r["message"]
    assert "NODE (across host bridges of its socket)" in r["message"]
    assert "slot the platform pairs with GPU 3" in r["remediation"]
    assert len(_rows(fault_results, "nicsocket", "gpu_nic_affinity", "pass")) == 7
    h = _one(fault_results, "healthy", "gpu_nic_affinity", "gpu4")
    assert h["status"] == "pass" and h["value"] == "mlx5_6 PIX"


def test_disk_full(fault_results):
    r = _one(fault_results, "diskfull", "host_filesystems", "/")
    assert r["status"] == "fail" and r["value"] == 1.0
    assert "/ is 99.0% full" in r["message"] and "(1.0% < 10%)" in r["message"]
    assert "du -xh" in r["remediation"]
    assert _one(fault_results, "diskfull", "host_filesystems", "/raid")["status"] == "pass"
    assert _one(fault_results, "healthy", "host_filesystems", "/")["value"] == 72.7


def test_fs_readonly(fault_results):
    r = _one(fault_results, "fsro", "host_filesystems", "/raid")
    assert r["status"] == "fail"
    assert "/raid (/dev/md0, ext4) is mounted read-only" in r["message"]
    assert "remount,rw /raid" in r["remediation"]
    assert _one(fault_results, "fsro", "host_filesystems", "/")["status"] == "pass"


def test_service_down(fault_results):
    r = _one(fault_results, "servicedown", "host_services", "nvidia-fabricmanager")
    assert r["status"] == "fail" and r["value"] == "failed" and r["expected"] == "active"
    assert r["message"] == "nvidia-fabricmanager is failed"
    assert "sudo systemctl start nvidia-fabricmanager" in r["remediation"]
    assert _one(fault_results, "servicedown", "host_services",
                "nvidia-persistenced")["status"] == "pass"
    assert {r["subject"] for r in _rows(fault_results, "healthy", "host_services", "pass")} == \
        {"nvidia-persistenced", "nvidia-fabricmanager"}


def test_clock_unsynced(fault_results):
    r = _one(fault_results, "unsynced", "host_time_sync")
    assert r["status"] == "fail" and r["value"] == -2500.0
    assert "clock not synchronised (Leap status: Not synchronised" in r["message"]
    assert "chronyc sources -v" in r["remediation"]
    assert _one(fault_results, "healthy", "host_time_sync")["status"] == "pass"


def test_memlock_limited(fault_results):
    r = _one(fault_results, "memlock", "host_limits")
    assert r["status"] == "fail" and r["value"] == 8388608
    assert "locked-memory limit 8388608 bytes (the collecting process's" in r["message"]
    assert "LimitMEMLOCK=infinity" in r["remediation"]
    healthy = _one(fault_results, "healthy", "host_limits")
    assert healthy["status"] == "pass" and healthy["value"] == "unlimited"


def test_edac_ue(fault_results):
    r = _one(fault_results, "edacue", "host_memory_errors")
    assert r["status"] == "fail" and r["value"] == 1 and r["expected"] == 0
    assert "1 uncorrected memory error(s) since the EDAC driver loaded (mc1: 1)" in r["message"]
    assert "drain the node" in r["remediation"] and "ras-mc-ctl" in r["remediation"]
    healthy = _one(fault_results, "healthy", "host_memory_errors")
    assert healthy["status"] == "pass" and "corrected=0 since boot" in healthy["message"]


def test_nvswitch_missing(fault_results):
    r = _one(fault_results, "nvswitchgone", "nvswitch_count")
    assert r["status"] == "fail" and r["value"] == 3 and r["expected"] == 4
    assert "3 NVSwitch(es) on the PCI bus" in r["message"] and "reboot" in r["remediation"]
    # what follows on HGX: the fabric manager failed, no GPU's fabric completed
    assert _one(fault_results, "nvswitchgone", "fabric_manager")["status"] == "fail"
    assert len(_rows(fault_results, "nvswitchgone", "gpu_fabric", "fail")) == 8
    h = _one(fault_results, "healthy", "nvswitch_count")
    assert h["status"] == "pass" and h["value"] == 4


def test_gpudirect_none(fault_results):
    r = _one(fault_results, "gdrnone", "gpudirect_rdma")
    assert r["status"] == "fail" and r["value"] == "none"
    assert "nvidia_peermem is not loaded" in r["message"]
    assert "DMA-BUF needs kernel >= 5.12, this is kernel 5.4" in r["message"]
    # peermem-missing on the healthy node's proprietary module: no DMA-BUF either
    p = _one(fault_results, "nopeermem", "gpudirect_rdma")
    assert "the proprietary kernel module has no DMA-BUF" in p["message"]
def test_cable_crossed(fault_results):
    """mlx5_1's and mlx5_4's cables swapped between rails: every port check passes (both links
    train Active at 400), only ib_rail_cabling fails, naming both cables' far ends (switch,
    port, GUID) and whose rail each leaf is; the healthy node's HCAs are each on their own."""
    r = _one(fault_results, "cablecross", "ib_rail_cabling")
    assert r["status"] == "fail" and r["value"] == 2 and r["expected"] == 0
    m = r["message"]
    assert re.search(r"mlx5_1 port 1 -> cable to MF0;su1-leaf-r2:MQM9700/U1 port (\d+) \(GUID "
                     r"0x[0-9a-f]{16}\): expected a leaf matching '\*leaf-r1:\*', the leaf of "
                     r"mlx5_4's rail", m), m
    assert re.search(r"mlx5_4 port 1 -> cable to MF0;su1-leaf-r1:MQM9700/U1 port \d+ .*"
                     r"the leaf of mlx5_1's rail", m), m
    assert "swap the named cables" in r["remediation"]
    assert r["probe"] == "iblinkinfo"
    for check in ("ib_port_state", "ib_counters", "ib_link_ber"):
        assert {x["status"] for x in _rows(fault_results, "cablecross", check)} <= {
            "pass", "skip"}  # the Ethernet front-end port is not theirs to judge
    ok = _one(fault_results, "healthy", "ib_rail_cabling")
    assert ok["status"] == "pass" and ok["message"].startswith("8 HCAs each on a leaf of its own")


def test_port_down_names_what_is_known_of_the_far_end(fault_results):
    """A Down port has no far end to ask: the message says so, and ib_rail_cabling, which
    cannot place that HCA, is an error rather than a pass."""
    r = _one(fault_results, "ibdown", "ib_port_state", "mlx5_7:1")
    assert r["status"] == "fail"
    assert r["message"].endswith("mlx5_7 port 1 -> far end unknown (the port reads Down/Polling, "
                                 "so no far end answers through it)")
    cab = _one(fault_results, "ibdown", "ib_rail_cabling")
    assert cab["status"] == "error" and "far end not known for 1 of 8 HCAs" in cab["message"]
def test_nvme_media_errors(fault_results):
    r = _one(fault_results, "nvmemedia", "host_nvme_health", "nvme3")
    assert r["status"] == "fail" and "media_errors=24 over the drive's life" in r["message"]
    assert "replace the drive" in r["remediation"] and "nvme error-log /dev/nvme3" in \
        r["remediation"]
    others = _rows(fault_results, "nvmemedia", "host_nvme_health")
    assert len(others) == 8 and {o["status"] for o in others if o["subject"] != "nvme3"} == \
        {"pass"}


def test_nvme_critical_warning_spare(fault_results):
    r = _one(fault_results, "nvmespare", "host_nvme_health", "nvme5")
    assert r["status"] == "fail" and r["value"] == 1 and r["expected"] == 0
    assert "critical warning 0x01: available spare below its threshold" in r["message"]
    assert "available spare 4%, under its threshold 5%" in r["message"]
    healthy = _one(fault_results, "healthy", "host_nvme_health", "nvme0")
    assert healthy["status"] == "pass" and "spare 100% (threshold 5%)" in healthy["message"]


def test_mce_corrected_storm_warns(fault_results):
    r = _one(fault_results, "mcestorm", "host_mce")
    assert r["status"] == "warn" and r["value"] == 0
    assert "12 corrected machine-check events within 24.0 h (max 10" in r["message"]
    assert "corrected on CPU 0 bank 17" in r["message"] and "ras-mc-ctl" in r["remediation"]
    healthy = _one(fault_results, "healthy", "host_mce")
    assert healthy["status"] == "pass" and "0 corrected" in healthy["message"]


def test_mce_uncorrected_fails(fault_results):
    r = _one(fault_results, "mcefatal", "host_mce")
    assert r["status"] == "fail" and r["value"] == 1 and r["expected"] == 0
    assert "fatal on CPU 0 bank 4" in r["message"] and "drain the node" in r["remediation"]
def test_acs_redirect_on_a_switch_port_fails(fault_results):
    r = _one(fault_results, "acs", "pcie_p2p_settings")
    assert r["status"] == "fail"
    assert "ACS redirect enabled on 17:00.0 (SrcValid+ ReqRedir+ CmpltRedir+)" in r["message"]
    assert "setpci -s BDF ECAP_ACS+0x6.w=0000" in r["remediation"]
    assert "17:00.0 ACSCtl: SrcValid+ ReqRedir+ CmpltRedir+" in r["evidence"]


def test_iommu_translating_dma_fails(fault_results):
    r = _one(fault_results, "iommu", "pcie_p2p_settings")
    assert r["status"] == "fail" and "translates DMA in 24 of 24 groups" in r["message"]
    assert "iommu=pt" in r["remediation"] and "intel_iommu=on" in r["evidence"]
    healthy = _one(fault_results, "healthy", "pcie_p2p_settings")
    assert healthy["status"] == "pass" and "ro iommu=pt" in healthy["evidence"]
