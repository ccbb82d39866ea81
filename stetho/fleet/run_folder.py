"""What a sweep writes for the whole fleet into its run folder: results.json, junit.xml,
summary.json and summary.txt (the first line is what the night was), and the run page
(index.html: the grid, the problems, the busbw chart, the benchmark suite's night and links
to the diagnosis reports), a page a person opens from the CI artifact or the file share.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stetho.core import atomic, hostlist
from stetho.results import Result, counts, exit_code

if TYPE_CHECKING:
    from stetho.sinks.suite import SuiteSummary

#: Above this many results the fleet's JUnit is written a node at a time (junit.render_stream):
#: the whole document's DOM took 537 MiB for 256 nodes' 58,624 results, 199 MiB streamed
#: (bench/ingest.py's fleet; about 20% more CPU), so 10,240 nodes fit in memory.
JUNIT_STREAM_ABOVE = 50_000


def write_reports(run_dir: Path, results: list[Result], *, run_id: str, hosts: int,
                  busy: Mapping[str, str], unreachable: list[str], ansible: dict[str, Any],
                  suite: SuiteSummary | None, command: str = "sweep") -> None:
    """results.json, junit.xml, summary.json and summary.txt. `busy`: node -> why nothing
    invasive ran there; `command`: what made the run (summary.txt's first word after stetho)."""
    from stetho.sinks import json_out, junit, table

    if len(results) > JUNIT_STREAM_ABOVE:  # a result at a time, not the fleet's document
        from stetho.sinks.spool import Results

        whole = Results(results, spill_at=len(results) + 1)
        atomic.write(run_dir / "results.json", json_out.render_stream(whole, run_id=run_id))
        atomic.write(run_dir / "junit.xml", junit.render_stream(whole))
    else:
        (run_dir / "results.json").write_text(json_out.render(results, run_id=run_id))
        (run_dir / "junit.xml").write_text(junit.render(results))
    failing = sorted({r.node for r in results if r.status == "fail"})
    errors = sorted({r.node for r in results if r.status == "error"} - set(failing))
    summary = {
        "run_id": run_id, "hosts": hosts, "exit_code": exit_code(results),
        "counts": counts(results), "failing_nodes": failing, "error_nodes": errors,
        "unreachable": sorted(unreachable), "busy_nodes": dict(busy),
        "bench": suite.as_dict() if suite is not None else None,
        "ansible": ansible,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    write_json(run_dir / "summary.json", summary)
    text = table.render(results, width=160, show=("fail", "error", "warn"))
    (run_dir / "summary.txt").write_text(
        f"stetho {command} {run_id}: {hosts} hosts, {len(failing)} failing, "
        f"{len(errors)} could not be evaluated" + (
            f", {len(busy)} busy (nothing invasive ran there: {hostlist.compress(list(busy))})"
            if busy else "") + "\n" + (suite.line() + "\n" if suite is not None else "")
        + text, encoding="utf-8")


def write_page(run_dir: Path, results: list[Result], *, title: str,
               reports: Mapping[str, Path], suite: SuiteSummary | None,
               accuracy: Mapping[str, Any] | None = None) -> Path:
    """The run page, index.html, linking each diagnosed node's report (node -> its path);
    `accuracy`: the knowledge base's rule accuracy (stetho.publish.accuracy.of_repo_or_why),
    None without a knowledge base."""
    from stetho.sinks import runpage

    text = runpage.render(results, title=title,
                          reports=runpage.relative_reports(reports, run_dir),
                          busbw=runpage.busbw_from(results), suite=suite,
                          generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                          accuracy=accuracy)
    return runpage.write(run_dir, text)


def write_textfile(path: Path, results: list[Result], *, run_id: str, started: datetime,
                   accuracy: Mapping[str, Any] | None) -> Path:
    """The sweep's node_exporter textfile (`command="sweep"`): every result and, with a
    knowledge base that could be read, the rules' precision, recall and no-fault-found rate
    (stetho_kb_*). A knowledge base that could not be read writes no accuracy series: absent,
    never a 0 an alert reads as "always wrong"."""
    from stetho.sinks import prometheus

    took = (datetime.now(timezone.utc) - started).total_seconds()
    text = prometheus.render(results, run_id=run_id, started_at=started, duration_s=took,
                             command="sweep")
    if accuracy is not None and "error" not in accuracy:
        text += prometheus.render_accuracy(accuracy, command="sweep")
    return prometheus.write(path, text)


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write(path, pieces(data))


class Encoded(list):  # type: ignore[type-arg]
    """A top-level list whose elements are JSON texts already, as ASCII bytes (encoded as
    `encoder()` does, e.g. results history stored so: stetho.history.blob): copied as they
    are, never decoded and encoded again."""


def dumps(data: Any) -> str:
    """JSON a person can still read and grep: each top-level key on its own line and each
    element of a top-level list (a result) on its own, compact inside. `indent` would send
    json to its pure-Python encoder, most of a 64-node gate's time on real-size results."""
    return "".join(p if isinstance(p, str) else p.decode("ascii") for p in pieces(data))


#: Elements of a top-level list written at a time: a gate's 8,000 results are 5 MB of text,
#: and joining them whole, then the document, then encoding it made three 5 MB copies (a third
#: of writing the gate's results.json, measured); a piece of this many is about 150 KB.
PIECE = 256


def pieces(data: Any) -> Iterator[str | bytes]:
    """`dumps(data)` in pieces, in order (stetho.core.atomic writes them as they come): text,
    and an Encoded list's elements as the bytes they are."""
    enc = json.JSONEncoder(separators=(",", ":"), default=str).encode
    if not isinstance(data, dict) or not data:
        yield enc(data) + "\n"
        return
    one = encoder()
    sep = "{\n "
    for k, v in data.items():
        if isinstance(v, list) and v:
            yield f"{sep}{enc(str(k))}:[\n  "
            texts = v if isinstance(v, Encoded) else None
            for i in range(0, len(v), PIECE):
                part = v[i:i + PIECE]
                if texts is not None:
                    yield (b"" if i == 0 else b",\n  ") + b",\n  ".join(part)
                else:
                    yield ("" if i == 0 else ",\n  ") + ",\n  ".join(map(one, part))
            yield "\n ]"
        else:
            yield f"{sep}{enc(str(k))}:{enc(v)}"
        sep = ",\n "
    yield "\n}\n"


def encoder() -> Callable[[Any], str]:
    """How dumps encodes each element of a top-level list: compact, ASCII, default=str (the
    one history stores a result's line with, stetho.history.blob)."""
    from stetho.history.blob import line_encoder

    return line_encoder()
