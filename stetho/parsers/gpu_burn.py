"""Parse gpu-burn's output: per GPU, the GEMM rate reached, the error count, and the verdict.

gpu-burn (wilicc/gpu-burn) lists the GPUs (`GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-...)`),
says how each was set up (`Initialized device 0 with 81251 MB of memory (...), using DOUBLES,
using Tensor Cores`), then prints progress updates, one after the other on the same line (or
separated by carriage returns) with occasional `Summary at:` lines:

    100.0%  proc'd: 6783 (16942 Gflop/s) - 4522 (17177 Gflop/s)   errors: 0 - 0   temps: 62 C - 59 C

and ends with `Tested N GPUs:` and `GPU i: OK` or `FAULTY`. The figures of the last complete
update are the run's result. An error count can be negative (a counter gone wrong) and is
followed by `(WARNING!)`; `(DIED!)` with `-1 (0 Gflop/s)` marks a GPU whose worker died.

gpu-burn exits 0 even when GPUs are FAULTY, and can print `GPU 0: OK` without ever printing a
rate (`Couldn't init a GPU test`, or a run too short to report): `ok` needs a verdict of OK for
every GPU, no errors, and a measured rate above zero for each, so neither case passes.
"""

from __future__ import annotations

import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

TOOL = "gpu-burn"

_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?\s*$")
_INIT = re.compile(r"Initialized device (\d+) with (\d+) MB of memory.*?using (FLOATS|DOUBLES)"
                   r"(, using Tensor Cores)?")
_UPDATE = re.compile(r"(\d+(?:\.\d+)?)%\s+proc'd:")
_PROC = re.compile(r"(-?\d+)\s*\(\s*(-?\d+(?:\.\d+)?)\s*Gflop/s\)")
_ERRS = re.compile(r"(?<![\d.])(-?\d+)\s*(?:\((WARNING!|DIED!)\))?")
_TEMP = re.compile(r"(-?\d+|--)\s*C\b")
_TESTED = re.compile(r"^Tested (\d+) GPUs:")
_VERDICT = re.compile(r"^GPU (\d+): (OK|FAULTY)\s*$")
_PROBLEMS = ("Couldn't init", "No clients are alive", "Aborting", "Error", "error")


@record
class GpuBurnGpu:
    """One GPU: what the last progress update said, and the final verdict."""

    index: int
    name: str | None
    uuid: str | None
    precision: str | None  # "FLOATS" or "DOUBLES"
    tensor_cores: bool
    memory_mb: int | None
    iterations: int | None  # "proc'd" count of the last update
    gflops: float | None  # Gflop/s of the last update
    errors: int | None
    flag: str | None  # "WARNING!" or "DIED!"
    temp_c: int | None
    verdict: str | None  # "OK" or "FAULTY"


@record
class GpuBurnRun:
    gpus: tuple[GpuBurnGpu, ...]
    updates: int  # progress updates seen
    last_percent: float | None
    tested: int | None  # from "Tested N GPUs:"
    problems: tuple[str, ...]  # init failures, aborts, error lines

    @property
    def ok(self) -> bool:
        return (self.tested is not None and self.tested == len(self.gpus) > 0
                and not self.problems
                and all(g.verdict == "OK" and g.errors == 0 and g.flag is None
                        and g.gflops is not None and g.gflops > 0 for g in self.gpus))

    @property
    def faulty_count(self) -> int:
        return sum(1 for g in self.gpus if g.verdict != "OK")

    @property
    def total_errors(self) -> int | None:
        """Sum of error counts (negative counts count as their size); None if never reported."""
        counts = [abs(g.errors) for g in self.gpus if g.errors is not None]
        return sum(counts) if counts else None

    @property
    def min_gflops(self) -> float | None:
        rates = [g.gflops for g in self.gpus]
        return None if not rates or any(r is None for r in rates) else min(
            r for r in rates if r is not None)

    @property
    def total_gflops(self) -> float | None:
        rates = [g.gflops for g in self.gpus]
        return None if not rates or any(r is None for r in rates) else sum(
            r for r in rates if r is not None)

    def gpu(self, index: int) -> GpuBurnGpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def parse(text: str | bytes) -> GpuBurnRun:
    """Parse gpu_burn's stdout (merged with stderr or not)."""
    data = require_text(TOOL, text)
    try:
        return _parse(data)
    except ParseError:
        raise
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OverflowError) as exc:
        raise ParseError(TOOL, f"unexpected content: {exc}") from None


