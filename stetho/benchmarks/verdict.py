"""What a benchmark tool says of its own run: pass, warn, fail or error, in its own words.

Several tools judge their run themselves: `dcgmi diag` gives each test Pass/Fail/Warn/Skip,
gpu-burn ends with `GPU n: OK` or `FAULTY` and counts errors, nccl-tests counts `#wrong`
elements and prints `Out of bounds values : N FAILED`. That verdict needs no baseline, so it is
judged apart from the metrics (`bench_verdict`, checks/test_bench.py): a FAIL is a fail the
first time a benchmark runs, never a `skip: no baseline`.

Pure: a parser's result in, a `ToolVerdict` out. `fail` is the tool saying the hardware is
wrong (a failed test, a FAULTY GPU, corrupted data); `error` is the tool saying it could not
do the work (dcgmi could not start the diagnostic, CUDA init failed, iperf3 could not connect,
a fio job's errno), so nothing was judged; neither is ever a pass. A tool whose verdict is
missing (gpu-burn cut before `Tested N GPUs`, nccl-tests with checking off) is an error too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stetho.core.record import record
from stetho.parsers import ParseError

STATUSES = ("pass", "warn", "fail", "error")
_RANK = {"pass": 0, "warn": 1, "error": 2, "fail": 3}


@record
class ToolVerdict:
    """A tool's verdict on one run: `status`, a one-line `summary`, and `words`: the lines the
    tool printed that decided it (quoted in the result, so a person reads the tool itself)."""

    status: str
    summary: str
    words: tuple[str, ...] = ()


def worst(statuses: list[str]) -> str:
    """fail > error > warn > pass: a FAIL the tool printed is never hidden by another run's
    error."""
    return max(statuses, key=lambda s: _RANK[s]) if statuses else "error"


def judge(parser: str, parsed: object) -> ToolVerdict | None:
    """The verdict of a parsed run, for the parsers whose tools give one (None otherwise)."""
    fn = JUDGES.get(parser)
    return fn(parsed) if fn is not None else None


def judge_text(parser: str, text: str) -> ToolVerdict | None:
    """Parse and judge one output; unparsable output is an error verdict, never a pass."""
    from stetho.benchmarks.fieldpath import parser_module

    if parser not in JUDGES:
        return None
    try:
        parsed = parser_module(parser).parse(text)
    except ParseError as exc:
        return ToolVerdict("error", f"output unparsable: {exc}")
    return judge(parser, parsed)


def _dcgmi_diag(run: Any) -> ToolVerdict:
    if run.runtime_error:
        return ToolVerdict("error", "dcgmi diag could not run the diagnostic",
                           tuple(run.runtime_error.splitlines()))
    if not run.tests:
        return ToolVerdict("error", "dcgmi diag reported no test results")
    failed = [t for t in run.tests if t.failed]
    if failed:
        return ToolVerdict("fail", f"dcgmi diag: {len(failed)} of {len(run.tests)} tests "
                           f"failed ({', '.join(t.name for t in failed)})",
                           tuple(_diag_words(t) for t in failed))
    warned = [t for t in run.tests if t.status == "warn"]
    if warned:
        return ToolVerdict("warn", f"dcgmi diag: {len(warned)} of {len(run.tests)} tests "
                           f"warned ({', '.join(t.name for t in warned)})",
                           tuple(_diag_words(t) for t in warned))
    if not run.pass_count:
        return ToolVerdict("error", f"dcgmi diag: all {len(run.tests)} tests skipped, nothing "
                           "was tested")
    return ToolVerdict("pass", f"dcgmi diag: {run.pass_count} tests passed"
                       + (f", {run.skip_count} skipped" if run.skip_count else ""))


def _diag_words(test: Any) -> str:
    gpus = sorted({g for r in test.results if r.status == test.status for g in r.gpus})
    where = f" (GPU {', '.join(map(str, gpus))})" if gpus else ""
    said = "; ".join(test.warnings[:2])
    return f"{test.name}: {test.status.capitalize()}{where}" + (f": {said}" if said else "")


def _gpu_burn(run: Any) -> ToolVerdict:
    bad = [g for g in run.gpus if g.verdict == "FAULTY" or (g.errors or 0) != 0
           or g.flag is not None]
    if bad:
        words = tuple(f"GPU {g.index}: {g.verdict or 'no verdict'}"
                      + (f", errors: {g.errors}" if g.errors is not None else "")
                      + (f" ({g.flag})" if g.flag else "") for g in bad)
        return ToolVerdict("fail", f"gpu-burn: {len(bad)} of {len(run.gpus)} GPUs FAULTY or "
                           "with errors (their results differ between iterations)",
                           words + run.problems)
    if run.problems:
        return ToolVerdict("error", "gpu-burn could not test the GPUs", run.problems)
    if run.tested is None or not run.gpus:
        return ToolVerdict("error", "gpu-burn's output ends before its verdict (no 'Tested N "
                           "GPUs' lines): the run was cut short")
    missing = [g.index for g in run.gpus if g.verdict is None]
    if run.tested != len(run.gpus) or missing:
        return ToolVerdict("error", f"gpu-burn tested {run.tested} GPUs but gave a verdict for "
                           f"{len(run.gpus) - len(missing)}")
    unrated = [g.index for g in run.gpus if not g.gflops or g.errors is None]
    if unrated:
        return ToolVerdict("error", "gpu-burn says OK but never reported a rate or an error "
                           f"count for GPU {', '.join(map(str, unrated))} (a run too short, "
                           "or the GPU test never started): nothing was checked")
    return ToolVerdict("pass", f"gpu-burn: {len(run.gpus)} GPUs OK, 0 errors")


def _nccl_tests(run: Any) -> ToolVerdict:
    tool_failed = tuple(r for r in (run.failure or "").splitlines()
                        if "FAILED" in r and ("Out of bounds" in r or "Avg bus" in r))
    if run.total_wrong:
        bad = [r for r in run.rows if r.wrong > 0]
        return ToolVerdict("fail", f"nccl-tests reports {run.total_wrong} wrong elements in "
                           f"{len(bad)} sizes (first at {bad[0].size_bytes} B): data corruption",
                           tool_failed + tuple(f"{r.size_bytes} B #wrong {r.oop_wrong} "
                                               f"out-of-place, {r.ip_wrong} in-place"
                                               for r in bad[:3]))
    if tool_failed:
        return ToolVerdict("fail", "nccl-tests reports FAILED: " + "; ".join(tool_failed),
                           tool_failed)
    if run.failed:
        return ToolVerdict("error", f"nccl-tests failed: {run.failure or 'no result table'}",
                           tuple((run.failure or "").splitlines()))
    if run.truncated or not run.rows:
        return ToolVerdict("error", "nccl-tests output is truncated: the table stops before "
                           "maxBytes with no Avg bus bandwidth line")
    if not run.validated:
        return ToolVerdict("error", "nccl-tests checked nothing (#wrong is N/A: run with -c 1 "
                           "so that it checks its results)")
    return ToolVerdict("pass", f"nccl-tests: {len(run.rows)} sizes, 0 wrong")


def _nvbandwidth(run: Any) -> ToolVerdict:
    if run.errors:
        return ToolVerdict("error", "nvbandwidth reported errors", tuple(run.errors))
    if not run.testcases:
        return ToolVerdict("error", "nvbandwidth ran no testcase")
    return ToolVerdict("pass", f"nvbandwidth: {len(run.testcases)} testcases, no error")


def _fio(run: Any) -> ToolVerdict:
    if run.errors or run.interrupted or not run.jobs:
        words = tuple(run.messages) + tuple(f"job {j.name}: error {j.error}" for j in run.jobs
                                            if j.error)
        return ToolVerdict("error", "fio reported errors" if run.errors else
                           "fio was interrupted" if run.interrupted else "fio ran no job",
                           words)
    return ToolVerdict("pass", f"fio: {len(run.jobs)} jobs, no error")


def _iperf3(run: Any) -> ToolVerdict:
    if run.error:
        return ToolVerdict("error", f"iperf3: {run.error}", (run.error,))
    if not run.ok:
        return ToolVerdict("error", "iperf3: the receiver counted nothing")
    return ToolVerdict("pass", "iperf3: no error")


def _perftest(run: Any) -> ToolVerdict:
    if run.errors:
        return ToolVerdict("error", "perftest reported errors", tuple(run.errors))
    if not run.ok:
        return ToolVerdict("error", "perftest printed no result rows")
    return ToolVerdict("pass", f"perftest: {len(run.rows)} rows, no error")


#: parser name -> how to read its tool's verdict.
JUDGES: dict[str, Callable[[Any], ToolVerdict]] = {
    "dcgmi_diag": _dcgmi_diag, "gpu_burn": _gpu_burn, "nccl_tests": _nccl_tests,
    "nvbandwidth": _nvbandwidth, "fio": _fio, "iperf3": _iperf3, "perftest": _perftest,
}
