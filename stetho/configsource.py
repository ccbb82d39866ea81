"""Whether building stetho's configuration could fail, told without building it.

`stetho --help` reports a broken config file or variable exactly as every command does, so it
used to build the configuration first: that imports dataclasses and pathlib, more than drawing
the page costs. When no config file exists and every STETHO_* variable set is one whose value
cannot be refused, nothing could fail and the page is drawn without it. Beside stetho.config,
this is the one module that reads the environment (tests/test_layout.py); tests/test_config_*
hold `ALWAYS_ACCEPTED` to what stetho.config.load really accepts.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Mapping

#: Variables stetho.config takes with any non-empty value not starting with `~` (a path, a
#: list of paths, free text); every other STETHO_* variable is validated by building it.
ALWAYS_ACCEPTED = frozenset({
    "STETHO_PROFILE", "STETHO_DB", "STETHO_CACHE", "STETHO_SPOOL", "STETHO_SPOOL_KEY",
    "STETHO_SPOOL_SECRET", "STETHO_VENVS", "STETHO_NOTIFY_STATE", "STETHO_DRAIN_LEDGER",
    "STETHO_BASELINES", "STETHO_GATES", "STETHO_RULES", "STETHO_CHECKS", "STETHO_BENCHMARKS",
    "STETHO_KB_REPO", "STETHO_OVERRIDE_REPO", "STETHO_SIGNING_KEY", "STETHO_WEBHOOK_URL",
    "STETHO_TICKET_URL", "STETHO_SYSROOT", "STETHO_DEBUG", "STETHO_USER",
    "STETHO_BUSY_PROBE", "STETHO_TEXTFILE_DIR",
})


def file_candidates(env: Mapping[str, str]) -> list[str]:
    """The config files stetho.config.config_files names, in its order (the same rules)."""
    if env.get("STETHO_CONFIG"):
        return [os.path.expanduser(env["STETHO_CONFIG"])]
    user = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return ["/etc/stetho/stetho.toml", os.path.join(user, "stetho", "stetho.toml")]


def nothing_to_validate(env: Mapping[str, str] | None = None) -> bool:
    """True when building the configuration cannot fail: no config file (nor STETHO_CONFIG)
    and only ALWAYS_ACCEPTED variables. False means: build it and let it say what is wrong."""
    env = os.environ if env is None else env
    for name, value in env.items():
        if not name.startswith("STETHO_") or not value.strip():
            continue  # an empty variable is an unset one (stetho.config's rule)
        if name not in ALWAYS_ACCEPTED or value.lstrip().startswith("~"):
            return False
    return not any(os.path.exists(p) for p in file_candidates(env))


def terminal_columns(fallback: int = 80) -> int:
    """The terminal's width as shutil.get_terminal_size tells it ($COLUMNS, else the size of
    stdout's terminal, else `fallback`), without importing shutil (bz2, lzma, fnmatch): what
    `stetho --help` lays its page out to, as click does."""
    import sys

    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or fallback
