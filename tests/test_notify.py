"""Webhook alerts against a real HTTP server on 127.0.0.1: both formats, the rate limit counted
exactly (also across processes), retries, and that the secret URL never leaks."""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stetho.publish import notify, ratelimit
from stetho.publish.notify import Alert, Delivery, Notifier, notify_all, render, webhook_url
from tests.conftest import StethoEnv

REPO = Path(__file__).resolve().parent.parent
TOKEN = "XoXb5ecretT0kenPath"
QTOKEN = "q5ecretQueryT0ken"
DAY = 24 * 3600.0


# -- the webhook -----------------------------------------------------------------------------

@dataclass
class Hook:
    """A live webhook. `plan` holds what to answer to the next requests, in order: a status
    code, ("hold",) to hang (past the client's timeout) until the test ends, or
    ("retry-after", seconds) for a 429; empty means 200."""

    server: ThreadingHTTPServer
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    plan: deque[Any] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    released: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.base}/services/T0/B0/{TOKEN}?token={QTOKEN}"

    def next_action(self) -> Any:
        with self.lock:
            return self.plan.popleft() if self.plan else 200


class _Handler(BaseHTTPRequestHandler):
    hook: Hook

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        hook = self.server.hook  # type: ignore[attr-defined]
        with hook.lock:
            hook.bodies.append(json.loads(raw))
            hook.paths.append(self.path)
        action = hook.next_action()
        try:
            if isinstance(action, tuple) and action[0] == "hold":
                hook.released.wait(60)
                action = 200
            if isinstance(action, tuple) and action[0] == "retry-after":
                self.send_response(429)
                self.send_header("Retry-After", str(action[1]))
                self.end_headers()
                return
            # Echo the path in error bodies, as some services do: it must be redacted.
            text = b"ok" if action < 300 else f"bad request to {self.path}".encode()
            self.send_response(action)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): expected

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = _Server(("127.0.0.1", 0), _Handler)
    h = Hook(server)
    server.hook = h  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield h
    h.released.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stetho_env: StethoEnv) -> None:
    stetho_env.setenv("STETHO_NOTIFY_STATE", str(tmp_path / "notify.db"))
    stetho_env.delenv("STETHO_WEBHOOK_URL", raising=False)
    stetho_env.delenv("STETHO_WEBHOOK_FORMAT", raising=False)


