"""`stetho bench run|list|baseline`: the benchmark suite on this node, and its baselines."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from stetho.benchmarks.spec import SUITES
from stetho.cli.common import db_option, emit, history_db, settings, unwritten

#: The checks that judge benchmarks (checks/test_bench.py): the tools' own verdicts, and the
#: metrics against their baselines.
BENCH_CHECK = "test_bench_verdict or test_bench_metric"


@click.group()
def bench() -> None:
    """Benchmarks (benchmarks/*.yml): run a suite, record and compare baselines."""


@bench.command("run")
@click.option("--suite", type=click.Choice(SUITES), default="quick", show_default=True,
              help="quick: seconds, safe beside a job; nightly: minutes, idle nodes only; "
              "acceptance: everything.")
@click.option("-b", "--benchmark", "only", multiple=True,
              help="Only this benchmark of the suite (repeatable).")
@click.option("--local", is_flag=True, help="On this node (the default).")
@click.option("--sim", type=click.Path(), help="On a simulated node folder (`stetho sim build`).")
@click.option("--node", help="Node name (default: the hostname, or the simulated node's name); "
              "also the name Slurm is asked about.")
@click.option("--profile", "profile_name", help="Profile with the baselines and tolerances "
              "[default: STETHO_PROFILE, else generic].")
@click.option("--peer", help="The other end of peer benchmarks (iperf3, perftest); "
              "127.0.0.1 runs the server on this node.")
@click.option("--runtime", "runtime_s", type=click.FloatRange(0.1, 86400),
              help="Run length of timed benchmarks, seconds (each one's default otherwise).")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Write the results JSON here.")
@click.option("--evidence-out", type=click.Path(dir_okay=False),
              help="Write the evidence bundle (every run's raw output) here: what "
              "`stetho bench baseline` records from.")
@click.option("--all", "show_all", is_flag=True,
              help="A row for every benchmark check x subject, skips with their reasons "
              "(default: passes and skips of a check are grouped per node).")
@click.option("--problems", is_flag=True, help="Only fail, error and warn rows.")
@click.option("--quiet", "-q", is_flag=True, help="Only the summary line; no progress.")
@db_option
@click.option("--history/--no-history", "use_history", default=True,
              help="Record the results in the history database [default: on; a simulated "
              "node's own <sim folder>/history.db unless --db or STETHO_DB says otherwise].")
@click.option("--textfile", type=click.Path(path_type=Path),
              help="Also write the node_exporter textfile stetho-bench.prom into this folder "
              "[default: STETHO_TEXTFILE_DIR, the config file's `textfile_dir`].")
def bench_run(suite: str, only: tuple[str, ...], local: bool, sim: str | None, node: str | None,
              profile_name: str | None, peer: str | None, runtime_s: float | None,
              junit: str | None, json_out: str | None, evidence_out: str | None,
              show_all: bool, problems: bool, quiet: bool, db: str | None, use_history: bool,
              textfile: Path | None) -> None:
    """Run a benchmark suite and judge each metric against its baseline.

    Benchmarks that need an idle node do not run beside a job (Slurm's squeue, else GPU
    processes; see busy_probe): they are skipped with the reason (--all shows each). Exit
    codes as for `check`.
    """
    from stetho import check as check_lib
    from stetho.evidence.bench_run import BenchRequest

    cfg = settings(db=db, profile=profile_name)

    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"bench: {line}", err=True)

    request = BenchRequest(suite=suite, peer=peer, runtime_s=runtime_s, progress=progress,
                           only=only)
    outcome = check_lib.run(check_lib.CheckRequest(
        command="bench", sim=sim, node=node, profile=profile_name, bench=request,
        select=BENCH_CHECK, db=history_db(cfg, sim) if use_history else None,
        record=use_history, command_line=" ".join(sys.argv[1:]),
        outputs=check_lib.Outputs(junit=junit, json=json_out,
                                  evidence_out=Path(evidence_out) if evidence_out else None,
                                  textfile_dir=textfile or cfg.textfile_dir)))
    sys.exit(unwritten(outcome.output_problems, emit(
        outcome.results, None, None, show_all=show_all, problems=problems, quiet=quiet)))


@bench.command("list")
@click.option("--suite", type=click.Choice(SUITES), help="Only this suite's benchmarks.")
def bench_list(suite: str | None) -> None:
    """The benchmarks known here (shipped and STETHO_BENCHMARKS), with suites and needs."""
    from stetho.benchmarks import spec

    cfg = settings()
    found = spec.load_all(cfg.benchmarks).values()
    for b in spec.select(found, suite) if suite else found:
        click.echo(f"{b.name:<22} {','.join(b.suites):<26} needs {','.join(b.needs) or '-'}"
                   f"{'  invasive' if b.invasive else ''}")


@bench.command("baseline")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--profile", "profile_name", required=True, help="The profile to record into.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write here instead of the profile's own file.")
@click.option("--force", is_flag=True, help="Record even metrics whose repeats vary by more "
              "than 5% (CV); the entry keeps its CV.")
def bench_baseline(sources: tuple[str, ...], profile_name: str, out: str | None,
                   force: bool) -> None:
    """Record the benchmark medians in the given bundles as the profile's baselines, with the
    run shape and versions they were measured on (review and commit the file)."""
    from stetho import profiles
    from stetho.history import baselines as bl

    settings()
    prof = profiles.load(profile_name)
    m = bl.measure_bench(bl.bundles_of(list(sources)), prof)
    path = bl.record_bench(prof, m, ", ".join(sources), Path(out) if out else None, force=force)
    for e in m.entries.values():
        if e.noisy_nodes:
            click.echo(f"warning: {e.key} recorded although CV {e.cv_pct:g}% on "
                       f"{', '.join(e.noisy_nodes)} (--force)", err=True)
    for what, why in sorted(m.skipped.items()):
        click.echo(f"not recorded: {what}: {why}", err=True)
    click.echo(f"recorded {len(m.entries)} benchmark metrics from {m.nodes} nodes into {path}")
