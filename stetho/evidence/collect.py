"""Collect a node's evidence: run the probes its profile calls for and make the bundle."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from stetho import __version__, profiles
from stetho.errors import ConfigError
from stetho.evidence import probes as P
from stetho.evidence.bench_run import BenchRequest
from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.evidence.runner import Environment, run_all
from stetho.profiles import Profile


def probes_for(profile: Profile) -> tuple[P.Probe, ...]:
    extra: tuple[P.Probe, ...] = ()
    if profile.nccl.run:
        extra = (P.nccl_probe(profile.nccl.argv, profile.nccl.timeout_s),)
    elif profile.nccl.saved_output:
        extra = (P.nccl_saved_probe(profile.nccl.saved_output),)
    return P.BASE_PROBES + extra


def collect(profile: Profile, env: Environment, node: str, bench: BenchRequest | None = None
            ) -> Bundle:
    """The profile's probes (and a benchmark suite's runs). Nothing invasive runs unless the
    node is idle (stetho.evidence.busy): an invasive probe is then `skipped` with the reason."""
    from stetho.core import hostlist
    from stetho.evidence import bench_run, busy

    hostlist.validate(node)  # --node, the hostname, a simulated node: one rule for names
    probes = probes_for(profile)
    benchmarks = bench_run.suite(bench.suite, bench.only) if bench else ()
    records: dict[str, ProbeRecord] = {}
    if any(p.invasive for p in probes) or any("idle" in b.needs for b in benchmarks):
        state, records[busy.PROBE] = busy.detect(node, env)
        if not state.idle:
            for p in probes:
                if p.invasive:
                    records[p.name] = ProbeRecord(p.name, "command", "skipped", argv=p.argv,
                                                  reason=state.skip_reason())
            probes = tuple(p for p in probes if not p.invasive)
    records.update(run_all(tuple(p for p in probes if not p.per_device), env))
    devices = _rdma_devices(records.get("ib_sysfs")) or _ibstat_devices(records.get("ibstat"))
    per_device = [p for p in probes if p.per_device]
    if per_device and devices:
        import shutil

        bound = []
        for p in per_device:
            if shutil.which(p.argv[0], path=env.path) is None:
                records[p.name] = ProbeRecord(p.name, "command", "missing", argv=p.argv,
                                              reason=f"{p.argv[0]} not found on PATH")
            else:
                bound += [P.for_device(p, d) for d in devices]
        # one short command per HCA and tool (mlxlink, perfquery -x, -E): more at once
        records.update(run_all(tuple(bound), env, workers=16))
    if bench is not None:
        ctx = bench_run.BenchContext(node=node, suite=bench.suite, gpus=_gpu_count(records),
                                     rdma_devices=tuple(devices), peer=bench.peer,
                                     runtime_s=bench.runtime_s, progress=bench.progress)
        records.update(bench_run.run_suite(benchmarks, ctx, env))
    return Bundle(node=node, collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  stetho_version=__version__, profile=profile.name, probes=records,
                  sysroot=env.sysroot)


def _gpu_count(records: dict[str, ProbeRecord]) -> int:
    rec = records.get("nvidia_smi")
    return rec.stdout.count("<gpu id=") if rec is not None and rec.status == "ok" else 0


def _rdma_devices(rec: ProbeRecord | None) -> list[str]:
    """RDMA device names from the sysfs probe's paths (/sys/class/infiniband/<dev>/...)."""
    if rec is None or rec.status != "ok":
        return []
    names = {p.split("/")[4] for p in rec.files if p.startswith("/sys/class/infiniband/")}
    return sorted(names)


def _ibstat_devices(rec: ProbeRecord | None) -> list[str]:
    """RDMA device names from ibstat's `CA '<dev>'` lines: where /sys/class/infiniband is not
    visible (a container), the per-device probes still run on the HCAs ibstat lists."""
    import re

    if rec is None or not rec.stdout:
        return []
    return sorted(set(re.findall(r"^CA:? '([^']+)'$", rec.stdout, flags=re.M)))


def sim_environment(sim: str) -> tuple[Environment, str]:
    """A simulated node folder (`stetho sim build`): its sysroot, its bin/ first on PATH."""
    folder = Path(sim)
    if not (folder / "sysroot").is_dir() or not (folder / "bin").is_dir():
        raise ConfigError(f"--sim {sim}: not a simulated node folder (no sysroot/ and bin/); "
                          f"build one with `stetho sim build`")
    from stetho import config

    cfg = config.active()
    path = str((folder / "bin").resolve()) + os.pathsep + (cfg.path or os.defpath)
    return Environment(sysroot=str((folder / "sysroot").resolve()), path=path,
                       timeout_cap=cfg.probe_timeout), folder.name


def collect_local(profile: str | None = None, sim: str | None = None,
                  node: str | None = None, bench: BenchRequest | None = None) -> Bundle:
    from stetho import config

    prof = profiles.load(profile or config.active().profile or profiles.DEFAULT_PROFILE)
    if sim:
        env, sim_name = sim_environment(sim)
        return collect(prof, env, node or sim_name, bench)
    return collect(prof, Environment.configured(), node or socket.gethostname(), bench)
