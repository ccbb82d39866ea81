"""Remediation as data: each rule's `remedy:` is validated, the planner picks the action its
evidence calls for on real simulated faults, and an action the same fault outlived escalates
(gpu-reset -> ticket, reboot -> ticket, a ticket is not sent twice) from a real SQLite
history."""

from __future__ import annotations

import pytest

from stetho.diagnosis import engine, rules
from stetho.diagnosis.signals import SIGNALS
from stetho.errors import ConfigError
from stetho.history import remedies
from stetho.history.store import History
from stetho.remedy import plan
from tests.test_diagnosis import _ctx

pytestmark = pytest.mark.xdist_group("faultsim")

RULE = ("cause: r\ntitle: x\nsupports:\n  - {signal: xid_memory, weight: 1}\n"
        "action: x\nticket: x\n")


def _rule(tmp_path, remedy: str):
    path = tmp_path / "r.yml"
    path.write_text(RULE + remedy)
    return rules.load(path, set(SIGNALS))


def test_every_shipped_rule_declares_its_remedy():
    for r in rules.load_all():
        assert r.remedy, f"{r.cause}: no remedy declared"
        assert r.remedy[-1].action in ("gpu-reset", "reboot", "ticket", "none")


@pytest.mark.parametrize(("text", "error"), [
    ("remedy: {action: reformat}", r"r\.yml:7: action must be one of gpu-reset, reboot, "
     r"ticket, none, not 'reformat'"),
    ("remedy: {action: gpu-reset, when: {signals: [vibes]}}", r"unknown signal 'vibes'"),
    ("remedy: {action: gpu-reset, when: {xids: [nine]}}", r"xids must be a list"),
    ("remedy: {action: reboot, when: {value: '(['}}", r"not a regular expression"),
    ("remedy: {action: reboot, escalate: [reboot]}", r"escalate steps must be other actions"),
    ("remedy: {action: ticket, why: x}", r"unknown key remedy\.why"),
    ("remedy:\n  - {action: ticket}\n  - {action: gpu-reset, when: {xids: [94]}}",
     r"only the last remedy option may have no `when`"),
])
def test_a_malformed_remedy_is_refused_with_file_and_line(tmp_path, text, error):
    with pytest.raises(ConfigError, match=error):
        _rule(tmp_path, text)


def test_a_rule_without_remedy_does_nothing_by_itself(tmp_path):
    assert _rule(tmp_path, "").remedy == ()


@pytest.mark.parametrize(("node", "cause", "action", "part"), [
    ("rowremap", "gpu-remap-pending", "gpu-reset", "gpu:"),
    ("xid63", "gpu-remap-pending", "gpu-reset", "gpu:"),
    ("eccdbe", "gpu-memory-failing", "ticket", "gpu:"),  # a DBE: a person, not a reset
    ("remapfail", "gpu-memory-failing", "ticket", "gpu:"),  # Xid 64: the remap failed
    ("xid79", "gpu-off-bus", "reboot", "gpu:"),
    ("fabric", "nvswitch-fabric-down", "reboot", ""),
    ("fmdown", "nvswitch-fabric-down", "reboot", ""),
    ("resetreq", "gpu-reset-required", "gpu-reset", "gpu:"),
    ("nvlink", "nvlink-degraded", "ticket", "gpu:"),  # a link down: a person
    ("nvlinkerr", "nvlink-degraded", "gpu-reset", "gpu:"),  # counters climbing, link up
    ("ibrate", "ib-link-degraded", "ticket", "hca:mlx5_4/1"),
    ("governor", "cpu-governor", "none", "node"),
])
def test_the_rule_picks_the_action_the_evidence_calls_for(node, cause, action, part,
                                                          fault_results, fault_bundles):
    ctx = _ctx(node, fault_results, fault_bundles)
    d = engine.diagnose(ctx, run="r1")
    assert d.cause == cause
    top = plan.plan(d, {r.cause: r for r in rules.load_all()}, now=1e9, facts=ctx.facts)[0]
    assert (top.cause, top.action) == (cause, action), top.why
    assert top.part.startswith(part)


def test_a_gpu_step_names_the_gpu_by_serial_with_its_uuid(fault_results, fault_bundles):
    ctx = _ctx("rowremap", fault_results, fault_bundles)
    d = engine.diagnose(ctx, run="r1")
    step = plan.plan(d, {r.cause: r for r in rules.load_all()}, now=1e9, facts=ctx.facts)[0]
    gpu = next(g for g in ctx.facts.gpus() if g.index == 6)
    assert step.get("gpu") == "6" and step.get("uuid") == gpu.uuid
    assert step.part == f"gpu:{gpu.serial}"


