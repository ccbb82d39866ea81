"""What stetho did about a fault by itself, kept in the history database (`remedies` table):
every GPU reset, reboot and ticket with its time, node, part, cause and outcome, so that an
action that did not help (the same cause on the same part seen again after it) escalates
instead of repeating (stetho.remedy.plan)."""

from __future__ import annotations

from dataclasses import dataclass

from stetho.history.store import History

#: outcome words: the action ran and succeeded / ran and failed / was not allowed / could not
#: run here (recorded as the plan) / nothing to do
OUTCOMES = ("done", "failed", "refused", "planned", "skipped")


@dataclass(frozen=True)
class Record:
    time: float
    node: str
    part: str
    cause: str
    action: str
    outcome: str
    detail: str = ""
    run: str = ""

    def to_json(self) -> dict[str, object]:
        return {"time": self.time, "node": self.node, "part": self.part, "cause": self.cause,
                "action": self.action, "outcome": self.outcome, "detail": self.detail,
                "run": self.run}


def record(h: History, rec: Record) -> None:
    """Append one action (one transaction: a killed process leaves it whole or absent)."""
    if rec.outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {rec.outcome!r}")
    with h.transaction():
        h.conn.execute(
            "INSERT INTO remedies (time, node, part, cause, action, outcome, detail, run) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (rec.time, rec.node, rec.part, rec.cause, rec.action, rec.outcome, rec.detail,
             rec.run))


def done(h: History, node: str, cause: str, part: str, since: float) -> list[Record]:
    """The actions that ran on this fault (same node, cause and part) since `since`, oldest
    first: the ones the fault has outlived if it is seen now."""
    rows = h.conn.execute(
        "SELECT time, node, part, cause, action, outcome, detail, run FROM remedies "
        "WHERE node = ? AND cause = ? AND part = ? AND outcome = 'done' AND time >= ? "
        "ORDER BY time, id", (node, cause, part, since)).fetchall()
    return [Record(*r) for r in rows]


def recent(h: History, node: str | None = None, limit: int = 50) -> list[Record]:
    """The newest actions, newest first (one node's, or every node's)."""
    where, args = ("WHERE node = ?", (node,)) if node else ("", ())
    rows = h.conn.execute(
        "SELECT time, node, part, cause, action, outcome, detail, run FROM remedies "
        f"{where} ORDER BY time DESC, id DESC LIMIT ?", (*args, limit)).fetchall()
    return [Record(*r) for r in rows]
