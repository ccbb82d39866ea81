"""Kernel log parser: the GPU and PCIe faults a node reports only in dmesg or the journal.

Xid events, PCIe AER errors, GPUs that fell off the bus and OOM kills are what a technician
greps for; this does it once, for every timestamp style seen in the field (`[uptime]`, ctime,
ISO with a comma, `dmesg --decode` prefixes, syslog/journal, raw /dev/kmsg, none at all), and
joins the indented continuation lines of multi-line NVRM messages.
"""

from __future__ import annotations

import re
import textwrap
from datetime import datetime, timedelta, timezone
from typing import Literal

from stetho.core.record import record
from stetho.parsers import ParseError, mce, sxid
from stetho.parsers._text import require_text

TOOL = "kernel log"

AerSeverity = Literal["corrected", "uncorrected-nonfatal", "uncorrected-fatal"]


@record
class XidEvent:
    pci_id: str  # "0000:19:00": domain:bus:device, lower case, as NVRM prints it
    code: int
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None  # the stamp as printed (ISO, ctime, uptime seconds)
    line: str
    time: datetime | None = None  # absolute UTC time, where the stamp carries date and offset
    seq: int = 0  # the record's position in the log: orders events that have no time


@record
class AerEvent:
    device: str  # "0000:00:02.0": the device that logged it (often the root port)
    severity: AerSeverity
    error_type: str  # "Data Link Layer", "Transaction Layer", "Physical Layer"
    errors: tuple[str, ...]  # ("Replay Timer Timeout",) from the "[12] ..." detail lines
    vendor_device: str | None  # "8086:6f04"
    timestamp: str | None
    line: str


@record
class BusLoss:
    """One message saying a GPU fell off the bus: an Xid 79, or NVRM's multi-line text without
    an Xid. The driver often logs both for one loss, so count GPUs, not BusLoss entries."""

    pci_id: str  # normalised like XidEvent.pci_id
    line: str
    time: datetime | None = None
    seq: int = 0


@record
class GpuInit:
    """A line that shows the driver (re)initialised a GPU: everything the log says about that
    GPU before it is from an earlier epoch.

    `driver-load` ("NVRM: loading NVIDIA UNIX ... Kernel Module") starts every GPU's epoch.
    `gpu-identity` ("NVRM: GPU at PCI:0000:19:00: GPU-<uuid>") is printed once per GPU per
    driver initialisation of it, just before that GPU's first Xid (open-gpu-kernel-modules,
    kernel_rc.c `_krcLogUuidOnce`): a second one for the same GPU means it was re-initialised
    (reset) after the Xids logged before it. Its own time is that of the next Xid, not of the
    reset, so it bounds the reset from above."""

    pci_id: str | None  # None: a driver load, every GPU
    kind: Literal["driver-load", "gpu-identity"]
    time: datetime | None
    seq: int
    line: str


@record
class OomKill:
    pid: int
    process: str
    line: str


@record
class KernelLog:
    xids: tuple[XidEvent, ...]
    aer: tuple[AerEvent, ...]
    fallen_off_bus: tuple[BusLoss, ...]
    oom_kills: tuple[OomKill, ...]
    lines: int  # log records read (continuation lines joined, journal markers left out)
    inits: tuple[GpuInit, ...] = ()
    sxids: tuple[sxid.SxidEvent, ...] = ()  # NVSwitch errors (stetho.parsers.sxid)
    mces: tuple[mce.MceEvent, ...] = ()  # machine checks (stetho.parsers.mce)

    def epoch_start(self, pci_bus_id: str) -> GpuInit | None:
        """The last line that (re)initialised this GPU (a driver load, or its identity line
        printed again), or None when the log shows none."""
        key = _bdf(pci_bus_id)[:3]
        mine = [i for i in self.inits if i.pci_id is None or _bdf(i.pci_id)[:3] == key]
        return mine[-1] if mine else None

    def xids_for(self, pci_bus_id: str) -> tuple[XidEvent, ...]:
        """Xids of one GPU, given e.g. nvidia-smi's "00000000:19:00.0" (or "0000:19:00")."""
        key = _bdf(pci_bus_id)[:3]
        return tuple(x for x in self.xids if _bdf(x.pci_id)[:3] == key)

    def aer_for(self, pci: str) -> tuple[AerEvent, ...]:
        """AER events logged by one device; a function number is matched only when given."""
        want = _bdf(pci)
        out = []
        for e in self.aer:
            have = _bdf(e.device)
            if have[:3] == want[:3] and (want[3] is None or want[3] == have[3]):
                out.append(e)
        return tuple(out)

    def fallen_off_bus_for(self, pci_bus_id: str) -> tuple[BusLoss, ...]:
        """Bus-loss messages of one GPU, matched like `xids_for`."""
        key = _bdf(pci_bus_id)[:3]
        return tuple(b for b in self.fallen_off_bus if _bdf(b.pci_id)[:3] == key)


