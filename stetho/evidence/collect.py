"""Collect a node's evidence: run the probes its profile calls for and make the bundle."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from stetho import __version__, profiles
from stetho.errors import ConfigError
from stetho.evidence import probes as P
from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.evidence.runner import NO_WATCH, Environment, Watch, run_all
from stetho.profiles import Profile

if TYPE_CHECKING:  # the benchmark runner loads only for a run with --bench
    from stetho.evidence.bench_run import BenchRequest


def probes_for(profile: Profile) -> tuple[P.Probe, ...]:
    extra: tuple[P.Probe, ...] = ()
    if profile.nccl.run:
        extra = (P.nccl_probe(profile.nccl.argv, profile.nccl.timeout_s),)
    elif profile.nccl.saved_output:
        extra = (P.nccl_saved_probe(profile.nccl.saved_output),)
    if profile.host.services:
        extra += (P.services_probe(profile.host.services),)
    if profile.nccl.container_image:
        extra += (P.nccl_image_probe(profile.nccl.container_image),)
    if profile.nccl.env_module:
        extra += (P.nccl_module_probe(profile.nccl.env_module),)
    roce = P.ROCE_PROBES if profile.roce is not None else ()
    return P.BASE_PROBES + roce + extra


UNFINISHED = "timed out: the check stopped before this probe finished (partial evidence)"


class _Partial:
    """The bundle so far, handed to `sink` after every probe: each probe not finished yet is
    in it as `timeout` (fail closed: a check over a probe that never finished is an error,
    never a pass), so a node killed mid-collection still leaves evidence to evaluate."""

    def __init__(self, make: Callable[[dict[str, ProbeRecord]], Bundle],
                 sink: Callable[[Bundle], None], pending: tuple[P.Probe, ...]) -> None:
        self.make, self.sink = make, sink
        self.lock = threading.Lock()
        self.records: dict[str, ProbeRecord] = {}
        self.pending = {p.name: p for p in pending}
        self.closed = False

    def close(self) -> None:
        """No more writes: a probe left behind at the deadline, finishing late, must not
        replace the final bundle with a partial one."""
        with self.lock:
            self.closed = True

    def expect(self, probes: tuple[P.Probe, ...], instead_of: tuple[str, ...] = ()) -> None:
        with self.lock:
            for name in instead_of:
                self.pending.pop(name, None)
            self.pending.update((p.name, p) for p in probes if p.name not in self.records)

    def add(self, *records: ProbeRecord) -> None:
        with self.lock:  # one writer at a time: the sink replaces one file
            if self.closed:
                return
            for rec in records:
                self.records[rec.name] = rec
                self.pending.pop(rec.name, None)
            unfinished = {n: ProbeRecord(n, p.kind, "timeout", argv=p.argv, reason=UNFINISHED)
                          for n, p in self.pending.items()}
            self.sink(self.make({**self.records, **unfinished}))


def collect(profile: Profile, env: Environment, node: str, bench: BenchRequest | None = None,
            watch: Watch = NO_WATCH, on_partial: Callable[[Bundle], None] | None = None
            ) -> Bundle:
    """The profile's probes (and a benchmark suite's runs). Nothing invasive runs unless the
    node is idle (stetho.evidence.busy): an invasive probe is then `skipped` with the reason.

    `watch` bounds the collection with a deadline and reports each probe's start and end;
    `on_partial` receives the bundle so far after every probe (see _Partial)."""
    from stetho.core import hostlist
    from stetho.evidence import busy

    hostlist.validate(node)  # --node, the hostname, a simulated node: one rule for names
    probes = probes_for(profile)
    if bench is not None:
        from stetho.evidence import bench_run

        benchmarks = bench_run.suite(bench.suite, bench.only)
    else:
        benchmarks = ()
    records: dict[str, ProbeRecord] = {}

    def make(recs: dict[str, ProbeRecord]) -> Bundle:
        return Bundle(node=node, profile=profile.name, probes=recs, sysroot=env.sysroot,
                      collected_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      stetho_version=__version__)

    partial = _Partial(make, on_partial, probes) if on_partial is not None else None
    if partial is not None:
        watch = replace(watch, on_record=partial.add)
        partial.add()  # on disk before anything can hang (the busy check asks nvidia-smi)
    if any(p.invasive for p in probes) or any("idle" in b.needs for b in benchmarks):
        left = watch.remaining()  # asking (nvidia-smi may hang) leaves the probes half
        capped = env if left is None else replace(env, timeout_cap=max(0.1, min(
            left / 2, env.timeout_cap or left)))
        state, records[busy.PROBE] = busy.detect(node, capped)
        if not state.idle:
            for p in probes:
                if p.invasive:
                    records[p.name] = ProbeRecord(p.name, "command", "skipped", argv=p.argv,
                                                  reason=state.skip_reason())
            probes = tuple(p for p in probes if not p.invasive)
    if partial is not None:
        partial.add(*records.values())
    records.update(run_all(tuple(p for p in probes if not (p.per_device or p.per_nvme)), env,
                           watch=watch))
    devices = _rdma_devices(records.get("ib_sysfs")) or _ibstat_devices(records.get("ibstat"))
    per_device = [p for p in probes if p.per_device]
    bound = _bind_nvme(probes, records, env, partial)
    if per_device and devices:
        import shutil

        for p in per_device:
            if shutil.which(p.argv[0], path=env.path) is None:
                records[p.name] = ProbeRecord(p.name, "command", "missing", argv=p.argv,
                                              reason=f"{p.argv[0]} not found on PATH")
            elif "{netdev}" in " ".join(p.argv):  # only the devices that have a netdev
                nets = _netdevs(records.get("roce_sysfs"))
                bound += [P.for_device(p, d, nets[d]) for d in devices if d in nets]
            else:
                bound += [P.for_device(p, d) for d in devices]
        if partial is not None:
            partial.expect(tuple(bound), instead_of=tuple(p.name for p in per_device))
            partial.add(*(records[p.name] for p in per_device if p.name in records))
        # one short command per HCA and tool (mlxlink, perfquery -x, -E): more at once
        records.update(run_all(tuple(bound), env, workers=16, watch=watch))
    else:
        if partial is not None:  # no HCA found: the per-device probes have nothing to run on
            partial.expect((), instead_of=tuple(p.name for p in per_device))
        records.update(run_all(tuple(bound), env, workers=16, watch=watch))
    if bench is not None:
        from stetho.evidence import bench_run

        ctx = bench_run.BenchContext(node=node, suite=bench.suite, gpus=_gpu_count(records),
                                     rdma_devices=tuple(devices), peer=bench.peer,
                                     runtime_s=bench.runtime_s, progress=bench.progress)
        records.update(bench_run.run_suite(benchmarks, ctx, env))
    if partial is not None:
        partial.close()
    return make(records)


def _bind_nvme(probes: tuple[P.Probe, ...], records: dict[str, ProbeRecord], env: Environment,
               partial: _Partial | None) -> list[P.Probe]:
    """The per-NVMe probes bound to each controller the block_queue probe saw (nvme0n1 ->
    nvme0); a tool missing with its fallbacks is recorded once, unbound, as `missing`."""
    import shutil

    per_nvme = [p for p in probes if p.per_nvme]
    found = _nvme_controllers(records.get("block_queue"))
    bound: list[P.Probe] = []
    for p in per_nvme if found else ():
        if all(shutil.which(a[0], path=env.path) is None for a in (p.argv, *p.fallbacks)):
            records[p.name] = ProbeRecord(p.name, "command", "missing", argv=p.argv, reason=(
                f"{' and '.join(a[0] for a in (p.argv, *p.fallbacks))} not found on PATH"))
        else:
            bound += [P.for_device(p, c) for c in found]
    if partial is not None:
        partial.expect(tuple(bound), instead_of=tuple(p.name for p in per_nvme))
        partial.add(*(records[p.name] for p in per_nvme if p.name in records))
    return bound


def _nvme_controllers(rec: ProbeRecord | None) -> list[str]:
    """NVMe controllers from the block devices' sysfs paths (/sys/block/nvme0n1/... -> nvme0;
    a multipath namespace nvme0c1n1 belongs to nvme0 too)."""
    import re

    if rec is None or rec.status != "ok":
        return []
    found = {m.group(1) for p in rec.files
             if (m := re.match(r"/sys/block/(nvme\d+)(?:c\d+)?n\d+/", p))}
    return sorted(found, key=lambda c: int(c[4:]))


def _gpu_count(records: dict[str, ProbeRecord]) -> int:
    rec = records.get("nvidia_smi")
    return rec.stdout.count("<gpu id=") if rec is not None and rec.status == "ok" else 0


def _rdma_devices(rec: ProbeRecord | None) -> list[str]:
    """RDMA device names from the sysfs probe's paths (/sys/class/infiniband/<dev>/...)."""
    if rec is None or rec.status != "ok":
        return []
    names = {p.split("/")[4] for p in rec.files if p.startswith("/sys/class/infiniband/")}
    return sorted(names)


def _netdevs(rec: ProbeRecord | None) -> dict[str, str]:
    """RDMA device -> its netdev, from /sys/class/infiniband/<dev>/device/net/<netdev>/..."""
    if rec is None or rec.status != "ok":
        return {}
    parts = (p.split("/") for p in rec.files if p.startswith("/sys/class/infiniband/"))
    return {q[4]: q[7] for q in parts if len(q) > 8 and q[5:7] == ["device", "net"]}


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
                  node: str | None = None, bench: BenchRequest | None = None,
                  watch: Watch = NO_WATCH, on_partial: Callable[[Bundle], None] | None = None
                  ) -> Bundle:
    from stetho import config

    prof = profiles.load(profile or config.active().profile or profiles.DEFAULT_PROFILE)
    if sim:
        env, sim_name = sim_environment(sim)
        return collect(prof, env, node or sim_name, bench, watch, on_partial)
    return collect(prof, Environment.configured(), node or socket.gethostname(), bench, watch,
                   on_partial)
