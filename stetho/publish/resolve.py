"""Closing the loop: what the technician actually found, recorded in the knowledge base.

A diagnosis is a prediction; the repair is the answer. `resolve` writes the answer into the
report's front matter (`status: resolved`, `resolution: {found, parts, note, date, by}`) next to
the diagnosed `cause`, which is never changed, and commits it to the knowledge base like every
other kb write (stetho.publish.gitstore: an optimistic transaction, retried on a lost race, the
index regenerated). stetho.publish.accuracy then measures the rules against these answers.

The same answer can come from a commit a technician signed with their SSH key and pushed to the
knowledge base, carrying trailers:

    Stetho-Resolve: <report id or path>
    Stetho-Found: <cause id | no-fault-found>
    Stetho-Part: <part replaced>        (any number)
    Stetho-Note: <free text>

`from_git` applies each such commit whose signature git verifies as good against an OpenSSH
allowed signers file (`%G?` is `G`: the key is listed there and the signature holds); anything
else (unsigned, a key not listed, a bad signature, an unknown cause or report) is refused by
commit. Stetho's own commit marks what it applied (`Stetho-Applies: <commit>`) and which
reports it resolved (`Stetho-Resolved: <id>`), so running it again applies nothing twice, and
a request older than a later resolution of the same report is superseded, not applied over it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from stetho.core import yamlconf
from stetho.errors import ConfigError
from stetho.publish import gitstore
from stetho.publish.kb import INDEX, KBError, _scan, _write_index, inside
from stetho.publish.reports import _FRONT_MATTER, ReportMeta, Resolution, _iso

#: What a technician reports when the node was fine after all: the diagnosis was a false alarm.
NO_FAULT_FOUND = "no-fault-found"
RESOLVE, FOUND, PART, NOTE = "Stetho-Resolve", "Stetho-Found", "Stetho-Part", "Stetho-Note"
APPLIES, RESOLVED = "Stetho-Applies", "Stetho-Resolved"
#: Front-matter keys a resolution rewrites; every other line of it is kept as it was.
_REWRITTEN = ("status", "resolution")
_SIGNATURE_WHY = {
    "N": "it is not signed",
    "P": "it is not signed with an SSH key (OpenPGP and X.509 signatures are not checked "
         "against the allowed signers file)",
    "U": "its signature is good but by a key not in the allowed signers file {signers}",
    "B": "its signature does not verify (bad signature)",
    "X": "its signature has expired", "Y": "its signature was made by an expired key",
    "R": "its signature was made by a revoked key",
    "E": "its signature could not be checked (ssh-keygen missing, or the signers file "
         "unreadable)",
}


def check_found(found: str, known: Collection[str]) -> str:
    """`found` if it is a cause of the rule catalogue or `no-fault-found`; else ConfigError
    naming the known ones (a typo must not become a cause no rule will ever match)."""
    if found == NO_FAULT_FOUND or found in known:
        return found
    raise ConfigError(f"unknown cause {found!r}: the found cause must be a cause id of the "
                      f"rule catalogue or {NO_FAULT_FOUND}; known: "
                      + ", ".join([*sorted(known), NO_FAULT_FOUND]))


def with_resolution(text: str, res: Resolution) -> str:
    """The report's text with `status: resolved` and this `resolution` in its front matter.
    Only those two keys are rewritten; the rest of the front matter and the body are kept
    byte for byte (the diagnosed `cause` among them). A front matter whose keys cannot be
    told apart by line is dumped again whole, the same fields with the new ones."""
    m = _FRONT_MATTER.match(text)
    if m is None:
        raise ConfigError("not a diagnosis report: it has no YAML front matter")
    head = m.group(1)
    old = yamlconf.safe_load(head, "the report's front matter")
    block = yaml.safe_dump({"status": "resolved", "resolution": _plain(res)},
                           sort_keys=False, allow_unicode=True, default_flow_style=False,
                           width=1000)
    kept: list[str] = []
    skipping = False
    for line in head.splitlines(keepends=True):
        top = re.match(r"^([A-Za-z_][\w-]*)\s*:", line)
        if top:
            skipping = top.group(1) in _REWRITTEN
        elif not (line[:1] in (" ", "\t", "-") or not line.strip()):
            skipping = False
        if not skipping:
            kept.append(line)
    new_head = "".join(kept)
    if new_head and not new_head.endswith("\n"):
        new_head += "\n"
    new_head += block
    try:
        new = yamlconf.safe_load(new_head, "the report's front matter")
    except ConfigError:
        new = None
    if not isinstance(new, dict) or {k: v for k, v in new.items() if k not in _REWRITTEN} != {
            k: v for k, v in old.items() if k not in _REWRITTEN}:
        whole = {k: v for k, v in old.items() if k not in _REWRITTEN}
        new_head = yaml.safe_dump(whole, sort_keys=False, allow_unicode=True,
                                  default_flow_style=False, width=1000) + block
    return text[:m.start(1)] + new_head + text[m.end(1):]


def _plain(res: Resolution) -> dict[str, Any]:
    out: dict[str, Any] = {"found": res.found}
    if res.parts:
        out["parts"] = list(res.parts)
    if res.note:
        out["note"] = res.note
    out["date"] = _iso(res.date)
    if res.by:
        out["by"] = res.by
    if res.commit:
        out["commit"] = res.commit
    return out


def find(root: Path, ref: str, scanned: list[ReportMeta] | None = None) -> ReportMeta:
    """The report `ref` names in the clone at root: its id, or its path in the repository.
    `scanned`: the clone's reports, when the caller has read them already."""
    want = ref.strip().removeprefix("./")
    found = [r for r in (_scan(root) if scanned is None else scanned) if r.id == want
             or (r.path is not None and r.path.relative_to(root).as_posix() == want)]
    if not found:
        raise ConfigError(f"no report {ref!r} in the knowledge base (give a report id, its path "
                          "in the repository, or a copy of the report file)")
    return found[0]


