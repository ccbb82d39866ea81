"""The stetho pytest plugin: evidence in, one Result per check x subject out.

Loaded through the `pytest11` entry point, so `pytest checks/ --stetho-evidence runs/x` works
like any pytest suite and a site adds its own checks as test files; `stetho check` drives the
same plugin in-process. A check names a subject fixture (`gpu`, `ib_port`, `disk`, `node`, ...)
and the plugin parametrizes it over every node's subjects, ids like `node07/gpu3`. Over many
nodes it batches instead (see stetho.checking.session). Results travel in the reports'
user_properties, which also cross pytest-xdist's worker boundary; fleet checks run on the
controller at the end.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from stetho.checking import outcomes
from stetho.checking.nodes import CheckNode
from stetho.checking.session import RESULT_KEY, SUMMARY_KEY, Session
from stetho.checking.subjects import KINDS, Subject, expand
from stetho.checking.verdict import Verdict
from stetho.core.record import record
from stetho.facts.node import NodeFacts
from stetho.profiles import Profile
from stetho.results import Result
from stetho.sinks.spool import pack, row

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

_SESSION = pytest.StashKey[Session]()
_VERDICT = pytest.StashKey[Verdict]()
_BATCH_RESULTS = pytest.StashKey[list[Result]]()


@record
class Batch:
    """A group of nodes one batched item checks, all their subjects of `kind`."""

    kind: str
    names: tuple[str, ...]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("stetho", "stetho node health checks")
    g.addoption("--stetho-evidence", action="append", metavar="PATH",
                help="replay checks over saved evidence bundles (a file or a folder)")
    g.addoption("--stetho-sim", metavar="DIR", help="collect from a simulated node folder")
    g.addoption("--stetho-node", metavar="NAME", help="node name for local collection")
    g.addoption("--stetho-profile", metavar="NAME", help="profile for every node (overrides "
                "the profile recorded in bundles)")
    g.addoption("--stetho-results", metavar="PATH", help="write the results JSON here")
    g.addoption("--stetho-batch", action="store_true", default=None,
                help="check subjects in batches per group of nodes (automatic above "
                "16 nodes)")
    g.addoption("--stetho-no-metrics", action="store_true", default=False,
                help="summarise nodes without their metrics (nothing records them)")
    g.addoption("--stetho-no-summaries", action="store_true", default=False,
                help="summarise no node (the caller has their summaries already)")
    g.addoption("--stetho-history", metavar="DB", help="judge counters by their growth within "
                "the profile's window, from the nodes' earlier readings in this history "
                "database (read only)")
    g.addoption("--stetho-no-fleet", action="store_true", default=False,
                help="skip the fleet checks (version drift, busbw outliers)")


def pytest_configure(config: pytest.Config) -> None:
    from stetho import config as settings

    if not settings.is_active():  # plain `pytest checks/`: this is the edge
        settings.activate(settings.load())
    # batches carry it (stetho check runs with its own empty config, xdist loaded or not)
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker")
    s = Session(config)
    config.stash[_SESSION] = s
    config.pluginmanager.register(s, "stetho-session")


def session(config: pytest.Config) -> Session:
    return config.stash[_SESSION]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: WorkerController) -> None:
    """xdist controller: hand workers bundle files, so local evidence is collected once."""
    s = session(node.config)
    if not _explicit(node.config):
        return  # a pytest run that is not a stetho run: workers find their own nodes, if any
    sources = s.sources()
    if s.paths:  # every file, duplicates too: workers find the same problems
        node.workerinput["stetho_bundles"] = [str(p) for p in s.paths]
        return
    if not hasattr(s, "_spilled"):
        folder = Path(tempfile.mkdtemp(prefix="stetho-bundles-"))
        paths = []
        for i, src in enumerate(sources):
            p = folder / f"{i:05d}.json"
            (src.bundle if src.bundle is not None else s.node(src.name).facts.bundle).save(p)
            paths.append(str(p))
        s._spilled = paths  # type: ignore[attr-defined]
    node.workerinput["stetho_bundles"] = s._spilled  # type: ignore[attr-defined]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """A stetho run builds many small, mostly acyclic objects (parsed facts, results): the
    cyclic GC's frequent young-generation passes cost a quarter of a thousand-node replay.
    Startup objects are frozen out of it and collections made rarer; other suites untouched."""
    if _explicit(session.config):
        import gc

        gc.freeze()
        gc.set_threshold(100_000, 50, 100)


def _explicit(config: pytest.Config) -> bool:
    """stetho was asked for: by `stetho check`, by a --stetho-* option, or (in an xdist
    worker) by the controller handing over bundles."""
    return (session(config).bundles is not None
            or any(config.getoption(o, None) for o in (
                "stetho_evidence", "stetho_sim", "stetho_node", "stetho_profile", "stetho_batch"))
            or bool(getattr(config, "workerinput", {}).get("stetho_bundles")))


def _active(metafunc: pytest.Metafunc) -> bool:
    """The plugin parametrizes only checks: tests under a folder whose conftest.py says
    `stetho_checks = True`, or any test when stetho was asked for explicitly (its options, or
    `stetho check`). Other pytest suites in the same environment are left alone."""
    config = metafunc.config
    if _explicit(config):
        return True
    path = Path(str(metafunc.definition.path)).resolve()
    for plugin in config.pluginmanager.get_plugins():
        if getattr(plugin, "stetho_checks", False) is True and hasattr(plugin, "__file__"):
            folder = Path(plugin.__file__).resolve().parent
            if folder == path.parent or folder in path.parents:
                return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    kinds = [k for k in KINDS if k in metafunc.fixturenames]
    if not kinds or not _active(metafunc):
        return
    if len(kinds) > 1:
        raise pytest.UsageError(f"{metafunc.function.__name__} asks for several subjects "
                                f"({', '.join(kinds)}); a check has exactly one")
    kind = kinds[0]
    s = session(metafunc.config)
    if s.batched:
        params = [pytest.param(Batch(kind, names), id=f"{names[0]}..{names[-1]}"
                               if len(names) > 1 else names[0],
                               marks=pytest.mark.xdist_group(f"stetho-{i:04d}"))
                  for i, names in enumerate(s.groups())]
        metafunc.parametrize(kind, params, indirect=True)
        return
    subjects = [sub for n in s.all_nodes() for sub in expand(kind, n)]
    metafunc.parametrize(kind, subjects, ids=[sub.test_id for sub in subjects], indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In batch mode run a group's checks together, so each group is loaded once."""
    if not any(isinstance(_param(i), Batch) for i in items):
        return
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda i: (_group_key(i), order[id(i)]))


