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
import threading
import time
from collections.abc import Callable, Iterator

from stetho.core.record import record
from stetho.evidence.bundle import ProbeRecord
from stetho.evidence.probes import Probe


@record
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


@record
class ProbeEvent:
    """A probe starting (`record` None) or finished (its record), for whoever watches."""

    name: str
    timeout_s: float
    record: ProbeRecord | None = None


@record
class Watch:
    """How a caller follows and bounds a collection. `deadline` (a time.monotonic() instant):
    after it no probe starts and a running one is killed; `budget_s` is the whole allowance,
    for the records' reasons. `progress` is called from the probes' threads; `on_record` after
    each probe finishes (the collector keeps a partial bundle up to date with it)."""

    deadline: float | None = None
    budget_s: float = 0.0
    progress: Callable[[ProbeEvent], None] | None = None
    on_record: Callable[[ProbeRecord], None] | None = None

    @classmethod
    def within(cls, seconds: float | None,
               progress: Callable[[ProbeEvent], None] | None = None) -> Watch:
        """A watch whose deadline is `seconds` from now (None: no deadline)."""
        deadline = time.monotonic() + seconds if seconds is not None else None
        return cls(deadline=deadline, budget_s=seconds or 0.0, progress=progress)

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def timed_out(self, probe: Probe, why: str) -> ProbeRecord:
        """The record of a probe the deadline stopped: `timeout`, so its checks are errors."""
        return ProbeRecord(probe.name, probe.kind, "timeout", argv=probe.argv,
                           reason=f"timed out: {why} the check's {self.budget_s:g} s deadline")


NO_WATCH = Watch()
#: How long past the deadline a running probe may take to be killed and reaped before it is
#: given up for lost (a file read blocked in the kernel cannot be interrupted).
GRACE_S = 2.0

#: The process groups of the probes running now, by the thread that started each: a probe
#: runs in its own session (so a hung one and everything it forked can be killed together),
#: which also puts it out of reach of whoever kills stetho's own group (Slurm, a watchdog
#: that ends the process); so stetho kills them itself (kill_running_probes).
_LIVE: dict[int, int] = {}
_LIVE_LOCK = threading.Lock()


def kill_running_probes(threads: frozenset[int] | None = None) -> int:
    """SIGKILL the whole process group of every probe still running (or only those started by
    `threads`, thread idents); returns how many groups were signalled. A forked child that
    ignores SIGTERM goes with its probe: its group is killed, not only the probe."""
    with _LIVE_LOCK:
        groups = [g for g, t in _LIVE.items() if threads is None or t in threads]
    killed = 0
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
            killed += 1
        except (ProcessLookupError, PermissionError):
            pass
    return killed


def run_all(probes: tuple[Probe, ...], env: Environment, workers: int = 8,
            watch: Watch = NO_WATCH) -> dict[str, ProbeRecord]:
    """Run probes concurrently; the result keeps the probes' order. Past the watch's deadline,
    probes not started are not started and one still stuck is recorded as timed out and left
    behind (daemon threads: a read blocked forever does not keep the process alive)."""
    todo = list(enumerate(probes))
    done: dict[int, ProbeRecord] = {}
    cond = threading.Condition()

    def work() -> None:
        while True:
            with cond:
                if not todo:
                    return
                i, probe = todo.pop(0)
            rec = run(probe, env, watch)
            with cond:
                done[i] = rec
                cond.notify_all()
            if watch.on_record is not None:
                watch.on_record(rec)

    threads = [threading.Thread(target=work, daemon=True, name="stetho-probe")
               for _ in range(max(1, min(workers, len(probes))))]
    for t in threads:
        t.start()
    with cond:
        while len(done) < len(probes):
            left = watch.remaining()
            if left is not None and left + GRACE_S <= 0:
                break
            cond.wait(None if left is None else left + GRACE_S)
        finished = dict(done)
        todo.clear()
    if len(finished) < len(probes):  # given up for lost: none of its processes outlive it
        kill_running_probes(frozenset(t.ident for t in threads if t.ident is not None))
    records = [finished.get(i) or watch.timed_out(p, "still running at")
               for i, p in enumerate(probes)]
    return {r.name: r for r in records}