def _write(c: gitstore.Clone, meta: ReportMeta, res: Resolution) -> str:
    assert meta.path is not None
    rel = meta.path.relative_to(c.path).as_posix()
    target = inside(c.path, rel)
    target.write_text(with_resolution(target.read_text(encoding="utf-8"), res),
                      encoding="utf-8")
    return rel


def _who(c: gitstore.Clone) -> str:
    """The git identity the commit is made as ('Name <email>'): who ran the command."""
    ident = c.out("var", "GIT_AUTHOR_IDENT")
    return re.sub(r"\s+\d+\s+[+-]\d{4}$", "", ident)


def _transact(repo: str, change: Callable[[gitstore.Clone], str | None]) -> str | None:
    try:
        with gitstore.open_clone(repo, purpose="kb", require_clean=True,
                                 derived=(INDEX,)) as clone:
            return clone.transact(change, what="resolution")
    except gitstore.GitError as exc:
        raise KBError(str(exc)) from None


def resolve(repo: str, ref: str, found: str, *, known: Collection[str], now: datetime,
            parts: Iterable[str] = (), note: str = "") -> tuple[ReportMeta, str | None]:
    """Record `found` on the report `ref` and push it; returns the report (as it was before)
    and the commit (None when the repository is a plain folder's clone with nothing new)."""
    check_found(found, known)
    done: list[ReportMeta] = []

    def change(c: gitstore.Clone) -> str:
        done.clear()
        meta = find(c.path, ref)
        res = Resolution(found=found, date=now, by=_who(c), parts=tuple(parts), note=note)
        rel = _write(c, meta, res)
        _write_index(c.path)
        c.git("add", "--", rel, INDEX)
        done.append(meta)
        return (f"kb: resolve {meta.node} {meta.id}: found {found} (diagnosed {meta.cause})"
                f"\n\n{RESOLVED}: {meta.id}\n")

    commit = _transact(repo, change)
    return done[0], commit


# -- from signed commits ------------------------------------------------------------------------

@dataclass(frozen=True)
class Request:
    """One commit carrying Stetho-Resolve trailers, as read from the history."""

    commit: str
    subject: str
    date: datetime
    trailers: tuple[tuple[str, str], ...]

    def values(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k.lower() == key.lower()]

    @property
    def short(self) -> str:
        return f"{self.commit[:12]} ({self.subject!r})"


