"""GPU memory health: what is wrong with the GPU's memory now, not what ever went wrong with it.

Following NVIDIA's GPU memory error management guidance (docs.nvidia.com/deploy/
a100-gpu-mem-error-mgmt): *volatile* uncorrectable errors (since the last reset) are a present
fault, and a row remapping failure is the RMA criterion: both fail. A pending row remap is not a
failure: running work continues unaffected and the GPU should be reset at the next opportunity,
which on an idle node before a job is now: a warning with that reset. The *aggregate* count is
the GPU's lifetime: uncorrectable errors whose rows were remapped (or pages retired), none since
the last reset and nothing pending, are history, a warning that never blocks. A lifetime count
that cannot be placed (no volatile count, no remap or retirement record) is unknown, never ok.
Legacy page retirement: pending retirement warns like a pending remap; the retired-page table
full (NVIDIA: at most 64 retirements for the frame buffer) fails. A counter nvidia-smi prints as
N/A is unknown, never 0. ECC mode is judged only where the profile says `gpu.ecc: required`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from stetho.checking.verdict import Verdict
    from stetho.parsers.gpu_model import Gpu
    from stetho.profiles import Profile

#: Page retirement keeps at most 64 retired pages for the frame buffer (NVIDIA, "Row Remapping",
#: docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/row-remapping.html): at that, no further bad
#: page can be retired.
RETIRED_PAGES_MAX = 64
_MEM_GUIDE = "docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt"


def _known_sum(*parts: int | None) -> int | None:
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _show(value: object) -> str:
    return "unknown" if value is None else str(value)


def test_gpu_ecc(gpu: Gpu, profile: Profile, verdict: Verdict) -> None:
    agg, vol, rows = gpu.ecc_aggregate, gpu.ecc_volatile, gpu.remapped_rows
    dbe = _known_sum(agg.dram_uncorrectable, agg.sram_uncorrectable)  # lifetime
    dbe_now = _known_sum(vol.dram_uncorrectable, vol.sram_uncorrectable)  # since the last reset
    retired = _known_sum(gpu.retired_single_bit, gpu.retired_double_bit)
    required = profile.gpu.ecc == "required"
    verdict.measure(dbe_now, "uncorrectable ECC errors since the last reset", expected=0)
    mode = {True: "enabled", False: "disabled", None: "unknown"}[gpu.ecc_enabled]
    verdict.cite(
        f"{gpu.pci_bus_id}: ECC {mode}; volatile DRAM uncorr={_show(vol.dram_uncorrectable)} "
        f"SRAM uncorr={_show(vol.sram_uncorrectable)}; aggregate DRAM uncorr="
        f"{_show(agg.dram_uncorrectable)} SRAM uncorr={_show(agg.sram_uncorrectable)} DRAM corr="
        f"{_show(agg.dram_correctable)}; remapped rows "
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
    pending = rows is not None and rows.pending is True
    reset = f"sudo nvidia-smi -r -i {gpu.index}"
    # -- present faults: fail -------------------------------------------------------------------
    problems = []  # (message, remediation), most severe first
    if rows is not None and rows.failure:
        problems.append(("row remapping failed (Remapping Failure Occurred: Yes): NVIDIA's RMA "
                         "criterion for GPU memory",
                         "drain the node; confirm with the field diagnostic (`dcgmi diag -r 3`) "
                         f"and RMA the GPU ({_MEM_GUIDE}, RMA policy)"))
    if dbe_now:
        problems.append((f"{dbe_now} uncorrectable ECC errors since the last reset "
                         f"({_show(dbe)} in the GPU's lifetime)",
                         f"drain the node; reset the GPU (`{reset}`) so the bad row is "
                         "remapped; RMA if errors return or remapping fails"))
    if retired is not None and retired >= RETIRED_PAGES_MAX:
        problems.append((f"{retired} pages retired, at NVIDIA's limit of {RETIRED_PAGES_MAX} "
                         "retirements for the frame buffer (docs.nvidia.com/deploy/"
                         "a100-gpu-mem-error-mgmt/row-remapping.html): no bad page can be "
                         "retired any more", "drain the node and RMA the GPU"))
    if required and gpu.ecc_enabled is False:
        problems.append((f"ECC is disabled, profile {profile.name} requires it",
                         f"sudo nvidia-smi -i {gpu.index} -e 1, then reset the GPU or reboot"))
    if problems:
        if pending:
            problems.append(("row remapping pending", ""))
        verdict.fail("; ".join(m for m, _ in problems), remediation=problems[0][1])
    if required and gpu.ecc_enabled is None:
        verdict.error(f"ECC mode unknown (N/A) on gpu{gpu.index}, profile {profile.name} "
                      "requires ECC")
    # -- the past, or a reset due: warn ---------------------------------------------------------
    remapped = rows is not None and (rows.uncorrectable or 0) >= 1 and rows.pending is False \
        and rows.failure is False
    paged = bool(gpu.retired_double_bit) and gpu.retired_pending is False
    if dbe and dbe_now is None and not (remapped or paged):
        verdict.error(f"{dbe} uncorrectable ECC errors in gpu{gpu.index}'s lifetime, but "
                      "nvidia-smi reports no volatile count (N/A) and no remapped row or "
                      "retired page for them: whether they are present since the last reset "
                      "cannot be told")
    notes, fix = [], ""
    if pending:
        notes.append("row remapping pending: running work is unaffected, but the GPU must be "
                     "reset to apply it, at the next opportunity (before the next job)")
        fix = f"`{reset}` (or reboot) while no job runs on it, then check again ({_MEM_GUIDE})"
    if gpu.retired_pending:
        notes.append("page retirement pending (Pending Page Blacklist: Yes): the pages are "
                     "blacklisted when the GPU is reset or the driver reloaded")
        fix = fix or f"`{reset}` (or reboot) while no job runs on it, then check again"
    if dbe:
        since = "none since the last reset" if dbe_now == 0 else \
            "the volatile count is not reported, but nothing is pending or failed"
        how = "remapped" if remapped else "pages retired" if paged else \
            "no remapped row or retired page records them"
        notes.append(f"{dbe} uncorrectable errors in the GPU's lifetime, {how}; {since}")
        fix = fix or (f"nothing to do now; if uncorrectable errors return, run `dcgmi diag -r 3` "
                      f"on gpu{gpu.index} and RMA if remapping fails")
    elif gpu.retired_double_bit:
        notes.append(f"{gpu.retired_double_bit} pages retired for double-bit errors")
        fix = fix or (f"watch the count: at {RETIRED_PAGES_MAX} retired pages the GPU can retire "
                      "no more and must be replaced")
    if notes:
        verdict.warn("; ".join(notes), remediation=fix)
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
    verdict.ok("no uncorrectable ECC error since the last reset or in the GPU's lifetime, no "
               "remap pending or failed")
