"""The Slurm sweep's per-node limit under a probe timeout cap (STETHO_PROBE_TIMEOUT): the
budget counts each probe at the cap, and the nodes run under that same cap (srun hands it
to them), so a capped sweep is not held to the uncapped 2,260 s an h100 node could take."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from stetho import config
from stetho.fleet import slurm_sweep
from stetho.fleet.budget import host_budget
from tests.conftest import REPO

PROFILE = "h100-sxm-8gpu"


def _sweep(tmp: Path, timeout: int, cap: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STETHO_PROBE_TIMEOUT"}
    if cap is not None:
        env["STETHO_PROBE_TIMEOUT"] = cap
    return subprocess.run(
        [sys.executable, "-m", "stetho", "sweep", "--via", "slurm", "--partition", "nosuch",
         "--profile", PROFILE, "--spool", str(tmp / "spool"), "--out", str(tmp / "runs"),
         "--timeout", str(timeout), "--no-history"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env)


def test_the_cap_in_force_sets_the_per_node_limit_from_the_cli(tmp_path: Path) -> None:
    uncapped, capped = host_budget(PROFILE, None)[0], host_budget(PROFILE, None, 5)[0]
    assert capped < uncapped
    short = _sweep(tmp_path, capped - 1, "5")  # refused, with the capped need
    assert short.returncode == 2, short.stdout + short.stderr
    assert f"can take on profile {PROFILE}: {capped} s" in short.stderr
    assert "each probe capped at 5 s (STETHO_PROBE_TIMEOUT)" in short.stderr
    # the same --timeout is refused without the cap: the need is the uncapped one
    bare = _sweep(tmp_path, capped, None)
    assert bare.returncode == 2 and f"{PROFILE}: {uncapped} s" in bare.stderr
    # and accepted under it: the sweep goes on to ask Slurm (there is none here)
    enough = _sweep(tmp_path, capped, "5")
    assert "shorter than the check can take" not in enough.stderr, enough.stderr


def test_srun_hands_the_nodes_the_cap_the_limit_counted_on(tmp_path: Path) -> None:
    opts = slurm_sweep.SlurmSweepOptions(partition="p", out=tmp_path, spool=tmp_path)
    with config.using(dataclasses.replace(config.active(), probe_timeout=5.0)):
        limit = slurm_sweep.node_limit(PROFILE, None)
        argv = slurm_sweep.srun_argv(opts, "r1", ["n1"], PROFILE, limit)
    script = argv[argv.index("-c") + 1]  # /bin/sh -c SCRIPT
    assert limit == host_budget(PROFILE, None, 5)[0]
    assert "STETHO_PROBE_TIMEOUT=5 exec timeout" in script
    with config.using(dataclasses.replace(config.active(), probe_timeout=None)):
        limit = slurm_sweep.node_limit(PROFILE, None)
        argv = slurm_sweep.srun_argv(opts, "r1", ["n1"], PROFILE, limit)
    assert limit == host_budget(PROFILE, None)[0]
    assert not [a for a in argv if "STETHO_PROBE_TIMEOUT" in a]
