"""NCCL_DEBUG=INFO log parser: every real file, the network each log shows, variants, garbage."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.nccl_log import NcclLog, NcclVersion, find_version, parse
from tests.conftest import REAL, real_files, real_ids

FILES = real_files("03-nccl")
LOGS = {"nccl-debug-info-net-ib-sharp-2node-h100-EXCERPT.log",
        "nccl-debug-info-net-socket-1node-2xA100-80GB.log",
        "nccl-debug-info-2node-gb10-roce-nccl2.28.9-allgather-header-EXCERPT.log"}
GB10 = REAL / "03-nccl" / "nccl-debug-info-2node-gb10-roce-nccl2.28.9-allgather-header-EXCERPT.log"
IB_SHARP = REAL / "03-nccl" / "nccl-debug-info-net-ib-sharp-2node-h100-EXCERPT.log"
SOCKET = REAL / "03-nccl" / "nccl-debug-info-net-socket-1node-2xA100-80GB.log"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_every_real_file(path: Path) -> None:
    text = path.read_text()
    if path.name not in LOGS:  # nccl-tests output without NCCL_DEBUG=INFO
        with pytest.raises(ParseError) as exc:
            parse(text)
        assert exc.value.tool == "NCCL_DEBUG=INFO log"
        return
    log = parse(text)
    assert parse(text.encode()) == log
    assert log.transport in ("IB", "Socket")
    assert log.net_plugin is not None and log.networks[0] == log.net_plugin
    assert log.fell_back_to_socket == (log.transport == "Socket")
    assert len(log.socket_interfaces) == len(log.socket_addresses)
    assert log.hosts and log.warnings == ()


def test_ib_sharp_excerpt() -> None:
    log = parse(IB_SHARP.read_text())
    assert log.transport == "IB" and log.sharp and not log.roce
    assert log.net_plugin == "IBext" and log.networks == ("IBext",)
    assert log.ib_devices == ("mlx5_0:1", "mlx5_1:1", "mlx5_4:1", "mlx5_5:1")
    assert not log.fell_back_to_socket and not log.ib_not_found
    assert log.socket_interfaces == () and log.hosts == ("gpunode-001", "gpunode-002")
    assert log.nccl_version is None and log.cuda_version is None  # excerpt lacks the banner


def test_socket_fallback_log() -> None:
    log = parse(SOCKET.read_text())
    assert log.nccl_version == "2.20.5" and log.cuda_version == "12.4"
    assert log.cuda_driver_version == "12.4"  # cudaDriverVersion 12040
    assert log.transport == "Socket" and log.net_plugin == "Socket"
    assert log.fell_back_to_socket and log.ib_not_found
    assert log.ib_devices == () and not log.sharp
    assert log.socket_interfaces == ("eth0",) and log.socket_addresses == ("172.17.0.2",)
    assert log.hosts == ("3767c65d25c4",)


def test_gb10_roce_log_nccl_2_28() -> None:
    """NCCL 2.28's NET/IB lines ('NET/IB: [1] rocep1s0f1:uverbs1:1/RoCE provider=...',
    'Made virtual device') next to the classic 'NET/IB : Using' line."""
    log = parse(GB10.read_text())
    assert (log.nccl_version, log.cuda_version, log.cuda_driver_version) == (
        "2.28.9", "13.0", "13.0")
    assert log.transport == "IB" and log.roce and not log.sharp
    assert log.networks == ("IB",) and log.net_plugin == "IB"
    assert log.ib_devices == ("rocep1s0f1:1", "roceP2p1s0f1:1")
    assert log.hosts == ("gb10-node1", "gb10-node2")
    assert not log.fell_back_to_socket and not log.ib_not_found


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_nccl_version_found_in_every_file_that_prints_one(path: Path) -> None:
    """Also the bare banner of NCCL_DEBUG=WARN, which has no INFO line to make it a log."""
    text = path.read_text()
    found = find_version(text)
    if "NCCL version" not in text:
        assert found is None
        return
    assert found is not None and found.version.count(".") == 2
    assert f"NCCL version {found.version}" in text
    if path.name in LOGS and found.version:
        assert parse(text).nccl_version in (found.version, None)
    expected = {"alltoall-2node-16rank-cx8-spcx-nccl2.30.3-tests2.18.3-erratic.txt":
                NcclVersion("2.30.3", "13.0"), GB10.name: NcclVersion("2.28.9", "13.0"),
                SOCKET.name: NcclVersion("2.20.5", "12.4")}
    assert found == expected[path.name]


def test_find_version_garbage() -> None:
    assert find_version("NCCL version 2.7.8\n") == NcclVersion("2.7.8", None)
    assert find_version("no version here") is None
    with pytest.raises(ParseError, match="empty"):
        find_version("")
    with pytest.raises(ParseError, match="binary"):
        find_version(b"\xff\xfe\x00")


# Variants.


def _log(*lines: str) -> NcclLog:
    return parse("\n".join(lines))


def test_roce_ib_with_bootstrap_socket_line() -> None:
    log = _log(
        "n1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "n1:10:10 [0] NCCL INFO NCCL version 2.18.3+cuda12.2",
        "n1:10:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>",
        "n1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [RO]; OOB "
        "eth0:10.0.0.1<0>",
        "n1:10:20 [0] NCCL INFO Using network IB",
    )
    assert log.transport == "IB" and log.roce and not log.sharp
    assert log.ib_devices == ("mlx5_0:1", "mlx5_1:1") and not log.fell_back_to_socket
    assert (log.nccl_version, log.cuda_version) == ("2.18.3", "12.2")


def test_one_rank_on_sockets_makes_the_run_socket() -> None:
    log = _log(
        "n1:10:20 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
        "n1:10:20 [0] NCCL INFO Using network IB",
        "n2:11:21 [0] NCCL INFO NET/IB : No device found.",
        "n2:11:21 [0] NCCL INFO NET/Socket : Using [0]ib0:10.0.0.2<0> [1]eth0:fe80::1%eth0<0>",
        "n2:11:21 [0] NCCL INFO Using network Socket",
    )
    assert log.networks == ("IB", "Socket") and log.transport == "Socket"
    assert log.fell_back_to_socket and log.ib_not_found
    assert log.socket_interfaces == ("ib0", "eth0")
    assert log.socket_addresses == ("10.0.0.2", "fe80::1%eth0")
    assert log.hosts == ("n1", "n2")


def test_other_plugin_is_neither() -> None:
    log = _log("n1:1:2 [0] NCCL INFO Using network AWS Libfabric")
    assert log.transport is None and log.net_plugin == "AWS Libfabric"
    assert not log.fell_back_to_socket


def test_transport_without_using_network_lines() -> None:
    assert _log("h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB ; OOB ib0:1.2.3.4<0>"
                ).transport == "IB"
    log = _log("h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0:1.2.3.4<0>")
    assert log.transport == "Socket" and not log.fell_back_to_socket  # IB was never looked for


def test_warnings_and_mpirun_tags() -> None:
    log = _log(
        "[1,0]<stdout>:n1:10:20 [0] NCCL INFO Using network IB",
        "[1,1]<stdout>:n2:11:21 [3] NCCL WARN NET/IB : Got async event : port error",
        "n2:11:21 [3] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
    )
    assert log.transport == "IB" and log.hosts == ("n1", "n2")
    assert log.warnings == (
        "n2:11:21 [3] NCCL WARN NET/IB : Got async event : port error",
        "n2:11:21 [3] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out",
    )


# Garbage.


@pytest.mark.parametrize("text", ["", "  \n\t", "\n"])
def test_empty(text: str) -> None:
    with pytest.raises(ParseError, match="empty"):
        parse(text)


def test_random_bytes() -> None:
    rng = random.Random(0)
    blob = bytes(rng.randrange(256) for _ in range(4096))
    with pytest.raises(ParseError):
        parse(blob)
    with pytest.raises(ParseError):
        parse(blob.decode("latin-1"))


def test_a_bare_version_banner_is_not_a_log() -> None:
    with pytest.raises(ParseError, match="no 'NCCL INFO'"):
        parse("NCCL version 2.20.5+cuda12.4\n")


@pytest.mark.parametrize("path", real_files("09-lspci"), ids=real_ids(real_files("09-lspci")))
def test_other_tools_output(path: Path) -> None:
    with pytest.raises(ParseError) as exc:
        parse(path.read_text())
    assert exc.value.tool == "NCCL_DEBUG=INFO log"


@pytest.mark.parametrize("path", FILES, ids=real_ids(FILES))
def test_mutated_real_output_raises_only_parse_error(path: Path) -> None:
    """Seeded random edits of a real file either still parse or raise ParseError, nothing else."""
    from tests.conftest import mutation_outcomes

    outcomes = mutation_outcomes(parse, path.read_text(), "NCCL_DEBUG=INFO log", rounds=200)
    assert ("parsed" in outcomes) if path.name in LOGS else (outcomes == {"error"})
