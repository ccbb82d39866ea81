"""Host memory: the OOM killer, swap in use, and memory stalls (PSI).

A starved data loader leaves the GPUs waiting for input; the node looks healthy to every GPU
check. Any of these warns; tasks fully stalled on memory for a tenth of the time fails. What
cannot be read (memory PSI, the kernel log) warns too: an unread input is not a healthy one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts.node import Unavailable

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts


def test_host_memory(node: NodeFacts, facts: NodeFacts, verdict: Verdict) -> None:
    problems = []
    unknown = []  # inputs that could not be read: never a pass
    try:
        kills = facts.kernel_log().oom_kills
    except Unavailable as u:
        kills = ()
        unknown.append(f"OOM kills unknown ({u.reason})")
    if kills:
        problems.append(f"OOM killer ran {len(kills)} time(s), last on {kills[-1].process} "
                        f"(pid {kills[-1].pid})")
    try:
        info = facts.meminfo()
    except Unavailable as u:
        if u.status == "error":
            verdict.error(f"/proc/meminfo unreadable: {u.reason}")
        pytest.skip(u.reason)
    swap_total, swap_free = info.get("SwapTotal", 0), info.get("SwapFree", 0)
    swap_used = (swap_total - swap_free) / swap_total if swap_total else 0.0
    if swap_used > 0.10:
        problems.append(f"{swap_used:.0%} of swap in use")
    mem = None
    try:
        mem = facts.pressure().get("memory")
    except Unavailable as u:
        unknown.append(f"memory pressure unknown ({u.reason})")
    else:
        if mem is None:
            unknown.append("memory pressure unknown: /proc/pressure/memory was not read "
                           "(a kernel without PSI, or booted with psi=0)")
    if mem is not None and mem.some_avg60 > 10:
        problems.append(f"tasks stalled on memory {mem.some_avg60:g}% of the last minute")
    verdict.measure(round(swap_used * 100, 1), "% swap used",
                    expected="no OOM kill, swap < 10%, memory PSI < 10%")
    verdict.cite("\n".join(filter(None, [
        kills[-1].line if kills else None,
        f"/proc/meminfo: SwapTotal {swap_total} kB, SwapFree {swap_free} kB",
        f"/proc/pressure/memory: some avg60={mem.some_avg60} full avg60={mem.full_avg60}"
        if mem is not None else None])), "host_pressure")
    fix = ("find what grew (`dmesg -T | grep -i 'out of memory'`, the job's memory request); "
           "cap data loader workers; clear leftover processes")
    if mem is not None and (mem.full_avg60 or 0) > 10:
        verdict.fail("; ".join(problems) + f"; fully stalled {mem.full_avg60:g}% of the time",
                     remediation=fix)
    if problems or unknown:
        verdict.warn("; ".join(problems + unknown),
                     remediation=fix if problems else "enable PSI (CONFIG_PSI=y, boot with "
                     "psi=1) and make the kernel log readable (dmesg or journalctl -k)")
        return
    verdict.ok("no OOM kill, no swapping, no memory stalls")
