"""`stetho localize`: find the bad node, link or switch with few group benchmarks."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import click

from stetho.cli.common import db_option, settings, write
from stetho.errors import ConfigError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


def _seconds(text: str, flag: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{flag} {text!r}: a duration such as 30m, 90s or 2h")
    return float(m[1]) * {"": 60, "s": 1, "m": 60, "h": 3600}[m[2]]


@click.command()
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False),
              help="Ansible inventory: the fleet (and, with --topology groups, its leaves).")
@click.option("--nodes", help="The fleet as a Slurm hostlist (with or instead of -i).")
@click.option("--benchmark", default="nccl_all_reduce", show_default=True,
              type=click.Choice(["nccl_all_reduce", "iperf3"]),
              help="The group benchmark (iperf3 implies --runner iperf3).")
@click.option("--runner", "runner_name", type=click.Choice(["srun", "mpirun", "iperf3", "sim"]),
              help="How group tests run [default: srun; iperf3 for --benchmark iperf3].")
@click.option("--topology", "topology_spec", default=None,
              help="slurm, groups[:GLOB], uniform:N, flat, or a topology.conf FILE "
              "[default: groups with -i, else flat].")
@click.option("--expect", type=float, help="Healthy busbw (GB/s) of a group of good nodes.")
@click.option("--command", "bench_command", help="The nccl-tests command line to run.")
@click.option("--gpus-per-node", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--prefix", default="ssh {node}", show_default=True,
              help="iperf3: how to run a command on a node ({node} is replaced).")
@click.option("--rate", "rate_mbps", default=40.0, show_default=True,
              help="iperf3: the rate each flow is paced to, Mbit/s (its healthy value).")
@click.option("--flow-seconds", default=1.0, show_default=True,
              help="iperf3: how long one healthy flow lasts.")
@click.option("--noise", default=0.03, show_default=True,
              help="Run-to-run variation of a healthy group, as a fraction (±).")
@click.option("--min-slowdown", default=0.15, show_default=True,
              help="The smallest slowdown to find, as a fraction.")
@click.option("--confidence", default=0.997, show_default=True,
              help="Confidence each group verdict needs; tests repeat until they have it.")
@click.option("--max-runs", default=5, show_default=True, type=click.IntRange(1, 50),
              help="Runs of one group test before it is left unknown.")
@click.option("--tail", default=0.03, show_default=True, type=click.FloatRange(0, 0.49),
              help="Fraction of a healthy group's runs that run 20-40% slow (a transient). "
                   "Above 0 a test fails only after --confirm slow runs in a row, and one "
                   "whose runs disagree is 'intermittent' (never pass); 0: the mean rule.")
@click.option("--confirm", default=2, show_default=True, type=click.IntRange(1, 49),
              help="Slow runs in a row before a group test fails (with --tail).")
@click.option("--arity", default=4, show_default=True, type=click.IntRange(2, 64),
              help="Parts a failing group is split into.")
@click.option("--budget", default="2h", show_default=True,
              help="Stop (exit 3) after this much time at --test-time a round.")
@click.option("--test-time", default="2m", show_default=True,
              help="How long one round of group tests takes (for the budget and estimates; "
                   "nccl-tests over 232 nodes: ~80 s, mostly launch and NCCL setup).")
@click.option("--dry-run", is_flag=True, help="Show the plan and its estimated cost; run nothing.")
@click.option("--sim-fault", "sim_faults", multiple=True, metavar="KIND=WHAT[:FACTOR]",
              help="--runner sim: inject node=N, pair=A,B, uplink=SWITCH or switch=SWITCH.")
@click.option("--sim-noise", type=click.Choice(["heavy", "uniform"]), default="heavy",
              show_default=True, help="--runner sim: heavy-tailed run-to-run noise (3% of "
              "runs 20-40% slow), or the uniform ±--noise of old.")
@click.option("--seed", default=0, show_default=True, help="--runner sim: the noise seed.")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Folder for run folders (runs/<UTC time>-<id>/localize.{json,md}).")
@click.option("--json", "json_out", help="Also write the JSON record here ('-' for stdout).")
@db_option
@click.option("--no-history", is_flag=True, help="Do not record the run in history.")
def localize(inventory: str | None, nodes: str | None, benchmark: str, runner_name: str | None,
             topology_spec: str | None, expect: float | None, bench_command: str | None,
             gpus_per_node: int, prefix: str, rate_mbps: float, flow_seconds: float,
             noise: float,
             min_slowdown: float, confidence: float, max_runs: int, tail: float, confirm: int,
             arity: int, budget: str,
             test_time: str, dry_run: bool, sim_faults: tuple[str, ...], sim_noise: str,
             seed: int, out: str,
             json_out: str | None, db: str | None, no_history: bool) -> None:
    """Find the bad nodes, links (pairs) and switches of a fleet with group benchmarks.

    Rounds of concurrent benchmarks on disjoint groups, split along the fabric, each repeated
    until its verdict has the confidence asked; a suspect is convicted only after it is
    confirmed against known-good nodes, and the rest of the fleet is verified at the end.
    Exit 0: no fault; 1: found (the rest verified); 2: usage; 3: could not finish.
    """
    from stetho.history.store import new_run_id
    from stetho.localize import plan, report, runners, setup
    from stetho.localize.engine import Engine, RoundReport
    from stetho.localize.judge import Judge

    cfg = settings(db=db)
    judge = Judge(noise, min_slowdown, confidence, max_runs, tail, confirm)
    per_round_s = _seconds(test_time, "--test-time")
    max_rounds = max(1, int(_seconds(budget, "--budget") // per_round_s))
    fl = setup.fleet(Path(inventory) if inventory else None, nodes)
    if len(fl.nodes) < 2:
        raise ConfigError("localize: the fleet needs at least 2 nodes")
    topo = setup.build_topology(topology_spec or ("groups" if fl.groups else "flat"), fl)
    if dry_run:
        p = plan.estimate(topo, arity=arity, judge=judge)
        click.echo(f"{p.nodes} nodes, {len(topo.leaves())} leaf switches; round 1 tests "
                   f"{len(p.first_round)} groups: "
                   + ", ".join(f"{len(g)} nodes" for g in p.first_round[:8]))
        click.echo(f"all healthy: {p.healthy_tests} tests in {p.healthy_rounds} rounds "
                   f"(~{p.minutes(p.healthy_rounds, per_round_s):.0f} min)")
        click.echo(f"one bad node: ~{p.one_bad_tests:.0f} tests in ~{p.one_bad_rounds:.0f} "
                   f"rounds (~{p.minutes(p.one_bad_rounds, per_round_s):.0f} min)")
        click.echo(f"every pair: {p.pairwise_tests} tests; budget: {max_rounds} rounds")
        return
    name = "iperf3" if benchmark == "iperf3" else (runner_name or "srun")
    opts = setup.RunnerOptions(name, expect, bench_command or runners.DEFAULT_NCCL,
                               gpus_per_node, prefix, rate_mbps, flow_seconds,
                               sim_faults=sim_faults,
                               seed=seed, noise=noise, sim_noise=sim_noise,
                               stop_below=judge.fails_alone)
    runner = setup.build_runner(opts, fl, topo)

    def show(r: RoundReport) -> None:
        click.echo(f"round {r.round}: {r.tests} group tests; {r.passing} passed, {r.failing} "
                   f"failed so far; {r.findings} found, {r.pending} steps open", err=True)

    start = getattr(runner, "start", None)
    if start:
        start()
    try:
        loc = Engine(topo, runner, judge, arity=arity, max_rounds=max_rounds,
                     on_round=show).run()
    finally:
        close = getattr(runner, "close", None)
        if close:
            close()
    run_id = new_run_id()
    run_dir = Path(out) / run_id
    meta = {"run": run_id, "runner": runner.name, "benchmark": benchmark,
            "topology": topology_spec or ("groups" if fl.groups else "flat"),
            "command": shlex.join(sys.argv)} | (
                {"sim_noise": sim_noise} if runner.name == "sim" else {})
    report.write_run(loc, run_dir, meta, per_round_s)
    if json_out:
        import json

        write(json_out, json.dumps(report.to_json(loc, meta), indent=1) + "\n")
    if not no_history:
        try:
            report.record(loc, cfg.db, run_id, command=shlex.join(sys.argv),
                          run_dir=str(run_dir))
        except Exception as exc:  # a sink: the verdict stands without it
            click.echo(f"stetho: warning: history not recorded ({cfg.db}): {exc}", err=True)
    click.echo(report.verdict_line(loc))
    for f in loc.findings:
        click.echo(f"  {f.kind} {f.subject}: {f.action}")
    click.echo(f"{len(loc.tests)} group tests, {loc.rounds} rounds; report: "
               f"{run_dir / 'localize.md'}")
    sys.exit(loc.exit_code)
