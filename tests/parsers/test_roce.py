"""RoCE parsers (ethtool -S statistics, mlnx_qos) on every real recorded output, and on garbage."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stetho.parsers import ParseError, roce
from tests.conftest import REAL, mutation_outcomes, real_files, real_ids

ETHTOOL_FILES = real_files("14-roce", "ethtool-S-*.txt")
QOS_FILES = real_files("14-roce", "mlnx_qos-*.txt")
QOS = REAL / "14-roce" / "mlnx_qos-cx-100g-dscp-pfc3-firmware-dcbx.txt"
ETHTOOL = REAL / "14-roce" / "ethtool-S-mlx5-cx4lx-25g-pause-pci-grep-EXCERPT.txt"
GARBAGE = ["", "\n\n", "\x00\x01\x02binary", "hello world\nthis is not it\n",
           "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n"]


def test_every_file_is_covered() -> None:
    assert ETHTOOL_FILES == [ETHTOOL] and QOS_FILES == [QOS]


@pytest.mark.parametrize("path", ETHTOOL_FILES, ids=real_ids(ETHTOOL_FILES))
def test_every_real_ethtool_file_parses(path: Path) -> None:
    stats = roce.parse_ethtool_stats(path.read_text())
    assert stats and all(isinstance(v, int) and v >= 0 for v in stats.values())


def test_ethtool_values() -> None:
    stats = roce.parse_ethtool_stats(ETHTOOL.read_text())
    assert len(stats) == 17
    assert stats["rx_pause_ctrl_phy"] == 0 and stats["tx_pci_signal_integrity"] == 3
    assert stats["tx_pause_storm_error_events"] == 0


def test_ethtool_header_is_skipped() -> None:
    text = "NIC statistics:\n" + ETHTOOL.read_text()
    assert roce.parse_ethtool_stats(text) == roce.parse_ethtool_stats(ETHTOOL.read_text())


@pytest.mark.parametrize("path", QOS_FILES, ids=real_ids(QOS_FILES))
def test_every_real_mlnx_qos_file_parses(path: Path) -> None:
    q = roce.parse_mlnx_qos(path.read_text())
    assert q.trust in roce.TRUST_STATES
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.trust = "pcp"  # type: ignore[misc]


def test_mlnx_qos_values() -> None:
    q = roce.parse_mlnx_qos(QOS.read_text())
    assert (q.trust, q.pfc_enabled, q.dcbx) == ("dscp", (3,), "Firmware controlled")
    assert q.pfc_on(3) and not q.pfc_on(0)


def test_mlnx_qos_pcp_and_no_pfc() -> None:
    text = QOS.read_text().replace("state: dscp", "state: pcp").replace(
        "enabled     0   0   0   1", "enabled     0   0   0   0")
    q = roce.parse_mlnx_qos(text)
    assert (q.trust, q.pfc_enabled) == ("pcp", ())


@pytest.mark.parametrize("text", GARBAGE + [QOS.read_text()[:40]])
def test_garbage_raises(text: str) -> None:
    with pytest.raises(ParseError):
        roce.parse_ethtool_stats(text)
    with pytest.raises(ParseError):
        roce.parse_mlnx_qos(text)


def test_wrong_tool_each_way() -> None:
    with pytest.raises(ParseError):
        roce.parse_mlnx_qos(ETHTOOL.read_text())
    with pytest.raises(ParseError):
        roce.parse_ethtool_stats(QOS.read_text())


def test_mutations_parse_or_raise() -> None:
    assert mutation_outcomes(roce.parse_mlnx_qos, QOS.read_text(), roce.MLNX_QOS) == \
        {"parsed", "error"}
    outcomes = mutation_outcomes(roce.parse_ethtool_stats, ETHTOOL.read_text(), roce.ETHTOOL)
    assert "parsed" in outcomes
