"""results.json as the run folder writes it: streamed in pieces (a 64-node gate's 8,000
results are 5 MB), the same text as the whole document made at once, readable as JSON."""

from __future__ import annotations

import json

from stetho.fleet import run_folder
from stetho.fleet.run_folder import PIECE, Encoded, dumps, pieces, write_json


def _whole(data: dict[str, object]) -> str:
    """The layout spelled out: each top-level key a line, each list element a line."""
    parts = []
    for k, v in data.items():
        if isinstance(v, list) and v:
            parts.append(json.dumps(k) + ":[\n  " + ",\n  ".join(
                (x.decode("ascii") for x in v) if isinstance(v, Encoded) else (
                    json.dumps(x, separators=(",", ":")) for x in v)) + "\n ]")
        else:
            parts.append(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":")))
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def test_pieces_across_piece_boundaries_are_the_whole_document(tmp_path):
    for n in (1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 7):
        texts = Encoded(json.dumps({"check": "gpu_ecc", "i": i}, separators=(",", ":")).encode()
                        for i in range(n))
        data = {"schema": "stetho.results", "results": texts, "nodes": [f"n{i}" for i in
                                                                       range(n)],
                "empty": [], "counts": {"pass": n}}
        got = pieces(data)  # the results as the bytes they are, the rest as text
        assert "".join(p if isinstance(p, str) else p.decode() for p in got) == dumps(data) \
            == _whole(data)
        write_json(tmp_path / f"r{n}" / "results.json", data)
        back = json.loads((tmp_path / f"r{n}" / "results.json").read_text())
        assert [r["i"] for r in back["results"]] == list(range(n))
        assert back["nodes"][-1] == f"n{n - 1}" and back["empty"] == []


def test_not_a_dict_is_one_line():
    assert dumps([1, 2]) == "[1,2]\n"
    assert dumps({}) == "{}\n"
    assert list(run_folder.pieces("x")) == ['"x"\n']
