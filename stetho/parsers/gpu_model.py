"""What nvidia-smi says about a node's GPUs, whichever format it said it in.

`nvidia-smi -q -x` (XML) and `nvidia-smi -q` (text) carry the same facts under different names
and across several driver generations. Both parsers return these frozen dataclasses, so a check
never cares which format a node produced, and the simulator can render one from the other. Every
field is None where the output says N/A, leaves it out, or was elided; a value the driver printed
as "Requested functionality has been deprecated" is None too, and its field is named in
`Gpu.deprecated`, so a check can tell "gone on this driver" from "unknown".

The small value helpers at the bottom are shared by both parsers; they raise ValueError, which
the parsers turn into `ParseError`.
"""

from __future__ import annotations

import re
from dataclasses import field, fields

from stetho.core.record import record
from stetho.parsers._text import is_deprecated, is_na


@record
class ClockEventReasons:
    """Why clocks are below maximum ('Clocks Event Reasons', formerly 'Clocks Throttle Reasons')."""

    idle: bool | None = None
    applications_clocks_setting: bool | None = None
    sw_power_cap: bool | None = None
    hw_slowdown: bool | None = None
    hw_thermal_slowdown: bool | None = None
    hw_power_brake_slowdown: bool | None = None
    sync_boost: bool | None = None
    sw_thermal_slowdown: bool | None = None
    display_clocks_setting: bool | None = None

    def active(self) -> tuple[str, ...]:
        """Names of the reasons reported Active, in nvidia-smi's order."""
        return tuple(f.name for f in fields(self) if getattr(self, f.name) is True)


@record
class ClockEventCounters:
    """Microseconds the clocks have spent held back by each reason since the driver loaded
    ('Clocks Event Reasons Counters', printed by 550+ drivers). Unlike the Active/Not Active
    reasons, which say what holds the clocks back at this instant, these accumulate: a growing
    HW slowdown count between two samples is throttling that happened while nobody looked."""

    sw_power_cap_us: int | None = None
    sync_boost_us: int | None = None
    sw_thermal_slowdown_us: int | None = None
    hw_thermal_slowdown_us: int | None = None
    hw_power_brake_us: int | None = None


@record
class RemappedRows:
    """Ampere+ HBM/GDDR row remapping. A pending remap needs a GPU reset to take effect."""

    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


@record
class EccCounts:
    """ECC error counts. SRAM uncorrectable is the sum of parity and SEC-DED where split."""

    sram_correctable: int | None = None
    sram_uncorrectable: int | None = None
    dram_correctable: int | None = None
    dram_uncorrectable: int | None = None


@record
class Gpu:
    """One GPU section. `index` is its position in the output (0-based), not the minor number."""

    index: int
    pci_bus_id: str
    product_name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    vbios_version: str | None = None
    persistence_mode: bool | None = None
    mig_enabled: bool | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    pcie_replays: int | None = None
    graphics_mhz: int | None = None
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    app_graphics_mhz: int | None = None
    app_mem_mhz: int | None = None
    default_app_graphics_mhz: int | None = None
    default_app_mem_mhz: int | None = None
    max_sm_mhz: int | None = None
    max_mem_mhz: int | None = None
    reasons: ClockEventReasons = field(default_factory=ClockEventReasons)
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None  # HBM/GDDR temperature, where the GPU reports it
    memory_max_temp_c: float | None = None  # 'Memory Max Operating Temp' (absolute form)
    slowdown_temp_c: float | None = None
    shutdown_temp_c: float | None = None
    tlimit_temp_c: float | None = None
    tlimit_slowdown_c: float | None = None
    tlimit_shutdown_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    ecc_enabled: bool | None = None
    ecc_volatile: EccCounts = field(default_factory=EccCounts)
    ecc_aggregate: EccCounts = field(default_factory=EccCounts)
    retired_single_bit: int | None = None
    retired_double_bit: int | None = None
    retired_pending: bool | None = None
    remapped_rows: RemappedRows | None = None
    fabric_state: str | None = None
    fabric_status: str | None = None
    fabric_clique_id: str | None = None  # NVLink clique (multi-node NVLink; 550+ drivers)
    fabric_cluster_uuid: str | None = None
    # The driver's own verdict on the GPU ('GPU Reset Status', 'GPU Recovery Action'):
    # believed as printed; None where N/A or absent (drivers before they existed).
    reset_required: bool | None = None
    drain_and_reset_recommended: bool | None = None
    recovery_action: str | None = None  # 'None', 'Reset', 'Reboot', 'Drain P2P', ...
    # Settings a profile may pin (test_gpu_settings).
    compute_mode: str | None = None  # 'Default', 'Exclusive_Process', 'Prohibited'
    ecc_pending: bool | None = None  # takes effect at the next reset
    default_power_limit_w: float | None = None
    # Reported by newer drivers; None where N/A, missing (older DTDs) or deprecated.
    performance_state: str | None = None  # "P0" (full speed) .. "P8"/"P12" (idle)
    max_graphics_mhz: int | None = None
    max_customer_boost_graphics_mhz: int | None = None
    deferred_mem_mhz: int | None = None
    auto_boost: bool | None = None  # clock_policy: On/Off; N/A on data-centre GPUs
    auto_boost_default: bool | None = None
    clock_event_counters: ClockEventCounters = field(default_factory=ClockEventCounters)
    deprecated: frozenset[str] = frozenset()  # Gpu field names printed as deprecated

    @property
    def app_clocks_deprecated(self) -> bool:
        """The driver no longer reports application clocks (NVML deprecated them in CUDA 13.0
        drivers; nvidia-smi prints 'Requested functionality has been deprecated')."""
        return {"app_graphics_mhz", "app_mem_mhz"} <= self.deprecated


