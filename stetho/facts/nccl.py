"""Which collective an nccl-tests run performed: the output first, then what the run was
declared to be (NodeFacts.nccl_collective says the rules)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.evidence.bundle import ProbeRecord
    from stetho.facts.base import Expected
    from stetho.parsers.nccl_tests import NcclRun


def collective(run: NcclRun, expected: Expected, rec: ProbeRecord | None
               ) -> tuple[str | None, tuple[str, ...]]:
    """The collective the nccl-tests run performed, and the signals that say so.

    The output tells first (marker, binary named, or a table only one collective fits:
    nccl_shape.infer). What the run was declared to be, the profile's `nccl.collective`
    or the binary in the probe's own command line, decides where the output leaves it
    open, and must agree where it does not: a declaration the output contradicts (or two
    that disagree) is an `error`, never a guess. (None, signals) when nothing tells."""
    from stetho.parsers.nccl_shape import collective_name

    declared: list[tuple[str, str]] = []
    if expected.nccl_collective:
        declared.append((expected.nccl_collective,
                         f"profile {expected.profile} nccl.collective"))
    for token in rec.argv if rec is not None else ():
        if (name := collective_name(token)) is not None:
            declared.append((name, f"the probe's command ({token})"))
            break
    names = sorted({c for c, _ in declared})
    fix = (f"make them agree: `nccl.collective` in profile {expected.profile} names "
           "what the run performs (its binary, all_reduce_perf -> all_reduce)")
    if len(names) > 1:
        raise Unavailable("error", "nccl-tests collective declared twice, differently: "
                          + "; ".join(f"{by} says {c}" for c, by in declared),
                          "nccl_tests", fix)
    said = collective_name(run.collective) or run.table_collective
    signals = run.collective_signals
    if said is not None:
        if names and said != names[0]:
            raise Unavailable("error", f"{declared[0][1]} declares {names[0]}, but the "
                              f"nccl-tests output is {said} ({'; '.join(signals)})",
                              "nccl_tests", fix)
        return said, signals
    if not names:
        return None, signals
    if run.collective_candidates and names[0] not in run.collective_candidates:
        raise Unavailable("error", f"{declared[0][1]} declares {names[0]}, but the "
                          "nccl-tests output can only be "
                          f"{' or '.join(run.collective_candidates)} ({'; '.join(signals)})",
                          "nccl_tests", fix)
    return names[0], (*signals, f"declared by {declared[0][1]}")
