"""Turn what happened when a check ran (its verdict, or the exception it raised) into a Result.

Shared by the plugin's two ways of running a check: one pytest item per subject, and batches
of subjects in one item (replay of many nodes). A fail is a CheckFailed or a plain assert; an
Unavailable is a skip or an error as it says; anything else is an error, never a pass.
"""

from __future__ import annotations

from stetho.checking.verdict import CheckError, CheckFailed, Verdict
from stetho.results import Result


def result(node: str, check: str, subject: str, verdict: Verdict | None,
           exc: BaseException | None = None, *, skipped: str | None = None,
           probe: str | None = None, duration_s: float = 0.0) -> Result:
    v = verdict or Verdict()
    status, message = v.status, v.message
    remediation = v.remediation or getattr(exc, "remediation", None)
    if skipped is not None:
        status, message = "skip", skipped
    elif exc is not None:
        status, message = classify(exc)
    elif status == "pass" and not message:
        message = "ok"
    return Result(node=node, check=check, subject=subject, status=status, message=message,
                  value=v.value, unit=v.unit, expected=v.expected, threshold=v.threshold,
                  remediation=remediation, evidence=v.evidence, probe=v.probe or probe,
                  duration_s=round(duration_s, 6), reference=v.reference,
                  limit=v.limit.value if v.limit else None,
                  limit_op=v.limit.op if v.limit else None)


def classify(exc: BaseException) -> tuple[str, str]:
    from stetho.facts.node import Unavailable
    from stetho.parsers import ParseError

    if isinstance(exc, CheckFailed):
        return "fail", str(exc)
    if isinstance(exc, AssertionError):
        return "fail", str(exc).split("\n")[0] or _failed_assert(exc)
    if isinstance(exc, Unavailable):
        return ("skip" if exc.status == "skip" else "error"), exc.reason
    if isinstance(exc, (CheckError, ParseError)):
        return "error", str(exc)
    if type(exc).__name__ == "Skipped":  # pytest.skip() inside a check
        return "skip", str(getattr(exc, "msg", exc))
    return "error", f"check raised {type(exc).__name__}: {exc} (a bug in the check)"


def _failed_assert(exc: AssertionError) -> str:
    """An assert without a message, named by its line: `assert x > 0` says what was
    expected where `assertion failed` says nothing."""
    import linecache

    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    line = "" if tb is None else linecache.getline(tb.tb_frame.f_code.co_filename,
                                                     tb.tb_lineno).strip()
    return f"assertion failed: {line}" if line.startswith("assert") else "assertion failed"
