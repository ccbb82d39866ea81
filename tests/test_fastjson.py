"""stetho.core.fastjson reads what json reads, with orjson and without it: a stored result row,
64-bit counters at their limits, and the texts orjson refuses (NaN, Infinity, a number past
float's range, a lone surrogate escape), which fall back to json."""

from __future__ import annotations

import json
import math

import pytest

from stetho.core import fastjson
from stetho.history import blob
from stetho.results import Result

REFUSED_BY_ORJSON = ['[NaN, 1]', '[Infinity]', '[-Infinity]', '1e400', '"\\ud800x"',
                     '{"value": NaN, "check": "gpu_ecc"}']
BOTH_READ = ['{"a":1,"a":2}', '[18446744073709551615, -9223372036854775808]', '[0.1, -0.0]',
             '["\\u0000", "é", "\\ud83d\\ude00"]', ' [1] \n', '{"x": {"y": [true, false, null]}}']
GARBAGE = ['', '[1,]', '{"a":"\x00"}', '123abc', '\ufeff[1]', '[', '{"a" 1}']


@pytest.fixture(params=["orjson", "json"])
def reader(request, monkeypatch):
    if request.param == "json":
        monkeypatch.setattr(fastjson, "_orjson", None)
    elif fastjson._orjson is None:
        pytest.fail("orjson is a dependency (pyproject.toml): install the project")
    return request.param


def _same(a: object, b: object) -> bool:
    return json.dumps(a) == json.dumps(b)  # NaN == NaN as text, -0.0 kept apart from 0.0


def test_reads_what_json_reads(reader):
    for text in REFUSED_BY_ORJSON + BOTH_READ:
        assert _same(fastjson.loads(text), json.loads(text)), text
    assert math.isnan(fastjson.loads("[NaN]")[0])


def test_garbage_is_jsons_error(reader):
    for text in GARBAGE:
        with pytest.raises(json.JSONDecodeError):
            fastjson.loads(text)


def test_a_stored_row_reads_back_the_same(reader):
    results = [Result("n1", "gpu_ecc", f"gpu{i}", "pass", "ok", i * 1.5, "count")
               for i in range(8)]
    results.append(Result("n1", "ib_counters", "mlx5_0:1", "fail", "symbol errors",
                          float("nan"), expected={"max": 18446744073709551615}))
    got = blob.decode("n1", "r1", blob.encode(results))
    assert _same([r.to_json() for r in got.results], [r.to_json() for r in results])
    assert got.lines[0] == json.dumps(results[0].to_json(), separators=(",", ":")).encode()
