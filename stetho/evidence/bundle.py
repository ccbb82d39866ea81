"""The evidence bundle: one versioned JSON document per node, the raw truth of a run.

A bundle keeps every probe's argv, rc, stdout, stderr, duration and status (or, for file
probes, the files read and the errors met), so that checks can be replayed later over the same
evidence with newer parsers or policies (`stetho check --evidence`).
"""

from __future__ import annotations

import json
import os
from dataclasses import field
from pathlib import Path
from typing import Any

from stetho.core import atomic, untrusted
from stetho.core.record import record
from stetho.errors import ConfigError, EvaluationError

SCHEMA = "stetho.evidence"
SCHEMA_VERSION = 1

#: Probe statuses. `ok`: ran and exited 0 / files read. `failed`: exited non-zero (its output
#: is kept and may still parse). `missing`: the command is not on PATH. `absent`: no file
#: matched (no such hardware). `timeout`: killed at its timeout. `denied`: permission denied.
#: `error`: any other reason it could not run. `skipped`: not collected on purpose.
STATUSES = ("ok", "failed", "missing", "absent", "timeout", "denied", "error", "skipped")


class BundleError(EvaluationError):
    """A bundle file that cannot be read: not JSON, another schema, or a newer version."""


@record
class ProbeRecord:
    name: str
    kind: str  # "command" | "files"
    status: str
    argv: tuple[str, ...] = ()
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    binary: bool = False
    files: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    def describe(self) -> str:
        """How this probe is named to a person: its command line or its globs."""
        return " ".join(self.argv) if self.argv else self.name

    def to_json(self) -> dict[str, Any]:
        # by hand, not dataclasses.asdict (which deep-copies every value: most of writing a
        # fleet's evidence files went there); the same keys, in field order
        return {"name": self.name, "kind": self.kind, "status": self.status,
                "argv": list(self.argv), "rc": self.rc, "stdout": self.stdout,
                "stderr": self.stderr, "duration_s": self.duration_s, "binary": self.binary,
                "files": dict(self.files), "errors": dict(self.errors), "reason": self.reason}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbeRecord:
        """A probe as its node wrote it, each field of its type and in range, or ValueError
        naming the field: what a check reads from it is what a node could have measured."""
        status = d["status"]
        if status not in STATUSES:
            raise ValueError(f"probe {str(d.get('name'))[:60]!r}: unknown status "
                             f"{str(status)[:60]!r} (known: {', '.join(STATUSES)})")
        rc, duration = d.get("rc"), d.get("duration_s", 0.0)
        if rc is not None and not (isinstance(rc, int) and not isinstance(rc, bool)
                                   and -2**31 <= rc < 2**32):
            raise ValueError(f"probe {d['name']!r}: exit code {str(rc)[:40]} is not an exit code")
        if not untrusted.finite(duration) or not 0 <= duration < 10**9:
            raise ValueError(f"probe {d['name']!r}: duration_s {str(duration)[:40]} is not a "
                             "duration")
        argv, files, errors = d.get("argv", ()), d.get("files", {}), d.get("errors", {})
        texts = [d["name"], d["kind"], d.get("stdout", ""), d.get("stderr", ""),
                 d.get("reason", ""), *argv, *files.keys(), *files.values(), *errors.keys(),
                 *errors.values()]
        if not set(map(type, texts)) <= {str}:  # in C: a bundle has thousands of files
            raise ValueError(f"probe {str(d['name'])[:60]!r}: a text field is not a string")
        # Set as one dict, in field order, without cls(...)'s argument checks: they were a
        # fifth of reading a bundle (72 probes a node).
        # The same fields and values as cls(...) would hold (tests/test_bundle_fast.py).
        rec = object.__new__(cls)
        object.__setattr__(rec, "__dict__", {
            "name": texts[0], "kind": texts[1], "status": status, "argv": tuple(argv),
            "rc": rc, "stdout": texts[2], "stderr": texts[3], "duration_s": float(duration),
            "binary": bool(d.get("binary", False)), "files": dict(files),
            "errors": dict(errors), "reason": texts[4]})
        return rec


