"""Reading one spool file as its folder's node's outcome, or SpoolError saying why not.

The node is the folder (`<spool>/<node>/`). Refused, each as that node's error: a link or not
a plain file; a file owned by a uid other than the folder's owner, root or the ingest's own
(when the folder is owned by a node's account); bigger than the cap; unsigned or mis-signed
while the controller has the secret; not JSON, truncated, of a newer schema; a run id other
than its name's; content naming any other node (the body, the outcome, a result, the
evidence or the summary): "spool file X claims node Y".
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from typing import Any

from stetho.fleet import lazy as lazy_mod
from stetho.fleet import outcome as outcome_mod
from stetho.fleet.outcome import Outcome
from stetho.spool import keys
from stetho.spool.files import KINDS, SCHEMA, VERSION, SpoolError, SpoolFile


@dataclass(frozen=True)
class Entry:
    """A spool file taken as its node's outcome."""

    file: SpoolFile
    digest: str  # sha256 of the file's bytes: the ledger keeps it beside (node, run id)
    kind: str
    time: float
    command: str
    outcome: Outcome
    signed: bool

    @property
    def node(self) -> str:
        return self.file.node


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read(f: SpoolFile, *, secret: bytes | None = None, max_bytes: int | None = None
         ) -> Entry:
    """`f` as its node's outcome, or SpoolError (see the module's docstring)."""
    data = read_bytes(f, max_bytes)
    return parse(f, data, secret=secret)


def parse(f: SpoolFile, data: bytes, *, secret: bytes | None = None, lazy: bool = False,
          digest: str | None = None) -> Entry:
    """The outcome in `data` (the bytes of `f`), checked as `read` says. `lazy` (the
    ingest): evidence plainly of `f`'s node is kept as bytes (stetho.fleet.lazy), unparsed.
    `digest`: digest_of(data) where the caller has it already."""
    from stetho.core import untrusted

    name = f.path.name
    body, _, rest = data.partition(b"\n")
    sig_line = rest.strip()
    signature = None
    if sig_line:
        try:
            sig_doc = untrusted.loads(sig_line)
        except untrusted.UntrustedJsonError as exc:
            raise SpoolError(f"spool file {name}: unreadable signature line ({exc})") from None
        if not isinstance(sig_doc, dict) or not isinstance(sig_doc.get("sig"), str) \
                or len(sig_doc) != 1:
            raise SpoolError(f"spool file {name}: its second line is not a signature")
        signature = sig_doc["sig"]
    if secret is not None:
        if signature is None:
            raise SpoolError(f"spool file {name} is not signed, and this controller has a "
                             f"spool secret: sign it with {f.node}'s key (`stetho spool key "
                             f"{f.node}` on the controller, STETHO_SPOOL_KEY on the node)")
        if not keys.verify(keys.node_key(secret, f.node), body, signature):
            raise SpoolError(f"spool file {name} is not signed with {f.node}'s key (a wrong "
                             f"or another node's key, or the file was changed): not taken")
    try:
        doc = lazy_mod.loads(body) if lazy else untrusted.loads(body)
    except untrusted.UntrustedJsonError as exc:
        raise SpoolError(f"spool file {name}: {exc}") from None
    entry = _entry(f, doc, name, lazy)
    return Entry(f, digest or digest_of(data), entry[0], entry[1], entry[2], entry[3],
                 signature is not None)


