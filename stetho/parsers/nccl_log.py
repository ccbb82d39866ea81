"""NCCL_DEBUG=INFO logs -> which network NCCL really used.

A job that silently falls back from InfiniBand/RoCE to TCP sockets still runs, only many times
slower; the INFO lines are where that shows (`NET/IB : No device found.` then `Using network
Socket`). This parser reads the version, the transport, the IB devices (and their SHARP/RoCE
flags), the socket interfaces and the WARN lines, whatever else the log is interleaved with.
"""

from __future__ import annotations

import re
from typing import Literal

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import guarded

TOOL = "NCCL_DEBUG=INFO log"

Transport = Literal["IB", "Socket"]

_LEADING_TAGS = re.compile(r"^(?:\s*\[\d+(?:,\d+)*\](?:<std(?:out|err)>:?)?)+")
_LOG = re.compile(
    r"^(?:(?P<host>[^\s:]+):\d+:\d+\s+\[\d+\]\s+)?NCCL (?P<level>INFO|WARN) ?(?P<msg>.*)$"
)
_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_DRIVER = re.compile(r"\bcudaDriverVersion (\d+)")
_NETWORK = re.compile(r"^Using network (.+?)\s*$")
_NET_IB = re.compile(r"^NET/IB\s*:\s*Using\b(.*)$")
_NET_SOCKET = re.compile(r"^NET/Socket\s*:\s*Using\b(.*)$")
_IB_NONE = re.compile(r"^NET/IB\s*:\s*No device found")
_IB_TRIED = re.compile(r"^NET/IB\b|libibverbs|^P2P plugin IB|^NET/Plugin")
_IB_DEV = re.compile(r"\[\d+\]([^\s\[/;]+)((?:/[^\s\[/;]+)*)")
_SOCK_IF = re.compile(r"\[\d+\]([^\s:\[\]]+):(\S+?)<\d+>")


@record
class NcclLog:
    """What an NCCL_DEBUG=INFO log says about the NCCL build and the network it chose."""

    nccl_version: str | None  # "2.20.5"
    cuda_version: str | None  # the CUDA NCCL was built for: "12.4" from "+cuda12.4"
    cuda_driver_version: str | None  # "12.4" from "cudaDriverVersion 12040"
    transport: Transport | None  # the slowest network any rank chose
    net_plugin: str | None  # first "Using network X": "IB", "IBext", "Socket", "AWS Libfabric"
    networks: tuple[str, ...]  # every distinct "Using network X", in order
    ib_devices: tuple[str, ...]  # ("mlx5_0:1", ...) from "NET/IB : Using [0]mlx5_0:1/IB/SHARP"
    sharp: bool  # an IB device carries the /SHARP flag (HPC-X rdma-sharp plugin)
    roce: bool  # an IB device runs over RoCE (/RoCE flag)
    socket_interfaces: tuple[str, ...]  # ("eth0",) from "NET/Socket : Using [0]eth0:172.17.0.2<0>"
    socket_addresses: tuple[str, ...]  # ("172.17.0.2",), parallel to socket_interfaces
    ib_not_found: bool  # "NET/IB : No device found."
    fell_back_to_socket: bool  # IB was looked for but the data went over sockets
    warnings: tuple[str, ...]  # NCCL WARN lines, verbatim less any mpirun tag
    hosts: tuple[str, ...]  # hostnames in the line prefixes, in order of appearance


@record
class NcclVersion:
    """The NCCL a process ran with, as the library itself printed it."""

    version: str  # "2.28.9"
    cuda: str | None  # the CUDA it was built for: "13.0" from "+cuda13.0"


def find_version(text: str | bytes) -> NcclVersion | None:
    """The first `NCCL version X.Y.Z[+cudaA.B]` anywhere in the text: an INFO line, the bare
    banner NCCL prints at NCCL_DEBUG=WARN or VERSION (no INFO lines at all), or nccl-tests
    output around it. None when the text has none; ParseError only for empty or binary input.
    """
    def find(data: str) -> NcclVersion | None:
        m = _VERSION.search(data)
        return NcclVersion(m.group(1), m.group(2)) if m else None

    return guarded(TOOL, text, find)


def parse(text: str | bytes) -> NcclLog:
    """Parse any text holding NCCL INFO/WARN lines (a log, or nccl-tests output with them)."""
    return guarded(TOOL, text, _parse)


def _parse(data: str) -> NcclLog:
    nccl_version = cuda_version = driver = None
    networks: list[str] = []
    ib_devices: list[str] = []
    flags: set[str] = set()
    ifaces: list[tuple[str, str]] = []
    warnings: list[str] = []
    hosts: list[str] = []
    lines = ib_none = ib_tried = 0
    for raw in data.splitlines():
        line = _LEADING_TAGS.sub("", raw).strip()
        if nccl_version is None and (v := _VERSION.search(line)):
            nccl_version, cuda_version = v.group(1), v.group(2)
        m = _LOG.match(line)
        if not m:
            continue
        lines += 1
        msg = m.group("msg").strip()
        if m.group("host") and m.group("host") not in hosts:
            hosts.append(m.group("host"))
        if m.group("level") == "WARN":
            warnings.append(line)
        if driver is None and (d := _DRIVER.search(msg)):
            code = int(d.group(1))
            driver = f"{code // 1000}.{code % 1000 // 10}"
        if (n := _NETWORK.match(msg)) and n.group(1) not in networks:
            networks.append(n.group(1))
        if ib := _NET_IB.match(msg):
            for name, flag_text in _IB_DEV.findall(ib.group(1).split(";")[0]):
                if name not in ib_devices:
                    ib_devices.append(name)
                flags.update(f.upper() for f in flag_text.split("/") if f)
        elif s := _NET_SOCKET.match(msg):
            for pair in _SOCK_IF.findall(s.group(1)):
                if pair not in ifaces:
                    ifaces.append(pair)
        ib_none += bool(_IB_NONE.match(msg))
        ib_tried += bool(_IB_TRIED.search(msg))
    if not lines:
        raise ParseError(TOOL, "no 'NCCL INFO' or 'NCCL WARN' lines: not an NCCL_DEBUG=INFO log")
    transport = _transport(networks, bool(ib_devices), bool(ifaces))
    return NcclLog(
        nccl_version=nccl_version, cuda_version=cuda_version, cuda_driver_version=driver,
        transport=transport, net_plugin=networks[0] if networks else None,
        networks=tuple(networks), ib_devices=tuple(ib_devices), sharp="SHARP" in flags,
        roce="ROCE" in flags, socket_interfaces=tuple(i for i, _ in ifaces),
        socket_addresses=tuple(a for _, a in ifaces), ib_not_found=ib_none > 0,
        fell_back_to_socket=transport == "Socket" and (ib_none > 0 or ib_tried > 0),
        warnings=tuple(warnings), hosts=tuple(hosts),
    )


def _transport(networks: list[str], ib_used: bool, socket_used: bool) -> Transport | None:
    """Socket if any rank chose it (one slow rank gates every collective), else IB, else None."""
    kinds = {"Socket" if n.lower() == "socket" else "IB" if n.lower().startswith("ib") else "?"
             for n in networks}
    if "Socket" in kinds:
        return "Socket"
    if "IB" in kinds:
        return "IB"
    if networks:
        return None  # another plugin (e.g. AWS Libfabric): neither IB verbs nor sockets
    if socket_used and not ib_used:
        return "Socket"
    return "IB" if ib_used else None
