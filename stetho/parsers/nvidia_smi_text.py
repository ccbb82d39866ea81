"""Parse the human-readable `nvidia-smi -q` into an `SmiReport`.

Some nodes (and most bug reports) only have the text form. It is an indented tree of
`Key : Value` lines: `GPU 00000000:19:00.0` opens a GPU, a key without a value opens a section,
and a key with a value can still own deeper lines (`HW Slowdown : Active` holds the thermal and
power-brake sub-reasons). Names drift like the XML's: 'Clocks Throttle Reasons' became 'Clocks
Event Reasons', 'Power Readings' became 'GPU Power Readings', 'Power Draw' became 'Average Power
Draw', and Hopper splits 'SRAM Uncorrectable' into Parity and SEC-DED.

Excerpts elide parts with `[...]` lines; missing sections simply give None fields. Full output
(a GPU section that starts with 'Product Name') must reach each GPU's 'Processes' line, so output
cut off mid-GPU is refused rather than silently read as half a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import field

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import guarded, integer, quantity
from stetho.parsers.gpu_model import (
    ClockEventCounters,
    ClockEventReasons,
    EccCounts,
    Gpu,
    RemappedRows,
    SmiReport,
    bus_id,
    deprecated_fields,
    flag,
    on_off,
    string,
    total,
    unbracket,
)

TOOL = "nvidia-smi -q"

_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s+:(?:\s?(?P<value>.*))?$")
_GPU_HEADER = re.compile(r"^GPU\s+(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-7])$")
_ELISION = {"[...]", "...", "[…]", "…"}
_REASONS = {
    "idle": ("Idle", "GPU Idle"),
    "applications_clocks_setting": ("Applications Clocks Setting",),
    "sw_power_cap": ("SW Power Cap",),
    "hw_slowdown": ("HW Slowdown",),
    "hw_thermal_slowdown": ("HW Thermal Slowdown",),
    "hw_power_brake_slowdown": ("HW Power Brake Slowdown",),
    "sync_boost": ("Sync Boost",),
    "sw_thermal_slowdown": ("SW Thermal Slowdown",),
    "display_clocks_setting": ("Display Clock Setting", "Display Clocks Setting"),
}
#: Gpu fields a newer driver may print as "Requested functionality has been deprecated".
_DEPRECATABLE: dict[str, tuple[str, ...]] = {
    "app_graphics_mhz": ("Applications Clocks", "Graphics"),
    "app_mem_mhz": ("Applications Clocks", "Memory"),
    "default_app_graphics_mhz": ("Default Applications Clocks", "Graphics"),
    "default_app_mem_mhz": ("Default Applications Clocks", "Memory"),
    "max_customer_boost_graphics_mhz": ("Max Customer Boost Clocks", "Graphics"),
    "deferred_mem_mhz": ("Deferred Clocks", "Memory"),
    "auto_boost": ("Clock Policy", "Auto Boost"),
    "auto_boost_default": ("Clock Policy", "Auto Boost Default"),
    "performance_state": ("Performance State",),
}
_COUNTERS = {
    "sw_power_cap_us": ("SW Power Capping", "SW Power Cap"),
    "sync_boost_us": ("Sync Boost",),
    "sw_thermal_slowdown_us": ("SW Thermal Slowdown",),
    "hw_thermal_slowdown_us": ("HW Thermal Slowdown",),
    "hw_power_brake_us": ("HW Power Braking", "HW Power Brake Slowdown"),
}
_LEGACY_SRAM = ("Register File", "L1 Cache", "L2 Cache", "Texture Memory", "Texture Shared", "CBU")


@record(frozen=False)
class _Node:
    """One line of the tree: its key, its value (None for a section) and deeper lines."""

    key: str
    value: str | None = None
    children: list[_Node] = field(default_factory=list)

    def find(self, *path: str) -> _Node | None:
        node: _Node | None = self
        for key in path:
            assert node is not None
            node = next((c for c in node.children if c.key == key), None)
            if node is None:
                return None
        return node

    def get(self, *path: str) -> str | None:
        node = self.find(*path)
        return None if node is None else node.value

    def walk(self) -> Iterator[_Node]:
        for child in self.children:
            yield child
            yield from child.walk()


def parse(text: str | bytes) -> SmiReport:
    """Parse what `nvidia-smi -q` printed. Raises ParseError on anything else."""
    return guarded(TOOL, text, _parse, prefix="")


def _parse(data: str) -> SmiReport:
    root, elided = _tree(data.lstrip("\ufeff"))
    sections = [(m.group("bus"), c) for c in root.children if (m := _GPU_HEADER.match(c.key))]
    for c in root.children:
        if c.key.startswith("GPU ") and c.value is None and not _GPU_HEADER.match(c.key):
            raise ParseError(TOOL, f"unrecognised GPU header {c.key!r}")
    driver = string(root.get("Driver Version"))
    if not sections and driver is None:
        raise ParseError(TOOL, "no 'GPU xxxx:xx:xx.x' section and no 'Driver Version' line")
    if sections and not elided and sections[0][1].find("Product Name") is not None:
        for bus, node in sections:
            if node.find("Processes") is None:
                raise ParseError(TOOL, f"output ends inside GPU {bus} (truncated?)")
    deprecations = "deprecated" in data  # only newer drivers print the sentence
    gpus = tuple(_gpu(i, bus, node, deprecations) for i, (bus, node) in enumerate(sections))
    attached = _int(root, "Attached GPUs")
    return SmiReport(
        timestamp=string(root.get("Timestamp")),
        driver_version=driver,
        cuda_version=string(root.get("CUDA Version")),
        attached_gpus=len(gpus) if attached is None else attached,
        gpus=gpus,
    )


def _tree(data: str) -> tuple[_Node, bool]:
    """Build the key tree from indentation; also say whether the text has elision marks."""
    root = _Node("")
    stack: list[tuple[int, _Node]] = [(-1, root)]
    elided = False
    for raw in data.expandtabs(4).splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("====="):
            continue
        if stripped in _ELISION:
            elided = True
            continue
        indent = len(line) - len(line.lstrip(" "))
        m = _KEY_VALUE.match(stripped)
        node = _Node(m.group("key"), (m.group("value") or "").strip()) if m else _Node(stripped)
        while stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root, elided


def _int(node: _Node | None, *path: str) -> int | None:
    return None if node is None else integer(unbracket(node.get(*path)))


def _num(node: _Node | None, *path: str) -> float | None:
    return None if node is None else quantity(unbracket(node.get(*path)))


def _str(node: _Node | None, *path: str) -> str | None:
    return None if node is None else string(node.get(*path))


def _flag(node: _Node | None, *path: str) -> bool | None:
    return None if node is None else flag(node.get(*path))


def _section(node: _Node, *names: str) -> _Node | None:
    """The first of several drifting section names that is present."""
    return next((s for n in names if (s := node.find(n)) is not None), None)


def _first_num(node: _Node | None, *keys: str) -> float | None:
    for key in keys:
        value = _num(node, key)
        if value is not None:
            return value
    return None


def _gpu(index: int, bus: str, g: _Node, deprecations: bool = True) -> Gpu:
    link = g.find("PCI", "GPU Link Info")
    temp = g.find("Temperature")
    power = _section(g, "GPU Power Readings", "Power Readings")
    policy = g.find("Clock Policy")
    retired = g.find("Retired Pages")
    return Gpu(
        index=index,
        pci_bus_id=bus_id(bus),
        product_name=_str(g, "Product Name"),
        uuid=_str(g, "GPU UUID"),
        serial=_str(g, "Serial Number"),
        vbios_version=_str(g, "VBIOS Version"),
        persistence_mode=_flag(g, "Persistence Mode"),
        mig_enabled=_flag(g, "MIG Mode", "Current"),
        pcie_gen_current=_int(link, "PCIe Generation", "Current"),
        pcie_gen_max=_int(link, "PCIe Generation", "Max"),
        pcie_width_current=_int(link, "Link Width", "Current"),
        pcie_width_max=_int(link, "Link Width", "Max"),
        pcie_replays=_int(g, "PCI", "Replays Since Reset"),
        graphics_mhz=_int(g, "Clocks", "Graphics"),
        sm_mhz=_int(g, "Clocks", "SM"),
        mem_mhz=_int(g, "Clocks", "Memory"),
        app_graphics_mhz=_int(g, "Applications Clocks", "Graphics"),
        app_mem_mhz=_int(g, "Applications Clocks", "Memory"),
        default_app_graphics_mhz=_int(g, "Default Applications Clocks", "Graphics"),
        default_app_mem_mhz=_int(g, "Default Applications Clocks", "Memory"),
        max_sm_mhz=_int(g, "Max Clocks", "SM"),
        max_mem_mhz=_int(g, "Max Clocks", "Memory"),
        reasons=_reasons(_section(g, "Clocks Event Reasons", "Clocks Throttle Reasons")),
        gpu_temp_c=_num(temp, "GPU Current Temp"),
        memory_temp_c=_num(temp, "Memory Current Temp"),
        memory_max_temp_c=_num(temp, "Memory Max Operating Temp"),
        slowdown_temp_c=_num(temp, "GPU Slowdown Temp"),
        shutdown_temp_c=_num(temp, "GPU Shutdown Temp"),
        tlimit_temp_c=_num(temp, "GPU T.Limit Temp"),
        tlimit_slowdown_c=_num(temp, "GPU Slowdown T.Limit Temp"),
        tlimit_shutdown_c=_num(temp, "GPU Shutdown T.Limit Temp"),
        power_draw_w=_first_num(power, "Power Draw", "Average Power Draw"),
        power_limit_w=_first_num(
            power, "Current Power Limit", "Enforced Power Limit", "Power Limit"
        ),
        ecc_enabled=_flag(g, "ECC Mode", "Current"),
        ecc_volatile=_ecc(g.find("ECC Errors", "Volatile")),
        ecc_aggregate=_ecc(g.find("ECC Errors", "Aggregate")),
        retired_single_bit=_int(retired, "Single Bit ECC"),
        retired_double_bit=_int(retired, "Double Bit ECC"),
        retired_pending=_retired_pending(retired),
        remapped_rows=_remapped(g.find("Remapped Rows")),
        fabric_state=_str(g, "Fabric", "State"),
        fabric_status=_str(g, "Fabric", "Status"),
        fabric_clique_id=_str(g, "Fabric", "CliqueId"),
        fabric_cluster_uuid=_str(g, "Fabric", "ClusterUUID"),
        reset_required=_flag(g, "GPU Reset Status", "Reset Required"),
        drain_and_reset_recommended=_flag(g, "GPU Reset Status", "Drain and Reset Recommended"),
        recovery_action=_str(g, "GPU Recovery Action"),
        compute_mode=_str(g, "Compute Mode"),
        ecc_pending=_flag(g, "ECC Mode", "Pending"),
        default_power_limit_w=_first_num(power, "Default Power Limit"),
        performance_state=_str(g, "Performance State"),
        max_graphics_mhz=_int(g, "Max Clocks", "Graphics"),
        max_customer_boost_graphics_mhz=_int(g, "Max Customer Boost Clocks", "Graphics"),
        deferred_mem_mhz=_int(g, "Deferred Clocks", "Memory"),
        auto_boost=on_off(None if policy is None else policy.get("Auto Boost")),
        auto_boost_default=on_off(None if policy is None else policy.get("Auto Boost Default")),
        clock_event_counters=_event_counters(g.find("Clocks Event Reasons Counters")),
        deprecated=deprecated_fields({f: g.get(*k) for f, k in _DEPRECATABLE.items()})
        if deprecations else frozenset(),
    )


def _event_counters(block: _Node | None) -> ClockEventCounters:
    """'Clocks Event Reasons Counters' (550+): 'SW Power Capping : 1202176 us', ..."""
    if block is None:
        return ClockEventCounters()
    found: dict[str, int | None] = {}
    for name, keys in _COUNTERS.items():
        found[name] = next((_int(block, k) for k in keys if block.find(k) is not None), None)
    return ClockEventCounters(**found)


def _reasons(block: _Node | None) -> ClockEventReasons:
    if block is None:
        return ClockEventReasons()
    # Sub-reasons sit one level deeper, under 'HW Slowdown'; look at every line of the block.
    values = {n.key: n.value for n in block.walk()}
    found: dict[str, bool | None] = {}
    for name, keys in _REASONS.items():
        found[name] = next((flag(values[k]) for k in keys if k in values), None)
    return ClockEventReasons(**found)


def _ecc(block: _Node | None) -> EccCounts:
    if block is None:
        return EccCounts()
    if block.find("Single Bit") is not None or block.find("Double Bit") is not None:
        # Pre-Ampere drivers: per-structure counts; device memory is the DRAM.
        return EccCounts(
            sram_correctable=total(*(_int(block, "Single Bit", s) for s in _LEGACY_SRAM)),
            sram_uncorrectable=total(*(_int(block, "Double Bit", s) for s in _LEGACY_SRAM)),
            dram_correctable=_int(block, "Single Bit", "Device Memory"),
            dram_uncorrectable=_int(block, "Double Bit", "Device Memory"),
        )
    return EccCounts(
        sram_correctable=_int(block, "SRAM Correctable"),
        sram_uncorrectable=total(
            _int(block, "SRAM Uncorrectable"),
            _int(block, "SRAM Uncorrectable Parity"),
            _int(block, "SRAM Uncorrectable SEC-DED"),
        ),
        dram_correctable=_int(block, "DRAM Correctable"),
        dram_uncorrectable=_int(block, "DRAM Uncorrectable"),
    )


def _retired_pending(block: _Node | None) -> bool | None:
    for key in ("Pending Page Retirement", "Pending Page Blacklist", "Pending"):
        value = _flag(block, key)
        if value is not None:
            return value
    return None


def _remapped(block: _Node | None) -> RemappedRows | None:
    """None where the section is missing or reads 'Remapped Rows : N/A'."""
    if block is None or not block.children:
        return None
    return RemappedRows(
        correctable=_int(block, "Correctable Error"),
        uncorrectable=_int(block, "Uncorrectable Error"),
        pending=_flag(block, "Pending"),
        failure=_flag(block, "Remapping Failure Occurred"),
    )
