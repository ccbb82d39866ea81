"""GPU memory health: uncorrectable ECC (DBE), remapped rows pending or failed, retired pages.

A pending row remap needs a GPU reset before the bad row is retired; a remap failure or a
double-bit error means the GPU should be drained and replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu


def test_gpu_ecc(gpu: Gpu, verdict: Verdict) -> None:
    agg, vol, rows = gpu.ecc_aggregate, gpu.ecc_volatile, gpu.remapped_rows
    dbe = sum(x or 0 for x in (agg.dram_uncorrectable, agg.sram_uncorrectable))
    dbe_now = sum(x or 0 for x in (vol.dram_uncorrectable, vol.sram_uncorrectable))
    verdict.measure(dbe, "uncorrectable ECC errors", expected=0)
    verdict.cite(
        f"{gpu.pci_bus_id}: ECC {'enabled' if gpu.ecc_enabled else gpu.ecc_enabled}; aggregate "
        f"DRAM uncorr={agg.dram_uncorrectable} SRAM uncorr={agg.sram_uncorrectable} DRAM "
        f"corr={agg.dram_correctable}; remapped rows "
        + (f"corr={rows.correctable} uncorr={rows.uncorrectable} pending={rows.pending} "
           f"failure={rows.failure}" if rows else "N/A")
        + f"; retired pages SBE={gpu.retired_single_bit} DBE={gpu.retired_double_bit} "
          f"pending={gpu.retired_pending}", "nvidia-smi -q -x")
    problems = []  # (message, remediation), most severe first
    if rows is not None and rows.failure:
        problems.append(("row remapping failed: the GPU ran out of spare rows",
                         "drain the node and RMA the GPU"))
    if dbe:
        problems.append((f"{dbe} uncorrectable ECC errors ({dbe_now} since the last reset)",
                         "drain the node; reset the GPU (`nvidia-smi -r`) so the bad row is "
                         "remapped; RMA if errors return or remapping fails"))
    if rows is not None and rows.pending:
        problems.append(("row remapping pending: a reset is needed to retire the bad row",
                         f"drain the node and reset the GPU (`sudo nvidia-smi -r -i {gpu.index}`)"
                         " or reboot; check again afterwards"))
    if gpu.retired_pending:
        problems.append(("page retirement pending", "drain the node and reboot to retire the "
                         "pages; RMA if the retired-page count keeps growing"))
    if gpu.ecc_enabled is False:
        problems.append(("ECC is disabled", f"sudo nvidia-smi -i {gpu.index} -e 1, then reset "
                         "the GPU or reboot"))
    if problems:
        verdict.fail("; ".join(m for m, _ in problems), remediation=problems[0][1])
    if gpu.retired_double_bit:
        verdict.warn(f"{gpu.retired_double_bit} pages retired for double-bit errors",
                     remediation="watch the count; NVIDIA's RMA threshold is 60 retired pages")
        return
    verdict.ok("no uncorrectable ECC, no remap pending or failed")
