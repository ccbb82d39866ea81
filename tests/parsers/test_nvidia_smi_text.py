"""nvidia-smi -q (text): every real file, the excerpt with elisions, old names, and garbage."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.gpu_model import ClockEventReasons, EccCounts, RemappedRows, SmiReport
from stetho.parsers.nvidia_smi_text import parse
from tests.conftest import REAL, real_files, real_ids

FULL_FILES = real_files("02-nvidia-smi-q", "*.txt")
EXCERPT = REAL / "06-nvlink-rowremap" / "nvidia-smi-q-a100-row-remap-pending-EXCERPT-elided.txt"
TEXT_FILES = [*FULL_FILES, *real_files("06-nvlink-rowremap", "nvidia-smi-q-*.txt")]
H100 = REAL / "02-nvidia-smi-q" / "h100x8-drv535-hw-power-brake-slowdown.txt"
A10 = REAL / "02-nvidia-smi-q" / "a10-drv535-remapped-rows-pending.txt"
BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_real_files_are_found() -> None:
    assert [p.name for p in TEXT_FILES] == [A10.name, H100.name, EXCERPT.name]


@pytest.mark.parametrize("path", TEXT_FILES, ids=real_ids(TEXT_FILES))
def test_every_real_file_parses(path: Path) -> None:
    report = parse(_read(path))
    assert isinstance(report, SmiReport)
    assert report.driver_version is not None and report.driver_version.startswith("5")
    assert report.cuda_version is not None
    assert 1 <= len(report.gpus) <= report.attached_gpus
    assert [g.index for g in report.gpus] == list(range(len(report.gpus)))
    for gpu in report.gpus:
        assert BUS_ID.match(gpu.pci_bus_id)
        assert gpu.product_name is not None and gpu.product_name.startswith("NVIDIA ")
        assert gpu.remapped_rows is not None
        assert gpu.ecc_aggregate.dram_uncorrectable == 0
    assert parse(path.read_bytes()) == report
    assert parse("\ufeff" + _read(path).replace("\n", "\r\n")) == report


def test_h100_eight_gpus_with_hw_slowdown_and_power_brake() -> None:
    report = parse(_read(H100))
    assert report.timestamp == "Wed Jul 31 11:22:39 2024"
    assert (report.driver_version, report.cuda_version) == ("535.161.08", "12.2")
    assert report.attached_gpus == 8 and len(report.gpus) == 8
    assert [g.pci_bus_id for g in report.gpus] == [
        "00000000:19:00.0", "00000000:3B:00.0", "00000000:4C:00.0", "00000000:5D:00.0",
        "00000000:9B:00.0", "00000000:BB:00.0", "00000000:CB:00.0", "00000000:DB:00.0"]
    assert [g.serial for g in report.gpus] == [f"REDACTED-SN0{i}" for i in range(1, 9)]
    assert [g.pcie_replays for g in report.gpus] == [67, 63, 52, 43, 49, 53, 82, 67]
    assert [g.power_draw_w for g in report.gpus] == [
        67.74, 69.52, 70.55, 71.37, 70.33, 70.21, 71.05, 72.27]
    assert [g.tlimit_temp_c for g in report.gpus] == [56, 57, 56, 57, 55, 55, 55, 55]
    for gpu in report.gpus:
        assert gpu.product_name == "NVIDIA H100 80GB HBM3"
        assert gpu.vbios_version == "96.00.74.00.0D"
        assert gpu.persistence_mode is True and gpu.mig_enabled is False
        assert (gpu.app_graphics_mhz, gpu.app_mem_mhz) == (1980, 2619)
        assert (gpu.default_app_graphics_mhz, gpu.default_app_mem_mhz) == (1980, 2619)
        assert (gpu.max_sm_mhz, gpu.max_mem_mhz) == (1980, 2619)
        assert (gpu.graphics_mhz, gpu.sm_mhz, gpu.mem_mhz) == (86, 86, 2619)
        assert gpu.reasons.active() == ("hw_slowdown", "hw_power_brake_slowdown")
        assert gpu.reasons.hw_thermal_slowdown is False and gpu.reasons.idle is False
        assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (5, 5)
        assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
        assert gpu.remapped_rows == RemappedRows(0, 0, False, False)
        # T.Limit margins, not absolute temperatures; the thresholds are negative.
        assert (gpu.tlimit_shutdown_c, gpu.tlimit_slowdown_c) == (-8.0, -2.0)
        assert (gpu.shutdown_temp_c, gpu.slowdown_temp_c) == (None, None)
        assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
        assert gpu.power_limit_w == 700.0
        assert gpu.ecc_enabled is True
        # 'SRAM Uncorrectable Parity' + 'SRAM Uncorrectable SEC-DED' summed.
        assert gpu.ecc_volatile == gpu.ecc_aggregate == EccCounts(0, 0, 0, 0)
        assert gpu.retired_single_bit is None and gpu.retired_pending is None
    first = report.gpus[0]
    assert first.uuid == "GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"
    assert (first.gpu_temp_c, first.memory_temp_c) == (29.0, 39.0)


def test_a10_remapped_rows_pending_with_clean_ecc() -> None:
    report = parse(_read(A10))
    assert (report.driver_version, report.attached_gpus, len(report.gpus)) == ("535.129.03", 1, 1)
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000000:07:00.0"
    assert gpu.product_name == "NVIDIA A10"
    assert gpu.vbios_version == "94.02.5C.00.04"
    assert gpu.remapped_rows == RemappedRows(correctable=0, uncorrectable=4, pending=True,
                                             failure=False)
    assert gpu.ecc_volatile == gpu.ecc_aggregate == EccCounts(0, 0, 0, 0)
    assert gpu.reasons.active() == ("idle",)
    assert (gpu.gpu_temp_c, gpu.shutdown_temp_c, gpu.slowdown_temp_c) == (33.0, 101.0, 98.0)
    assert (gpu.tlimit_temp_c, gpu.memory_temp_c) == (None, None)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (43.89, 150.0)
    assert (gpu.graphics_mhz, gpu.sm_mhz, gpu.mem_mhz) == (225, 225, 405)
    assert (gpu.app_graphics_mhz, gpu.app_mem_mhz, gpu.max_sm_mhz) == (1695, 6251, 1695)
    assert (gpu.pcie_gen_current, gpu.pcie_width_current, gpu.pcie_replays) == (4, 16, 0)
    assert gpu.mig_enabled is None and gpu.persistence_mode is True
    assert (gpu.fabric_state, gpu.fabric_status) == (None, None)


def test_excerpt_with_elisions_gives_none_for_missing_sections() -> None:
    report = parse(_read(EXCERPT))
    assert (report.driver_version, report.cuda_version) == ("510.73.08", "11.6")
    assert report.attached_gpus == 8 and len(report.gpus) == 1
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000000:10:1C.0"
    assert gpu.product_name == "NVIDIA A100-SXM4-80GB"
    assert gpu.ecc_volatile == EccCounts(sram_correctable=0, sram_uncorrectable=0,
                                         dram_correctable=177, dram_uncorrectable=0)
    assert gpu.ecc_aggregate.dram_correctable == 177
    assert gpu.remapped_rows == RemappedRows(correctable=1, uncorrectable=0, pending=True,
                                             failure=False)
    assert gpu.retired_single_bit is None
    assert gpu.reasons == ClockEventReasons()
    assert (gpu.uuid, gpu.pcie_gen_current, gpu.power_draw_w, gpu.gpu_temp_c) == (
        None, None, None, None)


# ---- older and newer names -------------------------------------------------------------------

OLD_STYLE = """
==============NVSMI LOG==============

