"""Root-cause rules as data: rules/<cause>.yml, one rule per cause.

A rule names the signals that support it (with weights), the ones it needs at least one of,
the ones that falsify it (with why), the runbook action, the ticket text, prevention notes,
and the metric whose trend the report charts. Sites add rules in $STETHO_RULES folders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stetho.core import yamlconf
from stetho.core.resources import shipped
from stetho.errors import ConfigError


@dataclass(frozen=True)
class Support:
    signal: str
    weight: float


@dataclass(frozen=True)
class Falsifier:
    signal: str
    why: str


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

    @property
    def total_weight(self) -> float:
        return sum(s.weight for s in self.supports)


_KEYS = {"cause", "title", "description", "supports", "requires_any", "falsified_by",
         "action", "ticket", "prevention", "reproduce_extra", "trend"}


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
        s.check_unknown({"signal", "weight"})
        supports.append(Support(sig, w))
    if not supports:
        top.fail("a rule needs at least one supporting signal", "supports")
    falsifiers = []
    for i, item in enumerate(top.get("falsified_by", list, [])):
        s = yamlconf.Section(doc, ("falsified_by", i), item)
        sig = s.require("signal", str)
        if sig not in known_signals:
            s.fail(f"unknown signal {sig!r}", "signal")
        falsifiers.append(Falsifier(sig, s.require("why", str)))
    requires = top.str_list("requires_any")
    for r in requires:
        if r not in {s.signal for s in supports}:
            top.fail(f"requires_any names {r!r}, which is not among the supporting signals",
                     "requires_any")
    trend = top.section("trend")
    cause = top.require("cause", str)
    if path.stem != cause:
        top.fail(f"cause {cause!r} must match the file name {path.name}", "cause")
    return Rule(cause=cause, title=top.require("title", str),
                description=top.get("description", str, ""), supports=tuple(supports),
                requires_any=requires, falsified_by=tuple(falsifiers),
                action=top.require("action", str), ticket=top.require("ticket", str),
                prevention=top.str_list("prevention"),
                reproduce_extra=top.str_list("reproduce_extra"),
                trend=(trend.require("check", str), trend.require("metric", str))
                if trend.data else None, source=str(path))


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
