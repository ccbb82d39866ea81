"""`stetho check` (this node, a simulated one, or a replay of saved evidence) and
`stetho collect` (evidence only)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from stetho.cli.common import (
    ProbeProgress,
    ReplayProgress,
    db_option,
    emit,
    history_db,
    settings,
    unwritten,
)
from stetho.spool.files import KINDS as SPOOL_KINDS

if TYPE_CHECKING:
    from stetho.check import SpoolTarget
    from stetho.config import Config

#: A replay of more nodes than this shows only its problems unless --all.
FLEET_TABLE_NODES = 16



@click.command()
@click.option("--local", "local", is_flag=True, help="Collect evidence on this node and check it "
              "(the default when no --evidence is given).")
@click.option("--evidence", "evidence", multiple=True, type=click.Path(),
              help="Replay over saved evidence bundles: a file or a folder of them.")
@click.option("--sim", type=click.Path(), help="Check a simulated node folder "
              "(from `stetho sim build`) instead of this machine.")
@click.option("--node", help="Node name (default: the hostname, or the simulated node's name).")
@click.option("--profile", "profile_name",
              help="Node profile: a name in baselines/ or a YAML path [default: STETHO_PROFILE, "
              "else generic; with --evidence, the profile recorded in each bundle].")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Write the results JSON here.")
@click.option("--evidence-out", type=click.Path(dir_okay=False),
              help="Write the collected evidence bundle here (with --local).")
@click.option("--bench", "bench_suite", type=click.Choice(("quick", "nightly", "acceptance")),
              help="Also run this benchmark suite (with --local/--sim; what `stetho sweep "
              "--bench` asks every node for). Invasive ones only on an idle node.")
@click.option("--peer", help="The other end of peer benchmarks (127.0.0.1: this node).")
@click.option("--checks", "extra_checks", multiple=True, type=click.Path(),
              help="Also run the site checks in this folder (repeatable).")
@click.option("-k", "select", help="Only checks matching this pytest -k expression.")
@click.option("-n", "--workers", help="Spread a replay over N processes (pytest-xdist; 'auto').")
@click.option("--all", "show_all", is_flag=True,
              help="A row for every check x subject (default: passes and skips of a check "
              "are grouped per node).")
@click.option("--problems", is_flag=True, help="Only fail, error and warn rows (the default "
              "for a replay of more than 16 nodes; --all shows every row).")
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line.")
@db_option
@click.option("--history/--no-history", "use_history", default=None,
              help="Drift checks against the history database, and record this run in it "
              "[default: on for --local, off for --evidence replays].")
@click.option("--deadline", "deadline_s", type=click.FloatRange(min=0, min_open=True),
              help="Seconds the probes may take in all (with --local/--sim): then no probe "
              "starts, running ones are killed, each unfinished one is an `error` (timed out) "
              "and the checks still run over the rest. The sweep sets it from the host timeout.")
@click.option("--textfile", "textfile", type=click.Path(path_type=Path),
              help="Also write the node_exporter textfile into this folder, atomically: "
              "stetho-check.prom (stetho-replay.prom for --evidence) [default: "
              "STETHO_TEXTFILE_DIR, the config file's `textfile_dir`].")
@click.option("--out", "run_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also write a run folder here: results.json, junit.xml, summary.json, "
              "summary.txt and the run page index.html.")
@click.option("--outcome", "outcome_out", type=click.Path(dir_okay=False, allow_dash=True),
              hidden=True, help="Write results, JUnit and evidence as one JSON document "
              "('-': stdout, nothing else printed there). What the sweep reads back.")
@click.option("--spool", "spool_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Also leave this node's outcome in the result spool, one atomic file in "
              "SPOOL/<node>/ for `stetho ingest` on the controller [default with --spool-run "
              "or --spool-kind: STETHO_RESULT_SPOOL]. Signed with STETHO_SPOOL_KEY if set.")
@click.option("--spool-run", help="The run id of the spool file [default: this check's].")
@click.option("--spool-kind", type=click.Choice(SPOOL_KINDS),
              help="What ran this check, in the spool file [default: check].")
def check(local: bool, evidence: tuple[str, ...], sim: str | None, node: str | None,
          profile_name: str | None, junit: str | None, json_out: str | None,
          evidence_out: str | None, bench_suite: str | None, peer: str | None,
          extra_checks: tuple[str, ...], select: str | None,
          workers: str | None, show_all: bool, problems: bool, quiet: bool,
          db: str | None, use_history: bool | None, deadline_s: float | None,
          textfile: Path | None, run_dir: Path | None, outcome_out: str | None,
          spool_dir: Path | None, spool_run: str | None, spool_kind: str | None) -> None:
    """Run the health checks on this node (or a simulated one), or replay saved evidence."""
    from stetho import check as check_lib
    from stetho.evidence.bench_run import BenchRequest

    cfg = settings(db=db, profile=profile_name)
    if evidence and (local or sim):
        raise click.UsageError("--evidence replays saved bundles; it cannot be combined with "
                               "--local or --sim")
    if (evidence_out or bench_suite or deadline_s) and evidence:
        raise click.UsageError("--evidence-out, --bench and --deadline are for what --local "
                               "collects")
    replay = bool(evidence)
    spool = spool_target(cfg, spool_dir, spool_run, spool_kind, replay)
    record = use_history if use_history is not None else not replay
    # which probe runs, on stderr; never with the machine outcome on stdout, nor --quiet
    shown = None if quiet or outcome_out == "-" or replay else ProbeProgress()
    # a replay of many nodes takes a while: how far it is, on stderr (never with --quiet)
    many = replay and (len(evidence) > 1 or Path(evidence[0]).is_dir())
    shown_replay = ReplayProgress() if many and not quiet else None
    request = check_lib.CheckRequest(
        command="replay" if replay else "check", sim=sim, evidence=evidence, node=node,
        profile=profile_name, bench=BenchRequest(bench_suite, peer=peer) if bench_suite
        else None, deadline_s=deadline_s, select=select, select_must_match=True,
        extra_checks=extra_checks, workers=workers,
        metrics=record or bool(outcome_out or spool),  # the controller records outcomes
        db=history_db(cfg, sim) if record else None, record=record,
        max_evidence_age_s=replay_max_age() if replay and record else None,
        command_line=" ".join(sys.argv[1:]),
        outputs=check_lib.Outputs(junit=junit, json=json_out,
                                  evidence_out=Path(evidence_out) if evidence_out else None,
                                  textfile_dir=textfile or cfg.textfile_dir, run_dir=run_dir,
                                  outcome=outcome_out, spool=spool),
        probe_progress=shown, collected=shown.close if shown is not None else None,
        replay_progress=shown_replay)
    try:
        outcome = check_lib.run(request)
    except check_lib.NothingSelected as exc:
        raise click.UsageError(str(exc)) from None
    finally:
        for shown_now in (shown, shown_replay):
            if shown_now is not None:
                shown_now.close()
    results = outcome.results
    quiet = quiet or outcome_out == "-"
    if replay and not show_all and not quiet:
        from stetho.sinks import table

        # a fleet's table: its problems (the passes of thousands of nodes are no table to
        # read, and laying them out took as long as checking them)
        problems = problems or table.node_count(results) > FLEET_TABLE_NODES
    code = emit(results, None, None, show_all=show_all, problems=problems, quiet=quiet,
                summary_to_stderr=outcome_out == "-")
    if run_dir is not None and not quiet and run_dir in outcome.written:
        click.echo(f"run folder: {run_dir} (run page: {run_dir / 'index.html'})")
    sys.exit(unwritten(outcome.output_problems, code))


def spool_target(cfg: Config, folder: Path | None, run_id: str | None, kind: str | None,
                 replay: bool) -> SpoolTarget | None:
    """Where `--spool` sends this node's outcome (None: nowhere), its key read from
    STETHO_SPOOL_KEY; a usage error for a replay or a bad run id."""
    from stetho import check as check_lib
    from stetho.spool import keys
    from stetho.spool.files import check_run_id

    if folder is None and run_id is None and kind is None:
        return None
    if replay:
        raise click.UsageError("--spool leaves this node's own run (--local/--sim) in the "
                               "spool, not a replay")
    target = folder or cfg.result_spool
    if target is None:
        raise click.UsageError("--spool-run/--spool-kind: no spool; give --spool DIR or set "
                               "STETHO_RESULT_SPOOL")
    if run_id is not None:
        check_run_id(run_id)
    key = keys.read_key(cfg.spool_key, "spool key (STETHO_SPOOL_KEY)") \
        if cfg.spool_key is not None else None
    return check_lib.SpoolTarget(target, run_id, kind or "check", key)


def replay_max_age() -> float | None:
    """Saved evidence is recorded only while no older than any policy would still call
    fresh."""
    from stetho.gate.policy import longest_freshness

    return longest_freshness() or None


@click.command()
@click.option("--sim", type=click.Path(), help="Collect from a simulated node folder.")
@click.option("--node", help="Node name (default: the hostname).")
@click.option("--profile", "profile_name", help="Node profile [default: STETHO_PROFILE, else "
              "generic].")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the evidence bundle.")
def collect(sim: str | None, node: str | None, profile_name: str | None, out: str) -> None:
    """Collect this node's evidence into a bundle, without checking it."""
    from stetho.evidence import collect as collect_mod

    settings(profile=profile_name)
    bundle = collect_mod.collect_local(profile=profile_name, sim=sim, node=node)
    bundle.save(Path(out))
    statuses = [f"{r.name}={r.status}" for r in bundle.probes.values()]
    click.echo(f"{bundle.node}: {len(statuses)} probes -> {out} ({', '.join(statuses)})")