# --- PCI addresses -------------------------------------------------------------------------

_BDF = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
    r"(?:\.(?P<fn>[0-7]))?$"
)


def _bdf(text: str) -> tuple[int, int, int, int | None]:
    """(domain, bus, device, function or None); raises ValueError on a malformed address."""
    m = _BDF.match(text.strip().removeprefix("PCI:"))
    if m is None:
        raise ValueError(f"not a PCI address: {text!r}")
    fn = m.group("fn")
    return (
        int(m.group("dom") or "0", 16),
        int(m.group("bus"), 16),
        int(m.group("dev"), 16),
        None if fn is None else int(fn),
    )


def _norm_pci(text: str) -> str:
    dom, bus, dev, _ = _bdf(text)
    return f"{dom:04x}:{bus:02x}:{dev:02x}"


# --- line prefixes -------------------------------------------------------------------------

_ISO = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[,.]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_FACILITY = "kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7]"
_LEVEL = "emerg|alert|crit|err|warn|notice|info|debug"
_PREFIXES: tuple[tuple[re.Pattern[str], bool], ...] = (
    # (pattern, group "ts" is a timestamp worth keeping)
    (re.compile(rf"^(?:{_FACILITY})\s*:(?:{_LEVEL})\s*:\s"), False),  # dmesg --decode
    (re.compile(r"^(?P<ts>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s+(?:[^\s:]+\s+)?"
                r"[\w./-]+(?:\[\d+\])?: "), True),  # syslog / journalctl short (host optional)
    (re.compile(rf"^(?P<ts>{_ISO}) \S+ [\w./-]+(?:\[\d+\])?: "), True),  # journalctl short-iso
    (re.compile(rf"^(?P<ts>{_ISO})\s"), True),  # dmesg --time-format=iso
    (re.compile(r"^\[\s*(?P<ts>\d+\.\d+)\]\s?"), True),  # dmesg [uptime]
    (re.compile(r"^\[(?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?"),
     True),  # dmesg -T
    (re.compile(r"^\d+,\d+,(?P<us>\d+),[^;]*;"), True),  # raw /dev/kmsg
    (re.compile(r"^kernel: "), False),
)
_JOURNAL_MARKER = re.compile(r"^-- .* --$|^-- No entries --$")
# Messages that are kernel log lines even without any prefix (kmsg excerpts, dmesg -t).
_KERNEL_MESSAGE = re.compile(
    r"^(?:NVRM: |nvidia-\w+ |\S+ [0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: |"
    r"Out of memory|Memory cgroup out of memory|oom-kill:|oom_reaper:|Killed process )"
)


def _peel(line: str) -> tuple[str, str | None, bool]:
    """Strip the known prefixes: (message, first timestamp, whether any prefix was found)."""
    ts: str | None = None
    found = False
    progress = True
    while progress:
        progress = False
        for pattern, keeps_ts in _PREFIXES:
            m = pattern.match(line)
            if m is None:
                continue
            if keeps_ts and ts is None:
                groups = m.groupdict()
                ts = groups.get("ts") or f"{int(groups['us']) / 1e6:.6f}"
            line = line[m.end():]
            found = progress = True
            break
    return line, ts, found


@record(frozen=False)
class _Record:
    message: str
    timestamp: str | None
    raw: list[str]
    seq: int = 0


def _records(text: str) -> tuple[list[_Record], int]:
    """Log records with continuation lines joined, and how many lines looked like kernel log."""
    records: list[_Record] = []
    looking = 0
    for raw in textwrap.dedent(text.replace("\r\n", "\n")).split("\n"):
        stripped = raw.rstrip()
        if not stripped.strip():
            continue
        if _JOURNAL_MARKER.match(stripped.strip()):
            looking += 1
            continue
        message, ts, found = _peel(stripped)
        if not found and raw[:1] in (" ", "\t") and records:
            cont = message.strip().removeprefix("NVRM: ")
            records[-1].message += " " + cont
            records[-1].raw.append(stripped)
            continue
        if found or _KERNEL_MESSAGE.match(message):
            looking += 1
        records.append(_Record(message.strip(), ts, [stripped], len(records)))
    return records, looking


