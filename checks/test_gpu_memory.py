"""GPU memory health: uncorrectable ECC (DBE), remapped rows pending or failed, retired pages.

A pending row remap needs a GPU reset before the bad row is retired; a remap failure or a
double-bit error means the GPU should be drained and replaced. A counter nvidia-smi prints as
N/A is unknown, never 0: a GPU whose memory fields are all unknown is not a healthy one. ECC
mode is judged only where the profile says `gpu.ecc: required`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile


def _known_sum(*parts: int | None) -> int | None:
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _show(value: object) -> str:
    return "unknown" if value is None else str(value)


def test_gpu_ecc(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    agg, vol, rows = gpu.ecc_aggregate, gpu.ecc_volatile, gpu.remapped_rows
    dbe = _known_sum(agg.dram_uncorrectable, agg.sram_uncorrectable)
    dbe_now = _known_sum(vol.dram_uncorrectable, vol.sram_uncorrectable)
    required = profile.gpu.ecc == "required"
    verdict.measure(dbe, "uncorrectable ECC errors", expected=0)
    mode = {True: "enabled", False: "disabled", None: "unknown"}[gpu.ecc_enabled]
    verdict.cite(
        f"{gpu.pci_bus_id}: ECC {mode}; aggregate DRAM uncorr={_show(agg.dram_uncorrectable)} "
        f"SRAM uncorr={_show(agg.sram_uncorrectable)} DRAM corr={_show(agg.dram_correctable)}; "
        "remapped rows "
        + (f"corr={_show(rows.correctable)} uncorr={_show(rows.uncorrectable)} "
           f"pending={_show(rows.pending)} failure={_show(rows.failure)}" if rows else "N/A")
        + f"; retired pages SBE={_show(gpu.retired_single_bit)} "
          f"DBE={_show(gpu.retired_double_bit)} pending={_show(gpu.retired_pending)}",
        "nvidia-smi -q -x")
    inputs = (gpu.ecc_enabled, dbe, dbe_now, gpu.retired_pending, gpu.retired_double_bit,
              *((rows.failure, rows.pending) if rows else ()))
    if all(v is None for v in inputs):
        why = ("nvidia-smi reports no ECC mode, ECC counters, remapped rows or retired pages "
               f"for gpu{gpu.index} (all N/A)")
        if required:
            verdict.error(f"{why}, but profile {profile.name} requires ECC")
        pytest.skip(f"{why}: nothing to judge GPU memory health by")
    problems = []  # (message, remediation), most severe first
    if rows is not None and rows.failure:
        problems.append(("row remapping failed: the GPU ran out of spare rows",
                         "drain the node and RMA the GPU"))
    if dbe:
        problems.append((f"{dbe} uncorrectable ECC errors ({_show(dbe_now)} since the last "
                         "reset)",
                         "drain the node; reset the GPU (`nvidia-smi -r`) so the bad row is "
                         "remapped; RMA if errors return or remapping fails"))
    if rows is not None and rows.pending:
        problems.append(("row remapping pending: a reset is needed to retire the bad row",
                         f"drain the node and reset the GPU (`sudo nvidia-smi -r -i {gpu.index}`)"
                         " or reboot; check again afterwards"))
    if gpu.retired_pending:
        problems.append(("page retirement pending", "drain the node and reboot to retire the "
                         "pages; RMA if the retired-page count keeps growing"))
    if required and gpu.ecc_enabled is False:
        problems.append((f"ECC is disabled, profile {profile.name} requires it",
                         f"sudo nvidia-smi -i {gpu.index} -e 1, then reset the GPU or reboot"))
    if problems:
        verdict.fail("; ".join(m for m, _ in problems), remediation=problems[0][1])
    if required and gpu.ecc_enabled is None:
        verdict.error(f"ECC mode unknown (N/A) on gpu{gpu.index}, profile {profile.name} "
                      "requires ECC")
    if gpu.retired_double_bit:
        verdict.warn(f"{gpu.retired_double_bit} pages retired for double-bit errors",
                     remediation="watch the count; NVIDIA's RMA threshold is 60 retired pages")
        return
    if gpu.ecc_enabled is False:
        verdict.ok(f"ECC disabled (profile {profile.name} allows it); no remap or retirement "
                   "pending")
        return
    if dbe is None:
        verdict.warn(f"uncorrectable ECC count unknown (N/A) on gpu{gpu.index}; "
                     "no remap or retirement pending",
                     remediation="check `nvidia-smi -q -d ECC` on this GPU")
        return
    verdict.ok("no uncorrectable ECC, no remap pending or failed")