def _group_key(item: pytest.Item) -> tuple[str, ...]:
    p = _param(item)
    return p.names if isinstance(p, Batch) else ()


def _param(item: pytest.Item) -> Subject | Batch | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for value in callspec.params.values():
        if isinstance(value, (Subject, Batch)):
            return value
    return None


def _item_of(request: pytest.FixtureRequest) -> object:
    p: Subject | Batch = request.param
    if isinstance(p, Batch):
        return p  # replaced per subject in pytest_pyfunc_call
    if p.unavailable is not None:
        if p.unavailable.status == "skip":
            pytest.skip(p.unavailable.reason)
        raise p.unavailable.fresh()  # an error, with its remediation
    return p.item


def _subject_fixture(kind: str) -> Callable[[pytest.FixtureRequest], object]:
    """One fixture per subject kind (`gpu`, `ib_port`, ...): the subject a test is
    parametrized with, or a skip/error saying why the node has none."""

    @pytest.fixture(name=kind)
    def fixture(request: pytest.FixtureRequest) -> object:
        return _item_of(request)

    fixture.__doc__ = f"The `{kind}` subject this check runs for."
    return fixture


node = _subject_fixture("node")
gpu = _subject_fixture("gpu")
ib_port = _subject_fixture("ib_port")
disk = _subject_fixture("disk")
filesystem = _subject_fixture("filesystem")
service = _subject_fixture("service")
nvme = _subject_fixture("nvme")
nccl_env = _subject_fixture("nccl_env")
pcie_device = _subject_fixture("pcie_device")
version_component = _subject_fixture("version_component")
nccl_size = _subject_fixture("nccl_size")
bench_metric = _subject_fixture("bench_metric")
bench_run = _subject_fixture("bench_run")


