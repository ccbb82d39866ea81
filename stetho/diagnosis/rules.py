"""Root-cause rules as data: rules/<cause>.yml, one rule per cause.

A rule names its severity (low, medium, high, critical) and kind (hardware, degradation,
configuration, software), the signals that support it (with weights), the ones it needs at
least one of (a signal marked `decisive` is conclusive on its own), and its falsifiers: a
signal whose presence (or, with `when: absent`, absence) rules it out, with the reason. Its
text (summary, steps, ticket, reproduce commands) may name the implicated part with
{placeholders} filled from the evidence (`fill`); a text whose part is unknown says so in
words, and a command whose part is unknown is left out, so no placeholder reaches a report.
Its `remedy` says what stetho may do by itself (stetho.diagnosis.remedies). Sites add rules
in $STETHO_RULES folders.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from stetho.core import yamlconf
from stetho.core.resources import shipped
from stetho.diagnosis.model import KINDS, SEVERITIES
from stetho.diagnosis.remedies import Remedy
from stetho.diagnosis.remedies import parse as parse_remedy
from stetho.errors import ConfigError

#: Placeholders rule text may use, and the words that stand in when the part is unknown.
PLACEHOLDERS = {
    "node": "this node", "gpu": "the GPU named in the evidence",
    "pci": "the PCI address in the evidence", "serial": "(serial not recorded)",
    "slot": "the slot of the GPU named in the evidence", "device": "the HCA named in the evidence",
    "port": "1", "disk": "the disk named in the evidence", "cpus": "the CPUs named above",
    "component": "the component named above", "process": "the process named above",
    "subject": "the part named in the evidence", "value": "the value measured",
    "expected": "the expected value",
    "carrier": "the riser card, slot or baseboard holding the GPU",
}


@dataclass(frozen=True)
class Support:
    signal: str
    weight: float
    #: decisive on its own (a port at half its rate, a fabric state not Completed, a fatal
    #: Xid): seen, it gives high confidence whatever share of the rule's weight it is
    decisive: bool = False


@dataclass(frozen=True)
class Falsifier:
    signal: str
    why: str
    when: str = "present"  # "present": the signal seen rules it out; "absent": not seen


@dataclass(frozen=True)
class Rule:
    cause: str
    title: str
    description: str
    supports: tuple[Support, ...]
    requires_any: tuple[str, ...]
    falsified_by: tuple[Falsifier, ...]
    action: str
    ticket: str
    prevention: tuple[str, ...]
    reproduce_extra: tuple[str, ...]
    trend: tuple[str, str] | None  # (check, metric)
    source: str
    severity: str = "medium"
    kind: str = "hardware"
    summary: str = ""
    steps: tuple[str, ...] = ()
    #: `escalate: {after: N, steps: [...]}`: after N earlier new events of this cause on the
    #: node within the repeat window (STETHO_REPEAT_LIMIT's days), a watch cause is drained and
    #: its part replaced, with these steps (a pending remap back after the reset that applied
    #: it is failing memory); None: the site's repeat limit alone
    escalate_after: int | None = None
    escalate_steps: tuple[str, ...] = ()
    #: what stetho may do by itself (stetho.diagnosis.remedies); () = nothing automatic
    remedy: tuple[Remedy, ...] = ()

    @property
    def total_weight(self) -> float:
        return sum(s.weight for s in self.supports)

    @property
    def band(self) -> int:
        return SEVERITIES.index(self.severity)


_KEYS = {"cause", "title", "description", "supports", "requires_any", "falsified_by",
         "action", "ticket", "prevention", "reproduce_extra", "trend", "severity", "kind",
         "summary", "steps", "escalate", "remedy"}


def folders() -> list[Path]:
    from stetho import config

    return [shipped("rules"), *config.active().rules]


def load_all() -> list[Rule]:
    from stetho.diagnosis.signals import SIGNALS

    rules: dict[str, Rule] = {}
    for folder in folders():
        for path in sorted(folder.glob("*.y*ml")):
            rule = load(path, set(SIGNALS))
            rules[rule.cause] = rule  # a site's rule replaces a shipped one of the same cause
    return list(rules.values())


def causes() -> list[str]:
    """The catalogue's cause ids (shipped rules and the site's STETHO_RULES), sorted."""
    return sorted(r.cause for r in load_all())


def _placeholders(text: str) -> set[str]:
    try:
        return {name.split(".")[0] for _, name, _, _ in string.Formatter().parse(text) if name}
    except ValueError:
        return {"<malformed braces>"}


def load(path: Path, known_signals: set[str]) -> Rule:
    doc = yamlconf.load(path)
    top = yamlconf.Section(doc)
    top.check_unknown(_KEYS)
    supports = []
    for i, item in enumerate(top.get("supports", list, [])):
        s = yamlconf.Section(doc, ("supports", i), item)
        sig = s.require("signal", str)
        if sig not in known_signals:
            s.fail(f"unknown signal {sig!r} (known: {', '.join(sorted(known_signals))})",
                   "signal")
        w = s.require("weight", float)
        if w <= 0:
            s.fail("weight must be positive", "weight")
        s.check_unknown({"signal", "weight", "decisive"})
        supports.append(Support(sig, w, s.get("decisive", bool, False)))
    if not supports:
        top.fail("a rule needs at least one supporting signal", "supports")
    falsifiers = []
    for i, item in enumerate(top.get("falsified_by", list, [])):
        s = yamlconf.Section(doc, ("falsified_by", i), item)
        s.check_unknown({"signal", "why", "when"})
        sig = s.require("signal", str)
        if sig not in known_signals:
            s.fail(f"unknown signal {sig!r}", "signal")
        when = s.get("when", str, "present")
        if when not in ("present", "absent"):
            s.fail(f"when must be present or absent, not {when!r}", "when")
        falsifiers.append(Falsifier(sig, s.require("why", str), when))
    requires = top.str_list("requires_any")
    for r in requires:
        if r not in {s.signal for s in supports}:
            top.fail(f"requires_any names {r!r}, which is not among the supporting signals",
                     "requires_any")
    severity = top.get("severity", str, "medium")
    if severity not in SEVERITIES:
        top.fail(f"severity must be one of {', '.join(SEVERITIES)}", "severity")
    kind = top.get("kind", str, "hardware")
    if kind not in KINDS:
        top.fail(f"kind must be one of {', '.join(KINDS)}", "kind")
    trend = top.section("trend")
    esc = top.section("escalate")
    after = None
    if esc.data:
        esc.check_unknown({"after", "steps"})
        after = esc.require("after", int)
        if after < 1:
            esc.fail("after must be at least 1 (earlier new events)", "after")
        if not esc.str_list("steps"):
            esc.fail("an escalation needs its steps (what to do instead of watching)", "steps")
    cause = top.require("cause", str)
    if path.stem != cause:
        top.fail(f"cause {cause!r} must match the file name {path.name}", "cause")
    rule = Rule(cause=cause, title=top.require("title", str),
                description=top.get("description", str, ""), supports=tuple(supports),
                requires_any=requires, falsified_by=tuple(falsifiers),
                action=top.require("action", str), ticket=top.require("ticket", str),
                prevention=top.str_list("prevention"),
                reproduce_extra=top.str_list("reproduce_extra"),
                trend=(trend.require("check", str), trend.require("metric", str))
                if trend.data else None, source=str(path), severity=severity, kind=kind,
                summary=top.get("summary", str, ""), steps=top.str_list("steps"),
                escalate_after=after, escalate_steps=esc.str_list("steps") if esc.data else (),
                remedy=parse_remedy(doc, top, known_signals))
    for key, texts in (("action", [rule.action]), ("ticket", [rule.ticket]),
                       ("summary", [rule.summary]), ("steps", list(rule.steps)),
                       ("reproduce_extra", list(rule.reproduce_extra)),
                       ("escalate", list(rule.escalate_steps))):
        for text in texts:
            unknown = _placeholders(text) - set(PLACEHOLDERS)
            if unknown:
                top.fail(f"unknown placeholder {sorted(unknown)[0]!r} (known: "
                         f"{', '.join(sorted(PLACEHOLDERS))})", key)
    return rule


class _Words(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return PLACEHOLDERS.get(key, key)


def fill(text: str, where: dict[str, str]) -> str:
    """Rule text with its placeholders filled from the evidence, or the words for an unknown
    part (never a literal '{gpu}')."""
    return text.format_map(_Words(where)) if "{" in text else text


def fill_command(text: str, where: dict[str, str]) -> str | None:
    """A command with every placeholder filled from the evidence; None when a part it names
    is unknown (a command must target the part, or not be shown)."""
    if not _placeholders(text) <= set(where):
        return None
    return text.format_map(where) if "{" in text else text


def check_folder(path: Path) -> list[str]:
    """Every rule file in a folder, loaded: the errors, for `stetho rules check`."""
    from stetho.diagnosis.signals import SIGNALS

    errors = []
    for p in sorted(path.glob("*.y*ml")):
        try:
            load(p, set(SIGNALS))
        except ConfigError as exc:
            errors.append(str(exc))
    return errors