class Clock:
    def __init__(self, t: float = 1_700_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Sleeps(list[float]):
    def __call__(self, s: float) -> None:
        self.append(s)


def alert(node: str = "gpu-node-07", cause: str = "ecc-uncorrectable", **kw: Any) -> Alert:
    fields: dict[str, Any] = {
        "title": "Uncorrectable ECC errors", "summary": "GPU 3: 2 volatile DBE since boot",
        "severity": "critical", "report": "https://reports.example/r/42", "run": "run-42"}
    return Alert(node=node, cause=cause, **(fields | kw))


def make(hook: Hook, tmp_path: Path, fmt: str = "generic", **kw: Any) -> Notifier:
    opts: dict[str, Any] = {"timeout_s": 2.0, "retries": 3, "backoff_s": 0.01,
                            "clock": Clock(), "sleep": Sleeps()}
    return Notifier(hook.url, fmt, tmp_path / "state.db", **(opts | kw))


# -- formats ---------------------------------------------------------------------------------

def test_generic_delivery(hook: Hook, tmp_path: Path) -> None:
    d = make(hook, tmp_path).send(alert())
    assert d == Delivery(sent=True, suppressed=False, attempts=1, status=200, error=None)
    (body,) = hook.bodies
    assert body == {
        "source": "stetho", "node": "gpu-node-07", "cause": "ecc-uncorrectable",
        "title": "Uncorrectable ECC errors", "summary": "GPU 3: 2 volatile DBE since boot",
        "severity": "critical", "report": "https://reports.example/r/42", "run": "run-42",
        "time": "2023-11-14T22:13:20Z", "held_back_until": None, "suppressed": None}
    assert hook.paths == [f"/services/T0/B0/{TOKEN}?token={QTOKEN}"]


def test_slack_delivery_escapes(hook: Hook, tmp_path: Path) -> None:
    a = alert(title="<script>alert(1)</script> & friends", summary="x < y && y > z",
              report="https://reports.example/r?a=1&b=2", node="n<1>")
    d = make(hook, tmp_path, "slack").send(a)
    assert d.sent and d.attempts == 1
    (body,) = hook.bodies
    assert set(body) == {"text", "blocks"}
    section = body["blocks"][0]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    for text in (body["text"], section["text"]["text"]):
        assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "&amp; friends" in text and "n&lt;1&gt;" in text
    md = section["text"]["text"]
    assert "x &lt; y &amp;&amp; y &gt; z" in md
    assert "<https://reports.example/r?a=1&amp;b=2|Diagnosis report>" in md
    assert "CRITICAL" in md and "run-42" in md


def test_render_limit_notes_both_formats() -> None:
    a = alert(report="/var/lib/stetho/reports/42.html")
    now, until = 1_700_000_000.0, 1_700_000_000.0 + DAY
    held = notify.Suppressed(count=4, first=now - 7200, last=now - 60)
    g = render(a, "generic", now=now, held_until=until, suppressed=held)
    assert g["held_back_until"] == "2023-11-15T22:13:20Z"
    assert g["suppressed"] == {"count": 4, "first": "2023-11-14T20:13:20Z",
                               "last": "2023-11-14T22:12:20Z"}
    s = render(a, "slack", now=now, held_until=until, suppressed=held)
    md = s["blocks"][0]["text"]["text"]
    assert "held back until 2023-11-15 22:13 UTC" in md
    assert ("4 alerts for `gpu-node-07` / `ecc-uncorrectable` held back since the last message "
            "(first 2023-11-14 20:13 UTC, last 2023-11-14 22:12 UTC)") in md
    assert "`/var/lib/stetho/reports/42.html`" in md
    plain = render(a, "slack", now=now)["blocks"][0]["text"]["text"]
    assert "held back" not in plain
    with pytest.raises(ValueError):
        render(a, "teams")


def test_slack_long_summary_is_clipped() -> None:
    s = render(alert(summary="z" * 10_000), "slack")
    assert len(s["blocks"][0]["text"]["text"]) <= notify.SLACK_SECTION_MAX
    assert "Diagnosis report" in s["blocks"][0]["text"]["text"]


def test_bad_severity_is_refused() -> None:
    with pytest.raises(ValueError, match="severity"):
        alert(severity="error")


# -- rate limit ------------------------------------------------------------------------------

def outcomes(results: list[Delivery]) -> list[str]:
    return ["suppressed" if d.suppressed else "last" if d.sent and d.held_until else
            "sent" if d.sent else "failed" for d in results]


def test_rate_limit_counted_exactly(hook: Hook, tmp_path: Path) -> None:
    clock = Clock()
    start = clock.t
    n = make(hook, tmp_path, clock=clock)
    results = []
    for _ in range(5):
        results.append(n.send(alert()))
        clock.t += 60
    assert outcomes(results) == ["sent", "sent", "last", "suppressed", "suppressed"]
    assert all(d.attempts == 0 and d.error is None for d in results[3:])
    assert len(hook.bodies) == 3  # never more than 3 messages: no extra "silenced" one
    # the message that took the last slot says when the first alert leaves the window
    assert [b["held_back_until"] for b in hook.bodies] == [None, None, "2023-11-15T22:13:20Z"]

    # another node, another cause: counted separately
    assert n.send(alert(node="gpu-node-08")).sent
    assert n.send(alert(cause="nvlink-down")).sent
    assert len(hook.bodies) == 5

    # a day later the slots are free, and the first message summarises what was held back
    clock.t = start + DAY + 300
    again = [n.send(alert()) for _ in range(4)]
    assert outcomes(again) == ["sent", "sent", "last", "suppressed"]
    assert again[0].summarised == 2 and again[1].summarised == 0
    assert hook.bodies[5]["suppressed"] == {"count": 2, "first": "2023-11-14T22:16:20Z",
                                            "last": "2023-11-14T22:17:20Z"}
    assert hook.bodies[6]["suppressed"] is None  # reported once, then forgotten


def test_rate_limit_window_slides(hook: Hook, tmp_path: Path) -> None:
    clock = Clock()
    n = make(hook, tmp_path, clock=clock)
    start = clock.t
    for hour in range(5):  # 3 sent, 2 held back
        clock.t = start + hour * 3600
        n.send(alert())
    clock.t = start + DAY + 1  # only the first alert has left the window: one slot
    d = n.send(alert())
    assert d.sent and d.summarised == 2
    assert d.held_until == start + 3600 + DAY  # the last slot: the next frees with hour 1
    assert n.send(alert()).suppressed
    assert len(hook.bodies) == 4


def test_failed_delivery_gives_the_slot_back(hook: Hook, tmp_path: Path) -> None:
    """A webhook failing 3 times, then recovering: the failures used no budget, so the 4th
    alert is delivered, and two more after it."""
    hook.plan.extend([500] * 3)
    n = make(hook, tmp_path, retries=0)
    failed = [n.send(alert()) for _ in range(3)]
    assert all(not d.sent and d.error == "HTTP 500: bad request to <webhook>" for d in failed)
    fourth = n.send(alert())
    assert fourth.sent and fourth.status == 200 and fourth.held_until is None
    assert outcomes([n.send(alert()) for _ in range(3)]) == ["sent", "last", "suppressed"]
    assert len(hook.bodies) == 6  # 3 refused by the webhook, 3 delivered


def test_state_shared_between_notifiers(hook: Hook, tmp_path: Path) -> None:
    first, second = make(hook, tmp_path), make(hook, tmp_path)
    assert [first.send(alert()).sent for _ in range(2)] == [True, True]
    assert outcomes([second.send(alert())]) == ["last"]
    assert first.send(alert()).suppressed


def test_a_pending_slot_counts(tmp_path: Path) -> None:
    """A process that died mid-POST never settled its slot: it still counts (a crash frees no
    budget), and an old-layout state file's alerts are taken over."""
    limit = ratelimit.SharedLimit(tmp_path / "s.db")
    now = 1_700_000_000.0
    slots = [limit.reserve("n1", "xid-79", now + i, 5.0) for i in range(4)]
    assert [s.send for s in slots] == [True, True, True, False]

    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT, "
                 "cause TEXT, time REAL, kind TEXT)")
    conn.executemany("INSERT INTO events (node, cause, time, kind) VALUES (?,?,?,?)",
                     [("n1", "xid-79", now - 60 * i, "alert") for i in range(3)])
    conn.commit()
    conn.close()
    assert not ratelimit.SharedLimit(old).reserve("n1", "xid-79", now, 5.0).send


