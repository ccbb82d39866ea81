"""Closing the loop, against real git: `stetho kb resolve` (by hand, and from commits signed
with real ssh-keygen keys and verified against a real allowed signers file), `stetho kb
accuracy` (text, JSON, the Prometheus textfile) and the run page `stetho report` writes, all
on a knowledge base pushed to a real bare remote."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from stetho.cli.kb import kb as kb_cli
from stetho.errors import ConfigError
from stetho.publish import kb
from stetho.results import Result
from stetho.sinks import json_out, runpage
from tests.signing import People, make_people
from tests.test_kb import git, gitenv, make_report, remote_show  # noqa: F401 (gitenv: autouse)

NOW = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """The knowledge base's remote: an empty bare repository."""
    path = tmp_path / "kb.git"
    git("init", "-q", "--bare", str(path))
    return path


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> People:
    return make_people(tmp_path_factory.mktemp("people"))


def cli(*args: str) -> tuple[int, str]:
    """Run `stetho kb ...` in-process; (exit code, stdout + the error's message)."""
    result = CliRunner().invoke(kb_cli, list(args))
    exc = result.exception
    if exc is not None and not isinstance(exc, (ConfigError, SystemExit)):
        raise exc
    text = result.output + (str(exc) if isinstance(exc, ConfigError) else "")
    code = exc.exit_code if isinstance(exc, ConfigError) else result.exit_code
    return code, text


def publish(tmp_path: Path, remote: Path, specs: list[tuple[str, str, int]]) -> list[str]:
    """Publish one report per (node, diagnosed cause, days ago); their ids, in order."""
    paths = [make_report(tmp_path / "in", node, cause, NOW - timedelta(days=days, hours=1))
             for node, cause, days in specs]
    code, out = cli("publish", "--repo", str(remote), *map(str, paths))
    assert code == 0, out
    return [kb.read_report(p).id for p in paths]


def front(remote: Path, rid: str) -> dict:  # type: ignore[type-arg]
    (meta,) = [m for m in kb.reports(str(remote)) if m.id == rid]
    text = remote_show(remote, meta.path.relative_to(meta.path.parents[4]).as_posix())
    return yaml.safe_load(text.split("---\n")[1])


def head(remote: Path) -> str:
    return git("--git-dir", str(remote), "rev-parse", "main").strip()


# -- kb resolve ----------------------------------------------------------------------------------

def test_resolve_keeps_the_diagnosed_cause_beside_the_found_one(tmp_path: Path,
                                                               remote: Path) -> None:
    (rid, other) = publish(tmp_path, remote, [("node07", "riser-pcie-slot", 1),
                                              ("node03", "gpu-off-bus", 2)])
    code, out = cli("resolve", rid, "--found", "gpu-off-bus", "--part", "GPU 3 (SN 1654)",
                    "--part", "riser R2", "--note", "GPU 3 reseated: off the bus again",
                    "--repo", str(remote))
    assert code == 0, out
    assert f"resolved {rid} (node07): diagnosed riser-pcie-slot, found gpu-off-bus" in out
    fm = front(remote, rid)
    assert fm["cause"] == "riser-pcie-slot"            # the diagnosis, unchanged
    assert fm["status"] == "resolved"
    res = fm["resolution"]
    assert res["found"] == "gpu-off-bus" and res["parts"] == ["GPU 3 (SN 1654)", "riser R2"]
    assert res["note"] == "GPU 3 reseated: off the bus again"
    assert res["by"] == "KB Test <kb@test.invalid>" and "commit" not in res
    meta = next(m for m in kb.reports(str(remote)) if m.id == rid)
    assert meta.resolution is not None and meta.resolution.found == "gpu-off-bus"
    assert "# node07: riser-pcie-slot" in meta.body      # the body kept as it was
    log = git("--git-dir", str(remote), "log", "-1", "--format=%B", "main")
    assert f"Stetho-Resolved: {rid}" in log and "found gpu-off-bus" in log
    index = remote_show(remote, "README.md")
    assert "| resolved: found `gpu-off-bus` |" in index
    assert front(remote, other)["status"] == "open"      # the other report untouched
    # What was found is searchable: 'reseated' is only in the resolution's note.
    code, out = cli("search", "reseated", "--repo", str(remote))
    assert code == 0 and rid in out and other not in out
    # A local copy of the report names it by its id; a second resolution replaces the first.
    copy = next((tmp_path / "in").rglob(f"{rid}/diagnosis-report.md"))
    code, out = cli("resolve", str(copy), "--found", "riser-pcie-slot", "--repo", str(remote))
    assert code == 0 and "the diagnosis was right" in out, out
    assert front(remote, rid)["resolution"]["found"] == "riser-pcie-slot"
    assert "parts" not in front(remote, rid)["resolution"]


