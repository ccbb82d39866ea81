"""Kernel log parser: every real dmesg/journal sample, each with the values read from the file."""

from __future__ import annotations

import random
import re
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.kernel_log import KernelLog, parse
from tests.conftest import REAL, real_files, real_ids

FOLDER = "05-kernel-log"
FILES = real_files(FOLDER)
OTHER_TOOLS = [
    p for d in sorted(REAL.iterdir()) if d.is_dir() and d.name != FOLDER for p in real_files(d.name)
]


def _real(name: str) -> KernelLog:
    return parse((REAL / FOLDER / name).read_text())


def test_there_are_real_samples() -> None:
    assert len(FILES) == 10


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_parses(path: Path) -> None:
    text = path.read_text()
    log = parse(text)
    assert log.lines > 0
    assert log.xids or log.aer or log.fallen_off_bus or log.sxids or log.mces
    for m in log.mces:
        assert m.line in text
    for e in log.sxids:
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", e.pci_id)
        assert e.code > 0 and e.message and e.line in text
    for x in log.xids:
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}", x.pci_id)
        assert x.code > 0 and x.message
        assert x.line.splitlines()[0] in text
    for a in log.aer:
        assert a.errors, "every AER event in the samples has detail lines"
        assert a.line in text
    # bytes in, same result out
    assert parse(path.read_bytes()) == log


def test_xid79_after_aer_fatal_surprise_down() -> None:
    log = _real("dmesg-aer-fatal-surprise-down-then-xid79-EXCERPT.log")
    assert log.lines == 13
    assert len(log.xids) == 1
    xid = log.xids[0]
    assert (xid.pci_id, xid.code, xid.pid, xid.process) == ("0000:02:00", 79, None, None)
    assert xid.message == "GPU has fallen off the bus."
    assert xid.timestamp == "74889.644138"
    assert [b.pci_id for b in log.fallen_off_bus] == ["0000:02:00"]

    corrected, fatal = log.aer
    assert corrected.device == "0000:00:02.0"
    assert corrected.severity == "corrected"
    assert corrected.error_type == "Data Link Layer"
    assert corrected.errors == ("Replay Timer Timeout",)
    assert corrected.vendor_device == "8086:6f04"
    assert corrected.timestamp == "74785.660380"
    assert fatal.device == "0000:00:02.0"
    assert fatal.severity == "uncorrected-fatal"
    assert fatal.error_type == "Transaction Layer"
    assert fatal.errors == ("Surprise Down Error",)  # "(First)" marker dropped
    assert fatal.vendor_device == "8086:6f04"
    assert log.oom_kills == ()


def test_decode_iso_xid13_and_xid43_counts() -> None:
    log = _real("dmesg-decode-iso-xid13-xid43-sm-exceptions.log")
    assert log.lines == 636
    codes = Counter(x.code for x in log.xids)
    assert codes == {13: 629, 43: 7}
    assert {x.pci_id for x in log.xids} == {"0000:38:00"}
    first = log.xids[0]
    assert first.timestamp == "2025-01-21T02:21:33,498559+00:00"  # ISO with a comma, no prefix
    assert first.pid is None and first.process is None  # pid='<unknown>', name=<unknown>
    assert first.message == (
        "Graphics SM Warp Exception on (GPC 8, TPC 5, SM 0): Out Of Range Address"
    )
    xid43 = [x for x in log.xids if x.code == 43]
    assert xid43[0].pid == 2815167
    assert xid43[0].process == "pt_main_thread"
    assert xid43[0].message == "Ch 00000008"
    assert xid43[-1].pid == 2924364
    assert {x.process for x in xid43} == {"pt_main_thread"}
    assert log.aer == () and log.fallen_off_bus == ()


