"""InfiniBand facts: where a node's HCAs, ports and counters come from, and whether the sources
agree.

/sys/class/infiniband is the source of port state, rate, link layer, firmware and counters.
Where the tree is absent (a container, an older kernel) ibstat gives the ports and firmware and
each HCA's perfquery its counters, so such a node is judged instead of erroring. Where both
exist, ibstat is a cross-check: a disagreement warns. Each per-device output (perfquery,
mlxlink) is parsed on its own, so one bad output errors that device only. Where sysfs and
perfquery both read an error counter, `port_counters` keeps the higher (counters only grow):
the check judges it and history records it, the same number.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import TYPE_CHECKING

from stetho.core.record import record
from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.base import Facts as NodeFacts
    from stetho.parsers.ib_common import IbDevice, IbPort
    from stetho.parsers.ibstat import IbstatReport
    from stetho.parsers.mlxlink import MlxlinkReport
    from stetho.parsers.perfquery import PerfqueryPort


def load_devices(f: NodeFacts) -> tuple[IbDevice, ...]:
    from stetho.parsers import ib_sysfs

    try:
        files = f.files("ib_sysfs")
    except Unavailable as u:
        if u.status != "skip":
            raise
        from_ibstat = _from_ibstat(f)
        if from_ibstat:
            return from_ibstat
        if f.expected.ib_ports:
            raise Unavailable("error", f"{u.reason}, but profile {f.expected.profile} expects "
                              f"{f.expected.ib_ports} InfiniBand ports", "ib_sysfs") from None
        raise
    devices = ib_sysfs.parse(files)
    if not devices:
        raise Unavailable("skip", "no InfiniBand/RDMA devices on this node", "ib_sysfs")
    return devices


def _from_ibstat(f: NodeFacts) -> tuple[IbDevice, ...]:
    """ibstat's CAs, each port's counters from that HCA's perfquery where it parsed (a port
    whose perfquery did not is left without counters: ib_counters names why)."""
    try:
        report = f.ibstat()
    except Unavailable as u:
        if u.status == "skip":
            return ()
        raise
    out = []
    for d in report.devices:
        ports: list[IbPort] = []
        for port in d.ports:
            try:
                pq = f.perfquery(d.name)
            except Unavailable:
                pq = None
            if pq is not None and port.port == pq.port:
                port = replace(port, counters=dict(pq.counters),
                               data_words=dict(pq.data_words), packets=dict(pq.packets))
            ports.append(port)
        out.append(replace(d, ports=tuple(ports)))
    return tuple(out)


def load_ibstat(f: NodeFacts) -> IbstatReport:
    from stetho.parsers import ibstat

    rec = f.record("ibstat")
    if rec.status == "failed" and rec.stdout.strip():
        return ibstat.parse(rec.stdout + "\n" + rec.stderr)  # ibpanic is printed on stderr
    return ibstat.parse(f.text("ibstat"))


def disagreements(f: NodeFacts) -> dict[str, list[str]]:
    """Per port id, where ibstat and sysfs disagree (state, physical state, rate, link layer,
    firmware); {} when only one of them exists. Either may be the wrong one: a disagreement
    warns, it does not pick a side."""
    devices = f.ib_devices()
    if not devices or devices[0].source != "sysfs":
        return {}
    try:
        report = f.ibstat()
    except Unavailable:
        return {}
    theirs = {d.name: d for d in report.devices}
    out: dict[str, list[str]] = {}
    for d in devices:
        other = theirs.get(d.name)
        for p in d.ports:
            diffs = out.setdefault(p.id, [])
            q = None if other is None else next((x for x in other.ports if x.port == p.port),
                                                None)
            if other is None or q is None:
                diffs.append(f"ibstat does not list {p.id}")
                continue
            for what, mine, seen in (("state", p.state, q.state),
                                     ("physical state", p.phys_state, q.phys_state),
                                     ("rate", p.rate_gbps, q.rate_gbps),
                                     ("link layer", p.link_layer, q.link_layer),
                                     ("firmware", d.fw_ver, other.fw_ver)):
                if mine is not None and seen is not None and mine != seen:
                    diffs.append(f"{what} {mine:g} in sysfs, {seen:g} in ibstat"
                                 if isinstance(mine, float) and isinstance(seen, float)
                                 else f"{what} {mine} in sysfs, {seen} in ibstat")
    return {k: v for k, v in out.items() if v}


def load_perfquery(f: NodeFacts, probe: str, device: str) -> PerfqueryPort:
    from stetho.parsers import perfquery

    name = f"{probe}:{device}"
    if f.bundle.probe(name) is None:
        f.text(probe)  # raises why it did not run (the tool is missing: skip), or that the
        raise Unavailable("skip", f"{probe} was not run on {device}", name)  # probe is absent
    blocks = perfquery.parse(f.text(name))
    if not blocks:
        raise Unavailable("error", f"{name}: perfquery printed no counter block", name)
    return blocks[0]


def load_mlxlink(f: NodeFacts, device: str) -> MlxlinkReport:
    from stetho.parsers import mlxlink

    name = f"mlxlink:{device}"
    if f.bundle.probe(name) is None:
        f.text("mlxlink")  # raises: MFT is missing (skip), why it did not run, or not collected
        raise Unavailable("error", f"mlxlink gave no report for {device}", name)
    return mlxlink.parse(f.text(name), device=device, port=1)


@record
class Reading:
    """One error counter as judged: the higher of its readings and the source that read it;
    `others` holds the other sources' readings where they differ (source -> value)."""

    value: int
    source: str
    others: tuple[tuple[str, int], ...] = ()

    def describe(self, name: str) -> str:
        """'SymbolErrorCounter=5000' or, where the sources disagree,
        'SymbolErrorCounter=5000 (perfquery -x; sysfs read 0)'."""
        if not self.others:
            return f"{name}={self.value}"
        seen = ", ".join(f"{src} read {v}" for src, v in self.others)
        return f"{name}={self.value} ({self.source}; {seen})"