@dataclass
class FromGit:
    """What `from_git` did: applied (commit, report id, found, signer), refused (commit, why),
    superseded (commit, report id: a later resolution of that report stands), and stetho's
    own commit (None: nothing applied)."""

    applied: list[tuple[str, str, str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)
    superseded: list[tuple[str, str]] = field(default_factory=list)
    commit: str | None = None


def _history(c: gitstore.Clone) -> list[Request]:
    """Every commit of HEAD's history, oldest first, with its trailers."""
    if c.rev("HEAD") is None:
        return []
    out = c.git("log", "--topo-order", "--reverse",
                "--format=%x1e%H%x1f%aI%x1f%s%x1f%(trailers:only,unfold)", "HEAD").stdout
    found = []
    for block in out.split("\x1e"):
        if not block.strip():
            continue
        sha, date, subject, trailers = (block.split("\x1f") + ["", "", ""])[:4]
        pairs = tuple((k.strip(), v.strip()) for k, _, v in
                      (line.partition(":") for line in trailers.splitlines() if ":" in line))
        found.append(Request(sha.strip(), subject, datetime.fromisoformat(date.strip()), pairs))
    return found


def _signatures(c: gitstore.Clone, signers: Path, commits: list[str]) -> dict[str, tuple[str,
                                                                                        str]]:
    """commit -> (git's %G? verdict, the principal) against this allowed signers file. Only
    this file is trusted: ssh-keygen is OpenSSH's own, and an OpenPGP or X.509 signature
    (which git would check against the user's keyrings) is refused before git is asked."""
    if not commits:
        return {}
    verdicts = {}
    ssh = []
    for sha in commits:
        raw = c.out("cat-file", "commit", sha)
        header = raw.split("\n\n", 1)[0]
        if "\ngpgsig -----BEGIN SSH SIGNATURE-----" in header:
            ssh.append(sha)
        elif "\ngpgsig " in header:
            verdicts[sha] = ("P", "")
        else:
            verdicts[sha] = ("N", "")
    if not ssh:
        return verdicts
    out = c.git("-c", f"gpg.ssh.allowedSignersFile={signers}", "-c", "gpg.ssh.program=ssh-keygen",
                "-c", "gpg.program=stetho-no-openpgp", "-c", "gpg.x509.program=stetho-no-x509",
                "log", "--no-walk=unsorted", "--format=%H%x1f%G?%x1f%GS", *ssh).stdout
    for line in out.splitlines():
        sha, verdict, who = (line.split("\x1f") + ["", ""])[:3]
        verdicts[sha.strip()] = (verdict.strip(), who.strip())
    return verdicts


def from_git(repo: str, signers: Path, *, known: Collection[str]) -> FromGit:
    """Apply every signed resolution request in the knowledge base's history not applied yet
    (see the module text); push one commit for them all."""
    signers = signers.expanduser().resolve()
    if not signers.is_file():
        raise ConfigError(f"no allowed signers file at {signers} (an OpenSSH allowed signers "
                          "file: one `principal key-type key` line per person trusted to "
                          "resolve reports)")
    result = FromGit()

    def change(c: gitstore.Clone) -> str | None:
        result.applied.clear()
        result.refused.clear()
        result.superseded.clear()
        history = _history(c)
        applied = {v for r in history for v in r.values(APPLIES)}
        last: dict[str, int] = {}
        for i, r in enumerate(history):
            for rid in r.values(RESOLVED):
                last[rid] = i
        pending = [(i, r) for i, r in enumerate(history)
                   if r.values(RESOLVE) and r.commit not in applied]
        verdicts = _signatures(c, signers, [r.commit for _, r in pending])
        scanned = _scan(c.path) if pending else []
        written: list[str] = []
        for i, r in pending:
            why, meta = _judge(c, r, verdicts.get(r.commit, ("E", "")), signers, known,
                               scanned)
            if meta is not None and last.get(meta.id, -1) > i:
                result.superseded.append((r.commit, meta.id))
                continue
            if why or meta is None:
                result.refused.append((r.commit, f"refused commit {r.short}: {why}"))
                continue
            principal = verdicts[r.commit][1]
            res = Resolution(found=r.values(FOUND)[0], date=r.date, by=principal,
                             parts=tuple(r.values(PART)), note="\n".join(r.values(NOTE)),
                             commit=r.commit)
            written.append(_write(c, meta, res))
            last[meta.id] = len(history)
            result.applied.append((r.commit, meta.id, res.found, principal))
        if not result.applied:
            return None
        _write_index(c.path)
        c.git("add", "--", *sorted(set(written)), INDEX)
        n = len(result.applied)
        marks = "".join(f"{APPLIES}: {sha}\n" for sha, _, _, _ in result.applied)
        marks += "".join(f"{RESOLVED}: {rid}\n"
                         for rid in dict.fromkeys(rid for _, rid, _, _ in result.applied))
        return (f"kb: apply {n} signed resolution{'s' if n != 1 else ''}\n\n"
                + "".join(f"- {rid}: found {found} (signed by {who}, {sha[:12]})\n"
                          for sha, rid, found, who in result.applied) + "\n" + marks)

    result.commit = _transact(repo, change)
    return result


def _judge(c: gitstore.Clone, r: Request, verdict: tuple[str, str], signers: Path,
           known: Collection[str], scanned: list[ReportMeta]) -> tuple[str, ReportMeta | None]:
    """(why it is refused, or '' when it may be applied; the report it names, if found)."""
    refs, found = r.values(RESOLVE), r.values(FOUND)
    meta = None
    if len(refs) == 1:
        try:
            meta = find(c.path, refs[0], scanned)
        except ConfigError as exc:
            return str(exc), None
    if verdict[0] != "G":
        why = _SIGNATURE_WHY.get(verdict[0], f"git says {verdict[0]!r} about its signature")
        return why.format(signers=signers), meta
    if len(refs) != 1:
        return f"it must carry exactly one {RESOLVE} trailer (it has {len(refs)})", meta
    if len(found) != 1:
        return f"it must carry exactly one {FOUND} trailer (it has {len(found)})", meta
    try:
        check_found(found[0], known)
    except ConfigError as exc:
        return str(exc), meta
    return "", meta
