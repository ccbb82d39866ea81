"""The stetho pytest plugin: evidence in, one Result per check x subject out.

Loaded through the `pytest11` entry point, so `pytest checks/ --stetho-evidence runs/x` works
like any pytest suite and a site adds its own checks as test files. `stetho check` drives the
same plugin in-process. Checks name a subject fixture (`gpu`, `ib_port`, `disk`, `node`, ...)
and the plugin parametrizes it over every node's subjects; the outcome and the check's
`verdict` become a Result carried in the report's user_properties, which also crosses
pytest-xdist's worker boundary.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stetho.results import Result
from stetho.subjects import KINDS, Subject, expand
from stetho.verdict import CheckError, CheckFailed, Verdict

RESULT_KEY = "stetho_result"


class State:
    """Per-session: which nodes the checks run over, and the results gathered."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._nodes: list[Any] | None = None
        self.results: list[Result] = []
        self.bundles: list[Any] | None = None  # injected by `stetho check`
        self.profile_override: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == RESULT_KEY:
                self.results.append(Result.from_json(json.loads(str(value))))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A site check file that does not import is an error result, not a silent gap."""
        if report.failed:
            lines = str(report.longrepr).strip().splitlines()
            self.results.append(Result(
                node="*", check=os.path.basename(report.nodeid) or "checks", subject="",
                status="error", message="check file could not be loaded: "
                + (lines[-1].removeprefix("E").strip() if lines else "unknown error")))

    def nodes(self) -> list[Any]:
        if self._nodes is None:
            self._nodes = self._load()
        return self._nodes

    def _load(self) -> list[Any]:
        from stetho import profiles
        from stetho.evidence import bundle as bundle_mod
        from stetho.facts import NodeFacts

        opt = self.config.getoption
        override = self.profile_override or opt("stetho_profile", None)
        bundles = self.bundles
        if bundles is None:
            paths = _worker_bundles(self.config) or [
                p for e in opt("stetho_evidence", None) or []
                for p in bundle_mod.find_bundles(Path(e))]
            if paths:
                bundles = [bundle_mod.load(p) for p in paths]
            else:
                bundles = [_collect_local(self.config, override)]
        cache: dict[str, Any] = {}
        nodes = []
        for b in bundles:
            name = override or b.profile or profiles.DEFAULT_PROFILE
            if name not in cache:
                cache[name] = profiles.load(name)
            nodes.append(NodeFacts(b, cache[name]))
        return nodes


_STATE = pytest.StashKey[State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("stetho", "stetho node health checks")
    g.addoption("--stetho-evidence", action="append", metavar="PATH",
                help="replay checks over saved evidence bundles (a file or a folder)")
    g.addoption("--stetho-sim", metavar="DIR", help="collect from a simulated node folder")
    g.addoption("--stetho-node", metavar="NAME", help="node name for local collection")
    g.addoption("--stetho-profile", metavar="NAME", help="profile for every node (overrides "
                "the profile recorded in bundles)")
    g.addoption("--stetho-results", metavar="PATH", help="write the results JSON here")


def pytest_configure(config: pytest.Config) -> None:
    st = State(config)
    config.stash[_STATE] = st
    config.pluginmanager.register(st, "stetho-state")


def state(config: pytest.Config) -> State:
    return config.stash[_STATE]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: hand workers bundle files, so local evidence is collected once."""
    st = state(node.config)
    if st.bundles is None and not node.config.getoption("stetho_evidence", None) and \
            not _worker_bundles(node.config):
        st.bundles = [_collect_local(node.config, node.config.getoption("stetho_profile"))]
    if st.bundles is not None:
        node.workerinput["stetho_bundles"] = _spill(st)


def _spill(st: State) -> list[str]:
    if not hasattr(st, "_spilled"):
        folder = Path(tempfile.mkdtemp(prefix="stetho-bundles-"))
        paths = []
        for i, b in enumerate(st.bundles or []):
            p = folder / f"{i:05d}-{b.node}.json"
            b.save(p)
            paths.append(str(p))
        st._spilled = paths  # type: ignore[attr-defined]
    return st._spilled  # type: ignore[attr-defined,no-any-return]


def _worker_bundles(config: pytest.Config) -> list[Path]:
    winput = getattr(config, "workerinput", None)
    if winput and winput.get("stetho_bundles"):
        return [Path(p) for p in winput["stetho_bundles"]]
    return []


