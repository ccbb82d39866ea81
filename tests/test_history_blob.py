"""node_runs.results stored one result per line (stetho.history.blob): every reader of the
whole list still reads it, rows from before lines still read, the gate parses only the
checks it keeps, and a row whose lines do not say what they hold is that node's error."""

from __future__ import annotations

import json
import sqlite3
import time
import zlib
from pathlib import Path

import pytest

from stetho.history import blob
from stetho.history.errors import HistoryCorrupt
from stetho.history.store import History, NodeRun
from stetho.results import Result


def _results(node: str = "n01") -> list[Result]:
    return [Result(node, "gpu_count", "", "pass", "8 GPUs", value=8, unit="count"),
            Result(node, "gpu_ecc", "gpu0", "fail", "2 uncorrectable", value=[2, 0]),
            Result(node, "gpu_ecc", "gpu1", "pass", "none, \"quoted\"\nnewline é"),
            Result(node, "site_motd", "", "pass", "ok")]


def test_the_stored_text_is_one_json_list_one_compact_result_a_line() -> None:
    rs = _results()
    text = zlib.decompress(blob.encode(rs)).decode()
    assert [Result.from_json(d) for d in json.loads(text)] == rs  # whole-list readers
    lines = text.split("\n")
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == len(rs) + 2
    enc = json.JSONEncoder(separators=(",", ":"), default=str).encode
    assert lines[1:-1] == [enc(r.to_json()) + ("," if i < len(rs) - 1 else "")
                           for i, r in enumerate(rs)]


def test_decode_round_trips_and_gives_each_results_line() -> None:
    rs = _results()
    got = blob.decode("n01", "r1", blob.encode(rs))
    assert got.results == rs
    enc = blob.line_encoder()
    assert got.lines == [enc(r.to_json()).encode() for r in rs]


def test_decode_keeps_only_wanted_checks_unknown_to_a_newer_run() -> None:
    got = blob.decode("n01", "r1", blob.encode(_results()), known={"gpu_count"},
                      keep={"gpu_count", "gpu_ecc"})
    assert [(r.check, r.subject) for r in got.results] == [("gpu_ecc", "gpu0"),
                                                           ("gpu_ecc", "gpu1")]


def test_a_row_from_before_lines_reads_whole_and_has_no_lines() -> None:
    rs = _results()
    for old in (json.dumps([r.to_json() for r in rs]),  # as stetho wrote it before
                json.dumps([r.to_json() for r in rs], indent=1)):
        got = blob.decode("n01", "r1", zlib.compress(old.encode()), keep={"gpu_ecc"})
        assert got.results == [r for r in rs if r.check == "gpu_ecc"]
        assert got.lines == [None, None]


def test_a_line_of_another_writer_is_parsed_for_its_check_and_not_copied() -> None:
    r = Result("n01", "gpu_ecc", "gpu0", "pass", "ok")
    reordered = json.dumps(dict(reversed(list(r.to_json().items()))), separators=(",", ":"))
    text = "[\n" + reordered + ",\n" + blob.line_encoder()(r.to_json()) + "\n]"
    got = blob.decode("n01", "r1", zlib.compress(text.encode()), keep={"gpu_ecc"})
    assert got.results == [r, r]
    assert got.lines[0] is None and got.lines[1] is not None


def test_a_row_not_laid_out_one_result_a_line_reads_as_every_reader_reads_it() -> None:
    """Two results on one line, a line with a repeated key: the row is read as the JSON list
    it is (as whole-list readers read it), and a line that is not one result is never copied
    (results.json encodes those results itself)."""
    two = ('[\n{"node":"n01","check":"a","subject":"","status":"pass","message":""},'
           '{"node":"n01","check":"b","subject":"","status":"fail","message":""}\n]')
    got = blob.decode("n01", "r1", zlib.compress(two.encode()), keep={"b"})
    assert [(r.check, r.status) for r in got.results] == [("b", "fail")]
    assert got.lines == [None]
    dup = '[\n{"node":"n01","check":"a","check":"b","subject":"","status":"pass","message":""}\n]'
    got = blob.decode("n01", "r1", zlib.compress(dup.encode()), keep={"a"})
    assert got.results == []  # its check is b, as json reads it