def _node_of(request: pytest.FixtureRequest, fixture: str) -> CheckNode | None:
    p = _param(request.node)
    if p is None:
        raise pytest.UsageError(f"the `{fixture}` fixture needs a subject fixture (gpu, node, ...)")
    return None if isinstance(p, Batch) else p.node


@pytest.fixture
def facts(request: pytest.FixtureRequest) -> NodeFacts | None:
    """The NodeFacts of the node this test runs for (None in a batch: set per subject)."""
    node = _node_of(request, "facts")
    return node.facts if node else None


@pytest.fixture
def profile(request: pytest.FixtureRequest) -> Profile | None:
    """The profile the node is judged against (None in a batch: set per subject)."""
    node = _node_of(request, "profile")
    return node.profile if node else None


@pytest.fixture
def verdict(request: pytest.FixtureRequest) -> Verdict:
    v = Verdict()
    request.node.stash[_VERDICT] = v
    return v


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    batch = _param(pyfuncitem)
    if not isinstance(batch, Batch):
        return None
    s = session(pyfuncitem.config)
    s.enter_group(batch.names)
    check = _check_name(pyfuncitem)
    argnames = pyfuncitem._fixtureinfo.argnames
    results = []
    for name in batch.names:
        for sub in s.subjects(batch.kind, name):
            results.append(_run_subject(pyfuncitem, argnames, check, batch.kind, sub))
    pyfuncitem.stash[_BATCH_RESULTS] = results
    bad = [r for r in results if r.status in ("fail", "error")]
    if bad:
        # Without a traceback: the Results say which and why, and pytest formatting one (its
        # source, its locals) for every failing batch cost more than the checks.
        pytest.fail(f"{len(bad)} of {len(results)} subjects failed or errored, first: "
                    f"{bad[0].id}: {bad[0].message}", pytrace=False)
    return True


