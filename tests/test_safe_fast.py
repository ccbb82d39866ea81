"""stetho.sinks.safe.clean skips results with nothing to clean (the run folder cleans every
result of every diagnosed node): over seeded malformed results (tests/test_output_writers.py's
generator) a result `writable` calls clean is exactly what the full cleaning makes of it, and
one it does not is cleaned in full."""

from __future__ import annotations

import random

from stetho.results import Result
from stetho.sinks import safe
from tests.test_output_writers import _result


def test_the_fast_path_agrees_with_the_full_cleaning() -> None:
    rnd = random.Random(32)
    rows = [_result(rnd) for _ in range(3000)]
    rows += [Result("gpu01", "gpu_clocks", "gpu0", st, "SM 1410 MHz", v, "MHz", 1980, "≥ 1980",
                    limit=1980.0, limit_op=">=", duration_s=0.25)
             for st in ("pass", "fail") for v in (1410.0, 1410, -0.0, True, "1410", None)]
    fast = [r for r in rows if safe.writable(r)]
    assert len(fast) >= 12  # the plain ones at least: the test exercises both paths
    for r in fast:
        assert safe.clean(r) is r
        assert safe._clean(r) == r
    for r in rows:
        if not safe.writable(r):
            assert safe.clean(r).to_json().keys() == r.to_json().keys()
            assert safe.writable(safe.clean(r)) or any(
                type(safe.clean(r).to_json()[k]) in (list, dict) for k in
                ("value", "expected", "threshold", "override"))