def _parse(data: str) -> GpuBurnRun:
    names: dict[int, tuple[str, str | None]] = {}
    setup: dict[int, tuple[int, str, bool]] = {}
    verdicts: dict[int, str] = {}
    problems: list[str] = []
    tested: int | None = None
    updates = 0
    last: tuple[float, list[tuple[int, float]], list[tuple[int, str | None]], list[int | None]]
    last = (0.0, [], [], [])
    have_last = False
    for raw in data.replace("\r", "\n").splitlines():
        line = raw.strip()
        if not line:
            continue
        if m := _TESTED.match(line):
            tested = int(m.group(1))
            continue
        if (m := _VERDICT.match(line)) and tested is not None:
            verdicts[int(m.group(1))] = m.group(2)
            continue
        if (m := _GPU.match(line)) and tested is None and "proc'd" not in line:
            names[int(m.group(1))] = (m.group(2), m.group(3))
            continue
        for m in _INIT.finditer(line):
            setup[int(m.group(1))] = (int(m.group(2)), m.group(3), bool(m.group(4)))
        starts = [m.start() for m in _UPDATE.finditer(line)]
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else len(line)
            update = _update(line[start:end])
            if update is not None:
                updates += 1
                last, have_last = update, True
        if not starts and not _INIT.search(line) and any(p in line for p in _PROBLEMS):
            problems.append(line)
    if not have_last and tested is None and not setup:
        raise ParseError(TOOL, "not gpu-burn output: no progress update, no 'Initialized device' "
                               "line and no 'Tested N GPUs' verdict")
    indices = sorted(set(names) | set(verdicts) | set(setup) | set(range(len(last[1]))))
    gpus = []
    for i in indices:
        name, uuid = names.get(i, (None, None))
        mem, precision, tc = setup.get(i, (None, None, False))
        proc = last[1][i] if have_last and i < len(last[1]) else None
        err = last[2][i] if have_last and i < len(last[2]) else None
        temp = last[3][i] if have_last and i < len(last[3]) else None
        gpus.append(GpuBurnGpu(
            index=i, name=name, uuid=uuid, precision=precision, tensor_cores=tc, memory_mb=mem,
            iterations=proc[0] if proc else None, gflops=proc[1] if proc else None,
            errors=err[0] if err else None, flag=err[1] if err else None, temp_c=temp,
            verdict=verdicts.get(i),
        ))
    return GpuBurnRun(gpus=tuple(gpus), updates=updates,
                      last_percent=last[0] if have_last else None, tested=tested,
                      problems=tuple(problems))


def _update(text: str) -> tuple[float, list[tuple[int, float]], list[tuple[int, str | None]],
                                list[int | None]] | None:
    """One progress update, or None when it is cut short (the counts do not line up)."""
    m = _UPDATE.match(text)
    if m is None or "errors:" not in text or "temps:" not in text:
        return None
    head, _, rest = text.partition("errors:")
    errs_text, _, temps_text = rest.partition("temps:")
    proc = [(int(p.group(1)), float(p.group(2))) for p in _PROC.finditer(head)]
    errs = [(int(e.group(1)), e.group(2)) for e in _ERRS.finditer(errs_text)]
    temps = [None if t.group(1) == "--" else int(t.group(1)) for t in _TEMP.finditer(temps_text)]
    if not proc or not (len(proc) == len(errs) == len(temps)):
        return None
    return float(m.group(1)), proc, errs, temps