@record
class Bundle:
    node: str
    collected_at: str
    stetho_version: str
    profile: str
    probes: dict[str, ProbeRecord]
    sysroot: str = "/"
    schema_version: int = SCHEMA_VERSION

    def probe(self, name: str) -> ProbeRecord | None:
        return self.probes.get(name)

    def to_json(self, probes: bool = True) -> dict[str, Any]:
        """The bundle as JSON data; `probes=False`: its head alone (save writes the probes
        a line each)."""
        doc: dict[str, Any] = {
            "schema": SCHEMA, "schema_version": self.schema_version, "node": self.node,
            "collected_at": self.collected_at, "stetho_version": self.stetho_version,
            "profile": self.profile, "sysroot": self.sysroot,
        }
        if probes:
            doc["probes"] = {k: v.to_json() for k, v in self.probes.items()}
        return doc

    @classmethod
    def from_json(cls, d: Any, source: str = "<bundle>") -> Bundle:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise BundleError(f"{source}: not a stetho evidence bundle (no schema {SCHEMA!r})")
        version = d.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise BundleError(
                f"{source}: bundle schema version {version} is newer than this stetho "
                f"understands ({SCHEMA_VERSION}); upgrade stetho to replay it")
        from stetho.core import hostlist

        try:
            hostlist.validate(str(d.get("node", "")))
        except ConfigError as exc:
            raise BundleError(f"{source}: {exc}") from None
        from stetho import profiles

        try:
            profile = profiles.check_name(d.get("profile") or profiles.DEFAULT_PROFILE)
        except ConfigError as exc:
            raise BundleError(f"{source}: {exc}") from None
        try:
            probes = {k: ProbeRecord.from_json(v) for k, v in d["probes"].items()}
            return cls(node=str(d["node"]), collected_at=str(d["collected_at"]),
                       stetho_version=str(d.get("stetho_version", "?")),
                       profile=profile, probes=probes,
                       sysroot=str(d.get("sysroot", "/")), schema_version=version)
        except ValueError as exc:
            raise BundleError(f"{source}: malformed bundle: {exc}") from None
        except (KeyError, TypeError, AttributeError) as exc:
            raise BundleError(f"{source}: malformed bundle ({exc!r})") from None

    def save(self, path: Path, lines: dict[str, tuple[ProbeRecord, str]] | None = None
             ) -> None:
        """Write atomically: a crash mid-write never leaves half a bundle behind.

        `lines` caches each probe's encoded line for a caller that saves one growing bundle
        again and again (a node's evidence so far, after every probe): a probe is encoded
        once, not once per save (encoding every probe at every save was a third of a node's
        check). A cached line is used only for the very record it was encoded from."""
        path.parent.mkdir(parents=True, exist_ok=True)
        # one probe a line, compact inside: `indent` sends json to its pure-Python encoder
        doc = self.to_json(probes=False)
        enc = _ENCODE
        head = enc(doc)[:-1]
        body = ",\n".join(_line(k, v, lines) for k, v in self.probes.items())
        atomic.write(path, f'{head},"probes":{{\n{body}\n}}}}\n')


#: One compact encoder (the C one), made once.
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def _line(name: str, rec: ProbeRecord, lines: dict[str, tuple[ProbeRecord, str]] | None
          ) -> str:
    """A probe's line in a saved bundle, from `lines` when it holds this very record."""
    if lines is not None:
        hit = lines.get(name)
        if hit is not None and hit[0] is rec:
            return hit[1]
    line = f"{_ENCODE(name)}:{_ENCODE(rec.to_json())}"
    if lines is not None:
        lines[name] = (rec, line)
    return line


#: Deepest JSON nesting a bundle may have: a real one is 4 deep (bundle, probes, probe,
#: files); anything far deeper is garbage or an attack on the parser's recursion.
MAX_DEPTH = 32


