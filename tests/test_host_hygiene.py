"""Host hygiene facts (stetho.facts.hygiene) on bundles whose records are the real outputs:
what a missing systemctl, a machine without systemd and a replay under a changed profile
make of `host_services`'s input. Fail closed: each is an error, never a skip or a pass."""

from __future__ import annotations

import pytest

from stetho.evidence.bundle import Bundle, ProbeRecord
from stetho.facts import hygiene
from stetho.facts.node import NodeFacts, Unavailable
from tests.conftest import REPO

RECORDED = REPO / "fixtures" / "recorded" / "host-debian12-vm"
ARGV = ("systemctl", "is-active", "ssh", "cron", "dbus")


def _facts(*records: ProbeRecord) -> NodeFacts:
    return NodeFacts(Bundle("n", "2026-12-04T18:07:57+00:00", "0", "generic",
                            {r.name: r for r in records}))


def test_states_read():
    f = _facts(ProbeRecord("services", "command", "failed", ARGV, rc=3,
                           stdout="active\nfailed\nactive\n"))
    assert hygiene.services(f) == {"ssh": "active", "cron": "failed", "dbus": "active"}


def test_systemctl_missing_is_an_error():
    f = _facts(ProbeRecord("services", "command", "missing", ARGV,
                           reason="systemctl not found on PATH"))
    with pytest.raises(Unavailable) as exc:
        hygiene.services(f)
    assert exc.value.status == "error" and "the profile lists services" in exc.value.reason


def test_no_systemd_is_an_error_quoting_it():
    """The recorded run on a machine not booted with systemd: rc 1, stdout empty."""
    stderr = (RECORDED / "systemctl-is-active-no-systemd.txt").read_text()
    f = _facts(ProbeRecord("services", "command", "failed", ARGV, rc=1, stderr=stderr,
                           reason="exit status 1"))
    with pytest.raises(Unavailable) as exc:
        hygiene.services(f)
    assert exc.value.status == "error"


def test_not_collected_is_an_error():
    with pytest.raises(Unavailable) as exc:
        hygiene.services(_facts())
    assert exc.value.status == "error" and "not collected" in exc.value.reason


def test_df_missing_is_an_error_not_a_skip():
    f = _facts(ProbeRecord("df_bytes", "command", "missing", ("df", "-P", "-B1"),
                           reason="df not found on PATH"))
    with pytest.raises(Unavailable) as exc:
        hygiene.df(f, inodes=False)
    assert exc.value.status == "error"


def test_mounts_real():
    f = _facts(ProbeRecord("mounts", "files", "ok",
                           files={"/proc/mounts": (RECORDED / "mounts").read_text()}))
    root = hygiene.mount_at(f, "/")
    assert root is not None and root.device == "/dev/vda" and not root.read_only
    assert hygiene.mount_at(f, "/scratch") is None
