"""Render an `SmiReport` as `nvidia-smi -q -x` XML (DTD v12, driver 535 layout).

The simulator has the real 8x H100 `nvidia-smi -q` text but must also answer `nvidia-smi -q -x`.
Parsing the text and rendering it here gives XML with the elements and nesting a 535 driver
prints (as in fixtures/real/01-nvidia-smi-xml/a100-sxm4-80gb-drv535-mig.xml), so the XML parser
reads back exactly the report that went in. Facts the model does not hold are printed as `N/A`.
Like nvidia-smi, a GPU that reports T.Limit margins gets the `*_tlimit_threshold` elements instead
of the absolute thresholds.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from stetho.parsers.gpu_model import ClockEventReasons, EccCounts, Gpu, RemappedRows, SmiReport

NA = "N/A"
DEPRECATED = "Requested functionality has been deprecated"
_HEADER = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
)
_REASON_TAGS = (
    ("gpu_idle", "idle"),
    ("applications_clocks_setting", "applications_clocks_setting"),
    ("sw_power_cap", "sw_power_cap"),
    ("hw_slowdown", "hw_slowdown"),
    ("hw_thermal_slowdown", "hw_thermal_slowdown"),
    ("hw_power_brake_slowdown", "hw_power_brake_slowdown"),
    ("sync_boost", "sync_boost"),
    ("sw_thermal_slowdown", "sw_thermal_slowdown"),
    ("display_clocks_setting", "display_clocks_setting"),
)


def render(report: SmiReport) -> str:
    """The XML nvidia-smi 535 would print for this report."""
    root = ET.Element("nvidia_smi_log")
    _leaf(root, "timestamp", _s(report.timestamp))
    _leaf(root, "driver_version", _s(report.driver_version))
    _leaf(root, "cuda_version", _s(report.cuda_version))
    _leaf(root, "attached_gpus", str(report.attached_gpus))
    for gpu in report.gpus:
        _gpu(root, gpu)
    ET.indent(root, space="    ")
    return _HEADER + ET.tostring(root, encoding="unicode") + "\n"


# ---- value formatting, as nvidia-smi prints values -------------------------------------------


def _s(value: str | None) -> str:
    return NA if value is None else value


def _i(value: int | None, unit: str = "") -> str:
    return NA if value is None else f"{value}{unit}"


def _f(value: float | None, unit: str, decimals: int = 0) -> str:
    """'29 C', '67.74 W'; more digits only where the value has them, so it reads back equal."""
    if value is None:
        return NA
    text = f"{value:.{decimals}f}"
    if float(text) != value:
        text = repr(value)
    return f"{text} {unit}"


def _b(value: bool | None, yes: str, no: str) -> str:
    return NA if value is None else (yes if value else no)


def _enabled(value: bool | None) -> str:
    return _b(value, "Enabled", "Disabled")


def _leaf(parent: ET.Element, tag: str, text: str) -> ET.Element:
    el = ET.SubElement(parent, tag)
    el.text = text
    return el


def _group(parent: ET.Element, tag: str, *leaves: tuple[str, str]) -> ET.Element:
    el = ET.SubElement(parent, tag)
    for name, text in leaves:
        _leaf(el, name, text)
    return el


# ---- the <gpu> element, in the order driver 535 prints it ------------------------------------


def _gpu(root: ET.Element, g: Gpu) -> None:
    el = ET.SubElement(root, "gpu", id=g.pci_bus_id)
    _leaf(el, "product_name", _s(g.product_name))
    for tag in ("product_brand", "product_architecture", "display_mode", "display_active"):
        _leaf(el, tag, NA)
    _leaf(el, "persistence_mode", _enabled(g.persistence_mode))
    _leaf(el, "addressing_mode", NA)
    _group(el, "mig_mode", ("current_mig", _enabled(g.mig_enabled)),
           ("pending_mig", _enabled(g.mig_enabled)))
    _leaf(el, "mig_devices", "None")
    _leaf(el, "accounting_mode", NA)
    _leaf(el, "accounting_mode_buffer_size", NA)
    _group(el, "driver_model", ("current_dm", NA), ("pending_dm", NA))
    _leaf(el, "serial", _s(g.serial))
    _leaf(el, "uuid", _s(g.uuid))
    _leaf(el, "minor_number", NA)
    _leaf(el, "vbios_version", _s(g.vbios_version))
    for tag in ("multigpu_board", "board_id", "board_part_number", "gpu_part_number",
                "gpu_fru_part_number", "gpu_module_id"):
        _leaf(el, tag, NA)
    _group(el, "inforom_version", ("img_version", NA), ("oem_object", NA), ("ecc_object", NA),
           ("pwr_object", NA))
    _group(el, "gpu_operation_mode", ("current_gom", NA), ("pending_gom", NA))
    _leaf(el, "gsp_firmware_version", NA)
    _group(el, "gpu_virtualization_mode", ("virtualization_mode", NA), ("host_vgpu_mode", NA))
    _group(el, "gpu_reset_status", ("reset_required", _b(g.reset_required, "Yes", "No")),
           ("drain_and_reset_recommended", _b(g.drain_and_reset_recommended, "Yes", "No")))
    if g.recovery_action is not None:  # 550+ drivers only: absent where the recording lacks it
        _leaf(el, "gpu_recovery_action", g.recovery_action)
    _group(el, "ibmnpu", ("relaxed_ordering_mode", NA))
    _pci(el, g)
    _leaf(el, "fan_speed", NA)
    _leaf(el, "performance_state", _d(g, "performance_state", _s(g.performance_state)))
    _reasons(el, g.reasons)
    _counters(el, g)
    _group(el, "fb_memory_usage", ("total", NA), ("reserved", NA), ("used", NA), ("free", NA))
    for tag in ("bar1_memory_usage", "cc_protected_memory_usage"):
        _group(el, tag, ("total", NA), ("used", NA), ("free", NA))
    _leaf(el, "compute_mode", _s(g.compute_mode))
    _group(el, "utilization", *((t, NA) for t in (
        "gpu_util", "memory_util", "encoder_util", "decoder_util", "jpeg_util", "ofa_util")))
    for tag in ("encoder_stats", "fbc_stats"):
        _group(el, tag, ("session_count", NA), ("average_fps", NA), ("average_latency", NA))
    _group(el, "ecc_mode", ("current_ecc", _enabled(g.ecc_enabled)),
           ("pending_ecc", _enabled(g.ecc_pending)))
    errors = ET.SubElement(el, "ecc_errors")
    _ecc(errors, "volatile", g.ecc_volatile)
    _ecc(errors, "aggregate", g.ecc_aggregate)
    _retired(el, g)
    _remapped(el, g.remapped_rows)
    _temperature(el, g)
    _group(el, "supported_gpu_target_temp", ("gpu_target_temp_min", NA),
           ("gpu_target_temp_max", NA))
    _group(el, "gpu_power_readings", ("power_state", NA),
           ("power_draw", _f(g.power_draw_w, "W", 2)),
           ("current_power_limit", _f(g.power_limit_w, "W", 2)),
           ("requested_power_limit", NA),
           ("default_power_limit", _f(g.default_power_limit_w, "W", 2)),
           ("min_power_limit", NA), ("max_power_limit", NA))
    _group(el, "module_power_readings", *((t, NA) for t in (
        "power_state", "power_draw", "current_power_limit", "requested_power_limit",
        "default_power_limit", "min_power_limit", "max_power_limit")))
    _group(el, "clocks", ("graphics_clock", _i(g.graphics_mhz, " MHz")),
           ("sm_clock", _i(g.sm_mhz, " MHz")), ("mem_clock", _i(g.mem_mhz, " MHz")),
           ("video_clock", NA))
    _group(el, "applications_clocks",
           ("graphics_clock", _d(g, "app_graphics_mhz", _i(g.app_graphics_mhz, " MHz"))),
           ("mem_clock", _d(g, "app_mem_mhz", _i(g.app_mem_mhz, " MHz"))))
    _group(el, "default_applications_clocks",
           ("graphics_clock", _d(g, "default_app_graphics_mhz",
                                 _i(g.default_app_graphics_mhz, " MHz"))),
           ("mem_clock", _d(g, "default_app_mem_mhz", _i(g.default_app_mem_mhz, " MHz"))))
    _group(el, "deferred_clocks",
           ("mem_clock", _d(g, "deferred_mem_mhz", _i(g.deferred_mem_mhz, " MHz"))))
    _group(el, "max_clocks", ("graphics_clock", _i(g.max_graphics_mhz, " MHz")),
           ("sm_clock", _i(g.max_sm_mhz, " MHz")),
           ("mem_clock", _i(g.max_mem_mhz, " MHz")), ("video_clock", NA))
    _group(el, "max_customer_boost_clocks",
           ("graphics_clock", _d(g, "max_customer_boost_graphics_mhz",
                                 _i(g.max_customer_boost_graphics_mhz, " MHz"))))
    _group(el, "clock_policy",
           ("auto_boost", _d(g, "auto_boost", _b(g.auto_boost, "On", "Off"))),
           ("auto_boost_default", _d(g, "auto_boost_default",
                                     _b(g.auto_boost_default, "On", "Off"))))
    _group(el, "voltage", ("graphics_volt", NA))
    fabric = _group(el, "fabric", ("state", _s(g.fabric_state)), ("status", _s(g.fabric_status)))
    # 550+ drivers add the NVLink clique: rendered only where the source had it (535 has not).
    for tag, value in (("cliqueId", g.fabric_clique_id), ("clusterUuid", g.fabric_cluster_uuid)):
        if value is not None:
            _leaf(fabric, tag, value)
    _leaf(el, "supported_clocks", NA)
    ET.SubElement(el, "processes")
    ET.SubElement(el, "accounted_processes")


def _pci(parent: ET.Element, g: Gpu) -> None:
    domain, bus, devfn = g.pci_bus_id.split(":")
    pci = ET.SubElement(parent, "pci")
    _leaf(pci, "pci_bus", bus)
    _leaf(pci, "pci_device", devfn.split(".")[0])
    _leaf(pci, "pci_domain", domain[-4:])
    _leaf(pci, "pci_device_id", NA)
    _leaf(pci, "pci_bus_id", g.pci_bus_id)
    _leaf(pci, "pci_sub_system_id", NA)
    link = ET.SubElement(pci, "pci_gpu_link_info")
    _group(link, "pcie_gen", ("max_link_gen", _i(g.pcie_gen_max)),
           ("current_link_gen", _i(g.pcie_gen_current)),
           ("device_current_link_gen", _i(g.pcie_gen_current)),
           ("max_device_link_gen", NA), ("max_host_link_gen", NA))
    _group(link, "link_widths", ("max_link_width", _i(g.pcie_width_max, "x")),
           ("current_link_width", _i(g.pcie_width_current, "x")))
    _group(pci, "pci_bridge_chip", ("bridge_chip_type", NA), ("bridge_chip_fw", NA))
    _leaf(pci, "replay_counter", _i(g.pcie_replays))
    for tag in ("replay_rollover_counter", "tx_util", "rx_util", "atomic_caps_inbound",
                "atomic_caps_outbound"):
        _leaf(pci, tag, NA)


def _d(g: Gpu, name: str, text: str) -> str:
    """nvidia-smi's deprecation sentence for a field the driver no longer reports."""
    return DEPRECATED if name in g.deprecated else text


