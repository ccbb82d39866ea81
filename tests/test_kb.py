"""The knowledge base against real git: a bare remote under tmp_path, cached clones, working
clones, eight publishers racing, pushes that fail, search and similar."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from stetho.cli.kb import kb as kb_cli
from stetho.errors import ConfigError, StethoError
from stetho.publish import kb
from tests.conftest import StethoEnv

T0 = datetime(2026, 12, 2, 10, 15, tzinfo=timezone.utc)


# -- helpers ----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def gitenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv) -> Path:
    """Git that works anywhere and ignores the machine's config: an identity, 'main' as the
    default branch. Set in os.environ, so the subprocess publishers inherit it too."""
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = KB Test\n\temail = kb@test.invalid\n"
                   "[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for who in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{who}_NAME", "KB Test")
        monkeypatch.setenv(f"GIT_{who}_EMAIL", "kb@test.invalid")
    stetho_env.setenv("STETHO_CACHE", str(tmp_path / "cache"))
    stetho_env.setenv("STETHO_SPOOL", str(tmp_path / "spool"))
    stetho_env.delenv("STETHO_KB_REPO", raising=False)
    return cfg


def git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """An empty bare repository: the first publish creates its branch."""
    path = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(path))
    return path


def make_report(where: Path, node: str, cause: str, when: datetime, *,
                signature: list[str] | None = None, checks: list[str] | None = None,
                body: str = "", status: str = "open", cause_title: str | None = None,
                asset: bool = True, salt: str = "") -> Path:
    """A report as stetho renders it: its own folder, front matter, a body, and a trend SVG
    linked by relative path."""
    rid = (f"rpt-{when:%Y%m%dT%H%M%SZ}-{node}-"
           f"{hashlib.sha1((node + cause + salt + when.isoformat()).encode()).hexdigest()[:6]}")
    folder = where / rid
    folder.mkdir(parents=True)
    svg = f"{node}-{cause}-{rid}-trend.svg"
    sig = sorted(signature if signature is not None else ["pcie_aer", "nccl_busbw"])
    chk = checks if checks is not None else ["pcie_aer"]
    text = ("---\n"
            f"id: {rid}\n"
            f"date: {when:%Y-%m-%dT%H:%M:%SZ}\n"
            f"node: {node}\n"
            f"cause: {cause}\n"
            f"cause_title: {cause_title or cause.replace('-', ' ').title()}\n"
            f"status: {status}\n"
            f"run: {when:%Y%m%dT%H%M%SZ}-3fa9c1\n"
            f"signature: [{', '.join(sig)}]\n"
            f"checks: [{', '.join(chk)}]\n"
            + (f"assets: [{svg}]\n" if asset else "")
            + "---\n"
            f"# {node}: {cause}\n\n{body}\n"
            + (f"\n![trend]({svg})\n" if asset else ""))
    (folder / "diagnosis-report.md").write_text(text)
    if asset:
        (folder / svg).write_text(f"<svg xmlns='http://www.w3.org/2000/svg'><!-- {rid} --></svg>")
    return folder / "diagnosis-report.md"


def remote_files(remote: Path, branch: str = "main") -> list[str]:
    return git("--git-dir", str(remote), "ls-tree", "-r", "--name-only", branch).split()


def remote_show(remote: Path, path: str, branch: str = "main") -> str:
    return git("--git-dir", str(remote), "show", f"{branch}:{path}")


def added_in_history(remote: Path, branch: str = "main") -> list[str]:
    """Every report file an add in the remote's history created, with repeats."""
    out = git("--git-dir", str(remote), "log", "--diff-filter=A", "--name-only", "--format=",
              branch, "--", "reports/")
    return [f for f in out.split() if f.endswith(".md")]


def index_ids(readme: str) -> list[str]:
    rows = [line for line in readme.splitlines() if line.startswith("| 20")]
    return [row.split("[", 1)[1].split("]", 1)[0] for row in rows]


def spooled(spool: Path) -> list[str]:
    return sorted(p.name for p in spool.iterdir() if not p.name.startswith(".")) \
        if spool.is_dir() else []


# -- reading reports ------------------------------------------------------------------------

