"""Gate policies (gates/*.yml): which checks count, which statuses block, thresholds that tighten
the profile's, how fresh history must be, and who may approve overrides.

A policy is data a release manager or SRE lead reviews; the gate (stetho.gate.decision) only
applies it. A malformed policy raises ConfigError naming the file and line.
"""

from __future__ import annotations

import os
import re
from dataclasses import field
from pathlib import Path

from stetho.core import yamlconf
from stetho.core.record import record
from stetho.core.resources import shipped
from stetho.errors import ConfigError
from stetho.gate.breaker import Circuit
from stetho.gate.catalogue import PSEUDO_CHECKS
from stetho.gate.override_policy import PRINCIPAL_RE, OverridePolicy
from stetho.results import STATUSES


@record
class Tighten:
    """A rule that can turn a result into a fail: value over `max`, under `min`, or more than
    `max_drop_pct` under the result's numeric reference (its baseline)."""

    check: str
    max: float | None = None
    min: float | None = None
    max_drop_pct: float | None = None


@record
class GatePolicy:
    name: str
    source: str
    description: str
    checks: tuple[str, ...]  # empty: every check
    local_checks: tuple[str, ...]  # the quick ones for `stetho gate --local`
    block_on: tuple[str, ...]
    tighten: tuple[Tighten, ...]
    freshness_s: float  # results younger than this are taken from history; 0: always live
    overrides: OverridePolicy
    drain: bool = True
    exclude: tuple[str, ...] = field(default_factory=tuple)
    circuit: Circuit = field(default_factory=Circuit)
    #: "enforce" (its verdict is the gate's) or "shadow" (evaluated beside the enforcing
    #: policies that name it, recorded, never acted on: stetho.gate.shadow)
    mode: str = "enforce"
    #: the shadow policies this one has evaluated beside it on every gate run
    shadow: tuple[str, ...] = field(default_factory=tuple)

    def counts(self, check: str) -> bool:
        """Whether a check's results decide: exactly the listed checks (all when none are
        listed; fleet and drift checks too only when listed). A node that could not be
        checked at all (`gate`, `sweep` errors) always counts."""
        if check in self.exclude:
            return False
        return not self.checks or check in self.checks or check in PSEUDO_CHECKS


def search_path() -> list[Path]:
    from stetho import config

    dirs = list(config.active().gates)
    return dirs + [Path.cwd() / "gates", shipped("gates")]


def find(name: str) -> Path:
    return yamlconf.find_named(name, search_path(), "gate policy")


def longest_freshness() -> float:
    """The longest freshness of the policies on the search path: evidence older than that is
    fresh for no policy, so history does not take it as new. A policy that does not load is
    left to the gate that uses it to report."""
    longest = 0.0
    for d in search_path():
        for path in sorted(d.glob("*.yml")) if d.is_dir() else []:
            try:
                longest = max(longest, load(str(path)).freshness_s)
            except ConfigError:
                continue
    return longest


#: A policy name: it becomes Prometheus label values, rule group names and file names.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: What a description must not hold: template delimiters and control characters (a newline
#: from a folded YAML block is kept).
_TEMPLATE = re.compile(r"\{\{|\}\}|[\x00-\x09\x0b-\x1f\x7f]")

_KEYS = {"policy", "description", "checks", "local_checks", "exclude", "block_on", "tighten",
         "freshness", "overrides", "scheduler", "mode", "shadow",
         "canary", "stages"}  # the release gate's own (stetho.gate.release.settings)
MODES = ("enforce", "shadow")


