"""Wall time of `stetho check --local --sim <8-GPU node>` against the floor of pytest itself.

Prints the median of N runs of each, measured in the same run, and their ratio. The floor is
`python -m pytest` on one trivial test: the cost of starting Python and pytest, which any
pytest-based check pays. Bytecode caching is on for both, as on an installed node.

    python bench/check_local.py [--runs 7] [--before CHECKOUT]

`--before` also times another checkout of stetho (its `stetho` package first on PYTHONPATH,
the same interpreter and history database), interleaved with this one: the ratio of this
checkout's median to the other's is what a change cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], env: dict[str, str], cwd: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--before", type=Path, help="another checkout to time alongside")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as tmp:
        from stetho.sim.builder import build_node

        node = build_node(Path(tmp) / "node01", "node01")
        trivial = Path(tmp) / "floor" / "test_trivial.py"
        trivial.parent.mkdir()
        trivial.write_text("def test_trivial():\n    assert True\n")
        check = [sys.executable, "-m", "stetho", "check", "--local", "--sim", str(node),
                 "--profile", "h100-sxm-8gpu"]
        floor = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(trivial)]
        env["STETHO_DB"] = str(Path(tmp) / "history.db")  # the check reads and records it
        before_env = dict(env, PYTHONPATH=str(args.before.resolve())) if args.before else None
        for argv in (check, floor):  # warm the bytecode caches and the page cache
            timed(argv, env, tmp)
        if before_env is not None:
            timed(check, before_env, tmp)
        t_check, t_floor, t_before = [], [], []
        for _ in range(args.runs):  # interleaved, so machine noise hits both alike
            t_check.append(timed(check, env, tmp))
            t_floor.append(timed(floor, env, tmp))
            if before_env is not None:
                t_before.append(timed(check, before_env, tmp))
    m_check, m_floor = statistics.median(t_check), statistics.median(t_floor)
    print(f"stetho check --local --sim <8x H100 node>  median {m_check:.3f} s  "
          f"(min {min(t_check):.3f}, max {max(t_check):.3f}, n={args.runs})")
    print(f"floor: python -m pytest <1 trivial test>   median {m_floor:.3f} s  "
          f"(min {min(t_floor):.3f}, max {max(t_floor):.3f}, n={args.runs})")
    print(f"ratio check/floor: {m_check / m_floor:.2f}x   (targets: <= 1.0 s and <= 2x)")
    if t_before:
        m_before = statistics.median(t_before)
        print(f"before: {args.before}  median {m_before:.3f} s  (min {min(t_before):.3f}, "
              f"max {max(t_before):.3f})")
        print(f"ratio this/before: {m_check / m_before:.2f}x")


if __name__ == "__main__":
    main()
