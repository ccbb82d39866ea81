"""Which profile each node must be judged against, and the results judged against another.

A check's verdict means something only against the node's profile: an H100 judged as `generic`
passes unlocked clocks. So the gate pins each node's profile, from the inventory (its
`stetho_profile` host variable) or else from history (the profile the node was last recorded
with, `generic` and unrecorded ones left out: they name no hardware), and a pass judged under
another profile is could-not-evaluate for that node, named. A failure stays a failure: a
mismatch never turns a blocking result into anything milder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path

from stetho.core.record import record
from stetho.results import Result

#: the pin of a node whose pinning row failed its integrity check: no profile has this name
UNVERIFIED = "(unverifiable)"
#: Results of these statuses stand whatever profile judged them: they already stop a node.
_STANDS = frozenset({"fail", "error"})


@record
class Pin:
    """A node's profile and where it was pinned (for the message that names a mismatch)."""

    profile: str
    where: str


@record(frozen=False)
class Pins:
    """Each node's pin; `judged` is each node's profile per check as its results were judged."""

    pins: dict[str, Pin] = field(default_factory=dict)

    def profile_of(self, node: str, judged: dict[str, str]) -> str:
        """The profile a verdict line names: the pin, else the one the results were judged
        against (several: joined), else `unknown`."""
        if node in self.pins:
            return self.pins[node].profile
        seen = sorted({p for p in judged.values() if p})
        return "+".join(seen) or "unknown"

    def apply(self, results: list[Result], judged: dict[str, dict[str, str]]
              ) -> list[Result]:
        """Results with each pass, warning or skip judged under a profile other than its
        node's pin replaced by one `gate` error per node that says so; failures and errors
        stand. `judged`: node -> check -> profile ("" where none was recorded)."""
        # node -> the checks judged under another profile than its pin: a few (node, check)
        # pairs to look at, not each of a 64-node gate's 8,000 results
        off: dict[str, set[str]] = {}
        for node, pin in self.pins.items():
            names = {c for c, p in judged.get(node, {}).items()
                     if p != pin.profile and c not in ("gate", "sweep")}
            if names:
                off[node] = names
        if not off:
            return list(results)
        out: list[Result] = []
        wrong: dict[str, dict[str, list[str]]] = {}  # node -> judged profile -> checks
        for r in results:
            if r.check not in off.get(r.node, ()) or r.status in _STANDS:
                out.append(r)
                continue
            seen = judged[r.node][r.check]
            checks = wrong.setdefault(r.node, {}).setdefault(seen, [])
            if r.check not in checks:
                checks.append(r.check)
        for node, by_profile in sorted(wrong.items()):
            pin = self.pins[node]
            for seen, checks in sorted(by_profile.items()):
                listed = ", ".join(sorted(checks)[:8]) + (
                    f" and {len(checks) - 8} more" if len(checks) > 8 else "")
                out.append(Result(
                    node, "gate", "", "error", f"judged as {seen or 'no recorded profile'}, "
                    f"pinned {pin.profile} ({pin.where}): {listed}", probe="gate",
                    remediation=f"check it again against {pin.profile} (its stetho_profile "
                    "in the inventory, or --profile); if its hardware changed, set the new "
                    "one as its stetho_profile"))
        return out


def pins_for(nodes: list[str], db: Path,
             inventory_vars: Mapping[str, Mapping[str, object]] | None
             ) -> tuple[Pins, str | None]:
    """Each node's pin: the inventory's `stetho_profile`, else history's. A history that
    cannot be read pins nothing and says why (the results come from it or from a live
    check, whose own judging the gate reports anyway)."""
    import sqlite3

    from stetho.core.profile_name import DEFAULT_PROFILE
    from stetho.history.backend import open_history
    from stetho.history.store import HistoryError, describe

    pins = Pins()
    problem = None
    if db.exists():
        try:
            with open_history(db) as h:
                for node, (profile, run, why) in h.pinned_profiles(
                        nodes, frozenset({DEFAULT_PROFILE})).items():
                    # a pin history cannot vouch for matches nothing: every pass judged
                    # under any profile is then could-not-evaluate, with why
                    pins.pins[node] = Pin(UNVERIFIED, why) if why else \
                        Pin(profile, f"last recorded with it in run {run}")
        except HistoryError as exc:
            problem = str(exc)
        except (sqlite3.Error, OSError) as exc:
            problem = f"{db}: {describe(exc)}"
    for node, hv in (inventory_vars or {}).items():
        pinned = hv.get("stetho_profile")
        if node in nodes and isinstance(pinned, str) and pinned:
            pins.pins[node] = Pin(pinned, "the inventory's stetho_profile")
    return pins, problem
