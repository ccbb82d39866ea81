"""GPU memory signals: a memory Xid in the kernel log, gpu_ecc failing for the memory itself,
and a row remap waiting for a reset. Read from the GPU's own records (nvidia-smi's remapped
rows, retired pages) and the results' values, never from a check's message.
"""

from __future__ import annotations

import re
from dataclasses import replace

from stetho.diagnosis.context import (
    NodeContext,
    facts_of,
    from_results,
    gpu_where,
    quantity_of,
    short_pci,
)
from stetho.diagnosis.model import Evidence
from stetho.parsers.gpu_model import Gpu
from stetho.results import Result

_facts = facts_of


def _gpu_flag(where: dict[str, str]) -> str:
    return f" -i {where['gpu']}" if "gpu" in where else ""


#: Memory Xids that say the HBM failed or was repaired: 48 a DBE, 63 a row remap recorded,
#: 64 a remap failed, 94/95 an uncorrectable error contained / not contained. Xid 92 (a high
#: rate of single-bit errors, every one corrected) is not one: it is xid_92, a precursor.
_MEMORY_XIDS = (48, 63, 64, 94, 95)
#: Contained or recorded-and-handled memory events: act before they become fatal.
_WARN_XIDS = (63, 94)


def _xids(ctx: NodeContext, codes: tuple[int, ...], signal: str,
          warn: tuple[int, ...], expected: str = "no memory Xid") -> list[Evidence]:
    """The kernel log's Xids of `codes`, each on the GPU it names; without a kernel log,
    gpu_xid's results whose value (the Xid code it judged) is one of them."""
    log = _facts(ctx, "kernel_log")
    out = []
    if log is not None:
        for e in log.xids:
            if e.code in codes:
                where = gpu_where(ctx, pci=e.pci_id)
                w = dict(where)
                out.append(Evidence(
                    signal, f"Xid {e.code} on {e.pci_id}: {e.message[:120]}", 1.0,
                    check="gpu_xid", subject=f"gpu{w['gpu']}" if "gpu" in w else e.pci_id,
                    value=f"Xid {e.code}", expected=expected, log_line=e.line,
                    command=f"dmesg -T | grep -i xid | grep -i {short_pci(e.pci_id)}; "
                            f"nvidia-smi -q -d ECC,ROW_REMAPPER{_gpu_flag(w)}",
                    status="warn" if e.code in warn else "fail", where=where))
    if not out:
        rows = [r for r in ctx.results_of("gpu_xid", ("fail", "warn"))
                if _xid_code(r.value) in codes]
        out = [replace(e, status="warn" if _xid_code(r.value) in warn else e.status)
               for r, e in zip(rows, from_results(ctx, rows, signal, commands=lambda w:
                                                   "dmesg -T | grep -i xid"), strict=True)]
    return out[:4]


def xid_memory(ctx: NodeContext) -> list[Evidence]:
    """A memory Xid that says the HBM failed or a row was remapped (48/63/64/94/95)."""
    return _xids(ctx, _MEMORY_XIDS, "xid_memory", _WARN_XIDS)


def xid_92(ctx: NodeContext) -> list[Evidence]:
    """Xid 92: a high rate of single-bit ECC errors, every one corrected. The memory works;
    it is the rising-SBE precursor of an uncorrectable error (watch, not drain)."""
    return _xids(ctx, (92,), "xid_92", (92,), "a normal single-bit error rate")


def _xid_code(value: object) -> int | None:
    text = str(value if value is not None else "").strip()
    return int(text) if text.isdigit() else None


def _gpu_of(ctx: NodeContext, subject: str) -> Gpu | None:
    m = re.fullmatch(r"(?i)gpu(\d+)", subject or "")
    if not m:
        return None
    return next((g for g in _facts(ctx, "gpus") or () if g.index == int(m.group(1))), None)


def _dbe_now(r: Result) -> float | None:
    """gpu_ecc's value: uncorrectable ECC errors since the last reset (None: not reported)."""
    return float(r.value) if isinstance(r.value, (int, float)) else None


def ecc_uncorrectable(ctx: NodeContext) -> list[Evidence]:
    """gpu_ecc failing for the memory itself: uncorrectable errors since the last reset, a
    failed row remap, or the retired-page table full (the GPU's own records); not for ECC
    switched off, which is configuration. Without the GPU's records, any failure counts."""
    rows = []
    for r in ctx.results_of("gpu_ecc", ("fail",)):
        g = _gpu_of(ctx, r.subject)
        rows_ = getattr(g, "remapped_rows", None)
        retired = sum(x or 0 for x in (getattr(g, "retired_single_bit", 0),
                                       getattr(g, "retired_double_bit", 0)))
        if g is None or (_dbe_now(r) or 0) > 0 or (rows_ is not None and rows_.failure) \
                or retired >= 64:
            rows.append(r)
    return from_results(ctx, rows, "ecc_uncorrectable",
                        commands=lambda w: f"nvidia-smi -q -d ECC,ROW_REMAPPER{_gpu_flag(w)}",
                        quantity=quantity_of("ecc_uncorrectable"))


#: gpu_ecc's recorded reading (its evidence, not its message) of a pending remap/retirement
_PENDING = re.compile(r"(?:remapped rows|retired pages) [^;]*pending=True")


def remap_pending(ctx: NodeContext) -> list[Evidence]:
    """A row remap (or page retirement) waiting for a reset, on a node whose GPU memory shows
    nothing failing: no gpu_ecc failure and no fatal memory Xid. NVIDIA: running work is
    unaffected; reset the GPU at the next opportunity. Read from the GPU's own records (the
    Pending flags) with 0 uncorrectable errors since the reset; an Xid 63 (a remap recorded)
    in the kernel log says the same where nvidia-smi shows no flag."""
    if ctx.results_of("gpu_ecc", ("fail",)) or any(e.status == "fail" for e in xid_memory(ctx)):
        return []
    rows = []
    for r in ctx.results_of("gpu_ecc", ("warn",)):
        g = _gpu_of(ctx, r.subject)
        rows_ = getattr(g, "remapped_rows", None)
        if g is None:  # no evidence bundle: the nvidia-smi reading the check recorded
            pending = bool(_PENDING.search(r.evidence or ""))
        else:
            pending = bool((rows_ is not None and rows_.pending) or g.retired_pending)
        if _dbe_now(r) == 0 and pending:
            rows.append(r)

    def cmd(w: dict[str, str]) -> str:
        return f"nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT{_gpu_flag(w)}"

    out = from_results(ctx, rows, "remap_pending", commands=cmd,
                       quantity=quantity_of("ecc_uncorrectable"))
    if not out:
        out = [replace(e, signal="remap_pending", status="warn", command=cmd(dict(e.where)))
               for e in xid_memory(ctx) if e.value in ("Xid 63", "63")]
    return out


SIGNALS = (xid_memory, xid_92, ecc_uncorrectable, remap_pending)