def test_read_report_front_matter(tmp_path: Path) -> None:
    path = make_report(tmp_path, "node07", "riser-pcie-slot", T0,
                       signature=["xid-79", "pcie_aer"], body="Xid 79 after AER bursts.")
    meta = kb.read_report(path)
    assert meta.node == "node07" and meta.cause == "riser-pcie-slot"
    assert meta.date == T0 and meta.status == "open"
    assert meta.signature == ("pcie_aer", "xid-79")
    assert meta.checks == ("pcie_aer",)
    assert meta.assets and meta.assets[0].endswith("-trend.svg")
    assert "Xid 79" in meta.body
    assert meta.repo_path == f"reports/2026/12/02/node07-riser-pcie-slot-{meta.id}.md"
    assert meta.to_dict()["date"] == "2026-12-02T10:15:00Z"


def test_file_without_front_matter_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "notes.md"
    plain.write_text("# just notes\n\nno front matter here\n")
    with pytest.raises(ConfigError, match=r"notes\.md: not a diagnosis report: it has no YAML "
                                          r"front matter"):
        kb.read_report(plain)
    with pytest.raises(ConfigError, match="notes.md"):
        kb.spool([plain], tmp_path / "spool")
    broken = tmp_path / "broken.md"
    broken.write_text("---\nid: rpt-x\nnode: [unclosed\n---\nbody\n")
    with pytest.raises(ConfigError, match=r"broken\.md: the front matter is not valid YAML"):
        kb.read_report(broken)
    partial = tmp_path / "partial.md"
    partial.write_text("---\nid: rpt-x\nnode: node01\n---\nbody\n")
    with pytest.raises(ConfigError, match=r"partial\.md: the front matter lacks date, cause"):
        kb.read_report(partial)
    evil = tmp_path / "evil.md"
    evil.write_text("---\nid: ../../etc\ndate: 2026-12-02T10:15:00Z\nnode: n\ncause: c\n---\n")
    with pytest.raises(ConfigError, match="becomes part of a file name"):
        kb.read_report(evil)
    # Through the CLI: a clear message, nothing spooled.
    result = CliRunner().invoke(kb_cli, ["publish", "--repo", str(tmp_path / "r"), str(plain)])
    assert isinstance(result.exception, ConfigError)
    assert "no YAML front matter" in str(result.exception)
    assert spooled(tmp_path / "spool") == []


def test_missing_listed_asset_is_refused(tmp_path: Path) -> None:
    path = make_report(tmp_path, "node01", "gpu-fell-off-bus", T0)
    for svg in path.parent.glob("*.svg"):
        svg.unlink()
    with pytest.raises(ConfigError, match="listed in the front matter is missing"):
        kb.spool([path], tmp_path / "spool")


def test_find_reports_walks_directories(tmp_path: Path) -> None:
    a = make_report(tmp_path / "runs", "node01", "riser-pcie-slot", T0)
    b = make_report(tmp_path / "runs" / "deeper", "node02", "hbm-ecc", T0)
    (tmp_path / "runs" / "README.md").write_text("# not a report\n")
    (tmp_path / "runs" / "page.md").write_text("---\ntitle: a page, not a report\n---\nhi\n")
    assert sorted(kb.find_reports([tmp_path / "runs", a])) == sorted([a, b])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no diagnosis reports"):
        kb.find_reports([tmp_path / "empty"])


# -- publishing -------------------------------------------------------------------------------

