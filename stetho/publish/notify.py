"""Alerts to a webhook: rate limited so a flapping node cannot storm a channel, and unable to
change a gate decision.

An alert is advisory. Whatever happens on the way to the webhook (it is unset, down, slow,
hung in DNS, answers 500 or 400, the state file is locked or corrupt) `Notifier.send` and
`notify_all` return a `Delivery` describing it; they never raise, so a gate that alerts decides
exactly as one that does not.

The webhook URL is a secret: Slack, Teams and Discord webhooks carry their token in the path or
query, so whoever reads the URL can post to the channel. It is kept in a `Secret` whose repr is
"<webhook>", and every error string and log line this module produces or lets through (including
requests' and urllib3's texts, which quote the path and query) has each part of the URL replaced
by "<webhook>".

Rate limit: at most `limit` (3) alerts per (node, cause) in a sliding window (24 h). The next one
in the window sends a single "silenced" message saying until when; later ones send nothing. A new
silenced message is sent only after another alert has been sent since the last one, so each
silence is announced once. The counts live in a small SQLite file shared by every stetho process
on the host (default $STETHO_NOTIFY_STATE, else ~/.local/share/stetho/notify.db; keep it on a
local disk, SQLite locking over NFS is unreliable). The check and the increment are one
BEGIN IMMEDIATE transaction, so two processes alerting at once queue on the write lock and cannot
both send the 4th.

Counting decision: an alert counts as soon as the decision to send it is made, before the POST,
whether or not the webhook then accepts it. Counting only 2xx deliveries would let a flapping
webhook (down, then back) release every alert held back while it was down, a storm exactly when
the channel is already noisy; and it would need a second transaction after a network call of
unbounded length. The cost: alerts lost to a webhook outage are not resent; the failed Delivery
and the warning logged say so. Suppressed alerts are not counted, so they do not extend a silence.

If the state file cannot be used, the limit falls back to a per-process in-memory count (a
warning is logged): alerting keeps working and one process still cannot storm.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import requests

from stetho.publish.alerts import (
    FORMATS,
    SLACK_SECTION_MAX,
    Alert,
    iso,
    render,
    slack_escape,
)
from stetho.publish.redact import REDACTED, Redactor, Secret, error_text, redacted_logs

__all__ = ["LIMIT", "REDACTED", "SLACK_SECTION_MAX", "WINDOW_S", "Alert", "Delivery",
           "Notifier", "Redactor", "notify_all", "render", "slack_escape", "webhook_url"]

log = logging.getLogger(__name__)

Format = Literal["generic", "slack"]


ENV_URL = "STETHO_WEBHOOK_URL"
ENV_FORMAT = "STETHO_WEBHOOK_FORMAT"
ENV_STATE = "STETHO_NOTIFY_STATE"

LIMIT = 3
WINDOW_S = 24 * 3600.0
#: The longest single backoff, whatever the attempt number or Retry-After asks for.
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class Delivery:
    """What happened to one alert.

    sent: a message reached the webhook with a 2xx answer. silenced: the message was (or would
    have been) the silence notice rather than the alert. suppressed: nothing was sent because
    the limit was reached and the silence already announced. attempts: POSTs made. status: the
    last HTTP status seen. error: why it was not delivered, with the webhook URL redacted.
    """

    sent: bool
    silenced: bool = False
    suppressed: bool = False
    attempts: int = 0
    status: int | None = None
    error: str | None = None


NOTHING = Delivery(sent=False)


def webhook_url(config_url: str | None = None) -> str | None:
    """The webhook to alert: the configured value, else $STETHO_WEBHOOK_URL, else None (no
    webhook; alerting is then a no-op, not an error: most runs have nobody to tell)."""
    from stetho import config

    for value in (config_url, config.active().webhook_url):
        if value and value.strip():
            return value.strip()
    return None


def default_state_path() -> Path:
    """$STETHO_NOTIFY_STATE, else ~/.local/share/stetho/notify.db (beside the history db)."""
    from stetho import config

    return config.active().notify_state


# -- the rate limit --------------------------------------------------------------------------

Decision = Literal["send", "silence", "suppress"]


def _decide(events: Sequence[tuple[int, float, str]], now: float, limit: int,
            window_s: float) -> tuple[Decision, float | None]:
    """Events are (sequence, time, kind) for one (node, cause). Send while fewer than `limit`
    alerts fall in (now - window, now]; then announce the silence once per run of sent alerts
    (ordered by sequence, not time, so equal timestamps cannot confuse it); else suppress.
    Returns the decision and, when limited, the time a slot frees up."""
    alerts = sorted((t, seq) for seq, t, kind in events
                    if kind == "alert" and t > now - window_s)
    if len(alerts) < limit:
        return "send", None
    until = alerts[len(alerts) - limit][0] + window_s
    last_alert = max(seq for _, seq in alerts)
    if any(kind == "silenced" and seq > last_alert for seq, _, kind in events):
        return "suppress", until
    return "silence", until


class _SqliteLimit:
    """The shared counter: one row per alert or silence sent, pruned past the window."""

    SCHEMA = (
        """CREATE TABLE IF NOT EXISTS events (
             id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, cause TEXT NOT NULL,
             time REAL NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('alert', 'silenced')))""",
        "CREATE INDEX IF NOT EXISTS events_key ON events(node, cause, time)",
        "CREATE INDEX IF NOT EXISTS events_time ON events(time)",
    )

    def __init__(self, path: Path, limit: int, window_s: float) -> None:
        self.path, self.limit, self.window_s = path, limit, window_s

    def decide(self, node: str, cause: str, now: float,
               lock_timeout_s: float) -> tuple[Decision, float | None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=lock_timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {max(1, int(lock_timeout_s * 1000))}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            # One IMMEDIATE transaction: the write lock is taken before reading the count, so
            # no other process can read the same count and send the same 4th alert.
            conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in self.SCHEMA:
                    conn.execute(stmt)
                conn.execute("DELETE FROM events WHERE time <= ?", (now - self.window_s,))
                rows = conn.execute(
                    "SELECT id, time, kind FROM events WHERE node = ? AND cause = ?",
                    (node, cause)).fetchall()
                decision, until = _decide(rows, now, self.limit, self.window_s)
                if decision != "suppress":
                    conn.execute("INSERT INTO events (node, cause, time, kind) VALUES (?,?,?,?)",
                                 (node, cause, now,
                                  "alert" if decision == "send" else "silenced"))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return decision, until
        finally:
            conn.close()


class _MemoryLimit:
    """The fallback when the state file is unusable: the same rule, per process."""

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _events: ClassVar[dict[tuple[str, str], list[tuple[int, float, str]]]] = {}
    _seq: ClassVar[int] = 0

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit, self.window_s = limit, window_s

    def decide(self, node: str, cause: str, now: float) -> tuple[Decision, float | None]:
        cls = type(self)
        with cls._lock:
            events = [e for e in cls._events.get((node, cause), [])
                      if e[1] > now - self.window_s]
            decision, until = _decide(events, now, self.limit, self.window_s)
            if decision != "suppress":
                cls._seq += 1
                events.append((cls._seq, now, "alert" if decision == "send" else "silenced"))
            cls._events[(node, cause)] = events
            return decision, until


# -- delivery --------------------------------------------------------------------------------

class Notifier:
    """Sends alerts to one webhook, rate limited through the shared state file.

    retries: further attempts after the first (so at most 1 + retries POSTs), made on
    connection errors, timeouts, 5xx and 429, with jittered exponential backoff
    (backoff_s * 2**n * U(0.5, 1), at most 30 s, longer if a 429/503 Retry-After asks); other
    4xx and 3xx are final (the request is wrong, or redirected where the payload should not go).
    timeout_s bounds each attempt's connect and each read. `clock` is wall time for the rate
    window; `sleep` is for backoff; both are injectable for tests.
    """

    def __init__(self, url: str | None, fmt: str = "generic",
                 state_path: str | os.PathLike[str] | None = None, timeout_s: float = 5.0,
                 retries: int = 3, backoff_s: float = 0.5,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, *, limit: int = LIMIT,
                 window_s: float = WINDOW_S, lock_timeout_s: float = 10.0) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown webhook format {fmt!r}; expected one of {FORMATS}")
        self._url = Secret(url) if url else None
        self._redact = Redactor(url) if url else Redactor("")
        self.fmt = fmt
        self.state_path = Path(state_path) if state_path is not None else default_state_path()
        self.timeout_s, self.retries, self.backoff_s = timeout_s, max(0, retries), backoff_s
        self.clock, self.sleep = clock, sleep
        self.lock_timeout_s = lock_timeout_s
        self._db = _SqliteLimit(self.state_path, limit, window_s)
        self._memory = _MemoryLimit(limit, window_s)
        self._rng = random.Random()

    def __repr__(self) -> str:
        return (f"Notifier(url={REDACTED if self._url else None}, fmt={self.fmt!r}, "
                f"state_path={str(self.state_path)!r})")

    @property
    def enabled(self) -> bool:
        return self._url is not None

    def send(self, alert: Alert, *, deadline: float | None = None) -> Delivery:
        """Decide (rate limit), render and POST one alert. Never raises: every failure is a
        Delivery with `error` set. `deadline` (time.monotonic()) bounds the whole call, lock
        waits, attempts and backoff included."""
        if self._url is None:
            return NOTHING
        try:
            with redacted_logs(self._redact):
                return self._send(alert, self._url, deadline)
        except Exception as exc:  # the contract: alerting never changes a gate decision
            error = error_text(exc, self._redact)
            log.warning("alert for %s/%s not delivered: %s", alert.node, alert.cause, error)
            return Delivery(sent=False, error=error)

    def _remaining(self, deadline: float | None) -> float:
        return float("inf") if deadline is None else deadline - time.monotonic()

    def _decide(self, alert: Alert, now: float,
                deadline: float | None) -> tuple[Decision, float | None]:
        lock_timeout = max(0.05, min(self.lock_timeout_s, self._remaining(deadline)))
        try:
            return self._db.decide(alert.node, alert.cause, now, lock_timeout)
        except (sqlite3.Error, OSError) as exc:
            log.warning("notify state %s unusable (%s); rate limiting in memory for this "
                        "process", self.state_path, self._redact(f"{type(exc).__name__}: {exc}"))
            return self._memory.decide(alert.node, alert.cause, now)

    def _send(self, alert: Alert, url: Secret, deadline: float | None) -> Delivery:
        if self._remaining(deadline) <= 0:
            return Delivery(sent=False, error="notify deadline passed before sending")
        now = self.clock()
        decision, until = self._decide(alert, now, deadline)
        if decision == "suppress":
            log.debug("alert for %s/%s suppressed: silenced until %s", alert.node,
                      alert.cause, iso(until) if until is not None else "?")
            return Delivery(sent=False, suppressed=True)
        silenced = decision == "silence"
        payload = render(alert, self.fmt, silenced, now=now, until=until)
        delivery = self._post(url, payload, silenced, deadline)
        if delivery.sent:
            log.info("%s for %s/%s delivered (HTTP %s, %d attempt(s))",
                     "silence notice" if silenced else "alert", alert.node, alert.cause,
                     delivery.status, delivery.attempts)
        else:
            log.warning("%s for %s/%s not delivered after %d attempt(s): %s",
                        "silence notice" if silenced else "alert", alert.node, alert.cause,
                        delivery.attempts, delivery.error)
        return delivery

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        wait = self.backoff_s * (2.0 ** (attempt - 1)) * self._rng.uniform(0.5, 1.0)
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(wait, MAX_BACKOFF_S)

    def _post(self, url: Secret, payload: dict[str, Any], silenced: bool,
              deadline: float | None) -> Delivery:
        attempts, status, error = 0, None, "not attempted"
        while True:
            remaining = self._remaining(deadline)
            if remaining <= 0:
                return Delivery(sent=False, silenced=silenced, attempts=attempts, status=status,
                                error=f"{error} (notify deadline reached)")
            attempts += 1
            retry_after: float | None = None
            timeout = max(0.01, min(self.timeout_s, remaining))
            try:
                response = requests.post(
                    url.reveal(), json=payload, timeout=(timeout, timeout), allow_redirects=False,
                    headers={"User-Agent": "stetho"})
            except (requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError) as exc:
                error, retry = error_text(exc, self._redact), True
            except requests.RequestException as exc:  # bad URL, bad schema: retrying won't help
                error, retry = error_text(exc, self._redact), False
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return Delivery(sent=True, silenced=silenced, attempts=attempts,
                                    status=status)
                body = self._redact(" ".join(response.text.split()))[:200]
                error = f"HTTP {status}" + (f": {body}" if body else "")
                retry = status >= 500 or status == 429
                retry_after = _retry_after(response.headers.get("Retry-After"))
                response.close()
            if not retry or attempts > self.retries:
                return Delivery(sent=False, silenced=silenced, attempts=attempts, status=status,
                                error=error)
            wait = self._backoff(attempts, retry_after)
            if wait >= self._remaining(deadline):
                return Delivery(sent=False, silenced=silenced, attempts=attempts, status=status,
                                error=f"{error} (notify deadline reached)")
            self.sleep(wait)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds; the HTTP-date form is ignored (the jittered backoff applies)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def notify_all(alerts: Iterable[Alert], url: str | None = None, fmt: str | None = None, *,
               state_path: str | os.PathLike[str] | None = None, deadline_s: float = 20.0,
               timeout_s: float = 5.0, retries: int = 3, backoff_s: float = 0.5,
               clock: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep) -> list[Delivery]:
    """Send every alert (url: `webhook_url(url)`; fmt: argument, else $STETHO_WEBHOOK_FORMAT,
    else generic), one Delivery per alert in order, in at most `deadline_s` seconds in all.

    The per-attempt timeouts and backoffs are cut to the deadline, but a timeout does not cover
    DNS resolution or a server dribbling bytes; so the sends run in a daemon thread and the gate
    waits for it at most `deadline_s` (plus a moment). Alerts not finished by then get an error
    Delivery, and the thread starts no further sends. Never raises."""
    items = list(alerts)
    try:
        target = webhook_url(url)
        if target is None:
            return [NOTHING for _ in items]
        from stetho import config

        chosen = (fmt or config.active().webhook_format or "generic").strip().lower()
        if chosen not in FORMATS:
            error = f"unknown webhook format {chosen!r} (expected one of {', '.join(FORMATS)})"
            log.warning("alerts not sent: %s", error)
            return [Delivery(sent=False, error=error) for _ in items]
        notifier = Notifier(target, chosen, state_path, timeout_s, retries, backoff_s, clock,
                            sleep)
    except Exception as exc:
        error = f"{type(exc).__name__} while preparing alerts"
        log.warning("alerts not sent: %s", error)
        return [Delivery(sent=False, error=error) for _ in items]

    deadline = time.monotonic() + deadline_s
    results: list[Delivery] = []
    lock = threading.Lock()
    abandoned = threading.Event()

    def work() -> None:
        for alert in items:
            if abandoned.is_set():
                return
            delivery = notifier.send(alert, deadline=deadline)
            with lock:
                if abandoned.is_set():
                    return
                results.append(delivery)

    worker = threading.Thread(target=work, name="stetho-notify", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline_s) + 0.5)
    with lock:
        abandoned.set()
        done = list(results)
    late = len(items) - len(done)
    if late:
        log.warning("notify deadline of %.1f s passed; %d alert(s) not delivered",
                    deadline_s, late)
    return done + [Delivery(sent=False, error=f"notify deadline of {deadline_s:g} s passed")
                   for _ in range(late)]
