"""What the drain budget's decision costs a caller: the latency of `DrainBudget.request` with
many callers at once (target: p95 <= 100 ms under 64 concurrent callers).

N processes (default 64) start, wait for a common instant, then each makes R requests (one
node each, a new node every time, as a fleet's health checks do) on one temp ledger; each
request's wall time is measured inside the process (the interpreter's start is not part of a
decision). Prints p50/p95/max over all requests, and the grants (never more than the limit).

    python bench/drain_budget.py [--callers 64] [--requests 5] [--ledger DIR]

`--ledger DIR` puts the ledger there (e.g. on the shared filesystem the nodes would use).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CALLER = """
import json, sys, time
from pathlib import Path
from stetho.gate import budget
from stetho.gate.breaker import Circuit
path, me, callers, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
b = budget.DrainBudget(Path(path), Circuit(max_pct=10, min_nodes=2, window_s=3600))
lock, got = budget._lock, []
def timed_lock(fd, timeout_s):  # when this caller's turn came: the rest is the serial part
    lock(fd, timeout_s)
    got.append(time.perf_counter())
budget._lock = timed_lock
ready = Path(path).with_name("ready")
with open(ready / str(me), "w"):
    pass
while len(list(ready.iterdir())) < callers:  # a barrier: every caller imported and waiting
    time.sleep(0.01)
out = []
for i in range(n):
    node = "n%05d" % (me * n + i)
    t, c = time.perf_counter(), time.process_time()
    r = b.request([node], scope="bench", scope_size=1000, who=node,
                  reasons={node: "stetho: bench"}, now=time.time())
    end = time.perf_counter()
    out.append([end - t, len(r.allowed), time.process_time() - c, end - got[-1]])
done = Path(path).with_name("done")  # no caller exits (an interpreter's teardown takes CPU)
done.mkdir(exist_ok=True)            # while others still wait for their decision
open(done / str(me), "w").close()
while len(list(done.iterdir())) < callers:
    time.sleep(0.01)
print(json.dumps(out))
"""


FLOOR = """
import fcntl, json, os, sys, time
from pathlib import Path
path, me, callers, n, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    float(sys.argv[5])
ready = Path(path).with_name("ready-floor")
with open(ready / str(me), "w"):
    pass
while len(list(ready.iterdir())) < callers:
    time.sleep(0.01)
out = []
for i in range(n):
    t = time.perf_counter()
    fd = os.open(path + ".floor", os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX)
    got = time.perf_counter()
    while time.perf_counter() - got < hold:  # the ledger's own hold, alone, as busy work
        pass
    os.close(fd)
    out.append(time.perf_counter() - t)
done = Path(path).with_name("done-floor")
done.mkdir(exist_ok=True)
open(done / str(me), "w").close()
while len(list(done.iterdir())) < callers:
    time.sleep(0.01)
print(json.dumps(out))
"""


def run(script: str, args: list[str], callers: int) -> list[object]:
    procs = [subprocess.Popen([sys.executable, "-c", script, args[0], str(i), *args[1:]],
                              stdout=subprocess.PIPE, text=True) for i in range(callers)]
    rows: list[object] = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            sys.exit(f"a caller exited {p.returncode}")
        rows += json.loads(out)
    return rows


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--callers", type=int, default=64)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--ledger", type=Path, help="folder for the ledger [default: a temp one]")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="stetho-budget-", dir=args.ledger) as tmp:
        ledger = Path(tmp) / "ledger.db"
        (Path(tmp) / "ready").mkdir()
        (Path(tmp) / "ready-floor").mkdir()
        rows = run(CALLER, [str(ledger), str(args.callers), str(args.requests)], args.callers)
        held_p50 = statistics.median(r[3] for r in run(
            CALLER, [str(Path(tmp) / "alone.db"), "1", "20"], 1)[5:])  # type: ignore[index]
        floor = [v * 1000 for v in run(FLOOR, [str(ledger), str(args.callers),
                                               str(args.requests), str(held_p50)],
                                       args.callers)]  # type: ignore[union-attr]
    lat = [r[0] * 1000 for r in rows]
    cpu = [r[2] * 1000 for r in rows]
    held = [r[3] * 1000 for r in rows]
    granted = sum(r[1] for r in rows)
    load = os.getloadavg()[0]
    print(f"drain budget: {args.callers} concurrent callers x {args.requests} requests = "
          f"{len(lat)} decisions on one ledger")
    print(f"  latency ms: p50 {statistics.median(lat):.1f}  p95 {pct(lat, 95):.1f}  "
          f"max {max(lat):.1f}  (target p95 <= 100)")
    print(f"  CPU ms per decision: p50 {statistics.median(cpu):.2f}  p95 {pct(cpu, 95):.2f}"
          f"  ({os.cpu_count()} CPUs, load average {load:.1f} when done: under load the wait "
          "for a CPU, not the ledger, sets the tail)")
    print(f"  held the ledger ms (the serial part: with callers on separate hosts, the last of N "
          f"waits about N x this): p50 {statistics.median(held):.2f}  p95 {pct(held, 95):.2f}")
    print(f"  floor, the same callers taking a bare POSIX lock and holding it {held_p50 * 1000:.2f}"
          f" ms (one caller's hold, alone): p50 {statistics.median(floor):.1f}  "
          f"p95 {pct(floor, 95):.1f}; the budget's p95 is {pct(lat, 95) / pct(floor, 95):.1f}x it")
    want = min(100, len(lat))
    print(f"  granted {granted} (limit 100 of 1000 nodes): "
          f"{'ok' if granted == want else 'WRONG'}")


if __name__ == "__main__":
    main()
