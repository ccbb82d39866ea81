"""What the gate was asked (GateRequest) and what it decided and did (GateOutcome): apart from
stetho.gate.evaluate, which decides, so that the modules writing the gate's outputs read the
outcome without importing the decision."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from stetho.core.record import record
from stetho.gate.decision import Decision, lines
from stetho.gate.decision import summary as summary_line
from stetho.gate.policy import GatePolicy
from stetho.results import Result

if TYPE_CHECKING:
    from stetho.checking.nodes import NodeSummary
    from stetho.diagnosis.model import Diagnosis
    from stetho.gate.breaker import Trip
    from stetho.gate.shadow import ShadowOutcome
    from stetho.gate.slurm import Action
    from stetho.jobs.blast import SwitchIncident


@record
class GateRequest:
    """What to decide: a policy (name or path) over a hostlist of nodes, or this node."""

    policy: str
    nodes: str | None = None
    local: bool = False
    inventory: Path | None = None
    job: str | None = None
    profile: str | None = None  # --local only
    node: str | None = None  # --local only
    out: Path = Path("runs")
    act: bool = False
    reports: bool = True
    override_repo: str | None = None
    slurm: str | None = None  # --local only: "health-check" or "prolog" (stetho.gate.slurm_hooks)
    #: node_exporter textfile folder: stetho-gate.prom, with stetho_gate_blocked (None: none)
    textfile_dir: Path | None = None
    #: write the gate's run folder OUT/gate-<id>/ (results.json, index.html, reports)
    folder: bool = True
    #: topology.conf FILE or `slurm`: leaves with several failing nodes become switch incidents
    topology: str | None = None


@record(frozen=False)
class GateOutcome:
    policy: GatePolicy
    decision: Decision
    names: list[str]
    actions: list[Action] = field(default_factory=list)
    reports: list[tuple[Diagnosis, Path]] = field(default_factory=list)
    circuit: Trip | None = None  # the breaker opened: `--act` drained nothing more
    hook_exit: int | None = None  # a prolog's own exit code (slurm_hooks.prolog_on_own_node)
    #: a dry run's "would drain 9, breaker allows 2" (the budget asked read-only), or None
    breaker_preview: str | None = None
    #: the actions were carried out (`--act`, or a Slurm hook on its own node), not previewed
    acted: bool = False
    gate_id: str = ""
    #: --local: the node's summary from its check (profile, versions...), for the spool
    summaries: dict[str, NodeSummary] = field(default_factory=dict)
    #: OUT/gate-<id>/: results.json, index.html and the reports (None: not written)
    run_dir: Path | None = None
    textfile: Path | None = None
    #: an output that could not be written: the verdict stands, the CLI warns
    output_problems: list[str] = field(default_factory=list)
    #: blocked node -> "draining gpu042 affects job 1234 (alice, gpu, 64 nodes)" (squeue)
    blast: dict[str, str] = field(default_factory=dict)
    incidents: list[SwitchIncident] = field(default_factory=list)
    #: the shadow policies' verdicts (never acted on: stetho.gate.shadow), None without any
    shadow: ShadowOutcome | None = None
    #: id(result) -> (result, its JSON as history stored it), for results read unchanged
    #: (stetho.history.blob): results.json copies that text instead of encoding the result
    stored: dict[int, tuple[Result, bytes]] = field(default_factory=dict)

    def action_lines(self) -> list[str]:
        """One line per scheduler action, saying whether it happened or was only a dry run,
        then the blast radius of each drain."""
        label = "SCHEDULER" if self.acted else "DRY RUN"
        return ([f"{label} {a.kind} {a.node}: {a.message}" for a in self.actions]
                + [f"BLAST {self.blast[n]}" for n in sorted(self.blast)])

    @property
    def exit_code(self) -> int:
        """The decision's code; 3 when the circuit breaker stopped `--act` from draining; a
        prolog's own code (1 only when its node is out of service)."""
        if self.hook_exit is not None:
            return self.hook_exit
        return 3 if self.circuit is not None else self.decision.exit_code

    def lines(self) -> list[str]:
        """One line per blocking result, override and ignored override; the nodes of a
        switch incident as its one line."""
        folded = {n for i in self.incidents for n in i.failing}
        checks: dict[str, set[str]] = {}
        for r in self.decision.blocking:
            checks.setdefault(r.node, set()).add(r.check)
        return [i.line(checks) for i in self.incidents] + [
            ln for ln in lines(self.decision)
            if not (ln.startswith("BLOCK ") and ln[6:].split(" ")[0].split("/")[0] in folded)]

    def summary(self) -> str:
        line = summary_line(self.decision, self.names)
        if self.breaker_preview:
            line = f"{line}; {self.breaker_preview}"
        line = f"{line}; {self.circuit.message()}" if self.circuit else line
        if self.hook_exit == 0 and self.decision.blocking:
            line += "; prolog exits 0: the node was not taken out of service, the job runs here"
        return line

    def to_json(self, job: str | None = None, encoded: bool = False) -> dict[str, object]:
        """The gate's results document; `encoded`: its results as JSON texts (each read
        unchanged from history is the text history stored), for stetho.fleet.run_folder."""
        from stetho.sinks import json_out

        texts = None
        if encoded:
            from stetho.fleet.run_folder import Encoded, encoder

            one, stored = encoder(), self.stored
            texts = Encoded([s[1] if (s := stored.get(id(r))) is not None and s[0] is r
                             else one(r.to_json()).encode() for r in self.decision.results])
        doc = json_out.document(
            self.decision.results, encoded=texts, policy=self.policy.name, job=job,
            nodes=self.names,
            blocked=self.decision.blocked_nodes, sources=self.decision.sources,
            scheduler=[a.to_json() for a in self.actions],
            ignored_overrides=[(str(what) if isinstance(what, Path) else what.id, why)
                               for what, why in self.decision.ignored_overrides])
        doc["circuit"] = self.circuit.to_json() if self.circuit else None
        doc["breaker_preview"] = self.breaker_preview
        doc["could_not_evaluate"] = self.decision.unevaluated
        doc["profiles"] = self.decision.profiles
        doc["history_unavailable"] = self.decision.history_unavailable
        doc["blast_radius"] = self.blast
        doc["switch_incidents"] = [i.to_json() for i in self.incidents]
        doc["exit_code"] = self.exit_code
        doc["shadow"] = self.shadow.to_json() if self.shadow else None
        return doc