def test_unusable_state_sends_only_the_first(hook: Hook, tmp_path: Path) -> None:
    (tmp_path / "isadir").mkdir()
    n = Notifier(hook.url, state_path=tmp_path / "isadir", backoff_s=0.01, sleep=Sleeps())
    node = f"fallback-{tmp_path.name}"  # the fallback is per process: a name no test shares
    results = [n.send(alert(node=node)) for _ in range(3)]
    assert outcomes(results) == ["last", "suppressed", "suppressed"]
    assert all(d.warning and "unusable" in d.warning and "only the first" in d.warning
               for d in results)
    assert len(hook.bodies) == 1


SENDER = """
import json, sys, time
from pathlib import Path
from stetho.publish.notify import Alert, Notifier
url, state, go, count = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
n = Notifier(url, state_path=state, backoff_s=0.01, lock_timeout_s=60, timeout_s=30)
a = Alert("gpu-node-07", "xid-79", "GPU fell off the bus", "Xid 79", "critical")
while not go.exists():
    time.sleep(0.005)
out = [n.send(a) for _ in range(count)]
print(json.dumps([[d.sent, d.suppressed, d.error, d.warning] for d in out]))
"""


def fire(hook: Hook, tmp_path: Path, state: Path, processes: int, count: int) -> list[Any]:
    """`processes` senders of `count` alerts each, released together; their rows."""
    script = tmp_path / "sender.py"
    script.write_text(SENDER)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(script), hook.url, str(state), str(go),
                               str(count)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(processes)]
    go.touch()
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        rows.extend(json.loads(out))
    return rows


