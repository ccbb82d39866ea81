"""The history's narrow interface: what the gate and the recorders need from a store, so that
a second store (PostgreSQL, for several controllers or HA) is one module implementing it.

SQLite (stetho.history.store.History) is the one backend built. Every operation here keeps
the integrity rules of stetho.history.integrity and .chain: a backend returns a node's rows
only after verifying each row's MAC and its chain down from the seal's head, and names the
node (`NodeLatest.distrusted`, HistoryCorrupt) where it cannot, never leaving it out quietly.
What still reads SQLite directly (the job view, stats, gate replay, shadow decisions, remedies)
is listed in the README ("When SQLite stops being the right store").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from stetho.history.errors import HistoryError

if TYPE_CHECKING:
    from stetho.history.latest import NodeLatest
    from stetho.history.store import NodeRun, Sample


@runtime_checkable
class HistoryBackend(Protocol):
    """The operations readers and writers use; each is one transaction or one snapshot."""

    def record(self, run_id: str, kind: str, nodes: Iterable[NodeRun], *,
               when: float | None = None, exit_code: int | None = None,
               command: str = "", run_dir: str = "",
               then: Callable[[Any], None] | None = None) -> int:
        """Write one run (its nodes' results and metrics), signed and chained, all or
        nothing; extends the seal. `then(connection)` runs last in the same transaction
        (ingest's ledger rows land with the run's, or neither). Returns the run's key."""

    def has_run(self, run_id: str) -> bool:
        """Whether a run of this id is recorded."""

    def ledger_known(self, keys: Iterable[tuple[str, str]]
                     ) -> dict[tuple[str, str], tuple[str, str]]:
        """The ingest ledger (exactly once): of these (node, node's run id) keys, those
        recorded, with the verdict and file digest recorded for each."""

    def latest_per_check(self, nodes: list[str], max_age_s: float, now: float | None = None,
                         checks: frozenset[str] | None = None,
                         keep: frozenset[str] | None = None) -> dict[str, NodeLatest]:
        """The gate's read: per node and check the newest verified result no older than
        max_age_s (a pruned or unverifiable row is never evidence). `keep`: only these
        checks' results (and the `gate`/`sweep` pseudo-checks) are decoded and returned."""

    def pinned_profiles(self, nodes: list[str], unpinned: frozenset[str] = frozenset()
                        ) -> dict[str, tuple[str, str, str | None]]:
        """Each node's profile pin: node -> (profile, run, why it cannot be believed)."""

    def series_of(self, node: str, check: str | None = None, metric: str | None = None
                  ) -> list[tuple[int, str, str, str, str]]:
        """A node's metric series: (series id, check, subject, metric, unit)."""

    def recent_window(self, node: str, runs: int, before: str = ""
                      ) -> tuple[int, int] | None:
        """The times of a node's last `runs` runs with readings other than `before`: first
        and last (None: no such run), what a trend reads between."""

    def samples(self, node: str, series_ids: list[int], since: float,
                until: float | None = None) -> dict[int, list[Sample]]:
        """A window of a node's metrics, each run's verified against its row's digest."""

    def reseal(self) -> int:
        """A new seal from the rows as they stand (launders; an operator's act)."""

    def prune(self, keep_s: float, now: float | None = None) -> Any:
        """Drop results older than keep_s, every row still verifiable (retention)."""

    def close(self) -> None: ...

    def __enter__(self) -> HistoryBackend: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


def open_history(db: Path | str) -> HistoryBackend:
    """The history at `db`: a file path is SQLite. A URL (`postgresql://...`) names a backend
    this stetho does not have: refused by name, never a SQLite file of that name."""
    text = str(db)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise HistoryError(f"history {text}: this stetho has no {scheme!r} history backend "
                           "(SQLite is the one built: give --db a file path; a backend is one "
                           "module implementing stetho.history.backend.HistoryBackend)")
    from stetho.history.store import History

    return History(db)
