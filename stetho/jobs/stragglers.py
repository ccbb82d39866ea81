"""Slow ranks of a job, from its per-rank step times, mapped to nodes and GPUs.

One slow GPU or NIC holds every synchronous step of a data-parallel job back, so the rank
whose *own* step time is high is where to look. Each rank's median step time is compared with
the other ranks' medians by a robust z-score (stetho.history.stats: median and MAD, so one
slow rank does not hide itself by widening the spread). Ranks become hosts and GPUs through
the job's NCCL debug log (`NCCL_DEBUG=INFO`): each communicator's init prints
`host:pid:tid [dev] NCCL INFO comm 0x.. rank R nranks N cudaDev D ...`; the widest
communicator (the most ranks) is the job's world.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass

from stetho.errors import ConfigError
from stetho.history.stats import median, robust_z

#: a rank this many robust standard deviations slower than the job's median is a straggler
THRESHOLD_Z = 3.5
#: and at least this much slower in relative terms: a 0.2% spread is noise, not a straggler
MIN_EXCESS = 0.05
_RANK = re.compile(r"^(?P<host>[^:\s]+):\d+:\d+ \[\d+\] NCCL INFO comm (?P<comm>0x[0-9a-f]+) "
                   r"rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
                   r"(?:.*?commId (?P<commid>0x[0-9a-f]+))?")


@dataclass(frozen=True)
class Place:
    host: str
    gpu: int


@dataclass(frozen=True)
class Straggler:
    rank: int
    median_s: float
    job_median_s: float
    z: float
    place: Place | None

    @property
    def where(self) -> str:
        if self.place is None:
            return "host unknown (no --nccl-log)"
        return f"{self.place.host} GPU {self.place.gpu}"

    def to_json(self) -> dict[str, object]:
        return {"rank": self.rank, "median_s": self.median_s, "job_median_s": self.job_median_s,
                "z": self.z, "host": self.place.host if self.place else None,
                "gpu": self.place.gpu if self.place else None}


def parse_steps(text: str, source: str) -> dict[int, list[float]]:
    """A CSV `rank,step,seconds` (a header line, then one row per rank and step) -> rank ->
    its step times. A malformed row is a ConfigError naming the file and line."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header] != ["rank", "step", "seconds"]:
        raise ConfigError(f"{source}: the first line must be the header 'rank,step,seconds' "
                          f"(got {','.join(header or [])[:60]!r})")
    out: dict[int, list[float]] = {}
    for lineno, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            rank, _step, seconds = int(row[0]), int(row[1]), float(row[2])
            if len(row) != 3:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(f"{source} line {lineno}: expected 'rank,step,seconds' with "
                              f"integers and a number, got {','.join(row)[:60]!r}") from None
        if rank < 0 or not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"{source} line {lineno}: rank {rank}, {seconds} s: a rank is "
                              "not negative and a step time is a finite, non-negative number")
        out.setdefault(rank, []).append(seconds)
    if not out:
        raise ConfigError(f"{source}: no step rows after the header")
    return out


def parse_nccl_ranks(text: str, source: str) -> dict[int, Place]:
    """rank -> (host, cudaDev) of the widest communicator in an NCCL INFO log. The bracketed
    device is the thread's, not always the rank's (a Destroy line prints another), so the
    rank's cudaDev field is used."""
    comms: dict[str, tuple[int, dict[int, Place]]] = {}
    for line in text.splitlines():
        m = _RANK.match(line)
        if not m:
            continue
        key = m.group("commid") or m.group("comm")
        nranks, ranks = comms.setdefault(key, (int(m.group("nranks")), {}))
        ranks.setdefault(int(m.group("rank")), Place(m.group("host"), int(m.group("dev"))))
    if not comms:
        raise ConfigError(f"{source}: no 'NCCL INFO comm ... rank R nranks N cudaDev D' line: "
                          "run the job with NCCL_DEBUG=INFO and pass its log")
    widest = max(comms.values(), key=lambda c: (c[0], len(c[1])))
    return widest[1]


def find(steps: dict[int, list[float]], places: dict[int, Place] | None = None,
         threshold: float = THRESHOLD_Z) -> tuple[list[Straggler], float]:
    """The straggling ranks, slowest first, and the job's median step time (the median of
    the ranks' medians). Fewer than 3 ranks: ValueError (nothing to compare against)."""
    if len(steps) < 3:
        raise ValueError(f"{len(steps)} ranks: at least 3 are needed to tell a slow one")
    per_rank = {r: median(ts) for r, ts in steps.items()}
    values = list(per_rank.values())
    job = median(values)
    out = []
    for rank, m in per_rank.items():
        z = robust_z(m, values, floor=job * 0.001)
        if z is not None and z > threshold and m > job * (1 + MIN_EXCESS):
            out.append(Straggler(rank, m, job, z, (places or {}).get(rank)))
    out.sort(key=lambda s: (-s.median_s, s.rank))
    return out, job
