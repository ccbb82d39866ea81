"""The simulator's `nvidia-smi -q -x`: rendered from real `-q` text, it must read back equal."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from stetho.parsers import nvidia_smi_text, nvidia_smi_xml
from stetho.parsers.gpu_model import Gpu, SmiReport
from stetho.sim.smi_xml import render
from tests.conftest import REAL, real_files, real_ids

TEXT_FILES = [
    *real_files("02-nvidia-smi-q", "*.txt"),
    *real_files("06-nvlink-rowremap", "nvidia-smi-q-*.txt"),
]
XML_FILES = real_files("01-nvidia-smi-xml", "*.xml")
H100 = REAL / "02-nvidia-smi-q" / "h100x8-drv535-hw-power-brake-slowdown.txt"
A100_XML = REAL / "01-nvidia-smi-xml" / "a100-sxm4-80gb-drv535-mig.xml"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


#: Gpu fields the parsers read from newer drivers that the simulator's renderer does not print
#: yet (stetho/sim/smi_xml.py renders the 535 layout): compared as their defaults.
NEWER_FIELDS: tuple[str, ...] = ()
_DEFAULTS = Gpu(index=0, pci_bus_id="00000000:00:00.0")


def _rendered_part(report: SmiReport) -> SmiReport:
    """The report as far as the renderer carries it."""
    gpus = tuple(replace(g, **{f: getattr(_DEFAULTS, f) for f in NEWER_FIELDS})
                 for g in report.gpus)
    return replace(report, gpus=gpus)


def _paths(el: ET.Element, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for child in el:
        path = f"{prefix}/{child.tag}"
        out.add(path)
        out |= _paths(child, path)
    return out


def test_there_are_text_files_to_round_trip() -> None:
    assert len(TEXT_FILES) == 3


@pytest.mark.parametrize("path", TEXT_FILES, ids=real_ids(TEXT_FILES))
def test_text_render_xml_round_trip(path: Path) -> None:
    report = nvidia_smi_text.parse(_read(path))
    xml = render(report)
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE nvidia_smi_log')
    assert _rendered_part(nvidia_smi_xml.parse(xml)) == _rendered_part(report)


@pytest.mark.parametrize("path", XML_FILES, ids=real_ids(XML_FILES))
def test_xml_render_xml_round_trip(path: Path) -> None:
    report = nvidia_smi_xml.parse(_read(path))
    assert _rendered_part(nvidia_smi_xml.parse(render(report))) == _rendered_part(report)


def test_rendered_h100_element_texts() -> None:
    root = ET.fromstring(render(nvidia_smi_text.parse(_read(H100))))
    assert root.tag == "nvidia_smi_log"
    assert root.findtext("driver_version") == "535.161.08"
    assert root.findtext("cuda_version") == "12.2"
    assert root.findtext("attached_gpus") == "8"
    gpus = root.findall("gpu")
    assert [g.get("id") for g in gpus][:2] == ["00000000:19:00.0", "00000000:3B:00.0"]
    g = gpus[0]
    assert g.findtext("product_name") == "NVIDIA H100 80GB HBM3"
    assert g.findtext("vbios_version") == "96.00.74.00.0D"
    assert g.findtext("persistence_mode") == "Enabled"
    assert g.findtext("mig_mode/current_mig") == "Disabled"
    assert g.findtext("pci/pci_bus") == "19"
    assert g.findtext("pci/pci_gpu_link_info/pcie_gen/current_link_gen") == "5"
    assert g.findtext("pci/pci_gpu_link_info/link_widths/max_link_width") == "16x"
    assert g.findtext("pci/replay_counter") == "67"
    reasons = g.find("clocks_event_reasons")
    assert reasons is not None and len(reasons) == 9
    assert g.findtext("clocks_event_reasons/clocks_event_reason_hw_slowdown") == "Active"
    assert g.findtext(
        "clocks_event_reasons/clocks_event_reason_hw_power_brake_slowdown") == "Active"
    assert g.findtext("clocks_event_reasons/clocks_event_reason_gpu_idle") == "Not Active"
    assert g.find("clocks_throttle_reasons") is None
    assert g.findtext("temperature/gpu_temp") == "29 C"
    assert g.findtext("temperature/gpu_temp_tlimit") == "56 C"
    assert g.findtext("temperature/gpu_temp_max_tlimit_threshold") == "-8 C"
    assert g.findtext("temperature/gpu_temp_slow_tlimit_threshold") == "-2 C"
    assert g.find("temperature/gpu_temp_slow_threshold") is None  # Hopper: T.Limit set only
    assert g.findtext("gpu_power_readings/power_draw") == "67.74 W"
    assert g.findtext("gpu_power_readings/current_power_limit") == "700.00 W"
    assert g.findtext("applications_clocks/graphics_clock") == "1980 MHz"
    assert g.findtext("max_clocks/sm_clock") == "1980 MHz"
    assert g.findtext("clocks/mem_clock") == "2619 MHz"
    assert g.findtext("remapped_rows/remapped_row_pending") == "No"
    assert g.findtext("ecc_mode/current_ecc") == "Enabled"
    assert g.findtext("ecc_errors/volatile/dram_uncorrectable") == "0"
    assert g.findtext("retired_pages/multiple_single_bit_retirement/retired_count") == "N/A"
    assert g.findtext("fabric/state") == "Completed"
    assert g.findtext("fan_speed") == "N/A"  # not in the model: printed as nvidia-smi's N/A


def test_layout_matches_the_real_driver_535_file() -> None:
    """Same element names and nesting as the real A100 v12 file (MIG devices and the supported
    clocks list, which the model does not carry, aside)."""
    real = ET.fromstring(_read(A100_XML))
    rendered = ET.fromstring(render(nvidia_smi_xml.parse(_read(A100_XML))))
    skip = ("/gpu/mig_devices/", "/gpu/supported_clocks/")
    want = {p for p in _paths(real) if not p.startswith(skip)}
    assert _paths(rendered) == want
    real_gpu, rendered_gpu = real.find("gpu"), rendered.find("gpu")
    assert real_gpu is not None and rendered_gpu is not None
    assert [c.tag for c in rendered_gpu] == [c.tag for c in real_gpu]


def test_remapped_rows_none_renders_literal_na_and_values_keep_precision() -> None:
    gpu = Gpu(index=0, pci_bus_id="00000000:9B:00.0", power_draw_w=70.125, gpu_temp_c=31.5,
              tlimit_shutdown_c=-8.0)
    report = SmiReport(timestamp=None, driver_version="535.161.08", cuda_version=None,
                       attached_gpus=1, gpus=(gpu,))
    xml = render(report)
    root = ET.fromstring(xml)
    assert root.findtext("gpu/remapped_rows") == "N/A"
    assert root.findtext("gpu/gpu_power_readings/power_draw") == "70.125 W"
    assert root.findtext("gpu/temperature/gpu_temp") == "31.5 C"
    assert root.findtext("timestamp") == "N/A"
    assert nvidia_smi_xml.parse(xml) == report
