"""The webhook URL is a secret: Slack, Teams and Discord webhooks carry their token in the path
or query, so whoever reads the URL can post to the channel. It lives in a `Secret` whose repr is
"<webhook>", and every error string and log line stetho produces or lets through (including
requests' and urllib3's texts, which quote the path and query) has each part of the URL
replaced by "<webhook>"."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

REDACTED = "<webhook>"
#: Loggers whose records quote request URLs (urllib3 logs "POST /path?query" at DEBUG).
_HTTP_LOGGERS = ("urllib3", "urllib3.connectionpool", "urllib3.connection",
                 "urllib3.util.retry", "urllib3.response", "requests")


class Secret:
    """The webhook URL, which must not leak through repr, str or formatting. `reveal()` is
    the only way to the value, and is called only to POST."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return REDACTED

    def __reduce__(self) -> Any:
        raise TypeError("the webhook URL is a secret and is not pickled")


class Redactor:
    """Replaces every recognisable piece of a URL in a text by "<webhook>".

    requests' errors quote the path and query without scheme or host ("Max retries exceeded
    with url: /services/T0/B0/XXXX"), some quote the URL as given, and anything may quote it
    percent-encoded or decoded; so the pieces removed are the URL itself in those spellings,
    its path and query together and apart, the userinfo, and each path segment, query value and
    other run between URL delimiters long enough to be a token (short ones like "api" are not
    secrets, and removing them would mangle ordinary words in the message)."""

    MIN_TOKEN = 6

    def __init__(self, url: str) -> None:
        pieces: set[str] = set()
        for u in {url, unquote(url), quote(url, safe=":/?&=%@+,;")}:
            pieces.add(u)
            # Token-like runs between URL delimiters, even where the URL does not parse.
            pieces.update(re.split(r"[/?&=#@:;,\[\]]", u))
            try:
                parts = urlsplit(u)
            except ValueError:
                continue
            path_query = parts.path + ("?" + parts.query if parts.query else "")
            pieces.update({path_query, parts.path, parts.query, parts.netloc + path_query})
            if "@" in parts.netloc:
                pieces.add(parts.netloc.rsplit("@", 1)[0])
            for segment in parts.path.split("/"):
                pieces.add(segment)
            for key, value in parse_qsl(parts.query, keep_blank_values=True):
                pieces.update({value, f"{key}={value}"})
        self._pieces = sorted((p for p in pieces if len(p) >= self.MIN_TOKEN),
                              key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for piece in self._pieces:
            if piece in text:
                text = text.replace(piece, REDACTED)
        return text

    def __repr__(self) -> str:
        return "Redactor(<webhook>)"


class _RedactingFilter(logging.Filter):
    """Rewrites log records of the HTTP libraries that quote the URL (urllib3 logs the request
    line at DEBUG) with every redactor active in any thread. Installed once on those loggers and
    never removed: adding and removing filters per send would change a logger's filter list
    while another thread iterates it, and that thread's record could skip its redaction."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._active: dict[int, tuple[Redactor, int]] = {}

    def push(self, redact: Redactor) -> None:
        with self._lock:
            _, n = self._active.get(id(redact), (redact, 0))
            self._active[id(redact)] = (redact, n + 1)

    def pop(self, redact: Redactor) -> None:
        with self._lock:
            _, n = self._active.get(id(redact), (redact, 1))
            if n <= 1:
                self._active.pop(id(redact), None)
            else:
                self._active[id(redact)] = (redact, n - 1)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            redactors = [r for r, _ in self._active.values()]
        if not redactors:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is the logging module's problem, not ours
            return True
        clean = message
        for redact in redactors:
            clean = redact(clean)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = _RedactingFilter()
_INSTALLED = threading.Lock()


def _install() -> None:
    with _INSTALLED:
        for name in _HTTP_LOGGERS:
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)


@contextmanager
def redacted_logs(redact: Redactor) -> Iterator[None]:
    """While the block runs (in any thread), the HTTP libraries' log records are redacted."""
    _install()
    _FILTER.push(redact)
    try:
        yield
    finally:
        _FILTER.pop(redact)


def error_text(exc: BaseException, redact: Redactor) -> str:
    return redact(f"{type(exc).__name__}: {exc}")
