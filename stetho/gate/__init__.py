"""Stage 8: go or no-go. Policies say what blocks, the decision applies them (with overrides),
scheduler actions drain or resume nodes, and `run` does all of it as one library call."""

from stetho.gate.evaluate import GateOutcome, GateRequest, run

__all__ = ["GateOutcome", "GateRequest", "run"]