def test_an_ib_step_carries_the_hca_guid_and_cable(fault_results, fault_bundles):
    ctx = _ctx("ibrate", fault_results, fault_bundles)
    d = engine.diagnose(ctx, run="r1")
    step = plan.plan(d, {r.cause: r for r in rules.load_all()}, now=1e9, facts=ctx.facts)[0]
    ca = next(c for c in ctx.facts.ibstat().cas if c.name == "mlx5_4")
    assert step.get("guid") == ca.node_guid and step.get("device") == "mlx5_4"


def _record(h, t, action, outcome="done", part="gpu:X", cause="gpu-remap-pending",
            node="rowremap"):
    remedies.record(h, remedies.Record(t, node, part, cause, action, outcome))


def test_an_action_the_fault_outlived_escalates_instead_of_repeating(tmp_path, fault_results,
                                                                     fault_bundles):
    ctx = _ctx("rowremap", fault_results, fault_bundles)
    d = engine.diagnose(ctx, run="r1")
    by = {r.cause: r for r in rules.load_all()}
    seen, now = 1_000_000.0, 1_000_100.0
    with History(tmp_path / "h.db") as h:
        part = plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0].part
        assert plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0].action == "gpu-reset"
        # a reset that failed did not run: no escalation, try again
        _record(h, seen - 60, "gpu-reset", "failed", part)
        assert plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0].action == "gpu-reset"
        # another part's reset, or another cause on this part, is another fault
        _record(h, seen - 50, "gpu-reset", part="gpu:OTHER")
        _record(h, seen - 50, "gpu-reset", part=part, cause="gpu-memory-failing")
        assert plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0].action == "gpu-reset"
        # the reset ran, and the same fault was collected after it: a ticket, not a reset
        _record(h, seen - 40, "gpu-reset", part=part)
        step = plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0]
        assert step.action == "ticket" and step.why.startswith("escalated: gpu-reset ran")
        assert [r.action for r in step.earlier] == ["gpu-reset"]
        # the ticket went out too: nothing more by itself, and no second ticket
        _record(h, seen - 30, "ticket", part=part)
        step = plan.plan(d, by, h, now=now, facts=ctx.facts, seen=seen)[0]
        assert step.action == "none" and "ticket already sent" in step.why
        # an action older than the window is another fault's
        assert plan.plan(d, by, h, now=now + plan.ESCALATE_WINDOW_S, facts=ctx.facts,
                         seen=now + plan.ESCALATE_WINDOW_S)[0].action == "gpu-reset"


def test_evidence_older_than_the_action_neither_repeats_nor_escalates(tmp_path, fault_results,
                                                                      fault_bundles):
    ctx = _ctx("xid79", fault_results, fault_bundles)
    d = engine.diagnose(ctx, run="r1")
    by = {r.cause: r for r in rules.load_all()}
    with History(tmp_path / "h.db") as h:
        part = plan.plan(d, by, h, now=2e6, facts=ctx.facts, seen=1e6)[0].part
        _record(h, 1e6 + 5, "reboot", part=part, cause="gpu-off-bus", node="xid79")
        step = plan.plan(d, by, h, now=2e6, facts=ctx.facts, seen=1e6)[0]
        assert step.action == "none" and "check xid79 again" in step.why
        step = plan.plan(d, by, h, now=2e6, facts=ctx.facts, seen=1e6 + 10)[0]
        assert step.action == "ticket" and "reboot ran" in step.why


def test_a_version_1_history_gains_the_remedies_table(tmp_path):
    import sqlite3

    from stetho.history.store import MIGRATIONS, SCHEMA_VERSION

    with sqlite3.connect(tmp_path / "h.db") as c:  # as stetho before remedies left it
        for stmt in MIGRATIONS[1]:
            c.execute(stmt)
        c.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    with History(tmp_path / "h.db") as h:
        assert h.schema_version() == SCHEMA_VERSION
        remedies.record(h, remedies.Record(5.0, "n1", "node", "c", "reboot", "done", "x", "r"))
        assert remedies.recent(h) == [remedies.Record(5.0, "n1", "node", "c", "reboot",
                                                      "done", "x", "r")]
        with pytest.raises(ValueError, match="unknown outcome"):
            remedies.record(h, remedies.Record(5.0, "n1", "node", "c", "reboot", "worked"))


@pytest.mark.parametrize(("value", "action"), [
    ("Reboot", "reboot"), ("Reset Required", "gpu-reset"), ("Drain and Reset", "gpu-reset")])
def test_the_drivers_own_verdict_picks_reset_or_reboot(value, action):
    from stetho.diagnosis.model import Evidence, Hypothesis
    from stetho.diagnosis.remedies import choose

    rule = next(r for r in rules.load_all() if r.cause == "gpu-reset-required")
    h = Hypothesis("gpu-reset-required", "x", 0.6, (Evidence(
        "driver_reset_required", "the driver says", 5.0, value=value, where=(("gpu", "2"),)),),
        action="x", ticket="x")
    chosen = choose(rule.remedy, h)
    assert chosen is not None and chosen.action == action
