"""A real sshd on a loopback port, started for the test session (shared TESTBED.md recipe)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Debian's sshd refuses more than this many ListenAddress lines (MAX_LISTEN_SOCKS).
PER_SSHD = 16


@dataclass(frozen=True)
class Sshd:
    """One port served on `addresses` loopback addresses (127.0.0.1, .2, ...) by one sshd per
    PER_SSHD of them, all with the same host key, client key and authorized_keys."""

    port: int
    client_key: Path
    folder: Path
    addresses: int = 1

    @property
    def logs(self) -> list[Path]:
        return sorted(self.folder.glob("sshd*.log"))

    def connections(self) -> int:
        """Connections accepted so far, over every sshd's log (one line per login)."""
        return sum(log.read_text(errors="replace").count("Accepted publickey")
                   for log in self.logs if log.is_file())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(folder: Path, addresses: int = 1) -> Sshd:
    """sshd on one port of `addresses` loopback addresses (127.0.0.1, .2, ...): hosts on
    addresses of their own get a connection each, as a fleet's nodes would. One sshd process
    per 16 addresses (Debian's limit), each on the same port of its own addresses."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        raise RuntimeError("sshd not found: install Debian's openssh-server (.ci/run does)")
    if addresses < 1 or addresses > 254:
        raise ValueError(f"addresses must be 1 to 254 (127.0.0.1 to .254), not {addresses}")
    folder.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for key in ("hostkey", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
    port = free_port()
    groups = [list(range(first, min(first + PER_SSHD, addresses + 1)))
              for first in range(1, addresses + 1, PER_SSHD)]
    server = Sshd(port, folder / "client", folder, addresses)
    try:
        for k, group in enumerate(groups):
            _start_one(sshd, folder, port, group, "" if k == 0 else f"-{k}")
    except BaseException:
        stop(server)
        raise
    return server


def _start_one(sshd: str, folder: Path, port: int, group: list[int], suffix: str) -> None:
    config = folder / f"sshd_config{suffix}"
    config.write_text("\n".join([
        f"Port {port}", *(f"ListenAddress 127.0.0.{i}" for i in group),
        f"HostKey {folder / 'hostkey'}",
        f"PidFile {folder / f'sshd{suffix}.pid'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", "StrictModes no",
        "MaxStartups 100:30:200", "MaxSessions 64", "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
    ]) + "\n")
    log = folder / f"sshd{suffix}.log"
    subprocess.run([sshd, "-f", str(config), "-E", str(log)], check=True)
    deadline = time.monotonic() + 10
    pending = set(group)
    while pending and time.monotonic() < deadline:
        for i in sorted(pending):
            with socket.socket() as s:
                if s.connect_ex((f"127.0.0.{i}", port)) == 0:
                    pending.discard(i)
        if pending:
            time.sleep(0.05)
    if pending:
        raise RuntimeError(f"sshd did not listen on port {port} of 127.0.0.{min(pending)}: "
                           f"{log.read_text() if log.is_file() else '(no log)'}")


def stop(server: Sshd) -> None:
    """Stop every sshd of `server`, by the pids in their pid files."""
    for pidfile in sorted(server.folder.glob("sshd*.pid")):
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
