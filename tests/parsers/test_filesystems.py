"""/proc/mounts and df -P parsers on every real recording (fixtures/recorded/*/), and on
garbage."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, filesystems
from tests.conftest import REPO, mutation_outcomes

RECORDED = REPO / "fixtures" / "recorded"
MOUNTS = sorted(RECORDED.glob("*/mounts"))
DF_BYTES = sorted(RECORDED.glob("*/df-P-B1*.txt"))
DF_INODES = sorted(RECORDED.glob("*/df-P-i*.txt"))
GARBAGE = ["", "\x00\x01\x02binary", "garbage words\n",
           "Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/vda 1 2 3 4% /\n",
           "NVRM: Xid (PCI:0000:4c:00): 79, GPU has fallen off the bus\n"]


def test_recordings_found():
    assert MOUNTS and DF_BYTES and DF_INODES


@pytest.mark.parametrize("path", MOUNTS, ids=lambda p: p.parent.name)
def test_mounts_real(path):
    mounts = filesystems.parse_mounts(path.read_text())
    root = [m for m in mounts if m.mountpoint == "/"]
    assert root and not root[-1].read_only and root[-1].fstype
    assert any(m.read_only for m in mounts)  # the recording has a tmpfs mounted ro


@pytest.mark.parametrize("path", DF_BYTES, ids=lambda p: p.parent.name)
def test_df_bytes_real(path):
    rows = {r.mountpoint: r for r in filesystems.parse_df(path.read_text())}
    root = rows["/"]
    assert root.total == 270553174016 and root.used == 29737553920
    # df printed Capacity 28%: used over what users may fill, rounded up
    assert root.free_pct is not None and 72 < root.free_pct < 73


@pytest.mark.parametrize("path", DF_INODES, ids=lambda p: p.parent.name)
def test_df_inodes_real(path):
    rows = {r.mountpoint: r for r in filesystems.parse_df(path.read_text(), inodes=True)}
    assert rows["/"].total == 16777216 and rows["/"].used == 977068
    with pytest.raises(ParseError, match="header"):  # the bytes parser refuses -i output
        filesystems.parse_df(path.read_text())


def test_df_mountpoint_with_spaces_and_dash_counts():
    text = ("Filesystem Inodes IUsed IFree IUse% Mounted on\n"
            "//srv/share - - - - /mnt/my share\n")
    row = filesystems.parse_df(text, inodes=True)[0]
    assert row.mountpoint == "/mnt/my share" and row.total is None and row.free_pct is None


def test_mounts_octal_escapes():
    m = filesystems.parse_mounts("/dev/sdb1 /mnt/my\\040disk ext4 ro,relatime 0 0\n")[0]
    assert m.mountpoint == "/mnt/my disk" and m.read_only


def test_holding():
    mps = ["/", "/raid", "/raid2"]
    assert filesystems.holding(mps, "/tmp") == "/"
    assert filesystems.holding(mps, "/raid2/x") == "/raid2"
    assert filesystems.holding(mps, "/raid") == "/raid"
    assert filesystems.holding(["/raid"], "/tmp") is None


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage(text):
    with pytest.raises(ParseError):
        filesystems.parse_mounts(text)
    with pytest.raises(ParseError):
        filesystems.parse_df(text)
    with pytest.raises(ParseError):
        filesystems.parse_df(text, inodes=True)


def test_truncated():
    text = DF_BYTES[0].read_text()
    with pytest.raises(ParseError):
        filesystems.parse_df(text.splitlines()[0] + "\n/dev/vda 2705531")
    with pytest.raises(ParseError):
        filesystems.parse_mounts(MOUNTS[0].read_text()[:40])


def test_mutations_parse_or_raise_parse_error():
    assert mutation_outcomes(filesystems.parse_df, DF_BYTES[0].read_text(),
                             "df -P -B1") == {"parsed", "error"}
    assert mutation_outcomes(filesystems.parse_mounts, MOUNTS[0].read_text(),
                             "/proc/mounts") == {"parsed", "error"}
