"""Host hygiene facts: mounts and free space (and, beside them, the other host-wide settings
a job relies on). Functions over NodeFacts, parsed once through `facts.parsed`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.chrony import Tracking
    from stetho.parsers.edac import MemoryController
    from stetho.parsers.filesystems import DfRow, Mount
    from stetho.parsers.limits import Limit


def mounts(facts: NodeFacts) -> tuple[Mount, ...]:
    from stetho.parsers import filesystems

    def load() -> tuple[Mount, ...]:
        text = facts.files("mounts").get("/proc/mounts")
        if text is None:
            raise Unavailable("error", "/proc/mounts was not read", "mounts")
        return filesystems.parse_mounts(text)

    return facts.parsed("mounts", load)


def df(facts: NodeFacts, inodes: bool) -> dict[str, DfRow]:
    """{mount point: df row}; the last row of a mount point wins (what is mounted over)."""
    from stetho.parsers import filesystems

    probe = "df_inodes" if inodes else "df_bytes"

    def load() -> dict[str, DfRow]:
        try:
            text = facts.text(probe)
        except Unavailable as u:
            # df is coreutils: a node without it cannot be judged, never a skip
            raise Unavailable("error", u.reason, u.probe) from None
        return {r.mountpoint: r for r in filesystems.parse_df(text, inodes)}

    return facts.parsed(probe, load)


def mount_at(facts: NodeFacts, path: str) -> Mount | None:
    """What is mounted at exactly `path` (the last mount listed: it hides those below)."""
    found = [m for m in mounts(facts) if m.mountpoint == path]
    return found[-1] if found else None


def services(facts: NodeFacts) -> dict[str, str]:
    """{unit: ActiveState} from `systemctl is-active`, for the units the probe asked about (its
    argv: the profile at collection time). Asked for, systemctl missing or refused is an
    error: nothing then says the units run."""
    from stetho.parsers import systemctl

    def load() -> dict[str, str]:
        rec = facts.record("services")
        units = rec.argv[2:] if rec.argv[:2] == ("systemctl", "is-active") else ()
        if not units:
            raise Unavailable("error", f"services probe ran {' '.join(rec.argv) or 'nothing'}, "
                              "not systemctl is-active UNIT...", "services")
        try:
            text = facts.text("services")
        except Unavailable as u:
            raise Unavailable("error", f"{u.reason} (systemctl is needed: the profile lists "
                              "services)", u.probe) from None
        if not text.strip():
            raise Unavailable("error", f"systemctl printed no unit states: "
                              f"{rec.stderr.strip()[:200] or rec.reason}", "services")
        return systemctl.parse_is_active(text, tuple(units))

    return facts.parsed("services", load)


def tracking(facts: NodeFacts) -> Tracking:
    """chronyd's view of the clock. Called only where the profile asks for time sync, so
    chronyc missing (or chronyd not answering) is an error: nothing says the clock is right."""
    from stetho.parsers import chrony

    def load() -> Tracking:
        try:
            text = facts.text("chrony")
        except Unavailable as u:
            raise Unavailable("error", f"{u.reason} (the profile asks for time sync: "
                              "host.time_sync)", u.probe,
                              remediation="install chrony and start chronyd") from None
        return chrony.parse_tracking(text)

    return facts.parsed("chrony", load)


def nr_hugepages(facts: NodeFacts) -> int:
    from stetho.parsers import limits

    return facts.parsed("nr_hugepages", lambda: limits.parse_count(
        _file(facts, "/proc/sys/vm/nr_hugepages"), "/proc/sys/vm/nr_hugepages"))


def memlock(facts: NodeFacts) -> Limit:
    """RLIMIT_MEMLOCK of the process that collected the evidence (/proc/self/limits)."""
    from stetho.parsers import limits

    return facts.parsed("memlock", lambda: limits.parse_limits(
        _file(facts, "/proc/self/limits"))["Max locked memory"])


def _file(facts: NodeFacts, path: str) -> str:
    try:
        files = facts.files("host_limits")
    except Unavailable as u:
        raise Unavailable("error", u.reason, "host_limits") from None
    text = files.get(path)
    if text is None:  # procfs always has these: not read is an error, never a skip
        raise Unavailable("error", f"{path} was not read", "host_limits")
    return text


def edac(facts: NodeFacts) -> tuple[MemoryController, ...]:
    """The memory controllers EDAC exposes; a skip where there are none (a VM)."""
    from stetho.parsers import edac as parser

    def load() -> tuple[MemoryController, ...]:
        try:
            files = facts.files("edac")
        except Unavailable as u:
            if u.status == "skip":
                raise Unavailable("skip", "no EDAC memory controller in /sys/devices/system/"
                                  "edac/mc (a VM, or no EDAC driver loaded)", "edac") from None
            raise
        return parser.parse_edac(files)

    return facts.parsed("edac", load)
