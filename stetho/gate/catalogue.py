"""The check catalogue: every name a policy may list, so a misspelled check is an error and
never a check that silently stops gating.

Node checks are the `test_<name>` functions in the check folders (shipped, STETHO_CHECKS,
the same folders `stetho check` loads); fleet and drift checks are the `fleet_*` and `drift_*`
names their modules emit; `gate` and `sweep` are the gate's own could-not-check results.
Names are read from source text, not imported: a policy loads in milliseconds on a prolog.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from stetho.core.record import record

#: compiled where used (re caches them): a gate that never scans the catalogue never does
_TEST_DEF = r"(?m)^(?:async\s+)?def test_(\w+)\s*\("
_FLEET_OR_DRIFT = r"""["']((?:fleet|drift)_[a-z0-9_]+)["']"""
#: Results the gate and the sweep write for a node they could not check at all.
PSEUDO_CHECKS = ("gate", "sweep")
#: the modules (inside the stetho package) whose results are fleet and drift checks
_EMITTERS = ("checking/fleet.py", "history/drift.py")


@record
class Catalogue:
    node: frozenset[str]  # checks a node runs on its own evidence (`-k` selects among them)
    fleet: frozenset[str]  # fleet_* and drift_*: evaluated where the history and fleet are

    @property
    def every(self) -> frozenset[str]:
        return self.node | self.fleet | frozenset(PSEUDO_CHECKS)

    def unknown(self, name: str, *, node_only: bool = False) -> str | None:
        """Why `name` is not a known check (with the nearest known names), or None."""
        known = self.node if node_only else self.every
        if name in known:
            return None
        import difflib

        near = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(near)}?" if near else ""
        if node_only and name in self.every:
            return f"{name!r} is not a node check (only those run on the node){hint}"
        return f"unknown check {name!r}{hint}"

    def not_overridable(self, name: str) -> str | None:
        """Why an override may not name `name` (None: it may): only real checks of the
        catalogue. `gate` and `sweep` say a node could not be checked at all; letting one
        pass would make a node with no results GO."""
        if name in PSEUDO_CHECKS:
            return (f"{name!r} is not a check: it is the gate's own result for a node it could "
                    "not check at all (no results, stale, unreachable), which no override "
                    "can let pass; an override names a real check of the catalogue")
        return self.unknown(name)


def load() -> Catalogue:
    """The catalogue for the configured check folders."""
    from stetho.checking.dirs import check_dirs

    return _load(tuple(check_dirs()))


@lru_cache(maxsize=8)
def _load(dirs: tuple[Path, ...]) -> Catalogue:
    node: set[str] = set()
    for d in dirs:
        files = [d] if d.is_file() else sorted(d.rglob("test_*.py"))
        for f in files:
            node.update(re.findall(_TEST_DEF, f.read_text(encoding="utf-8", errors="replace")))
    import stetho

    fleet: set[str] = set()
    for module in _EMITTERS:
        source = Path(stetho.__file__).parent / module
        fleet.update(re.findall(_FLEET_OR_DRIFT, source.read_text(encoding="utf-8")))
    return Catalogue(frozenset(node), frozenset(fleet))
