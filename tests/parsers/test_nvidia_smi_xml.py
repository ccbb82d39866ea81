"""nvidia-smi -q -x: every real XML file, the DTD drift between them, and garbage."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.gpu_model import (
    ClockEventCounters,
    ClockEventReasons,
    EccCounts,
    RemappedRows,
    SmiReport,
)
from stetho.parsers.nvidia_smi_xml import parse
from tests.conftest import REAL, real_files, real_ids

XML_FILES = real_files("01-nvidia-smi-xml", "*.xml")
A100 = REAL / "01-nvidia-smi-xml" / "a100-sxm4-80gb-drv535-mig.xml"
A10G = REAL / "01-nvidia-smi-xml" / "a10g-drv515-throttle-reasons.xml"
T4 = REAL / "01-nvidia-smi-xml" / "tesla-t4-drv515.xml"
ADA = REAL / "01-nvidia-smi-xml" / "rtx4000-sff-ada-drv595-v13-appclocks-deprecated.xml"
A5000 = REAL / "01-nvidia-smi-xml" / "dual-rtx-a5000-drv590-v13-appclocks-deprecated-2gpus.xml"
NEWER = (ADA, A5000)  # drivers where application clocks are deprecated
BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
APP_CLOCKS = {"app_graphics_mhz", "app_mem_mhz", "default_app_graphics_mhz",
              "default_app_mem_mhz"}


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_all_real_files_are_found() -> None:
    assert set(XML_FILES) == {A100, A10G, T4, ADA, A5000}


@pytest.mark.parametrize("path", XML_FILES, ids=real_ids(XML_FILES))
def test_every_real_file_parses(path: Path) -> None:
    report = parse(_read(path))
    assert isinstance(report, SmiReport)
    assert report.driver_version is not None and re.match(r"^\d+\.\d+", report.driver_version)
    assert len(report.gpus) == (2 if path == A5000 else 1)
    for index, gpu in enumerate(report.gpus):
        assert gpu.index == index
        assert BUS_ID.match(gpu.pci_bus_id)
        assert gpu.uuid is not None and gpu.uuid.startswith("GPU-")
        assert gpu.reasons.hw_slowdown is False
        assert gpu.power_draw_w is not None and 0 < gpu.power_draw_w < (gpu.power_limit_w or 0)
        assert gpu.performance_state in ("P0", "P8")
        assert gpu.max_graphics_mhz is not None and gpu.max_sm_mhz is not None
        if path in NEWER:
            # ECC is off on these workstation cards: every counter unknown, none 0.
            assert gpu.ecc_enabled is False and gpu.ecc_volatile == EccCounts()
            assert gpu.deprecated == APP_CLOCKS and gpu.app_clocks_deprecated
            assert (gpu.app_graphics_mhz, gpu.app_mem_mhz) == (None, None)
        else:
            assert gpu.ecc_enabled is True and gpu.ecc_volatile == EccCounts(0, 0, 0, 0)
            assert gpu.deprecated == frozenset() and not gpu.app_clocks_deprecated
            assert gpu.app_graphics_mhz is not None
            assert gpu.clock_event_counters == ClockEventCounters()  # not printed before 550
    # Bytes in, same facts out; a UTF-8 byte-order mark changes nothing.
    assert parse(path.read_bytes()) == report
    assert parse(b"\xef\xbb\xbf" + path.read_bytes()) == report


def test_ada_driver_595_reports_instead_of_application_clocks() -> None:
    report = parse(_read(ADA))
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == (
        "595.84", "13.2", 1)
    gpu = report.gpus[0]
    assert gpu.product_name == "NVIDIA RTX 4000 SFF Ada Generation"
    # What is left to judge clocks by: current, max, P-state, reasons and their counters.
    assert (gpu.graphics_mhz, gpu.sm_mhz, gpu.mem_mhz) == (210, 210, 405)
    assert (gpu.max_graphics_mhz, gpu.max_sm_mhz, gpu.max_mem_mhz) == (3105, 3105, 7001)
    assert gpu.performance_state == "P8" and gpu.reasons.active() == ("idle",)
    assert gpu.clock_event_counters == ClockEventCounters(
        sw_power_cap_us=4251825415, sync_boost_us=0, sw_thermal_slowdown_us=0,
        hw_thermal_slowdown_us=0, hw_power_brake_us=0)
    # N/A on this card, not deprecated: unknown, and not reported as gone.
    assert (gpu.max_customer_boost_graphics_mhz, gpu.deferred_mem_mhz) == (None, None)
    assert (gpu.auto_boost, gpu.auto_boost_default) == (None, None)
    assert not {"auto_boost", "deferred_mem_mhz"} & gpu.deprecated
    assert (gpu.tlimit_temp_c, gpu.tlimit_shutdown_c, gpu.tlimit_slowdown_c) == (49.0, -7.0, -2.0)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (8.81, 70.0)
    assert gpu.remapped_rows == RemappedRows(0, 0, False, False)


def test_two_a5000_on_driver_590() -> None:
    report = parse(_read(A5000))
    assert (report.driver_version, report.attached_gpus) == ("590.44.01", 2)
    a, b = report.gpus
    assert (a.pci_bus_id, b.pci_bus_id) == ("00000000:81:00.0", "00000000:C1:00.0")
    assert (a.gpu_temp_c, b.gpu_temp_c) == (13.0, 15.0)
    assert (a.slowdown_temp_c, a.shutdown_temp_c, a.tlimit_temp_c) == (95.0, 98.0, None)
    assert (a.power_draw_w, b.power_draw_w) == (6.41, 13.6)
    assert (a.clock_event_counters.sw_power_cap_us,
            b.clock_event_counters.sw_power_cap_us) == (31637354094, 31195898111)
    assert a.deprecated == b.deprecated == APP_CLOCKS
    assert (a.max_sm_mhz, a.max_mem_mhz, a.performance_state) == (2100, 8001, "P8")


def test_deprecated_is_not_na() -> None:
    """'deprecated on this driver' and 'N/A' both give None, only one is named as deprecated."""
    xml = _read(A100).replace(
        "<auto_boost>N/A</auto_boost>",
        "<auto_boost>Requested functionality has been deprecated</auto_boost>")
    xml = xml.replace("<performance_state>P0</performance_state>",
                      "<performance_state>Requested functionality has been deprecated"
                      "</performance_state>")
    gpu = parse(xml).gpus[0]
    assert gpu.deprecated == {"auto_boost", "performance_state"}
    assert (gpu.auto_boost, gpu.performance_state) == (None, None)
    on = parse(_read(A100).replace("<auto_boost>N/A</auto_boost>", "<auto_boost>On</auto_boost>"))
    assert on.gpus[0].auto_boost is True
    with pytest.raises(ParseError, match="On/Off"):
        parse(_read(A100).replace("<auto_boost>N/A</auto_boost>", "<auto_boost>Maybe</auto_boost>"))


def test_memory_max_operating_temperature() -> None:
    """The A100's HBM2e reports its own limit (gpu_temp_max_mem_threshold); others N/A."""
    a100 = parse(_read(A100)).gpus[0]
    assert (a100.memory_temp_c, a100.memory_max_temp_c) == (44.0, 95.0)
    t4 = parse(_read(REAL / "01-nvidia-smi-xml" / "tesla-t4-drv515.xml")).gpus[0]
    assert t4.memory_max_temp_c is None


