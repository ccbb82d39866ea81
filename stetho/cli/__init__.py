"""The `stetho` command: a thin click layer over the library.

It parses options, calls the library, and maps exceptions to the documented exit codes:
0 go (warnings allowed), 1 a blocking check failed, 2 usage or configuration error, 3 could not
evaluate. No traceback reaches the user (set STETHO_DEBUG=1 to see one). Every option can be
defaulted from the environment: STETHO_<COMMAND>_<OPTION>, e.g. STETHO_CHECK_PROFILE.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from stetho import __version__
from stetho.errors import ConfigError, StethoError

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary


class _LazyGroup(click.Group):
    """Command groups that live in their own modules load only when used: `stetho gate` in a
    prolog must not pay for importing the knowledge-base and override machinery."""

    lazy = {"kb": "stetho.cli.kb:kb", "override": "stetho.cli.override:override"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            import importlib

            module, attr = self.lazy[name].split(":")
            cmd: click.Command = getattr(importlib.import_module(module), attr)
            return cmd
        return super().get_command(ctx, name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"],
                                               "auto_envvar_prefix": "STETHO"})
@click.version_option(__version__, prog_name="stetho")
def cli() -> None:
    """stetho: health checks for GPU training nodes, as pytest tests.

    \b
    stetho check --local                 check this node now
    stetho check --evidence runs/x       replay the checks over saved evidence
    stetho sim build OUT --nodes 4       build simulated H100 nodes to try it on
    """


@cli.command()
@click.option("--local", "local", is_flag=True, help="Collect evidence on this node and check it "
              "(the default when no --evidence is given).")
@click.option("--evidence", "evidence", multiple=True, type=click.Path(),
              help="Replay over saved evidence bundles: a file or a folder of them.")
@click.option("--sim", type=click.Path(), help="Check a simulated node folder "
              "(from `stetho sim build`) instead of this machine.")
@click.option("--node", help="Node name (default: the hostname, or the simulated node's name).")
@click.option("--profile", "profile_name", envvar="STETHO_PROFILE",
              help="Node profile: a name in baselines/ or a YAML path [default: generic; with "
              "--evidence, the profile recorded in each bundle].")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False),
              help="Write the results JSON here.")
@click.option("--evidence-out", type=click.Path(dir_okay=False),
              help="Write the collected evidence bundle here (with --local).")
@click.option("--checks", "extra_checks", multiple=True, type=click.Path(),
              help="Also run the site checks in this folder (repeatable).")
@click.option("-k", "select", help="Only checks matching this pytest -k expression.")
@click.option("-n", "--workers", help="Spread a replay over N processes (pytest-xdist; 'auto').")
@click.option("--all", "show_all", is_flag=True,
              help="A row for every check x subject (default: passes and skips of a check "
              "are grouped per node).")
@click.option("--problems", is_flag=True, help="Only fail, error and warn rows.")
@click.option("--quiet", "-q", is_flag=True, help="Print only the summary line.")
@click.option("--db", type=click.Path(dir_okay=False), envvar="STETHO_DB",
              help="History database [default: ~/.local/share/stetho/history.db].")
@click.option("--history/--no-history", "use_history", default=None,
              help="Drift checks against the history database, and record this run in it "
              "[default: on for --local, off for --evidence replays].")
@click.option("--outcome", "outcome_out", type=click.Path(dir_okay=False, allow_dash=True),
              hidden=True, help="Write results, JUnit and evidence as one JSON document "
              "('-': stdout, nothing else printed there). What the sweep reads back.")
def check(local: bool, evidence: tuple[str, ...], sim: str | None, node: str | None,
          profile_name: str | None, junit: str | None, json_out: str | None,
          evidence_out: str | None, extra_checks: tuple[str, ...], select: str | None,
          workers: str | None, show_all: bool, problems: bool, quiet: bool,
          db: str | None, use_history: bool | None, outcome_out: str | None) -> None:
    """Run the health checks on this node (or a simulated one), or replay saved evidence."""
    from stetho.checking import run as checkrun
    from stetho.evidence.bundle import Bundle

    if evidence and (local or sim):
        raise click.UsageError("--evidence replays saved bundles; it cannot be combined with "
                               "--local or --sim")
    if evidence_out and evidence:
        raise click.UsageError("--evidence-out writes what --local collects")
    bundles: list[Bundle] | None = None
    replay = bool(evidence)
    if not evidence:
        from stetho.evidence import collect

        bundle = collect.collect_local(profile=profile_name, sim=sim, node=node)
        if evidence_out:
            bundle.save(Path(evidence_out))
        bundles = [bundle]
    elif not workers:
        from stetho.evidence.bundle import find_bundles, load

        # Loaded here, not inside pytest, so an unreadable bundle is one clear error (exit 3).
        bundles = [load(p) for e in evidence for p in find_bundles(Path(e))]
        evidence = ()
    else:
        from stetho.evidence.bundle import find_bundles

        for e in evidence:
            find_bundles(Path(e))  # fail early, exit 3, with the path in the message
    run = checkrun.run(bundles, evidence=list(evidence) or None, profile=profile_name,
                       extra_checks=extra_checks, select=select, workers=workers)
    results = list(run.results)
    if use_history if use_history is not None else not replay:
        from stetho.fleet.sweep import new_run_id
        from stetho.history import recording
        from stetho.history.store import default_path

        results += recording.after_run(
            "replay" if replay else "check", new_run_id(), results, run.summaries,
            Path(db) if db else default_path(), command=" ".join(sys.argv[1:]),
            when=_collected_at(bundles))
    if outcome_out:
        one = bundles[0] if bundles and len(bundles) == 1 else None
        _write_outcome(outcome_out, results, one,
                       run.summaries.get(one.node) if one is not None else None)
        quiet = quiet or outcome_out == "-"
    _emit(results, junit, json_out, show_all=show_all, problems=problems, quiet=quiet,
          outcome_on_stdout=outcome_out == "-")


def _collected_at(bundles: list[Any] | None) -> float | None:
    from datetime import datetime

    if not bundles:
        return None
    try:
        return max(datetime.fromisoformat(b.collected_at).timestamp() for b in bundles)
    except ValueError:
        return None


def _write_outcome(path: str, results: list[Any], bundle: Any,
                   summary: NodeSummary | None) -> None:
    import json

    from stetho.fleet.outcome import Outcome
    from stetho.results import exit_code
    from stetho.sinks import junit as junit_sink

    node = bundle.node if bundle is not None else (results[0].node if results else "?")
    doc = Outcome(node, exit_code(results), results, junit_sink.render(results), bundle,
                  summary)
    text = json.dumps(doc.to_json(), separators=(",", ":"), default=str)
    # One line, so a reader can find it among anything else printed
    text = text.replace('{"schema":"stetho.outcome"', '{"schema": "stetho.outcome"', 1) + "\n"
    _write(path, text)


def _emit(results: list[Any], junit: str | None, json_out: str | None, *, show_all: bool,
          problems: bool, quiet: bool, outcome_on_stdout: bool = False) -> None:
    from stetho.results import exit_code
    from stetho.sinks import json_out as json_sink
    from stetho.sinks import table

    if not results:
        raise StethoError("no check produced a result (is the checks folder empty?)")
    if junit:
        from stetho.sinks import junit as junit_sink

        _write(junit, junit_sink.render(results))
    if json_out:
        _write(json_out, json_sink.render(results))
    if quiet:
        click.echo(table.summary(results), err=outcome_on_stdout)
    else:
        show = ("fail", "error", "warn") if problems else table.ALL
        width = max(100, min(220, _terminal_width()))
        click.echo(table.render(results, width=width, color=sys.stdout.isatty(), show=show,
                                group_ok=not show_all), nl=False)
    sys.exit(exit_code(results))


def _terminal_width() -> int:
    try:
        return os.get_terminal_size().columns
    except OSError:
        return 180


def _write(path: str, text: str) -> None:
    """Write a report atomically; '-' (or a device such as /dev/stdout) is written through."""
    if path == "-":
        sys.stdout.write(text)
        return
    p = Path(path)
    if p.exists() and not p.is_file():
        with p.open("w", encoding="utf-8") as fh:
            fh.write(text)
        return
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None


@cli.command()
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False),
              help="Ansible inventory (YAML or INI). Without it: this machine.")
@click.option("--limit", help="Only these hosts: a Slurm hostlist, e.g. 'gpu[001-064,100]'.")
@click.option("--forks", default=50, show_default=True, type=click.IntRange(1, 1000),
              help="Hosts Ansible works on at once.")
@click.option("--timeout", "timeout_s", default=300, show_default=True,
              type=click.IntRange(5, 86400), help="Per-host limit for the check, in seconds.")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Folder for run folders (runs/<UTC time>-<id>/).")
@click.option("--problems/--all", "problems_only", default=True,
              help="Show only fail/error/warn rows (default), or every row.")
@click.option("--db", type=click.Path(dir_okay=False), envvar="STETHO_DB",
              help="History database [default: ~/.local/share/stetho/history.db].")
@click.option("--no-history", is_flag=True, help="Neither drift checks nor recording.")
def sweep(inventory: str | None, limit: str | None, forks: int, timeout_s: int, out: str,
          problems_only: bool, db: str | None, no_history: bool) -> None:
    """Run `stetho check --local` on every inventory host through Ansible.

    Writes a run folder with each host's evidence, results and JUnit, the merged fleet JUnit
    and results, and a summary; shows the failing nodes first. Exit codes as for `check`,
    over the whole fleet. Only one sweep runs at a time per --out folder.
    """
    from stetho.fleet import sweep as sweep_mod
    from stetho.sinks import table

    progress = _Progress()
    from stetho.history.store import default_path

    opts = sweep_mod.SweepOptions(inventory=Path(inventory) if inventory else None,
                                  out=Path(out), limit=limit, forks=forks,
                                  timeout_s=timeout_s, progress=progress.update,
                                  db=None if no_history else (Path(db) if db else default_path()))
    try:
        result = sweep_mod.sweep(opts)
    finally:
        progress.close()
    show = ("fail", "error", "warn") if problems_only else table.ALL
    click.echo(table.render(result.results, width=max(100, min(220, _terminal_width())),
                            color=sys.stdout.isatty(), show=show), nl=False)
    click.echo(f"run folder: {result.run_dir}")
    sys.exit(result.exit_code)


class _Progress:
    """Hosts done / total and failing so far: a live bar on a terminal, lines in a CI log."""

    def __init__(self) -> None:
        self.bar: Any = None
        self.task: Any = None
        self.tty = sys.stderr.isatty()

    def update(self, host: str, done: int, total: int, failing: int) -> None:
        if not self.tty:
            click.echo(f"[{done}/{total}] {host} done ({failing} failing so far)", err=True)
            return
        if self.bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[failing]} failing"),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total, failing=0)
        self.bar.update(self.task, completed=done, failing=failing)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@cli.command()
@click.argument("node")
@click.option("--check", "check_name", help="Only this check's metrics (e.g. ib, gpu, nccl).")
@click.option("--metric", help="Only this metric (e.g. SymbolErrorCounter, temperature_c).")
@click.option("--since", default="30d", show_default=True, help="How far back: 30d, 12h, 2w.")
@click.option("--db", type=click.Path(dir_okay=False), envvar="STETHO_DB",
              help="History database [default: ~/.local/share/stetho/history.db].")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def history(node: str, check_name: str | None, metric: str | None, since: str,
            db: str | None, as_json: bool) -> None:
    """A node's measured metrics over time, with a sparkline each."""
    import json

    from stetho.core import hostlist
    from stetho.history import view as historyview
    from stetho.history.store import History, default_path, parse_since

    hostlist.validate(node)
    path = Path(db) if db else default_path()
    if not path.exists():
        raise ConfigError(f"no history database at {path} (run `stetho check` or "
                          "`stetho sweep` first, or pass --db)")
    with History(path) as h:
        rows = historyview.rows(h, node, check=check_name, metric=metric,
                                since_s=parse_since(since))
    if as_json:
        click.echo(json.dumps({"node": node, "since": since,
                               "series": [r.to_json() for r in rows]}, indent=1))
        return
    if not rows:
        click.echo(f"{node}: no metrics in the last {since}"
                   + (f" for check {check_name}" if check_name else "")
                   + (f" metric {metric}" if metric else ""))
        return
    click.echo(historyview.render(node, rows, width=max(100, min(220, _terminal_width()))),
               nl=False)


