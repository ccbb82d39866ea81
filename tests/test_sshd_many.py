"""tests/sshd.py past Debian's 16 listen addresses: one port on 33 loopback addresses, served
by one sshd per 16 of them, as bench/sweep.py's 32 hosts (and a fleet's own connections)
need; each login is counted in sshd's logs, and stop() ends every sshd it started."""

from __future__ import annotations

import os
import subprocess
import time

from tests import sshd as sshd_mod


def _ssh(server: sshd_mod.Sshd, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-p", str(server.port), "-i", str(server.client_key),
                           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                           "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                           f"root@{address}", "echo ok"],
                          capture_output=True, text=True, timeout=120)


def test_33_addresses_on_one_port_each_answer_and_each_login_is_counted(tmp_path):
    server = sshd_mod.start(tmp_path / "sshd", addresses=33)
    try:
        pids = [int(p.read_text()) for p in sorted((tmp_path / "sshd").glob("sshd*.pid"))]
        assert len(pids) == 3  # 16 + 16 + 1 addresses
        for address in ("127.0.0.1", "127.0.0.16", "127.0.0.17", "127.0.0.33"):
            got = _ssh(server, address)
            assert (got.returncode, got.stdout) == (0, "ok\n"), got.stderr
        assert server.connections() == 4
    finally:
        sshd_mod.stop(server)
    for pid in pids:  # SIGTERM was sent to each: poll until each listener is gone
        for _ in range(200):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"sshd {pid} still runs after stop()")
