"""Run a benchmark suite on this node: each benchmark's repeats become probes in the bundle.

For every benchmark of the suite (benchmarks/*.yml plus the site's folders), in order:
what it needs is checked first (its tools on PATH, GPUs, RDMA devices, root, a peer), and a
benchmark that needs `idle` asks the node again right before it starts (stetho.evidence.busy:
a job may have started since the last one). A benchmark that cannot run is one `skipped`
record with the reason; it is never left out.

Records, all raw (the facts stage parses them, so replays re-measure with newer parsers):
  bench:<name>            the plan: status ok or skipped (reason), stdout a JSON of the run's
                          shape (argv without the per-run values), repeats, devices, suite
  bench:<name>[:dev]#<i>  repeat i (1-based) of the command, on device dev for per: hca/gpu
  bench-version:<tool>    the tool's `--version`, for the baseline's fingerprint
A `server` runs on this node for a loopback peer and is stopped after each repeat; `{tmpdir}`
is one fresh folder per benchmark (and device), shared by its repeats, removed after them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from stetho.benchmarks.spec import Benchmark
from stetho.evidence import busy as busy_mod
from stetho.evidence.bundle import ProbeRecord
from stetho.evidence.probes import Probe
from stetho.evidence.runner import Environment, run

PLAN = "bench:"
VERSION = "bench-version:"
#: Tools whose `--version` is safe and quick (gpu_burn would start burning).
VERSION_ARGS: dict[str, tuple[str, ...]] = {
    "fio": ("--version",), "iperf3": ("--version",), "dcgmi": ("--version",),
    "ib_write_bw": ("--version",), "ib_send_lat": ("--version",),
}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_SERVER_START_S = 10.0
#: Values that change on every run and so are not part of a benchmark's shape.
_PER_RUN = ("tmpdir", "port", "peer")


@dataclass(frozen=True)
class BenchRequest:
    """What `stetho bench run` / `check --bench` asks for: a suite, a peer, a run length."""

    suite: str
    peer: str | None = None
    runtime_s: float | None = None
    progress: Callable[[str], None] | None = None
    only: tuple[str, ...] = ()  # just these benchmarks of the suite (names)


def suite(name: str, only: tuple[str, ...] = ()) -> tuple[Benchmark, ...]:
    """The suite's benchmarks: shipped ones plus the configured folders (STETHO_BENCHMARKS);
    `only` narrows it to some of them by name (an unknown name is a ConfigError)."""
    from stetho import config
    from stetho.benchmarks import spec
    from stetho.errors import ConfigError

    chosen = spec.select(spec.load_all_cached(tuple(config.active().benchmarks)).values(), name)
    unknown = sorted(set(only) - {b.name for b in chosen})
    if unknown:
        raise ConfigError(f"not in the {name} suite: {', '.join(unknown)} (in it: "
                          f"{', '.join(b.name for b in chosen)})")
    return tuple(b for b in chosen if not only or b.name in only)


@dataclass(frozen=True)
class BenchContext:
    """What the node offers: facts the runner needs before any parser stage exists."""

    node: str
    suite: str
    gpus: int = 0
    rdma_devices: tuple[str, ...] = ()
    peer: str | None = None
    runtime_s: float | None = None  # overrides each benchmark's default {runtime_s}
    progress: Callable[[str], None] | None = None


def run_suite(benchmarks: tuple[Benchmark, ...], ctx: BenchContext,
              env: Environment) -> dict[str, ProbeRecord]:
    out: dict[str, ProbeRecord] = {}
    for tool in sorted({t for b in benchmarks for t in b.tools if t in VERSION_ARGS}):
        if shutil.which(tool, path=env.path) is not None:
            name = VERSION + tool
            out[name] = run(Probe(name, (tool, *VERSION_ARGS[tool]), timeout_s=10), env)
    for bench in benchmarks:
        out.update(run_benchmark(bench, ctx, env))
    return out


def run_benchmark(bench: Benchmark, ctx: BenchContext,
                  env: Environment) -> dict[str, ProbeRecord]:
    devices = _devices(bench, ctx)
    values = _values(bench, ctx)
    shape_argv = bench.argv({**values, **{k: "{" + k + "}" for k in _PER_RUN},
                             "device": "{device}"})
    shape = " ".join(shape_argv)
    plan = {"suite": ctx.suite, "repeats": bench.repeats, "devices": list(devices),
            "shape": shape, "source": bench.source}
    why = _cannot_run(bench, ctx, env)
    if why is None and "idle" in bench.needs:
        state, _ = busy_mod.detect(ctx.node, env)
        if not state.idle:
            why = state.skip_reason()
    name = PLAN + bench.name
    if why is not None:
        return {name: ProbeRecord(name, "command", "skipped", argv=shape_argv,
                                  stdout=json.dumps(plan), reason=why)}
    out = {name: ProbeRecord(name, "command", "ok", argv=shape_argv,
                             stdout=json.dumps(plan))}
    for device in devices:
        # One {tmpdir} for all repeats: fio lays its file out once, and the repeats measure
        # the same file (the first is not the only one paying for the layout).
        tmp = Path(tempfile.mkdtemp(prefix="stetho-bench-"))
        try:
            for i in range(1, bench.repeats + 1):
                label = f"{PLAN}{bench.name}{':' + device if device else ''}#{i}"
                if ctx.progress:
                    ctx.progress(f"{bench.name}{' ' + device if device else ''} run {i}/"
                                 f"{bench.repeats}")
                out[label] = _one_run(bench, label, {**values, "device": device,
                                                     "tmpdir": str(tmp)}, env)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _devices(bench: Benchmark, ctx: BenchContext) -> tuple[str, ...]:
    if bench.per == "hca":
        return ctx.rdma_devices
    if bench.per == "gpu":
        return tuple(str(i) for i in range(ctx.gpus))
    return ("",)


def _values(bench: Benchmark, ctx: BenchContext) -> dict[str, object]:
    values: dict[str, object] = {"gpus": ctx.gpus, "peer": ctx.peer or ""}
    if ctx.runtime_s is not None and "runtime_s" in bench.placeholders:
        values["runtime_s"] = f"{ctx.runtime_s:g}"
    return values


def _cannot_run(bench: Benchmark, ctx: BenchContext, env: Environment) -> str | None:
    """Why this node cannot run the benchmark at all (None: it can)."""
    missing = [t for t in bench.tools if shutil.which(t, path=env.path) is None]
    if missing:
        return f"{', '.join(missing)} not installed on this node (needs tool:{missing[0]})"
    if "gpu" in bench.needs and ctx.gpus < 1:
        return "needs GPUs: nvidia-smi lists none on this node"
    if "ib" in bench.needs and not ctx.rdma_devices:
        return "needs RDMA devices: none under /sys/class/infiniband"
    if "root" in bench.needs and os.geteuid() != 0:
        return "needs root"
    if "peer" in bench.needs and not ctx.peer:
        return "needs a peer to run against: give --peer HOST (127.0.0.1: this node)"
    if bench.server is not None and ctx.peer not in LOOPBACK:
        return (f"its server side must run on {ctx.peer}; `stetho bench run` starts servers "
                "on this node only: give --peer 127.0.0.1, or run the server there")
    return None


def _one_run(bench: Benchmark, label: str, values: dict[str, object],
             env: Environment) -> ProbeRecord:
    server: subprocess.Popen[bytes] | None = None
    try:
        run_values = {**values, "port": _free_port()}
        server_argv = bench.server_argv(run_values)
        if server_argv is not None:
            server, why = _start_server(server_argv, int(str(run_values["port"])), env)
            if server is None:
                return ProbeRecord(label, "command", "error", argv=server_argv, reason=why)
        return run(Probe(label, bench.argv(run_values), timeout_s=bench.timeout_s), env)
    finally:
        if server is not None:
            _stop(server)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(argv: tuple[str, ...], port: int, env: Environment
                  ) -> tuple[subprocess.Popen[bytes] | None, str]:
    """Start the server and wait until it listens on `port` (read from /proc/net, so that no
    probe connection is spent on a one-shot server)."""
    from stetho import config

    exe = shutil.which(argv[0], path=env.path)
    if exe is None:
        return None, f"{argv[0]} not found on PATH"
    proc = subprocess.Popen(  # argv list, never a shell
        [exe, *argv[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
        env=config.child_environment({"PATH": env.path, "LC_ALL": "C", "LANG": "C"}))
    deadline = time.monotonic() + _SERVER_START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            return None, f"server exited {proc.returncode} before listening: {err[-300:]}"
        if _listening(port):
            return proc, ""
        time.sleep(0.01)
    _stop(proc)
    return None, f"server did not listen on port {port} within {_SERVER_START_S:g} s"


def _listening(port: int) -> bool:
    want = f":{port:04X} "
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 3 and (cols[1] + " ").endswith(want) and cols[3] == "0A":
                return True
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.stderr:
        proc.stderr.close()
