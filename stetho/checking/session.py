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
from dataclasses import dataclass
from pathlib import Path

import pytest

from stetho.checking.nodes import CheckNode, NodeSummary
from stetho.evidence.bundle import Bundle
from stetho.results import Result

#: More nodes than this are checked in batches (one item per check x group of nodes).
BATCH_ABOVE = 16
#: Items per check in batch mode: enough groups to spread over workers, few enough that
#: pytest's per-item cost (~2 ms) stays small against the work in each.
BATCH_GROUPS = 32

_NODE_IN_HEAD = re.compile(rb'"node":\s*"((?:[^"\\]|\\.)*)"')


@dataclass
class NodeSource:
    name: str
    path: Path | None = None
    bundle: Bundle | None = None


class Session:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[Result] = []
        self.bundles: list[Bundle] | None = None  # injected by `stetho check`
        self.profile_override: str | None = None
        self.summaries: dict[str, NodeSummary] = {}
        self.pending: list[NodeSummary] = []  # summaries to send with the next report
        self._sources: list[NodeSource] | None = None
        self._nodes: dict[str, CheckNode] = {}
        self._group: tuple[str, ...] = ()

    # -- where nodes come from ---------------------------------------------------------------
    def sources(self) -> list[NodeSource]:
        if self._sources is None:
            self._sources = self._find()
        return self._sources

    def _find(self) -> list[NodeSource]:
        from stetho.evidence import bundle as bundle_mod

        if self.bundles is not None:
            return [NodeSource(b.node, bundle=b) for b in self.bundles]
        opt = self.config.getoption
        paths = _worker_bundles(self.config) or [
            p for e in opt("stetho_evidence", None) or [] for p in bundle_mod.find_bundles(Path(e))]
        if paths:
            return [NodeSource(_node_name(p), path=p) for p in paths]
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
        names = [s.name for s in self.sources()]
        size = max(1, -(-len(names) // BATCH_GROUPS))
        return [tuple(names[i:i + size]) for i in range(0, len(names), size)]

    # -- nodes, loaded when first needed ------------------------------------------------------
    def node(self, name: str) -> CheckNode:
        if name in self._nodes:
            return self._nodes[name]
        from stetho import profiles
        from stetho.evidence import bundle as bundle_mod

        source = next((s for s in self.sources() if s.name == name), None)
        if source is None:
            raise KeyError(name)
        if source.bundle is not None:
            bundle = source.bundle
        else:
            assert source.path is not None
            bundle = bundle_mod.load(source.path)
        prof = profiles.load(self.override() or bundle.profile or profiles.DEFAULT_PROFILE)
        node = CheckNode.of(bundle, prof)
        self._nodes[name] = node
        self.pending.append(node.summary())
        return node

    def all_nodes(self) -> list[CheckNode]:
        return [self.node(s.name) for s in self.sources()]

    def enter_group(self, names: tuple[str, ...]) -> None:
        """Batch mode holds one group's facts at a time: memory stays flat as nodes grow."""
        if names != self._group:
            for n in self._group:
                if n not in names:
                    self._nodes.pop(n, None)
            self._group = names

    # -- results and summaries from reports ---------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == RESULT_KEY:
                self.results.extend(Result.from_json(r) for r in json.loads(str(value)))
            elif key == SUMMARY_KEY:
                for s in json.loads(str(value)):
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


def _node_name(path: Path) -> str:
    """A bundle's node name from its first bytes (bundles write it early), without parsing
    the whole file: collection of a thousand-node run folder stays cheap."""
    with path.open("rb") as fh:
        head = fh.read(4096)
    m = _NODE_IN_HEAD.search(head)
    if m:
        return str(json.loads(b'"' + m.group(1) + b'"'))
    from stetho.evidence import bundle as bundle_mod

    return bundle_mod.load(path).node


def _worker_bundles(config: pytest.Config) -> list[Path]:
    winput = getattr(config, "workerinput", None)
    if winput and winput.get("stetho_bundles"):
        return [Path(p) for p in winput["stetho_bundles"]]
    return []


def _collect_local(config: pytest.Config, profile: str | None) -> Bundle:
    from stetho.evidence import collect

    return collect.collect_local(profile=profile or None, sim=config.getoption("stetho_sim"),
                                 node=config.getoption("stetho_node"))
