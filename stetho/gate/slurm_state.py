"""What `scontrol show node` says about nodes, as data: each node's state, its DRAIN flag and
its reason with the time Slurm stamped on it (stetho.gate.slurm asks, drains and resumes).
Apart from the commands so that a reader of Slurm's state needs no subprocess plumbing."""

from __future__ import annotations

import re
from dataclasses import field
from datetime import datetime

from stetho.core.record import record

#: Every reason stetho writes starts with it; only such drains are stetho's to resume.
REASON_PREFIX = "stetho:"


@record
class NodeInfo:
    """One node as `scontrol show node -o` reports it. `reason` is "" when there is none;
    `drained` is true for any state carrying the DRAIN flag (IDLE+DRAIN, DOWN+DRAIN, ...)."""

    name: str
    state: str
    reason: str
    drained: bool
    #: when the reason was set (Slurm's ` [user@time]` stamp); not part of the node's identity
    reason_time: float | None = field(default=None, compare=False)

    @property
    def drained_by_stetho(self) -> bool:
        """Drained, and the reason is one stetho wrote: the only drains stetho may undo."""
        return self.drained and self.reason.startswith(REASON_PREFIX)


# -- parsing `scontrol show node -o` --------------------------------------------------------------

#: A key starts a token: `NodeName=`, `CPUAlloc=`, `MCS_label=`; never `cpu=8` inside CfgTRES.
_KEY = re.compile(r"(?:^|(?<=\s))([A-Z][A-Za-z0-9_]*)=")
#: What Slurm appends to the first line of a reason: ` [user@time]`.
_STAMP = re.compile(r"\s\[[^\s\[\]@]+@[^\s\[\]]+\](?=\s|$)")
_REASON = re.compile(r"(?:^|(?<=\s))Reason=")


def _pairs(text: str) -> tuple[str, dict[str, str]]:
    """Key=Value pairs; a value runs to the next key (OS= holds spaces). Text before the first
    key is returned apart."""
    keys = list(_KEY.finditer(text))
    lead = text[: keys[0].start()] if keys else text
    out: dict[str, str] = {}
    for i, m in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(text)
        out.setdefault(m.group(1), text[m.end():end].strip())
    return lead.strip(), out


def _parse_record(line: str) -> dict[str, str]:
    """One node's line. `Reason=` is free text: it runs to Slurm's ` [user@time]` stamp, and
    may even contain `Key=Value`; what follows the stamp is either more keys or further lines
    of a multi-line reason (scontrol prints them after the stamp, padded with spaces)."""
    m = _REASON.search(line)
    if not m:
        return _pairs(line)[1]
    fields = _pairs(line[: m.start()])[1]
    rest = line[m.end():]
    stamp = _STAMP.search(rest)
    tail: dict[str, str] = {}
    if stamp is None:  # no stamp: Slurm prints the reason last
        reason = rest.strip()
    else:
        more, tail = _pairs(rest[stamp.end():])
        reason = rest[: stamp.start()].strip()
        fields["ReasonTime"] = stamp.group(0).strip()[1:-1].split("@", 1)[1]
        if more:
            reason = f"{reason}\n{more}"
    fields.update({k: v for k, v in tail.items() if k not in fields})
    fields["Reason"] = reason
    return fields


def _is_drained(state: str) -> bool:
    """DRAIN is a flag on the base state (IDLE+DRAIN, MIXED+DRAIN, DOWN+DRAIN); sinfo-style
    names (DRAINED, DRAINING) and suffixes (`*`, `~`) are accepted too."""
    return any(p.strip().rstrip("*~#!%$@^-").startswith("DRAIN") for p in state.split("+"))


def parse_show_node(text: str) -> dict[str, NodeInfo]:
    """`scontrol show node -o [NAMES]` output -> node name -> NodeInfo.

    One line per node. Lines that are not node records ("Node gpu09 not found") are ignored;
    the multi-line format (without -o) is accepted too, by joining each record's lines."""
    records: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("NodeName="):
            records.append(raw)
        elif records and raw[:1].isspace() and raw.strip():
            records[-1] += " " + raw
        elif not raw.strip() and records:
            records.append("")  # a blank line ends the record (multi-line format)
    out: dict[str, NodeInfo] = {}
    for rec in records:
        if not rec:
            continue
        fields = _parse_record(rec)
        name = fields.get("NodeName", "").split()[0] if fields.get("NodeName") else ""
        if not name:
            continue
        state = fields.get("State", "").split()[0] if fields.get("State") else ""
        out[name] = NodeInfo(name, state, fields.get("Reason", ""), _is_drained(state),
                             _stamp_time(fields.get("ReasonTime", "")))
    return out


def _stamp_time(text: str) -> float | None:
    """`2026-12-03T12:48:21` (SLURM_TIME_FORMAT=standard, the controller's local time)."""
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


_NOT_FOUND = re.compile(r"^Node \S+ not found$")