def test_publish_to_bare_remote(tmp_path: Path, remote: Path) -> None:
    spool = tmp_path / "spool"
    r1 = make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)
    r2 = make_report(tmp_path / "in", "node03", "xid-79", T0 + timedelta(hours=2))
    kb.spool([r1, r2], spool)
    assert len(spooled(spool)) == 2
    result = kb.publish(str(remote), spool=spool)
    m1, m2 = kb.read_report(r1), kb.read_report(r2)
    assert sorted(result.published) == sorted([m1.id, m2.id]) and result.already == []
    assert result.commit and result.paths[m1.id] == m1.repo_path
    files = remote_files(remote)
    assert m1.repo_path in files and m2.repo_path in files
    assert f"reports/2026/12/02/{m1.assets[0]}" in files  # asset beside the report
    assert "README.md" in files
    readme = remote_show(remote, "README.md")
    assert index_ids(readme) == [m2.id, m1.id]  # newest first
    assert f"[{m1.id}]({m1.repo_path})" in readme
    assert "| node07 | Riser Pcie Slot (`riser-pcie-slot`) | open |" in readme
    subject = git("--git-dir", str(remote), "log", "-1", "--format=%s", "main").strip()
    assert subject == "kb: publish 2 reports (node07 riser-pcie-slot, node03 xid-79)"
    assert git("--git-dir", str(remote), "rev-parse", "main").strip() == result.commit
    assert spooled(spool) == []  # pushed, so forgotten
    # The published copy is byte-identical and its relative link still resolves beside it.
    assert remote_show(remote, m1.repo_path) == r1.read_text()

    # Republishing the same report: listed as already, no new commit, added once in history.
    kb.spool([r1], spool)
    again = kb.publish(str(remote), spool=spool)
    assert again.published == [] and again.already == [m1.id] and again.commit is None
    assert again.paths[m1.id] == m1.repo_path
    assert git("--git-dir", str(remote), "rev-parse", "main").strip() == result.commit
    assert added_in_history(remote).count(m1.repo_path) == 1
    assert spooled(spool) == []


def test_empty_spool_is_a_noop(tmp_path: Path) -> None:
    result = kb.publish(str(tmp_path / "no-such-remote.git"), spool=tmp_path / "spool")
    assert result == kb.PublishResult([], [], str(tmp_path / "no-such-remote.git"))
    assert not (tmp_path / "cache").exists()  # not even a clone attempt


def test_publish_into_working_clone(tmp_path: Path, remote: Path) -> None:
    """A working clone path: publish commits there and pushes its branch; a local-only
    repository (no remote) just gets the commit."""
    first = make_report(tmp_path / "in", "node01", "hbm-ecc", T0)
    kb.spool([first], tmp_path / "spool")
    kb.publish(str(remote))  # seed the remote through the cached clone
    work = tmp_path / "work"
    git("clone", "-q", str(remote), str(work))
    second = make_report(tmp_path / "in", "node02", "hbm-ecc", T0 + timedelta(days=1))
    kb.spool([second])
    result = kb.publish(str(work))
    meta = kb.read_report(second)
    assert result.published == [meta.id]
    assert (work / meta.repo_path).is_file()
    assert git("rev-parse", "HEAD", cwd=work).strip() == \
        git("--git-dir", str(remote), "rev-parse", "main").strip()
    assert index_ids((work / "README.md").read_text()) == [meta.id, kb.read_report(first).id]
    # Uncommitted changes in the user's clone are not ours to sweep into a commit.
    (work / "README.md").write_text("hand edit\n")
    kb.spool([make_report(tmp_path / "in", "node03", "hbm-ecc", T0 + timedelta(days=2))])
    with pytest.raises(ConfigError, match="uncommitted changes"):
        kb.publish(str(work))
    assert len(spooled(tmp_path / "spool")) == 1
    git("checkout", "--", "README.md", cwd=work)
    assert len(kb.publish(str(work)).published) == 1

    local = tmp_path / "local"
    git("init", "-q", str(local))
    kb.spool([first])
    res = kb.publish(str(local))
    assert res.published == [kb.read_report(first).id] and res.commit
    assert git("log", "--format=%s", cwd=local).startswith("kb: publish 1 report (node01")


def test_asset_name_clash_is_renamed_and_link_rewritten(tmp_path: Path, remote: Path) -> None:
    a = make_report(tmp_path / "a", "node01", "riser-pcie-slot", T0, asset=False)
    b = make_report(tmp_path / "b", "node02", "riser-pcie-slot", T0, asset=False)
    for path, colour in ((a, "red"), (b, "blue")):
        path.write_text(path.read_text() + "\n![chart](trend.svg)\n")
        (path.parent / "trend.svg").write_text(f"<svg fill='{colour}'/>")
    kb.spool([a])
    kb.publish(str(remote))
    kb.spool([b])
    kb.publish(str(remote))
    mb = kb.read_report(b)
    files = remote_files(remote)
    assert "reports/2026/12/02/trend.svg" in files
    renamed = f"reports/2026/12/02/{mb.id}-trend.svg"
    assert renamed in files and "blue" in remote_show(remote, renamed)
    assert f"![chart]({mb.id}-trend.svg)" in remote_show(remote, mb.repo_path)


