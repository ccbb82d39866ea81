"""What the replay benches share (bench/replay_scale.py, bench/ingest.py, bench/runpage.py):
the faults the 16 simulated seed nodes carry, and the peak memory of a process tree.

It was a bench of its own (256 and 1,024 nodes); `python bench/replay_scale.py --nodes 256
1024` measures the same, interleaved with its floor.
"""

from __future__ import annotations

import os

FAULTS = {3: ["busbw-drop=15"], 7: ["hca-fw-old"], 11: ["xid=48"], 13: ["nvme-rotational"]}


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            continue
    return total
