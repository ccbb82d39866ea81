"""One configuration object, built at the edge: defaults < config file < STETHO_* environment
< command-line flags.

This is the only module that reads stetho's environment variables (and the XDG base
directories). The CLI and the pytest plugin (the two ways into stetho) build a `Config` once
and make it the active one; the library reads `active()` and never `os.environ`. A setting has
one name as a variable and one key in the file (the table below), documented in the README.

The config file is TOML: `$STETHO_CONFIG`, else `/etc/stetho/stetho.toml` then
`~/.config/stetho/stetho.toml` (`$XDG_CONFIG_HOME`), the user's file overriding the system's.
Paths in a file are relative to the file's own folder.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import field, fields
from pathlib import Path

from stetho import configsource
from stetho.core.record import record
from stetho.errors import ConfigError


@record
class Config:
    """Every setting stetho has outside its command-line flags. Paths are absolute."""

    #: Node profile for local checks and the sweep's localhost node (`profile`, STETHO_PROFILE).
    profile: str | None = None
    #: The history database (`db`, STETHO_DB).
    db: Path = field(default_factory=lambda: _data_home() / "history.db")
    #: Caches: wheelhouse, clones of remote repositories (`cache`, STETHO_CACHE).
    cache: Path = field(default_factory=lambda: _cache_home())
    #: Reports waiting to be published (`spool`, STETHO_SPOOL).
    spool: Path = field(default_factory=lambda: _data_home() / "kb-spool")
    #: Where `gate --slurm` hooks leave each verdict as a JSON file for `stetho history ingest`
    #: (`result_spool`, STETHO_RESULT_SPOOL): a folder every node and the controller share.
    #: Absolute: a prolog's working directory is wherever slurmd happens to be.
    result_spool: Path | None = None
    #: This node's spool key file (`spool_key`, STETHO_SPOOL_KEY): what `stetho spool key
    #: NODE` printed on the controller; every file the node spools is signed with it.
    spool_key: Path | None = None
    #: The controller's spool secret file (`spool_secret`, STETHO_SPOOL_SECRET): with it,
    #: `stetho ingest` takes only files signed with their folder's node's key.
    spool_secret: Path | None = None
    #: The localhost sweep's node venvs (`venvs`, STETHO_VENVS).
    venvs: Path = field(default_factory=lambda: _data_home() / "venvs")
    #: Alert rate-limit state (`notify_state`, STETHO_NOTIFY_STATE).
    notify_state: Path = field(default_factory=lambda: _data_home() / "notify.db")
    #: The drain budget's ledger (`drain_ledger`, STETHO_DRAIN_LEDGER): wins over a policy's
    #: `scheduler: {circuit: {ledger: PATH}}`; None: that, else beside the history database.
    drain_ledger: Path | None = None
    #: Extra folders searched first, before ./<folder> and the shipped one (os.pathsep lists).
    baselines: tuple[Path, ...] = ()  # STETHO_BASELINES
    gates: tuple[Path, ...] = ()  # STETHO_GATES
    rules: tuple[Path, ...] = ()  # STETHO_RULES
    checks: tuple[Path, ...] = ()  # STETHO_CHECKS
    benchmarks: tuple[Path, ...] = ()  # STETHO_BENCHMARKS
    #: The knowledge-base repository (`kb_repo`, STETHO_KB_REPO).
    kb_repo: str | None = None
    #: Repeat offenders (`repeat_limit`, STETHO_REPEAT_LIMIT): "COUNT/DAYS", e.g. "3/30": that
    #: many earlier reports of one node and cause within that many days recommend replacing
    #: the hardware instead of another reset.
    repeat_limit: str = "3/30"
    #: The override repository (`override_repo`, STETHO_OVERRIDE_REPO).
    override_repo: str | None = None
    #: The SSH key a person signs overrides with (`signing_key`, STETHO_SIGNING_KEY): a private
    #: key, or KEY.pub with its private half in ssh-agent. Default ~/.ssh/id_ed25519.
    signing_key: Path | None = None
    #: Alert webhook (`webhook_url`, STETHO_WEBHOOK_URL) and its format (generic | slack).
    webhook_url: str | None = None
    webhook_format: str = "generic"
    #: RMA / data-centre ticket webhook for `stetho remedy` (`ticket_url`, STETHO_TICKET_URL).
    ticket_url: str | None = None
    #: Cap on every probe's timeout in seconds (`probe_timeout`, STETHO_PROBE_TIMEOUT).
    probe_timeout: float | None = None
    #: `gate --slurm health-check` watchdog in seconds (`health_timeout`,
    #: STETHO_HEALTH_TIMEOUT): under Slurm's 60 s HealthCheckProgram limit.
    health_timeout: float = 50.0
    #: Largest evidence bundle a replay reads, MiB (`max_bundle_mb`, STETHO_MAX_BUNDLE_MB): a
    #: bigger file is that node's error, never a process out of memory.
    max_bundle_mb: float = 64.0
    #: How a node tells it runs a job, before anything invasive (`busy_probe`,
    #: STETHO_BUSY_PROBE): auto (Slurm's squeue, else GPU compute processes), slurm, gpu,
    #: none (the node is declared dedicated), or a command whose output lines are the jobs.
    busy_probe: str = "auto"
    #: Root that node file reads happen under (`sysroot`, STETHO_SYSROOT): a simulated node.
    sysroot: str = "/"
    #: Where probes find their tools (PATH).
    path: str = os.defpath
    #: Show tracebacks on internal errors (STETHO_DEBUG).
    debug: bool = False
    #: A name to print for whoever runs stetho (STETHO_USER); never an identity.
    user: str | None = None
    #: Where commands write their node_exporter textfile, `stetho-<command>.prom`
    #: (`textfile_dir`, STETHO_TEXTFILE_DIR): the default of --textfile.
    textfile_dir: Path | None = None
    #: The files this configuration was read from, in order.
    files: tuple[Path, ...] = ()
    #: The settings a file, the environment or a flag gave (not the built-in defaults): a
    #: simulated node's history goes to its own database unless `db` is among them.
    given: frozenset[str] = frozenset()

    def with_flags(self, **flags: object) -> Config:
        """This configuration with the flags a user gave (None: not given)."""
        given = {k: v for k, v in flags.items() if v is not None}
        for k in given:
            if k not in _FIELDS:
                raise ConfigError(f"unknown configuration setting {k!r}")
        converted = {k: _convert(k, v, Path.cwd()) for k, v in given.items()}
        return dataclasses.replace(self, given=self.given | set(given),
                                   **converted)  # type: ignore[arg-type]


#: variable name -> field. One name each; PATH is the process's own.
ENVIRONMENT = {
    "STETHO_PROFILE": "profile", "STETHO_DB": "db", "STETHO_CACHE": "cache",
    "STETHO_SPOOL": "spool", "STETHO_RESULT_SPOOL": "result_spool",
    "STETHO_SPOOL_KEY": "spool_key", "STETHO_SPOOL_SECRET": "spool_secret", "STETHO_VENVS": "venvs",
    "STETHO_NOTIFY_STATE": "notify_state", "STETHO_DRAIN_LEDGER": "drain_ledger",
    "STETHO_BASELINES": "baselines", "STETHO_GATES": "gates", "STETHO_RULES": "rules",
    "STETHO_CHECKS": "checks", "STETHO_BENCHMARKS": "benchmarks", "STETHO_KB_REPO": "kb_repo",
    "STETHO_REPEAT_LIMIT": "repeat_limit",
    "STETHO_OVERRIDE_REPO": "override_repo", "STETHO_SIGNING_KEY": "signing_key",
    "STETHO_WEBHOOK_URL": "webhook_url", "STETHO_TICKET_URL": "ticket_url",
    "STETHO_WEBHOOK_FORMAT": "webhook_format", "STETHO_PROBE_TIMEOUT": "probe_timeout",
    "STETHO_HEALTH_TIMEOUT": "health_timeout",
    "STETHO_MAX_BUNDLE_MB": "max_bundle_mb",
    "STETHO_SYSROOT": "sysroot", "PATH": "path", "STETHO_DEBUG": "debug",
    "STETHO_USER": "user", "STETHO_BUSY_PROBE": "busy_probe",
    "STETHO_TEXTFILE_DIR": "textfile_dir",
}
_FIELDS = {f.name for f in fields(Config)} - {"files", "given"}
_PATHS = {"db", "cache", "spool", "venvs", "notify_state", "signing_key", "drain_ledger",
          "textfile_dir", "spool_key", "spool_secret"}
_PATH_LISTS = {"baselines", "gates", "rules", "checks", "benchmarks"}


def load(env: Mapping[str, str] | None = None, files: list[Path] | None = None) -> Config:
    """Defaults, then each config file that exists, then the environment."""
    env = os.environ if env is None else env
    found = [p for p in (files if files is not None else config_files(env)) if p.is_file()]
    values: dict[str, object] = {}
    for path in found:
        values.update(_read_file(path))
    for var, name in ENVIRONMENT.items():
        raw = env.get(var)
        if raw is None or (raw.strip() == "" and var != "PATH"):
            continue  # an empty variable is an unset one, everywhere
        values[name] = _convert(name, raw, Path.cwd(), source=var)
    given = frozenset(values)
    values = {**_home_defaults(env), **values}
    return dataclasses.replace(_DEFAULT, files=tuple(found), given=given,
                               **values)  # type: ignore[arg-type]


def config_files(env: Mapping[str, str]) -> list[Path]:
    """STETHO_CONFIG (which must exist), else the system's then the user's file; the one rule
    lives in stetho.configsource, which `stetho --help` asks without importing this module."""
    paths = [Path(p) for p in configsource.file_candidates(env)]
    if env.get("STETHO_CONFIG") and not paths[0].is_file():
        raise ConfigError(f"STETHO_CONFIG={paths[0]}: no such file")
    return paths


def _read_file(path: Path) -> dict[str, object]:
    # the TOML reader loads only when a file exists: most runs (`stetho --help`) read none
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    out: dict[str, object] = {}
    for key, value in data.items():
        if key not in _FIELDS or key == "path":
            known = ", ".join(sorted(_FIELDS - {"path"}))
            raise ConfigError(f"{path}: unknown setting {key!r} (known: {known})")
        out[key] = _convert(key, value, path.parent, source=f"{path}: {key}")
    return out


def _convert(name: str, value: object, base: Path, source: str | None = None) -> object:
    where = source or name
    if name == "result_spool":
        spool = Path(str(value)).expanduser() if isinstance(value, (str, Path)) else None
        if spool is None or not str(value).strip() or not spool.is_absolute():
            raise ConfigError(f"{where}={value!r}: expected an absolute path (a folder the "
                              "nodes and the controller share)")
        return spool
    if name in _PATHS:
        return _path(value, base, where)
    if name in _PATH_LISTS:
        items = value.split(os.pathsep) if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ConfigError(f"{where}: expected a list of folders")
        return tuple(_path(v, base, where) for v in items if v)
    if name == "probe_timeout":
        try:
            seconds = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{where}={value!r}: expected seconds") from None
        return seconds if seconds > 0 else None
    if name == "health_timeout":
        try:
            limit = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{where}={value!r}: expected seconds") from None
        if limit <= 0:
            raise ConfigError(f"{where}={value!r}: expected more than 0 seconds")
        return limit
    if name == "max_bundle_mb":
        try:
            mib = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ConfigError(f"{where}={value!r}: expected MiB") from None
        if not mib > 0:
            raise ConfigError(f"{where}={value!r}: expected a positive size in MiB")
        return mib
    if name == "debug":
        return value is True or str(value).strip().lower() in ("1", "true", "yes", "on")
    if name == "repeat_limit":
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*d?\s*", str(value))
        if not m or int(m.group(1)) < 1:
            raise ConfigError(f"{where}={value!r}: expected COUNT/DAYS, e.g. 3/30")
        return f"{int(m.group(1))}/{m.group(2)}"
    if name == "webhook_format":
        fmt = str(value).strip().lower()
        if fmt not in ("generic", "slack"):
            raise ConfigError(f"{where}={value!r}: expected generic or slack")
        return fmt
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected text, got {value!r}")
    if name == "busy_probe" and not value.strip():
        raise ConfigError(f"{where}: empty; use auto, slurm, gpu, none or a command")
    return value.strip() if name != "path" else value


def _path(value: object, base: Path, where: str) -> Path:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ConfigError(f"{where}: expected a path, got {value!r}")
    p = Path(str(value)).expanduser()
    return p if p.is_absolute() else (base / p)


def _home_defaults(env: Mapping[str, str]) -> dict[str, object]:
    data = Path(env.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "stetho"
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stetho"
    return {"db": data / "history.db", "cache": cache, "spool": data / "kb-spool",
            "venvs": data / "venvs", "notify_state": data / "notify.db",
            "signing_key": Path.home() / ".ssh" / "id_ed25519"}


def _data_home() -> Path:
    return Path.home() / ".local" / "share" / "stetho"


def _cache_home() -> Path:
    return Path.home() / ".cache" / "stetho"


# -- the active configuration -------------------------------------------------------------------

_ACTIVE: list[Config] = []


def active() -> Config:
    """The configuration the edge (CLI, pytest plugin) made active; built-in defaults (no
    environment) when nothing did, so a library call never depends on the caller's shell."""
    return _ACTIVE[-1] if _ACTIVE else _DEFAULT