@record
class PortCounters:
    """A port's error counters by perfquery name, each the higher of sysfs (or, on a node
    without the sysfs tree, the perfquery that stood in for it) and perfquery -x / -E; `notes`
    say which perfquery could not be read; `disagree` names the counters whose sources differ."""

    readings: dict[str, Reading] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def values(self) -> dict[str, int]:
        return {k: r.value for k, r in self.readings.items()}

    @property
    def disagree(self) -> dict[str, Reading]:
        return {k: r for k, r in self.readings.items() if r.others}


def port_counters(f: NodeFacts, port: IbPort) -> PortCounters:
    """One port's error counters from every source that read them, merged: where two read the
    same counter, the higher is the reading (a counter only grows; the lower one was read
    earlier, or is stale). Port 1 is the port perfquery asks."""
    base = "sysfs" if f.ib_source() == "sysfs" else "perfquery -x"
    readings = {k: Reading(v, base) for k, v in port.errors().items()}
    notes: list[str] = []
    if port.port != 1:
        return PortCounters(readings)
    for label, load in (("perfquery -x", f.perfquery), ("perfquery -E", f.rcv_error_details)):
        try:
            seen = load(port.device).errors()
        except Unavailable as u:
            if u.status != "skip":
                notes.append(f"{label} on {port.device}: {u.reason}")
            continue
        for k, v in seen.items():
            now = readings.get(k)
            if now is None:
                readings[k] = Reading(v, label)
            elif v > now.value:
                readings[k] = Reading(v, label, (*now.others, (now.source, now.value)))
            elif v < now.value:
                readings[k] = Reading(now.value, now.source, (*now.others, (label, v)))
    return PortCounters(readings, tuple(notes))


def firmware_devices(f: NodeFacts) -> tuple[tuple[IbDevice, ...], str]:
    """The HCAs whose firmware the profile's `versions.hca_firmware` judges, and the source:
    those with a port on the profile's link layer; where none is (a RoCE node on an IB
    profile), those the profile's port groups expect there (ib_link_layer names the mismatch);
    else every HCA."""
    import fnmatch

    devices = f.ib_devices()
    chosen = [d for d in devices if any(p.link_layer == f.expected.ib_link_layer for p in d.ports)]
    if not chosen:
        chosen = [d for d in devices if any(fnmatch.fnmatchcase(d.name, g)
                                            for g in f.expected.ib_devices)]
    source = "ibstat (Firmware version)" if devices and devices[0].source == "ibstat" \
        else "/sys/class/infiniband/*/fw_ver"
    return tuple(chosen or devices), source


def firmware_by_model(f: NodeFacts) -> dict[str, tuple[str, ...]]:
    """The firmware versions of those HCAs per model (hca_type: MT4129 is a ConnectX-7,
    MT41692 a BlueField-3). Each model has its own firmware line (28.x, 32.x): versions that
    differ across models are expected, within one model they are drift."""
    out: dict[str, set[str]] = {}
    for d in firmware_devices(f)[0]:
        if d.fw_ver:
            out.setdefault(d.hca_type or "unknown model", set()).add(d.fw_ver)
    return {m: tuple(sorted(v)) for m, v in sorted(out.items())}