def test_index_conflict_on_rebase_is_regenerated(tmp_path: Path, remote: Path) -> None:
    """A working clone holds a local publish commit while the remote moved on: both changed
    README.md. The rebase takes the remote's side of the derived index, and the next commit
    regenerates it with every report."""
    src = tmp_path / "in"
    a1 = make_report(src, "node01", "hbm-ecc", T0)
    kb.spool([a1])
    kb.publish(str(remote))
    work = tmp_path / "work"
    git("clone", "-q", str(remote), str(work))
    git("remote", "remove", "origin", cwd=work)  # offline: a local-only commit
    b1 = make_report(src, "node02", "hbm-ecc", T0 + timedelta(hours=1))
    kb.spool([b1])
    kb.publish(str(work))
    a2 = make_report(src, "node03", "hbm-ecc", T0 + timedelta(hours=2))
    kb.spool([a2])
    kb.publish(str(remote))  # meanwhile, through another clone
    git("remote", "add", "origin", str(remote), cwd=work)
    b2 = make_report(src, "node04", "hbm-ecc", T0 + timedelta(hours=3))
    kb.spool([b2])
    result = kb.publish(str(work))
    assert result.published == [kb.read_report(b2).id]  # b1 left the spool when committed
    every = [kb.read_report(p) for p in (b2, a2, b1, a1)]
    assert index_ids(remote_show(remote, "README.md")) == [m.id for m in every]
    assert sorted(added_in_history(remote)) == sorted(m.repo_path for m in every)
    assert "<<<<<<<" not in remote_show(remote, "README.md")
    assert git("status", "--porcelain", cwd=work).strip() == ""


# -- failures keep reports in the spool ----------------------------------------------------------

def test_push_rejected_by_remote_keeps_the_spool(tmp_path: Path, remote: Path) -> None:
    """The remote refuses writes (a pre-receive hook: works even when the tests run as root,
    where chmod would not stop a push). The report stays spooled; once the remote accepts
    again, a publish without arguments lands it."""
    spool = tmp_path / "spool"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'read-only maintenance window' >&2\nexit 1\n")
    hook.chmod(0o755)
    report = make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)
    kb.spool([report], spool)
    with pytest.raises(kb.KBError) as info:
        kb.publish(str(remote), spool=spool)
    msg = str(info.value)
    assert "git push origin HEAD:refs/heads/main" in msg and "pre-receive hook declined" in msg
    assert "read-only maintenance window" in msg and f"stay in the spool {spool}" in msg
    assert spooled(spool) == [kb.read_report(report).id]
    assert git("--git-dir", str(remote), "branch", "--list").strip() == ""
    hook.unlink()
    result = kb.publish(str(remote), spool=spool)
    assert result.published == [kb.read_report(report).id]
    assert spooled(spool) == []
    assert added_in_history(remote) == [kb.read_report(report).repo_path]


def test_missing_remote_keeps_the_spool(tmp_path: Path, remote: Path) -> None:
    """The remote path disappears (an unmounted share): through a working clone the fetch
    fails, through a URL the reachability check does; either way the report stays spooled and
    lands once the remote is back."""
    seed = make_report(tmp_path / "in", "node01", "hbm-ecc", T0)
    kb.spool([seed])
    kb.publish(str(remote))
    work = tmp_path / "work"
    git("clone", "-q", str(remote), str(work))
    moved = tmp_path / "moved.git"
    remote.rename(moved)
    report = make_report(tmp_path / "in", "node09", "xid-79", T0 + timedelta(hours=1))
    kb.spool([report])
    with pytest.raises(kb.KBError, match=r"`git fetch --quiet --prune -- origin` failed "
                                         r".*does not appear to be a git repository"):
        kb.publish(str(work))
    with pytest.raises(kb.KBError, match=r"`git ls-remote --symref .*remote\.git HEAD` failed"):
        kb.publish(str(remote))
    assert spooled(tmp_path / "spool") == [kb.read_report(report).id]
    moved.rename(remote)
    assert kb.publish(str(work)).published == [kb.read_report(report).id]
    assert spooled(tmp_path / "spool") == []
    assert kb.read_report(report).repo_path in remote_files(remote)


# -- eight publishers at once ---------------------------------------------------------------------