def test_iso_xid48_63_94() -> None:
    log = _real("dmesg-iso-xid48-63-94-dbe-rowremap-contained.log")
    assert log.lines == 41  # 40 newlines, the last line has none
    assert [x.code for x in log.xids] == [48, 63] + [94] * 9
    assert {x.pci_id for x in log.xids} == {"0000:19:00"}
    dbe, remap, contained = log.xids[:3]
    assert dbe.pid is None
    assert "double bit error (DBE)" in dbe.message
    assert dbe.timestamp == "2024-11-15T12:02:03,470068+00:00"
    assert remap.message.startswith("Row Remapper: New row (0x00000012bac1c3e0)")
    assert contained.message == "Contained: SM (0x1). RST: No, D-RST: No"
    with_pid = [x for x in log.xids if x.pid is not None]
    assert len(with_pid) == 8
    assert {(x.pid, x.process) for x in with_pid} == {(1248209, "python3.10")}
    assert [x.message for x in with_pid][:2] == ["Ch 00000008", "Ch 00000009"]
    # the nvidia-peermem noise is read but yields nothing
    assert log.aer == () and log.fallen_off_bus == () and log.oom_kills == ()


def test_kmsg_nvlink_xids_and_fallen_off_bus_without_xid() -> None:
    log = _real("kmsg-xid-nvlink-144-145-149-and-45-EXCERPT.log")
    assert log.lines == 9  # 11 lines, 2 of them continuation lines
    assert [(x.pci_id, x.code) for x in log.xids] == [
        ("0000:01:00", 144),
        ("0000:00:00", 149),
        ("0019:01:00", 149),
        ("0018:01:00", 145),
        ("0000:dc:00", 45),
        ("0000:ed:00", 45),
        ("0000:ba:00", 45),
    ]
    assert log.xids[0].message.startswith("SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001")
    assert log.xids[0].timestamp is None  # kmsg lines with no timestamp at all
    xid45 = log.xids[4:]
    assert [(x.pid, x.process) for x in xid45] == [
        (1818990, "python3"), (1818992, "python3"), (1818989, "python3")
    ]
    assert xid45[0].message == "Ch 00000001 caused by previous Xid 149"
    assert not any(x.code == 79 for x in log.xids)
    (lost,) = log.fallen_off_bus
    assert lost.pci_id == "0000:b3:00"
    assert lost.line.count("\n") == 2  # the three physical lines of the message
    assert "not responding to commands" in lost.line


def test_journal_correctable_aer() -> None:
    log = _real("journal-aer-correctable-badtlp-baddllp-EXCERPT.log")
    assert log.lines == 10
    port, gpu = log.aer
    assert port.device == "0000:00:03.1"
    assert port.severity == "corrected"  # "Correctable" spelling
    assert port.error_type == "Data Link Layer"
    assert port.errors == ("BadTLP", "BadDLLP", "Rollover", "Timeout")
    assert port.vendor_device == "1022:1453"
    assert port.timestamp == "Sep 19 16:18:04"
    assert gpu.device == "0000:07:00.0"
    assert gpu.errors == ("Timeout",)
    assert gpu.vendor_device == "10de:2184"
    assert log.xids == ()
    assert log.aer_for("00000000:07:00.0") == (gpu,)
    assert log.aer_for("0000:00:03.1") == (port,)
    assert log.aer_for("0000:00:03") == (port,)  # no function given: any function
    assert log.aer_for("0000:00:03.0") == ()


def test_xids_for_matches_nvidia_smi_bus_ids() -> None:
    log = _real("dmesg-iso-xid48-63-94-dbe-rowremap-contained.log")
    for bus_id in ("00000000:19:00.0", "0000:19:00.0", "0000:19:00", "19:00.0", "0:19:00.0"):
        assert len(log.xids_for(bus_id)) == 11
    assert log.xids_for("00000000:1A:00.0") == ()
    kmsg = _real("kmsg-xid-nvlink-144-145-149-and-45-EXCERPT.log")
    assert [x.code for x in kmsg.xids_for("00000019:01:00.0")] == [149]
    assert [x.code for x in kmsg.xids_for("00000000:DC:00.0")] == [45]  # case-insensitive
    assert [x.code for x in kmsg.xids_for("00000000:01:00.0")] == [144]  # domain 0 only
    assert len(kmsg.fallen_off_bus_for("00000000:B3:00.0")) == 1
    with pytest.raises(ValueError):
        log.xids_for("GPU-0")


# --- formats and events with no real sample: hand-written lines, marked as such -------------