def test_concurrent_processes_never_exceed_limit(hook: Hook, tmp_path: Path) -> None:
    rows = fire(hook, tmp_path, tmp_path / "shared.db", processes=4, count=5)
    assert all(r[2] is None and r[3] is None for r in rows)
    assert sum(1 for r in rows if r[0]) == 3
    assert sum(1 for r in rows if r[1]) == 17
    assert len(hook.bodies) == 3


def test_corrupt_state_with_five_processes(hook: Hook, tmp_path: Path) -> None:
    """The state file is garbage and five processes fire at once: one sets it aside and starts
    afresh under the lock, and since what was sent before is unknown only the first alert goes
    out (never more than the limit of 3); every process is told."""
    state = tmp_path / "notify.db"
    state.write_bytes(b"not a database, just bytes\n" * 200)
    rows = fire(hook, tmp_path, state, processes=5, count=3)
    sent = sum(1 for r in rows if r[0])
    assert sent <= notify.LIMIT and sent == 1 == len(hook.bodies)
    assert sum(1 for r in rows if r[1]) == 14
    assert all(r[3] and "was lost" in r[3] for r in rows)
    aside = sorted(p.name for p in tmp_path.glob("notify.db.corrupt-*"))
    assert len(aside) == 1 and (tmp_path / aside[0]).read_bytes().startswith(b"not a database")
    # the fresh state works: a day later the full budget is back, and the summary comes along
    n = make(hook, tmp_path, clock=Clock(time.time() + DAY + 60))
    n.state_path = state
    n._db = ratelimit.SharedLimit(state)
    first = n.send(Alert("gpu-node-07", "xid-79", "GPU fell off the bus", "Xid 79", "critical"))
    assert first.sent and first.warning is None and first.summarised == 14


HOLDER = """
import sqlite3, sys, time
from pathlib import Path
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
while not Path(sys.argv[2]).exists():
    time.sleep(0.01)
"""

ONE_EACH = """
import json, sys, time
from pathlib import Path
from stetho.publish.notify import Alert, Notifier
url, state, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
n = Notifier(url, state_path=state, backoff_s=0.01, lock_timeout_s=0.3, timeout_s=30)
a = Alert("gpu-node-07", "xid-79", "GPU fell off the bus", "Xid 79", "critical")
while not go.exists():
    time.sleep(0.005)
d = n.send(a)
print(json.dumps([d.sent, d.suppressed, d.error, d.warning]))
"""


@pytest.mark.parametrize("trouble", ["unusable", "locked"])
def test_state_unusable_or_locked_one_process_sends(hook: Hook, tmp_path: Path,
                                                   trouble: str) -> None:
    """Eight processes with one alert each and a state none of them can use (a folder where
    the file should be, or a file another process keeps locked): one sends, seven hold and
    say so on stderr; never one alert per process."""
    state = tmp_path / "notify.db"
    holder = None
    if trouble == "unusable":
        state.mkdir()
    else:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(state),
                                   str(tmp_path / "done")], stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    script = tmp_path / "one.py"
    script.write_text(ONE_EACH)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(script), hook.url, str(state), str(go)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    go.touch()
    rows, errs = [], []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        rows.append(json.loads(out))
        errs.append(err)
    if holder is not None:
        (tmp_path / "done").touch()
        holder.wait(timeout=30)
    assert sum(1 for r in rows if r[0]) == 1 == len(hook.bodies)
    held = [(r, e) for r, e in zip(rows, errs, strict=True) if not r[0]]
    assert len(held) == 7 and all(r[1] for r, _ in held)
    assert all("unusable" in e and "held: another stetho process sent the alert for "
               "gpu-node-07/xid-79" in e for _, e in held)
    assert TOKEN not in "".join(errs)


