"""Two-person overrides, the records and their verification: real SSH keys made by OpenSSH's
ssh-keygen, real `ssh-keygen -Y verify` against a real allowed signers file, every refusal
asserted with its reason. The git store and the CLI are in test_override_store.py."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from stetho.errors import ConfigError
from stetho.gate import signature_cache, signatures
from stetho.gate.override_check import Check, RevocationVersion, judging
from stetho.gate.overrides import (
    SCHEMA,
    Override,
    OverrideFileError,
    OverridePolicy,
    SignFn,
    approval,
    approval_bytes,
    covers,
    parse_ts,
    request,
    request_bytes,
    revocation,
    with_approval,
)
from tests.conftest import StethoEnv
from tests.signing import ACK, People, agent_holding, make_people

NOW = float(parse_ts("2026-12-02T10:15:00Z"))
HOUR = 3600.0


@pytest.fixture(scope="session")
def people(tmp_path_factory: pytest.TempPathFactory) -> People:
    return make_people(tmp_path_factory.mktemp("people"))


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, stetho_env: StethoEnv) -> None:
    """Each test verifies from scratch: no answers cached by another test."""
    stetho_env.setenv("STETHO_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def policy(people: People) -> OverridePolicy:
    return OverridePolicy("release", ("bob", "carol"), people.signers, ACK, 7 * 86400)


def by(people: People, name: str) -> SignFn:
    return lambda message: signatures.sign(message, people.key(name))


def pending(people: People, policy: OverridePolicy, who: str = "alice",
            **kw: object) -> Override:
    args: dict[str, object] = {"check": "nccl_busbw", "nodes": ["gpu08", "gpu07"],
                               "reason": "RMA 4411 open, link slow", "expires_s": 24 * HOUR,
                               "now": NOW}
    args.update(kw)
    return request(policy, sign=by(people, who), **args)  # type: ignore[arg-type]


def approved(people: People, policy: OverridePolicy, approver: str = "bob", ack: str = ACK,
             at: float = NOW + 60, **kw: object) -> Override:
    o = pending(people, policy, **kw)
    return with_approval(o, approval(o, policy, ack, by(people, approver), at))


def verdict(o: Override, policy: OverridePolicy, now: float = NOW + 120,
            revocations: tuple[RevocationVersion, ...] = ()) -> Check:
    with judging(policy, None, revocations) as judge:
        return judge.verify(o, now)


def signed_as(o: Override, people: People, name: str, **edit: object) -> Override:
    """`o` edited, its request signed again by `name` (what someone holding that key could
    write without going through request()); its approvals are kept as they were."""
    edited = dataclasses.replace(o, **edit)  # type: ignore[arg-type]
    return dataclasses.replace(edited, signature=by(people, name)(request_bytes(edited)))


# -- the happy path and the exact scope ----------------------------------------------------------


def test_request_approve_verify_and_scope(people: People, policy: OverridePolicy) -> None:
    p = pending(people, policy)
    assert p.id.startswith("ovr-20261202T101500Z-") and p.nodes == ("gpu07", "gpu08")
    assert (p.requested_at, p.expires_at) == ("2026-12-02T10:15:00Z", "2026-12-03T10:15:00Z")
    c = verdict(p, policy)
    assert (c.state, c.reason, c.requester) == ("pending", "requested by alice, not approved",
                                                "alice")
    o = with_approval(p, approval(p, policy, ACK, by(people, "bob"), NOW + 60))
    c = verdict(o, policy)
    assert c.valid and c.state == "active", c.reason
    assert c.reason == "requested by alice, approved by bob, expires at 2026-12-03T10:15:00Z"
    assert c.honoured is not None
    assert (c.honoured.requester, c.honoured.approver, c.honoured.approved_at) == \
        ("alice", "bob", "2026-12-02T10:16:00Z")
    for node, ok in [("gpu07", True), ("gpu08", True), ("gpu09", False), ("gpu0", False),
                     ("gpu070", False)]:
        assert covers(o, "release", "nccl_busbw", node) is ok, node
    assert not covers(o, "release", "gpu_clocks", "gpu07")
    assert not covers(o, "nightly", "nccl_busbw", "gpu07")


def test_an_override_for_gpu02_does_not_cover_gpu020(people: People,
                                                     policy: OverridePolicy) -> None:
    o = approved(people, policy, nodes=["gpu02"])
    assert covers(o, "release", "nccl_busbw", "gpu02")
    assert not covers(o, "release", "nccl_busbw", "gpu020")
    assert not covers(o, "release", "nccl_busbw", "gpu2")


def test_json_round_trip_and_the_signed_bytes(people: People, policy: OverridePolicy) -> None:
    o = approved(people, policy)
    assert Override.from_json(o.to_json()) == o
    assert Override.from_json(o.to_json().encode()) == o
    signed = json.loads(request_bytes(o))
    assert signed["kind"] == "request" and signed["schema"] == SCHEMA
    assert signed["id"] == o.id and signed["nodes"] == ["gpu07", "gpu08"]
    assert "signature" not in signed and list(signed) == sorted(signed)
    a = o.approvals[0]
    both = json.loads(approval_bytes(o, a.acknowledgement, a.approved_at))
    assert both["kind"] == "approval" and both["acknowledgement"] == ACK
    assert len(both["request_signature"]) == 64  # the requester's very signature is signed
    for field, value in [("reason", "x"), ("nodes", ("gpu07",)), ("check", "gpu_clocks"),
                         ("expires_at", "2026-12-04T10:15:00Z"), ("policy", "nightly"),
                         ("requested_at", "2026-12-02T10:15:01Z"),
                         ("id", "ovr-20261202T101500Z-000000")]:
        assert request_bytes(dataclasses.replace(o, **{field: value})) != request_bytes(o), field
    other_sig = dataclasses.replace(o, signature=pending(people, policy).signature)
    assert approval_bytes(other_sig, ACK, a.approved_at) != \
        approval_bytes(o, ACK, a.approved_at)


# -- refusals when making records ----------------------------------------------------------------


def test_request_refusals(people: People, policy: OverridePolicy) -> None:
    with pytest.raises(ConfigError, match="must expire"):
        pending(people, policy, expires_s=0)
    with pytest.raises(ConfigError, match="must expire"):
        pending(people, policy, expires_s=-5)
    with pytest.raises(ConfigError, match=r"expiry 8d is over the cap of policy 'release' \(1w\)"):
        pending(people, policy, expires_s=8 * 86400)
    assert pending(people, policy, expires_s=7 * 86400).expires_at == "2026-12-09T10:15:00Z"
    with pytest.raises(ConfigError, match="reason must not be empty"):
        pending(people, policy, reason="  ")
    with pytest.raises(ConfigError, match="at least one node"):
        pending(people, policy, nodes=[])
    for bad in ["gpu07;rm -rf /", "gpu$(id)", "gpu07 gpu08", "`reboot`", "gpu07|x", "../etc"]:
        with pytest.raises(ConfigError, match="invalid node name"):
            pending(people, policy, nodes=["gpu01", bad])
    with pytest.raises(ConfigError, match="no wildcards"):
        pending(people, policy, check="nccl_*")
    for off in (dataclasses.replace(policy, acknowledgement=""),
                dataclasses.replace(policy, principals=()),
                dataclasses.replace(policy, signers=None)):
        with pytest.raises(ConfigError, match="overrides are disabled"):
            pending(people, off)


@pytest.mark.parametrize("ack", [ACK + " ", ACK.upper(), ACK.lower(), ACK[:-1], "", " " + ACK,
                                 ACK.replace(" ", "  ", 1), ACK.replace("a", "\u0430", 1)])
def test_acknowledgement_look_alikes_are_refused(people: People, policy: OverridePolicy,
                                                 ack: str) -> None:
    p = pending(people, policy)
    with pytest.raises(ConfigError, match="acknowledgement must be exactly"):
        approval(p, policy, ack, by(people, "bob"), NOW + 60)
    # Signed anyway, by hand, the gate refuses it too.
    a = dataclasses.replace(approval(p, policy, ACK, by(people, "bob"), NOW + 60),
                            acknowledgement=ack)
    a = dataclasses.replace(a, signature=by(people, "bob")(approval_bytes(p, ack, a.approved_at)))
    c = verdict(with_approval(p, a), policy)
    assert not c.valid and c.reason.startswith(f"the approval's acknowledgement {ack!r} is not")


def test_approval_refuses_expired_other_policy_post_dated_and_over_cap(
        people: People, policy: OverridePolicy) -> None:
    bob = by(people, "bob")
    p = pending(people, policy, expires_s=HOUR)
    with pytest.raises(ConfigError, match="expired at 2026-12-02T11:15:00Z"):
        approval(p, policy, ACK, bob, NOW + HOUR)
    with pytest.raises(ConfigError, match="is for policy 'release', not 'nightly'"):
        approval(p, dataclasses.replace(policy, name="nightly"), ACK, bob, NOW)
    post_dated = pending(people, policy, now=NOW + 6 * 86400)
    with pytest.raises(ConfigError, match="is dated 2026-12-08T10:15:00Z, in the future"):
        approval(post_dated, policy, ACK, bob, NOW)
    tighter = dataclasses.replace(policy, max_lifetime_s=HOUR / 2)
    with pytest.raises(ConfigError, match=r"lasts 1h, over the cap of policy 'release' \(30m\)"):
        approval(p, tighter, ACK, bob, NOW)
    disabled = dataclasses.replace(policy, problem="approvers is a list of names")
    with pytest.raises(ConfigError, match="list of names: overrides are disabled"):
        approval(p, disabled, ACK, bob, NOW)


def test_clock_skew_of_a_few_minutes_is_forgiven(people: People,
                                                 policy: OverridePolicy) -> None:
    # The requester's clock is 200 s ahead of the approver's: still approvable and valid.
    early = pending(people, policy, now=NOW + 200, expires_s=7 * 86400)
    o = with_approval(early, approval(early, policy, ACK, by(people, "bob"), NOW))
    assert verdict(o, policy, now=NOW + 300).valid
    # The approver's clock 10 minutes ahead of the gate's: not yet.
    p = pending(people, policy)
    ahead = with_approval(p, approval(p, policy, ACK, by(people, "bob"), NOW + 900))
    c = verdict(ahead, policy, now=NOW + 120)
    assert c.reason == "the approval is dated 2026-12-02T10:30:00Z, in the future"


# -- who signed: identity is the key's principal -------------------------------------------------


def test_self_approval_with_the_same_key_is_refused(people: People,
                                                    policy: OverridePolicy) -> None:
    o = approved(people, policy, approver="alice")
    c = verdict(o, policy)
    assert (c.valid, c.reason) == \
        (False, "self-approved: alice signed both the request and the approval with one key")


def test_self_approval_with_a_second_key_of_the_same_principal_is_refused(
        people: People, policy: OverridePolicy) -> None:
    # alice2 is listed under alice, and alice is even an approver here: one person still.
    lenient = dataclasses.replace(policy, principals=("alice", "bob"))
    o = approved(people, lenient, approver="alice2")
    c = verdict(o, lenient)
    assert not c.valid
    assert c.reason == ("self-approved: the approval is signed by alice, with a key also "
                        "listed for alice, who requested it (two keys of one principal are "
                        "one person)")


def test_one_key_under_two_principals_is_both_people(people: People, tmp_path: Path) -> None:
    # bob's key also listed as alice's: bob approving alice's request is alice approving it.
    signers = tmp_path / "allowed_signers"
    signers.write_text(people.signers.read_text() + people.line("bob", "alice,erin"))
    pol = OverridePolicy("release", ("bob", "carol"), signers, ACK, 7 * 86400)
    c = verdict(approved(people, pol), pol)
    assert not c.valid and c.reason.startswith("self-approved: the approval is signed by bob")


def test_a_key_not_in_the_signers_file_is_refused(people: People,
                                                  policy: OverridePolicy) -> None:
    c = verdict(approved(people, policy, approver="mallory"), policy)
    assert not c.valid
    assert c.reason.startswith(f"the approval's signature does not verify against "
                               f"{people.signers}: the key is not in the allowed signers file")
    c = verdict(approved(people, policy, who="mallory"), policy)
    assert not c.valid and c.reason.startswith("the request's signature does not verify")
    assert "the key is not in the allowed signers file" in c.reason


def test_a_listed_principal_who_is_not_an_approver_is_refused(people: People,
                                                              policy: OverridePolicy) -> None:
    c = verdict(approved(people, policy, approver="dave"), policy)
    assert (c.valid, c.reason) == (False, "the approval is signed by dave, who is not an "
                                          "approver for policy 'release' (approvers: bob, carol)")


def test_a_signature_made_for_another_namespace_is_refused(people: People,
                                                           policy: OverridePolicy) -> None:
    p = pending(people, policy)
    a = approval(p, policy, ACK, lambda m: signatures.sign(m, people.key("bob"), "git"),
                 NOW + 60)
    c = verdict(with_approval(p, a), policy)
    assert not c.valid and c.reason.endswith("namespace does not match"), c.reason
    git_request = request(policy, "nccl_busbw", ["gpu07"], "x", HOUR,
                          lambda m: signatures.sign(m, people.key("alice"), "git"), NOW)
    c = verdict(git_request, policy)
    assert c.state == "invalid" and c.reason.endswith("namespace does not match")


def test_an_ssh_agent_key_signs(people: People, policy: OverridePolicy, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`--key bob.pub` with bob's private key only in ssh-agent: ssh-keygen asks the agent."""
    public = tmp_path / "keys" / "bob.pub"  # no private key beside it
    public.parent.mkdir()
    public.write_text(people.pub("bob").read_text())
    with agent_holding(people.key("bob"), tmp_path) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        p = pending(people, policy)
        a = approval(p, policy, ACK, lambda m: signatures.sign(m, public), NOW + 60)
    c = verdict(with_approval(p, a), policy)
    assert c.valid and c.approver == "bob", c.reason
    monkeypatch.delenv("SSH_AUTH_SOCK")  # no agent: the public key alone cannot sign
    with pytest.raises(ConfigError, match=f"ssh-keygen could not sign with {public}"):
        signatures.sign(b"x", public)