def test_unknown_cause_or_report_is_refused_and_nothing_is_written(tmp_path: Path,
                                                                   remote: Path) -> None:
    (rid,) = publish(tmp_path, remote, [("node07", "riser-pcie-slot", 1)])
    before = head(remote)
    code, out = cli("resolve", rid, "--found", "riser", "--repo", str(remote))
    assert code == 2
    assert "unknown cause 'riser'" in out
    assert "riser-pcie-slot" in out and "gpu-off-bus" in out and "no-fault-found" in out
    code, out = cli("resolve", "rpt-nope", "--found", "no-fault-found", "--repo", str(remote))
    assert code == 2 and "no report 'rpt-nope' in the knowledge base" in out
    code, out = cli("resolve", rid, "--repo", str(remote))
    assert code == 2 and "REPORT and --found CAUSE" in out
    assert head(remote) == before
    assert front(remote, rid)["status"] == "open"


# -- kb resolve --from-git -------------------------------------------------------------------------

def signed_commit(work: Path, key: Path | None, trailers: dict[str, str], subject: str) -> str:
    """A commit in the technician's clone carrying resolution trailers, signed with `key`
    (OpenSSH, as `git commit -S` does it) or unsigned; pushed; returns its id."""
    args = ["-C", str(work)]
    if key is not None:
        args += ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"]
    msg = subject + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers.items())
    git(*args, "commit", "-q", "--allow-empty", *(["-S"] if key else []), "-m", msg)
    git("-C", str(work), "push", "-q", "origin", "HEAD:main")
    return git("-C", str(work), "rev-parse", "HEAD").strip()


def forged(work: Path, genuine: str, rid: str) -> str:
    """alice's signature copied onto a commit that names another report: what someone
    without her key could push. Its signature no longer verifies."""
    raw = git("-C", str(work), "cat-file", "commit", genuine)
    parent = git("-C", str(work), "rev-parse", "HEAD").strip()
    lines = raw.split("\n")
    lines = [f"parent {parent}" if ln.startswith("parent ") else ln for ln in lines]
    text = "\n".join(lines)
    old = next(ln for ln in lines if ln.startswith("Stetho-Resolve: "))
    text = text.replace(old, f"Stetho-Resolve: {rid}")
    sha = subprocess.run(["git", "-C", str(work), "hash-object", "-t", "commit", "-w",
                          "--stdin"], input=text, capture_output=True, text=True,
                         check=True).stdout.strip()
    git("-C", str(work), "reset", "-q", "--hard", sha)
    git("-C", str(work), "push", "-q", "origin", "HEAD:main")
    return sha