CHILD = r"""
import json, sys, time
from pathlib import Path
from stetho.publish.kb import publish
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.005)
r = publish(sys.argv[1], spool=Path(sys.argv[2]))
print(json.dumps({"published": r.published, "already": r.already, "commit": r.commit}))
"""


@pytest.mark.slow
def test_eight_concurrent_publishers(tmp_path: Path, remote: Path) -> None:
    """Eight processes, released together, publish into one empty bare remote: four through
    their own cached clone (separate STETHO_CACHE), four through their own working clone.
    Each has two reports of its own, and all eight carry one shared report. Every push but one
    per round is rejected, so they rebase over each other's index; at the end every report is
    in the tree and was added exactly once in history, and the index lists all of them."""
    n = 8
    go = tmp_path / "go"
    procs: list[subprocess.Popen[str]] = []
    shared = make_report(tmp_path / "shared", "node99", "hbm-ecc", T0 - timedelta(days=1))
    expected = {kb.read_report(shared).id: kb.read_report(shared).repo_path}
    for i in range(n):
        spool = tmp_path / f"spool{i}"
        mine = [make_report(tmp_path / f"in{i}", f"node{i:02d}", cause,
                            T0 + timedelta(minutes=7 * i + j), salt=str(i))
                for j, cause in enumerate(("riser-pcie-slot", "xid-79"))]
        kb.spool([*mine, shared], spool)
        expected.update({kb.read_report(p).id: kb.read_report(p).repo_path for p in mine})
        if i % 2:
            repo = str(tmp_path / f"work{i}")
            git("clone", "-q", str(remote), repo)
        else:
            repo = str(remote)
        env = {**os.environ, "STETHO_CACHE": str(tmp_path / f"cache{i}")}
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, repo, str(spool), str(go)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env))
    time.sleep(0.5)  # let every child import and reach the starting line
    start = time.monotonic()
    go.touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    elapsed = time.monotonic() - start
    print(f"8 concurrent publishers took {elapsed:.1f}s")

    published = [rid for o in outs for rid in o["published"]]
    assert sorted(published) == sorted(expected)  # every report published by exactly one
    shared_id = kb.read_report(shared).id
    assert sum(shared_id in o["already"] for o in outs) == n - 1
    files = remote_files(remote)
    history = added_in_history(remote)
    for rid, path in expected.items():
        assert path in files, rid
        assert history.count(path) == 1, path
    assert len(history) == len(expected)
    readme = remote_show(remote, "README.md")
    ids = index_ids(readme)
    assert sorted(ids) == sorted(expected)
    dates = [kb.read_report(p).date for p in
             [tmp_path / "shared" / shared_id / "diagnosis-report.md"]]
    assert ids[-1] == shared_id and dates  # the oldest report is the last row
    assert f"{len(expected)} reports." in readme
    subjects = git("--git-dir", str(remote), "log", "--format=%s", "main").splitlines()
    assert len(subjects) == n  # one commit per publisher, none for the index alone
    assert all(s.startswith("kb: publish ") for s in subjects)
    for i in range(n):
        assert spooled(tmp_path / f"spool{i}") == []


# -- search and similar ----------------------------------------------------------------------------

@pytest.fixture
def populated(tmp_path: Path, remote: Path) -> dict[str, Path]:
    """A knowledge base of five incidents (and the new one, published last)."""
    src = tmp_path / "in"
    reports = {
        "old_same": make_report(src, "node07", "riser-pcie-slot", T0 - timedelta(days=30),
                                signature=["pcie_aer"], status="resolved",
                                body="Reseated the riser."),
        "other_node": make_report(src, "node12", "riser-pcie-slot", T0 - timedelta(days=10),
                                  signature=["pcie_aer", "nccl_busbw", "xid-79"]),
        "same_node_other_cause": make_report(src, "node07", "hbm-ecc", T0 - timedelta(days=5),
                                             signature=["pcie_aer", "nccl_busbw", "xid-79"],
                                             checks=["gpu_ecc"]),
        "body_xid": make_report(src, "node03", "thermal", T0 - timedelta(days=2),
                                signature=["gpu_temperature"], checks=["gpu_temp"],
                                body="The GPU logged Xid 79 (fallen off the bus) at 90 C."),
        "unrelated": make_report(src, "node20", "nvme-slow", T0 - timedelta(days=1),
                                 signature=["nvme_latency"], checks=["nvme"],
                                 body="sm_790 build; 2079 MB/s."),
        "new": make_report(src, "node07", "riser-pcie-slot", T0,
                           signature=["pcie_aer", "nccl_busbw", "xid-79"]),
        "later": make_report(src, "node07", "riser-pcie-slot", T0 + timedelta(days=3),
                             signature=["pcie_aer", "nccl_busbw", "xid-79"]),
    }
    kb.spool(reports.values())
    kb.publish(str(remote))
    return reports


