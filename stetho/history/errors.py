"""The history database's errors, apart so that the integrity module raises them without
importing the store (which imports it)."""

from __future__ import annotations

from stetho.errors import StethoError


class HistoryError(StethoError):
    """The database cannot be used (truncated, newer or unreadable schema, not a stetho
    database, disk full): exit 3, since the run could not be evaluated or recorded. Callers
    that only record keep their verdict and say the run was not recorded."""


class HistoryCorrupt(HistoryError):
    """A row the database holds cannot be read back."""


class HistoryKeyError(HistoryError):
    """The key history rows are signed with cannot be used (stetho.history.integrity)."""
