"""Outputs the real fixtures hold for other hardware, rendered in their recorded formats.

The fixtures have no real 8x H100 `nvidia-smi nvlink -s`, no complete 8x H100 `nvlink -e`, no
8-GPU single-node nccl-tests table and no healthy kernel log. These functions render them in
exactly the layouts of the recorded files (nvlink -s of 8x A100, nvlink -e of H100, nccl-tests
2.x of 16x A100), with H100 facts: 18 NVLink 4 links at 26.562 GB/s per GPU, and an all_reduce
busbw curve from a latency + bandwidth model fitted to NVIDIA's ~480 GB/s 8x H100 NVLS peak.
Everything a check reads from them is documented here, so nothing is hidden in the simulation.
"""

from __future__ import annotations

import json
import random
import re

NVLINK_LINKS = 18
NVLINK_GBPS = 26.562  # NVLink 4: 18 links x 26.562 GB/s = 478 GB/s per direction (~900 GB/s)

# all_reduce model: time = latency + bytes / algbw_peak; busbw = algbw * 2(n-1)/n.
ALLREDUCE_LATENCY_US = 50.0
ALLREDUCE_PEAK_BUSBW = 480.0


def nvlink_status(gpus: list[tuple[str, str]]) -> str:
    """`nvidia-smi nvlink -s`; gpus = [(name, uuid)]. Layout of the recorded 8x A100 file."""
    out = []
    for i, (name, uuid) in enumerate(gpus):
        out.append(f"GPU {i}: {name} (UUID: {uuid})")
        out += [f"\t Link {k}: {NVLINK_GBPS} GB/s" for k in range(NVLINK_LINKS)]
    return "\n".join(out) + "\n"


def nvlink_errors(gpus: list[tuple[str, str]], counters: dict[tuple[int, int], dict[str, int]]
                  | None = None) -> str:
    """`nvidia-smi nvlink -e`. Layout of the recorded H100 file (blank line between links)."""
    counters = counters or {}
    out = []
    for i, (name, uuid) in enumerate(gpus):
        out.append(f"GPU {i}: {name} (UUID: {uuid})")
        for k in range(NVLINK_LINKS):
            c = counters.get((i, k), {})
            out += [f"\t Link {k}: Replay Errors: {c.get('Replay Errors', 0)}",
                    f"\t Link {k}: Recovery Errors: {c.get('Recovery Errors', 0)}",
                    f"\t Link {k}: CRC Errors: {c.get('CRC Errors', 0)}"]
            if k != NVLINK_LINKS - 1:
                out.append("")
    return "\n".join(out) + "\n"


def allreduce_busbw(size: int, ranks: int = 8) -> float:
    """The model's healthy busbw (GB/s) for one message size on 8x H100 NVLS."""
    factor = 2 * (ranks - 1) / ranks
    peak_alg = ALLREDUCE_PEAK_BUSBW / factor * 1e3  # bytes per microsecond
    time_us = ALLREDUCE_LATENCY_US + size / peak_alg
    return size / time_us / 1e3 * factor