def is_active() -> bool:
    """Whether an edge has made a configuration active in this process."""
    return bool(_ACTIVE)


def activate(cfg: Config) -> None:
    """Make `cfg` the active configuration for the rest of the process (the edge calls this)."""
    _ACTIVE[:] = [cfg]


@contextmanager
def using(cfg: Config) -> Iterator[Config]:
    """`cfg` active inside the block (tests, and a gate that runs checks with its own)."""
    _ACTIVE.append(cfg)
    try:
        yield cfg
    finally:
        _ACTIVE.pop()


_DEFAULT = Config()


def child_environment(overrides: Mapping[str, str] | None = None,
                      drop: frozenset[str] = frozenset()) -> dict[str, str]:
    """The environment a child process (probe, git, ansible) inherits: this process's own, less
    `drop`, with `overrides`. Passing it on is the only other use stetho makes of os.environ."""
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **(overrides or {})}


@contextmanager
def process_environment(*, unset: tuple[str, ...] = (), **values: str) -> Iterator[None]:
    """Set variables for code that runs in this process and reads them itself (pytest's plugin
    autoload switch), remove those in `unset`, and put the old values back afterwards."""
    old = {k: os.environ.get(k) for k in (*values, *unset)}
    for k in unset:
        os.environ.pop(k, None)
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
