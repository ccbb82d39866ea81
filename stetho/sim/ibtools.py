"""What ibstat and perfquery print on a simulated node, rendered from its sysfs IB tree.

Both tools read the same kernel state the sysfs tree shows (ibstat through libibumad's sysfs
reads, perfquery through a MAD to the port), so a simulated node's three views agree unless a
fault makes them differ. The layouts are the recorded ones: ibstat as rdma-core 47 prints it on
the H100 node (tab-indented, `fixtures/real/04-infiniband/ibstat-h100-node-some-ports-down.txt`),
perfquery -x and -E as in `perfquery-x-linkdowned-xmitdiscards.txt` and
`perfquery-E-rcverrordetails-switch-port-clean.txt`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from stetho.parsers import ib_sysfs
from stetho.parsers.ib_common import (
    COUNTERS,
    DATA_COUNTERS,
    PACKET_COUNTERS,
    RCV_ERROR_DETAILS,
    IbDevice,
)

_IBSTAT_STATE = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed"}


def read_tree(sysroot: Path) -> tuple[IbDevice, ...]:
    root = sysroot / "sys/class/infiniband"
    files = {str(f.relative_to(root)): f.read_text(encoding="utf-8")
             for f in sorted(root.rglob("*")) if f.is_file()}
    return ib_sysfs.parse(files) if files else ()


def _guid(key: str) -> str:
    return "0x" + hashlib.sha256(key.encode()).hexdigest()[:16]


def ibstat(devices: tuple[IbDevice, ...],
           overrides: dict[str, dict[str, str]] | None = None) -> str:
    """`overrides`: device -> {"State": "Down", ...}: what ibstat prints instead for its port
    (a disagreement with sysfs)."""
    out = []
    for d in devices:
        edit = (overrides or {}).get(d.name, {})
        guid = _guid(d.name)
        out += [f"CA '{d.name}'", f"\tCA type: {d.hca_type or ''}",
                f"\tNumber of ports: {len(d.ports)}", f"\tFirmware version: {d.fw_ver or ''}",
                "\tHardware version: 0", f"\tNode GUID: {guid}", f"\tSystem image GUID: {guid}"]
        for p in d.ports:
            rate = p.rate_gbps if p.rate_gbps is not None else 0
            state = edit.get("State", _IBSTAT_STATE.get(p.state, p.state))
            phys = edit.get("Physical state", p.phys_state or "Disabled")
            out += [f"\tPort {p.port}:", f"\t\tState: {state}", f"\t\tPhysical state: {phys}",
                    f"\t\tRate: {rate:g}",
                    f"\t\tBase lid: {p.lid or 0}", "\t\tLMC: 0", f"\t\tSM lid: {p.sm_lid or 0}",
                    "\t\tCapability mask: 0xa751e848", f"\t\tPort GUID: {guid}",
                    f"\t\tLink layer: {p.link_layer or 'InfiniBand'}"]
    return "\n".join(out) + "\n"


def _line(name: str, value: object) -> str:
    return f"{name}:".ljust(33, ".") + str(value)


def perfquery_x(device: IbDevice) -> str:
    p = device.ports[0]
    lines = [f"# Port extended counters: Lid {p.lid or 0} port {p.port} "
             "(CapMask: 0x5300 CapMask2: 0x0000002)", _line("PortSelect", p.port),
             _line("CounterSelect", "0x0000")]
    lines += [_line(name, p.data_words.get(name, 0)) for name, _ in DATA_COUNTERS]
    lines += [_line(name, p.packets.get(name, 0)) for name, _ in PACKET_COUNTERS]
    lines.append(_line("CounterSelect2", "0x00000000"))
    lines += [_line(name, p.counters.get(name, 0)) for name, _ in COUNTERS]
    lines.append(_line("QP1Dropped", 0))
    return "\n".join(lines) + "\n"


def perfquery_e(device: IbDevice, errors: dict[str, int] | None = None) -> str:
    p = device.ports[0]
    lines = [f"# PortRcvErrorDetails counters: Lid {p.lid or 0} port {p.port}",
             _line("PortSelect", p.port), _line("CounterSelect", "0x0000")]
    lines += [_line(name, (errors or {}).get(name, 0)) for name in RCV_ERROR_DETAILS]
    return "\n".join(lines) + "\n"
