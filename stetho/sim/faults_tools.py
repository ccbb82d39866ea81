"""Faults in the tools themselves rather than in the hardware they report on: a tool that
hangs or prints garbage, a job holding a GPU (so nothing invasive may run), and a `dcgmi diag`
that fails. Each edits the draft; stetho.sim.faults registers them by name."""

from __future__ import annotations

from stetho.errors import ConfigError
from stetho.sim import shims
from stetho.sim.draft import GPU_JOB, NodeDraft


def hang(d: NodeDraft, arg: str | None) -> None:
    d.hang.add(arg or "nvidia-smi")


def garbage(d: NodeDraft, arg: str | None) -> None:
    d.garbage.add(arg or "nvidia-smi")


def gpu_job(d: NodeDraft, arg: str | None) -> None:
    d.compute_apps.append(GPU_JOB)
    d.compute_app_gpus.append(_gpu_index(arg))


def _gpu_index(arg: str | None) -> int:
    text = (arg or "gpu0").removeprefix("gpu")
    if not text.isdigit():
        raise ConfigError(f"gpu-job={arg}: name a GPU (gpu0 .. gpu7)")
    return int(text)


def corrupt_xml(d: NodeDraft, arg: str | None) -> None:
    d.truncate_xml = True


def dcgm_diag_fail(d: NodeDraft, arg: str | None) -> None:
    """`dcgmi diag -r N -j` answers the recorded failing DCGM 4.2.3 document (the `software`
    test failed: persistence mode disabled) with the exit code dcgmi gave it, 226."""
    d.dcgmi_diag = (shims.DCGMI_FAIL, shims.DCGMI_FAIL_RC)