_ABS = re.compile(
    r"^(?P<date>\d{4}-\d\d-\d\d)[T ](?P<time>\d\d:\d\d:\d\d)(?:[,.](?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)$"
)


def absolute_time(stamp: str | None) -> datetime | None:
    """A printed stamp as an absolute UTC time, or None when it is not one.

    Only ISO stamps with an offset are absolute: `dmesg --time-format=iso`
    ("2024-11-15T12:02:03,470068+00:00") and `journalctl -o short-iso`
    ("2024-11-15T12:02:03+0000"). Uptime seconds, ctime and syslog stamps have no date or no
    zone: their time is unknown, never guessed."""
    if stamp is None:
        return None
    m = _ABS.match(stamp.strip())
    if m is None:
        return None
    tz = m.group("tz")
    if tz == "Z":
        offset = timedelta(0)
    else:
        sign = -1 if tz[0] == "-" else 1
        digits = tz[1:].replace(":", "")
        offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    frac = (m.group("frac") or "0")[:6].ljust(6, "0")
    try:
        naive = datetime.fromisoformat(f"{m.group('date')}T{m.group('time')}.{frac}")
    except ValueError:  # 2024-13-45: looks like a stamp, is not a time
        return None
    return naive.replace(tzinfo=timezone(offset)).astimezone(timezone.utc)


# --- events --------------------------------------------------------------------------------

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?\)"
    r": (?P<code>\d+),\s*(?P<rest>.*)$"
)
_PID = re.compile(r"^pid=(?P<q>'?)(?P<pid><unknown>|\d+)(?P=q),\s*")
_NAME = re.compile(r"^name=(?P<name><unknown>|[^,]*),\s*")
_DEVICE = re.compile(
    r"^\S+ (?P<dev>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?(?P<rest>.*)$"
)
_AER = re.compile(r"^PCIe Bus Error: severity=(?P<sev>[^,]+), type=(?P<type>[^,]+)")
_AER_DEVICE = re.compile(r"^\s*device \[(?P<vd>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\]")
_AER_DETAIL = re.compile(r"^\s*\[\s*\d+\]\s*(?P<err>.*?)\s*(?:\(First\))?\s*$")
_FALLEN = re.compile(r"fallen off the bus", re.IGNORECASE)
_ANY_PCI = re.compile(
    r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
)
_OOM_KILLED = re.compile(r"\bKilled process (?P<pid>\d+) \((?P<name>[^)]*)\)")
_DRIVER_LOAD = re.compile(r"^NVRM: loading NVIDIA UNIX\b.*\bKernel Module\b")
_GPU_IDENTITY = re.compile(
    r"^NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}): GPU-[0-9a-fA-F-]+"
)
_OOM_KILL = re.compile(r"^oom-kill:.*?\btask=(?P<name>[^,]*),pid=(?P<pid>\d+)")


def _aer_severity(text: str) -> AerSeverity | None:
    t = text.strip().lower()
    if t.startswith(("corrected", "correctable")):
        return "corrected"
    if not t.startswith("uncorrect"):
        return None
    if "non-fatal" in t or "nonfatal" in t:
        return "uncorrected-nonfatal"
    return "uncorrected-fatal" if "fatal" in t else None


def _xid(rec: _Record, m: re.Match[str]) -> XidEvent:
    rest = m.group("rest").strip()
    pid: int | None = None
    process: str | None = None
    pm = _PID.match(rest)
    if pm is not None:
        pid = None if pm.group("pid") == "<unknown>" else int(pm.group("pid"))
        rest = rest[pm.end():]
    nm = _NAME.match(rest)
    if nm is not None:
        name = nm.group("name").strip()
        process = None if name in ("<unknown>", "") else name
        rest = rest[nm.end():]
    return XidEvent(
        pci_id=_norm_pci(m.group("pci")),
        code=int(m.group("code")),
        pid=pid,
        process=process,
        message=rest.strip(),
        timestamp=rec.timestamp,
        line="\n".join(rec.raw),
        time=absolute_time(rec.timestamp),
        seq=rec.seq,
    )


@record(frozen=False)
class _Aer:
    device: str
    severity: AerSeverity
    error_type: str
    timestamp: str | None
    line: str
    vendor_device: str | None = None
    errors: list[str] | None = None

    def freeze(self) -> AerEvent:
        return AerEvent(self.device, self.severity, self.error_type, tuple(self.errors or ()),
                        self.vendor_device, self.timestamp, self.line)


