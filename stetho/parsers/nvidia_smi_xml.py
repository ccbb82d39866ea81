"""Parse `nvidia-smi -q -x` into an `SmiReport`.

The XML is the stable interface, but its element names drift between DTD versions: v10/v11 (and
some 525 v12 files) say `clocks_throttle_reason_*` where 535+ says `clocks_event_reason_*`;
v10 counts ECC errors per structure under `single_bit`/`double_bit`; Hopper splits SRAM
uncorrectable into parity and SEC-DED; driver 595 (v13) replaces `power_draw` with
`average_power_draw`/`instant_power_draw`; Ada+ reports T.Limit margins (negative values)
instead of absolute thresholds. Values carry units and may be N/A or a sentence. All of it maps
onto the same `Gpu` fields here.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import lru_cache

from stetho.parsers import ParseError
from stetho.parsers._text import UNEXPECTED, guarded, integer, quantity
from stetho.parsers.gpu_model import (
    ClockEventCounters,
    ClockEventReasons,
    EccCounts,
    Gpu,
    RemappedRows,
    SmiReport,
    UnreadableGpu,
    bus_id,
    deprecated_fields,
    flag,
    on_off,
    string,
    total,
    unbracket,
)

TOOL = "nvidia-smi -q -x"

_REASONS = {
    "idle": "gpu_idle",
    "applications_clocks_setting": "applications_clocks_setting",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "hw_thermal_slowdown": "hw_thermal_slowdown",
    "hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal_slowdown",
    "display_clocks_setting": "display_clocks_setting",
}
#: Gpu fields a newer driver may print as "Requested functionality has been deprecated".
_DEPRECATABLE = {
    "app_graphics_mhz": "applications_clocks/graphics_clock",
    "app_mem_mhz": "applications_clocks/mem_clock",
    "default_app_graphics_mhz": "default_applications_clocks/graphics_clock",
    "default_app_mem_mhz": "default_applications_clocks/mem_clock",
    "max_customer_boost_graphics_mhz": "max_customer_boost_clocks/graphics_clock",
    "deferred_mem_mhz": "deferred_clocks/mem_clock",
    "auto_boost": "clock_policy/auto_boost",
    "auto_boost_default": "clock_policy/auto_boost_default",
    "performance_state": "performance_state",
}
_COUNTERS = {
    "sw_power_cap_us": "sw_power_cap",
    "sync_boost_us": "sync_boost",
    "sw_thermal_slowdown_us": "sw_therm_slowdown",
    "hw_thermal_slowdown_us": "hw_therm_slowdown",
    "hw_power_brake_us": "hw_power_brake",
}
_LEGACY_SRAM = ("register_file", "l1_cache", "l2_cache", "texture_memory", "texture_shm", "cbu")


def parse(text: str | bytes) -> SmiReport:
    """Parse the XML nvidia-smi prints for `-q -x`. Raises ParseError on anything else."""
    return guarded(TOOL, text, _parse, prefix="")


def _parse(data: str) -> SmiReport:
    try:
        root = ET.fromstring(data.lstrip("\ufeff"))
    except ET.ParseError as exc:
        raise ParseError(TOOL, f"not well-formed XML ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(TOOL, f"root element is <{root.tag}>, not <nvidia_smi_log>")
    # Only newer drivers print the deprecation sentence: skip looking for it everywhere else.
    deprecations = "deprecated" in data
    found: list[Gpu] = []
    unreadable: list[UnreadableGpu] = []
    for i, el in enumerate(root.findall("gpu")):  # one GPU's bad value is that GPU's error
        try:
            found.append(_gpu(i, el, deprecations))
        except ParseError as exc:
            unreadable.append(UnreadableGpu(i, el.get("id"), exc.reason))
        except UNEXPECTED as exc:
            unreadable.append(UnreadableGpu(i, el.get("id"), f"unexpected content: {exc}"))
    if unreadable and not found:
        raise ParseError(TOOL, unreadable[0].reason)
    gpus = tuple(found)
    driver = string(_text(root, "driver_version"))
    if driver is None and not gpus:
        raise ParseError(TOOL, "no driver_version and no <gpu> element")
    attached = integer(unbracket(_text(root, "attached_gpus")))
    return SmiReport(
        timestamp=string(_text(root, "timestamp")),
        driver_version=driver,
        cuda_version=string(_text(root, "cuda_version")),
        attached_gpus=len(gpus) + len(unreadable) if attached is None else attached,
        gpus=gpus, unreadable=tuple(unreadable),
    )


def _text(el: ET.Element | None, path: str) -> str | None:
    """Stripped text of the element at path, or None where it is absent.

    Walked one tag at a time: a plain tag is found in C, a path with '/' goes through
    ElementPath in Python (a third of this parser's time on a thousand-node replay)."""
    if el is None:
        return None
    if "/" not in path:  # most paths: one find, no split
        el = el.find(path)
    else:
        for tag in path.split("/"):
            if el is None:
                return None
            el = el.find(tag)
    if el is None or el.text is None:
        return None
    return el.text.strip()


# Values repeat across GPUs and nodes ('0', 'N/A', '1980 MHz', 'Enabled'): each text is read
# once. A text that does not read raises every time (exceptions are not cached).
@lru_cache(maxsize=8192)
def _int_of(text: str) -> int | None:
    return integer(unbracket(text))


@lru_cache(maxsize=8192)
def _num_of(text: str) -> float | None:
    return quantity(unbracket(text))


@lru_cache(maxsize=1024)
def _flag_of(text: str) -> bool | None:
    return flag(text)


def _int(el: ET.Element | None, path: str) -> int | None:
    text = _text(el, path)
    return None if text is None else _int_of(text)


def _num(el: ET.Element | None, path: str) -> float | None:
    text = _text(el, path)
    return None if text is None else _num_of(text)


def _flag(text: str | None) -> bool | None:
    return None if text is None else _flag_of(text)


def _first_num(el: ET.Element | None, *paths: str) -> float | None:
    """The first of several drifting element names that holds a value."""
    for path in paths:
        value = _num(el, path)
        if value is not None:
            return value
    return None


def _gpu(index: int, el: ET.Element, deprecations: bool = True) -> Gpu:
    raw_id = el.get("id") or _text(el, "pci/pci_bus_id")
    if not raw_id:
        raise ParseError(TOOL, f"<gpu> number {index} has no id attribute and no pci_bus_id")
    # Parents found once (C-level find), their leaves read from there.
    pci = el.find("pci")
    link = None if pci is None else pci.find("pci_gpu_link_info")
    temp = el.find("temperature")
    clocks, maxc = el.find("clocks"), el.find("max_clocks")
    app, dapp = el.find("applications_clocks"), el.find("default_applications_clocks")
    retired, fabric = el.find("retired_pages"), el.find("fabric")
    errors = el.find("ecc_errors")
    policy = el.find("clock_policy")
    power = el.find("gpu_power_readings")
    if power is None:
        power = el.find("power_readings")
    return Gpu(
        index=index,
        pci_bus_id=bus_id(raw_id),
        product_name=string(_text(el, "product_name")),
        uuid=string(_text(el, "uuid")),
        serial=string(_text(el, "serial")),
        vbios_version=string(_text(el, "vbios_version")),
        persistence_mode=_flag(_text(el, "persistence_mode")),
        mig_enabled=_flag(_text(el, "mig_mode/current_mig")),
        pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
        pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
        pcie_width_current=_int(link, "link_widths/current_link_width"),
        pcie_width_max=_int(link, "link_widths/max_link_width"),
        pcie_replays=_int(pci, "replay_counter"),
        graphics_mhz=_int(clocks, "graphics_clock"),
        sm_mhz=_int(clocks, "sm_clock"),
        mem_mhz=_int(clocks, "mem_clock"),
        app_graphics_mhz=_int(app, "graphics_clock"),
        app_mem_mhz=_int(app, "mem_clock"),
        default_app_graphics_mhz=_int(dapp, "graphics_clock"),
        default_app_mem_mhz=_int(dapp, "mem_clock"),
        max_sm_mhz=_int(maxc, "sm_clock"),
        max_mem_mhz=_int(maxc, "mem_clock"),
        reasons=_reasons(el),
        gpu_temp_c=_num(temp, "gpu_temp"),
        memory_temp_c=_num(temp, "memory_temp"),
        memory_max_temp_c=_num(temp, "gpu_temp_max_mem_threshold"),
        slowdown_temp_c=_num(temp, "gpu_temp_slow_threshold"),
        shutdown_temp_c=_num(temp, "gpu_temp_max_threshold"),
        tlimit_temp_c=_num(temp, "gpu_temp_tlimit"),
        tlimit_slowdown_c=_num(temp, "gpu_temp_slow_tlimit_threshold"),
        tlimit_shutdown_c=_num(temp, "gpu_temp_max_tlimit_threshold"),
        power_draw_w=_first_num(power, "power_draw", "average_power_draw"),
        power_limit_w=_first_num(
            power, "current_power_limit", "enforced_power_limit", "power_limit"
        ),
        ecc_enabled=_flag(_text(el, "ecc_mode/current_ecc")),
        ecc_volatile=_ecc(None if errors is None else errors.find("volatile")),
        ecc_aggregate=_ecc(None if errors is None else errors.find("aggregate")),
        retired_single_bit=_int(retired, "multiple_single_bit_retirement/retired_count"),
        retired_double_bit=_int(retired, "double_bit_retirement/retired_count"),
        retired_pending=_retired_pending(retired),
        remapped_rows=_remapped(el.find("remapped_rows")),
        fabric_state=string(_text(fabric, "state")),
        fabric_status=string(_text(fabric, "status")),
        fabric_clique_id=string(_text(fabric, "cliqueId")),
        fabric_cluster_uuid=string(_text(fabric, "clusterUuid")),
        reset_required=_flag(_text(el, "gpu_reset_status/reset_required")),
        drain_and_reset_recommended=_flag(
            _text(el, "gpu_reset_status/drain_and_reset_recommended")),
        recovery_action=string(_text(el, "gpu_recovery_action")),
        compute_mode=string(_text(el, "compute_mode")),
        ecc_pending=_flag(_text(el, "ecc_mode/pending_ecc")),
        default_power_limit_w=_first_num(power, "default_power_limit"),
        performance_state=string(_text(el, "performance_state")),
        max_graphics_mhz=_int(maxc, "graphics_clock"),
        max_customer_boost_graphics_mhz=_int(el, "max_customer_boost_clocks/graphics_clock"),
        deferred_mem_mhz=_int(el, "deferred_clocks/mem_clock"),
        auto_boost=on_off(_text(policy, "auto_boost")),
        auto_boost_default=on_off(_text(policy, "auto_boost_default")),
        clock_event_counters=_event_counters(el.find("clocks_event_reasons_counters")),
        deprecated=deprecated_fields({f: _text(el, p) for f, p in _DEPRECATABLE.items()})
        if deprecations else frozenset(),
    )


def _event_counters(block: ET.Element | None) -> ClockEventCounters:
    """DTD v13 'clocks_event_reasons_counters' (values like '25483012608 us')."""
    if block is None:
        return ClockEventCounters()
    return ClockEventCounters(**{
        name: _int(block, f"clocks_event_reasons_counters_{tag}") for name, tag in _COUNTERS.items()
    })


def _reasons(el: ET.Element) -> ClockEventReasons:
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        block = el.find(section)
        if block is not None:
            return ClockEventReasons(
                **{name: _flag(_text(block, prefix + tag)) for name, tag in _REASONS.items()}
            )
    return ClockEventReasons()


def _ecc(block: ET.Element | None) -> EccCounts:
    if block is None:
        return EccCounts()
    if block.find("single_bit") is not None or block.find("double_bit") is not None:
        # DTD v10 and older: per-structure counts; device memory is the DRAM.
        return EccCounts(
            sram_correctable=total(*(_int(block, f"single_bit/{s}") for s in _LEGACY_SRAM)),
            sram_uncorrectable=total(*(_int(block, f"double_bit/{s}") for s in _LEGACY_SRAM)),
            dram_correctable=_int(block, "single_bit/device_memory"),
            dram_uncorrectable=_int(block, "double_bit/device_memory"),
        )
    return EccCounts(
        sram_correctable=_int(block, "sram_correctable"),
        sram_uncorrectable=total(
            _int(block, "sram_uncorrectable"),
            _int(block, "sram_uncorrectable_parity"),
            _int(block, "sram_uncorrectable_secded"),
        ),
        dram_correctable=_int(block, "dram_correctable"),
        dram_uncorrectable=_int(block, "dram_uncorrectable"),
    )


def _retired_pending(block: ET.Element | None) -> bool | None:
    retirement = _flag(_text(block, "pending_retirement"))
    return _flag(_text(block, "pending_blacklist")) if retirement is None else retirement


def _remapped(block: ET.Element | None) -> RemappedRows | None:
    """None where the element is missing or the literal N/A (Turing, consumer, MIG A100)."""
    if block is None or len(block) == 0:
        return None
    return RemappedRows(
        correctable=_int(block, "remapped_row_corr"),
        uncorrectable=_int(block, "remapped_row_unc"),
        pending=_flag(_text(block, "remapped_row_pending")),
        failure=_flag(_text(block, "remapped_row_failure")),
    )
