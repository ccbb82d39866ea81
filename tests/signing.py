"""Real SSH keys and allowed signers files for the override tests (made with OpenSSH's own
ssh-keygen, once per test session), and gate policies that name them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ACK = "I accept that these nodes run with a failing check until the override expires"

#: name -> the principals its key is listed under in the allowed signers file (None: not
#: listed). alice2 is alice's second key; mallory's key is in no file the gate trusts.
PEOPLE: dict[str, tuple[str, ...] | None] = {
    "alice": ("alice",), "alice2": ("alice",), "bob": ("bob",), "carol": ("carol",),
    "dave": ("dave",), "mallory": None,
}


@dataclass(frozen=True)
class People:
    """Keys by name (the private key; `pub(name)` its public half), the allowed signers file
    listing them, and a folder of gate policies (STETHO_GATES) that trust that file."""

    folder: Path
    signers: Path
    gates: Path

    def key(self, name: str) -> Path:
        return self.folder / name

    def pub(self, name: str) -> Path:
        return self.folder / f"{name}.pub"

    def line(self, name: str, principals: str | None = None) -> str:
        keytype, blob = self.pub(name).read_text().split()[:2]
        return f"{principals or name} {keytype} {blob}\n"


def make_people(folder: Path) -> People:
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, principals in PEOPLE.items():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test",
                        "-f", str(folder / name)], check=True)
        if principals is not None:
            keytype, blob = (folder / f"{name}.pub").read_text().split()[:2]
            lines.append(f"{','.join(principals)} {keytype} {blob}\n")
    signers = folder / "allowed_signers"
    signers.write_text("# test signers\n" + "".join(lines))
    gates = folder / "gates"
    gates.mkdir()
    write_policy(gates / "release.yml", "release", ["bob", "carol"], "../allowed_signers",
                 lifetime="7d")
    write_policy(gates / "pre-job.yml", "pre-job", ["bob", "carol"], "../allowed_signers",
                 lifetime="24h", block_on="[fail, error]", freshness="6h",
                 ack="I acknowledge this performance degradation risk")
    write_policy(gates / "nightly.yml", "nightly", ["bob", "carol"], "../allowed_signers",
                 lifetime="7d")
    return People(folder, signers, gates)


def write_policy(path: Path, name: str, principals: list[str], signers: str, *,
                 lifetime: str = "7d", ack: str = ACK, block_on: str = "[fail]",
                 freshness: str = "0s") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"policy: {name}\nblock_on: {block_on}\nfreshness: {freshness}\n"
                    f"overrides:\n  approvers:\n    signers: {signers}\n"
                    f"    principals: [{', '.join(principals)}]\n"
                    f"  acknowledgement: {ack}\n  max_lifetime: {lifetime}\n")
    return path


@contextmanager
def agent_holding(key: Path, folder: Path) -> Iterator[dict[str, str]]:
    """A real ssh-agent on its own socket with `key` added; yields the variables that reach
    it, and stops that agent (by its pid) afterwards."""
    sock = folder / "agent.sock"
    proc = subprocess.run(["ssh-agent", "-s", "-a", str(sock)], capture_output=True,
                          text=True, check=True)
    pid = int(proc.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    env = {"SSH_AUTH_SOCK": str(sock), "SSH_AGENT_PID": str(pid)}
    try:
        for _ in range(100):  # the agent daemonizes: wait until its socket answers
            if subprocess.run(["ssh-add", "-l"], env={**os.environ, **env},
                              capture_output=True).returncode in (0, 1):
                break
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, **env}, check=True,
                       capture_output=True)
        yield env
    finally:
        os.kill(pid, signal.SIGTERM)
