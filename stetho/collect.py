"""Collect a node's evidence: run the probes its profile calls for and make the bundle."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from stetho import __version__, profiles
from stetho.errors import ConfigError
from stetho.evidence import probes as P
from stetho.evidence.bundle import Bundle
from stetho.evidence.runner import Environment, run_all
from stetho.profiles import Profile


def probes_for(profile: Profile) -> tuple[P.Probe, ...]:
    extra: tuple[P.Probe, ...] = ()
    if profile.nccl.run:
        extra = (P.nccl_probe(profile.nccl.argv, profile.nccl.timeout_s),)
    elif profile.nccl.saved_output:
        extra = (P.nccl_saved_probe(profile.nccl.saved_output),)
    return P.BASE_PROBES + extra


def collect(profile: Profile, env: Environment, node: str) -> Bundle:
    records = run_all(probes_for(profile), env)
    return Bundle(node=node, collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  stetho_version=__version__, profile=profile.name, probes=records,
                  sysroot=env.sysroot)


def sim_environment(sim: str) -> tuple[Environment, str]:
    """A simulated node folder (`stetho sim build`): its sysroot, its bin/ first on PATH."""
    folder = Path(sim)
    if not (folder / "sysroot").is_dir() or not (folder / "bin").is_dir():
        raise ConfigError(f"--sim {sim}: not a simulated node folder (no sysroot/ and bin/); "
                          f"build one with `stetho sim build`")
    path = str((folder / "bin").resolve()) + os.pathsep + os.environ.get("PATH", os.defpath)
    from stetho.evidence.runner import timeout_cap_from_env

    return Environment(sysroot=str((folder / "sysroot").resolve()), path=path,
                       timeout_cap=timeout_cap_from_env()), folder.name


def collect_local(profile: str | None = None, sim: str | None = None,
                  node: str | None = None) -> Bundle:
    prof = profiles.load(profile or os.environ.get("STETHO_PROFILE") or profiles.DEFAULT_PROFILE)
    if sim:
        env, sim_name = sim_environment(sim)
        return collect(prof, env, node or sim_name)
    return collect(prof, Environment.from_os(), node or socket.gethostname())
