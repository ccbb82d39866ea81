"""What verifying signed overrides adds to bench/gate.py's 64-node pre-job gate.

Builds an override repository of 200 signed overrides for the pre-job policy (real ed25519
keys, `ssh-keygen -Y sign`): 50 live, 130 expired, 20 revoked, the 20 revocations in the
history (5 of them reverted and 5 deleted afterwards, which does not undo them). Then times
`stetho gate --policy pre-job --nodes 'gpu[0001-0064]' --quiet` from history (all go) without
--override-repo and with it (the verification cache warm, as on any runner after its first
gate), and once with the cache cleared. The floor, `python -c pass`, is measured in the same
run. The database is bench/gate.py's when it exists, else one sweep of 1,024 nodes made here.

    python bench/overrides.py [--db /tmp/stetho-history-bench.db] [--runs 9]
"""

from __future__ import annotations

import argparse
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

from bench.history import node_metrics, results_for  # noqa: E402
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


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


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


def build_repo(tmp: Path, keys: Path, policy: OverridePolicy) -> Path:
    alice = lambda m: signatures.sign(m, keys / "alice")  # noqa: E731
    bob = lambda m: signatures.sign(m, keys / "bob")  # noqa: E731
    now = time.time()

    def one(i: int) -> Override:
        live = i < 70  # 50 live + 20 to be revoked
        at = now - 60 if live else now - 3 * 86400 - i
        o = request(policy, "gpu_clocks", [f"gpu{i % 1024 + 1:04d}"], f"bench override {i}",
                    12 * 3600 if live else 3600, alice, at)
        return with_approval(o, approval(o, policy, ACK, bob, at + 30))

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        made = list(pool.map(one, range(200)))
    repo = tmp / "overrides"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.invalid")
    (repo / "overrides").mkdir()
    for o in made:
        (repo / "overrides" / f"{o.id}.json").write_text(o.to_json())
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "200 overrides")
    for k, o in enumerate(made[50:70]):
        r = revocation(o.id, f"bench revocation {k}", bob, now - 30)
        (repo / "revocations").mkdir(exist_ok=True)  # a revert may have removed it
        (repo / "revocations" / f"{o.id}.json").write_text(r.to_json())
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"revoke {o.id}")
        if k < 5:
            git(repo, "revert", "--no-edit", "HEAD")
        elif k < 10:
            git(repo, "rm", "-q", f"revocations/{o.id}.json")
            git(repo, "commit", "-qm", f"delete the revocation of {o.id}")
    return repo


def database(path: Path) -> tuple[Path, str]:
    if path.exists():
        return path, f"{path} (bench/history.py's)"
    db = path.parent / "stetho-overrides-bench.db"
    db.unlink(missing_ok=True)
    rng = random.Random(3)
    nodes = [f"gpu{i:04d}" for i in range(1, 1025)]
    with History(db) as h:
        h.record("overrides-bench", "sweep",
                 [NodeRun(n, "h100-sxm-8gpu", results_for(n), node_metrics(rng, 400))
                  for n in nodes], when=time.time())
    return db, f"{db} (one sweep of 1,024 nodes; bench/history.py --keep for the big one)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--db", default="/tmp/stetho-history-bench.db")
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stetho-overrides-bench-"))
    try:
        keys, gates, policy = keys_and_policy(tmp)
        start = time.perf_counter()
        repo = build_repo(tmp, keys, policy)
        print(f"override repository: 200 overrides (50 live, 130 expired, 20 revoked; 10 of "
              f"those revocations reverted or deleted later), built in "
              f"{time.perf_counter() - start:.1f} s")
        db, what = database(Path(args.db))
        print(f"database: {what}")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update({"STETHO_GATES": str(gates), "STETHO_CACHE": str(tmp / "cache")})
        gate = [sys.executable, "-m", "stetho", "gate", "--policy", "pre-job", "--nodes",
                "gpu[0001-0064]", "--db", str(db), "--quiet", "--no-reports"]
        with_repo = [*gate, "--override-repo", str(repo)]
        floor = [sys.executable, "-c", "pass"]
        cold, cold_rc = timed(with_repo, env)
        shown = subprocess.run([x for x in with_repo if x != "--quiet"], env=env,
                               capture_output=True, text=True).stdout
        ignored = sum(line.startswith("IGNORED override") for line in shown.splitlines())
        timed(gate, env)
        plain, verified, base, codes = [], [], [], {"without": set(), "with": set()}
        for _ in range(args.runs):
            t, rc = timed(gate, env)
            plain.append(t)
            codes["without"].add(rc)
            t, rc = timed(with_repo, env)
            verified.append(t)
            codes["with"].add(rc)
            base.append(timed(floor, env)[0])
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cleared = [timed(with_repo, env)[0]]
        shutil.rmtree(tmp / "cache", ignore_errors=True)
        cleared.append(timed(with_repo, env)[0])
        m_plain, m_ver = statistics.median(plain), statistics.median(verified)
        print(f"gate without overrides: median {m_plain * 1000:.0f} ms (min "
              f"{min(plain) * 1000:.0f}, max {max(plain) * 1000:.0f}; exit "
              f"{sorted(codes['without'])})")
        print(f"gate with 200 overrides, cache warm: median {m_ver * 1000:.0f} ms (min "
              f"{min(verified) * 1000:.0f}, max {max(verified) * 1000:.0f}; exit "
              f"{sorted(codes['with'])}; {ignored} ignored as expired or revoked, so 50 "
              "verified)")
        print(f"added by overrides: {(m_ver - m_plain) * 1000:.0f} ms   target <= 150 ms")
        print(f"with the verification cache cleared (a runner's first gate): "
              f"{statistics.median(cleared) * 1000:.0f} ms (first run: {cold * 1000:.0f} ms, "
              f"exit {cold_rc})")
        print(f"floor: python -c pass: median {statistics.median(base) * 1000:.0f} ms")
    finally:
        if os.environ.get("KEEP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
