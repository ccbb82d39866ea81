"""Replay at fleet scale: wall time and peak RSS of the whole process tree, per fleet size.

The fleets are bench/replay.py's: 16 simulated nodes collected for real (4 with faults),
cloned under new names up to N. Each size is replayed `--repeat` times with
`stetho check --evidence DIR -n WORKERS --json OUT -q`; medians are printed, with a floor
measured in the same run: reading and JSON-parsing every bundle once in one process (what no
replay can avoid). `--before DIR` also runs another checkout's code (e.g. main's, from
`git archive`) on the same fleets, and says whether its results are identical.

    python bench/replay_scale.py [--nodes 1024 4096 10240] [--repeat 3] [--before DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.replay import FAULTS, tree_rss

FLOOR = ("import json, pathlib, sys\n"
         "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json')):\n"
         "    json.loads(p.read_bytes())\n")


def seeds() -> list[dict[str, object]]:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    prof = profiles.load("h100-sxm-8gpu")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(16):
            root = build_node(Path(tmp) / f"seed{i:02d}", f"seed{i:02d}", FAULTS.get(i, []))
            env, name = collect.sim_environment(str(root))
            out.append(collect.collect(prof, env, name).to_json())
    return out


def fleet(folder: Path, n: int, docs: list[dict[str, object]]) -> Path:
    if folder.is_dir() and len(list(folder.glob("*.json"))) == n:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        doc = dict(docs[i % len(docs)], node=f"gpu{i + 1:05d}")
        (folder / f"gpu{i + 1:05d}.json").write_text(json.dumps(doc))
    return folder


def digest(results_json: Path) -> tuple[str, dict[str, int]]:
    """What the results say, without timings: equal digests are identical verdicts."""
    doc = json.loads(results_json.read_text())
    rows = sorted(json.dumps([r["node"], r["check"], r["subject"], r["status"], r["message"],
                              r.get("value")], default=str) for r in doc["results"])
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:12], doc["counts"]


def replay(code: Path | None, folder: Path, out: Path,
           workers: str) -> tuple[float, float, int, int]:
    """One replay: wall seconds, CPU seconds of the whole tree (user + system, from the
    children's rusage: on a loaded machine the steadier figure), peak RSS summed over the
    process tree (sampled every 20 ms), exit code."""
    env = dict(os.environ, PYTHONPATH=str(code)) if code is not None else None
    argv = [sys.executable, "-m", "stetho", "check", "--evidence", str(folder), "-n", workers,
            "--json", str(out), "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Run from inside the other checkout: `python -m` puts the working directory ahead of
    # PYTHONPATH, so run from this one it silently measured this checkout twice.
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=code)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, tree_rss(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    done.set()
    sampler.join()
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"replay exited {proc.returncode}: {err[-800:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, peak, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 10240])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", default="2")
    ap.add_argument("--before", type=Path, help="another checkout's code to compare against")
    ap.add_argument("--before-up-to", type=int, default=4096,
                    help="run --before only up to this many nodes (it may need GiBs)")
    ap.add_argument("--keep", type=Path, help="keep the generated fleets here, reuse them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="stetho-replay-scale-"))
    docs = seeds()
    print(f"bundle size: {len(json.dumps(docs[0])) / 1024:.0f} KiB per node; "
          f"{args.repeat} runs each, -n {args.workers}, medians")
    for n in args.nodes:
        folder = fleet(work / f"fleet{n}", n, docs)
        floor = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", FLOOR, str(folder)], check=True)
            floor.append(time.perf_counter() - start)
        f = statistics.median(floor)
        codes: list[tuple[str, Path | None]] = [("after", None)]
        if args.before and n <= args.before_up_to:
            codes.insert(0, ("before", args.before))
        digests = {}
        for label, code in codes:
            walls, cpus, peaks = [], [], []
            for _ in range(args.repeat):
                out = work / f"{label}{n}.json"
                wall, cpu, peak, rc = replay(code, folder, out, args.workers)
                walls.append(wall)
                cpus.append(cpu)
                peaks.append(peak)
            digests[label], counts = digest(out)
            w, c, p = (statistics.median(x) for x in (walls, cpus, peaks))
            print(f"{label:6s} {n:6d} nodes: wall {w:6.1f} s ({w / f:4.1f}x floor {f:.1f} s)  "
                  f"CPU {c:6.1f} s ({c / n * 1000:.1f} ms/node)  "
                  f"peak RSS {p / 2**20:6.0f} MiB ({p / n / 1024:.0f} KiB/node)  "
                  f"exit {rc}  {sum(counts.values())} results "
                  f"({counts['fail']} fail, {counts['error']} error)  digest {digests[label]}",
                  flush=True)
        if len(digests) == 2:
            same = digests["before"] == digests["after"]
            print(f"       {n:6d} nodes: results {'identical' if same else 'DIFFER'}", flush=True)


if __name__ == "__main__":
    main()