def test_journal_no_entries_is_an_empty_log() -> None:
    log = parse("-- No entries --\n")
    assert log == KernelLog(xids=(), aer=(), fallen_off_bus=(), oom_kills=(), lines=0)


def test_oom_kill_hand_written() -> None:
    # HAND-WRITTEN (no real OOM sample): the lines a kernel prints for one OOM kill, then a
    # memory-cgroup kill of another process.
    text = (
        "[ 9001.000001] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        "mems_allowed=0-1,global_oom,task_memcg=/user.slice,task=python3,pid=1234,uid=1000\n"
        "[ 9001.000002] Out of memory: Killed process 1234 (python3) total-vm:9000kB, "
        "anon-rss:8000kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:100kB oom_score_adj:0\n"
        "[ 9002.000000] Memory cgroup out of memory: Killed process 4321 (pt_main_thread) "
        "total-vm:1kB\n"
    )
    log = parse(text)
    assert [(k.pid, k.process) for k in log.oom_kills] == [
        (1234, "python3"), (4321, "pt_main_thread")
    ]
    assert log.oom_kills[0].line.startswith("[ 9001.000002] Out of memory: Killed process 1234")


def test_other_timestamp_styles_hand_written() -> None:
    # HAND-WRITTEN: dmesg -T, raw /dev/kmsg and journalctl -o short-iso versions of real lines.
    text = (
        "[Tue Jan 21 02:21:33 2025] NVRM: Xid (PCI:0000:38:00): 43, pid=7, name=a b, Ch 08\n"
        "4,1234,74889644138,-;NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.\n"
        "2024-09-19T16:18:04+0200 host1 kernel: nvidia 0000:07:00.0: AER: PCIe Bus Error: "
        "severity=Uncorrectable (Non-Fatal), type=Transaction Layer, (Requester ID)\n"
        "2024-09-19T16:18:04+0200 host1 kernel: nvidia 0000:07:00.0: AER:   device [10de:2330] "
        "error status/mask=00004000/00000000\n"
        "2024-09-19T16:18:04+0200 host1 kernel: nvidia 0000:07:00.0: AER:    [14] CmpltTO\n"
        "[ 30.1] NVRM: GPU at 0000:3B:00.0 has fallen off the bus.\n"
    )
    log = parse(text)
    ctime, kmsg = log.xids
    assert ctime.timestamp == "Tue Jan 21 02:21:33 2025"
    assert (ctime.pid, ctime.process, ctime.message) == (7, "a b", "Ch 08")
    assert kmsg.timestamp == "74889.644138"
    assert (kmsg.code, kmsg.pci_id) == (79, "0000:02:00")
    (aer,) = log.aer
    assert aer.severity == "uncorrected-nonfatal"
    assert aer.errors == ("CmpltTO",)
    assert aer.vendor_device == "10de:2330"
    assert aer.timestamp == "2024-09-19T16:18:04+0200"
    assert [b.pci_id for b in log.fallen_off_bus] == ["0000:02:00", "0000:3b:00"]


# --- garbage -----------------------------------------------------------------------------------

@pytest.mark.parametrize("data", ["", "   \n\t\n", b"", b"\x00\x01\x02"], ids=repr)
def test_empty_and_binary_raise(data: str | bytes) -> None:
    with pytest.raises(ParseError) as info:
        parse(data)
    assert info.value.tool == "kernel log"


def test_random_bytes_raise() -> None:
    rng = random.Random(0)
    for _ in range(20):
        with pytest.raises(ParseError):
            parse(rng.randbytes(rng.randint(1, 4096)))


def test_random_text_raises() -> None:
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghij :=,.") for _ in range(40)) for _ in range(30)]
    with pytest.raises(ParseError, match="no kernel log lines"):
        parse("\n".join(words))


@pytest.mark.parametrize("path", OTHER_TOOLS, ids=real_ids(OTHER_TOOLS))
def test_other_tools_output_raises(path: Path) -> None:
    with pytest.raises(ParseError) as info:
        parse(path.read_bytes())
    assert info.value.tool == "kernel log"


# --- absolute times and GPU (re)initialisation lines (issue 23) ----------------------------

