"""Run the checks: pytest in-process over `checks/` (and a site's own), with the plugin fed
the bundles, returning the Result records. This is what `stetho check` and the sweep's replay
call; the plugin alone is what `pytest checks/` uses.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from stetho.checking.basetemp import private_basetemp
from stetho.checking.dirs import check_dirs
from stetho.core.record import record
from stetho.core.resources import shipped
from stetho.errors import EvaluationError
from stetho.results import Result

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary
    from stetho.evidence.bundle import Bundle


#: pytest's built-in plugins a check run does without: reporting is stetho's, and each costs
#: start-up or per-test time (logging handlers per test, a forced GC at exit, warning filters and
#: output capture set up and torn down around every item, pdb imported for a --pdb nobody
#: can pass, ...).
_QUIET = [x for name in ("cacheprovider", "terminal", "logging", "unraisableexception",
                         "threadexception", "faulthandler", "doctest", "pastebin", "junitxml",
                         "nose", "legacypath", "stepwise", "setuponly", "setupplan", "warnings",
                         "debugging")
          for x in ("-p", f"no:{name}")] + ["--capture=no", "--assert=plain"]
# Plain asserts: pytest's rewritten ones explain a failed comparison through the terminal
# plugin's writer, and without that plugin the explanation itself failed (pytest's own empty
# AssertionError) and replaced a site check's message. A plain assert keeps the check's
# message; one without a message is named by its source line (stetho.checking.outcomes).


#: pytest takes its configuration only from stetho: no ini file (`-c os.devnull`), no
#: conftest.py above a checks folder (stetho.checking.confguard).
_OWN_CONFIG = ["-p", "stetho.checking.confguard"]
#: Environment pytest (and each xdist worker it starts) would read to change what runs.
_PYTEST_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")


def _own_environment() -> contextlib.AbstractContextManager[None]:
    """For the session: no PYTEST_ADDOPTS/PYTEST_PLUGINS (a `-k` or a plugin from the
    environment could narrow or change a check), and no plugin autoload (only the plugins
    stetho names with -p); the old values come back afterwards."""
    from stetho import config

    return config.process_environment(unset=_PYTEST_ENV, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")


def _own_plugins() -> list[object]:
    """stetho's own plugin modules, imported here: the objects pytest would load for
    `-p stetho.checking.confguard -p stetho.checking.plugin`."""
    from stetho.checking import confguard, plugin

    return [confguard, plugin]


class _Inject:
    """Hands the already-loaded bundles to the plugin's session state, and tells `progress`
    how many check items are done of how many (a fleet's replay runs for a minute)."""

    def __init__(self, bundles: list[Bundle] | None, profile: str | None,
                 progress: Callable[[int, int], None] | None = None) -> None:
        self.bundles = bundles
        self.profile = profile
        self.config: pytest.Config | None = None
        self.progress = progress
        self.total = self.done = 0

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.total = max(self.total, len(session.items))  # serial: the items run here

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.total = max(self.total, len(ids))  # xdist: each worker collects every item

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.progress is not None and report.when == "teardown":
            self.done += 1
            self.progress(self.done, self.total)

    def pytest_configure(self, config: pytest.Config) -> None:
        from stetho.checking.plugin import session

        self.config = config
        st = session(config)
        st.bundles = self.bundles
        st.profile_override = self.profile


@record
class CheckRun:
    """What a check run gives back: the results, and each node's summary (profile, versions,
    busbw, and the metrics its checks measured: what history and fleet checks consume)."""

    results: Sequence[Result]  # a fleet's replay: on disk (stetho.sinks.spool.Results)
    summaries: dict[str, NodeSummary]
    items: int = 0  # check items that ran (after -k): 0 means the selection matched none


def run(bundles: list[Bundle] | None = None, *, evidence: list[str] | None = None,
        profile: str | None = None, extra_checks: tuple[str, ...] = (),
        select: str | None = None, workers: int | str | None = None,
        verbose: bool = False, metrics: bool = True, summaries: bool = True,
        progress: Callable[[int, int], None] | None = None,
        history: Path | None = None, fleet: bool = True) -> CheckRun:
    """Evaluate the checks over in-memory `bundles` or bundle files/folders `evidence`.

    `workers` spreads the checks over processes with pytest-xdist (replay of many nodes).
    `metrics=False` drops the nodes' metrics from their summaries (nothing records them);
    `summaries=False` makes none (the result's `summaries` is empty).
    `progress(done, total)` hears each check item finish.
    `history`: the database whose earlier readings give counters their window (read only).
    `fleet=False` leaves out the fleet checks (a re-run of some node checks needs none).
    """

    args = [str(d) for d in check_dirs(extra_checks)]
    # each xdist worker re-reads the arguments: stetho's plugins are named there; serially
    # they are registered as objects (each `-p` scans every installed package's entry points)
    args += [*_QUIET, *(_OWN_CONFIG if workers else ()), "--continue-on-collection-errors",
             "--rootdir", str(shipped("checks")), "-c", os.devnull]
    for e in evidence or []:
        args += ["--stetho-evidence", e]
    if profile and evidence:
        args += ["--stetho-profile", profile]
    if select:
        args += ["-k", select]
    if not metrics:
        args += ["--stetho-no-metrics"]
    if not summaries:
        args += ["--stetho-no-summaries"]
    if history is not None:
        args += ["--stetho-history", str(history)]
    if not fleet:
        args += ["--stetho-no-fleet"]
    inject = _Inject(bundles, profile, progress)
    plugins: list[object] = [inject]
    if workers:
        args += ["-p", "stetho.checking.plugin"]
    else:
        plugins += _own_plugins()
    if bundles is not None and not (select or workers or progress):
        # A node's own check: one item per check, not per subject (the same Results; pytest's
        # own cost per item was a third of `stetho check --local`). -k keeps per-subject ids.
        args += ["--stetho-batch"]
    if workers:
        # Spread over processes in batches: per-subject items would cost more in xdist's
        # report traffic than the checks themselves.
        # A group's items all on one worker, so each node is parsed once, not once per worker.
        args += ["-p", "xdist.plugin", "-n", str(workers), "--dist", "loadgroup",
                 "--stetho-batch"]
    sink = io.StringIO()
    # Only the plugins stetho needs: loading every installed pytest plugin costs start-up time
    # a node check does not need, and keeps a site's unrelated plugins out of the verdict.
    # Its own --basetemp: pytest's default cleans up $TMPDIR/pytest-of-USER at exit (minutes).
    with _own_environment(), private_basetemp() as basetemp, \
            contextlib.redirect_stdout(sink) if not verbose else contextlib.nullcontext():
        code = pytest.main([*args, *basetemp], plugins=plugins)
    if inject.config is None:
        raise EvaluationError(f"pytest could not start (exit {int(code)}): "
                              f"{sink.getvalue().strip()[-500:]}")
    from stetho.checking.plugin import session

    st = session(inject.config)
    if int(code) in (3, 4) and not st.results:  # internal error, usage error
        raise EvaluationError(f"pytest exited {int(code)} before any check ran: "
                              f"{sink.getvalue().strip()[-500:]}")
    return CheckRun(st.results, st.summaries, inject.total)


class _Names:
    """Collects the check names pytest found (the argument to a `-k` that matched none)."""

    names: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from stetho.checking.plugin import _check_name

        self.names = sorted({_check_name(i) for i in session.items})


def check_names(extra_checks: tuple[str, ...] = ()) -> list[str]:
    """Every check's name, collected over no node (nothing is run or loaded), and the fleet
    checks' (which run after the node checks, over several nodes)."""
    from stetho.checking.fleet import NAMES as FLEET_NAMES

    args = [*(str(d) for d in check_dirs(extra_checks)), *_QUIET, *_OWN_CONFIG,
            "--collect-only", "--continue-on-collection-errors", "--rootdir",
            str(shipped("checks")), "-c", os.devnull, "-p", "stetho.checking.plugin"]
    names = _Names()
    # the same isolation as a run: a parent's conftest.py would run code here too
    with _own_environment(), contextlib.redirect_stdout(io.StringIO()):
        pytest.main(args, plugins=[_Inject([], None), names])
    return sorted({*names.names, *FLEET_NAMES})
