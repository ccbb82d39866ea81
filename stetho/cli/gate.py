"""`stetho gate`: go (0) or blocked (1) for a job or a release, by a gate policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from stetho.cli.common import Progress, db_option, settings, write
from stetho.cli.release_gate import release_options, run_release


class _Gate(click.Group):
    """`stetho gate --policy P ...` decides; `stetho gate replay ...` replays history. The
    subcommand loads only when named, so a prolog's gate does not import the replay."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["replay"]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name != "replay":
            return None
        from stetho.cli.gate_replay import replay

        return replay


@click.group(cls=_Gate, invoke_without_command=True)
@click.option("--policy", "policy_name",
              help="Gate policy: a name in gates/ (pre-job, release, nightly) or a YAML path. "
              "[required]")
@click.option("--nodes", help="The nodes to decide on: a Slurm hostlist, e.g. 'gpu[001-064]'.")
@click.option("--local", is_flag=True, help="Decide on this node, running the policy's quick "
              "checks here (for a Slurm prolog or HealthCheckProgram).")
@click.option("--slurm", "slurm_mode", type=click.Choice(["health-check", "prolog"]),
              help="With --local, run as Slurm's HealthCheckProgram (drain this node when "
              "blocked, resume only stetho's drain, under a watchdog) or Prolog (drain this "
              "node when blocked and the drain budget allows, then exit non-zero so Slurm "
              "requeues the job elsewhere). Both leave the verdict in STETHO_RESULT_SPOOL.")
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False),
              help="Ansible inventory, to check live the nodes history has no fresh results "
              "for.")
@click.option("--job", help="The job (or release) this gate is for; kept in the JSON.")
@click.option("--profile", "profile_name",
              help="Profile for --local [default: STETHO_PROFILE, else generic].")
@click.option("--node", help="Node name for --local (default: the hostname).")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the decision as JSON here.")
@db_option
@click.option("--override-repo", help="Git repository (path or URL) holding the signed "
              "overrides [default: STETHO_OVERRIDE_REPO, the config file's `override_repo`].")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Run folders for live checks through the sweep.")
@click.option("--act", is_flag=True, help="Carry out the scheduler actions (drain blocked "
              "nodes, resume nodes stetho drained that now pass); without it, a dry run.")
@click.option("--reports/--no-reports", default=True, show_default=True,
              help="Write a diagnosis report (and send the webhook alert) per blocked node, "
              "under OUT/gate-<time>/reports.")
@click.option("--textfile", type=click.Path(path_type=Path),
              help="Also write the node_exporter textfile stetho-gate.prom into this folder "
              "(every result and stetho_gate_blocked per node) [default: STETHO_TEXTFILE_DIR, "
              "the config file's `textfile_dir`].")
@click.option("--topology", "topology_spec", metavar="FILE|slurm",
              help="The fabric's tree (a topology.conf FILE, or `slurm`: scontrol show "
              "topology): nodes failing together under one leaf are one switch incident; "
              "with --canaries, the leaves the cross-leaf pairs span (also groups[:GLOB], "
              "uniform:N, as stetho localize) [default there: slurm].")