def test_a100_mig_file() -> None:
    report = parse(_read(A100))
    assert report.timestamp == "Fri Aug  4 11:44:30 2023"
    assert (report.driver_version, report.cuda_version) == ("535.54.03", "12.2")
    # The file says 4 attached GPUs but holds one <gpu> (a trimmed test fixture).
    assert report.attached_gpus == 4 and len(report.gpus) == 1
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.product_name == "NVIDIA A100-SXM4-80GB"
    assert gpu.serial == "REDACTED"
    assert gpu.vbios_version == "92.00.36.00.02"
    assert gpu.mig_enabled is True
    assert gpu.persistence_mode is False
    assert gpu.remapped_rows is None  # literal N/A with MIG on
    assert (gpu.retired_single_bit, gpu.retired_double_bit, gpu.retired_pending) == (
        None, None, None)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (4, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
    assert gpu.pcie_replays == 0
    assert (gpu.graphics_mhz, gpu.sm_mhz, gpu.mem_mhz) == (1275, 1275, 1593)
    assert (gpu.app_graphics_mhz, gpu.app_mem_mhz) == (1275, 1593)
    assert (gpu.max_sm_mhz, gpu.max_mem_mhz) == (1410, 1593)
    assert gpu.reasons.active() == ()
    assert (gpu.gpu_temp_c, gpu.memory_temp_c) == (27.0, 44.0)
    assert (gpu.slowdown_temp_c, gpu.shutdown_temp_c) == (89.0, 92.0)
    assert gpu.tlimit_temp_c is None
    assert (gpu.power_draw_w, gpu.power_limit_w) == (67.03, 500.0)
    assert (gpu.fabric_state, gpu.fabric_status) == (None, None)


def test_a10g_old_throttle_reason_names() -> None:
    report = parse(_read(A10G))
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == (
        "515.105.01", "11.7", 1)
    gpu = report.gpus[0]
    assert gpu.product_name == "NVIDIA A10G"
    assert gpu.pci_bus_id == "00000000:00:1E.0"
    assert gpu.vbios_version == "94.02.75.00.01"
    assert gpu.reasons == ClockEventReasons(
        idle=True, applications_clocks_setting=False, sw_power_cap=False, hw_slowdown=False,
        hw_thermal_slowdown=False, hw_power_brake_slowdown=False, sync_boost=False,
        sw_thermal_slowdown=False, display_clocks_setting=False)
    assert gpu.reasons.active() == ("idle",)
    # Idle downshift: gen1 x8 now, gen4 x16 possible.
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (1, 4)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert gpu.remapped_rows == RemappedRows(correctable=0, uncorrectable=0, pending=False,
                                             failure=False)
    assert gpu.mig_enabled is None
    assert (gpu.app_graphics_mhz, gpu.app_mem_mhz) == (1710, 6251)
    assert (gpu.graphics_mhz, gpu.mem_mhz) == (210, 405)
    assert (gpu.gpu_temp_c, gpu.memory_temp_c) == (17.0, None)
    assert (gpu.slowdown_temp_c, gpu.shutdown_temp_c) == (95.0, 98.0)
    # v11 `power_readings` with power_limit/enforced_power_limit.
    assert (gpu.power_draw_w, gpu.power_limit_w) == (25.58, 300.0)


def test_t4_turing() -> None:
    gpu = parse(_read(T4)).gpus[0]
    assert gpu.product_name == "Tesla T4"
    assert gpu.remapped_rows is None
    # Counts 0 with a whitespace-only page list.
    assert (gpu.retired_single_bit, gpu.retired_double_bit, gpu.retired_pending) == (0, 0, False)
    assert (gpu.pcie_gen_current, gpu.pcie_gen_max) == (3, 3)
    assert (gpu.pcie_width_current, gpu.pcie_width_max) == (8, 16)
    assert (gpu.power_draw_w, gpu.power_limit_w) == (26.78, 70.0)
    assert (gpu.sm_mhz, gpu.mem_mhz, gpu.app_mem_mhz, gpu.max_sm_mhz) == (585, 5000, 5001, 1590)
    assert (gpu.gpu_temp_c, gpu.slowdown_temp_c, gpu.shutdown_temp_c) == (40.0, 93.0, 96.0)
    assert gpu.reasons.active() == ()


# ---- DTD drift, built from the real A100 file ------------------------------------------------


def _v13_like() -> str:
    """The real A100 file edited the way driver 595 (DTD v13) prints an Ada/Hopper GPU."""
    xml = _read(A100)
    xml = xml.replace("<power_draw>67.03 W</power_draw>",
                      "<average_power_draw>71.25 W</average_power_draw>"
                      "<instant_power_draw>70.10 W</instant_power_draw>", 1)
    xml = xml.replace("<gpu_temp_tlimit>N/A</gpu_temp_tlimit>",
                      "<gpu_temp_tlimit>49 C</gpu_temp_tlimit>")
    xml = xml.replace("<gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>",
                      "<gpu_temp_max_tlimit_threshold>-7 C</gpu_temp_max_tlimit_threshold>")
    xml = xml.replace("<gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>",
                      "<gpu_temp_slow_tlimit_threshold>-2 C</gpu_temp_slow_tlimit_threshold>")
    xml = xml.replace(
        "<sram_uncorrectable>0</sram_uncorrectable>\n                <dram_correctable>",
        "<sram_uncorrectable_parity>2</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>3</sram_uncorrectable_secded><dram_correctable>", 1)
    xml = xml.replace(
        "<applications_clocks>\n            <graphics_clock>1275 MHz</graphics_clock>",
        "<applications_clocks>\n            <graphics_clock>Requested functionality has been"
        " deprecated</graphics_clock>")
    xml = xml.replace("clocks_event_reason_hw_slowdown>Not Active",
                      "clocks_event_reason_hw_slowdown>Active")
    return xml.replace('<gpu id="00000000:01:00.0">', '<gpu id="0000:01:00.0">')


def test_v13_average_power_negative_tlimit_split_sram_and_sentences() -> None:
    gpu = parse(_v13_like()).gpus[0]
    assert gpu.power_draw_w == 71.25
    assert (gpu.tlimit_temp_c, gpu.tlimit_shutdown_c, gpu.tlimit_slowdown_c) == (49.0, -7.0, -2.0)
    assert (gpu.shutdown_temp_c, gpu.slowdown_temp_c) == (None, None)
    assert gpu.ecc_volatile.sram_uncorrectable == 5
    assert gpu.ecc_aggregate.sram_uncorrectable == 0
    assert (gpu.app_graphics_mhz, gpu.app_mem_mhz) == (None, 1593)
    assert gpu.reasons.active() == ("hw_slowdown",)
    assert gpu.pci_bus_id == "00000000:01:00.0"


def test_v10_legacy_ecc_layout() -> None:
    legacy = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>418.56</driver_version><attached_gpus>1</attached_gpus>
<gpu id="00000000:3b:00.0"><ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>
<ecc_errors><volatile>
<single_bit><device_memory>7</device_memory><register_file>1</register_file>
<l1_cache>N/A</l1_cache><l2_cache>2</l2_cache><total>10</total></single_bit>
<double_bit><device_memory>0</device_memory><register_file>0</register_file>
<total>0</total></double_bit></volatile></ecc_errors>
<retired_pages><pending_retirement>Yes</pending_retirement></retired_pages>
<power_readings><power_draw>[Not Supported]</power_draw></power_readings>
</gpu></nvidia_smi_log>"""
    gpu = parse(legacy).gpus[0]
    assert gpu.pci_bus_id == "00000000:3B:00.0"
    assert gpu.ecc_volatile == EccCounts(sram_correctable=3, sram_uncorrectable=0,
                                         dram_correctable=7, dram_uncorrectable=0)
    assert gpu.ecc_aggregate == EccCounts()
    assert gpu.retired_pending is True
    assert gpu.power_draw_w is None
    assert gpu.remapped_rows is None


def test_pci_bus_id_element_when_id_attribute_missing() -> None:
    xml = "<nvidia_smi_log><gpu><pci><pci_bus_id>0000:9b:00.0</pci_bus_id></pci></gpu>" \
          "</nvidia_smi_log>"
    report = parse(xml)
    assert report.gpus[0].pci_bus_id == "00000000:9B:00.0"
    assert report.attached_gpus == 1 and report.driver_version is None


# ---- garbage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\t\n", b"", b"\x00\x01\x02"])
def test_empty_and_binary_input(text: str | bytes) -> None:
    with pytest.raises(ParseError) as err:
        parse(text)
    assert err.value.tool == "nvidia-smi -q -x"


@pytest.mark.parametrize("path", XML_FILES, ids=real_ids(XML_FILES))
def test_truncated_real_file(path: Path) -> None:
    text = _read(path)
    with pytest.raises(ParseError, match="XML"):
        parse(text[: len(text) // 2])


def test_random_bytes() -> None:
    rng = random.Random(0)
    for _ in range(20):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        with pytest.raises(ParseError):
            parse(blob)


@pytest.mark.parametrize("path", [
    REAL / "09-lspci" / "lspci-vvv-h100-gpu-gen5x16-ok.txt",
    REAL / "02-nvidia-smi-q" / "h100x8-drv535-hw-power-brake-slowdown.txt",
    REAL / "07-mlxlink-ethtool" / "mlxlink-json-400g-osfp-dr4-mft4.34.1.json",
], ids=lambda p: p.name)
def test_another_tools_output(path: Path) -> None:
    with pytest.raises(ParseError):
        parse(_read(path))


@pytest.mark.parametrize("xml, reason", [
    ("<?xml version='1.0'?><html><body/></html>", "nvidia_smi_log"),
    ("<nvidia_smi_log></nvidia_smi_log>", "no driver_version"),
    ("<nvidia_smi_log><gpu><product_name>X</product_name></gpu></nvidia_smi_log>", "no id"),
    ('<nvidia_smi_log><gpu id="bogus"/></nvidia_smi_log>', "bus id"),
])
def test_wrong_shapes(xml: str, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        parse(xml)


@pytest.mark.parametrize("old, new", [
    ("<gpu_temp>27 C</gpu_temp>", "<gpu_temp>hot</gpu_temp>"),
    ("<persistence_mode>Disabled</persistence_mode>", "<persistence_mode>Maybe</persistence_mode>"),
    ("<attached_gpus>4</attached_gpus>", "<attached_gpus>four</attached_gpus>"),
])
def test_bad_values_raise_parse_error_not_value_error(old: str, new: str) -> None:
    text = _read(A100)
    assert old in text
    with pytest.raises(ParseError) as err:
        parse(text.replace(old, new))
    assert type(err.value) is ParseError


@pytest.mark.parametrize("path", XML_FILES, ids=real_ids(XML_FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    from tests.conftest import mutation_outcomes

    assert mutation_outcomes(parse, _read(path), "nvidia-smi -q -x", rounds=60) == {
        "parsed", "error"}


def test_one_unreadable_gpu_section_leaves_the_others() -> None:
    """Per-device isolation (issue 11): a bad value in one <gpu> section makes that GPU
    unreadable, named with its reason; the other GPUs still parse."""
    path = REAL / "01-nvidia-smi-xml" / "dual-rtx-a5000-drv590-v13-appclocks-deprecated-2gpus.xml"
    text = _read(path)
    second = text.index("<gpu id=", text.index("<gpu id=") + 1)
    bad = text[:second] + text[second:].replace("<current_ecc>", "<current_ecc>Maybe", 1)
    report = parse(bad)
    assert [g.index for g in report.gpus] == [0] and report.attached_gpus == 2
    assert report.unreadable[0].index == 1 and "yes/no" in report.unreadable[0].reason


def test_driver_verdict_fabric_and_pinned_settings() -> None:
    """The driver's own verdict, the fabric ids and the settings gpu_settings judges: a 590
    driver prints a recovery action and the fabric's clique/cluster (N/A off NVSwitch), a 535
    driver the reset status only."""
    for gpu in parse(_read(A5000)).gpus:
        assert gpu.recovery_action == "None" and gpu.fabric_state is None
        assert gpu.fabric_clique_id is None and gpu.fabric_cluster_uuid is None
    a100 = parse(_read(A100)).gpus[0]
    assert (a100.reset_required, a100.drain_and_reset_recommended) == (False, False)
    assert a100.recovery_action is None
    for gpu in parse(_read(A100)).gpus + parse(_read(A5000)).gpus:
        assert gpu.compute_mode in ("Default", "Exclusive_Process", "Prohibited")
        assert gpu.ecc_pending is None or gpu.ecc_pending == gpu.ecc_enabled