def test_without_ssh_keygen_nothing_verifies(people: People, policy: OverridePolicy,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    o = approved(people, policy)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no OpenSSH on this PATH
    c = verdict(o, policy)
    assert c.state == "invalid" and c.reason.endswith(
        "ssh-keygen (OpenSSH) is not installed: overrides are signed and verified with it "
        "(Debian: apt-get install openssh-client)")
    with pytest.raises(signatures.SignatureError, match="is not installed"):
        signatures.sign(b"x", people.key("bob"))
    monkeypatch.setenv("PATH", path)
    assert verdict(o, policy).valid  # the fault was not remembered


def test_signing_needs_a_key_that_exists(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no signing key at .*pass --key or set "
                                          "STETHO_SIGNING_KEY"):
        signatures.sign(b"x", tmp_path / "id_ed25519")


# -- edits, replays and re-signing ---------------------------------------------------------------


@pytest.mark.parametrize("edit", [
    {"nodes": ("gpu07", "gpu08", "gpu09")},  # a node added by hand
    {"nodes": ("gpu09",)},
    {"check": "gpu_clocks"},
    {"expires_at": "2026-12-03T10:15:01Z"},  # expiry pushed out by one second
    {"expires_at": "2026-12-09T10:15:00Z"},
    {"reason": "nothing to see here"},
    {"requested_at": "2026-12-02T10:15:01Z"},
    {"policy": "release"},  # unchanged: still verifies (the control)
], ids=["node-added", "other-node", "other-check", "expiry+1s", "expiry+6d", "reason",
        "requested-at", "unchanged"])
def test_any_edit_after_signing_is_refused(people: People, policy: OverridePolicy,
                                           edit: dict[str, object]) -> None:
    o = approved(people, policy)
    edited = dataclasses.replace(o, **edit)  # type: ignore[arg-type]
    c = verdict(edited, policy)
    if edited == o:
        assert c.valid
    else:
        assert c.state == "invalid"
        assert c.reason == (f"the request's signature does not verify against "
                            f"{people.signers}: Signature verification failed: incorrect "
                            "signature")


def test_a_check_widened_to_a_wildcard_in_the_file_is_refused(people: People,
                                                              policy: OverridePolicy) -> None:
    d = json.loads(approved(people, policy).to_json())
    d["check"] = "*"
    with pytest.raises(OverrideFileError, match="no wildcards"):
        Override.from_json(json.dumps(d), "overrides/x.json")


def test_an_approver_re_signing_a_widened_scope_alone_is_refused(
        people: People, policy: OverridePolicy) -> None:
    o = approved(people, policy)
    wide = dataclasses.replace(o, nodes=("gpu07", "gpu08", "gpu09"), approvals=())
    # bob signs a fresh approval of the widened scope; alice's request signature is not hers
    # for these bytes any more.
    resigned = with_approval(wide, approval(wide, policy, ACK, by(people, "bob"), NOW + 60))
    c = verdict(resigned, policy)
    assert c.state == "invalid" and c.reason.startswith("the request's signature does not verify")
    # bob signing the widened request too is bob approving his own request.
    both = signed_as(wide, people, "bob")
    both = with_approval(both, approval(both, policy, ACK, by(people, "bob"), NOW + 60))
    assert verdict(both, policy).reason == \
        "self-approved: bob signed both the request and the approval with one key"


def test_replay_under_another_policy_node_set_or_id_is_refused(people: People,
                                                               policy: OverridePolicy) -> None:
    o = approved(people, policy)
    nightly = dataclasses.replace(policy, name="nightly")
    moved = dataclasses.replace(o, policy="nightly")
    c = verdict(moved, nightly)
    assert c.state == "invalid" and c.reason.startswith("the request's signature does not verify")
    assert verdict(o, nightly).reason == "for policy 'release', not 'nightly'"
    other_nodes = dataclasses.replace(o, nodes=("gpu11",))
    assert verdict(other_nodes, policy).reason.startswith("the request's signature does not")
    # bob's approval moved onto another request by alice (same scope, another id): refused.
    twin = pending(people, policy)
    c = verdict(dataclasses.replace(twin, approvals=o.approvals), policy)
    assert not c.valid and c.reason.startswith("the approval's signature does not verify")
    assert c.reason.endswith("incorrect signature")


def test_the_lifetime_cap_holds_for_records_signed_outside_request(
        people: People, policy: OverridePolicy) -> None:
    p = pending(people, policy)
    long = signed_as(p, people, "alice", expires_at="2026-12-12T10:15:00Z")
    long = with_approval(long, approval(long, dataclasses.replace(policy, max_lifetime_s=1e9),
                                        ACK, by(people, "bob"), NOW + 60))
    c = verdict(long, policy)
    assert (c.valid, c.reason) == (False, "lifetime 10d is over the cap of policy 'release' (1w)")
    # Post-dated: requested for "later", so a 7-day override would be in force for 13 days.
    later = signed_as(p, people, "alice", requested_at="2026-12-08T10:15:00Z",
                      expires_at="2026-12-15T10:15:00Z")
    a = approval(later, dataclasses.replace(policy, max_lifetime_s=1e9), ACK, by(people, "bob"),
                 NOW + 6 * 86400)
    a = dataclasses.replace(a, approved_at="2026-12-02T10:16:00Z")
    a = dataclasses.replace(a, signature=by(people, "bob")(approval_bytes(later, ACK,
                                                                           a.approved_at)))
    c = verdict(with_approval(later, a), policy)
    assert (c.valid, c.reason) == \
        (False, "the approval is dated 2026-12-02T10:16:00Z, outside the request's life "
                "(2026-12-08T10:15:00Z to 2026-12-15T10:15:00Z)")


def test_a_policy_tightened_after_approval_no_longer_holds(people: People,
                                                           policy: OverridePolicy) -> None:
    o = approved(people, policy)
    assert not verdict(o, dataclasses.replace(policy, principals=("carol",))).valid
    assert not verdict(o, dataclasses.replace(policy, acknowledgement="new words")).valid
    c = verdict(o, dataclasses.replace(policy, max_lifetime_s=HOUR))
    assert c.reason == "lifetime 1d is over the cap of policy 'release' (1h)"


def test_expired_revoked_and_several_approvals(people: People, policy: OverridePolicy) -> None:
    o = approved(people, policy)
    assert verdict(o, policy, now=NOW + 24 * HOUR - 1).valid
    c = verdict(o, policy, now=NOW + 24 * HOUR)
    assert (c.state, c.reason) == ("expired", "expired at 2026-12-03T10:15:00Z")
    r = revocation(o.id, "RMA done", by(people, "carol"), NOW + 300)
    c = verdict(o, policy, revocations=(RevocationVersion(o.id, "c0ffee" * 6, r),))
    assert (c.state, c.reason) == ("revoked", "revoked by carol at 2026-12-02T10:20:00Z "
                                              "(RMA done)")
    # A revocation counts even when its signature does not verify: it only takes power away.
    forged = revocation(o.id, "denial", by(people, "mallory"), NOW + 300)
    c = verdict(o, policy, revocations=(RevocationVersion(o.id, "c0ffee" * 6, forged),))
    assert c.state == "revoked" and "does not verify" in c.reason and "counts anyway" in c.reason
    # An approval by someone the policy does not trust, then a proper one: the proper one counts.
    p = pending(people, policy)
    two = with_approval(p, approval(p, policy, ACK, by(people, "mallory"), NOW + 30))
    assert not verdict(two, policy).valid
    two = with_approval(two, approval(two, policy, ACK, by(people, "carol"), NOW + 60))
    c = verdict(two, policy)
    assert c.valid and c.approver == "carol"


def test_a_missing_signers_file_disables_overrides(people: People, policy: OverridePolicy,
                                                   tmp_path: Path) -> None:
    gone = dataclasses.replace(policy, signers=tmp_path / "no-such-file")
    c = verdict(approved(people, policy), gone)
    assert (c.valid, c.reason) == (False, f"policy 'release': its allowed signers file "
                                          f"{tmp_path / 'no-such-file'} does not exist: "
                                          "overrides are disabled")


def test_a_signers_file_listing_no_key_accepts_nothing(people: People, policy: OverridePolicy,
                                                       tmp_path: Path) -> None:
    from stetho.core.resources import shipped

    example = dataclasses.replace(policy, signers=shipped("gates") / "allowed_signers")
    c = verdict(approved(people, policy), example)
    assert not c.valid and "the key is not in the allowed signers file" in c.reason


# -- the verification cache ----------------------------------------------------------------------


def test_answers_are_cached_by_content_and_a_foreign_cache_is_not_trusted(
        people: People, policy: OverridePolicy, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "override-signatures.json"
    o = approved(people, policy)
    assert verdict(o, policy).valid
    entries = json.loads(cache.read_text())
    # which principals list each key, each signature as its principal (ok), and whether the
    # approver's key is also alice's and the requester's also bob's (no): all kept
    assert sorted(v[0] for v in entries.values()) == ["no", "no", "ok", "ok", "ok", "ok"]
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    assert signature_cache.load(cache) == {k: v[:-1] for k, v in entries.items()}  # HMACs hold
    # A forged "ok" for every question: never trusted, not even in the user's own file.
    bad = approved(people, policy, approver="mallory")
    with signatures.Verifier(people.signers) as v:
        keys = [v._key("find", bad.approvals[0].signature, b"", ""),
                v._key("verify", bad.approvals[0].signature,
                       approval_bytes(bad, ACK, bad.approvals[0].approved_at), "bob")]
    forged = json.dumps({**entries, keys[0]: ["ok", "bob"], keys[1]: ["ok", "SHA256:forged"]})
    cache.write_text(forged)
    os.chmod(cache, 0o666)
    assert not verdict(bad, policy).valid
    assert oct(cache.stat().st_mode & 0o777) == "0o600"  # written again, as this user's own
    cache.write_text(forged)
    assert not verdict(bad, policy).valid  # no HMAC under this user's secret: asked again
    stolen = {k: [*v, entries[next(iter(entries))][-1]] for k, v in json.loads(forged).items()
              if k not in entries}
    cache.write_text(json.dumps({**entries, **stolen}))
    assert not verdict(bad, policy).valid  # another entry's HMAC does not fit
    # A different signers file is a different question: nothing cached applies.
    other = tmp_path / "signers2"
    other.write_text(people.signers.read_text() + "\n")
    assert not verdict(bad, dataclasses.replace(policy, signers=other)).valid


def test_time_bound_signers_files_are_not_cached_on_disk(people: People, tmp_path: Path,
                                                         policy: OverridePolicy) -> None:
    signers = tmp_path / "allowed_signers"
    signers.write_text(people.line("alice") + people.line("bob").replace(
        "bob ", 'bob valid-after="20200101" ', 1))
    pol = dataclasses.replace(policy, signers=signers)
    assert verdict(approved(people, pol), pol).valid
    assert not (tmp_path / "cache" / "override-signatures.json").exists()


# -- the allowed signers file's syntax -----------------------------------------------------------


@pytest.mark.parametrize(("line", "why"), [
    ("*@corp {key}", "principal '*@corp' is not supported"),
    ("alice,!bob {key}", "principal '!bob' is not supported"),
    ('"alice bob" {key}', "principal '\"alice bob\"' is not supported"),
    ("al?ce {key}", "principal 'al?ce' is not supported"),
    ('alice restrict {key}', "option 'restrict' is not supported"),
    ('alice permitopen="x:1" {key}', "option 'permitopen=\"x:1\"' is not supported"),
    ("alice", "no public key"),
    ("alice ssh-ed25519 not*base64", "no public key"),
], ids=["pattern", "negation", "quoted", "wildcard", "unknown-option", "option-value",
        "no-key", "bad-blob"])
def test_unsupported_signers_syntax_is_a_named_error_at_load(
        people: People, policy: OverridePolicy, tmp_path: Path, line: str, why: str) -> None:
    key = " ".join(people.pub("bob").read_text().split()[:2])
    signers = tmp_path / "allowed_signers"
    signers.write_text("# ok\n\n" + people.line("alice") + line.format(key=key) + "\n")
    with pytest.raises(ConfigError, match=f"^{signers}:4: ") as err:
        signatures.Verifier(signers)
    assert why in str(err.value)
    c = verdict(approved(people, policy), dataclasses.replace(policy, signers=signers))
    assert c.state == "invalid" and why in c.reason and c.reason.endswith(
        "overrides are disabled")


def test_supported_signers_options_load(people: People, policy: OverridePolicy,
                                        tmp_path: Path) -> None:
    signers = tmp_path / "allowed_signers"
    signers.write_text(people.line("alice", 'alice namespaces="stetho-override,git"')
                       + people.line("bob", 'bob valid-after="20200101",valid-before="29991231"')
                       + people.line("carol", "carol cert-authority")
                       + "  # indented comment\n")
    c = verdict(approved(people, policy), dataclasses.replace(policy, signers=signers))
    assert c.state == "active", c.reason


# -- files that are not overrides ----------------------------------------------------------------


def _file(people: People, policy: OverridePolicy, **kw: object) -> bytes:
    d = json.loads(approved(people, policy).to_json())
    d.update(kw)
    return json.dumps(d).encode()


def _without(people: People, policy: OverridePolicy, field: str) -> bytes:
    d = json.loads(approved(people, policy).to_json())
    del d[field]
    return json.dumps(d).encode()


OLD_FORMAT = json.dumps({
    "schema": "stetho.override/1", "id": "ovr-20261202T101500Z-abcdef", "policy": "release",
    "check": "nccl_busbw", "nodes": ["gpu07"], "reason": "x", "requester": "alice",
    "requested_at": "2026-12-02T10:15:00Z", "expires_at": "2026-12-03T10:15:00Z",
    "approver": "bob", "approved_at": "2026-12-02T10:16:00Z", "acknowledgement": ACK,
    "signature": "5e" * 32, "revoked_by": None, "revoked_at": None}).encode()

GARBAGE: list[tuple[str, object, str]] = [
    ("empty", b"", "not valid JSON"),
    ("text", b"not json at all {", "not valid JSON"),
    ("binary", b"\xff\xfe\x00garbage", "not valid JSON"),
    ("deep", b"[" * 100_000, "not valid JSON"),
    ("list", b"[1, 2]", "expected a JSON object, got list"),
    ("string", b'"a string"', "expected a JSON object, got str"),
    ("no-schema", b"{}", "unknown schema None"),
    ("old-hmac", OLD_FORMAT, r"the old shared-key \(HMAC\) format .* ignored; request it again"),
    ("future-schema", {"schema": "stetho.override/3"}, "unknown schema 'stetho.override/3'"),
    ("no-expiry", "-expires_at", r"missing field\(s\): expires_at"),
    ("no-nodes", "-nodes", r"missing field\(s\): nodes"),
    ("extra", {"extra": "x"}, r"unknown field\(s\): extra"),
    ("nodes-str", {"nodes": "gpu07"}, "nodes must be a list of strings"),
    ("nodes-int", {"nodes": [7]}, "nodes must be a list of strings"),
    ("nodes-shell", {"nodes": ["gpu07;curl evil|sh"]}, "invalid node name 'gpu07;curl evil|sh'"),
    ("nodes-empty", {"nodes": []}, "at least one node"),
    ("check-star", {"check": "*"}, "no wildcards"),
    ("expiry-word", {"expires_at": "tomorrow"}, "expires_at 'tomorrow' is not an ISO-8601"),
    ("expiry-bad", {"expires_at": "2026-13-45T99:00:00Z"}, "not a valid date"),
    ("expiry-early", {"expires_at": "2026-12-01T00:00:00Z"}, "is not after requested_at"),
    ("reason-int", {"reason": 7}, "field 'reason' must be a string"),
    ("sig-none", {"signature": None}, "field 'signature' must be a string"),
    ("sig-hex", {"signature": "ab" * 32}, "signature is not an SSH signature"),
    ("approvals-obj", {"approvals": {}}, "approvals must be a list"),
    ("approval-str", {"approvals": ["x"]}, "approval 1 is not an object"),
    ("approval-field", {"approvals": [{"acknowledgement": ACK}]},
     r"approval 1: missing field\(s\): approved_at, signature"),
    ("id-path", {"id": "../../etc/passwd"}, "is not of the form ovr-"),
    ("duplicate", b'{"schema": "stetho.override/2", "schema": "x"}', "duplicate key 'schema'"),
]


@pytest.mark.parametrize(("data", "why"), [(d, w) for _, d, w in GARBAGE],
                         ids=[name for name, _, _ in GARBAGE])
def test_from_json_refuses_garbage_with_a_reason(people: People, policy: OverridePolicy,
                                                 data: object, why: str) -> None:
    if isinstance(data, dict):
        data = _file(people, policy, **data)
    elif isinstance(data, str):
        data = _without(people, policy, data[1:])
    assert isinstance(data, bytes)
    with pytest.raises(OverrideFileError, match=why) as info:
        Override.from_json(data, "overrides/x.json")
    assert str(info.value).startswith("overrides/x.json: ")
    assert isinstance(info.value, ConfigError)
