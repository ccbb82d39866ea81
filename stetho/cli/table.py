"""What `stetho --help` shows, as plain data: read by the click group (stetho.cli.group) and by
the page drawn without click (stetho.cli.helptext), so the two never differ."""

from __future__ import annotations

#: command -> ("module:attribute", the first line of its docstring). Commands load only when
#: used: `stetho gate` in a Slurm prolog must not pay for importing the sweep, the knowledge base
#: or the override machinery, and `stetho --help` lists them all from these lines without
#: importing any (tests/test_cli_lazy.py keeps each line equal to its command's docstring).
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("stetho.cli.check:check", "Run the health checks on this node (or a simulated "
              "one), or replay saved evidence."),
    "collect": ("stetho.cli.check:collect", "Collect this node's evidence into a bundle, "
                "without checking it."),
    "sweep": ("stetho.cli.sweep:sweep", "Run `stetho check --local` on every node, through "
              "Ansible or Slurm."),
    "ingest": ("stetho.cli.ingest:ingest", "Take the outcomes nodes left in a spool into the "
               "history, once, judged as a sweep."),
    "spool": ("stetho.cli.ingest:spool", "The result spool's keys (`stetho spool key NODE`)."),
    "bench": ("stetho.cli.bench:bench", "Benchmarks (benchmarks/*.yml): run a suite, record "
              "and compare baselines."),
    "history": ("stetho.cli.history:history", "A node's metrics over time (`stetho history "
                "NODE`), or `stetho history ingest`."),
    "baseline": ("stetho.cli.baseline:baseline", "Healthy values of a node class, measured on "
                 "real nodes, with their versions."),
    "gate": ("stetho.cli.gate:gate", "Go (0) or blocked (1) for a job or release on these "
             "nodes, by a gate policy."),
    "report": ("stetho.cli.report:report", "Diagnose a run's failing nodes: ranked root causes "
               "and a diagnosis report each"),
    "remedy": ("stetho.cli.remedy:remedy", "Remediate a run's diagnosed nodes, per cause as "
               "the rules declare (dry run by default)."),
    "kb": ("stetho.cli.kb:kb", "The knowledge base: diagnosis reports committed to a git "
           "repository, searchable."),
    "override": ("stetho.cli.override:override", "Two-person overrides: let a failing gate "
                 "check pass on named nodes, for a while."),
    "breaker": ("stetho.cli.breaker:breaker", "The drain budget's circuit breaker: stetho "
                "drains at most max(min_nodes, max_pct %) of a"),
    "sim": ("stetho.cli.sim:sim", "Simulated nodes built from real recorded tool outputs."),
    "export": ("stetho.cli.export:export", "Artefacts generated from stetho's own "
               "configuration."),
    "localize": ("stetho.cli.localize:localize", "Find the bad nodes, links (pairs) and "
                 "switches of a fleet with group benchmarks."),
    "job": ("stetho.cli.job:job", "What hardware touched job JOBID: failing checks, drains, "
            "reports, drift and shared"),
    "stats": ("stetho.cli.stats:stats", "Incidents per cause, MTBF, MTTR, time to detect and "
              "to localize, false positives,"),
    "impact": ("stetho.cli.impact:impact", "The blast radius of PART: its nodes, the running "
               "jobs on them (user, partition, nodes"),
}

#: The group's help (`stetho --help`), shown by stetho.cli.helptext without click.
HELP = """stetho: health checks for GPU training nodes, as pytest tests.

    \b
    stetho check --local                 check this node now
    stetho check --evidence runs/x       replay the checks over saved evidence
    stetho sweep -i inventory.yml        every node, through Ansible
    stetho bench run --suite nightly     the benchmark suite on this (idle) node
    stetho gate --policy pre-job --nodes 'gpu[01-64]'   go or no-go
    stetho remedy runs/<id>              what stetho would fix by itself (--act: do it)
    stetho sim build OUT --nodes 4       build simulated H100 nodes to try it on
    stetho localize -i inventory.yml --dry-run   find the bad node, link or switch
    stetho job 1234 --topology topology.conf     what hardware touched a Slurm job
    stetho impact leafA --topology topology.conf   the running jobs a part would hit
"""