def test_from_git_applies_only_commits_signed_by_an_allowed_key(
        tmp_path: Path, remote: Path, people: People) -> None:
    ids = publish(tmp_path, remote, [("node01", "riser-pcie-slot", 1),
                                     ("node02", "ib-link-degraded", 1),
                                     ("node03", "gpu-off-bus", 1),
                                     ("node04", "optics-degrading", 1),
                                     ("node05", "cpu-governor", 1)])
    work = tmp_path / "tech"
    git("clone", "-q", str(remote), str(work))
    good = signed_commit(work, people.key("alice"), {
        "Stetho-Resolve": ids[0], "Stetho-Found": "riser-pcie-slot",
        "Stetho-Part": "riser R2", "Stetho-Note": "riser replaced, busbw back"}, "node01 fixed")
    stranger = signed_commit(work, people.key("mallory"), {
        "Stetho-Resolve": ids[1], "Stetho-Found": "no-fault-found"}, "node02 nothing")
    unsigned = signed_commit(work, None, {
        "Stetho-Resolve": ids[2], "Stetho-Found": "no-fault-found"}, "node03 nothing")
    typo = signed_commit(work, people.key("bob"), {
        "Stetho-Resolve": ids[3], "Stetho-Found": "optics"}, "node04 optics")
    fake = forged(work, good, ids[4])

    code, out = cli("resolve", "--from-git", "--signers", str(people.signers),
                    "--repo", str(remote))
    assert code == 2, out
    assert f"applied {good[:12]}: {ids[0]} found riser-pcie-slot (signed by alice)" in out
    assert f"refused commit {stranger[:12]} ('node02 nothing'): its signature is good but " \
           "by a key not in the allowed signers file" in out
    assert f"refused commit {unsigned[:12]} ('node03 nothing'): it is not signed" in out
    assert f"refused commit {typo[:12]} ('node04 optics'): unknown cause 'optics'" in out
    assert f"refused commit {fake[:12]} ('node01 fixed'): its signature does not verify" in out
    res = front(remote, ids[0])["resolution"]
    assert res["found"] == "riser-pcie-slot" and res["by"] == "alice"
    assert res["commit"] == good and res["parts"] == ["riser R2"]
    assert res["note"] == "riser replaced, busbw back"
    for rid in ids[1:]:
        assert front(remote, rid)["status"] == "open"
    log = git("--git-dir", str(remote), "log", "-1", "--format=%B", "main")
    assert f"Stetho-Applies: {good}" in log and f"Stetho-Resolved: {ids[0]}" in log

    # Again: nothing applied twice, the refusals still named.
    tip = head(remote)
    code, out = cli("resolve", "--from-git", "--signers", str(people.signers),
                    "--repo", str(remote))
    assert code == 2 and "\napplied " not in "\n" + out and stranger[:12] in out
    assert head(remote) == tip

    # Resolving those reports properly settles the refusals: superseded, exit 0.
    for rid in ids[1:]:
        assert cli("resolve", rid, "--found", "no-fault-found", "--repo", str(remote))[0] == 0
    code, out = cli("resolve", "--from-git", "--signers", str(people.signers),
                    "--repo", str(remote))
    assert code == 0, out
    assert f"superseded {stranger[:12]}: {ids[1]}" in out and "refused" not in out
    assert front(remote, ids[1])["resolution"]["by"] == "KB Test <kb@test.invalid>"


def test_from_git_refuses_an_openpgp_signature_the_users_keyring_trusts(
        tmp_path: Path, remote: Path, people: People, monkeypatch: pytest.MonkeyPatch) -> None:
    """git checks an OpenPGP signature against the user's own keyring (where it is `G`,
    good): only SSH signatures are checked against the allowed signers file."""
    if shutil.which("gpg") is None or shutil.which("gpgconf") is None:
        pytest.skip("GnuPG is not installed: no OpenPGP signature to refuse")
    (rid,) = publish(tmp_path, remote, [("node01", "riser-pcie-slot", 1)])
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(home))
    subprocess.run(["gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key",
                    "Eve <eve@test.invalid>", "ed25519", "sign", "never"], check=True,
                   capture_output=True)
    try:
        work = tmp_path / "tech"
        git("clone", "-q", str(remote), str(work))
        git("-C", str(work), "-c", "user.signingkey=eve@test.invalid", "commit", "-q", "-S",
            "--allow-empty", "-m", f"node01 nothing\n\nStetho-Resolve: {rid}\n"
            "Stetho-Found: no-fault-found\n")
        git("-C", str(work), "push", "-q", "origin", "HEAD:main")
        eve = git("-C", str(work), "rev-parse", "HEAD").strip()
        assert git("-C", str(work), "log", "-1", "--format=%G?").strip() == "G"
        code, out = cli("resolve", "--from-git", "--signers", str(people.signers),
                        "--repo", str(remote))
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], check=False, capture_output=True)
    assert code == 2
    assert f"refused commit {eve[:12]} ('node01 nothing'): it is not signed with an SSH key" in out
    assert front(remote, rid)["status"] == "open"