#: What a batch hands each check itself, per subject (_run_subject): a check that asks for
#: nothing else needs no fixture set up. `request` is in every fixture's closure; a check
#: that takes it as an argument is handed pytest's, so it takes pytest's protocol.
_OWN_ARGS = frozenset({*KINDS, "facts", "profile", "verdict"})
#: Marks whose meaning pytest applies in an item's setup phase (skip, xfail, a fixture use).
_SETUP_MARKS = ("skip", "skipif", "xfail", "usefixtures", "filterwarnings")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """A serial batch of a check that takes only stetho's own fixtures runs as one call
    phase: no fixture setup or teardown to do, and pytest's three phases (each a call record,
    a report and its hooks) were a tenth of a node's own check. Its call report is made
    and logged as pytest makes it; setup and teardown are logged as the passes they are.
    Anything else (an xdist worker, a site check with its own fixtures or setup-time marks)
    takes pytest's own protocol."""
    if (not isinstance(_param(item), Batch) or hasattr(item.config, "workerinput")
            or not isinstance(item, pytest.Function)
            or not _OWN_ARGS.issuperset(item._fixtureinfo.argnames)
            or not _OWN_ARGS.union(("request",)).issuperset(item._fixtureinfo.names_closure)
            or any(item.get_closest_marker(m) is not None for m in _SETUP_MARKS)):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    for when in ("setup", "call", "teardown"):
        if when == "call":
            call = pytest.CallInfo.from_call(item.runtest, when="call",
                                             reraise=(pytest.exit.Exception, KeyboardInterrupt))
            report = ihook.pytest_runtest_makereport(item=item, call=call)
        else:
            report = pytest.TestReport(item.nodeid, item.location, {}, "passed", None, when)
        ihook.pytest_runtest_logreport(report=report)
    # as pytest ends an item: what an earlier item (a site check's fixtures) set up and the
    # next one does not share is torn down, so that one's setup finds the stack it expects
    item.session._setupstate.teardown_exact(nextitem)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _run_subject(item: pytest.Function, argnames: tuple[str, ...], check: str, kind: str,
                 sub: Subject) -> Result:
    v = Verdict()
    start = time.perf_counter()
    probe = sub.unavailable.probe if sub.unavailable else None
    if sub.unavailable is not None:
        return outcomes.result(sub.node.name, check, sub.id, v, sub.unavailable, probe=probe)
    kwargs = {}
    for arg in argnames:
        if arg == kind:
            kwargs[arg] = sub.item
        elif arg == "facts":
            kwargs[arg] = sub.node.facts
        elif arg == "profile":
            kwargs[arg] = sub.node.profile
        elif arg == "verdict":
            kwargs[arg] = v
        else:
            kwargs[arg] = item.funcargs[arg]
    try:
        item.obj(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - every outcome of a check becomes a Result
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        # Made here, inside the except: the exception (whose traceback holds this frame and
        # so the node's facts) is freed at once, not left in a cycle for a rare full GC.
        return outcomes.result(sub.node.name, check, sub.id, v, exc, probe=probe,
                               duration_s=time.perf_counter() - start)
    return outcomes.result(sub.node.name, check, sub.id, v, None, probe=probe,
                           duration_s=time.perf_counter() - start)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    s = session(item.config)
    if s.pending:
        report.user_properties.append((SUMMARY_KEY, json.dumps(s.pending, default=str)))
        s.pending = []
    p = _param(item)
    if p is None or call.when == "teardown" or (call.when == "setup" and report.passed):
        return
    if isinstance(p, Batch):
        # Taken, not read: an item outlives its run (pytest keeps every item to the end), and
        # a group's Results left in its stash grew a worker's memory with every node.
        results = item.stash.get(_BATCH_RESULTS, None)
        if results is not None:
            del item.stash[_BATCH_RESULTS]
        else:  # the batch could not start (a fixture error, a skip mark): each subject
            # says so under its own id, as a per-subject run names it (`gpu3`, "" for the node)
            s.enter_group(p.names)
            results = [_item_result(item, sub, call, report) for n in p.names
                       for sub in s.subjects(p.kind, n)]
    else:
        results = [_item_result(item, p, call, report)]
    report.user_properties.append((RESULT_KEY, pack([row(r) for r in results])))


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Once a report has been sent on (an xdist worker) or read (Session, on the controller),
    its results are dropped from it: pytest's terminal reporter keeps every report to the end,
    and with a group's results attached that grew memory with every node replayed."""
    if any(key in _PAYLOAD for key, _ in report.user_properties):
        report.user_properties = [p for p in report.user_properties if p[0] not in _PAYLOAD]


_PAYLOAD = (RESULT_KEY, SUMMARY_KEY)


def _check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    return name.removeprefix("test_")


def _item_result(item: pytest.Item, sub: Subject, call: pytest.CallInfo[None],
                 report: pytest.TestReport) -> Result:
    v = item.stash.get(_VERDICT, None)
    probe = sub.unavailable.probe if sub.unavailable else None
    skipped = _skip_reason(report) if report.skipped else None
    exc = call.excinfo.value if call.excinfo is not None and not report.skipped else None
    return outcomes.result(sub.node.name, _check_name(item), sub.id, v, exc, skipped=skipped,
                           probe=probe, duration_s=call.duration)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if hasattr(config, "workerinput"):
        return
    s = config.stash[_SESSION]
    if s.pending:  # nodes loaded after the last report (rare): still count them
        for summary in s.pending:
            s.summaries.setdefault(summary["node"], summary)
        s.pending = []
    # one node (a check on the node, a replay of one bundle) has no peers: no fleet rows
    if not config.getoption("stetho_no_fleet", False) and len(s.summaries) > 1:
        from stetho.checking import fleet as fleetchecks

        s.results.extend(fleetchecks.evaluate(list(s.summaries.values())))
    out = config.getoption("stetho_results", None)
    if out:
        from stetho.sinks import json_out

        with open(out, "w", encoding="utf-8") as fh:
            fh.writelines(json_out.render_stream(s.results) if s.results.spilled
                          else json_out.render(list(s.results)))