def load(name: str) -> GatePolicy:
    from stetho.history.store import parse_since

    path = find(name)
    doc = yamlconf.load(path)
    top = yamlconf.Section(doc)
    top.check_unknown(_KEYS)
    if top.has("canary") or top.has("stages"):
        from stetho.gate.release import settings as release_settings

        release_settings.load(path)  # a bad wave or canary rule is exit 2 at file:line now
    pname = top.require("policy", str)
    if not _NAME.fullmatch(pname):
        top.fail(f"policy name {pname[:80]!r} must be letters, digits, '.', '_' and '-' (at "
                 "most 64, starting with a letter or digit): it names alert rules, labels "
                 "and files", "policy")
    description = top.get("description", str, "")
    if _TEMPLATE.search(description):
        top.fail("description must not hold '{{', '}}' or control characters (it becomes "
                 "alert text, where they would be template syntax or break the rules file)",
                 "description")
    block_on = top.str_list("block_on", ("fail",))
    for status in block_on:
        if status not in STATUSES:
            top.fail(f"block_on: {status!r} is not a status ({', '.join(STATUSES)})",
                     "block_on")
    tight = []
    t = top.section("tighten")
    for check in t.data:
        rule = t.section(check)
        tight.append(_tighten_rule(str(check), rule))
    fresh = top.get("freshness", (str, int), "0s")
    try:
        freshness = parse_since(str(fresh)) if str(fresh) not in ("0", "0s") else 0.0
    except ConfigError as exc:
        top.fail(str(exc), "freshness")
    overrides = _overrides(top.section("overrides"), pname, path)
    sched = top.section("scheduler")
    drain = sched.get("drain", bool, True)
    sched.check_unknown({"drain", "circuit"})
    circuit = _circuit(sched.section("circuit"), path)
    named = {key: top.str_list(key) for key in ("checks", "local_checks", "exclude")}
    _validate_names(top, named, [t.check for t in tight])
    mode, shadow = _mode(top)
    return GatePolicy(name=pname, source=str(path), description=description,
                      checks=named["checks"], local_checks=named["local_checks"],
                      block_on=block_on, tighten=tuple(tight), freshness_s=freshness,
                      overrides=overrides, drain=drain, exclude=named["exclude"],
                      circuit=circuit, mode=mode, shadow=shadow)


def _mode(top: yamlconf.Section) -> tuple[str, tuple[str, ...]]:
    """`mode: enforce|shadow` (default enforce) and `shadow: [policy names]`. Only an
    enforcing policy names shadows: the candidates run where its gate runs, on its results,
    so a reviewer of the enforcing policy sees what is evaluated beside it. A typo in either
    is exit 2 at file:line, never a candidate that silently enforces."""
    mode = top.get("mode", str, "enforce")
    if mode not in MODES:
        top.fail(f"mode: {mode[:40]!r} is not one of {', '.join(MODES)} (shadow: evaluated "
                 "and recorded, never acted on)", "mode")
    shadow = top.str_list("shadow")
    if shadow and mode == "shadow":
        top.fail("a shadow policy cannot name shadows of its own (shadow:): only an enforcing "
                 "policy runs candidates beside it", "shadow")
    for name in shadow:
        if not _NAME.fullmatch(name):
            top.fail(f"shadow: {name[:80]!r} is not a policy name", "shadow")
    return mode, shadow


def _tighten_rule(check: str, rule: yamlconf.Section) -> Tighten:
    """`max`/`min` bound the value a check states, in its own unit (a temperature, a
    bandwidth, a count): a finite number, never negative, `min` not above `max`; otherwise a
    rule that fails every node or none is a typo at file:line, not a policy."""
    import math

    rule.check_unknown({"max", "min", "max_drop_pct"})
    bounds = {}
    for key in ("max", "min"):
        value = rule.get(key, float)
        if value is not None and not math.isfinite(value):
            rule.fail(f"tighten.{check}.{key} must be a finite number, not {value:g}", key)
        bounds[key] = rule.get(key, float, within=(0, None))
    hi, lo = bounds["max"], bounds["min"]
    if hi is not None and lo is not None and lo > hi:
        rule.fail(f"tighten.{check}: min {lo:g} is above max {hi:g}: no value passes", "min")
    return Tighten(check, max=hi, min=lo,
                   max_drop_pct=rule.get("max_drop_pct", float, within=(0, 100)))


