"""What the fleet-scale render benches (bench/junit.py, bench/runpage.py) share: their options
(--nodes, --keep beside harness's) and the fleet's results they render, from one real replay
of bench/replay_scale.py's fleet, or in --smoke two nodes checked and copied to 16."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from bench import harness
from bench.observe import fleet as observed
from bench.replay_scale import fleet, seeds

if TYPE_CHECKING:
    from stetho.results import Result


def parser(doc: str | None, runs: int = 5) -> argparse.ArgumentParser:
    """harness.parser with the fleet's size and a folder to keep the fleet and replay in."""
    ap = harness.parser(doc, runs=runs)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--keep", type=Path, help="keep the generated fleet and replay here")
    return ap


def parse(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The options; these benches time library calls in process (no --before), and a smoke
    run renders 16 nodes."""
    args = ap.parse_args()
    harness.in_process(ap, args.before)
    if args.smoke:
        args.nodes = 16
    return args


@contextmanager
def workdir(args: argparse.Namespace, prefix: str) -> Iterator[Path]:
    """--keep's folder (made, kept), else a fresh temporary one, removed at the end."""
    work = args.keep or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def replayed(folder: Path, out: Path) -> Path:
    """`stetho check --evidence FOLDER --json OUT`, for real: the fleet's results."""
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence", str(folder),
                           "-n", "2", "--json", str(out), "-q"], capture_output=True, text=True)
    if proc.returncode not in (0, 1, 3):
        sys.exit(f"replay exited {proc.returncode}: {proc.stderr[-800:]}")
    return out


def results(args: argparse.Namespace, work: Path) -> list[Result]:
    """The fleet's results: in --smoke two nodes checked, copied to 16 (the fleet collects 16
    for real); else one replay of args.nodes nodes, kept in `work` (a replay kept from an
    earlier run with --keep is read again: no fleet built, no replay)."""
    from stetho.sinks import json_out

    if args.smoke:
        return observed(work / "observed", args.nodes, None)
    out = work / f"replay{args.nodes}.json"
    if not out.is_file():
        replayed(fleet(work / f"fleet{args.nodes}", args.nodes, seeds()), out)
    return json_out.load(out.read_text())
