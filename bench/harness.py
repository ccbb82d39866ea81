"""What every bench shares, so each one measures honestly the same way.

* Sides are timed **interleaved** (round k runs every side once, in an order that alternates
  between rounds), so a disk cache warming or a neighbour's load falls on all sides alike.
* Each side is a command in a **fresh process**, timed by wall clock and by the CPU its
  process tree used (on a busy 2-core machine the wall time mostly measures the queue).
* Figures are **medians**, printed with the load average and the **goal** the bench judges
  against (the issue's goal, never a looser one).
* `--before REF` runs another checkout **for real**: a git worktree of REF, its own
  `python -m stetho` (cwd and PYTHONPATH on that tree, so this tree never answers for it).
* `--smoke` is the small mode a test runs so a bench never rots; its figures mean nothing.

    from bench import harness
    ap = harness.parser(__doc__)
    args = ap.parse_args()
    sides = {"stetho": harness.Side(cmd), "floor": harness.Side(floor_cmd)}
    times = harness.interleave(sides, args.runs)
    harness.judge("stetho", times["stetho"], times["floor"], goal=1.5)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parser(doc: str | None, runs: int = 7) -> argparse.ArgumentParser:
    """An ArgumentParser with the options every bench takes: --runs, --smoke, --before."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=runs, help="interleaved rounds (median)")
    ap.add_argument("--smoke", action="store_true",
                    help="the tiny mode a test runs: it proves the bench works, not a figure")
    ap.add_argument("--before", metavar="REF",
                    help="also time this git ref's checkout (a worktree), interleaved")
    return ap


@dataclass(frozen=True)
class Tree:
    """A source tree whose `python -m stetho` a bench runs."""

    label: str
    root: Path

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = str(self.root)
        return env

    def stetho(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "stetho", *args]


def trees(before: str | None) -> list[Tree]:
    """This tree, and with `before` a worktree of that ref (made once, under /tmp)."""
    out = [Tree("this tree", REPO)]
    if before:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", before],
                             capture_output=True, text=True, check=True).stdout.strip()
        where = Path(tempfile.gettempdir()) / f"stetho-before-{rev}"
        if not (where / "stetho").is_dir():
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-f",
                            str(where), rev], check=True, capture_output=True)
        out.append(Tree(f"before ({before} = {rev})", where))
    return out


@dataclass
class Side:
    """One thing to time: a command (run in `cwd`, so `python -m` finds the right tree)."""

    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    codes: set[int] = field(default_factory=set)
    cpu: list[float] = field(default_factory=list)
    last_output: str = ""

    def __call__(self) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        p = subprocess.run(list(self.argv), env=None if self.env is None else dict(self.env),
                           cwd=self.cwd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        self.codes.add(p.returncode)
        self.last_output = p.stdout + p.stderr
        return wall


@dataclass
class Call:
    """One thing to time in this process (a library call a long-lived process makes, e.g. a
    sweep rendering its textfile): wall seconds, and CPU seconds of this process in `cpu`."""

    fn: Callable[[], object]
    cpu: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        cpu = time.process_time()
        start = time.perf_counter()
        self.fn()
        wall = time.perf_counter() - start
        self.cpu.append(time.process_time() - cpu)
        return wall


def interleave(sides: Mapping[str, Side | Call], runs: int, warm: bool = True
               ) -> dict[str, list[float]]:
    """Wall seconds of each side over `runs` rounds, the order reversed every other round;
    `warm` runs each side once first, untimed (bytecode, page cache) where the user's side is
    warm too. A cold side makes itself cold inside its own command."""
    names = list(sides)
    if warm:
        for n in names:
            sides[n]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for k in range(runs):
        for n in (names if k % 2 == 0 else names[::-1]):
            out[n].append(sides[n]())
    return out


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} (1 / 5 min) on {os.cpu_count()} cores"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def line(name: str, times: Sequence[float], cpu: Sequence[float] = ()) -> str:
    """`name: median X (min, max; CPU median Y; n runs)`."""
    text = (f"{name}: median {ms(statistics.median(times))} (min {ms(min(times))}, max "
            f"{ms(max(times))}")
    if cpu:
        text += f"; CPU median {ms(statistics.median(cpu))}"
    return text + f"; {len(times)} runs)"


def judge(name: str, times: Sequence[float], floor: Sequence[float], goal: float | None,
          floor_name: str = "the floor") -> float:
    """Print the ratio of medians against `floor` and whether it meets `goal` (x floor; None:
    the goal is absolute and judged on its own line); returns the ratio."""
    ratio = statistics.median(times) / statistics.median(floor)
    if goal is None:
        print(f"ratio: {name} is {ratio:.2f}x {floor_name} (no ratio goal: see the goal line)")
    else:
        verdict = "met" if ratio <= goal else "NOT MET"
        print(f"ratio: {name} is {ratio:.2f}x {floor_name} (goal <= {goal:g}x): {verdict}")
    return ratio


def absolute(name: str, times: Sequence[float], goal_s: float) -> None:
    """Print whether the median meets an absolute goal (seconds)."""
    med = statistics.median(times)
    print(f"goal: {name} median {ms(med)} (goal <= {ms(goal_s)}): "
          f"{'met' if med <= goal_s else 'NOT MET'}")


def goal(what: str, met: bool | None) -> None:
    """Print a goal that is not a time (a count, a rate): `met`, `NOT MET`, or `not judged`
    (None: this run did not measure it, e.g. in --smoke)."""
    print(f"goal: {what}: {'not judged' if met is None else 'met' if met else 'NOT MET'}")


def in_process(ap: argparse.ArgumentParser, before: str | None) -> None:
    """Refuse --before in a bench that times library calls in this process (no stetho command
    to run from the other tree): say so, never time this tree twice."""
    if before:
        ap.error("--before: this bench times stetho's functions in this process, not a stetho "
                 "command; run it in the other checkout (git worktree add DIR REF; cd DIR; "
                 "python bench/...) and compare the printed medians")


def p95(values: Sequence[float]) -> float:
    """The 95th percentile (nearest rank): the tail a fleet's slowest callers see."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def header(what: str) -> None:
    print(f"{what}  [{load()}; python {sys.version.split()[0]}]")
