"""Every output of a finished run, written in one place from its outcome: JUnit, the results
JSON, the evidence bundle, the sweep's machine outcome, the node_exporter textfile and the
run folder with its page. A new sink is added here once and every command that checks has it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

from stetho.check.outcome import CheckOutcome
from stetho.check.request import SpoolTarget
from stetho.core import atomic
from stetho.errors import StethoError, WriteFailed
from stetho.results import Result


def write(outcome: CheckOutcome) -> list[Path]:
    """Write what `outcome.request.outputs` selects; the paths written ('-' is not a path).
    A run with no result at all writes nothing: there is no verdict to write. An output that
    cannot be written (a full disk) is named in `outcome.output_problems` and the others are
    still written: the verdict is never lost to a sink."""
    from stetho.sinks import json_out as json_sink
    from stetho.sinks import junit as junit_sink
    from stetho.sinks.spool import Results

    out = outcome.request.outputs
    results = outcome.results
    written: list[Path] = []
    problems = outcome.output_problems
    if out.evidence_out is not None and outcome.bundles and len(outcome.bundles) == 1:
        try:  # the evidence stands, whatever the checks
            outcome.bundles[0].save(out.evidence_out)
            written.append(out.evidence_out)
        except OSError as exc:
            problems.append(f"cannot write {out.evidence_out}: {exc.strerror or exc}")
    if not results:
        raise StethoError("no check produced a result (is the checks folder empty?)")
    streamed = results if isinstance(results, Results) and results.spilled else None
    if out.junit:
        junit = out.junit
        if _sink(problems, lambda: write_text(
                junit, junit_sink.render_stream(streamed) if streamed is not None
                else junit_sink.render(list(results)))):
            written += [Path(junit)] if junit != "-" else []
    if out.json:
        json_path = out.json
        if _sink(problems, lambda: write_text(
                json_path, json_sink.render_stream(streamed) if streamed is not None
                else json_sink.render(list(results)))):
            written += [Path(json_path)] if json_path != "-" else []
    if out.outcome:
        target = out.outcome
        _sink(problems, lambda: written.extend(_outcome(outcome, target)))
    if out.spool is not None:
        spool = out.spool
        _sink(problems, lambda: written.append(_spool(outcome, spool)))
    if out.textfile_dir is not None:
        folder = out.textfile_dir
        _sink(problems, lambda: written.append(write_textfile(
            folder, outcome.command, results, run_id=outcome.run_id, started=outcome.started,
            duration_s=outcome.duration_s)))
    if out.run_dir is not None:
        run_dir = out.run_dir
        _sink(problems, lambda: written.extend(write_run_folder(run_dir, outcome)))
    return written


def _sink(problems: list[str], write: Callable[[], object]) -> bool:
    """Run one output's write; a write that failed is named in `problems` (False)."""
    try:
        write()
    except WriteFailed as exc:
        problems.append(str(exc))
        return False
    except OSError as exc:
        problems.append(f"cannot write {exc.filename or 'an output'}: {exc.strerror or exc}")
        return False
    return True


def _outcome(outcome: CheckOutcome, target: str) -> list[Path]:
    from stetho.fleet.outcome import Outcome

    one = outcome.bundles[0] if outcome.bundles and len(outcome.bundles) == 1 else None
    summary = outcome.summaries.get(one.node) if one is not None else None
    write_text(target, Outcome.of(list(outcome.results), one, summary).render())
    return [Path(target)] if target != "-" else []


def _spool(outcome: CheckOutcome, target: SpoolTarget) -> Path:
    """This node's outcome into the result spool, one atomic file (stetho.spool)."""
    from stetho import spool
    from stetho.fleet.outcome import Outcome

    if not outcome.bundles or len(outcome.bundles) != 1:
        raise WriteFailed("cannot spool: a spool file holds one node's own run (--local or "
                          "--sim), not a replay")
    one = outcome.bundles[0]
    out = Outcome.of(list(outcome.results), one, outcome.summaries.get(one.node))
    try:
        return spool.write(target.folder, out, run_id=target.run_id or outcome.run_id,
                           kind=target.kind, when=outcome.started.timestamp(),
                           key=target.key, command=outcome.request.command_line)
    except OSError as exc:
        raise WriteFailed(f"cannot write the spool file into {target.folder}: "
                          f"{exc.strerror or exc}") from None


def textfile_path(target: Path, command: str) -> Path:
    """The textfile a command writes into `target`: `stetho-<command>.prom` in that folder, or
    `target` itself when it names a .prom file (what `sweep --textfile FILE` used to take)."""
    return target if target.suffix == ".prom" else target / f"stetho-{command}.prom"


def write_textfile(target: Path, command: str, results: Iterable[Result], *, run_id: str,
                   started: datetime, duration_s: float,
                   gate: Mapping[str, Mapping[str, bool]] | None = None,
                   gate_modes: Mapping[str, str] | None = None) -> Path:
    """The node_exporter textfile of one run (stetho.sinks.prometheus), written atomically:
    one file per command, so a folder node_exporter reads holds each command's latest run
    side by side (`command` keeps their series apart). `gate`: policy -> {node: blocked}."""
    from stetho.sinks import prometheus

    path = textfile_path(target, command)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return prometheus.write(path, prometheus.render(
            results, run_id=run_id, started_at=started, duration_s=duration_s, gate=gate,
            command=command, gate_modes=gate_modes))
    except OSError as exc:
        raise WriteFailed(f"cannot write the textfile {path}: {exc.strerror or exc}") from None


def write_run_folder(run_dir: Path, outcome: CheckOutcome) -> list[Path]:
    """results.json, junit.xml, summary.json, summary.txt and index.html in `run_dir`
    (stetho.fleet.run_folder, what a sweep writes for its fleet)."""
    from stetho.fleet import run_folder

    results = list(outcome.results)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        run_folder.write_reports(run_dir, results, run_id=outcome.run_id,
                                 hosts=len(outcome.nodes()), busy={}, unreachable=[],
                                 ansible={}, suite=None,
                                 command=outcome.command)
        page = run_folder.write_page(run_dir, results, reports={}, suite=None,
                                     title=f"stetho {outcome.command} {outcome.run_id}")
    except OSError as exc:
        raise WriteFailed(f"cannot write the run folder {run_dir}: "
                          f"{exc.strerror or exc}") from None
    return [run_dir / n for n in ("results.json", "junit.xml", "summary.json",
                                  "summary.txt")] + [page]


def write_text(path: str, text: str | Iterable[str]) -> None:
    """Write a file atomically; '-' (or a device such as /dev/stdout) is written through.
    `text` may come in pieces (a streamed document), written as they come."""
    pieces: Sequence[str] | Iterable[str] = (text,) if isinstance(text, str) else text
    if path == "-":
        for piece in pieces:
            sys.stdout.write(piece)
        return
    p = Path(path)
    if p.exists() and not p.is_file():
        with p.open("w", encoding="utf-8") as fh:
            fh.writelines(pieces)
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic.write(p, pieces)  # an unpredictable temporary: a planted link redirects nothing
    except OSError as exc:
        raise WriteFailed(f"cannot write {path}: {exc.strerror or exc}") from None