def ids(metas: list[kb.ReportMeta]) -> list[str]:
    return [m.id for m in metas]


def test_search(remote: Path, populated: dict[str, Path]) -> None:
    rid = {k: kb.read_report(p).id for k, p in populated.items()}
    repo = str(remote)
    # "xid 79": the signature entry xid-79, or the body text "Xid 79"; newest first.
    assert ids(kb.search(repo, "xid 79")) == [rid["later"], rid["new"], rid["body_xid"],
                                             rid["same_node_other_cause"], rid["other_node"]]
    assert ids(kb.search(repo, "XID-79")) == ids(kb.search(repo, "xid 79"))
    assert ids(kb.search(repo, "node07")) == [rid["later"], rid["new"],
                                              rid["same_node_other_cause"], rid["old_same"]]
    assert ids(kb.search(repo, "riser-pcie-slot node12")) == [rid["other_node"]]
    assert ids(kb.search(repo, "Riser card")) == []  # every word must match
    assert ids(kb.search(repo, "riser reseated")) == [rid["old_same"]]
    assert ids(kb.search(repo, "nvme")) == [rid["unrelated"]]
    assert rid["unrelated"] not in ids(kb.search(repo, "79"))  # numbers start a word
    assert ids(kb.search(repo, "ecc")) == [rid["same_node_other_cause"]]  # inside hbm-ecc
    assert len(kb.search(repo, "")) == len(populated)
    # A working clone and a plain folder of reports are searchable too.
    work = remote.parent / "work-search"
    git("clone", "-q", str(remote), str(work))
    assert ids(kb.search(str(work), "xid 79")) == ids(kb.search(repo, "xid 79"))
    assert ids(kb.search(str(populated["new"].parent.parent), "node12")) == [rid["other_node"]]


def test_similar(remote: Path, populated: dict[str, Path]) -> None:
    rid = {k: kb.read_report(p).id for k, p in populated.items()}
    ranked = kb.similar(str(remote), populated["new"])
    assert [m.id for m, _ in ranked] == [rid["old_same"], rid["other_node"],
                                         rid["same_node_other_cause"]]
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True) and all(0 < s <= 1 for s in scores)
    # Not itself (it is in the repository too), not the later incident, nothing unrelated.
    assert rid["new"] not in [m.id for m, _ in ranked]
    assert rid["later"] not in [m.id for m, _ in ranked]
    assert [m.id for m, _ in kb.similar(str(remote), populated["new"], limit=1)] == \
        [rid["old_same"]]


# -- the CLI ------------------------------------------------------------------------------------

def test_cli_publish_and_search(tmp_path: Path, remote: Path,
                                monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv) -> None:
    runs = tmp_path / "runs"
    a = make_report(runs, "node07", "riser-pcie-slot", T0, signature=["xid-79"])
    b = make_report(runs / "sub", "node08", "riser-pcie-slot", T0 + timedelta(hours=1))
    (runs / "README.md").write_text("# notes, not a report\n")
    monkeypatch.chdir(tmp_path)
    stetho_env.setenv("STETHO_KB_REPO", "remote.git")  # relative: the cached clone must cope
    runner = CliRunner()
    result = runner.invoke(kb_cli, ["publish", str(runs)])
    assert result.exit_code == 0, result.output
    commit = git("--git-dir", str(remote), "rev-parse", "main").strip()
    assert "spooled 2 reports" in result.output
    assert f"published 2 reports to remote.git in commit {commit[:12]}:" in result.output
    assert kb.read_report(a).repo_path in result.output
    again = runner.invoke(kb_cli, ["publish", str(a)])
    assert again.exit_code == 0 and "already in the knowledge base" in again.output
    empty = runner.invoke(kb_cli, ["publish"])
    assert empty.exit_code == 0 and "nothing to publish" in empty.output

    found = runner.invoke(kb_cli, ["search", "xid 79", "--json"])
    assert found.exit_code == 0, found.output
    assert [r["id"] for r in json.loads(found.output)] == [kb.read_report(a).id]
    table = runner.invoke(kb_cli, ["search", "riser"])
    lines = table.output.splitlines()
    assert lines[0].split() == ["date", "node", "cause", "status", "id"]
    assert [line.split()[2] for line in lines[1:]] == ["node08", "node07"]
    sim = runner.invoke(kb_cli, ["search", "--similar", str(b), "--json"])
    assert sim.exit_code == 0, sim.output
    rows = json.loads(sim.output)
    assert [r["id"] for r in rows] == [kb.read_report(a).id] and rows[0]["score"] > 0.5
    neither = runner.invoke(kb_cli, ["search"])
    assert isinstance(neither.exception, ConfigError)
    stetho_env.delenv("STETHO_KB_REPO")
    no_repo = runner.invoke(kb_cli, ["search", "x"])
    assert isinstance(no_repo.exception, ConfigError)  # exit 2 through stetho.cli.main
    assert "--repo" in str(no_repo.exception) and "STETHO_KB_REPO" in str(no_repo.exception)