def test_a_row_that_is_not_json_is_corrupt() -> None:
    with pytest.raises(HistoryCorrupt, match="results of n01 in run r1 are unreadable"):
        blob.decode("n01", "r1", zlib.compress(b'[\n{"node":"n01","check":"a",\n]'))


def _record(db: Path, run: str, when: float, results: list[Result]) -> None:
    with History(db) as h:
        h.record(run, "sweep", [NodeRun("n01", "h100-sxm-8gpu", results, [])], when=when)


def test_a_narrow_newer_run_replaces_only_its_checks(tmp_path: Path) -> None:
    db, now = tmp_path / "h.db", time.time()
    _record(db, "r1", now - 200, _results())
    newer = Result("n01", "gpu_count", "", "fail", "7 GPUs", value=7)
    _record(db, "r2", now - 100, [newer])
    with History(db) as h:
        got = h.latest_per_check(["n01"], 3600, now=now)["n01"]
    assert got.checks["gpu_count"][1] == "r2" and got.checks["gpu_ecc"][1] == "r1"
    assert sorted((r.check, r.subject, r.status) for r in got.results) == [
        ("gpu_count", "", "fail"), ("gpu_ecc", "gpu0", "fail"), ("gpu_ecc", "gpu1", "pass"),
        ("site_motd", "", "pass")]
    # each result is stored as its line (results.json copies it)
    assert {id(r) for r in got.results} == set(got.stored)
    enc = blob.line_encoder()
    assert all(line == enc(r.to_json()).encode() for r, line in got.stored.values())


def test_a_row_whose_blob_was_rewritten_is_that_nodes_error(tmp_path: Path) -> None:
    """A line edited in the stored blob (a fail made a pass) fails the row's signature: n01
    is could-not-evaluate, named, never read as the edited pass."""
    db, now = tmp_path / "h.db", time.time()
    _record(db, "r1", now - 100, _results())
    with sqlite3.connect(db) as conn:
        (old,) = conn.execute("SELECT results FROM node_runs").fetchone()
        text = zlib.decompress(old).decode().replace('"status":"fail"', '"status":"pass"')
        conn.execute("UPDATE node_runs SET results = ?", (zlib.compress(text.encode()),))
    with History(db) as h:
        got = h.latest_per_check(["n01"], 3600, now=now)["n01"]
    assert got.distrusted and "n01" in got.distrusted
    assert got.results == []


def test_a_row_whose_checks_are_interleaved_or_escaped_reads_the_same() -> None:
    """Results of one check apart from each other, and names JSON escapes: each line is
    kept or skipped by its own check."""
    rs = [Result("n01", "a", "0", "pass", ""), Result("n01", "b", "", "pass", ""),
          Result("n01", "a", "1", "fail", ""), Result("n01", 'q"\\é', "", "pass", ""),
          Result("n01", "c", "", "pass", "")]
    for keep in ({"a"}, {"a", "c"}, {'q"\\é', "c"}, {"b", "c", "z"}):
        got = blob.decode("n01", "r1", blob.encode(rs), keep=keep)
        assert got.results == [r for r in rs if r.check in keep], keep
    got = blob.decode("n01", "r1", blob.encode(rs[3:]), keep={"c"}, known={'q"\\é'})
    assert got.results == [rs[4]]


def test_a_row_past_ascii_is_read_and_never_copied() -> None:
    """The lines results.json copies are the row's bytes: only where the row is ASCII (as
    stetho writes every row) is one copied; a row with UTF-8 text in it (another writer)
    reads the same, and results.json encodes those results itself."""
    r = Result("n01", "gpu_ecc", "gpu0", "pass", "80 °C, ok")
    text = "[\n" + json.dumps(r.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n]"
    got = blob.decode("n01", "r1", zlib.compress(text.encode()), keep={"gpu_ecc"})
    assert got.results == [r] and got.lines == [None]
    ascii_row = blob.decode("n01", "r1", blob.encode([r]))
    assert ascii_row.results == [r] and ascii_row.lines[0] is not None
    assert ascii_row.lines[0].isascii() and b"\\u00b0C" in ascii_row.lines[0]
