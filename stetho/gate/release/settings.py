"""A release policy's own keys: `canary:` (how canaries are judged against controls) and
`stages:` (the waves a release rolls out in), read from the policy file gate.policy loads.

Why apart from stetho.gate.policy: these keys mean something only to the canary gate; the
policy loader accepts them and this module validates them, naming file:line on a mistake.

    canary: {max_drop_pct: 5, noise_floor_pct: 3, min_controls: 2}
    stages: [{name: canary, share: 5%}, {name: early, share: 25%}, {name: all, share: 100%}]
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from stetho.core import yamlconf
from stetho.errors import ConfigError

_SHARE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%?\s*$")
_STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class CanaryRules:
    max_drop_pct: float = 5.0  # canaries may be this much under the controls...
    noise_floor_pct: float = 3.0  # ...or the noise band, when that is wider
    min_controls: int = 2  # fewer control nodes: could not evaluate


@dataclass(frozen=True)
class Stage:
    name: str
    share_pct: float


@dataclass(frozen=True)
class ReleaseSettings:
    canary: CanaryRules
    stages: tuple[Stage, ...]


def load(policy_path: Path) -> ReleaseSettings:
    doc = yamlconf.load(policy_path)
    top = yamlconf.Section(doc)
    return ReleaseSettings(_canary(top.section("canary")), stages_of(top))


def _canary(c: yamlconf.Section) -> CanaryRules:
    c.check_unknown({"max_drop_pct", "noise_floor_pct", "min_controls"})
    d = CanaryRules()
    return CanaryRules(
        max_drop_pct=c.get("max_drop_pct", float, d.max_drop_pct, within=(0, 100)),
        noise_floor_pct=c.get("noise_floor_pct", float, d.noise_floor_pct, within=(0, 100)),
        min_controls=c.get("min_controls", int, d.min_controls, within=(1, None)))


def stages_of(top: yamlconf.Section) -> tuple[Stage, ...]:
    """Stages in rollout order: names unique, shares strictly increasing, the last at most
    100%. A wave that shrinks or a share over 100% is a typo at file:line, not a rollout."""
    raw = top.get("stages", list, [])
    out: list[Stage] = []
    for i, item in enumerate(raw):
        where = top.doc.where(top.path + ("stages", i))
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: a stage is {{name: NAME, share: PCT%}}, got {item!r}")
        s = yamlconf.Section(top.doc, top.path + ("stages", i), item)
        s.check_unknown({"name", "share"})
        name = str(s.require("name", str))
        if not _STAGE_NAME.fullmatch(name):
            s.fail(f"stage name {name[:40]!r} must be letters, digits, '.', '_' or '-'", "name")
        share = _share(s)
        if any(st.name == name for st in out):
            s.fail(f"stage {name!r} is named twice", "name")
        if out and share <= out[-1].share_pct:
            s.fail(f"stage {name!r}: share {share:g}% must be more than the stage before "
                   f"({out[-1].name}, {out[-1].share_pct:g}%): waves only grow", "share")
        out.append(Stage(name, share))
    return tuple(out)


def _share(s: yamlconf.Section) -> float:
    value = s.require("share", (str, int, float))
    m = _SHARE.match(str(value))
    pct = float(m.group(1)) if m else -1.0
    if not 0 < pct <= 100:
        s.fail(f"share {value!r} must be a percentage above 0 and at most 100 (e.g. 25%)",
               "share")
    return pct


def find_stage(stages: tuple[Stage, ...], name: str, policy: str) -> int:
    for i, st in enumerate(stages):
        if st.name == name:
            return i
    if not stages:
        raise ConfigError(f"--stage {name}: policy {policy} names no stages (add stages: "
                          "[{name: canary, share: 5%}, ...] to it)")
    raise ConfigError(f"--stage {name}: not a stage of policy {policy} (its stages: "
                      f"{', '.join(s.name for s in stages)})")


def stage_line(stages: tuple[Stage, ...], judged: int, verdict: str) -> str:
    """What the gate says of the stage just judged: which stage may proceed, or none.
    `verdict` is pass, fail or unknown; only pass lets the next wave go."""
    st = stages[judged]
    if verdict != "pass":
        what = "blocked" if verdict == "fail" else "could not be evaluated"
        return f"stage {st.name} {what}: no further stage may proceed"
    if judged + 1 < len(stages):
        nxt = stages[judged + 1]
        return f"stage {st.name} passed: {nxt.name} ({nxt.share_pct:g}%) may proceed"
    return f"stage {st.name} passed: the rollout is complete ({st.share_pct:g}%)"