def load(path: Path, max_bytes: int | None = None) -> Bundle:
    """Read one bundle file, or raise BundleError naming the file and the reason: unreadable,
    not UTF-8, truncated or not JSON, bigger than `max_bytes` (default: the configured
    max_bundle_mb), nested deeper than MAX_DEPTH, or not a bundle."""
    if max_bytes is None:
        from stetho import config

        max_bytes = int(config.active().max_bundle_mb * 2**20)
    try:
        with path.open("rb") as fh:
            # Never more than the cap, even if the file grows; sized to the file first, since
            # read(cap) allocates the whole cap (64 MiB) for a 300 KiB bundle.
            want, size = max_bytes + 1, os.fstat(fh.fileno()).st_size
            raw = fh.read(min(size + 1, want))
            if len(raw) == size + 1 < want:  # it grew since: read on, up to the cap
                raw += fh.read(want - len(raw))
    except OSError as exc:
        raise BundleError(f"{path}: cannot read evidence bundle: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise BundleError(f"{path}: evidence bundle is larger than the "
                          f"{round(max_bytes / 2**20, 3):g} MiB "
                          f"cap (max_bundle_mb, STETHO_MAX_BUNDLE_MB); not read")
    if not raw:
        raise BundleError(f"{path}: cannot read evidence bundle: empty (0 bytes); {_REDO}")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=untrusted.reject_constant)
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: cannot read evidence bundle: not UTF-8 ({exc.reason} at "
                          f"byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        ends = exc.pos >= len(exc.doc.rstrip()) or exc.msg.startswith("Unterminated string")
        what = "truncated" if ends else "not valid JSON"
        raise BundleError(f"{path}: cannot read evidence bundle: {what} ({exc.msg} at line "
                          f"{exc.lineno} column {exc.colno}); {_REDO}") from None
    except RecursionError:
        raise BundleError(f"{path}: cannot read evidence bundle: JSON nested deeper than "
                          f"{MAX_DEPTH} levels") from None
    except ValueError as exc:  # NaN/Infinity, an integer of thousands of digits
        raise BundleError(f"{path}: cannot read evidence bundle: {exc}") from None
    if _too_deep(data, MAX_DEPTH):
        raise BundleError(f"{path}: cannot read evidence bundle: JSON nested deeper than "
                          f"{MAX_DEPTH} levels")
    if untrusted.surrogate_escapes(raw):  # only then can a string be a lone surrogate
        try:
            untrusted.check(data, MAX_DEPTH)
        except untrusted.UntrustedJsonError as exc:
            raise BundleError(f"{path}: cannot read evidence bundle: {exc}") from None
    return Bundle.from_json(data, source=str(path))


#: What to do about a bundle cut short or empty (a node that died mid-write, a full disk).
_REDO = ("collect it again on its node (`stetho collect -o FILE`, or sweep it again), "
         "or remove it to replay without that node")

#: The file name a run folder gives each node's bundle (hosts/<node>/evidence.json): read
#: whatever it holds, so an empty or truncated one is its node's error, never skipped.
RUN_FOLDER_NAME = "evidence.json"


def _too_deep(data: object, limit: int) -> bool:
    """Whether JSON data nests deeper than `limit`; iterative, so it cannot recurse itself."""
    if limit >= _BUNDLE_DEPTH and _bundle_shaped(data):
        return False  # every bundle a node writes: its 290 containers not walked one by one
    return _walk_too_deep(data, limit)


def _walk_too_deep(data: object, limit: int) -> bool:
    """_too_deep by walking every container (what anything not shaped like a bundle gets)."""
    todo: list[tuple[object, int]] = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        # a list, not a generator: run once per bundle member, the generator's frame cost more
        todo.extend([(c, depth + 1) for c in children if isinstance(c, (dict, list))])
    return False


#: How deep a bundle's containers nest: bundle, probes, probe, its argv/files/errors.
_BUNDLE_DEPTH = 4
#: The types json gives a value that holds nothing.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _bundle_shaped(data: object) -> bool:
    """True where parsed JSON nests no deeper than a bundle (_BUNDLE_DEPTH): a dict of dicts
    of dicts whose members are leaves or containers of leaves. The innermost containers are
    scanned in C (`set(map(type, ...))`); False means only "walk it", never "too deep"."""
    if type(data) is not dict:
        return False
    for top in data.values():
        if type(top) in _LEAVES:
            continue
        if type(top) is not dict:
            return False
        for probe in top.values():
            if type(probe) in _LEAVES:
                continue
            if type(probe) is not dict:
                return False
            for member in probe.values():
                kind = type(member)
                if kind is dict:
                    if not set(map(type, member.values())) <= _LEAVES:
                        return False
                elif kind is list:
                    if not set(map(type, member)) <= _LEAVES:
                        return False
    return True


def find_bundles(path: Path) -> list[Path]:
    """A bundle file, or every `*.json` bundle under a folder (a run folder), sorted."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise BundleError(f"{path}: no such file or folder")
    found = sorted(p for p in path.rglob("*.json") if _looks_like_bundle(p))
    if not found:
        raise _none_found(path)
    return found


def require_bundles(path: Path) -> None:
    """Raise what find_bundles raises where `path` holds no bundle, without listing them all:
    the first bundle ends the search (a fleet's folder is read once, by the replay itself)."""
    if path.is_file():
        return
    if not path.is_dir():
        raise BundleError(f"{path}: no such file or folder")
    if not any(_looks_like_bundle(p) for p in path.rglob("*.json")):
        raise _none_found(path)


def _none_found(path: Path) -> BundleError:
    return BundleError(f"{path}: no evidence bundles found (looked for *.json with "
                       f"schema {SCHEMA!r})")


def _looks_like_bundle(p: Path) -> bool:
    if p.name == RUN_FOLDER_NAME:
        return True
    try:
        with p.open("rb") as fh:
            head = fh.read(200)
    except OSError:
        return False
    return f'"{SCHEMA}"'.encode() in head
