"""The stetho_* variables an inventory gives each host, validated where they enter.

Ansible hands them over as whatever the inventory held (`stetho_timeout: abc`, a list, NaN);
used as they are, one host's typo crashed the whole sweep. Each is checked before anything
runs, and a bad one is a ConfigError naming the inventory file and line, the host and the
variable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from stetho.errors import ConfigError

#: Seconds a per-host limit or deadline may be: at least 1, at most a week.
SECONDS = (1, 7 * 24 * 3600)
_SECONDS_VARS = ("stetho_timeout", "stetho_deadline")
#: Variables that become paths or a command line's arguments on the node: text on one line.
_TEXT_VARS = ("stetho_profile", "stetho_venv", "stetho_python", "stetho_etc", "stetho_sysroot",
              "stetho_path")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def validate(inventory: Path, hostvars: Mapping[str, Mapping[str, Any]],
             hosts: Iterable[str]) -> None:
    """Raise ConfigError at the first bad stetho_* value of `hosts` (file:line, host, why)."""
    for host in hosts:
        hv = hostvars.get(host, {})
        for var in _SECONDS_VARS:
            if var in hv and hv[var] is not None and _seconds(hv[var]) is None:
                raise ConfigError(
                    f"{_where(inventory, host, var)}: host {host}: {var} must be a whole "
                    f"number of seconds from {SECONDS[0]} to {SECONDS[1]}, not "
                    f"{_show(hv[var])}")
        for var in _TEXT_VARS:
            value = hv.get(var)
            if value is not None and (not isinstance(value, str) or _CONTROL.search(value)
                                      or len(value) > 4096 or not _text(value)):
                raise ConfigError(f"{_where(inventory, host, var)}: host {host}: {var} must "
                                  f"be text on one line, not {_show(value)}")


def seconds(value: Any) -> int:
    """A validated seconds value (an int, or the digits an INI inventory gives as text)."""
    got = _seconds(value)
    if got is None:
        raise ConfigError(f"not a number of seconds: {_show(value)}")
    return got


def _seconds(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and re.fullmatch(r"\s*\d{1,9}\s*", value):
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and SECONDS[0] <= value <= SECONDS[1]:
        return value
    return None


def _text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _show(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past int_max_str_digits
        return "an integer of thousands of digits"
    return text if len(text) <= 60 else text[:57] + "..."


def _where(inventory: Path, host: str, var: str) -> str:
    """inventory:line of `var` for `host`: the first line naming the variable after the line
    naming the host (a YAML host's block, an INI host's line), else the variable's first
    line (group vars), else the host's line."""
    try:
        lines = inventory.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return str(inventory)
    host_re = re.compile(rf"(^|[\s\[,]){re.escape(host)}(\s*:|\s|$)")
    var_re = re.compile(rf"(^|\s){re.escape(var)}\s*[:=]")
    start = next((i for i, ln in enumerate(lines) if host_re.search(ln)), None)
    for i in range(start or 0, len(lines)):
        if var_re.search(lines[i]):
            return f"{inventory}:{i + 1}"
    first = next((i for i, ln in enumerate(lines) if var_re.search(ln)), start)
    return f"{inventory}:{first + 1}" if first is not None else str(inventory)