def nccl_allreduce(host: str, bus_ids: list[str], gpu_name: str, seed: int,
                   scale: float = 1.0, wrong_from: int | None = None,
                   max_bytes: int = 8 << 30, info_lines: list[str] | None = None) -> str:
    """all_reduce_perf -b 8 -e 8G -f 2 -g 8 output, nccl-tests 2.x layout (as recorded).

    `scale` multiplies bandwidth from 1 MiB up (a busbw drop); `wrong_from` makes every size
    from that one on report wrong elements and the run FAILED, as the recorded corrupt run does.
    """
    rng = random.Random(seed)
    n = len(bus_ids)
    factor = 2 * (n - 1) / n
    lines = [
        "# nThread 1 nGpus %d minBytes 8 maxBytes %d step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0" % (n, max_bytes),
        "#", "# Using devices",
    ]
    for rank, bus in enumerate(bus_ids):
        short = bus.split(":")[1].lower()
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {4100 + rank:6d} on {host:>10} device "
                     f"{rank:2d} [0x{short}] {gpu_name}")
    # NCCL_DEBUG=INFO lines land between the device list and the table, as in real runs.
    lines += info_lines or []
    lines += [
        "#",
        "#                                                              out-of-place            "
        "           in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong   "
        "  time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
        "   (us)  (GB/s)  (GB/s)       ",
    ]
    sizes, size = [], 8
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    busbws, bad = [], 0
    for size in sizes:
        cells = []
        wrong = 0
        if wrong_from is not None and size >= wrong_from:
            wrong = size // 4 * 2
        for _ in range(2):
            bw = allreduce_busbw(size, n) * rng.uniform(0.99, 1.01)
            if size >= 1 << 20:
                bw *= scale
            alg = bw / factor
            time_us = size / (alg * 1e3)
            busbws.append(bw)
            cells.append(f"{_t(time_us):>8} {alg:7.2f} {bw:7.2f} {wrong:6d}")
            bad += 1 if wrong else 0
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 "
                     + "  ".join(cells))
    lines.append(f"# Out of bounds values : {bad} {'FAILED' if bad else 'OK'}")
    lines.append(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} ")
    lines.append("#")
    return "\n".join(lines) + "\n"


def _t(us: float) -> str:
    return f"{us:.2f}" if us < 1000 else f"{us:.1f}" if us < 10000 else f"{us:.0f}"


def lspci_gpus(block: str, bus_ids: list[str], widths: dict[int, int] | None = None) -> str:
    """The recorded H100 `lspci -vvv` block, once per GPU at its bus address.

    `widths` sets a GPU's trained link width (a downgrade), as lspci prints it."""
    widths = widths or {}
    first = block.split(" ", 1)[0]  # "19:00.0"
    out = []
    for i, bus in enumerate(bus_ids):
        addr = ":".join(bus.lower().split(":")[1:])
        text = block.replace(first, addr, 1)
        if i in widths:
            text = text.replace("Width x16 (ok)", f"Width x{widths[i]} (downgraded)")
        out.append(text.rstrip("\n"))
    return "\n\n".join(out) + "\n"


def healthy_kernel_log(driver: str, boot_ago_s: float = 7 * 86400.0) -> list[tuple[float, str]]:
    """A quiet boot, `boot_ago_s` seconds before collection: no Xid, no AER, no OOM.

    Each line is (seconds before collection, message): the simulated `dmesg` stamps them in
    `--time-format=iso` form when it runs, so a boot a week ago reads as a week ago whenever
    the node is checked (stetho.sim.draft writes the shim)."""
    msgs = [
        "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-007) (gcc (Ubuntu 11.4.0-1ubuntu1"
        "~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #115-Ubuntu SMP",
        "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=0 ro iommu=pt",
        "nvidia: loading out-of-tree module taints kernel.",
        "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
        f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Thu Feb 22 00:00:00 UTC 2024",
        "mlx5_core 0000:1a:00.0: firmware version: 28.41.1000",
        "mlx5_core 0000:1a:00.0: Rate limit: 127 rates are supported, range: 0Mbps to 195312Mbps",
    ]
    return [(boot_ago_s - 0.1 - i * 0.007919, m) for i, m in enumerate(msgs)]

def mlxlink_edit(text: str, fields: dict[str, str | None]) -> str:
    """The recorded mlxlink JSON with the named fields' values replaced (None: left as is)."""
    for key, value in fields.items():
        if value is None:
            continue
        # the value as a JSON string, doubled backslashes for re's replacement template
        quoted = json.dumps(value).replace("\\", "\\\\")
        edited, n = re.subn(rf'("{re.escape(key)}" : )"[^"]*"', rf"\g<1>{quoted}", text)
        if n != 1:
            raise ValueError(f"the mlxlink recording has {n} {key!r} fields, expected 1")
        text = edited
    return text