ISO_FILES = {"dmesg-decode-iso-xid13-xid43-sm-exceptions.log",
             "dmesg-iso-xid48-63-94-dbe-rowremap-contained.log"}


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file_events_carry_their_absolute_time(path: Path) -> None:
    """ISO stamps become aware UTC times; uptime, syslog and kmsg stamps have no date and zone
    and stay None (unknown, never guessed). Events are numbered in log order."""
    from stetho.parsers.kernel_log import absolute_time

    log = parse(path.read_text())
    for e in (*log.xids, *log.fallen_off_bus):
        if path.name in ISO_FILES:
            assert e.time is not None and e.time.utcoffset() == timedelta(0)
        else:
            assert e.time is None
    for x in log.xids:
        assert x.time == absolute_time(x.timestamp)
        if x.time is not None:
            assert x.time.isoformat().startswith(x.timestamp[:19])  # all samples are +00:00
    seqs = [x.seq for x in log.xids]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_iso_xid48_time() -> None:
    x = _real("dmesg-iso-xid48-63-94-dbe-rowremap-contained.log").xids[0]
    assert x.time == datetime(2024, 11, 15, 12, 2, 3, 470068, tzinfo=timezone.utc)


@pytest.mark.parametrize(("stamp", "expected"), [
    ("2024-11-15T12:02:03,470068+00:00", datetime(2024, 11, 15, 12, 2, 3, 470068)),
    ("2024-11-15T12:02:03+0000", datetime(2024, 11, 15, 12, 2, 3)),  # journalctl short-iso
    ("2024-11-15T14:02:03+0200", datetime(2024, 11, 15, 12, 2, 3)),
    ("2024-11-15T12:02:03.5Z", datetime(2024, 11, 15, 12, 2, 3, 500000)),
    ("2024-11-15T12:02:03", None),  # no zone: a local time, unknown
    ("74889.644138", None), ("Sep 19 16:18:04", None), ("Fri Aug 30 11:43:09 2024", None),
    ("2024-13-45T99:02:03+00:00", None), ("", None), (None, None), ("\x00\x01garbage", None),
])
def test_absolute_time_on_stamps_and_garbage(stamp: str | None, expected: datetime | None) -> None:
    from stetho.parsers.kernel_log import absolute_time

    want = None if expected is None else expected.replace(tzinfo=timezone.utc)
    assert absolute_time(stamp) == want


def test_gpu_identity_line_in_the_recorded_xid79() -> None:
    """The driver prints the GPU's identity line just before its first Xid (kernel_rc.c
    `_krcLogUuidOnce`): it is recorded as a gpu-identity init for that GPU, before the Xid."""
    log = _real("dmesg-aer-fatal-surprise-down-then-xid79-EXCERPT.log")
    (init,) = log.inits
    assert (init.pci_id, init.kind, init.time) == ("0000:02:00", "gpu-identity", None)
    assert init.seq < log.xids[0].seq
    assert log.epoch_start("00000000:02:00.0") == init
    assert log.epoch_start("00000000:19:00.0") is None


def test_driver_load_starts_every_gpus_epoch() -> None:
    text = ("2024-11-15T12:00:00,000000+00:00 NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', "
            "name=<unknown>, An uncorrectable double bit error (DBE) has been detected\n"
            "2024-11-15T13:00:00,000000+00:00 NVRM: loading NVIDIA UNIX Open Kernel Module for "
            "x86_64  550.54.14  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Feb  6 "
            "23:53:23 UTC 2024\n")
    log = parse(text)
    start = log.epoch_start("00000000:4C:00.0")
    assert start is not None and start.kind == "driver-load" and start.pci_id is None
    assert start.time == datetime(2024, 11, 15, 13, 0, tzinfo=timezone.utc)
    assert log.xids[0].seq < start.seq