def test_from_git_needs_a_signers_file(tmp_path: Path, remote: Path) -> None:
    publish(tmp_path, remote, [("node01", "riser-pcie-slot", 1)])
    code, out = cli("resolve", "--from-git", "--repo", str(remote))
    assert code == 2 and "needs --signers" in out
    code, out = cli("resolve", "--from-git", "--signers", str(tmp_path / "none"),
                    "--repo", str(remote))
    assert code == 2 and "no allowed signers file" in out


# -- kb accuracy ---------------------------------------------------------------------------------

RESOLVED = [  # node, diagnosed, days ago, found (None: not resolved)
    ("n1", "riser-pcie-slot", 10, "riser-pcie-slot"),
    ("n2", "riser-pcie-slot", 20, "no-fault-found"),
    ("n3", "ib-link-degraded", 30, "optics-degrading"),
    ("n4", "optics-degrading", 40, "optics-degrading"),
    ("n5", "undiagnosed", 50, "riser-pcie-slot"),
    ("n6", "riser-pcie-slot", 5, None),
    ("n7", "riser-pcie-slot", 400, "riser-pcie-slot"),  # outside 180 days
]


@pytest.fixture
def resolved_kb(tmp_path: Path, remote: Path) -> Path:
    ids = publish(tmp_path, remote, [(n, c, d) for n, c, d, _ in RESOLVED])
    for rid, (_, _, _, found) in zip(ids, RESOLVED, strict=True):
        if found:
            assert cli("resolve", rid, "--found", found, "--repo", str(remote))[0] == 0
    return remote


def rows(acc: dict) -> dict:  # type: ignore[type-arg]
    return {r["rule"]: r for r in acc["rules"]}


def test_accuracy_per_rule_confusion_and_no_fault_found(tmp_path: Path,
                                                         resolved_kb: Path) -> None:
    code, out = cli("accuracy", "--repo", str(resolved_kb), "--json",
                    "--textfile", str(tmp_path / "kb.prom"))
    assert code == 0, out
    acc = json.loads(out)
    assert acc["reports"] == 6 and acc["resolved"] == 5
    assert acc["no_fault_found"] == 1 and acc["no_fault_found_rate"] == 0.2
    r = rows(acc)
    assert (r["riser-pcie-slot"]["diagnosed"], r["riser-pcie-slot"]["found"],
            r["riser-pcie-slot"]["correct"]) == (2, 2, 1)
    assert r["riser-pcie-slot"]["precision"] == 0.5 and r["riser-pcie-slot"]["recall"] == 0.5
    assert r["optics-degrading"]["precision"] == 1.0 and r["optics-degrading"]["recall"] == 0.5
    assert r["ib-link-degraded"]["precision"] == 0.0 and r["ib-link-degraded"]["recall"] is None
    # A catalogue rule with no resolved report: a row, and no figure.
    assert r["cpu-governor"]["precision"] is None and r["cpu-governor"]["recall"] is None
    assert "undiagnosed" not in r and "no-fault-found" not in r
    assert acc["confusion"] == [
        {"diagnosed": "ib-link-degraded", "found": "optics-degrading", "count": 1},
        {"diagnosed": "riser-pcie-slot", "found": "no-fault-found", "count": 1},
        {"diagnosed": "undiagnosed", "found": "riser-pcie-slot", "count": 1}]

    fams = {f.name: f for f in text_string_to_metric_families((tmp_path / "kb.prom").read_text())}

    def sample(name: str, **labels: str) -> list[float]:
        return [s.value for s in fams[name].samples
                if all(s.labels.get(k) == v for k, v in labels.items())]

    assert sample("stetho_kb_rule_precision", rule="riser-pcie-slot") == [0.5]
    assert sample("stetho_kb_rule_recall", rule="optics-degrading") == [0.5]
    assert sample("stetho_kb_rule_precision", rule="cpu-governor") == []   # no figure
    assert sample("stetho_kb_rule_recall", rule="ib-link-degraded") == []
    assert sample("stetho_kb_confusion", diagnosed="undiagnosed",
                  found="riser-pcie-slot") == [1.0]
    assert sample("stetho_kb_no_fault_found_ratio") == [0.2]
    assert sample("stetho_kb_resolved_reports") == [5.0]

    code, out = cli("accuracy", "--repo", str(resolved_kb))
    assert code == 0
    assert "5 resolved reports since" in out and "no fault found in 1 (20%)" in out
    assert "ib-link-degraded -> optics-degrading: 1" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("riser-pcie-slot "))
    assert line.split() == ["riser-pcie-slot", "2", "2", "1", "50%", "50%", "1"]
    # A longer window takes the old report in.
    code, out = cli("accuracy", "--repo", str(resolved_kb), "--since", "500d", "--json")
    assert rows(json.loads(out))["riser-pcie-slot"]["diagnosed"] == 3