_COUNTER_TAGS = (("sw_power_cap", "sw_power_cap_us"), ("sync_boost", "sync_boost_us"),
                 ("sw_therm_slowdown", "sw_thermal_slowdown_us"),
                 ("hw_therm_slowdown", "hw_thermal_slowdown_us"),
                 ("hw_power_brake", "hw_power_brake_us"))


def _counters(parent: ET.Element, g: Gpu) -> None:
    """550+ drivers only: absent where the model holds none, as in the 535 layout."""
    c = g.clock_event_counters
    if all(getattr(c, name) is None for _, name in _COUNTER_TAGS):
        return
    _group(parent, "clocks_event_reasons_counters", *(
        (f"clocks_event_reasons_counters_{tag}", _i(getattr(c, name), " us"))
        for tag, name in _COUNTER_TAGS))


def _reasons(parent: ET.Element, r: ClockEventReasons) -> None:
    _group(parent, "clocks_event_reasons", *(
        (f"clocks_event_reason_{tag}", _b(getattr(r, name), "Active", "Not Active"))
        for tag, name in _REASON_TAGS))


def _ecc(parent: ET.Element, tag: str, c: EccCounts) -> None:
    _group(parent, tag, ("sram_correctable", _i(c.sram_correctable)),
           ("sram_uncorrectable", _i(c.sram_uncorrectable)),
           ("dram_correctable", _i(c.dram_correctable)),
           ("dram_uncorrectable", _i(c.dram_uncorrectable)))