def run(probe: Probe, env: Environment, watch: Watch = NO_WATCH) -> ProbeRecord:
    left = watch.remaining()
    if left is not None and left <= 0:
        return watch.timed_out(probe, "not started, past")
    timeout = min(probe.timeout_s, env.timeout_cap or probe.timeout_s)
    if watch.progress is not None:
        watch.progress(ProbeEvent(probe.name, timeout if probe.argv else 0.0))
    record = _run(probe, env, watch)
    if watch.progress is not None:
        watch.progress(ProbeEvent(probe.name, timeout, record))
    return record


def _run(probe: Probe, env: Environment, watch: Watch) -> ProbeRecord:
    if probe.argv:
        record = _run_command(probe, probe.argv, env, watch)
        for alt in probe.fallbacks:
            if record.status in ("ok", "timeout") or (record.status == "failed" and record.stdout):
                break
            left = watch.remaining()
            if left is not None and left <= 0:
                return watch.timed_out(probe, f"{probe.argv[0]} {record.status}, its fallback "
                                       "not started, past")
            alt_record = _run_command(probe, alt, env, watch)
            if alt_record.status != "missing":
                record = alt_record
        return record
    return _read_files(probe, env)


def _run_command(probe: Probe, argv: tuple[str, ...], env: Environment,
                 watch: Watch = NO_WATCH) -> ProbeRecord:
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
    with _LIVE_LOCK:
        _LIVE[proc.pid] = threading.get_ident()
    try:
        return _wait(probe, argv, proc, start, watch,
                     min(probe.timeout_s, env.timeout_cap or probe.timeout_s))
    finally:
        _kill_group(proc)  # whatever it forked goes too, even when the probe itself exited
        with _LIVE_LOCK:
            _LIVE.pop(proc.pid, None)


def _wait(probe: Probe, argv: tuple[str, ...], proc: subprocess.Popen[bytes], start: float,
          watch: Watch, timeout: float) -> ProbeRecord:
    left = watch.remaining()
    by_deadline = left is not None and left < timeout
    if by_deadline:
        timeout = max(0.0, left or 0.0)
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
    if timed_out and by_deadline:
        return ProbeRecord(probe.name, "command", "timeout", argv=argv, rc=None, stdout=stdout,
                           stderr=stderr, duration_s=duration, binary=binary_out,
                           reason=f"timed out: killed after {duration:.1f} s, at the check's "
                           f"{watch.budget_s:g} s deadline")
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
        if proc.poll() is None:
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
                text, binary = _decode(read_bounded(real, probe.max_bytes))
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


#: Files are read this much at a time. A procfs handler may allocate the whole requested size
#: in the kernel (proc_sys_call_handler: kvzalloc(count + 1)), so one read of max_bytes (4 MiB)
#: from /proc/sys/kernel/osrelease fails with ENOMEM on some kernels; a page never does.
READ_CHUNK = 4096


def read_chunks(path: str, max_bytes: int, chunk: int = READ_CHUNK) -> Iterator[bytes]:
    """A procfs/sysfs file as the kernel hands it out: reads of at most `chunk` bytes, until
    EOF (an empty read: a short read is not the end, sysfs and pipes return less than asked)
    or `max_bytes` in all."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        left = max_bytes
        while left > 0:
            data = os.read(fd, min(chunk, left))
            if not data:
                return
            left -= len(data)
            yield data
    finally:
        os.close(fd)


def read_bounded(path: str, max_bytes: int, chunk: int = READ_CHUNK) -> bytes:
    """The first `max_bytes` of a file, read `chunk` bytes at a time (read_chunks)."""
    return b"".join(read_chunks(path, max_bytes, chunk))


#: Bytes that are not UTF-8 a text may carry and still be text (a kernel log line with a
#: device's raw string, a multi-byte character cut at the probe's byte limit): beyond this
#: share, or with a NUL byte, the output is binary.
_STRAY_SHARE = 0.01


def _decode(data: bytes) -> tuple[str, bool]:
    """The text, and whether it is binary. One stray byte in a kernel log must not make the
    whole log unreadable (every Xid in it would go unjudged): it becomes U+FFFD and the rest
    is read. A NUL, or more than 1% undecodable bytes, is binary data."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        stray = text.count("\ufffd")
        return text, b"\x00" in data or stray > max(4, len(data) * _STRAY_SHARE)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return "(no stderr)"


def _is_permission_error(stderr: str) -> bool:
    s = stderr.lower()
    return "permission denied" in s or "operation not permitted" in s
