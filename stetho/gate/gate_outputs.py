"""What a gate leaves behind besides its verdict: the run folder (results.json, index.html
linking the reports) and the node_exporter textfile, with the shadow policies' series. Apart
from stetho.gate.evaluate, which decides; neither output changes the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.gate.outcome import GateOutcome, GateRequest


def write(outcome: GateOutcome, req: GateRequest, started: float, took: float) -> None:
    """The gate's run folder (results.json and index.html linking the reports: the gate's own
    page, stetho.sinks.gatepage), on every run, and the node_exporter textfile. Neither
    changes the verdict: a folder or file that cannot be written is named in
    `output_problems` (a prolog must not fail on a full disk)."""
    from datetime import datetime, timezone

    if req.folder:
        from stetho.fleet import run_folder
        from stetho.sinks import gatepage

        folder = req.out / f"gate-{outcome.gate_id}"
        try:
            run_folder.write_json(folder / "results.json", outcome.to_json(req.job, encoded=True))
            gatepage.write(folder, outcome.decision.results,
                           title=f"stetho gate {outcome.policy.name} {outcome.gate_id}",
                           reports={d.node: p for d, p in outcome.reports},
                           generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
            outcome.run_dir = folder
        except OSError as exc:
            outcome.output_problems.append(f"run folder {folder} not written: {exc}")
    if req.textfile_dir is not None:
        from stetho.check import outputs
        from stetho.errors import ConfigError

        blocked = set(outcome.decision.blocked_nodes)
        gate = {outcome.policy.name: {n: n in blocked for n in outcome.names}}
        sh = outcome.shadow
        for name in sh.policies if sh is not None else ():
            shadow_blocked = set(sh.blocked(name)) if sh is not None else set()
            gate[name] = {n: n in shadow_blocked for n in outcome.names}
        try:
            outcome.textfile = outputs.write_textfile(
                req.textfile_dir, "gate", outcome.decision.results, run_id=outcome.gate_id,
                started=datetime.fromtimestamp(started, timezone.utc), duration_s=took,
                gate=gate, gate_modes={n: "shadow" for n in sh.policies} if sh else None)
        except ConfigError as exc:
            outcome.output_problems.append(str(exc))
