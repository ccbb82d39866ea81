"""One runner for every probe: commands on PATH with a timeout, files under a sysroot.

It never raises for a node's sake: a missing tool, a hang, a permission error or binary output
are all recorded in the ProbeRecord, so one bad probe never stops the others.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from stetho.evidence.bundle import ProbeRecord
from stetho.evidence.probes import Probe


@dataclass(frozen=True)
class Environment:
    """Where probes look: file reads under `sysroot`, commands on `path`. `timeout_cap`
    (STETHO_PROBE_TIMEOUT) caps every probe's timeout, e.g. for a quick pre-job gate."""

    sysroot: str = "/"
    path: str = os.defpath
    timeout_cap: float | None = None

    @classmethod
    def configured(cls, sysroot: str | None = None, path: str | None = None) -> Environment:
        """This node as configured: its sysroot, PATH and probe timeout cap."""
        from stetho import config

        cfg = config.active()
        return cls(sysroot=sysroot or cfg.sysroot or "/", path=path or cfg.path or os.defpath,
                   timeout_cap=cfg.probe_timeout)


def run_all(probes: tuple[Probe, ...], env: Environment,
            workers: int = 8) -> dict[str, ProbeRecord]:
    """Run probes concurrently; the result keeps the probes' order."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(probes)))) as pool:
        records = list(pool.map(lambda p: run(p, env), probes))
    return {r.name: r for r in records}


def run(probe: Probe, env: Environment) -> ProbeRecord:
    if probe.argv:
        record = _run_command(probe, probe.argv, env)
        for alt in probe.fallbacks:
            if record.status in ("ok", "timeout") or (record.status == "failed" and record.stdout):
                break
            alt_record = _run_command(probe, alt, env)
            if alt_record.status != "missing":
                record = alt_record
        return record
    return _read_files(probe, env)


def _run_command(probe: Probe, argv: tuple[str, ...], env: Environment) -> ProbeRecord:
    exe = shutil.which(argv[0], path=env.path)
    if exe is None:
        return ProbeRecord(probe.name, "command", "missing", argv=argv,
                           reason=f"{argv[0]} not found on PATH")
    from stetho import config

    child_env = config.child_environment({"PATH": env.path, "LC_ALL": "C", "LANG": "C",
                                          **dict(probe.env)})
    if env.sysroot != "/":
        child_env["STETHO_SYSROOT"] = env.sysroot
    start = time.monotonic()
    try:
        proc = subprocess.Popen(  # argv list, never a shell
            [exe, *argv[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=child_env, start_new_session=True)
    except PermissionError as exc:
        return ProbeRecord(probe.name, "command", "denied", argv=argv, reason=str(exc))
    except OSError as exc:
        return ProbeRecord(probe.name, "command", "error", argv=argv, reason=str(exc))
    timeout = min(probe.timeout_s, env.timeout_cap or probe.timeout_s)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    duration = time.monotonic() - start
    stdout, binary_out = _decode(out[: probe.max_bytes])
    stderr, _ = _decode(err[: probe.max_bytes])
    if timed_out:
        return ProbeRecord(probe.name, "command", "timeout", argv=argv, rc=None, stdout=stdout,
                           stderr=stderr, duration_s=duration, binary=binary_out,
                           reason=f"hung: killed after its {timeout:g} s timeout")
    status = "ok" if proc.returncode == 0 else "failed"
    reason = "" if status == "ok" else f"exited {proc.returncode}: {_first_line(stderr)}"
    if status == "failed" and _is_permission_error(stderr):
        status = "denied"
    return ProbeRecord(probe.name, "command", status, argv=argv, rc=proc.returncode,
                       stdout=stdout, stderr=stderr, duration_s=duration, binary=binary_out,
                       reason=reason)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _read_files(probe: Probe, env: Environment) -> ProbeRecord:
    start = time.monotonic()
    root = env.sysroot.rstrip("/")
    files: dict[str, str] = {}
    errors: dict[str, str] = {}
    for pattern in probe.globs:
        for real in sorted(glob.glob(root + pattern)):
            node_path = real[len(root):] if root else real
            if not probe.read:
                files[node_path] = ""
                continue
            try:
                with open(real, "rb") as fh:
                    text, binary = _decode(fh.read(probe.max_bytes))
                files[node_path] = text
                if binary:
                    errors[node_path] = "binary content"
            except PermissionError:
                errors[node_path] = "permission denied"
            except OSError as exc:
                errors[node_path] = exc.strerror or str(exc)
    duration = time.monotonic() - start
    if files:
        status, reason = "ok", ""
    elif errors and all(v == "permission denied" for v in errors.values()):
        status, reason = "denied", f"permission denied reading {next(iter(errors))}"
    elif errors:
        status, reason = "error", "; ".join(f"{k}: {v}" for k, v in list(errors.items())[:3])
    else:
        status, reason = "absent", f"no file matches {', '.join(probe.globs)}"
    return ProbeRecord(probe.name, "files", status, files=files, errors=errors,
                       duration_s=duration, reason=reason)


def _decode(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no stderr)"


def _is_permission_error(stderr: str) -> bool:
    s = stderr.lower()
    return "permission denied" in s or "operation not permitted" in s
