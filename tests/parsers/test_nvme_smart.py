"""NVMe SMART log parser on every real sample (fixtures/real/14-nvme: nvme-cli JSON with
integers, floats and strings; smartctl -j), the simulator's faulty copies, and garbage."""

from __future__ import annotations

import json

import pytest

from stetho.parsers import ParseError, nvme_smart
from tests.conftest import mutation_outcomes, real_files, real_ids

SAMPLES = real_files("14-nvme", "*.json")
NVME_CLI = [p for p in SAMPLES if p.name.startswith("nvme-smart-log")]


def test_samples_found():
    assert len(NVME_CLI) >= 3 and len(SAMPLES) > len(NVME_CLI)


@pytest.mark.parametrize("path", SAMPLES, ids=real_ids(SAMPLES))
def test_real(path):
    s = nvme_smart.parse(path.read_text())
    assert s.critical_warning == 0 and s.warnings() == () and s.media_errors == 0
    assert s.available_spare == 100 and s.spare_threshold in (5, 10)
    assert s.temperature_c is not None and 20 < s.temperature_c < 70


@pytest.mark.parametrize("path", NVME_CLI, ids=real_ids(NVME_CLI))
def test_nvme_cli_number_forms_read_alike(path):
    """Integers, integral floats and strings: one reading (the same drive, netdata's three)."""
    s = nvme_smart.parse(path.read_text())
    assert (s.source, s.temperature_c, s.percentage_used, s.err_log_entries) == \
        ("nvme-cli", 37, 2, 110)


def test_smartctl_sample():
    s = nvme_smart.parse(real_files("14-nvme", "smartctl-*")[0].read_text())
    assert (s.source, s.temperature_c, s.spare_threshold, s.percentage_used) == \
        ("smartctl", 58, 10, 3)


def test_critical_warning_object_form_and_128_bit_strings():
    """nvme-cli 2.x prints critical_warning as an object of bits; 128-bit counters as strings."""
    doc = json.loads(NVME_CLI[0].read_text())
    doc["critical_warning"] = {"value": 0, "available_spare": 1, "temp_threshold": 0,
                               "reliability_degraded": 1, "ro": 0, "vmbu_failed": 0,
                               "pmr_ro": 0}
    doc["media_errors"] = str(2**100)
    s = nvme_smart.parse(json.dumps(doc))
    assert s.critical_warning == 0x05 and s.media_errors == 2**100
    assert s.warnings() == ("available spare below its threshold",
                            "NVM subsystem reliability degraded (media or internal errors)")


def test_percentage_used_spelling_and_reserved_bits():
    doc = json.loads(NVME_CLI[0].read_text())
    doc["percentage_used"] = doc.pop("percent_used")
    doc["critical_warning"] = 0x48
    s = nvme_smart.parse(json.dumps(doc))
    assert s.percentage_used == 2
    assert s.warnings() == ("media placed in read-only mode", "reserved bit(s) 0x40")


def test_simulated_faults_edit_the_recording():
    from stetho.sim import nvme

    text = NVME_CLI[0].read_text()
    worn = nvme_smart.parse(nvme.edit(text, {"critical_warning": 1, "avail_spare": 4}))
    assert worn.warnings() == ("available spare below its threshold",)
    assert worn.available_spare < worn.spare_threshold


@pytest.mark.parametrize("text", [
    "", "\x00\x01\x02\x03", "garbage\n", "[1, 2]", '{"critical_warning": 0',
    '{"critical_warning": 0, "avail_spare": 100}',  # truncated: no threshold
    '{"critical_warning": -1, "avail_spare": 1, "spare_thresh": 1, "percent_used": 1,'
    ' "media_errors": 0, "num_err_log_entries": 0}',
    '{"critical_warning": "0x1", "avail_spare": 1, "spare_thresh": 1, "percent_used": 1,'
    ' "media_errors": 0, "num_err_log_entries": 0}',
    '{"Devices": []}',  # nvme list -o json: the wrong command
    "NVME Identify Controller:\nvid       : 0x144d\n",
])
def test_garbage(text):
    with pytest.raises(ParseError) as exc:
        nvme_smart.parse(text)
    assert exc.value.tool == "nvme smart-log"


def test_smartctl_without_the_log_names_smartctl():
    with pytest.raises(ParseError) as exc:
        nvme_smart.parse('{"smartctl": {"exit_status": 2, "messages": [{"string": '
                         '"/dev/nvme0: Unable to detect device type", "severity": "error"}]}}')
    assert exc.value.tool == "smartctl" and "Unable to detect device type" in exc.value.reason


@pytest.mark.parametrize("path", NVME_CLI[:1], ids=real_ids(NVME_CLI[:1]))
def test_mutations_parse_or_raise_parse_error(path):
    assert mutation_outcomes(nvme_smart.parse, path.read_text(),
                             "nvme smart-log") == {"parsed", "error"}