def _circuit(c: yamlconf.Section, path: Path) -> Circuit:
    """`scheduler: {circuit: {max_pct: 10, min_nodes: 2, window: 1h, ledger: PATH}}` (the
    first three are the defaults): drain at most max(min_nodes, max_pct % of the nodes in
    scope) per window, counted in the drain ledger at PATH (relative to the policy file)."""
    from stetho.history.store import parse_since

    c.check_unknown({"max_pct", "min_nodes", "window", "ledger"})
    default = Circuit()
    pct = c.get("max_pct", (int, float), default.max_pct)
    if not 0 < pct <= 100:
        c.fail(f"max_pct must be more than 0 and at most 100, not {pct}", "max_pct")
    low = c.get("min_nodes", int, default.min_nodes)
    if low < 0:
        c.fail(f"min_nodes must be 0 or more, not {low}", "min_nodes")
    window = c.get("window", (str, int), "1h")
    try:
        window_s = parse_since(str(window))
    except ConfigError as exc:
        c.fail(str(exc), "window")
    if window_s <= 0:
        c.fail("window must be longer than 0", "window")
    ledger = c.get("ledger", str)
    where = (Path(os.path.normpath((path.parent / Path(ledger).expanduser()).absolute()))
             if ledger else None)
    return Circuit(float(pct), low, window_s, where)


def _validate_names(top: yamlconf.Section, named: dict[str, tuple[str, ...]],
                    tightened: list[str]) -> None:
    """Every check a policy names is in the catalogue (local ones are node checks, which
    `gate --local` runs): a typo is exit 2 at file:line with the nearest names, never a check
    that silently stops gating."""
    from stetho.gate import catalogue

    known = catalogue.load()
    for key, names in named.items():
        for i, name in enumerate(names):
            why = known.unknown(name, node_only=key == "local_checks")
            if why:
                raise ConfigError(f"{top.doc.where(top.path + (key, i))}: {key}: {why}")
    for name in tightened:
        why = known.unknown(name)
        if why:
            top.section("tighten").fail(f"tighten: {why}", name)


def _overrides(o: yamlconf.Section, name: str, path: Path) -> OverridePolicy:
    """`overrides: {approvers: {signers: FILE, principals: [...]}, acknowledgement, max_lifetime}`.
    The signers file (OpenSSH allowed signers, relative to the policy file) is the trust root:
    only its keys can sign, and only its principals listed here can approve. The old list of
    typed names proves nothing: it leaves overrides off under this policy, saying so."""
    from stetho.history.store import parse_since

    lifetime = o.get("max_lifetime", str, "24h")
    try:
        max_life = parse_since(lifetime)
    except ConfigError as exc:
        o.fail(str(exc), "max_lifetime")
    o.check_unknown({"approvers", "acknowledgement", "max_lifetime"})
    ack = o.get("acknowledgement", str, "")
    if isinstance(o.data.get("approvers"), list):
        return OverridePolicy(name, (), None, ack, max_life, problem=(
            f"{o.where('approvers')}: approvers is a list of names (the old format, which "
            "proves nothing); write approvers: {signers: <allowed signers file>, principals: "
            "[...]}"))
    a = o.section("approvers")
    a.check_unknown({"signers", "principals"})
    principals = a.str_list("principals")
    for p in principals:
        if not PRINCIPAL_RE.match(p):
            a.fail(f"principal {p!r} is not a plain name (letters, digits, '.', '_', '@', '+', "
                   "'-'; no patterns)", "principals")
    signers = a.get("signers", str)
    where = (path.parent / Path(signers).expanduser()).absolute() if signers else None
    return OverridePolicy(name, principals, where, ack, max_life)


def load_override_policy(name: str) -> OverridePolicy:
    """What `stetho override` needs of a policy: its signers file, approvers, sentence and cap."""
    return load(name).overrides