@cli.command()
@click.option("--policy", "policy_name", required=True,
              help="Gate policy: a name in gates/ (pre-job, release, nightly) or a YAML path.")
@click.option("--nodes", help="The nodes to decide on: a Slurm hostlist, e.g. 'gpu[001-064]'.")
@click.option("--local", is_flag=True, help="Decide on this node, running the policy's quick "
              "checks here (for a Slurm prolog or HealthCheckProgram).")
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False),
              help="Ansible inventory, to check live the nodes history has no fresh results "
              "for.")
@click.option("--job", help="The job (or release) this gate is for; kept in the JSON.")
@click.option("--profile", "profile_name", envvar="STETHO_PROFILE",
              help="Profile for --local (default: generic).")
@click.option("--node", help="Node name for --local (default: the hostname).")
@click.option("--junit", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write the decision as JSON here.")
@click.option("--db", type=click.Path(dir_okay=False), envvar="STETHO_DB",
              help="History database [default: ~/.local/share/stetho/history.db].")
@click.option("--override-repo", envvar="STETHO_OVERRIDE_REPO",
              help="Git repository (path or URL) holding the signed overrides.")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Run folders for live checks through the sweep.")
@click.option("--act", is_flag=True, help="Carry out the scheduler actions (drain blocked "
              "nodes, resume nodes stetho drained that now pass); without it, a dry run.")
@click.option("--reports/--no-reports", default=True, show_default=True,
              help="Write a diagnosis report (and send the webhook alert) per blocked node, "
              "under OUT/gate-<time>/reports.")
@click.option("--quiet", "-q", is_flag=True, help="Only the summary line.")
def gate(policy_name: str, nodes: str | None, local: bool, inventory: str | None,
         job: str | None, profile_name: str | None, node: str | None, junit: str | None,
         json_out: str | None, db: str | None, override_repo: str | None, out: str,
         act: bool, reports: bool, quiet: bool) -> None:
    """Go (0) or blocked (1) for a job or release on these nodes, by a gate policy.

    Fresh results come from the history database; the rest are checked live. Exit 3 when
    something could not be evaluated and the policy does not block on errors.
    """
    import time as time_mod

    from stetho.core import hostlist
    from stetho.gate import decision as gate_mod
    from stetho.gate import policy as gatepolicy
    from stetho.history.store import default_path

    if bool(nodes) == bool(local):
        raise click.UsageError("give exactly one of --nodes and --local")
    policy = gatepolicy.load(policy_name)
    dbp = Path(db) if db else default_path()
    now = time_mod.time()
    if local:
        results, names, sources = _gate_local(policy, profile_name, node, dbp)
    else:
        names = hostlist.expand(nodes or "")
        found, sources = gate_mod.from_history(dbp, names, policy.freshness_s, now)
        results = [r for n in names for r in found.get(n, [])]
        stale = [n for n in names if n not in found]
        if stale and inventory:
            from stetho.fleet import sweep as sweep_mod

            swept = sweep_mod.sweep(sweep_mod.SweepOptions(
                inventory=Path(inventory), out=Path(out), limit=hostlist.compress(stale),
                db=dbp))
            results += swept.results
            sources.update({n: f"live (sweep {swept.run_dir.name})" for n in stale})
        elif stale:
            why = (f"no results younger than {policy.freshness_s / 3600:g} h in {dbp}"
                   if policy.freshness_s else "the policy requires a live check")
            results += gate_mod.missing(stale, why + " and no inventory (-i) to check it live")
            sources.update({n: "missing" for n in stale})
    valid, ignored = gate_mod.load_overrides(policy, override_repo, now)
    decision = gate_mod.decide(policy, results, valid, sources, ignored)
    if not quiet:
        for line in gate_mod.lines(decision):
            click.echo(line)
    actions = _scheduler(decision, names, act) if policy.drain and not local else []
    if not quiet:
        for a in actions:
            click.echo(f"{'SCHEDULER' if act else 'DRY RUN'} {a.kind} {a.node}: {a.message}")
    if junit:
        from stetho.sinks import junit as junit_sink

        _write(junit, junit_sink.render(decision.results))
    if json_out:
        import json

        from stetho.sinks import json_out as json_sink

        doc = json_sink.document(decision.results, policy=policy.name, job=job,
                                 nodes=names, blocked=decision.blocked_nodes,
                                 sources=decision.sources,
                                 scheduler=[a.__dict__ if hasattr(a, "__dict__") else str(a)
                                            for a in actions],
                                 ignored_overrides=[(getattr(o, "id", str(o)), why)
                                                    for o, why in decision.ignored_overrides])
        doc["exit_code"] = decision.exit_code
        _write(json_out, json.dumps(doc, indent=1, default=str) + "\n")
    if reports and decision.blocking:
        from stetho.diagnosis import runs
        from stetho.fleet.sweep import new_run_id

        gate_id = new_run_id()
        written = runs.diagnose_results(
            decision.results, run_dir=None, run=f"gate-{gate_id}",
            out=Path(out) / f"gate-{gate_id}" / "reports", db=dbp,
            gate=gate_mod.summary(decision, names), nodes=decision.blocked_nodes)
        if not quiet:
            for d, path in written:
                click.echo(f"REPORT {d.node}: {d.top.title if d.top else 'undiagnosed'} -> "
                           f"{path}")
    click.echo(gate_mod.summary(decision, names))
    sys.exit(decision.exit_code)


def _gate_local(policy: Any, profile_name: str | None, node: str | None, db: Path
                ) -> tuple[list[Any], list[str], dict[str, str]]:
    from stetho.checking import run as checkrun
    from stetho.evidence import collect
    from stetho.fleet.sweep import new_run_id
    from stetho.history import recording

    bundle = collect.collect_local(profile=profile_name, node=node)
    select = " or ".join(policy.local_checks) or None
    run = checkrun.run([bundle], profile=profile_name, select=select)
    results = list(run.results)
    results += recording.after_run("gate", new_run_id(), results, run.summaries, db,
                                   command=f"gate --local --policy {policy.name}")
    return results, [bundle.node], {bundle.node: "live (local)"}


def _scheduler(decision: Any, names: list[str], act: bool) -> list[Any]:
    from stetho.gate.slurm import Slurm, drain_reason

    blocked: dict[str, str] = {}
    for r in decision.blocking:
        blocked.setdefault(r.node, drain_reason(r.check, r.message))
    slurm = Slurm(act=act)
    actions = list(slurm.drain(blocked)) if blocked else []
    go = [n for n in names if n not in blocked]
    if go:
        actions += list(slurm.resume(go))
    return actions


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--node", "nodes", multiple=True, help="Only these nodes (default: every "
              "failing node of the run).")
@click.option("--out", type=click.Path(file_okay=False), help="Where to write the reports "
              "[default: RUN_DIR/reports].")
@click.option("--db", type=click.Path(dir_okay=False), envvar="STETHO_DB",
              help="History database, for trends [default: ~/.local/share/stetho/history.db].")
@click.option("--kb", "kb_repo", envvar="STETHO_KB_REPO",
              help="Knowledge-base repository, to link similar earlier reports.")
@click.option("--alert/--no-alert", default=False, show_default=True,
              help="Also send the webhook alerts (STETHO_WEBHOOK_URL).")
def report(run_dir: str, nodes: tuple[str, ...], out: str | None, db: str | None,
           kb_repo: str | None, alert: bool) -> None:
    """Diagnose a run's failing nodes: ranked root causes and a diagnosis-report.md each."""
    import json

    from stetho.core import hostlist
    from stetho.diagnosis import runs
    from stetho.history.store import default_path
    from stetho.sinks.json_out import load

    folder = Path(run_dir)
    results_file = folder / "results.json"
    if not results_file.is_file():
        raise ConfigError(f"{run_dir} is not a run folder (no results.json); run folders come "
                          "from `stetho sweep`")
    results = load(results_file.read_text())
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").is_file() \
        else {}
    for n in nodes:
        hostlist.validate(n)
    written = runs.diagnose_results(
        results, run_dir=folder, run=meta.get("run_id", folder.name),
        out=Path(out) if out else folder / "reports", db=Path(db) if db else default_path(),
        nodes=list(nodes) or None, kb_repo=kb_repo, alert=alert)
    for d, path in written:
        top = f"{d.top.title} (score {d.top.score:g})" if d.top else "undiagnosed"
        click.echo(f"{d.node}: {top} -> {path}")
    if not written:
        click.echo("no failing node in this run: nothing to diagnose")


@cli.group()
def baseline() -> None:
    """Healthy values of a node class, measured on real nodes, with their versions."""


@baseline.command("record")
@click.option("--from", "sources", multiple=True, required=True, type=click.Path(exists=True),
              help="A run folder or evidence bundles (repeatable): the healthy nodes.")
@click.option("--profile", "profile_name", required=True, help="The profile to record into.")
@click.option("--out", type=click.Path(dir_okay=False),
              help="Write here instead of the profile's own file.")
def baseline_record(sources: tuple[str, ...], profile_name: str, out: str | None) -> None:
    """Record the median of the given nodes as the profile's baseline (review and commit it)."""
    from stetho import profiles
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    m = bl.measure(bl.bundles_of(list(sources)), prof)
    path = bl.record(prof, m, ", ".join(sources), Path(out) if out else None)
    click.echo(f"recorded {len(m.busbw)} busbw sizes and {len(m.measured)} metrics from "
               f"{m.nodes} nodes into {path}")
    for comp, seen in sorted(m.spread.items()):
        click.echo(f"warning: the nodes disagree on {comp}: {seen}; the majority was recorded",
                   err=True)


@baseline.command("show")
@click.argument("profile_name")
@click.option("--json", "as_json", is_flag=True)
def baseline_show(profile_name: str, as_json: bool) -> None:
    """The profile's baseline values and the fingerprint they were measured on."""
    from stetho import profiles
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    _baseline_table(prof, bl.compare(prof, None), as_json, current=False)


@baseline.command("diff")
@click.argument("profile_name")
@click.option("--against", "sources", multiple=True, required=True,
              type=click.Path(exists=True), help="A run folder or evidence bundles.")
@click.option("--json", "as_json", is_flag=True)
def baseline_diff(profile_name: str, sources: tuple[str, ...], as_json: bool) -> None:
    """The baseline against current values (medians of the given nodes), and the fingerprint
    differences. Exit 1 when a value is worse than the tolerance or the fingerprint differs."""
    from stetho import profiles
    from stetho.history import baselines as bl

    prof = profiles.load(profile_name)
    rows = bl.compare(prof, bl.measure(bl.bundles_of(list(sources)), prof))
    _baseline_table(prof, rows, as_json, current=True)
    sys.exit(1 if any(r.status in ("worse", "differs") for r in rows) else 0)


def _baseline_table(prof: Any, rows: list[Any], as_json: bool, *, current: bool) -> None:
    import io
    import json

    if as_json:
        click.echo(json.dumps({"profile": prof.name, "source": prof.source,
                               "measured_on": prof.baseline.measured_on,
                               "rows": [r.to_json() for r in rows]}, indent=1, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    nccl_on = prof.nccl.baseline.measured_on if prof.nccl.baseline else "?"
    t = Table(title=f"baseline {prof.name} ({prof.source}; measured "
                    f"{prof.baseline.measured_on or nccl_on})", header_style="bold")
    cols = ["kind", "name", "baseline"] + (["current", "delta %", "status"] if current else [])
    for c in cols:
        t.add_column(c)
    for r in rows:
        cells = [r.kind, r.name, str(r.baseline)]
        if current:
            cells += [str(r.current), "" if r.delta_pct is None else f"{r.delta_pct:+.1f}",
                      r.status]
        t.add_row(*cells)
    buf = io.StringIO()
    Console(file=buf, width=max(100, min(200, _terminal_width())), no_color=True).print(t)
    click.echo(buf.getvalue(), nl=False)


@cli.group()
def sim() -> None:
    """Simulated nodes built from real recorded tool outputs."""


@sim.command("build")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--nodes", "count", default=1, show_default=True, type=click.IntRange(1, 100000),
              help="How many nodes (named node01, node02, ...).")
@click.option("--prefix", default="node", show_default=True, help="Node name prefix.")
@click.option("--fault", "faults", multiple=True, metavar="NODE=FAULT",
              help="Inject a fault into one node, e.g. node03=busbw-drop=20 (repeatable). "
              "`stetho sim faults` lists them.")
def sim_build(out: str, count: int, prefix: str, faults: tuple[str, ...]) -> None:
    """Build healthy 8x H100 nodes under OUT, with faults injected into copies."""
    from stetho.sim import builder as build

    plan = build.parse_faults(faults)
    names = build.build_cluster(Path(out), count, prefix=prefix, faults=plan)
    click.echo(f"built {len(names)} simulated nodes in {out}: {names[0]} .. {names[-1]}"
               + (f"; faults: {', '.join(f'{n}={f}' for n, fs in plan.items() for f in fs)}"
                  if plan else ""))


@sim.command("faults")
def sim_faults() -> None:
    """List the faults `stetho sim build --fault` can inject."""
    from stetho.sim import faults

    for name, fault in sorted(faults.FAULTS.items()):
        click.echo(f"{name:<24} {fault.description}")


@cli.command()
@click.option("--sim", type=click.Path(), help="Collect from a simulated node folder.")
@click.option("--node", help="Node name (default: the hostname).")
@click.option("--profile", "profile_name", envvar="STETHO_PROFILE", help="Node profile.")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False),
              help="Where to write the evidence bundle.")
def collect(sim: str | None, node: str | None, profile_name: str | None, out: str) -> None:
    """Collect this node's evidence into a bundle, without checking it."""
    from stetho.evidence import collect as collect_mod

    bundle = collect_mod.collect_local(profile=profile_name, sim=sim, node=node)
    bundle.save(Path(out))
    statuses = [f"{r.name}={r.status}" for r in bundle.probes.values()]
    click.echo(f"{bundle.node}: {len(statuses)} probes -> {out} ({', '.join(statuses)})")


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI and turn every failure into a message and an exit code."""
    try:
        cli.main(args=argv, prog_name="stetho", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except StethoError as exc:
        click.echo(f"stetho: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # the last line of defence: never a traceback
        if os.environ.get("STETHO_DEBUG"):
            raise
        click.echo(f"stetho: internal error: {type(exc).__name__}: {exc} "
                   "(set STETHO_DEBUG=1 for the traceback, and please report it)", err=True)
        sys.exit(3)
    sys.exit(0)
