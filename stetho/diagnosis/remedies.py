"""What stetho may do about a cause by itself, declared in its rule as data (`remedy:`).

A rule lists options, tried in order; the first whose condition holds is the remedy:

    remedy:
      - {action: gpu-reset, when: {xids: [63, 94]}}   # contained memory errors only
      - {action: ticket}                              # anything else: a person

Actions: `gpu-reset` (`nvidia-smi -r -i N` on an idle GPU), `reboot` (`scontrol reboot ASAP
nextstate=RESUME`, counted against the drain budget), `ticket` (JSON to the RMA/DC webhook),
`none` (nothing automatic: a configuration or software cause a person fixes). Conditions, all
of which must hold:

- `signals`: every piece of the cause's evidence is one of these signals;
- `xids`: every Xid the evidence names is one of these codes;
- `value`: a regular expression one evidence value matches (the driver's "Reboot").

`escalate` is the ladder taken when the same fault (same cause and part) is seen again after
the action ran: by default gpu-reset and reboot escalate to a ticket, a ticket to nothing more
(it is not sent twice). The planner is stetho.remedy.plan; this module only reads and chooses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stetho.core import yamlconf
from stetho.diagnosis.model import Hypothesis

ACTIONS = ("gpu-reset", "reboot", "ticket", "none")
#: The ladder an option escalates along when none is declared.
DEFAULT_ESCALATION: dict[str, tuple[str, ...]] = {
    "gpu-reset": ("ticket",), "reboot": ("ticket",), "ticket": (), "none": ()}
_XID = re.compile(r"(?i)^(?:xid\s*)?(\d+)$")


@dataclass(frozen=True)
class Remedy:
    """One option of a rule's `remedy` list."""

    action: str
    signals: tuple[str, ...] = ()
    xids: tuple[int, ...] = ()
    value: str = ""
    escalate: tuple[str, ...] = ()

    def applies(self, h: Hypothesis) -> bool:
        """The condition holds for this hypothesis' evidence (no condition: always)."""
        ev = [e for e in h.evidence if e.status in ("fail", "warn")] or list(h.evidence)
        if self.signals and not all(e.signal in self.signals for e in ev):
            return False
        if self.xids:
            codes = [xid_code(e.value) for e in ev if e.signal.startswith("xid")]
            if not codes or any(c not in self.xids for c in codes):
                return False
        return not self.value or any(re.search(self.value, e.value or "") for e in ev)


def xid_code(value: str | None) -> int | None:
    """'Xid 94' or '94' -> 94; None otherwise."""
    m = _XID.match((value or "").strip())
    return int(m.group(1)) if m else None


def choose(options: tuple[Remedy, ...], h: Hypothesis) -> Remedy | None:
    """The first option whose condition holds; None when the rule declares none that does."""
    return next((o for o in options if o.applies(h)), None)


def parse(doc: yamlconf.Doc, top: yamlconf.Section, known_signals: set[str]
          ) -> tuple[Remedy, ...]:
    """A rule's `remedy:` (a mapping or a list of them), validated with file:line errors."""
    raw = top.get("remedy", (list, dict), None)
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, dict) else raw
    out = []
    for i, item in enumerate(items):
        path: tuple[str | int, ...] = ("remedy",) if isinstance(raw, dict) else ("remedy", i)
        s = yamlconf.Section(doc, path, item)
        s.check_unknown({"action", "when", "escalate"})
        action = s.require("action", str)
        if action not in ACTIONS:
            s.fail(f"action must be one of {', '.join(ACTIONS)}, not {action!r}", "action")
        when = s.section("when")
        when.check_unknown({"signals", "xids", "value"})
        signals = when.str_list("signals")
        for sig in signals:
            if sig not in known_signals:
                when.fail(f"unknown signal {sig!r}", "signals")
        xids = tuple(when.get("xids", list, []))
        if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in xids):
            when.fail("xids must be a list of positive Xid codes", "xids")
        value = when.get("value", str, "")
        try:
            re.compile(value)
        except re.error as exc:
            when.fail(f"value is not a regular expression: {exc}", "value")
        ladder = s.str_list("escalate") if s.has("escalate") else DEFAULT_ESCALATION[action]
        for step in ladder:
            if step not in ACTIONS or step in ("none", action):
                s.fail(f"escalate steps must be other actions among {', '.join(ACTIONS[:3])}"
                       f", not {step!r}", "escalate")
        out.append(Remedy(action, signals, xids, value, tuple(ladder)))
    if any(not (o.signals or o.xids or o.value) for o in out[:-1]):
        top.fail("only the last remedy option may have no `when` (the ones after it could "
                 "never be chosen)", "remedy")
    return tuple(out)
