"""Parse files read from /sys/class/infiniband: HCA firmware, port state, rate and counters.

sysfs needs no InfiniBand user tools, so it is the source stetho trusts first. The collector hands
over a mapping of path -> file content; paths are relative to /sys/class/infiniband (the
collector's absolute `/sys/class/infiniband/...` form is accepted too). Counter files are renamed
to perfquery names (ib_common.COUNTERS) so checks speak one vocabulary; `hw_counters/*` (driver
specific, e.g. mlx5 `out_of_buffer`) go to `IbPort.hw_counters` under their file names. Files
stetho does not use (gids, pkeys, node_guid, ...) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from stetho.parsers import ParseError
from stetho.parsers.ib_common import (
    DATA_COUNTERS,
    PACKET_COUNTERS,
    SYSFS_TO_PERFQUERY,
    IbDevice,
    IbPort,
    PortFieldError,
    build_port,
    natural_key,
)

__all__ = ["IbDevice", "parse"]

TOOL = "/sys/class/infiniband"

_PREFIX = "sys/class/infiniband/"
_ABSOLUTE = "/" + _PREFIX
_ABSOLUTE_LEN = len(_ABSOLUTE)
_PERFQUERY_NAME = SYSFS_TO_PERFQUERY
_COUNT = re.compile(r"^\d+$")
_LID = re.compile(r"^(?:0x[0-9a-fA-F]+|\d+)$")
_DATA = frozenset(p for p, _ in DATA_COUNTERS)
_PACKETS = frozenset(p for p, _ in PACKET_COUNTERS)
T = TypeVar("T")
_DEVICE_FILES = ("fw_ver", "hca_type", "board_id")
_PORT_FILES = frozenset({"state", "phys_state", "rate", "link_layer", "lid", "sm_lid"})


class _Port:
    def __init__(self) -> None:
        self.files: dict[str, tuple[str, str]] = {}  # name -> (path, value)
        self.counters: dict[str, int] = {}
        self.data_words: dict[str, int] = {}
        self.packets: dict[str, int] = {}
        self.hw_counters: dict[str, int] = {}


class _Device:
    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.ports: dict[int, _Port] = {}


def parse(files: Mapping[str, str]) -> tuple[IbDevice, ...]:
    """Parse a {relative path: content} mapping; {} (no /sys/class/infiniband) gives ()."""
    if not files:
        return ()
    devices: dict[str, _Device] = {}
    for raw_path, content in files.items():
        # The collector's absolute form, read without _relative's general steps.
        if raw_path.startswith(_ABSOLUTE) and not raw_path[-1].isspace():
            path = raw_path[_ABSOLUTE_LEN:].removeprefix("./")
        else:
            path = _relative(raw_path)
        if not isinstance(content, str):
            raise ParseError(TOOL, f"{path}: content is not text")
        if "\x00" in content:
            raise ParseError(TOOL, f"{path}: binary content (NUL bytes)")
        parts = path.split("/")
        if len(parts) < 2 or not all(parts):
            continue
        dev = devices.get(parts[0])  # not setdefault(_Device()): a new one per file read
        if dev is None:
            dev = devices[parts[0]] = _Device()
        value = content.strip()
        # Most files are ports/N/counters/<name> holding a count: added here, not in _add.
        if len(parts) == 5 and parts[1] == "ports" and parts[3] == "counters" \
                and parts[2].isdigit() and _COUNT.match(value):
            port = dev.ports.get(int(parts[2]))
            if port is not None:
                pq = _PERFQUERY_NAME.get(parts[4], parts[4])
                target = port.data_words if pq in _DATA \
                    else port.packets if pq in _PACKETS else port.counters
                target[pq] = int(value)
                continue
        _add(dev, parts, path, value)
    devices = {n: d for n, d in devices.items() if d.files or d.ports}
    if not devices:
        raise ParseError(TOOL, f"no InfiniBand device files among {len(files)} paths "
                               f"(first: {next(iter(files))!r})")
    return tuple(_device(name, devices[name]) for name in sorted(devices, key=natural_key))


def _relative(path: str) -> str:
    p = path.strip()
    if p.startswith("/"):
        p = p.lstrip("/")
        if not p.startswith(_PREFIX):
            raise ParseError(TOOL, f"{path}: not under /sys/class/infiniband")
        p = p[len(_PREFIX):]
    return p.removeprefix("./")


def _add(dev: _Device, parts: list[str], path: str, value: str) -> None:
    if len(parts) == 2:
        if parts[1] in _DEVICE_FILES:
            dev.files[parts[1]] = value
        return
    if parts[1] != "ports" or len(parts) < 4:
        return
    if not parts[2].isdigit():
        raise ParseError(TOOL, f"{path}: port directory {parts[2]!r} is not a number")
    number = int(parts[2])
    port = dev.ports.get(number)
    if port is None:
        port = dev.ports[number] = _Port()
    if len(parts) == 4:
        if parts[3] in _PORT_FILES:
            port.files[parts[3]] = (path, value)
        return
    if len(parts) != 5 or parts[3] not in ("counters", "hw_counters"):
        return
    if not _COUNT.match(value):
        raise ParseError(TOOL, f"{path}: counter is not a count: {value[:40]!r}")
    name, count = parts[4], int(value)
    if parts[3] == "hw_counters":
        port.hw_counters[name] = count
        return
    pq = SYSFS_TO_PERFQUERY.get(name, name)
    target = port.data_words if pq in _DATA else port.packets if pq in _PACKETS else port.counters
    target[pq] = count


def _device(name: str, dev: _Device) -> IbDevice:
    return IbDevice(
        name=name,
        fw_ver=dev.files.get("fw_ver") or None,
        hca_type=dev.files.get("hca_type") or None,
        board_id=dev.files.get("board_id") or None,
        ports=tuple(_port(name, num, dev.ports[num]) for num in sorted(dev.ports)),
    )


def _port(device: str, num: int, p: _Port) -> IbPort:
    if "state" not in p.files:
        raise ParseError(TOOL, f"{device}/ports/{num}/state missing")
    lid = _read(p, "lid", _lid)
    sm_lid = _read(p, "sm_lid", _lid)
    texts = {key: value for key, (_, value) in p.files.items()}
    try:
        return build_port(device, num, state=texts["state"], phys=texts.get("phys_state"),
                          rate=texts.get("rate"), layer=texts.get("link_layer"), lid=lid,
                          sm_lid=sm_lid, counters=p.counters, data_words=p.data_words,
                          packets=p.packets, hw_counters=p.hw_counters)
    except PortFieldError as exc:
        raise ParseError(TOOL, f"{p.files[exc.field][0]}: {exc}") from None


def _read(p: _Port, key: str, convert: Callable[[str], T]) -> T | None:
    """convert(content of ports/N/<key>), None when the file was not read; errors name the path."""
    if key not in p.files:
        return None
    path, value = p.files[key]
    try:
        return convert(value)
    except ValueError as exc:
        raise ParseError(TOOL, f"{path}: {exc}") from None


def _lid(value: str) -> int:
    """sysfs lids read '0x33bf'."""
    if not _LID.match(value):
        raise ValueError(f"not a lid: {value[:40]!r}")
    return int(value, 16) if value.lower().startswith("0x") else int(value)
