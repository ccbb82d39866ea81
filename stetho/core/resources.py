"""Where stetho's shipped folders live: the repo checkout, or inside an installed wheel.

The design card keeps `checks/`, `baselines/`, `gates/`, `templates/`, `playbooks/` and the real
fixtures at the top of the repository; the wheel carries copies under `stetho/_bundled/`. Code
asks here instead of guessing paths, so an editable install and a wheel on a node behave alike.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent


@cache
def shipped(name: str) -> Path:
    """The shipped folder `name` (e.g. "checks", "baselines", "fixtures/real")."""
    bundled = _PKG / "_bundled" / name
    if bundled.is_dir():
        return bundled
    repo = _PKG.parent / name
    if repo.is_dir():
        return repo
    raise FileNotFoundError(f"stetho is installed without its {name}/ folder "
                            f"(looked in {bundled} and {repo})")
