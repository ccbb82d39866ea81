"""A node's check as the sweep's playbook runs it (`--local --no-history --deadline
--evidence-out --outcome -`), in a fresh interpreter: what it imports and what it prints.
Every host of a sweep pays this start-up, so what only a controller needs stays unloaded."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli_lazy import heavy_in, imported

#: The web client stack: xml.sax.saxutils (for one escape function) pulled it all in.
WEB = ("urllib.request", "http.client", "ssl", "email.parser")


def test_the_sweeps_node_check_loads_no_web_client(tmp_path: Path) -> None:
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "node01", "node01")
    ev = tmp_path / "evidence-node01.json"
    code, modules = imported("check", "--local", "--sim", str(node), "--profile",
                             "h100-sxm-8gpu", "--node", "node01", "--no-history",
                             "--deadline", "240", "--evidence-out", str(ev), "--outcome", "-")
    assert code == 0  # a healthy simulated H100: it really ran
    assert json.loads(ev.read_text())["node"] == "node01"
    assert sorted(m for m in WEB if m in modules) == []
    assert "stetho.sinks.junit" in modules  # the outcome carries the node's JUnit
    assert [m for m in heavy_in(modules) if m != "stetho.fleet"
            and not m.startswith("stetho.fleet.")] == []