def _collect_local(config: pytest.Config, profile: str | None) -> Any:
    from stetho import collect

    return collect.collect_local(profile=profile or None, sim=config.getoption("stetho_sim"),
                                 node=config.getoption("stetho_node"))


def _active(metafunc: pytest.Metafunc) -> bool:
    """The plugin parametrizes only checks: tests under a folder whose conftest.py says
    `stetho_checks = True`, or any test when stetho was asked for explicitly (its options, or
    `stetho check`). Other pytest suites in the same environment are left alone."""
    config = metafunc.config
    st = state(config)
    if st.bundles is not None or any(config.getoption(o, None) for o in (
            "stetho_evidence", "stetho_sim", "stetho_node", "stetho_profile")):
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
    subjects = [s for n in state(metafunc.config).nodes() for s in expand(kind, n)]
    metafunc.parametrize(kind, subjects, ids=[s.test_id for s in subjects], indirect=True)


def _subject(item: pytest.Item) -> Subject | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for value in callspec.params.values():
        if isinstance(value, Subject):
            return value
    return None


def _item_of(request: pytest.FixtureRequest) -> Any:
    s: Subject = request.param
    if s.unavailable is not None:
        if s.unavailable.status == "skip":
            pytest.skip(s.unavailable.reason)
        raise CheckError(s.unavailable.reason)
    return s.item


@pytest.fixture
def node(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def gpu(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def ib_port(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def disk(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def pcie_device(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def version_component(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def nccl_size(request: pytest.FixtureRequest) -> Any:
    return _item_of(request)


@pytest.fixture
def facts(request: pytest.FixtureRequest) -> Any:
    """The NodeFacts of the node this test runs for."""
    s = _subject(request.node)
    if s is None:
        raise pytest.UsageError("the `facts` fixture needs a subject fixture (gpu, node, ...)")
    return s.node


@pytest.fixture
def profile(facts: Any) -> Any:
    return facts.profile


_VERDICT = pytest.StashKey[Verdict]()


@pytest.fixture
def verdict(request: pytest.FixtureRequest) -> Verdict:
    v = Verdict()
    request.node.stash[_VERDICT] = v
    return v


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    subject = _subject(item)
    if subject is None or call.when == "teardown" or (call.when == "setup" and report.passed):
        return
    result = _result(item, subject, call, report)
    report.user_properties.append((RESULT_KEY, json.dumps(result.to_json())))


def _check_name(item: pytest.Item) -> str:
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    return name.removeprefix("test_")


def _result(item: pytest.Item, s: Subject, call: pytest.CallInfo[None], report: Any) -> Result:
    v = item.stash.get(_VERDICT, None) or Verdict()
    status, message = v.status, v.message
    exc = call.excinfo
    if report.skipped:
        status = "skip"
        message = _skip_reason(report)
    elif exc is not None:
        from stetho.facts import Unavailable
        from stetho.parsers import ParseError

        err = exc.value
        if isinstance(err, CheckFailed):
            status, message = "fail", str(err)
        elif isinstance(err, AssertionError):
            status, message = "fail", str(err).split("\n")[0] or "assertion failed"
        elif isinstance(err, Unavailable):
            status, message = ("skip" if err.status == "skip" else "error"), err.reason
        elif isinstance(err, (CheckError, ParseError)):
            status, message = "error", str(err)
        else:
            status = "error"
            message = f"check raised {type(err).__name__}: {err} (a bug in the check)"
    elif status == "pass" and not message:
        message = "ok"
    probe = v.probe or (s.unavailable.probe if s.unavailable else None)
    return Result(node=s.node.name, check=_check_name(item), subject=s.id, status=status,
                  message=message, value=v.value, unit=v.unit, expected=v.expected,
                  threshold=v.threshold, remediation=v.remediation, evidence=v.evidence,
                  probe=probe, duration_s=round(call.duration, 6))


def _skip_reason(report: Any) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_sessionfinish(session: pytest.Session) -> None:
    st = state(session.config)
    out = session.config.getoption("stetho_results", None)
    if out and not hasattr(session.config, "workerinput"):
        from stetho.sinks import json_out

        Path(out).write_text(json_out.render(st.results))
