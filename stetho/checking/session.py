"""The plugin's per-session state: where the nodes' evidence comes from, loaded lazily.

A few nodes are loaded up front and each check x subject is its own pytest item. Many nodes
(a replayed run folder) are *batched*: an item is one check over a group of nodes, its subjects
evaluated inside it, and only the group being checked is held in memory. Either way each
check x subject yields the same Result. Each node's fleet facts (versions, busbw) are
summarised once, where the node is loaded, and travel back with the reports, so fleet checks
run on the controller without loading every bundle again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stetho.checking.nodes import CheckNode, NodeSummary
from stetho.checking.subjects import Subject, expand
from stetho.core.record import record
from stetho.errors import ConfigError
from stetho.evidence.bundle import Bundle
from stetho.results import Result
from stetho.sinks.spool import Results, unpack

#: More nodes than this are checked in batches (one item per check x group of nodes).
BATCH_ABOVE = 16
#: Items per check in batch mode: enough groups to spread over workers, few enough that
#: pytest's per-item cost (~2 ms) stays small against the work in each.
BATCH_GROUPS = 32
#: ... but never more nodes in a group than this: a worker holds one group's facts at a time,
#: so memory stays flat however large the fleet. 256, not 64: 10,240 nodes make 1,880 items
#: instead of 7,520, each with its pytest protocol and three reports through xdist's pipe
#: (5-8% of a serial replay's CPU, more with workers), for about 0.14 GiB more a worker
#: (a serial replay of 512 nodes in groups of 256 peaked at 231 MiB, in groups of 16 at 98).
GROUP_NODES = 256

_NODE_IN_HEAD = re.compile(rb'"node":\s*"((?:[^"\\]|\\.)*)"')


@record(frozen=False)
class NodeSource:
    """Where one node's evidence is. `problem` says why it cannot be used (unreadable, two
    bundles of the node, ...): every check then reports an error for the node, never a gap."""

    name: str
    path: Path | None = None
    bundle: Bundle | None = None
    problem: str | None = None


class Session:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results = Results()  # on disk past a few thousand: memory per node stays flat
        #: Off when no history consumes the nodes' metrics: not even extracted then.
        self.keep_metrics = not config.getoption("stetho_no_metrics", False)
        #: Off when the caller keeps the nodes' own summaries (a re-judgement of counters).
        self.summarise = not config.getoption("stetho_no_summaries", False)
        self.bundles: list[Bundle] | None = None  # injected by `stetho check`
        self.profile_override: str | None = None
        self.summaries: dict[str, NodeSummary] = {}
        self.pending: list[NodeSummary] = []  # summaries to send with the next report
        self._sources: list[NodeSource] | None = None
        self._by_name: dict[str, NodeSource] = {}
        self.paths: list[Path] = []  # every bundle file found, duplicates included
        self._nodes: dict[str, CheckNode] = {}
        self._subjects: dict[tuple[str, str], list[Subject]] = {}
        self._group: tuple[str, ...] = ()

    # -- where nodes come from ---------------------------------------------------------------
    def sources(self) -> list[NodeSource]:
        if self._sources is None:
            self._sources = _one_per_node(self._find())
            self._by_name = {s.name: s for s in self._sources}
        return self._sources

    def _find(self) -> list[NodeSource]:
        from stetho.evidence import bundle as bundle_mod

        if self.bundles is not None:
            return [NodeSource(b.node, bundle=b) for b in self.bundles]
        opt = self.config.getoption
        paths = _worker_bundles(self.config) or [
            p for e in opt("stetho_evidence", None) or [] for p in bundle_mod.find_bundles(Path(e))]
        if paths:
            self.paths = paths
            return [_source_of(p) for p in paths]
        b = _collect_local(self.config, self.override())
        self.bundles = [b]
        return [NodeSource(b.node, bundle=b)]

    def override(self) -> str | None:
        return self.profile_override or self.config.getoption("stetho_profile", None)

    @property
    def batched(self) -> bool:
        forced = self.config.getoption("stetho_batch", None)
        return bool(forced) or len(self.sources()) > BATCH_ABOVE

    def groups(self) -> list[tuple[str, ...]]:
        """Nodes in groups of at most GROUP_NODES (BATCH_GROUPS groups while fewer suffice):
        what one worker holds at a time stays the same however many nodes there are."""
        names = [s.name for s in self.sources()]
        size = max(1, min(GROUP_NODES, -(-len(names) // BATCH_GROUPS)))
        return [tuple(names[i:i + size]) for i in range(0, len(names), size)]

    # -- nodes, loaded when first needed ------------------------------------------------------
    def node(self, name: str) -> CheckNode:
        if name in self._nodes:
            return self._nodes[name]
        from stetho import profiles
        from stetho.evidence import bundle as bundle_mod

        self.sources()
        source = self._by_name.get(name)
        if source is None:
            raise KeyError(name)
        bundle, problem = source.bundle, source.problem
        if bundle is None and problem is None:
            assert source.path is not None
            try:
                bundle = bundle_mod.load(source.path)
            except bundle_mod.BundleError as exc:
                problem = str(exc)
            else:
                if bundle.node != name:
                    problem = (f"{source.path}: names node {bundle.node!r} in its body but "
                               f"{name!r} in its head; not replayed")
        prof = None
        if bundle is not None and problem is None:
            try:  # the node's own profile name: one this controller lacks is the node's error
                prof = profiles.load(self.override() or bundle.profile
                                     or profiles.DEFAULT_PROFILE)
            except ConfigError as exc:
                problem = f"{source.path or name}: profile {bundle.profile!r}: {exc}"
        if bundle is None or problem is not None or prof is None:
            prof = profiles.load(self.override() or profiles.DEFAULT_PROFILE)
            node = CheckNode.unreadable(name, prof, problem or "no evidence")
        else:
            node = CheckNode.of(bundle, prof)
            db = self.config.getoption("stetho_history", None)
            if db:
                from stetho.checking import counter_history as window

                node.facts.window_loader = window.loader(Path(db), prof.counters.window_h)
            if self.summarise:
                self.pending.append(node.summary(metrics=self.keep_metrics))
        self._nodes[name] = node
        return node

    def all_nodes(self) -> list[CheckNode]:
        return [self.node(s.name) for s in self.sources()]

    def enter_group(self, names: tuple[str, ...]) -> None:
        """Batch mode holds one group's facts at a time: memory stays flat as nodes grow."""
        if names != self._group:
            for n in self._group:
                if n not in names:
                    self._nodes.pop(n, None)
            self._subjects.clear()
            self._group = names

    def subjects(self, kind: str, name: str) -> list[Subject]:
        """A node's subjects of `kind`, listed once per group: a dozen checks ask for the same
        kind (gpu, ib_port, node), and listing them again for each was 5% of a replay. They
        are read-only records of the node's facts, which are parsed once anyway."""
        key = (kind, name)
        found = self._subjects.get(key)
        if found is None:
            found = self._subjects[key] = expand(kind, self.node(name))
            for sub in found:  # kept past the check: without the frames its traceback holds
                if sub.unavailable is not None:
                    sub.unavailable.__traceback__ = None
        return found

    # -- results and summaries from reports ---------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(self.config, "workerinput"):
            return  # an xdist worker: its reports (and their results) belong to the controller
        for key, value in report.user_properties:
            if key == RESULT_KEY:
                self.results.add_rows(unpack(str(value)))
            elif key == SUMMARY_KEY:
                for s in json.loads(str(value)):
                    if not self.keep_metrics:
                        s["metrics"] = []
                    self.summaries.setdefault(s["node"], s)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A site check file that does not import is an error result, not a silent gap."""
        if report.failed:
            import os

            lines = str(report.longrepr).strip().splitlines()
            self.results.append(Result(
                node="*", check=os.path.basename(report.nodeid) or "checks", subject="",
                status="error", message="check file could not be loaded: "
                + (lines[-1].removeprefix("E").strip() if lines else "unknown error")))


RESULT_KEY = "stetho_results"
SUMMARY_KEY = "stetho_summaries"


def _source_of(path: Path) -> NodeSource:
    """A bundle's node name from its first bytes (bundles write it early), without parsing
    the whole file: collection of a thousand-node run folder stays cheap. A file whose name
    cannot be read this way is named by its file name (a run folder's hosts/<node>/evidence.json:
    by its folder), with the reason as its problem."""
    from stetho.evidence import bundle as bundle_mod

    stem = path.parent.name if path.name == bundle_mod.RUN_FOLDER_NAME else path.stem
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError as exc:
        return NodeSource(stem, path, problem=f"{path}: cannot read evidence bundle: "
                          f"{exc.strerror or exc}")
    m = _NODE_IN_HEAD.search(head)
    if m:
        try:
            return NodeSource(str(json.loads(b'"' + m.group(1) + b'"')), path)
        except ValueError:
            pass
    try:
        return NodeSource(bundle_mod.load(path).node, path)
    except bundle_mod.BundleError as exc:
        return NodeSource(stem, path, problem=str(exc))


def _one_per_node(found: list[NodeSource]) -> list[NodeSource]:
    """One source per node, in the order found. Two bundles of one node are that node's error:
    which one is the truth is not stetho's to guess, and merging them would hide a fault."""
    by_name: dict[str, list[NodeSource]] = {}
    for src in found:
        by_name.setdefault(src.name, []).append(src)
    out = []
    for name, same in by_name.items():
        if len(same) == 1:
            out.append(same[0])
            continue
        where = ", ".join(str(s.path) if s.path else "(in memory)" for s in same)
        out.append(NodeSource(name, same[0].path, problem=(
            f"{len(same)} evidence bundles for node {name} in one replay ({where}): they are "
            f"never merged; keep the one to judge and replay again")))
    return out


def _worker_bundles(config: pytest.Config) -> list[Path]:
    winput = getattr(config, "workerinput", None)
    if winput and winput.get("stetho_bundles"):
        return [Path(p) for p in winput["stetho_bundles"]]
    return []


def _collect_local(config: pytest.Config, profile: str | None) -> Bundle:
    from stetho.evidence import collect

    return collect.collect_local(profile=profile or None, sim=config.getoption("stetho_sim"),
                                 node=config.getoption("stetho_node"))
