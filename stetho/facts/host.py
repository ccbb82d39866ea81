"""Host facts parsed per device, so one device's bad sysfs file errors that device only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.parsers import ParseError

if TYPE_CHECKING:
    from stetho.facts.base import Facts as NodeFacts
    from stetho.parsers.sysfs_host import BlockDevice


def load_block(f: NodeFacts) -> tuple[tuple[BlockDevice, ...], dict[str, str]]:
    """The block devices whose queue files parsed, and {device: why} for those that did not
    (all of them unreadable is the probe's ParseError)."""
    from stetho.parsers import sysfs_host

    per_device: dict[str, dict[str, str]] = {}
    for path, text in f.files("block_queue").items():
        name = path.split("/block/", 1)[-1].split("/", 1)[0]
        per_device.setdefault(name, {})[path] = text
    good: list[BlockDevice] = []
    bad: dict[str, str] = {}
    for name, files in sorted(per_device.items()):
        try:
            good += sysfs_host.parse_block(files)
        except ParseError as exc:
            bad[name] = exc.reason
    if bad and not good:
        raise ParseError("sysfs block", next(iter(bad.values())))
    return tuple(good), bad
