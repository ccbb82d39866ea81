"""A Slurm reservation that holds the canaries and controls for the run, created and removed
by stetho, also when the run is interrupted.

The reservation is for the user running stetho (root in the testbed); creating one takes
Slurm operator rights.

Why a reservation: canaries and controls are only comparable when nothing else runs on them
during the window, and a job the scheduler starts there mid-run would load the fabric of one
group and not the other. `Flags=maint` marks it as maintenance (not billed as idle), and
without `ignore_jobs` Slurm refuses it when a node is busy: the gate says so (exit 3) instead
of measuring under someone's job.

Removal is in a `finally` and in SIGINT/SIGTERM handlers: the handler cancels the reservation's
job steps first (Slurm refuses to delete a reservation that still has jobs), then the
interrupt unwinds to the `finally`, which deletes it and polls until Slurm no longer lists it.
"""

from __future__ import annotations

import getpass
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from stetho.core import hostlist
from stetho.errors import EvaluationError


class ReservationRefused(EvaluationError):
    """Slurm would not reserve the nodes (busy, down, unknown): could not evaluate, exit 3."""


@dataclass
class Slurm:
    """The two Slurm commands a reservation needs, with the environment they run in."""

    env: Mapping[str, str] | None = None
    scontrol: str = "scontrol"
    scancel: str = "scancel"
    timeout_s: float = 60.0

    def run(self, argv: list[str]) -> tuple[int, str]:
        from stetho import config

        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s,
                               env=config.child_environment(self.env) if self.env else None)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 127, f"{argv[0]}: {exc}"
        return p.returncode, (p.stdout + p.stderr).strip()

    def create(self, name: str, nodes: list[str], minutes: int) -> None:
        rc, text = self.run([self.scontrol, "create", "reservation", f"ReservationName={name}",
                             f"Nodes={hostlist.compress(nodes)}", "StartTime=now",
                             f"Duration={minutes}", f"Users={getpass.getuser()}",
                             "Flags=maint"])
        if rc != 0:
            hint = ("wait for their jobs to end, or pick other canaries or controls"
                    if any(w in text.lower() for w in ("busy", "down", "drain", "not avail"))
                    else "is Slurm reachable from here (SLURM_CONF, scontrol on PATH), and "
                    "may this user create reservations (an operator or admin)?")
            raise ReservationRefused(
                f"Slurm refused reservation {name} on {hostlist.compress(nodes)}: "
                f"{' '.join(text.split())[:400]} ({hint})")

    def listed(self, name: str) -> bool:
        rc, text = self.run([self.scontrol, "show", "reservation", name])
        return rc == 0 and f"ReservationName={name}" in text

    def cancel_jobs(self, name: str) -> None:
        self.run([self.scancel, f"--reservation={name}"])

    def delete(self, name: str, wait_s: float = 60.0) -> str | None:
        """Delete it, retrying while its jobs end; None when gone, else what Slurm said."""
        deadline = time.monotonic() + wait_s
        text = ""
        while True:
            rc, text = self.run([self.scontrol, "delete", f"ReservationName={name}"])
            if rc == 0 or not self.listed(name):
                return None
            if time.monotonic() > deadline:
                return text
            self.cancel_jobs(name)
            time.sleep(0.5)


@contextmanager
def held(slurm: Slurm, name: str, nodes: list[str], minutes: int,
         on_removed: Callable[[str | None], None]) -> Iterator[str]:
    """Create the reservation, yield its name, and always remove it; `on_removed` hears None
    (removed) or why it could not be."""
    slurm.create(name, nodes, minutes)
    previous: dict[signal.Signals, signal._HANDLER] = {}

    def interrupted(signum: int, frame: FrameType | None) -> None:
        slurm.cancel_jobs(name)  # the srun steps end, so the delete below is not refused
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, interrupted)
    try:
        yield name
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        on_removed(slurm.delete(name))