def test_future_schema_is_set_aside(hook: Hook, tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    conn = sqlite3.connect(state)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    n = make(hook, tmp_path)
    results = [n.send(alert()) for _ in range(2)]
    assert outcomes(results) == ["last", "suppressed"]
    assert results[0].warning and "was lost" in results[0].warning
    assert list(tmp_path.glob("state.db.corrupt-*"))


# -- delivery --------------------------------------------------------------------------------

def test_500_then_200_is_retried(hook: Hook, tmp_path: Path) -> None:
    hook.plan.append(500)
    sleeps = Sleeps()
    d = make(hook, tmp_path, sleep=sleeps, backoff_s=0.2).send(alert())
    assert d.sent and d.attempts == 2 and d.status == 200 and d.error is None
    assert len(hook.bodies) == 2 and hook.bodies[0] == hook.bodies[1]
    (wait,) = sleeps
    assert 0.1 <= wait <= 0.2  # jittered: backoff * U(0.5, 1)


def test_backoff_grows_and_429_honours_retry_after(hook: Hook, tmp_path: Path) -> None:
    hook.plan.extend([503, 503, ("retry-after", 7)])
    sleeps = Sleeps()
    d = make(hook, tmp_path, sleep=sleeps, backoff_s=1.0).send(alert())
    assert d.sent and d.attempts == 4
    assert 0.5 <= sleeps[0] <= 1.0 and 1.0 <= sleeps[1] <= 2.0 and sleeps[2] == 7.0


def test_timeout_is_retried_then_fails_without_raising(hook: Hook, tmp_path: Path) -> None:
    hook.plan.extend([("hold",)] * 2)
    sleeps = Sleeps()
    d = make(hook, tmp_path, timeout_s=0.2, retries=1, sleep=sleeps).send(alert())
    assert not d.sent and d.attempts == 2 and d.status is None
    assert d.error is not None and "timed out" in d.error.lower()
    assert len(sleeps) == 1 and len(hook.bodies) == 2


def test_400_is_not_retried(hook: Hook, tmp_path: Path) -> None:
    hook.plan.extend([400, 200])
    sleeps = Sleeps()
    d = make(hook, tmp_path, sleep=sleeps).send(alert())
    assert not d.sent and d.attempts == 1 and d.status == 400 and not sleeps
    assert d.error is not None and d.error.startswith("HTTP 400")
    assert len(hook.bodies) == 1


def test_connection_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps = Sleeps()
    n = Notifier(f"http://127.0.0.1:{port}/services/T0/B0/{TOKEN}", state_path=tmp_path / "s",
                 retries=2, backoff_s=0.01, sleep=sleeps)
    d = n.send(alert())
    assert not d.sent and d.attempts == 3 and len(sleeps) == 2
    assert d.error is not None and "ConnectionError" in d.error and TOKEN not in d.error


class Records(logging.Handler):
    """Every record of the given loggers, attached to them directly (not through the root
    logger, whose level and handlers other tests and libraries may change)."""

    def __init__(self, *names: str) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.loggers = [logging.getLogger(n) for n in names]
        self.levels = [lg.level for lg in self.loggers]

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> Records:
        # another test in this process (an in-process ansible-runner) may have called
        # logging.disable(): records below that level are then never even created
        # (or logging.config with disable_existing_loggers, which marks loggers disabled)
        self.disabled = logging.root.manager.disable
        logging.disable(logging.NOTSET)
        self.off = [lg.disabled for lg in self.loggers]
        for lg in self.loggers:
            lg.disabled = False
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc: object) -> None:
        for lg, level in zip(self.loggers, self.levels, strict=True):
            lg.removeHandler(self)
            lg.setLevel(level)
        for lg, off in zip(self.loggers, self.off, strict=True):
            lg.disabled = off
        logging.disable(self.disabled)

    @property
    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)