def test_cli_failed_publish_is_a_stetho_error(tmp_path: Path, remote: Path) -> None:
    report = make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)
    missing = tmp_path / "gone.git"
    result = CliRunner().invoke(kb_cli, ["publish", "--repo", str(missing), str(report)])
    assert isinstance(result.exception, StethoError)
    assert not isinstance(result.exception, ConfigError)  # exit 3: could not publish
    assert "git ls-remote" in str(result.exception) and "stay in the spool" in str(
        result.exception)
    assert spooled(tmp_path / "spool") == [kb.read_report(report).id]
    shutil.copytree(remote, missing)
    ok = CliRunner().invoke(kb_cli, ["publish", "--repo", str(missing)])
    assert ok.exit_code == 0 and "published 1 report" in ok.output


# -- hostile input: repository arguments, symbolic links, one bad report among good ones --------

EVIL_REPOS = ["--upload-pack=touch {x}", "-u touch {x}", " --upload-pack=touch {x}",
              "ext::sh -c touch% {x}", "fd::17", "ssh://-oProxyCommand=touch% {x}/repo",
              "git@-oProxyCommand=touch% {x}:repo", "http://127.0.0.1:9/{x}"]


def stetho_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The real entry point (exit codes included), in process; its exit code and output."""
    from stetho.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(args)
    out = capsys.readouterr()
    code = stop.value.code
    return (code if isinstance(code, int) else 1), out.out + out.err


@pytest.mark.parametrize("evil", EVIL_REPOS)
def test_repo_argument_never_runs_a_command(tmp_path: Path, evil: str, stetho_env: StethoEnv,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`kb search --repo '--upload-pack=touch X'` and its cousins: refused before any git runs,
    through the flag and the configuration alike, with exit 2; X is never created."""
    marker = tmp_path / "PWNED"
    repo = evil.format(x=marker)
    report = make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)
    for args in (["kb", "search", "x", "--repo", repo],
                 ["kb", "search", "--similar", str(report), "--repo", repo],
                 ["kb", "publish", "--repo", repo, str(report)]):
        code, output = stetho_main(args, capsys)
        assert code == 2, (args, output)
        assert "refused" in output or "not allowed" in output, output
    stetho_env.setenv("STETHO_KB_REPO", repo)
    assert stetho_main(["kb", "search", "x"], capsys)[0] == 2
    assert not marker.exists()
    assert not (tmp_path / "cache" / "kb-repos").exists()  # no clone was even attempted


def test_configured_remote_of_a_working_clone_cannot_run_a_command(tmp_path: Path) -> None:
    """A working clone whose own remote is an ext:: command: git's transport allow-list
    refuses it (stetho passes protocol.allow=never plus https, ssh and file)."""
    marker = tmp_path / "PWNED"
    work = tmp_path / "work"
    git("init", "-q", str(work))
    git("commit", "-q", "--allow-empty", "-m", "seed", cwd=work)
    git("remote", "add", "origin", f"ext::sh -c touch% {marker}", cwd=work)
    kb.spool([make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)])
    with pytest.raises(StethoError, match="transport 'ext' not allowed"):
        kb.publish(str(work))
    assert not marker.exists()