def test_accuracy_without_resolved_reports_shows_no_figure(tmp_path: Path,
                                                           remote: Path) -> None:
    publish(tmp_path, remote, [("n1", "riser-pcie-slot", 3), ("n2", "gpu-off-bus", 4)])
    prom = tmp_path / "kb.prom"
    code, out = cli("accuracy", "--repo", str(remote), "--textfile", str(prom))
    assert code == 0
    assert out.startswith("no resolved reports since ") and "(2 reports in the window)" in out
    assert "%" not in out
    code, out = cli("accuracy", "--repo", str(remote), "--json")
    acc = json.loads(out)
    assert acc["resolved"] == 0 and acc["rules"] == [] and acc["no_fault_found_rate"] is None
    names = {f.name for f in text_string_to_metric_families(prom.read_text())}
    assert "stetho_kb_resolved_reports" in names
    assert not names & {"stetho_kb_rule_precision", "stetho_kb_rule_recall",
                        "stetho_kb_no_fault_found_ratio"}
    code, out = cli("accuracy", "--repo", str(remote), "--since", "soon")
    assert code == 2 and "expected a duration" in out


# -- the run page --------------------------------------------------------------------------------

def run_folder(tmp_path: Path) -> Path:
    """A run folder as `stetho sweep` leaves it: results.json (node07 failing, node08 fine)."""
    folder = tmp_path / "runs" / "20261204T020000Z-1a2b3c"
    folder.mkdir(parents=True)
    results = [Result("node07", "gpu_count", "node", "fail", "7 of 8 GPUs visible", value=7,
                      expected=8),
               Result("node08", "gpu_count", "node", "pass", "8 GPUs", value=8, expected=8)]
    (folder / "results.json").write_text(json_out.render(results))
    (folder / "meta.json").write_text(json.dumps({"run_id": folder.name}))
    return folder


def report(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stetho", "report", str(folder), "--db",
                           str(folder / "none.db"), *args], capture_output=True, text=True,
                          timeout=300)


