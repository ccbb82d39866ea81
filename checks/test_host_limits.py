"""Hugepages reserved and the locked-memory limit, where the profile asks for them.

RDMA (NCCL over InfiniBand, GPUDirect) pins its buffers: under a small RLIMIT_MEMLOCK the
verbs calls fail ("ibv_reg_mr failed", NCCL falling back to sockets or aborting). A job
that expects hugepages (DPDK, some MPI and storage clients) fails to start without them.

The memlock limit read is the collecting process's own (/proc/self/limits): what a process
started the way stetho was (ssh and PAM, a Slurm prolog, a systemd unit) inherits. A job
started by another path has its own: slurmd's LimitMEMLOCK, limits.conf for ssh logins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from stetho.facts import hygiene

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.facts.node import NodeFacts
    from stetho.profiles import Profile


def test_host_limits(node: NodeFacts, facts: NodeFacts, profile: Profile,
                     verdict: Verdict) -> None:
    want_pages, want_lock = profile.host.hugepages_min, profile.host.memlock
    if want_pages is None and want_lock is None:
        pytest.skip(f"profile {profile.name} sets neither host.hugepages_min nor host.memlock")
    problems, fixes, seen = [], [], []
    if want_pages is not None:
        pages = hygiene.nr_hugepages(facts)
        seen.append(f"/proc/sys/vm/nr_hugepages: {pages}")
        if pages < want_pages:
            problems.append(f"{pages} hugepages reserved, profile wants {want_pages}")
            fixes.append(f"sudo sysctl -w vm.nr_hugepages={want_pages} (persist in "
                         "/etc/sysctl.d/, or reserve at boot: hugepages= on the kernel "
                         "command line, where memory fragments)")
    lock = None
    if want_lock is not None:
        lock = hygiene.memlock(facts)
        soft = "unlimited" if lock.soft is None else f"{lock.soft} {lock.unit}"
        hard = "unlimited" if lock.hard is None else f"{lock.hard} {lock.unit}"
        seen.append(f"/proc/self/limits (the collecting process): Max locked memory {soft} "
                    f"(hard {hard})")
        need = None if want_lock == "unlimited" else int(want_lock)
        short = lock.soft is not None and (need is None or lock.soft < need)
        if short:
            problems.append(f"locked-memory limit {soft} (the collecting process's; profile "
                            f"wants {want_lock})")
            fixes.append("raise RLIMIT_MEMLOCK where jobs start: `* - memlock unlimited` in "
                         "/etc/security/limits.d/ for ssh/PAM logins, LimitMEMLOCK=infinity "
                         "in slurmd's unit (systemctl edit slurmd), then restart it")
    verdict.measure("unlimited" if lock is not None and lock.soft is None
                    else lock.soft if lock is not None else None,
                    "bytes memlock" if lock is not None and lock.soft is not None else None,
                    expected=", ".join(filter(None, [
                        f">= {want_pages} hugepages" if want_pages is not None else None,
                        f"memlock {want_lock}" if want_lock is not None else None])))
    verdict.cite("\n".join(seen), "host_limits")
    if problems:
        verdict.fail("; ".join(problems), remediation="; ".join(fixes))
    verdict.ok("; ".join(seen))
