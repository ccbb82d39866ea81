"""Diagnose and render reports for a 1,024-node run with 5% of the nodes failing.

Builds a run folder like a sweep's (hosts/<node>/evidence.json and summary.json, merged
results.json) from collected simulated bundles: 973 healthy nodes and 51 carrying faults of
several kinds, then times `stetho report <run>` (diagnosis of every failing node, Markdown and
SVG written) over N runs and prints the median.

    python bench/report.py [--nodes 1024] [--failing 0.05] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FAULTS = [["riser"], ["nvme-rotational"], ["nccl-socket"], ["ib-rate-downgrade"],
          ["ecc-dbe"], ["xid=79"], ["thermal-slowdown"], ["clocks-unlocked"],
          ["governor-powersave"], ["host-oom"], ["optics-degrading"]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--failing", type=float, default=0.05)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from stetho import profiles
    from stetho.checking import run as checkrun
    from stetho.evidence import collect
    from stetho.sim.builder import build_node
    from stetho.sinks import json_out

    prof = profiles.load("h100-sxm-8gpu")
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        seeds = []
        for i, faults in enumerate([[]] + FAULTS):
            root = build_node(tmp / "sim" / f"seed{i:02d}", f"seed{i:02d}", faults)
            env, name = collect.sim_environment(str(root))
            b = collect.collect(prof, env, name)
            run = checkrun.run([b])
            seeds.append((b, run.results, run.summaries[name]))
        n_fail = round(args.nodes * args.failing)
        run_dir = tmp / "runs" / "bench-run"
        results = []
        for i in range(args.nodes):
            name = f"gpu{i + 1:04d}"
            seed = 1 + i % len(FAULTS) if i < n_fail else 0
            bundle, rs, summary = seeds[seed]
            host = run_dir / "hosts" / name
            host.mkdir(parents=True)
            doc = dict(bundle.to_json(), node=name)
            (host / "evidence.json").write_text(json.dumps(doc))
            (host / "summary.json").write_text(json.dumps(dict(summary, node=name)))
            results += [r.__class__(**{**r.to_json(), "node": name}) for r in rs]
        (run_dir / "results.json").write_text(json_out.render(results))
        (run_dir / "meta.json").write_text(json.dumps({"run_id": "bench-run"}))
        print(f"run folder: {args.nodes} nodes, {n_fail} failing, {len(results)} results")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["STETHO_DB"] = str(tmp / "none.db")
        walls = []
        for k in range(args.runs):
            out = tmp / f"reports{k}"
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "stetho", "report", str(run_dir),
                                   "--out", str(out)], env=env, capture_output=True, text=True)
            walls.append(time.perf_counter() - start)
            if proc.returncode != 0:
                sys.exit(proc.stderr[-2000:])
            written = len(list(out.glob("*.md")))
        print(f"stetho report (diagnose + render {written} reports): median "
              f"{statistics.median(walls):.2f} s ({', '.join(f'{w:.2f}' for w in walls)})"
              f"   target <= 10 s")


if __name__ == "__main__":
    main()
