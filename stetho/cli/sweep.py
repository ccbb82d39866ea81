"""`stetho sweep`: the checks on every inventory host, through Ansible."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import click

from stetho.cli.common import Progress, db_option, settings, show_results, unwritten
from stetho.cli.sweep_slurm import (
    not_checked_lines,
    refuse_ansible_options,
    refuse_slurm_options,
    slurm_options,
    slurm_run,
)


@click.command()
@click.option("-i", "--inventory", type=click.Path(exists=True, dir_okay=False),
              help="Ansible inventory (YAML or INI). Without it: this machine.")
@click.option("--limit", help="Only these hosts: a Slurm hostlist, e.g. 'gpu[001-064,100]'.")
@click.option("--forks", default=50, show_default=True, type=click.IntRange(1, 1000),
              help="Hosts Ansible works on at once.")
@click.option("--timeout", "timeout_s", type=click.IntRange(5, 86400),
              help="Per-host limit for the check, in seconds [default: per host, what its "
              "profile's probes and the --bench suite can take, plus 120 s; a shorter one is "
              "refused].")
@click.option("--bench", "bench_suite", type=click.Choice(("quick", "nightly", "acceptance")),
              help="Also run this benchmark suite on every node; invasive benchmarks only on "
              "idle nodes (busy nodes are listed, their benchmarks skipped).")
@click.option("--out", default="runs", show_default=True, type=click.Path(file_okay=False),
              help="Folder for run folders (runs/<UTC time>-<id>/).")
@click.option("--problems/--all", "problems_only", default=True,
              help="Show only fail/error/warn rows (default), or every row.")
@db_option
@click.option("--no-history", is_flag=True, help="Neither drift checks nor recording.")
@click.option("--kb", "kb_repo", help="Knowledge-base repository: repeat offenders and similar "
              "incidents in the reports, the rules' accuracy on resolved reports on the run "
              "page [default: STETHO_KB_REPO, the config file's `kb_repo`].")
@click.option("--textfile", type=click.Path(path_type=Path),
              help="Also write node_exporter textfile metrics into this folder, atomically: "
              "stetho-sweep.prom (command=\"sweep\"): every result and, with a knowledge base, "
              "each rule's precision, recall and the no-fault-found rate (stetho_kb_*). A path "
              "ending in .prom is that file [default: STETHO_TEXTFILE_DIR, the config file's "
              "`textfile_dir`].")
@click.option("--topology", "topology_spec", metavar="FILE|slurm",
              help="The fabric's tree (a topology.conf FILE, or `slurm`): nodes failing "
              "together under one leaf are also shown as one switch incident.")
@click.option("--quiet", "-q", is_flag=True,
              help="The summary line instead of the table; no progress on stderr.")
@slurm_options
def sweep(inventory: str | None, limit: str | None, forks: int, timeout_s: int | None,
          bench_suite: str | None, out: str, problems_only: bool, db: str | None,
          no_history: bool, kb_repo: str | None, textfile: Path | None, quiet: bool,
          topology_spec: str | None, via: str, **slurm: Any) -> None:
    """Run `stetho check --local` on every node, through Ansible or Slurm.

    Every inventory host through Ansible, or with `--via slurm` the idle nodes of a Slurm
    partition (or a maintenance reservation) through one srun.

    Writes a run folder with each host's evidence, results and JUnit, the merged fleet JUnit
    and results, a summary and the run page (index.html); shows the failing nodes first.
    With --bench, the last lines say how many nodes ran the suite, which were busy and
    which benchmarks regressed against their baselines. Exit codes as for `check`,
    over the whole fleet. Only one sweep runs at a time per --out folder.
    """
    from stetho.errors import Interrupted
    from stetho.fleet import sweep as sweep_mod
    from stetho.jobs.parts import load_topology
    from stetho.localize.setup import slurm_topology_text

    cfg = settings(db=db, kb_repo=kb_repo)
    topo = load_topology(topology_spec, slurm_topology_text)  # a bad file: before the sweep
    progress = Progress(quiet=quiet)
    stop = _StopOnSignal()
    target = _textfile(textfile or cfg.textfile_dir)
    run: Callable[[], sweep_mod.SweepResult]
    if via == "slurm":
        refuse_ansible_options(inventory=inventory, limit=limit, bench=bench_suite,
                               forks=forks != 50)
        run = slurm_run(cfg, slurm, out=Path(out), timeout_s=timeout_s,
                        db=None if no_history else cfg.db, textfile=target,
                        progress=progress, cancel=stop.requested)
    else:
        refuse_slurm_options(slurm)
        opts = sweep_mod.SweepOptions(inventory=Path(inventory) if inventory else None,
                                      out=Path(out), limit=limit, forks=forks,
                                      timeout_s=timeout_s, progress=progress.update,
                                      steps=progress.step, cancel=stop.requested,
                                      db=None if no_history else cfg.db, bench=bench_suite,
                                      kb_repo=cfg.kb_repo, textfile=target)
        run = partial(sweep_mod.sweep, opts)
    try:
        with stop:
            result = run()
    except Interrupted as exc:
        progress.close()
        name = signal.Signals(stop.signum or signal.SIGINT).name
        click.echo(f"stetho: sweep interrupted by {name}: {exc}", err=True)
        sys.exit(128 + (stop.signum or signal.SIGINT))
    except OSError as exc:  # the run folder could not hold what the sweep needs to judge
        progress.close()
        problem = sweep_mod.cannot_write(exc, Path(out))
        click.echo(f"sweep: COULD NOT EVALUATE: nothing was judged ({problem})")
        sys.exit(unwritten([problem], 3))
    finally:
        progress.close()
    show_results(result.results, quiet=quiet, problems=problems_only)
    if topo is not None:
        from stetho.jobs.blast import switch_incidents

        checks: dict[str, set[str]] = {}
        for r in result.results:
            if r.status == "fail":
                checks.setdefault(r.node, set()).add(r.check)
        for incident in switch_incidents(topo, checks, result.hosts):
            click.echo(incident.line(checks))
    busy = sorted(h for h, st in result.hosts.items() if st.busy and not st.busy.idle)
    if via == "slurm":
        for line in not_checked_lines(result.results):
            click.echo(line)
    elif busy:
        click.echo(f"{len(busy)} of {len(result.hosts)} nodes busy: nothing invasive ran there "
                   f"({', '.join(busy[:8])}{' ...' if len(busy) > 8 else ''})")
    if result.suite is not None:
        click.echo(result.suite.line())
    if not result.output_problems:
        click.echo(f"run folder: {result.run_dir} (run page: {result.run_dir / 'index.html'})")
    sys.exit(unwritten(result.output_problems, result.exit_code))


def _textfile(target: Path | None) -> Path | None:
    """The sweep's textfile: DIR/stetho-sweep.prom, or the .prom file itself (as before)."""
    from stetho.check.outputs import textfile_path

    if target is None:
        return None
    path = textfile_path(target, "sweep")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class _StopOnSignal:
    """SIGTERM or SIGINT during the sweep is remembered, not raised: the sweep then kills
    ansible-playbook's process group (a session of its own, which the signal never reaches)
    and stops. An exception raised mid-run would leave ansible-playbook running, orphaned.
    A second signal is an immediate KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._before: dict[int, object] = {}

    def requested(self) -> bool:
        return self.signum is not None

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def __enter__(self) -> _StopOnSignal:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._before[sig] = signal.signal(sig, self._on)
        return self

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._before.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