def test_symlink_beside_a_report_is_refused_and_the_others_publish(
        tmp_path: Path, remote: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a folder of reports: one lists an asset that is a link to a secret, one links to a
    linked file from its body, one is itself a link to a report elsewhere. Each is refused by
    name; the good one publishes; the secret is in no blob of the repository."""
    secret = tmp_path / "outside" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- s3cr3tK3yMaterial\n")
    runs = tmp_path / "runs"
    good = make_report(runs, "node01", "hbm-ecc", T0)
    listed = make_report(runs, "node02", "hbm-ecc", T0, asset=False)
    listed.write_text(listed.read_text().replace("---\n#", "assets: [key.txt]\n---\n#", 1))
    (listed.parent / "key.txt").symlink_to(secret)
    linked = make_report(runs, "node03", "hbm-ecc", T0, asset=False,
                         body="see [the log](notes.txt)")
    (linked.parent / "notes.txt").symlink_to(secret)
    elsewhere = make_report(tmp_path / "elsewhere", "node04", "hbm-ecc", T0)
    (runs / "node04-report.md").symlink_to(elsewhere)

    code, output = stetho_main(["kb", "publish", "--repo", str(remote), str(runs)], capsys)
    assert code == 2, output
    assert "published 1 report" in output and kb.read_report(good).repo_path in output
    assert "refused 3 reports (the others were published)" in output
    assert f"{listed}: asset 'key.txt' is a symbolic link" in output
    assert f"{linked}: asset 'notes.txt' is a symbolic link" in output
    assert f"{runs / 'node04-report.md'}: is a symbolic link" in output
    files = remote_files(remote)
    assert [f for f in files if f.endswith(".md") and f != "README.md"] == \
        [kb.read_report(good).repo_path]
    grep = subprocess.run(["git", "--git-dir", str(remote), "grep", "-q", "s3cr3tK3yMaterial",
                           "main"], capture_output=True, check=False)
    assert grep.returncode == 1  # found nowhere
    assert spooled(tmp_path / "spool") == []  # the refused were never spooled


def test_a_link_in_the_repository_is_never_written_through(tmp_path: Path,
                                                           remote: Path) -> None:
    """The knowledge base itself holds a link (reports/2026 -> a folder outside): the report
    that would be written through it is refused and stays spooled; the others publish, and
    nothing lands outside the clone."""
    outside = tmp_path / "outside"
    outside.mkdir()
    seed = tmp_path / "seed"
    git("clone", "-q", str(remote), str(seed))
    (seed / "reports").mkdir()
    (seed / "reports" / "2026").symlink_to(outside)
    git("add", "reports", cwd=seed)
    git("commit", "-q", "-m", "a link", cwd=seed)
    git("push", "-q", "origin", "HEAD:main", cwd=seed)
    bad = make_report(tmp_path / "in", "node01", "hbm-ecc", T0)
    ok = make_report(tmp_path / "in", "node02", "hbm-ecc", datetime(2025, 5, 1,
                                                                    tzinfo=timezone.utc))
    kb.spool([bad, ok])
    result = kb.publish(str(remote))
    assert result.published == [kb.read_report(ok).id]
    (why,) = result.refused.values()
    assert "reports/2026 in the knowledge base" in why and "symbolic link" in why
    assert list(outside.iterdir()) == []
    assert spooled(tmp_path / "spool") == [kb.read_report(bad).id]


def test_every_git_call_ignores_the_callers_git_dir(tmp_path: Path, remote: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a git hook (GIT_DIR set to another repository), reading every version of the
    reports still reads the knowledge base: no git command stetho runs inherits GIT_DIR."""
    from stetho.publish import githistory, gitstore

    report = make_report(tmp_path / "in", "node07", "riser-pcie-slot", T0)
    kb.spool([report])
    kb.publish(str(remote))
    decoy = tmp_path / "decoy.git"
    git("init", "-q", "--bare", str(decoy))
    monkeypatch.setenv("GIT_DIR", str(decoy))
    with gitstore.open_clone(str(remote), purpose="kb") as clone:
        versions = list(githistory.every_version(clone, "reports"))
    assert [path for _, path, _ in versions if path.endswith(".md")] == \
        [kb.read_report(report).repo_path]
