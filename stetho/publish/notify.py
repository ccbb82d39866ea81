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

Rate limit (stetho.publish.ratelimit): at most `limit` (3) messages per (node, cause) in a
sliding window (24 h), shared by every stetho process on the host through a SQLite file. The
message that takes the last slot says until when further alerts are held back; what is held
back is summarised (count, first, last) in the next message sent. A failed delivery gives its
slot back, so the alert after a webhook outage is delivered. When the state is lost or
unusable the limit fails closed (the first alert per node and cause only) and says so in the
Delivery's `warning` and the log.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import requests

from stetho.publish.alerts import (
    FORMATS,
    SLACK_SECTION_MAX,
    Alert,
    Suppressed,
    iso,
    render,
    slack_escape,
)
from stetho.publish.ratelimit import (
    LIMIT,
    WINDOW_S,
    FallbackLimit,
    SharedLimit,
    Slot,
    StateError,
)
from stetho.publish.redact import REDACTED, Redactor, Secret, error_text, redacted_logs

__all__ = ["LIMIT", "REDACTED", "SLACK_SECTION_MAX", "WINDOW_S", "Alert", "Delivery",
           "Notifier", "Redactor", "Suppressed", "notify_all", "render", "slack_escape",
           "webhook_url"]

log = logging.getLogger(__name__)

Format = Literal["generic", "slack"]


ENV_URL = "STETHO_WEBHOOK_URL"
ENV_FORMAT = "STETHO_WEBHOOK_FORMAT"
ENV_STATE = "STETHO_NOTIFY_STATE"

#: The longest single backoff, whatever the attempt number or Retry-After asks for.
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True)
class Delivery:
    """What happened to one alert.

    sent: the message reached the webhook with a 2xx answer. suppressed: nothing was sent, the
    rate limit was reached (the next message sent summarises it). held_until: this message
    took the last slot and said further alerts are held back until then. summarised: how many
    held-back alerts it summarised. attempts: POSTs made. status: the last HTTP status seen.
    error: why it was not delivered, with the webhook URL redacted. warning: the rate limit's
    state could not be trusted, so it fell back to the first alert only.
    """

    sent: bool
    suppressed: bool = False
    attempts: int = 0
    status: int | None = None
    error: str | None = None
    held_until: float | None = None
    summarised: int = 0
    warning: str | None = None


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
        self._db = SharedLimit(self.state_path, limit, window_s)
        self._fallback = FallbackLimit(self.state_path, window_s)
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

    def _lock_timeout(self, deadline: float | None) -> float:
        return max(0.05, min(self.lock_timeout_s, self._remaining(deadline)))

    def _reserve(self, alert: Alert, now: float, deadline: float | None) -> Slot:
        try:
            return self._db.reserve(alert.node, alert.cause, now, self._lock_timeout(deadline))
        except (StateError, OSError) as exc:
            warning = (f"alert state {self.state_path} unusable "
                       f"({self._redact(str(exc))}): only the first alert per node and cause "
                       "is sent, by one process")
            slot = self._fallback.reserve(alert.node, alert.cause, now, warning,
                                          self._lock_timeout(deadline))
            log.warning("%s", slot.warning)
            return slot

    def _settle(self, alert: Alert, slot: Slot, delivered: bool, now: float,
                deadline: float | None) -> None:
        if slot.fallback is not None:
            self._fallback.settle(alert.node, alert.cause, slot, delivered, now,
                                  self._lock_timeout(deadline))
            return
        try:
            self._db.settle(alert.node, alert.cause, slot, delivered, now,
                            max(1.0, self._lock_timeout(deadline)))
        except (StateError, OSError) as exc:  # the slot stays taken: never more than the limit
            log.warning("alert state %s: could not record the delivery of %s/%s (%s)",
                        self.state_path, alert.node, alert.cause, self._redact(str(exc)))

    def _send(self, alert: Alert, url: Secret, deadline: float | None) -> Delivery:
        if self._remaining(deadline) <= 0:
            return Delivery(sent=False, error="notify deadline passed before sending")
        now = self.clock()
        slot = self._reserve(alert, now, deadline)
        if not slot.send:
            log.debug("alert for %s/%s suppressed: held back until %s", alert.node,
                      alert.cause, iso(slot.held_until) if slot.held_until is not None else "?")
            return Delivery(sent=False, suppressed=True, held_until=slot.held_until,
                            warning=slot.warning)
        payload = render(alert, self.fmt, now=now, held_until=slot.held_until,
                         suppressed=slot.suppressed)
        try:
            delivery = self._post(url, payload, deadline)
        except BaseException:
            self._settle(alert, slot, False, now, deadline)
            raise
        self._settle(alert, slot, delivery.sent, now, deadline)
        delivery = replace(delivery, held_until=slot.held_until, warning=slot.warning,
                           summarised=slot.suppressed.count if slot.suppressed else 0)
        if delivery.sent:
            log.info("alert for %s/%s delivered (HTTP %s, %d attempt(s))", alert.node,
                     alert.cause, delivery.status, delivery.attempts)
        else:
            log.warning("alert for %s/%s not delivered after %d attempt(s): %s", alert.node,
                        alert.cause, delivery.attempts, delivery.error)
        return delivery

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        wait = self.backoff_s * (2.0 ** (attempt - 1)) * self._rng.uniform(0.5, 1.0)
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(wait, MAX_BACKOFF_S)

    def _post(self, url: Secret, payload: dict[str, Any],
              deadline: float | None) -> Delivery:
        attempts, status, error = 0, None, "not attempted"
        while True:
            remaining = self._remaining(deadline)
            if remaining <= 0:
                return Delivery(sent=False, attempts=attempts, status=status,
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
                    return Delivery(sent=True, attempts=attempts,
                                    status=status)
                body = self._redact(" ".join(response.text.split()))[:200]
                error = f"HTTP {status}" + (f": {body}" if body else "")
                retry = status >= 500 or status == 429
                retry_after = _retry_after(response.headers.get("Retry-After"))
                response.close()
            if not retry or attempts > self.retries:
                return Delivery(sent=False, attempts=attempts, status=status,
                                error=error)
            wait = self._backoff(attempts, retry_after)
            if wait >= self._remaining(deadline):
                return Delivery(sent=False, attempts=attempts, status=status,
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
