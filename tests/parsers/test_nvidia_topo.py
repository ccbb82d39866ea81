"""nvidia-smi topo -m on every real sample, and on garbage."""

from __future__ import annotations

from pathlib import Path

import pytest

from stetho.parsers import ParseError
from stetho.parsers.nvidia_topo import parse
from tests.conftest import REAL, real_files, real_ids

FOLDER = "14-topology"
SAMPLES = real_files(FOLDER, "nvidia-smi-topo-m-*.txt")
OTHER_TOOLS = [p for d in sorted(REAL.iterdir()) if d.is_dir() and d.name != FOLDER
               for p in real_files(d.name)]


def test_there_are_real_samples() -> None:
    assert SAMPLES


@pytest.mark.parametrize("path", SAMPLES, ids=real_ids(SAMPLES))
def test_every_sample_parses(path: Path) -> None:
    t = parse(path.read_text())
    assert t.gpus and t.nics
    assert all(set(g.nics) == set(t.nics) for g in t.gpus)


def test_h100_two_sockets_each_gpu_has_its_nic_at_pix() -> None:
    t = parse((REAL / FOLDER / "nvidia-smi-topo-m-h100-8gpu-12nic-2socket-drv580.txt")
              .read_text())
    assert [g.index for g in t.gpus] == list(range(8))
    assert t.nics == tuple(f"mlx5_{i}" for i in range(12))  # the NIC Legend resolved
    want = {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_2", 3: "mlx5_3", 4: "mlx5_6", 5: "mlx5_7",
            6: "mlx5_8", 7: "mlx5_9"}
    assert {g.index: g.nearest() for g in t.gpus} == {k: (v,) for k, v in want.items()}
    g0, g4 = t.gpu(0), t.gpu(4)
    assert g0 is not None and g4 is not None
    assert (g0.cpu_affinity, g0.numa_node) == ("0-55,112-167", 0)
    assert (g4.cpu_affinity, g4.numa_node) == ("56-111,168-223", 1)
    assert g0.nics["mlx5_1"] == "PXB" and g0.nics["mlx5_6"] == "SYS"
    assert g4.nics["mlx5_0"] == "SYS"


@pytest.mark.parametrize("text", ["", "\x00\x01\x02", "GPU0\tGPU1\n",
                                  "GPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPI"])
def test_garbage(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


def test_truncated_sample() -> None:
    text = SAMPLES[0].read_text()
    with pytest.raises(ParseError):
        parse(text[: text.index("GPU1\tNV18") + 20])


def test_an_unknown_path_is_an_error() -> None:
    text = SAMPLES[0].read_text().replace("PIX", "QPI", 1)
    with pytest.raises(ParseError, match="unknown path 'QPI'"):
        parse(text)


@pytest.mark.parametrize("path", OTHER_TOOLS, ids=real_ids(OTHER_TOOLS))
def test_other_tools_are_refused(path: Path) -> None:
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return
    with pytest.raises(ParseError):
        parse(text)
