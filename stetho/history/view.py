"""`stetho history NODE`: each of a node's metrics over a period, summarised for a person."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from stetho.history.store import History
from stetho.sinks.sparkline import sparkline


@dataclass(frozen=True)
class SeriesRow:
    check: str
    subject: str
    metric: str
    unit: str
    n: int
    first: float
    last: float
    minimum: float
    maximum: float
    last_time: int
    trend: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def rows(history: History, node: str, *, check: str | None = None, metric: str | None = None,
         since_s: float = 30 * 86400, now: float | None = None) -> list[SeriesRow]:
    now = now if now is not None else time.time()
    series = history.series_of(node, check, metric)
    samples = history.samples(node, [s[0] for s in series], since=now - since_s, until=now)
    out = []
    for sid, c, subject, m, unit in series:
        pts = samples.get(sid, [])
        if not pts:
            continue
        values = [p.value for p in pts]
        out.append(SeriesRow(c, subject, m, unit, len(values), values[0], values[-1],
                             min(values), max(values), pts[-1].time, sparkline(values)))
    return out


def render(node: str, table_rows: list[SeriesRow], width: int | None = 140) -> str:
    """A plain fixed-width table: a hundred rows of sparklines must print in milliseconds
    (rich's layout engine takes ~1 ms a row). Rows are cut at `width`; None keeps them whole."""
    head = ("check", "subject", "metric", "n", "last", "min", "max", "trend")
    body = [(r.check, r.subject or "-", r.metric, str(r.n), _fmt(r.last, r.unit),
             _fmt(r.minimum, r.unit), _fmt(r.maximum, r.unit), r.trend) for r in table_rows]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(len(head))]
    lines = [f"{node}: {len(table_rows)} metrics",
             "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()[:width]
              for row in body]
    return "\n".join(lines) + "\n"


def _fmt(v: float, unit: str) -> str:
    text = f"{v:.3g}" if abs(v) < 1e-3 and v != 0 else f"{v:.6g}"
    return f"{text} {unit}".strip()
