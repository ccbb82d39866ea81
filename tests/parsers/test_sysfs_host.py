"""Host sysfs/procfs parsers on real recordings (fixtures/recorded, this project's machines)."""

from __future__ import annotations

import pytest

from stetho.parsers import ParseError, sysfs_host
from tests.conftest import REPO

RECORDED = REPO / "fixtures" / "recorded" / "proc-debian12-vm"


def test_pressure_real():
    files = {f"/proc/pressure/{r}": (RECORDED / f"pressure-{r}").read_text()
             for r in ("io", "memory", "cpu")}
    got = {p.resource: p for p in sysfs_host.parse_pressure(files)}
    assert got["io"].some_avg10 == 11.27 and got["io"].full_avg60 == 4.68
    assert got["memory"].some_avg60 == 0.0
    assert got["cpu"].some_avg300 == 53.66


def test_meminfo_real():
    info = sysfs_host.parse_meminfo((RECORDED / "meminfo").read_text())
    assert info["MemTotal"] == 24683584 and info["SwapTotal"] == 0
    assert len(info) > 30


@pytest.mark.parametrize("text", ["", "garbage", "some avg10=x", "\x00\x01"])
def test_pressure_garbage(text):
    with pytest.raises(ParseError):
        sysfs_host.parse_pressure({"/proc/pressure/io": text})


@pytest.mark.parametrize("text", ["", "MemFree: lots", "just words"])
def test_meminfo_garbage(text):
    with pytest.raises(ParseError):
        sysfs_host.parse_meminfo(text)


def test_governors_and_block():
    govs = sysfs_host.parse_governors({
        "/sys/devices/system/cpu/cpu10/cpufreq/scaling_governor": "powersave\n",
        "/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor": "performance\n"})
    assert [(g.cpu, g.governor) for g in govs] == [(2, "performance"), (10, "powersave")]
    block = sysfs_host.parse_block({"/sys/block/vda/queue/rotational": "1\n",
                                    "/sys/block/vda/queue/scheduler":
                                        "none [mq-deadline] kyber bfq\n",
                                    "/sys/block/zram0/queue/rotational": "0\n"})
    assert block[0].name == "vda" and block[0].rotational and block[0].scheduler == "mq-deadline"
    assert block[1].scheduler is None
    with pytest.raises(ParseError):
        sysfs_host.parse_block({"/sys/block/vda/queue/rotational": "2"})
    with pytest.raises(ParseError):
        sysfs_host.parse_governors({"/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor":
                                    "\x00"})