def test_run_page_shows_the_same_figures(tmp_path: Path, resolved_kb: Path) -> None:
    folder = run_folder(tmp_path)
    proc = report(folder, "--kb", str(resolved_kb))
    assert proc.returncode == 0, proc.stderr
    assert f"run page: {folder / 'index.html'}" in proc.stdout
    page = (folder / "index.html").read_text()
    assert 'id="accuracy" data-resolved="5"' in page
    assert "no fault found in 1 (20%)" in page
    assert ('<tr data-rule="riser-pcie-slot"><td>riser-pcie-slot</td><td>2</td><td>2</td>'
            "<td>1</td><td>50%</td><td>50%</td><td>1</td></tr>") in page
    assert ("<tr><td>undiagnosed</td><td>riser-pcie-slot</td><td>1</td></tr>") in page
    assert 'data-node="node07"' in page and "reports/" in page   # the run itself, linked


def test_run_page_says_when_there_is_nothing_to_measure(tmp_path: Path, remote: Path) -> None:
    folder = run_folder(tmp_path)
    proc = report(folder)  # no knowledge base: no accuracy section at all
    assert proc.returncode == 0, proc.stderr
    assert 'id="accuracy"' not in (folder / "index.html").read_text()
    publish(tmp_path, remote, [("n1", "riser-pcie-slot", 3)])
    assert report(folder, "--kb", str(remote)).returncode == 0
    page = (folder / "index.html").read_text()
    assert 'data-resolved="0"' in page and "No resolved reports since" in page
    assert 'id="rule-accuracy"' not in page
    assert report(folder, "--kb", str(tmp_path / "missing.git")).returncode == 0
    assert 'data-resolved="unknown">Not available: ' in (folder / "index.html").read_text()


def test_run_page_escapes_what_the_knowledge_base_holds() -> None:
    acc = {"since": "2026-06-01T00:00:00Z", "reports": 1, "resolved": 1, "no_fault_found": 0,
           "no_fault_found_rate": 0.0,
           "rules": [{"rule": "<script>x</script>", "diagnosed": 1, "found": 1, "correct": 1,
                      "precision": 1.0, "recall": 1.0, "no_fault_found": 0}],
           "confusion": []}
    page = runpage.render([], title="t", accuracy=acc)
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


def test_only_status_and_resolution_are_rewritten() -> None:
    """The front matter's other lines stay byte for byte (block lists, comments, an earlier
    resolution replaced whole); a flow-style front matter is dumped again, same fields."""
    from stetho.publish.reports import Resolution
    from stetho.publish.resolve import with_resolution

    res = Resolution(found="gpu-off-bus", date=NOW, by="alice", parts=("GPU 3",),
                     commit="ab" * 20)
    text = ("---\nid: rpt-1\ndate: 2026-12-02T10:15:00Z\nnode: node07\ncause: riser-pcie-slot\n"
            "# a comment someone left\nstatus: open\nresolution:\n  found: riser-pcie-slot\n"
            "  date: 2026-12-03T00:00:00Z\nsignature:\n- pcie_aer\n- xid-79\n---\n# body\n")
    out = with_resolution(text, res)
    kept = ["id: rpt-1", "cause: riser-pcie-slot", "# a comment someone left",
            "signature:\n- pcie_aer\n- xid-79\n"]
    assert all(k in out for k in kept) and out.endswith("\n---\n# body\n")
    assert out.count("found:") == 1 and "riser-pcie-slot\n  date" not in out
    fm = yaml.safe_load(out.split("---\n")[1])
    assert fm["status"] == "resolved" and fm["cause"] == "riser-pcie-slot"
    assert fm["resolution"] == {"found": "gpu-off-bus", "parts": ["GPU 3"],
                                "date": NOW.strftime("%Y-%m-%dT%H:%M:%SZ"), "by": "alice",
                                "commit": "ab" * 20}
    assert fm["signature"] == ["pcie_aer", "xid-79"]
    flow = ("---\n{id: rpt-2, date: 2026-12-02, node: n1, cause: cpu-governor, status: open}"
            "\n---\nb\n")
    fm = yaml.safe_load(with_resolution(flow, res).split("---\n")[1])
    assert fm["id"] == "rpt-2" and fm["cause"] == "cpu-governor"
    assert fm["status"] == "resolved" and fm["resolution"]["found"] == "gpu-off-bus"