def test_nvswitch_sxid_fatal_events_and_detail_lines() -> None:
    """The recorded SXid 20034 group: 4 Fatal event lines (link down), their Severity/Data
    detail lines recognised and left out, and none of it read as a GPU Xid."""
    log = parse((REAL / "05-kernel-log" /
                 "dmesg-nvswitch-sxid-20034-fatal-ltssm-EXCERPT.log").read_text())
    assert log.xids == ()
    assert [(e.switch, e.pci_id, e.code, e.fatal, e.link) for e in log.sxids] == [
        (1, "0000:06:00.0", 20034, True, 48), (0, "0000:05:00.0", 20034, True, 63),
        (2, "0000:07:00.0", 20034, True, 37), (0, "0000:05:00.0", 20034, True, 62)]
    assert log.sxids[0].message == "LTSSM Fault Up"
    assert log.sxids[0].timestamp == "6781753.400584" and log.sxids[0].time is None


def test_nvswitch_sxid_non_fatal() -> None:
    log = parse((REAL / "05-kernel-log" /
                 "dmesg-nvswitch-sxid-22013-nonfatal-dlreq-EXCERPT.log").read_text())
    assert [(e.code, e.fatal, e.link) for e in log.sxids] == [
        (22013, False, 44), (22013, False, 45), (22013, False, 46)]
    assert log.sxids[0].message == "Minion Link DLREQ interrupt"
    assert len(log.inits) == 1  # the driver load line is still read


def test_sxid_without_a_link_number() -> None:
    """Older drivers print no link: the event is kept with link None."""
    log = parse("[38889.018130] nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 10001, Non-fatal, "
                "PRI WRITE SYSB error, instance=3\n")
    [e] = log.sxids
    assert (e.code, e.fatal, e.link) == (10001, False, None)
    assert e.message == "PRI WRITE SYSB error, instance=3"


# --- machine checks (issue 24) -------------------------------------------------------------

def _mces(name: str) -> list[tuple[object, ...]]:
    log = parse((real_dir_path() / name).read_text())
    return [(e.severity, e.kind, e.cpu, e.bank, e.status) for e in log.mces]


def real_dir_path() -> Path:
    return FILES[0].parent


def test_mce_corrected_record_then_notices() -> None:
    """AMD bank 17 (UMC) MCi_STATUS dc2040000000011b: UC clear, a corrected error; the later
    `Machine check events logged` notices tell no severity; detail lines are no events."""
    got = _mces("dmesg-mce-corrected-amd-bank17-then-logged-notices-EXCERPT.log")
    assert got[1] == ("corrected", "record", 0, 17, 0xdc2040000000011b)
    assert [g[0] for g in got] == ["unknown", "corrected"] + ["unknown"] * 7


def test_mce_uncorrected_pcc_record_in_a_hostless_syslog() -> None:
    """`Sep 16 19:51:15 kernel: [uptime] mce: ...` (no host name): bank 4 a600000000020408
    has UC and PCC set, a fatal record; `mce: CPU supports 7 MCE banks` is no event."""
    got = _mces("journal-mce-uncorrected-pcc-bank4-j5005-EXCERPT.log")
    assert got == [("unknown", "notice", None, None, None),
                   ("fatal", "record", 0, 4, 0xa600000000020408)]


def test_mce_edac_sbridge_record() -> None:
    got = _mces("syslog-mce-edac-sbridge-corrected-scrub-EXCERPT.log")
    assert got == [("unknown", "notice", None, None, None),
                   ("corrected", "record", 1, 11, 0x8c00004f000800c2)]


@pytest.mark.parametrize(("line", "severity"), [
    ("[  301.3] [Hardware Error]: Corrected error, no action required.", "corrected"),
    ("[  0.600082] [Hardware Error]: System Fatal error.", "fatal"),
    ("[  9.1] [Hardware Error]: Uncorrected, software restartable error.", "uncorrected"),
    ("[  9.1] [Hardware Error]: Deferred error, no action required.", "deferred"),
    ("[  9.1] mce: Uncorrected hardware memory error in user-access at af34214200",
     "uncorrected"),
    ("[  9.1] Kernel panic - not syncing: Fatal machine check", "fatal"),
])
def test_mce_severity_lines_hand_written(line: str, severity: str) -> None:
    """The kernel's own wording (mce_amd.c, mce/core.c), one line each."""
    assert [e.severity for e in parse(line + "\n").mces] == [severity]
