"""Every environment variable the README's Configuration table documents is honoured, under
the setting it names, and every variable stetho reads is in that table: one name each."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from stetho import config
from stetho.errors import ConfigError

README = Path(__file__).resolve().parents[1] / "README.md"
#: Values to try for a variable, in order: the first one its setting accepts must change it.
_CANDIDATES = ("7", "/tmp/stetho-readme-check", "slack", "gpu", "2/10", "1")


def documented() -> dict[str, str]:
    """README table rows: variable -> setting (rows naming several pair them in order)."""
    out: dict[str, str] = {}
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or "STETHO_" not in cells[0]:
            continue
        names = re.findall(r"`(STETHO_[A-Z_]+)`", cells[0])
        fields = re.findall(r"`([a-z_]+)`", cells[1])
        if len(fields) == 1 and len(names) > 1:  # a row of path lists: one setting each
            fields = [n.removeprefix("STETHO_").lower() for n in names]
        out.update(zip(names, fields, strict=False))
    return out


def test_the_table_and_the_code_name_the_same_variables() -> None:
    table = documented()
    read = {v: f for v, f in config.ENVIRONMENT.items() if v != "PATH"}
    assert table == read


def test_every_documented_variable_is_honoured() -> None:
    base = config.load(env={}, files=[])
    for var, name in documented().items():
        for value in _CANDIDATES:
            try:
                cfg = config.load(env={var: value}, files=[])
            except ConfigError:
                continue
            if getattr(cfg, name) != getattr(base, name):
                break
        else:
            raise AssertionError(f"{var} changes nothing in Config.{name}")
    assert {f.name for f in dataclasses.fields(config.Config)} >= set(documented().values())
