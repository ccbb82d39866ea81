"""Results spilled to disk read back exactly as a list would: same results, same documents."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from stetho.results import Result, counts, exit_code
from stetho.sinks import json_out, junit, table
from stetho.sinks.spool import Results, row


def _results() -> list[Result]:
    out = [Result(node=f"n{i % 7}", check=f"c{i % 5}", subject=f"gpu{i % 3}",
                  status=("pass", "fail", "error", "skip", "warn")[i % 5],
                  message=f"m{i} <&> \"q\"", value=i * 1.5, unit="W", duration_s=0.001 * i,
                  remediation="fix it" if i % 2 else None)
           for i in range(60)]
    return [*out, Result(node="*", check="checks", subject="", status="error", message="x")]


def test_spilled_results_read_back_the_same():
    kept = _results()
    spilled = Results(kept, spill_at=10)
    assert spilled.spilled and len(spilled) == len(kept)
    assert list(spilled) == kept
    assert spilled[0] == kept[0] and spilled[-1] == kept[-1] and spilled[3:6] == kept[3:6]
    assert counts(spilled) == counts(kept) and exit_code(spilled) == exit_code(kept) == 1
    assert spilled.node_count() == 7
    assert spilled.where(("fail",)) == [r for r in kept if r.status == "fail"]
    extra = Result(node="n9", check="late", subject="", status="pass")
    spilled.append(extra)
    spilled.add_rows([row(extra)])
    assert list(spilled)[-2:] == [extra, extra] and spilled.node_count() == 8


def test_small_results_stay_in_memory():
    r = Results(_results())
    assert not r.spilled and list(r) == _results()


def test_streamed_json_is_the_same_document():
    kept = _results()
    streamed = json.loads("".join(json_out.render_stream(Results(kept, spill_at=10))))
    whole = json.loads(json_out.render(kept))
    for doc in (streamed, whole):
        doc.pop("created_at")
    assert streamed == whole
    assert json_out.load(json.dumps(streamed)) == kept


def test_streamed_junit_is_the_same_document():
    kept = _results()
    streamed = ET.fromstring("".join(junit.render_stream(Results(kept, spill_at=10))))
    whole = ET.fromstring(junit.render(kept))

    def canon(e: ET.Element) -> tuple:
        attrs = dict(e.attrib)
        if e.tag == "testsuites":
            attrs["time"] = f"{float(attrs['time']):.6f}"
        return (e.tag, attrs, (e.text or "").strip(), [canon(c) for c in e])

    assert canon(streamed) == canon(whole)
    assert len(streamed.findall("testsuite")) == 8  # one per node, and the "*" row's


def test_table_summary_of_spilled_results():
    kept = _results()
    assert table.summary(Results(kept, spill_at=10)) == table.summary(kept)
    text = table.render(Results(kept, spill_at=10), show=("fail",))
    assert text == table.render(kept, show=("fail",))


def test_a_rows_document_is_every_field_in_order_as_before():
    """row() copies the instance dict and reuses one encoder: the document must stay what
    dataclasses.asdict + json.dumps made (every field, declared order, str() for the odd)."""
    import dataclasses
    from pathlib import Path

    r = Result(node="n1", check="c", subject="gpu0", status="fail", message="m",
               value=Path("/x"), override={"by": "me"}, limit=1.5, limit_op="<=")
    assert row(r)[4] == json.dumps(dataclasses.asdict(r), default=str, separators=(",", ":"))
    assert list(r.to_json()) == [f.name for f in dataclasses.fields(Result)]


def test_rows_travel_packed_as_they_were():
    """A report carries its rows packed (documents one per line, not re-escaped): unpacked,
    they are the rows sent, a message with newlines and non-ASCII text included."""
    from stetho.sinks.spool import pack, unpack

    rs = [Result(node="n1", check="c", subject="gpu0", status="fail",
                 message="line one\nline two \u00b5s \"quoted\""),
          Result(node="n2", check="c", subject="", status="pass", value={"a": [1, 2.5]})]
    rows = [row(r) for r in rs]
    assert unpack(pack(rows)) == rows
    assert unpack(pack([])) == []


def test_result_init_takes_exactly_its_fields():
    """Result's hand-written __init__ (faster than the dataclass's) keeps the fields' names,
    order and defaults, and its instance dict (to_json's source) holds them in that order."""
    import dataclasses
    import inspect

    params = list(inspect.signature(Result).parameters.values())
    fields = dataclasses.fields(Result)
    assert [p.name for p in params] == [f.name for f in fields]
    assert [p.default for p in params] == [
        inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        for f in fields]
    r = Result("n", "c", "s", "pass")
    assert list(r.to_json()) == [f.name for f in fields]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = "fail"  # type: ignore[misc]
