"""The Xid catalog: every code a check relies on is there, with the severities technicians
expect."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from stetho.facts.xid import (
    CATALOG,
    CATALOG_URL,
    CAUSES,
    FIELDS,
    GENERATIONS,
    INVESTIGATORY,
    SEVERITY_FOR,
    TABLE_PATH,
    XidTableError,
    load_table,
    lookup,
    severity_of,
)
from stetho.parsers.kernel_log import parse
from tests.conftest import real_files

REQUIRED = [13, 31, 32, 38, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119,
            120, 121, 140, 143, 144, 145, 149, 154,
            # issue 23: codes the table lacked, each with its catalog row
            93, 122, 123, 124, 125, 137, 155, 156, 157, 158, 159, 160, 161, 171, 172]


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
    assert info.severity == "critical"  # fail closed: the check reports `error` for it
    assert CATALOG_URL in info.action and "9999" in info.action
    assert "cannot judge" in info.action and "add a row" in info.action


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


# --- the table file (issue 23) -------------------------------------------------------------


def test_table_file_rows_are_complete_and_cited() -> None:
    """Every row of the shipped file has every field, a source, and values from the allowed
    sets; `load_table` enforces it, this reads the file independently of it."""
    import yaml

    rows = yaml.safe_load(TABLE_PATH.read_text())["xids"]
    codes = [r["code"] for r in rows]
    assert len(codes) == len(set(codes)), "codes are unique"
    for r in rows:
        assert set(r) == set(FIELDS), r["code"]
        assert CATALOG_URL in r["source"], r["code"]
        assert r["immediate"] in SEVERITY_FOR, r["code"]
        assert r["severity"] in SEVERITY_FOR[r["immediate"]], r["code"]
        assert r["investigatory"] in INVESTIGATORY, r["code"]
        assert r["cause"] in CAUSES, r["code"]
        assert set(r["applies_to"]) <= set(GENERATIONS), r["code"]
    assert set(CATALOG) == set(codes)


def test_table_is_inside_the_package() -> None:
    """The wheel ships `stetho/` whole: the table must live inside it, not in a top folder."""
    import stetho

    assert TABLE_PATH.is_relative_to(Path(stetho.__file__).parent)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r.pop("source"), "missing ['source']"),
    (lambda r: r.update(severity="info"), "does not follow from RESET_GPU"),
    (lambda r: r.update(immediate="REBOOT_PLEASE"), "is not one of"),
    (lambda r: r.update(investigatory="MAYBE"), "not a bucket"),
    (lambda r: r.update(applies_to=["V100"]), "applies_to"),
    (lambda r: r.update(source="   "), "non-empty"),
    (lambda r: r.update(code=-1), "positive integer"),
], ids=["no-source", "severity-vs-bucket", "bucket", "investigatory", "generation",
        "blank-source", "code"])
def test_malformed_rows_are_refused(tmp_path: Path, edit: Any, message: str) -> None:
    import yaml

    doc = yaml.safe_load(TABLE_PATH.read_text())
    row = next(r for r in doc["xids"] if r["code"] == 46)
    edit(row)
    bad = tmp_path / "xids.yml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(XidTableError, match=re.escape(message)):
        load_table(bad)


def test_duplicate_code_is_refused(tmp_path: Path) -> None:
    import yaml

    doc = yaml.safe_load(TABLE_PATH.read_text())
    doc["xids"].append(dict(doc["xids"][0]))
    bad = tmp_path / "xids.yml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(XidTableError, match="listed twice"):
        load_table(bad)


@pytest.mark.parametrize(("code", "immediate", "severity"), [
    (160, "IGNORE", "info"), (171, "NOT_GIVEN", "critical"), (155, "RESET_GPU", "critical"),
    (137, "IGNORE", "warning"), (93, "IGNORE", "warning"), (122, "CONTACT_SUPPORT", "critical"),
    (158, "RESET_GPU", "critical"), (159, "CHECK_UVM", "warning"),
])
def test_added_codes_follow_their_catalog_row(code: int, immediate: str, severity: str) -> None:
    info = lookup(code)
    assert (info.immediate, info.severity) == (immediate, severity)
    assert f"code {code}" in info.source


def test_a_table_without_a_code_leaves_it_unknown() -> None:
    table = {c: i for c, i in CATALOG.items() if c != 160}
    assert not lookup(160, table).known
    assert lookup(160).known
