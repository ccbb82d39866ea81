"""The Xid catalog: every code a check relies on is there, with the severities technicians
expect."""

from __future__ import annotations

import pytest

from stetho.facts.xid import CATALOG, CATALOG_URL, lookup, severity_of
from stetho.parsers.kernel_log import parse
from tests.conftest import real_files

REQUIRED = [13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119,
            120, 121, 140, 143, 144, 145, 149, 154]


@pytest.mark.parametrize("code", REQUIRED)
def test_required_codes_present(code: int) -> None:
    info = lookup(code)
    assert info.known
    assert info.code == code
    assert info.name and info.action
    assert info.severity in ("info", "warning", "critical")
    assert info.cause in ("application", "driver", "hardware", "thermal", "nvlink", "memory", "bus")
    assert CATALOG[code] is info


@pytest.mark.parametrize("code", [79, 48, 95, 74, 64, 62, 140])
def test_hardware_faults_are_critical(code: int) -> None:
    assert lookup(code).severity == "critical"


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_not_critical(code: int) -> None:
    info = lookup(code)
    assert info.cause == "application"
    assert info.severity != "critical"
    assert "application" in info.action


def test_causes_and_actions() -> None:
    assert lookup(79).cause == "bus"
    assert "reboot" in lookup(79).action
    assert lookup(48).cause == "memory"
    assert "RMA" in lookup(64).action
    assert lookup(74).cause == "nvlink"
    assert {lookup(c).cause for c in (144, 145, 149)} == {"nvlink"}
    assert "reset" in lookup(63).action


def test_unknown_code_points_to_nvidia_catalog() -> None:
    info = lookup(9999)
    assert not info.known
    assert info.code == 9999
    assert info.severity == "warning"
    assert CATALOG_URL in info.action and "9999" in info.action


def test_severity_refined_by_message() -> None:
    assert severity_of(149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 ...)") == "critical"
    assert severity_of(144, "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 ...)") == "warning"
    assert severity_of(145, "RLW_RXPIPE Non-fatal XC0") == "warning"
    assert severity_of(154, "GPU recovery action changed from 0x0 (None) to 0x2 "
                            "(Node Reboot Required)") == "critical"
    assert severity_of(154, "GPU recovery action changed from 0x1 (GPU Reset Required) "
                            "to 0x0 (None)") == "info"
    assert severity_of(79) == "critical"
    assert severity_of(13, "Graphics Exception: Fatal-looking text") == "warning"


def test_every_xid_in_the_real_logs_is_catalogued() -> None:
    codes = {x.code for p in real_files("05-kernel-log") for x in parse(p.read_text()).xids}
    assert codes == {13, 43, 45, 48, 63, 79, 94, 144, 145, 149}
    assert all(lookup(c).known for c in codes)


def test_readme_says_what_the_catalog_says() -> None:
    """The README's gpu_xid row names severities; each must be the code's (issue 11: Xid 94
    was critical in the README and a warning in the catalog)."""
    import re

    from tests.conftest import REPO

    row = next(line for line in (REPO / "README.md").read_text().splitlines()
               if line.startswith("| `gpu_xid` |"))
    critical = re.search(r"a critical Xid \(([^)]*)\)", row)
    warns = re.search(r"application Xids \(([^)]*)\) and contained ECC \((\d+)\) warn", row)
    info = re.search(r"; (\d+) \([^)]*\) is informational", row)
    assert critical and warns and info, row
    for code in re.findall(r"\d+", critical.group(1)):
        assert lookup(int(code)).severity == "critical", code
    for code in re.findall(r"\d+", warns.group(1)) + [warns.group(2)]:
        assert lookup(int(code)).severity == "warning", code
    assert lookup(int(info.group(1))).severity == "info"