def test_url_never_leaks(hook: Hook, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = f"http://u:{TOKEN}pw@127.0.0.1:{closed}/services/T0/B0/{TOKEN}?token={QTOKEN}"
    seen: list[str] = []
    cases: list[tuple[str, list[Any], dict[str, Any]]] = [
        (hook.url, [500, 500], {"retries": 1}),  # the body echoes the path
        (hook.url, [400], {}),
        (hook.url, [("hold",)], {"timeout_s": 0.2, "retries": 0}),  # read timeout
        (refused, [], {"retries": 0}),  # connection refused, password in the userinfo
        (f"hxxp://hooks.example/services/{TOKEN}?token={QTOKEN}", [], {}),  # no adapter
        (f"http://[bad/services/{TOKEN}?token={QTOKEN}", [], {}),  # does not parse
    ]
    # urllib3.connectionpool too: another test in this process may have raised its level
    with Records("urllib3", "urllib3.connectionpool", "requests", "stetho") as logs:
        for url, plan, kw in cases:
            hook.plan.extend(plan)
            n = Notifier(url, state_path=tmp_path / f"s{len(seen)}", backoff_s=0.01,
                         sleep=Sleeps(), **({"timeout_s": 30.0} | kw))
            d = n.send(alert())
            assert not d.sent and d.error
            assert not hook.plan  # each case got exactly the answers planned for it
            seen += [d.error, repr(d), repr(n), str(n), f"{n!r}", str(vars(n))]
    seen.append(logs.text)
    seen += [str(r.args) for r in logs.records]
    blob = "\n".join(seen)
    assert TOKEN not in blob and QTOKEN not in blob and "/services/T0/B0" not in blob
    assert "<webhook>" in blob
    # the captured logs did include urllib3's request lines, redacted
    assert "Starting new HTTP connection" in logs.text
    assert '"POST <webhook> HTTP/1.1" 500' in logs.text


def test_redactor_covers_spellings() -> None:
    r = notify.Redactor("https://hooks.example/services/T0/B0/abc%20def123?token=zz9zz9zz")
    text = ("https://hooks.example/services/T0/B0/abc%20def123?token=zz9zz9zz | "
            "/services/T0/B0/abc def123 | abc%20def123 | token=zz9zz9zz")
    out = r(text)
    assert "abc" not in out and "zz9zz9zz" not in out
    assert "<webhook>" in repr(r) and "hooks" not in repr(r)


# -- no webhook, notify_all --------------------------------------------------------------------

def test_no_url_is_a_no_op(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           stetho_env: StethoEnv) -> None:
    state = tmp_path / "never.db"
    stetho_env.setenv("STETHO_NOTIFY_STATE", str(state))
    assert webhook_url() is None and webhook_url("  ") is None
    out = notify_all([alert(), alert()])
    assert out == [Delivery(sent=False)] * 2
    assert Notifier(None).send(alert()) == Delivery(sent=False)
    assert not state.exists()


def test_webhook_url_precedence(monkeypatch: pytest.MonkeyPatch, stetho_env: StethoEnv) -> None:
    stetho_env.setenv("STETHO_WEBHOOK_URL", "https://env.example/x")
    assert webhook_url() == "https://env.example/x"
    assert webhook_url("https://config.example/y") == "https://config.example/y"


def test_notify_all_from_env(hook: Hook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             stetho_env: StethoEnv) -> None:
    stetho_env.setenv("STETHO_WEBHOOK_URL", hook.url)
    stetho_env.setenv("STETHO_WEBHOOK_FORMAT", "slack")
    out = notify_all([alert(), alert(node="other")], state_path=tmp_path / "s.db",
                     backoff_s=0.01)
    assert [d.sent for d in out] == [True, True]
    assert all("blocks" in b for b in hook.bodies)


def test_notify_all_unknown_format_does_not_raise(hook: Hook, tmp_path: Path) -> None:
    out = notify_all([alert()], url=hook.url, fmt="teams", state_path=tmp_path / "s.db")
    assert not out[0].sent and out[0].error is not None and "teams" in out[0].error
    assert hook.bodies == []


def test_notify_all_deadline_bounds_a_hung_webhook(hook: Hook, tmp_path: Path) -> None:
    """The webhook hangs until the test ends; notify_all still returns, on its own deadline,
    with every alert marked undelivered (how long it took is bench material, not a test's)."""
    hook.plan.extend([("hold",)] * 10)
    out = notify_all([alert(node=f"n{i}") for i in range(4)], url=hook.url,
                     state_path=tmp_path / "s.db", deadline_s=0.6, timeout_s=5.0,
                     backoff_s=0.01, sleep=Sleeps())
    assert not hook.released.is_set()  # returned while the webhook was still hanging
    assert len(out) == 4 and not any(d.sent for d in out)
    assert all(d.error and "deadline" in d.error for d in out)