@click.option("--quiet", "-q", is_flag=True, help="Only the summary line.")
@release_options
@click.pass_context
def gate(ctx: click.Context, /, policy_name: str | None, nodes: str | None, local: bool,
         inventory: str | None, job: str | None, profile_name: str | None, node: str | None,
         junit: str | None,
         json_out: str | None, db: str | None, override_repo: str | None, out: str,
         act: bool, reports: bool, quiet: bool, slurm_mode: str | None,
         textfile: Path | None, topology_spec: str | None, **release: object) -> None:
    """Go (0) or blocked (1) for a job or release on these nodes, by a gate policy.

    Fresh results come from the history database; the rest are checked live. Exit 3 when
    something could not be evaluated and the policy does not block on errors. Each run leaves
    OUT/gate-<id>/ (results.json, index.html, reports/); a Slurm hook only with --out.
    Shadow policies the policy names (`shadow:`) are evaluated and recorded, never acted on.
    `stetho gate replay --policy CANDIDATE --against CURRENT` replays recorded history.
    """
    from stetho import gate as gate_lib

    if ctx.invoked_subcommand is not None:
        if policy_name or nodes or local:
            raise click.UsageError(f"options before `{ctx.invoked_subcommand}` belong after "
                                   f"it: stetho gate {ctx.invoked_subcommand} --policy ...")
        return
    if not policy_name:
        raise click.UsageError("Missing option '--policy'.")
    cfg = settings(db=db, override_repo=override_repo)
    if release.get("canaries") or release.get("controls"):  # canaries against controls
        ignored = [flag for param, flag in (
            ("act", "--act"), ("textfile", "--textfile"), ("out", "--out"),
            ("reports", "--reports"), ("override_repo", "--override-repo"),
            ("slurm_mode", "--slurm")) if _given(param)]
        if ignored:  # never silently dropped: the release gate records none of these
            raise click.UsageError(f"{', '.join(ignored)} do not apply to the release gate "
                                   "(--canaries/--controls): it drains nothing and writes "
                                   "--json, --junit and its decision in --db only")
        run_release(policy_name, nodes, local, inventory, profile_name, json_out, junit, job,
                    quiet, {**release, "topology": topology_spec or "slurm"}, cfg.db)
    if release.get("stage"):
        raise click.UsageError("--stage judges a release: give --canaries and --controls")
    if bool(nodes) == bool(local):
        raise click.UsageError("give exactly one of --nodes and --local")
    progress = Progress("gate: live checks", quiet=quiet)
    try:
        outcome = gate_lib.run(gate_lib.GateRequest(
            policy=policy_name, nodes=nodes, local=local,
            inventory=Path(inventory) if inventory else None, job=job, profile=profile_name,
            node=node, out=Path(out), act=act, reports=reports,
            override_repo=cfg.override_repo, slurm=slurm_mode,
            textfile_dir=textfile or cfg.textfile_dir,
            # a hook runs on every node every few minutes: its folders only when asked for
            folder=slurm_mode is None or _given("out"), topology=topology_spec), db=cfg.db,
            progress=progress.update, steps=progress.step)
    finally:
        progress.close()
    if not quiet:
        for line in outcome.lines():
            click.echo(line)
        for line in outcome.action_lines():
            click.echo(line)
        for line in outcome.shadow.lines() if outcome.shadow else ():
            click.echo(line)
    if junit:
        from stetho.sinks import junit as junit_sink

        write(junit, junit_sink.render(outcome.decision.results))
    if json_out:
        write(json_out, json.dumps(outcome.to_json(job), indent=1, default=str) + "\n")
    if not quiet:
        for d, path in outcome.reports:
            click.echo(f"REPORT {d.node}: {d.top.title if d.top else 'undiagnosed'} -> {path}")
    for problem in outcome.output_problems:  # the verdict stands without them
        click.echo(f"stetho: warning: {problem}", err=True)
    if outcome.run_dir is not None and not quiet and slurm_mode is None:
        click.echo(f"run folder: {outcome.run_dir} (run page: "
                   f"{outcome.run_dir / 'index.html'})")
    if slurm_mode is not None:
        import time

        from stetho.gate.slurm_hooks import block_reason, spool_verdict

        if cfg.result_spool is not None:
            try:
                spool_verdict(cfg.result_spool, outcome.to_json(job), outcome.names[0],
                              slurm_mode, outcome.policy.name, outcome.summary(), time.time(),
                              outcome.summaries.get(outcome.names[0]))
            except OSError as exc:  # the verdict stands; slurmd's log says it was not spooled
                click.echo(f"stetho: warning: verdict not spooled to {cfg.result_spool}: "
                           f"{exc}", err=True)

        for a in outcome.actions:  # a health check's own drain or resume, even under --quiet
            click.echo(f"SCHEDULER {a.kind} {a.node}: {a.message}", err=True)
        if outcome.exit_code and block_reason(outcome.decision):
            # the prolog's stderr is what slurmd logs: one line that says why
            click.echo(f"{block_reason(outcome.decision)}", err=True)
    click.echo(outcome.summary())
    sys.exit(outcome.exit_code)


def _given(param: str) -> bool:
    """Whether the user gave this option (not its default)."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return ctx.get_parameter_source(param) not in (ParameterSource.DEFAULT, None)