Timestamp                                 : Mon Jan  4 10:00:00 2021
Driver Version                            : 450.80.02
CUDA Version                              : 11.0

Attached GPUs                             : 2
GPU 0000:3b:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    Persistence Mode                      : Disabled
    Clocks Throttle Reasons
        Idle                              : Not Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Active
            HW Power Brake Slowdown       : Not Active
        SW Thermal Slowdown               : [Not Supported]
    ECC Errors
        Volatile
            Single Bit
                Device Memory             : 12
                Register File             : 1
                L1 Cache                  : N/A
                L2 Cache                  : 0
                Total                     : 13
            Double Bit
                Device Memory             : 1
                Register File             : 0
                Total                     : 1
    Retired Pages
        Single Bit ECC                    : 3
        Double Bit ECC                    : 1
        Pending Page Blacklist            : Yes
    Remapped Rows                         : N/A
    Power Readings
        Power Draw                        : 250.12 W
        Power Limit                       : 300.00 W
        Enforced Power Limit              : 290.00 W
    Processes                             : None
"""


def test_old_names_throttle_reasons_legacy_ecc_and_power_readings() -> None:
    report = parse(OLD_STYLE)
    assert report.attached_gpus == 2 and len(report.gpus) == 1  # as with `-i 0`
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000000:3B:00.0"
    assert gpu.reasons.active() == ("hw_slowdown", "hw_thermal_slowdown")
    assert gpu.reasons.sw_thermal_slowdown is None
    assert gpu.ecc_volatile == EccCounts(sram_correctable=1, sram_uncorrectable=0,
                                         dram_correctable=12, dram_uncorrectable=1)
    assert (gpu.retired_single_bit, gpu.retired_double_bit, gpu.retired_pending) == (3, 1, True)
    assert gpu.remapped_rows is None
    assert (gpu.power_draw_w, gpu.power_limit_w) == (250.12, 290.0)


def test_average_power_draw_and_display_filtered_output() -> None:
    text = (
        "Driver Version : 595.84\nAttached GPUs : 1\nGPU 00000000:06:00.0\n"
        "    GPU Power Readings\n        Average Power Draw : 8.81 W\n"
        "        Instant Power Draw : 8.44 W\n        Current Power Limit : 70.00 W\n"
    )
    gpu = parse(text).gpus[0]
    assert (gpu.power_draw_w, gpu.power_limit_w) == (8.81, 70.0)
    assert gpu.product_name is None  # `-q -d POWER` prints no Product Name


def test_driver_header_without_gpus_is_a_report() -> None:
    report = parse("Driver Version : 535.54.03\nCUDA Version : 12.2\nAttached GPUs : 0\n")
    assert (report.driver_version, report.attached_gpus, report.gpus) == ("535.54.03", 0, ())


# ---- garbage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "  \n\n\t", b"", b"\xff\xfe\x00garbage"])
def test_empty_and_binary_input(text: str | bytes) -> None:
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.tool == "nvidia-smi -q"


@pytest.mark.parametrize("path", FULL_FILES, ids=real_ids(FULL_FILES))
def test_truncated_real_file(path: Path) -> None:
    text = _read(path)
    with pytest.raises(ParseError, match="truncated"):
        parse(text[: len(text) // 2])


def test_cut_inside_the_first_gpu() -> None:
    text = _read(H100)
    with pytest.raises(ParseError, match="00000000:19:00.0"):
        parse(text[: text.index("    Temperature")])


def test_random_bytes() -> None:
    rng = random.Random(0)
    for _ in range(20):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        with pytest.raises(ParseError):
            parse(blob)


def test_random_printable_text() -> None:
    rng = random.Random(0)
    alphabet = "abcdefghij KLMNOP:.-0123456789\n    "
    for _ in range(20):
        with pytest.raises(ParseError):
            parse("".join(rng.choice(alphabet) for _ in range(300)))


@pytest.mark.parametrize("path", [
    REAL / "09-lspci" / "lspci-vvv-h100-gpu-gen5x16-ok.txt",
    REAL / "01-nvidia-smi-xml" / "a100-sxm4-80gb-drv535-mig.xml",
    REAL / "04-infiniband" / "ibstat-h100-node-some-ports-down.txt",
    REAL / "06-nvlink-rowremap" / "nvidia-smi-nvlink-s-8xA100-80GB.txt",
], ids=lambda p: p.name)
def test_another_tools_output(path: Path) -> None:
    with pytest.raises(ParseError):
        parse(_read(path))


@pytest.mark.parametrize("old, new", [
    ("GPU Current Temp                  : 33 C", "GPU Current Temp                  : warm"),
    ("Pending                           : Yes", "Pending                           : Perhaps"),
    ("Max                       : 16x", "Max                       : sixteen"),
])
def test_bad_values(old: str, new: str) -> None:
    text = _read(A10)
    assert old in text
    with pytest.raises(ParseError) as err:
        parse(text.replace(old, new))
    assert type(err.value) is ParseError


def test_garbled_gpu_header() -> None:
    text = _read(A10).replace("GPU 00000000:07:00.0\n", "GPU 00000000:07:00\n")
    with pytest.raises(ParseError, match="GPU header"):
        parse(text)


def test_newer_driver_text_deprecated_clocks_and_event_counters() -> None:
    """The real H100 text edited the way 580+ drivers print it: application clocks deprecated,
    and the 'Clocks Event Reasons Counters' section (names as printed by driver 580.105.06)."""
    text = _read(H100)
    first = text.index("\n    Applications Clocks\n") + 1
    block = text[first:text.index("    Default Applications Clocks", first)]
    deprecated = ("    Applications Clocks\n"
                  "        Graphics                          : Requested functionality has been "
                  "deprecated\n"
                  "        Memory                            : Requested functionality has been "
                  "deprecated\n")
    counters = ("    Clocks Event Reasons Counters\n"
                "        SW Power Capping                  : 1202176 us\n"
                "        Sync Boost                        : 0 us\n"
                "        SW Thermal Slowdown               : 0 us\n"
                "        HW Thermal Slowdown               : 0 us\n"
                "        HW Power Braking                  : 5 us\n")
    edited = text.replace(block, deprecated, 1).replace(
        "    Sparse Operation Mode", counters + "    Sparse Operation Mode", 1)
    gpu0, gpu1 = parse(edited).gpus[:2]
    assert gpu0.deprecated == {"app_graphics_mhz", "app_mem_mhz"} and gpu0.app_clocks_deprecated
    assert (gpu0.app_graphics_mhz, gpu0.app_mem_mhz) == (None, None)
    assert (gpu0.default_app_graphics_mhz, gpu0.max_sm_mhz) == (1980, 1980)
    assert gpu0.clock_event_counters.sw_power_cap_us == 1202176
    assert gpu0.clock_event_counters.hw_power_brake_us == 5
    assert gpu1.deprecated == frozenset() and gpu1.app_graphics_mhz == 1980


def test_clock_fields_of_a_535_driver() -> None:
    gpu = parse(_read(H100)).gpus[0]
    assert (gpu.performance_state, gpu.max_graphics_mhz) == ("P0", 1980)
    assert gpu.max_customer_boost_graphics_mhz == 1980 and gpu.deferred_mem_mhz is None
    assert (gpu.auto_boost, gpu.auto_boost_default) == (None, None)
    assert gpu.deprecated == frozenset() and not gpu.app_clocks_deprecated


def test_h100_fabric_reset_status_and_settings() -> None:
    """The recorded HGX H100: every GPU joined the NVSwitch fabric, the driver asks for no
    reset, and the settings the h100-sxm-8gpu profile pins read as it pins them."""
    gpus = parse(H100.read_text()).gpus
    assert len(gpus) == 8
    for gpu in gpus:
        assert (gpu.fabric_state, gpu.fabric_status) == ("Completed", "Success")
        assert gpu.reset_required is False and gpu.drain_and_reset_recommended is False
        assert gpu.recovery_action is None  # a 535 driver has no 'GPU Recovery Action'
        assert gpu.compute_mode == "Default" and gpu.persistence_mode is True
        assert gpu.ecc_enabled is True and gpu.ecc_pending is True
        assert gpu.power_limit_w == gpu.default_power_limit_w == 700.0
