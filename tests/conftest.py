"""Shared test helpers: where the real recorded tool outputs live."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "fixtures" / "real"


def pytest_configure(config: pytest.Config) -> None:
    """Tests never write into the user's home: history, caches and venvs go to a temp dir
    (shared by xdist workers through the environment they inherit)."""
    import os
    import tempfile

    if "STETHO_TEST_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="stetho-tests-")
        os.environ["STETHO_TEST_HOME"] = home
        os.environ["STETHO_DB"] = f"{home}/history.db"
        os.environ["STETHO_CACHE"] = f"{home}/cache"
        os.environ["STETHO_VENVS"] = f"{home}/venvs"
    from stetho import config as settings

    settings.activate(settings.load())


def real_files(folder: str, pattern: str = "*") -> list[Path]:
    """Every real recorded output in fixtures/real/<folder> matching pattern, sorted."""
    return sorted(p for p in (REAL / folder).glob(pattern) if p.is_file())


def real_ids(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


@pytest.fixture(scope="session")
def real_dir() -> Path:
    return REAL


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real sshd on a loopback port for the session: the sweeps' inventory hosts reach it
    (tests/test_sweep.py, tests/test_nightly_sweep.py: xdist_group "sweep", one worker)."""
    from tests import sshd as sshd_mod

    server = sshd_mod.start(tmp_path_factory.mktemp("sshd"))
    yield server
    sshd_mod.stop(server)


@pytest.fixture(scope="session")
def slurm_cluster():  # type: ignore[no-untyped-def]
    """The multi-node Slurm (tests/slurm_cluster.py), started once per session and worker:
    defined here, not in each module, so every module of xdist_group "slurm-cluster" shares
    one (16 slurmd), not one per module. A test starts from `slurm_cluster.reset()`."""
    from tests import slurm_cluster as sc

    yield from sc.for_session()


# -- simulated nodes carrying one fault each, checked once per test session --------------------

#: node name -> faults. Every check has at least one node here on which it must fail.
FAULT_NODES: dict[str, list[str]] = {
    "healthy": [],
    "governor": ["governor-powersave"],
    "rotational": ["nvme-rotational"],
    "clocks": ["clocks-unlocked"],
    "busbw": ["busbw-drop=20"],
    "ncclwrong": ["nccl-wrong"],
    "ncclfail": ["nccl-fail"],
    "nccltrunc": ["nccl-truncated"],
    "ibrate": ["ib-rate-downgrade"],
    "ibsymbol": ["ib-symbol-errors"],
    "ibdown": ["ib-port-down"],
    "hcafw": ["hca-fw-old"],
    "xid79": ["xid=79"],
    "xid13": ["xid=13"],
    "xid48": ["xid=48"],
    "xidhealed": ["xid-before-reset"],
    "xidold": ["xid-old"],
    "eccdbe": ["ecc-dbe"],
    "rowremap": ["rowremap-pending"],
    "xid63": ["xid=63"],
    "remapfail": ["rowremap-pending", "xid=64"],
    "pciewidth": ["pcie-width-downgrade"],
    "thermal": ["thermal-slowdown"],
    "hbmhot": ["hbm-hot"],
    "powerbrake": ["power-brake"],
    "nvlink": ["nvlink-down"],
    "nvlinkerr": ["nvlink-errors"],
    "garbage": ["garbage=nvidia-smi"],
    "badxml": ["corrupt-xml"],
    "hang": ["hang=lspci"],
    "optics": ["optics-degrading"],
    "pqhigher": ["perfquery-higher"],
    "riser": ["riser"],
    "ncclsocket": ["nccl-socket"],
    "hostoom": ["host-oom"],
    "fabric": ["fabric-not-started"],
    "fmdown": ["fabric-manager-down"],
    "sxid": ["sxid-fatal"],
    "resetreq": ["reset-required"],
    "persistoff": ["persistence-off"],
    "powercap": ["power-capped"],
    "eccpending": ["ecc-pending-off"],
    "ibflap": ["ib-link-flap"],
    "cablecross": ["cable-crossed"],
    "rxlow": ["optics-rx-low"],
    "nopeermem": ["peermem-missing"],
    "gdrnone": ["gpudirect-none"],
    "nvswitchgone": ["nvswitch-missing"],
    "nicsocket": ["nic-wrong-socket"],
    "diskfull": ["disk-full"],
    "fsro": ["fs-readonly"],
    "servicedown": ["service-down"],
    "unsynced": ["clock-unsynced"],
    "memlock": ["memlock-limited"],
    "edacue": ["edac-ue"],
    "nvmemedia": ["nvme-media-errors"],
    "nvmespare": ["nvme-critical-warning"],
    "mcestorm": ["mce-corrected-storm"],
    "mcefatal": ["mce-uncorrected"],
    "acs": ["acs-enabled"],
    "iommu": ["iommu-translated"],
}


@pytest.fixture(scope="session")
def fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("faultsim")
    for name, faults in FAULT_NODES.items():
        build_node(root / name, name, faults)
    return root


@pytest.fixture(scope="session")
def fault_bundles(fault_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each fault node's evidence, collected for real through the sim's shims and sysroot."""
    from dataclasses import replace

    from stetho import profiles
    from stetho.evidence import collect

    out = tmp_path_factory.mktemp("faultbundles")
    prof = profiles.load("h100-sxm-8gpu")
    for name in FAULT_NODES:
        env, node = collect.sim_environment(str(fault_cluster / name))
        bundle = collect.collect(prof, replace(env, timeout_cap=1.0), node)
        bundle.save(out / f"{name}.json")
    return out


@pytest.fixture(scope="session")
def fault_results(fault_bundles: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The whole fault cluster checked once, through the real CLI in a subprocess."""
    import json
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("faultresults") / "results.json"
    proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--evidence",
                           str(fault_bundles), "--json", str(out), "-q"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (1, 3), proc.stderr
    by_node: dict[str, list] = {}
    for r in json.loads(out.read_text())["results"]:
        by_node.setdefault(r["node"], []).append(r)
    return by_node


def mutation_outcomes(parse: Callable[[str], object], text: str, tool: str,
                      rounds: int = 300) -> set[str]:
    """Seeded random edits of a real output (replaced and deleted characters): every one must
    either still parse or raise ParseError for `tool`, never anything else. Returns which of
    the two happened, so a test can check that both did (the edits were not all harmless)."""
    import random
    import string as string_mod

    from stetho.parsers import ParseError

    rng = random.Random(0)
    outcomes = set()
    for _ in range(rounds):
        chars = list(text)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(chars))
            if rng.random() < 0.5:
                chars[pos] = rng.choice(string_mod.printable)
            else:
                del chars[pos]
        try:
            parse("".join(chars))
            outcomes.add("parsed")
        except ParseError as exc:
            assert exc.tool == tool
            outcomes.add("error")
    return outcomes


class StethoEnv:
    """Set STETHO_* variables the way a user would, for this test: in the environment (which
    subprocesses inherit) and in the active configuration, rebuilt from it as the CLI does at
    start. The library itself never reads the environment."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.mp = monkeypatch

    def _reload(self) -> None:
        from stetho import config

        self.mp.setattr(config, "_ACTIVE", [config.load()])

    def setenv(self, name: str, value: str) -> None:
        self.mp.setenv(name, value)
        self._reload()

    def delenv(self, name: str, raising: bool = True) -> None:
        self.mp.delenv(name, raising=raising)
        self._reload()


@pytest.fixture
def stetho_env(monkeypatch: pytest.MonkeyPatch) -> StethoEnv:
    return StethoEnv(monkeypatch)