@record
class UnreadableGpu:
    """A GPU section with a value the parser cannot read: left out of `SmiReport.gpus` so the
    other GPUs are still judged, and named here so this one is an error, never forgotten."""

    index: int
    pci_bus_id: str | None
    reason: str


@record
class SmiReport:
    """A whole `nvidia-smi -q` report. `attached_gpus` can exceed len(gpus) (`-i`, excerpts)."""

    timestamp: str | None
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int
    gpus: tuple[Gpu, ...]
    unreadable: tuple[UnreadableGpu, ...] = ()


# ---- value helpers shared by the two parsers -------------------------------------------------

_TRUE = {"enabled", "yes", "active"}
_FALSE = {"disabled", "no", "not active"}
_BUS_ID = re.compile(
    r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})\.([0-7])$"
)


def unbracket(text: str | None) -> str | None:
    """Strip and drop the brackets of old spellings like '[Not Supported]'; None stays None."""
    if text is None:
        return None
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        t = t[1:-1].strip()
    return t


def string(text: str | None) -> str | None:
    """A free-text value, or None for the N/A family."""
    t = unbracket(text)
    return None if is_na(t) else t


def flag(text: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, Active/Not Active -> bool; N/A -> None; else ValueError."""
    t = unbracket(text)
    if is_na(t):
        return None
    assert t is not None
    word = " ".join(t.lower().split())
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"not a yes/no value: {text!r}")


def bus_id(text: str) -> str:
    """'0000:19:00.0' or '00000000:19:00.0' -> '00000000:19:00.0' (upper-case hex)."""
    m = _BUS_ID.match(text.strip())
    if not m:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain, bus, dev, fn = m.groups()
    return f"{int(domain or '0', 16):08X}:{int(bus, 16):02X}:{int(dev, 16):02X}.{fn}"


def on_off(text: str | None) -> bool | None:
    """clock_policy's 'On'/'Off' -> bool; N/A (and deprecated) -> None; else ValueError."""
    t = unbracket(text)
    if is_na(t):
        return None
    assert t is not None
    word = t.lower()
    if word in ("on", "enabled"):
        return True
    if word in ("off", "disabled"):
        return False
    raise ValueError(f"not an On/Off value: {text!r}")


def deprecated_fields(values: dict[str, str | None]) -> frozenset[str]:
    """The names among {field: raw text} whose text is nvidia-smi's deprecation sentence."""
    return frozenset(name for name, text in values.items() if is_deprecated(text))


def total(*parts: int | None) -> int | None:
    """Sum of the parts that are known; None when none is."""
    known = [p for p in parts if p is not None]
    return sum(known) if known else None
