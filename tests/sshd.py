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


@dataclass(frozen=True)
class Sshd:
    port: int
    client_key: Path
    folder: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(folder: Path, addresses: int = 1) -> Sshd:
    """sshd on one port of `addresses` loopback addresses (127.0.0.1, .2, ...): hosts on
    addresses of their own get a connection each, as a fleet's nodes would."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not Path(sshd).exists():
        raise RuntimeError("sshd not found: install Debian's openssh-server (.ci/run does)")
    folder.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for key in ("hostkey", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                        str(folder / key)], check=True)
    (folder / "authorized_keys").write_text((folder / "client.pub").read_text())
    port = free_port()
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", *(f"ListenAddress 127.0.0.{i}" for i in range(1, addresses + 1)),
        f"HostKey {folder / 'hostkey'}",
        f"PidFile {folder / 'sshd.pid'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", "StrictModes no",
        "MaxStartups 100:30:200", "MaxSessions 64", "AcceptEnv LANG LC_*",
        "Subsystem sftp internal-sftp",
    ]) + "\n")
    subprocess.run([sshd, "-f", str(config), "-E", str(folder / "sshd.log")], check=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return Sshd(port, folder / "client", folder)
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {port}: {(folder / 'sshd.log').read_text()}")


def stop(server: Sshd) -> None:
    pidfile = server.folder / "sshd.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