def _retired(parent: ET.Element, g: Gpu) -> None:
    pages = ET.SubElement(parent, "retired_pages")
    for tag, count in (("multiple_single_bit_retirement", g.retired_single_bit),
                       ("double_bit_retirement", g.retired_double_bit)):
        # A known count comes with a (here empty) page list; an unknown one with N/A.
        _group(pages, tag, ("retired_count", _i(count)),
               ("retired_pagelist", NA if count is None else ""))
    pending = _b(g.retired_pending, "Yes", "No")
    _leaf(pages, "pending_blacklist", pending)
    _leaf(pages, "pending_retirement", pending)


def _remapped(parent: ET.Element, rows: RemappedRows | None) -> None:
    if rows is None:
        _leaf(parent, "remapped_rows", NA)
        return
    el = _group(parent, "remapped_rows", ("remapped_row_corr", _i(rows.correctable)),
                ("remapped_row_unc", _i(rows.uncorrectable)),
                ("remapped_row_pending", _b(rows.pending, "Yes", "No")),
                ("remapped_row_failure", _b(rows.failure, "Yes", "No")))
    _group(el, "row_remapper_histogram", *((f"row_remapper_histogram_{t}", NA) for t in (
        "max", "high", "partial", "low", "none")))


def _temperature(parent: ET.Element, g: Gpu) -> None:
    temp = ET.SubElement(parent, "temperature")
    _leaf(temp, "gpu_temp", _f(g.gpu_temp_c, "C"))
    _leaf(temp, "gpu_temp_tlimit", _f(g.tlimit_temp_c, "C"))
    tlimit = g.tlimit_shutdown_c is not None or g.tlimit_slowdown_c is not None
    absolute = g.shutdown_temp_c is not None or g.slowdown_temp_c is not None or not tlimit
    if absolute:
        _leaf(temp, "gpu_temp_max_threshold", _f(g.shutdown_temp_c, "C"))
        _leaf(temp, "gpu_temp_slow_threshold", _f(g.slowdown_temp_c, "C"))
        _leaf(temp, "gpu_temp_max_gpu_threshold", NA)
    if tlimit:
        _leaf(temp, "gpu_temp_max_tlimit_threshold", _f(g.tlimit_shutdown_c, "C"))
        _leaf(temp, "gpu_temp_slow_tlimit_threshold", _f(g.tlimit_slowdown_c, "C"))
        _leaf(temp, "gpu_temp_max_gpu_tlimit_threshold", NA)
    _leaf(temp, "gpu_target_temperature", NA)
    _leaf(temp, "memory_temp", _f(g.memory_temp_c, "C"))
    if absolute:
        _leaf(temp, "gpu_temp_max_mem_threshold", _f(g.memory_max_temp_c, "C"))
    if tlimit:
        _leaf(temp, "gpu_temp_max_mem_tlimit_threshold", NA)
