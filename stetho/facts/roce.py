"""RoCE facts of one node: which ports the RoCE checks judge, each port's netdev, its congestion
and loss counters (RDMA hw_counters and the netdev's `ethtool -S`), its QoS (`mlnx_qos`) and
ECN (sysfs). Functions over NodeFacts, cached there (`facts.parsed`), with its skip/error rules.

A port is judged when the profile has a `roce` section, puts the port's device in an Ethernet
port group, and the port runs Ethernet: an InfiniBand port, or any port on a profile without
`roce`, is not RoCE (`applies` says why not). Where it applies, a missing tool is an error: a
RoCE profile expects mlnx_qos and ethtool.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.ib_common import IbPort
    from stetho.parsers.roce import MlnxQos
    from stetho.profiles import Profile

_IB = "/sys/class/infiniband/"
_NET = "/sys/class/net/"
_HW = re.compile(r"^/sys/class/infiniband/([^/]+)/ports/(\d+)/hw_counters/([^/]+)$")
_ECN = re.compile(r"^/sys/class/net/([^/]+)/ecn/(roce_np|roce_rp)/enable/(\d)$")


def applies(profile: Profile, port: IbPort) -> str | None:
    """None when the RoCE checks judge this port, else why not (a skip reason)."""
    if profile.roce is None:
        return f"profile {profile.name} has no roce section (not a RoCE profile)"
    want = profile.ib.link_layer_of(port.device)
    if want != "Ethernet":
        return f"{port.device} is in a {want} port group of profile {profile.name}: not RoCE"
    if port.link_layer != "Ethernet":
        return (f"{port.device} runs {port.link_layer or 'an unknown link layer'} where profile "
                f"{profile.name} expects Ethernet: judged by ib_link_layer")
    return None


def _sysfs(facts: NodeFacts) -> dict[str, str]:
    return facts.files("roce_sysfs")


def netdev(facts: NodeFacts, device: str) -> str:
    """The RDMA device's network interface (/sys/class/infiniband/<dev>/device/net/<netdev>)."""
    def load() -> dict[str, str]:
        out = {}
        for path in _sysfs(facts):
            q = path.split("/")
            if path.startswith(_IB) and len(q) > 8 and q[5:7] == ["device", "net"]:
                out[q[4]] = q[7]
        return out

    found = facts.parsed("roce_netdevs", load).get(device)
    if found is None:
        raise Unavailable("error", f"no netdev under {_IB}{device}/device/net: the RDMA device "
                          "has no Ethernet interface (is mlx5_core's Ethernet side loaded?)",
                          "roce_sysfs")
    return found


def hw_counters(facts: NodeFacts, port: IbPort) -> dict[str, int]:
    """The port's RDMA hw_counters (np_cnp_sent, out_of_sequence, ...) from roce_sysfs."""
    def load() -> dict[tuple[str, str], dict[str, int]]:
        out: dict[tuple[str, str], dict[str, int]] = {}
        for path, text in _sysfs(facts).items():
            m = _HW.match(path)
            if m is None:
                continue
            value = text.strip()
            if not value.isdigit():
                from stetho.parsers import ParseError

                raise ParseError("hw_counters", f"{path}: {value[:40]!r} is not a count")
            out.setdefault((m.group(1), m.group(2)), {})[m.group(3)] = int(value)
        return out

    found = facts.parsed("roce_hw_counters", load).get((port.device, str(port.port)))
    if not found:
        raise Unavailable("error", f"no hw_counters under {_IB}{port.device}/ports/{port.port}",
                          "roce_sysfs")
    return found


def _per_device(facts: NodeFacts, probe: str, device: str) -> str:
    """A per-device probe's output; a tool absent on a RoCE profile is an error."""
    name = f"{probe}:{device}"
    if name not in facts.bundle.probes and probe in facts.bundle.probes:
        name = probe  # the unbound record: the tool was not found on PATH
    try:
        return facts.text(name)
    except Unavailable as u:
        if u.status == "skip":
            raise Unavailable("error", f"{u.reason}, but the profile expects RoCE ports",
                              u.probe) from None
        raise


def ethtool_stats(facts: NodeFacts, device: str) -> dict[str, int]:
    from stetho.parsers import roce

    return facts.parsed(f"ethtool_stats:{device}", lambda: roce.parse_ethtool_stats(
        _per_device(facts, "ethtool_stats", device)))


def qos(facts: NodeFacts, device: str) -> MlnxQos:
    from stetho.parsers import roce

    return facts.parsed(f"mlnx_qos:{device}", lambda: roce.parse_mlnx_qos(
        _per_device(facts, "mlnx_qos", device)))


def ecn(facts: NodeFacts, netdev_name: str, priority: int) -> dict[str, bool | None]:
    """ECN on `priority` as notification point (roce_np) and reaction point (roce_rp): True,
    False, or None where sysfs has no such file (a driver without the ecn tree)."""
    def load() -> dict[tuple[str, str, int], bool]:
        out = {}
        for path, text in _sysfs(facts).items():
            m = _ECN.match(path)
            if m is None:
                continue
            value = text.strip()
            if value not in ("0", "1"):
                from stetho.parsers import ParseError

                raise ParseError("ecn sysfs", f"{path}: {value[:40]!r}, expected 0 or 1")
            out[(m.group(1), m.group(2), int(m.group(3)))] = value == "1"
        return out

    table = facts.parsed("roce_ecn", load)
    return {role: table.get((netdev_name, role, priority)) for role in ("roce_np", "roce_rp")}


def counters(facts: NodeFacts, port: IbPort) -> dict[str, int]:
    """Every counter the congestion check can judge for this port: the RDMA hw_counters and
    the netdev's ethtool statistics (their names do not overlap)."""
    return {**hw_counters(facts, port), **ethtool_stats(facts, port.device)}


def ecn_path(netdev_name: str, role: str, priority: int) -> str:
    return f"{_NET}{netdev_name}/ecn/{role}/enable/{priority}"