def _oom(message: str, line: str, kills: list[OomKill]) -> None:
    m = _OOM_KILLED.search(message) or _OOM_KILL.match(message)
    if m is None:
        return
    kill = OomKill(pid=int(m.group("pid")), process=m.group("name"), line=line)
    if kills and kills[-1].pid == kill.pid:
        # One kill prints an "oom-kill:" summary and a "Killed process" line: keep the latter.
        if _OOM_KILLED.search(message):
            kills[-1] = kill
        return
    kills.append(kill)


def parse(data: str | bytes) -> KernelLog:
    """Parse dmesg / journalctl -k / syslog text into Xid, AER, bus-loss and OOM events."""
    text = require_text(TOOL, data)
    try:
        records, looking = _records(text)
        if looking == 0:
            raise ParseError(TOOL, "no kernel log lines (no dmesg/journal prefix or NVRM message)")
        xids: list[XidEvent] = []
        lost: list[BusLoss] = []
        inits: list[GpuInit] = []
        kills: list[OomKill] = []
        sxids: list[sxid.SxidEvent] = []
        mces: list[mce.MceEvent] = []
        aer: list[_Aer] = []
        open_aer: dict[str, _Aer] = {}  # device -> its latest event, for the detail lines
        for rec in records:
            msg, line = rec.message, "\n".join(rec.raw)
            xm = _XID.search(msg)
            if xm is not None:
                event = _xid(rec, xm)
                xids.append(event)
                if event.code == 79:
                    lost.append(BusLoss(event.pci_id, line, event.time, rec.seq))
                continue
            if (sm := sxid.match(msg)) is not None:
                ev = sxid.event(sm, rec.timestamp, absolute_time(rec.timestamp), line, rec.seq)
                sxids += [ev] if ev else []
                continue
            if _FALLEN.search(msg):
                pm = _ANY_PCI.search(msg)
                if pm is not None:
                    lost.append(BusLoss(_norm_pci(pm.group("pci")), line,
                                        absolute_time(rec.timestamp), rec.seq))
                continue
            init = _init(rec)
            if init is not None:
                inits.append(init)
                continue
            dm = _DEVICE.match(msg)
            if dm is not None:
                _aer_line(dm.group("dev").lower(), dm.group("rest"), rec, aer, open_aer)
                continue
            if (me := mce.event(msg, rec.timestamp, absolute_time(rec.timestamp), line,
                                rec.seq)) is not None:
                mces.append(me)
                continue
            _oom(msg, line, kills)
        return KernelLog(
            xids=tuple(xids),
            aer=tuple(a.freeze() for a in aer),
            fallen_off_bus=tuple(lost),
            oom_kills=tuple(kills),
            lines=len(records),
            inits=tuple(inits), sxids=tuple(sxids), mces=tuple(mces),
        )
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        if isinstance(exc, ParseError):
            raise
        raise ParseError(TOOL, f"unexpected kernel log content: {exc}") from None


def _init(rec: _Record) -> GpuInit | None:
    line = "\n".join(rec.raw)
    if _DRIVER_LOAD.match(rec.message):
        return GpuInit(None, "driver-load", absolute_time(rec.timestamp), rec.seq, line)
    m = _GPU_IDENTITY.match(rec.message)
    if m is not None:
        return GpuInit(_norm_pci(m.group("pci")), "gpu-identity", absolute_time(rec.timestamp),
                       rec.seq, line)
    return None


def _aer_line(
    dev: str, rest: str, rec: _Record, aer: list[_Aer], open_aer: dict[str, _Aer]
) -> None:
    """A device line: a new AER event, or the vendor id / error names of the device's last one."""
    am = _AER.match(rest)
    if am is not None:
        severity = _aer_severity(am.group("sev"))
        if severity is None:
            return
        event = _Aer(dev, severity, am.group("type").strip(), rec.timestamp, "\n".join(rec.raw))
        aer.append(event)
        open_aer[dev] = event
        return
    current = open_aer.get(dev)
    if current is None:
        return
    vm = _AER_DEVICE.match(rest)
    if vm is not None:
        current.vendor_device = vm.group("vd").lower()
        return
    em = _AER_DETAIL.match(rest)
    if em is not None and em.group("err"):
        current.errors = [*(current.errors or []), em.group("err")]
