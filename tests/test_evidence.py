"""The probe runner with real processes: missing tools, hangs, denials, binary output."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from stetho.evidence import bundle as B
from stetho.evidence.probes import BASE_PROBES, KERNEL_RELEASE, Probe
from stetho.evidence.runner import READ_CHUNK, Environment, read_bounded, read_chunks, run, run_all


def _tool(folder: Path, name: str, script: str, mode: int = 0o755) -> None:
    p = folder / name
    p.write_text("#!/bin/sh\n" + script + "\n")
    p.chmod(mode)


@pytest.fixture
def bindir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    return d


def test_command_ok_records_everything(bindir):
    _tool(bindir, "hello", 'echo "out $*"; echo err >&2')
    rec = run(Probe("h", ("hello", "a", "b")), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert (rec.status, rec.rc, rec.stdout, rec.stderr) == ("ok", 0, "out a b\n", "err\n")
    assert rec.argv == ("hello", "a", "b") and rec.duration_s >= 0


def test_missing_tool(bindir):
    rec = run(Probe("x", ("no-such-tool",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status == "missing" and "no-such-tool not found on PATH" in rec.reason


def _dead(pid: int) -> bool:
    """Gone, or a zombie (killed, waiting to be reaped by whoever adopted it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_hang_is_killed_at_its_timeout_with_its_children(bindir, tmp_path):
    """The probe and the child it left behind (an hour-long sleep, detached from the pipes so
    it cannot hold the runner up) are both killed: the child is dead once the runner returns
    (polled for, like any readiness; how fast is bench material)."""
    pidfile = tmp_path / "child.pid"
    _tool(bindir, "hangs", f"sleep 3600 >/dev/null 2>&1 & echo $! > {pidfile}; sleep 3600")
    rec = run(Probe("h", ("hangs",), timeout_s=0.5), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status == "timeout" and "0.5 s timeout" in rec.reason
    child = int(pidfile.read_text())
    try:
        for _ in range(600):
            if _dead(child):
                break
            time.sleep(0.05)
        assert _dead(child), "the probe's child outlived the probe's timeout"
    finally:
        if not _dead(child):
            os.kill(child, 9)


def test_timeout_cap_from_environment(bindir):
    _tool(bindir, "hangs", "sleep 30")
    rec = run(Probe("h", ("hangs",), timeout_s=60), Environment(path=f"{bindir}:/usr/bin:/bin",
                                                                 timeout_cap=0.3))
    assert rec.status == "timeout"


def test_not_executable_is_denied(bindir):
    # shutil.which skips non-executable files, so the tool is missing, never a crash
    _tool(bindir, "locked", "echo hi", mode=0o644)
    rec = run(Probe("l", ("locked",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status in ("missing", "denied")


def test_permission_message_is_denied(bindir):
    _tool(bindir, "dmesg", 'echo "dmesg: read kernel buffer failed: Operation not permitted" >&2;'
          " exit 1")
    _tool(bindir, "journalctl", "exit 1")
    rec = run(Probe("k", ("dmesg",), fallbacks=(("journalctl", "-k"),)),
              Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status in ("denied", "failed")


def test_fallback_used_when_first_is_refused(bindir):
    _tool(bindir, "dmesg", "echo 'Operation not permitted' >&2; exit 1")
    _tool(bindir, "journalctl", "echo 'Jul 31 kernel: hello'")
    rec = run(Probe("k", ("dmesg",), fallbacks=(("journalctl", "-k"),)),
              Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status == "ok" and rec.argv[0] == "journalctl"


def test_nonzero_exit_keeps_partial_output(bindir):
    _tool(bindir, "ibstat", "echo \"CA 'mlx5_0'\"; echo 'ibpanic: boom' >&2; exit 255")
    rec = run(Probe("ibstat", ("ibstat",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.status == "failed" and rec.rc == 255 and "mlx5_0" in rec.stdout


def test_binary_output_is_flagged(bindir):
    _tool(bindir, "bin", "printf '\\377\\376\\000garbage'")
    rec = run(Probe("b", ("bin",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.binary


def test_files_under_sysroot(tmp_path):
    root = tmp_path / "root"
    for cpu, gov in ((0, "performance"), (1, "powersave")):
        p = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        p.parent.mkdir(parents=True)
        p.write_text(gov + "\n")
    probe = Probe("g", globs=("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor",))
    rec = run(probe, Environment(sysroot=str(root)))
    assert rec.status == "ok"
    assert rec.files == {"/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance\n",
                         "/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "powersave\n"}


def test_files_absent_and_denied(tmp_path):
    absent = run(Probe("ib", globs=("/sys/class/infiniband/*/fw_ver",)),
                 Environment(sysroot=str(tmp_path)))
    assert absent.status == "absent"
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    p = tmp_path / "secret"
    p.write_text("x")
    p.chmod(0)
    denied = run(Probe("s", globs=("/secret",)), Environment(sysroot=str(tmp_path)))
    assert denied.status == "denied"


def test_kernel_release_is_read_from_this_machines_procfs():
    """/proc/sys/kernel/osrelease refuses a 4 MiB read with ENOMEM on some kernels (this
    one among them when it was written): read a page at a time, it gives the release."""
    rec = run(KERNEL_RELEASE, Environment())
    assert rec.status == "ok", rec.reason
    assert rec.files["/proc/sys/kernel/osrelease"] == os.uname().release + "\n"
    boot = rec.files["/proc/sys/kernel/random/boot_id"]  # read with it: the counters' epoch
    assert len(boot.strip().replace("-", "")) == 32


def test_a_file_larger_than_one_chunk_is_read_whole_up_to_max_bytes(tmp_path):
    p = tmp_path / "big"
    data = bytes(range(256)) * (3 * READ_CHUNK // 256) + b"tail"
    p.write_bytes(data)
    assert read_bounded(str(p), 4 * 1024 * 1024) == data
    assert read_bounded(str(p), READ_CHUNK + 10) == data[:READ_CHUNK + 10]
    assert [len(c) for c in read_chunks(str(p), len(data))] == [READ_CHUNK] * 3 + [4]


def _fifo_writer(path: str, pieces: list[bytes], between: threading.Event | None = None
                 ) -> threading.Thread:
    def write() -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            for i, piece in enumerate(pieces):
                if i and between is not None:
                    between.wait(10)
                os.write(fd, piece)
        finally:
            os.close(fd)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    return t


def test_each_read_asks_for_at_most_one_chunk(tmp_path):
    """A pipe returns everything it holds to a read that asks for more: three chunks and a bit,
    written before the first read, come back one chunk at a time only if each read asked for
    one chunk (a FIFO stands in for a procfs file; no file-system mock)."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    data = b"x" * (3 * READ_CHUNK + 5)
    writer = _fifo_writer(fifo, [data])
    writer.join(10)  # 12 KiB fits the pipe: written and closed before the reads
    chunks = list(read_chunks(fifo, 4 * 1024 * 1024))
    assert b"".join(chunks) == data and max(len(c) for c in chunks) <= READ_CHUNK


def test_short_reads_are_not_the_end_of_the_file(tmp_path):
    """A procfs or sysfs file may hand out less than asked before its end, as a pipe does
    while its writer is still writing: only an empty read ends the file."""
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    go_on = threading.Event()
    writer = _fifo_writer(fifo, [b"first part, ", b"second part\n"], go_on)
    chunks = read_chunks(fifo, 1024)
    assert next(chunks) == b"first part, "  # a short read: 12 of the 1024 bytes asked for
    go_on.set()
    assert b"".join(chunks) == b"second part\n"
    writer.join(10)


def test_the_runner_reads_a_file_in_pieces_to_its_end(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    writer = _fifo_writer(str(tmp_path / "fifo"), [b"ab", b"cd"])
    rec = run(Probe("f", globs=("/fifo",)), Environment(sysroot=str(tmp_path)))
    writer.join(10)
    assert rec.status == "ok" and rec.files == {"/fifo": "abcd"}


def test_run_all_is_concurrent(bindir, tmp_path):
    """Six probes that each wait for all six to have started: they finish only if they run
    at the same time (run one by one, the first waits for the others until its timeout)."""
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    _tool(bindir, "meet", f'touch {arrived}/$1; while [ "$(ls {arrived} | wc -l)" -lt 6 ]; '
                          "do sleep 0.02; done; echo done")
    probes = tuple(Probe(f"p{i}", ("meet", f"p{i}"), timeout_s=60) for i in range(6))
    records = run_all(probes, Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert list(records) == [f"p{i}" for i in range(6)]
    assert all(r.status == "ok" and r.stdout == "done\n" for r in records.values())


def test_every_base_probe_has_a_unique_name():
    names = [p.name for p in BASE_PROBES]
    assert len(names) == len(set(names))
    assert all(bool(p.argv) != bool(p.globs) for p in BASE_PROBES)


def _bundle(**kw):
    rec = B.ProbeRecord("nvidia_smi", "command", "ok", argv=("nvidia-smi",), stdout="x")
    return B.Bundle(node="n1", collected_at="2026-01-01T00:00:00+00:00", stetho_version="0",
                    profile="generic", probes={"nvidia_smi": rec}, **kw)


def test_bundle_round_trip(tmp_path):
    b = _bundle()
    b.save(tmp_path / "b.json")
    assert B.load(tmp_path / "b.json") == b
    assert not list(tmp_path.glob("*.tmp"))


def test_bundle_from_a_newer_stetho_is_refused(tmp_path):
    data = _bundle().to_json()
    data["schema_version"] = B.SCHEMA_VERSION + 1
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(B.BundleError, match="newer than this stetho"):
        B.load(tmp_path / "b.json")


def test_not_a_bundle(tmp_path):
    (tmp_path / "b.json").write_text('{"hello": 1}')
    with pytest.raises(B.BundleError, match="not a stetho evidence bundle"):
        B.load(tmp_path / "b.json")


def test_find_bundles_in_a_run_folder(tmp_path):
    _bundle().save(tmp_path / "a" / "n1.json")
    (tmp_path / "a" / "results.json").write_text('{"schema": "stetho.results"}')
    assert [p.name for p in B.find_bundles(tmp_path)] == ["n1.json"]
    with pytest.raises(B.BundleError, match="not a stetho evidence bundle"):
        B.load(tmp_path / "a" / "results.json")
    with pytest.raises(B.BundleError, match="no evidence bundles found"):
        B.find_bundles(tmp_path / "a" / "empty") if (tmp_path / "a" / "empty").mkdir() \
            is None else None


def test_require_bundles_raises_what_find_bundles_raises(tmp_path):
    """`stetho check --evidence` checks up front that there is a bundle without listing the
    whole folder: where there is none, it says exactly what find_bundles says."""
    from stetho.evidence.bundle import BundleError, find_bundles, require_bundles

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "other.json").write_text("{}")
    for path in (tmp_path / "missing", tmp_path / "empty"):
        with pytest.raises(BundleError) as want:
            find_bundles(path)
        with pytest.raises(BundleError) as got:
            require_bundles(path)
        assert str(got.value) == str(want.value)


def test_a_stray_byte_in_a_kernel_log_keeps_the_log_readable(bindir):
    """A kernel log with one line carrying a raw non-UTF-8 byte (a device's string) is still
    text: the byte becomes U+FFFD and the Xid after it is there to judge."""
    _tool(bindir, "dmesg", "printf '[  1.0] usb 1-1: Product: Cam\\377ra\\n"
          "[  2.0] NVRM: Xid (PCI:0000:18:00): 48, pid=1, DBE\\n'")
    rec = run(Probe("k", ("dmesg",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert not rec.binary and rec.status == "ok"
    assert "Cam\ufffdra" in rec.stdout and "Xid (PCI:0000:18:00): 48" in rec.stdout


def test_a_character_cut_at_the_byte_limit_is_still_text(bindir):
    _tool(bindir, "says", "printf 'temp: 40 \\342\\204\\203 ok\\n'")  # U+2103, 3 bytes
    rec = run(Probe("s", ("says",), max_bytes=11), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert not rec.binary and rec.stdout.startswith("temp: 40 ")


def test_mostly_undecodable_output_is_binary(bindir):
    _tool(bindir, "noise", "head -c 4000 /dev/urandom | tr -d '\\000'")
    rec = run(Probe("n", ("noise",)), Environment(path=f"{bindir}:/usr/bin:/bin"))
    assert rec.binary


def test_an_xid_after_a_stray_byte_is_still_judged(tmp_path):
    """End to end on a simulated node with an Xid 48 whose kernel log also holds a line with a
    raw 0xff byte: gpu_xid fails on the Xid (before, the whole log was 'binary data' and every
    kernel-log check was an error)."""
    import subprocess
    import sys

    from stetho.sim.builder import build_node

    root = tmp_path / "n1"
    build_node(root, "n1", ["xid=48"])
    tsv = root / "data" / "dmesg.tsv"
    tsv.write_bytes(b"900\t000000\tusb 1-1: Product: Cam\xffra\n" + tsv.read_bytes())
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, "-m", "stetho", "check", "--sim", str(root), "--json",
                    str(out), "-q", "-k", "gpu_xid"], capture_output=True, text=True,
                   timeout=300)
    results = json.loads(out.read_text())["results"]
    xid = [r for r in results if r["check"] == "gpu_xid"]
    assert xid and {r["status"] for r in xid} >= {"fail"}, xid
    assert not [r for r in xid if r["status"] == "error"], xid
