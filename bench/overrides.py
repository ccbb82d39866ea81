"""What verifying signed overrides adds to bench/gate.py's 64-node pre-job gate.

Builds an override repository of 200 signed overrides for the pre-job policy (real ed25519
keys, `ssh-keygen -Y sign`): 50 live, 130 expired, 20 revoked, the 20 revocations in the
history (5 of them reverted and 5 deleted afterwards, which does not undo them). Then times
`stetho gate --policy pre-job --nodes 'gpu[0001-0064]' --quiet` from history (all go) without
--override-repo and with it (the verification cache warm, as on any runner after its first
gate), and with the cache cleared before every run (a runner's first gate), all interleaved
in fresh processes with the floor, `python -c pass`. Goal: overrides add <= 150 ms (README,
"Overrides"). The database is one sweep of 1,024 nodes made here with every pre-job check
passing (bench/gate.py's results), so the gate says go and verifies the overrides (a database
missing the policy's checks blocks every node first). `--before REF` times that checkout's
three gates too.

    python bench/overrides.py [--runs 9] [--before REF]
    python bench/overrides.py --smoke --runs 1     # 20 overrides, 64 nodes
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from bench.gate import whole_run  # noqa: E402
from bench.history import node_metrics  # noqa: E402
from stetho.gate import signatures  # noqa: E402
from stetho.gate.overrides import (  # noqa: E402
    Override,
    OverridePolicy,
    approval,
    request,
    revocation,
    with_approval,
)
from stetho.history.store import History, NodeRun  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ACK = "I acknowledge this performance degradation risk"


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def keys_and_policy(tmp: Path) -> tuple[Path, Path, OverridePolicy]:
    """alice (requests) and bob (approves), their allowed signers file, and a copy of the
    shipped pre-job policy trusting it (STETHO_GATES)."""
    lines = []
    for name in ("alice", "bob"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)],
                       check=True)
        lines.append(f"{name} {' '.join((tmp / f'{name}.pub').read_text().split()[:2])}\n")
    gates = tmp / "gates"
    gates.mkdir()
    (gates / "allowed_signers").write_text("".join(lines))
    text = (REPO / "gates" / "pre-job.yml").read_text()
    (gates / "pre-job.yml").write_text(text.replace("[sre-oncall, sre-lead]", "[bob]"))
    policy = OverridePolicy("pre-job", ("bob",), gates / "allowed_signers", ACK, 86400)
    return tmp, gates, policy


def build_repo(tmp: Path, keys: Path, policy: OverridePolicy, scale: int = 10) -> Path:
    """200 overrides at scale 10 (50 live, 130 expired, 20 revoked); scale 1 makes 20."""
    alice = lambda m: signatures.sign(m, keys / "alice")  # noqa: E731
    bob = lambda m: signatures.sign(m, keys / "bob")  # noqa: E731
    now = time.time()

    def one(i: int) -> Override:
        live = i < 7 * scale  # 50 live + 20 to be revoked
        at = now - 60 if live else now - 3 * 86400 - i
        o = request(policy, "gpu_clocks", [f"gpu{i % 1024 + 1:04d}"], f"bench override {i}",
                    12 * 3600 if live else 3600, alice, at)
        return with_approval(o, approval(o, policy, ACK, bob, at + 30))

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        made = list(pool.map(one, range(20 * scale)))
    repo = tmp / "overrides"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.invalid")
    (repo / "overrides").mkdir()
    for o in made:
        (repo / "overrides" / f"{o.id}.json").write_text(o.to_json())
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", f"{len(made)} overrides")
    for k, o in enumerate(made[5 * scale:7 * scale]):
        r = revocation(o.id, f"bench revocation {k}", bob, now - 30)
        (repo / "revocations").mkdir(exist_ok=True)  # a revert may have removed it
        (repo / "revocations" / f"{o.id}.json").write_text(r.to_json())
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"revoke {o.id}")
        if k < scale // 2:
            git(repo, "revert", "--no-edit", "HEAD")
        elif k < scale:
            git(repo, "rm", "-q", f"revocations/{o.id}.json")
            git(repo, "commit", "-qm", f"delete the revocation of {o.id}")
    return repo


def database(folder: Path, nodes_n: int) -> Path:
    """One sweep of `nodes_n` nodes, every pre-job check passing (so the gate is all go and
    the overrides are verified, not skipped), with 400 metrics a node."""
    from stetho.gate import policy as policies

    db = folder / "stetho-overrides-bench.db"
    rng = random.Random(3)
    checks = [c for c in policies.load("pre-job").checks if c != "sweep"]
    nodes = [f"gpu{i:04d}" for i in range(1, nodes_n + 1)]
    with History(db) as h:
        h.record("overrides-bench", "sweep",
                 [NodeRun(n, "h100-sxm-8gpu", whole_run(n, checks), node_metrics(rng, 400))
                  for n in nodes], when=time.time())
    return db


def main() -> None:
    ap = harness.parser(__doc__, runs=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stetho-overrides-bench-"))
    scale = 1 if args.smoke else 10
    try:
        keys, gates, policy = keys_and_policy(tmp)
        start = time.perf_counter()
        repo = build_repo(tmp, keys, policy, scale)
        print(f"override repository: {20 * scale} overrides ({5 * scale} live, {13 * scale} "
              f"expired, {2 * scale} revoked; {scale} of those revocations reverted or deleted "
              f"later), built in {time.perf_counter() - start:.1f} s")
        db = database(tmp, 64 if args.smoke else 1024)
        print(f"database: one sweep of {64 if args.smoke else 1024} nodes, every pre-job "
              "check passing")
        base = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
        base.update({"STETHO_GATES": str(gates), "STETHO_CACHE": str(tmp / "cache")})
        gate = ("gate", "--policy", "pre-job", "--nodes", "gpu[0001-0064]", "--db", str(db),
                "--quiet", "--no-reports")
        sides: dict[str, harness.Side] = {}
        for tree in harness.trees(args.before):
            env = tree.env(base)
            sides[f"gate without overrides ({tree.label})"] = harness.Side(
                tree.stetho(*gate), env=env, cwd=tmp)
            sides[f"gate with overrides, cache warm ({tree.label})"] = harness.Side(
                tree.stetho(*gate, "--override-repo", str(repo)), env=env, cwd=tmp)
            cold = tmp / f"cold-cache-{len(sides)}"  # a runner's first gate: cleared each run
            sides[f"gate with overrides, cache cold ({tree.label})"] = harness.Side(
                ["sh", "-c", 'rm -rf "$0" && STETHO_CACHE="$0" exec "$@"', str(cold),
                 *tree.stetho(*gate, "--override-repo", str(repo))], env=env, cwd=tmp)
        sides["floor: python -c pass"] = harness.Side([sys.executable, "-c", "pass"], env=base)
        shown = subprocess.run([x for x in sides[list(sides)[1]].argv if x != "--quiet"],
                               env=sides[list(sides)[1]].env, cwd=tmp, capture_output=True,
                               text=True).stdout
        ignored = sum(line.startswith("IGNORED override") for line in shown.splitlines())
        harness.header(f"stetho gate --policy pre-job for 64 nodes, with {20 * scale} signed "
                       f"overrides ({ignored} ignored as expired or revoked)")
        times = harness.interleave(sides, args.runs, warm=not args.smoke)
        names = list(sides)
        for name in names:
            print(harness.line(name, times[name], sides[name].cpu) +
                  ("" if name.startswith("floor") else f" exit {sorted(sides[name].codes)}"))
        for k in range(0, len(names) - 1, 3):
            plain, warm = statistics.median(times[names[k]]), \
                statistics.median(times[names[k + 1]])
            added = warm - plain
            cpu = statistics.median(sides[names[k + 1]].cpu) - \
                statistics.median(sides[names[k]].cpu)
            print(f"goal: added by overrides ({names[k + 1]}) {added * 1000:.0f} ms wall, "
                  f"{cpu * 1000:.0f} ms CPU (goal <= 150 ms): "
                  f"{'met' if added <= 0.150 else 'NOT MET'}")
        harness.judge(names[1], times[names[1]], times[names[-1]], None)
        if len(names) > 4:
            harness.judge(names[1], times[names[1]], times[names[4]], 1.0, "the checkout before")
    finally:
        if os.environ.get("KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