def _entry(f: SpoolFile, doc: Any, name: str, lazy: bool) -> tuple[str, float, str, Outcome]:
    from stetho.core import untrusted

    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SpoolError(f"spool file {name}: not a stetho spool file")
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise SpoolError(f"spool file {name}: spool schema version {str(version)[:20]} "
                         f"(this controller reads up to {VERSION}): upgrade the controller")
    claimed = doc.get("node")
    if claimed != f.node:
        raise SpoolError(f"spool file {name} in {f.node}'s folder claims node "
                         f"{str(claimed)[:60]!r}: a node speaks only for itself")
    if doc.get("run_id") != f.run_id:
        raise SpoolError(f"spool file {name}: its run id {str(doc.get('run_id'))[:60]!r} is "
                         "not its name's")
    kind, when, command = doc.get("kind"), doc.get("time"), doc.get("command", "")
    if kind not in KINDS:
        raise SpoolError(f"spool file {name}: unknown kind {str(kind)[:40]!r}")
    if not isinstance(when, (int, float)) or isinstance(when, bool) \
            or not untrusted.finite(when) or not isinstance(command, str):
        raise SpoolError(f"spool file {name}: time or command is not of its type")
    try:
        out = outcome_mod.from_json(doc.get("outcome"), keep_evidence=f.node if lazy else None)
    except outcome_mod.OutcomeError as exc:
        raise SpoolError(f"spool file {name}: {exc}") from None
    others = _others(out, f.node)
    if others:
        raise SpoolError(f"spool file {name} in {f.node}'s folder claims node "
                         f"{others[0]!r} ({'; '.join(others[1:]) or 'its outcome'}): none "
                         "of it is recorded")
    try:
        out = outcome_mod.own(out, f.node)
    except outcome_mod.OutcomeError as exc:  # pragma: no cover - _others found it first
        raise SpoolError(f"spool file {name}: {exc}") from None
    return str(kind), float(when), command[:400], out


def _others(out: Outcome, node: str) -> list[str]:
    """The first other node the outcome names, then where each other name is."""
    found: list[tuple[str, str]] = []
    if out.node != node:
        found.append((out.node, f"its outcome is of {out.node}"))
    if out.evidence is not None and out.evidence.node != node:
        found.append((out.evidence.node, f"its evidence is of {out.evidence.node}"))
    if out.summary is not None and out.summary.get("node", node) != node:
        other = str(out.summary.get("node"))[:60]
        found.append((other, f"its summary is of {other}"))
    strays = sorted({str(r.node)[:60] for r in out.results
                     if r.node not in (node, outcome_mod.ANY_NODE)})
    if strays:
        found.append((strays[0], f"results for {', '.join(strays[:5])}"))
    return [found[0][0], *(w for _n, w in found)] if found else []


def read_bytes(f: SpoolFile, max_bytes: int | None) -> bytes:
    """The file's bytes, read without following a link, after the owner and size checks."""
    name = f.path.name
    try:
        fd = os.open(f.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SpoolError(f"spool file {name}: cannot open it ({exc.strerror or exc}; a link "
                         "is never followed)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SpoolError(f"spool file {name}: not a plain file")
        owner_problem(f, st.st_uid)
        if max_bytes is not None and st.st_size > max_bytes:
            raise SpoolError(f"spool file {name}: {st.st_size} bytes, over the {max_bytes} "
                             "byte cap (max_bundle_mb)")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read((max_bytes + 1) if max_bytes is not None else -1)
        if max_bytes is not None and len(data) > max_bytes:
            raise SpoolError(f"spool file {name}: grew past the {max_bytes} byte cap while "
                             "read")
        return data
    finally:
        os.close(fd)


def owner_problem(f: SpoolFile, uid: int) -> None:
    """SpoolError when the node's folder belongs to an account (not root, not this ingest's)
    and the file is owned by another one than that account, root or this ingest's."""
    try:
        folder_uid = os.stat(f.path.parent).st_uid
    except OSError as exc:
        raise SpoolError(f"spool file {f.path.name}: cannot stat its folder "
                         f"({exc.strerror or exc})") from None
    mine = os.getuid()
    if folder_uid in (0, mine) or uid in (0, mine, folder_uid):
        return
    raise SpoolError(f"spool file {f.path.name} is owned by uid {uid}, but {f.node}'s folder "
                     f"belongs to uid {folder_uid}: only that account, root or this ingest "
                     f"(uid {mine}) may write {f.node}'s outcomes")
