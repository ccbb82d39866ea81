"""What a simulated RoCE node's ports show (a node built with a `roce*` fault, which switches
the compute ports to Ethernet): written for every Ethernet port, mlx5_bond_0 included (Ethernet
in the recording). An InfiniBand node keeps the recorded tree as it is.

- sysfs: `/sys/class/infiniband/<dev>/device/net/<netdev>/ifindex`, the RoCE-mode hw_counters
  the recorded InfiniBand-mode tree lacks (np_cnp_sent, rp_cnp_handled,
  np_ecn_marked_roce_packets, rp_cnp_ignored; the loss counters are the recording's own), and
  `/sys/class/net/<netdev>/ecn/roce_{np,rp}/enable/<prio>` = 1 as NVIDIA's defaults set them.
- `mlnx_qos -i <netdev>`: the real recorded output (fixtures/real/14-roce), trust dscp and PFC
  on priority 3, with the trust state a fault sets.
- `ethtool -S <netdev>`: mlx5's layout (`NIC statistics:`, five-space indent, `name: count`)
  with the real recorded pause/PCI lines (fixtures/real/14-roce) and the per-priority pause
  and physical discard counters mlx5 prints, all 0 on an idle healthy port unless a fault
  sets them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

QOS = "14-roce/mlnx_qos-cx-100g-dscp-pfc3-firmware-dcbx.txt"
ETHTOOL = "14-roce/ethtool-S-mlx5-cx4lx-25g-pause-pci-grep-EXCERPT.txt"
RDMA_MODE_COUNTERS = ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets",
                      "rp_cnp_ignored")


def netdev_name(device: str) -> str:
    """mlx5_4 -> ens4np0 (the predictable-name shape of a ConnectX port), mlx5_bond_0 ->
    bond0."""
    if device.startswith("mlx5_bond_"):
        return "bond" + device.rsplit("_", 1)[1]
    return f"ens{device.rsplit('_', 1)[1]}np0"


def ethernet_devices(sysroot: Path) -> list[str]:
    root = sysroot / "sys/class/infiniband"
    return sorted(p.parent.parent.parent.name for p in root.glob("*/ports/1/link_layer")
                  if p.read_text().strip() == "Ethernet")


def write(sysroot: Path, real: Callable[[str], str],
          counters: Mapping[str, Mapping[str, int]], trust: str, ecn_off: bool
          ) -> dict[str, str]:
    """The sysfs files (into the sysroot) and the data files of the ethtool and mlnx_qos
    shims (returned: name -> content) for each Ethernet port. `counters`: device -> counter
    -> the value a fault sets; `trust`: what mlnx_qos reports; `ecn_off`: ECN off on
    priority 3."""
    files: dict[str, str] = {}
    qos = real(QOS).replace("Priority trust state: dscp", f"Priority trust state: {trust}")
    recorded = [ln for ln in real(ETHTOOL).splitlines() if ln.strip()]
    for i, dev in enumerate(ethernet_devices(sysroot)):
        net = netdev_name(dev)
        ib = sysroot / "sys/class/infiniband" / dev
        _write(ib / f"device/net/{net}/ifindex", f"{4 + i}\n")
        over = counters.get(dev, {})
        for name in RDMA_MODE_COUNTERS:
            _write(ib / f"ports/1/hw_counters/{name}", f"{over.get(name, 0)}\n")
        for name, value in over.items():
            if (ib / f"ports/1/hw_counters/{name}").exists():
                _write(ib / f"ports/1/hw_counters/{name}", f"{value}\n")
        for role in ("roce_np", "roce_rp"):
            for prio in range(8):
                on = not (ecn_off and prio == 3)
                _write(sysroot / f"sys/class/net/{net}/ecn/{role}/enable/{prio}",
                       "1\n" if on else "0\n")
        stats = {ln.split(":")[0].strip(): ln for ln in recorded}
        for prio in range(8):
            for side in ("rx", "tx"):
                for suffix in ("pause", "pause_duration"):
                    stats.setdefault(f"{side}_prio{prio}_{suffix}", "")
        for name in ("rx_discards_phy", "tx_discards_phy"):
            stats.setdefault(name, "")
        lines = ["NIC statistics:"]
        for name, line in stats.items():
            if name in over:
                line = f"     {name}: {over[name]}"
            lines.append(line or f"     {name}: 0")
        files[f"ethtool-S-{net}.txt"] = "\n".join(lines) + "\n"
        files[f"mlnx_qos-{net}.txt"] = qos
    return files


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
