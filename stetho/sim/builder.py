"""Build simulated 8x H100 nodes from the real recorded outputs, with faults in copies.

A node is a folder: `sysroot/` (the sysfs and procfs files stetho reads), `bin/` (shims for
nvidia-smi, dmesg, ibstat, lspci and all_reduce_perf that print recorded outputs from `data/`),
and `node.json`. The sources: the real 8x H100 `nvidia-smi -q` (driver 535.161.08; its
recorded power-brake state cleared to make the healthy node, see the `power-brake` fault), the
real ConnectX-7 NDR sysfs tree, the real H100 `lspci -vvv` block, the real H100 `ibstat`, and
real kernel log lines for faults. `render.py` documents what is rendered in recorded layouts.
Point STETHO_SYSROOT at `sysroot/` and put `bin/` first on PATH, and stetho cannot tell it from
a real node: exactly how Ansible addresses simulated hosts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from stetho.errors import ConfigError
from stetho.sim import faults as F
from stetho.sim.draft import H100_Q, IB_TREE, IBSTAT, NodeDraft

__all__ = ["H100_Q", "IBSTAT", "IB_TREE", "build_cluster", "build_node", "parse_faults"]


def parse_faults(specs: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
    """['node03=busbw-drop=20', ...] -> {'node03': ['busbw-drop=20']}."""
    plan: dict[str, list[str]] = {}
    for spec in specs:
        node, sep, fault = spec.partition("=")
        if not sep or not node or not fault:
            raise ConfigError(f"--fault {spec!r}: expected NODE=FAULT, e.g. node03=nvme-rotational")
        F.parse(fault)
        plan.setdefault(node, []).append(fault)
    return plan


def build_node(root: Path, name: str, faults: list[str] = ()) -> Path:  # type: ignore[assignment]
    if root.exists():
        shutil.rmtree(root)
    draft = NodeDraft(root, name)
    for spec in faults:
        fname, arg = F.parse(spec)
        F.FAULTS[fname].apply(draft, arg)
        draft.faults.append(spec)
    draft.finish()
    return root


def node_names(count: int, prefix: str = "node") -> list[str]:
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def build_cluster(out: Path, count: int, prefix: str = "node",
                  faults: dict[str, list[str]] | None = None) -> list[str]:
    faults = faults or {}
    names = node_names(count, prefix)
    unknown = sorted(set(faults) - set(names))
    if unknown:
        raise ConfigError(f"--fault names nodes that are not built: {', '.join(unknown)} "
                          f"(building {names[0]}..{names[-1]})")
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        build_node(out / name, name, faults.get(name, []))
    return names
