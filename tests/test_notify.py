"""Webhook alerts against a real HTTP server on 127.0.0.1: both formats, the rate limit counted
exactly (also across processes), retries, and that the secret URL never leaks."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stetho.publish import notify
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
    code, or ("sleep", seconds) to hang past the client's timeout; empty means 200."""

    server: ThreadingHTTPServer
    bodies: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    plan: deque[Any] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)

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
            if isinstance(action, tuple) and action[0] == "sleep":
                time.sleep(action[1])
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
    assert d == Delivery(sent=True, silenced=False, suppressed=False, attempts=1, status=200,
                         error=None)
    (body,) = hook.bodies
    assert body == {
        "source": "stetho", "node": "gpu-node-07", "cause": "ecc-uncorrectable",
        "title": "Uncorrectable ECC errors", "summary": "GPU 3: 2 volatile DBE since boot",
        "severity": "critical", "report": "https://reports.example/r/42", "run": "run-42",
        "silenced": False, "time": "2023-11-14T22:13:20Z"}
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


def test_render_silenced_both_formats() -> None:
    a = alert(report="/var/lib/stetho/reports/42.html")
    until = 1_700_000_000.0 + DAY
    g = render(a, "generic", silenced=True, now=1_700_000_000.0, until=until)
    assert g["silenced"] is True and g["silenced_until"] == "2023-11-15T22:13:20Z"
    s = render(a, "slack", silenced=True, now=1_700_000_000.0, until=until)
    md = s["blocks"][0]["text"]["text"]
    assert "silenced until 2023-11-15 22:13 UTC" in s["text"]
    assert "gpu-node-07" in md and "ecc-uncorrectable" in md and "2023-11-15 22:13 UTC" in md
    assert "`/var/lib/stetho/reports/42.html`" in md
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

def test_rate_limit_counted_exactly(hook: Hook, tmp_path: Path) -> None:
    clock = Clock()
    n = make(hook, tmp_path, clock=clock)
    results = []
    for _ in range(5):
        results.append(n.send(alert()))
        clock.t += 60
    assert [(d.sent, d.silenced, d.suppressed) for d in results] == [
        (True, False, False)] * 3 + [(True, True, False), (False, False, True)]
    assert results[-1].attempts == 0 and results[-1].error is None
    assert [b["silenced"] for b in hook.bodies] == [False, False, False, True]
    # the slot frees when the first alert leaves the window: 24 h after it
    assert hook.bodies[-1]["silenced_until"] == "2023-11-15T22:13:20Z"

    # another node, another cause: counted separately
    assert n.send(alert(node="gpu-node-08")).sent
    assert n.send(alert(cause="nvlink-down")).sent
    assert len(hook.bodies) == 6

    # 24 h after the first batch all three have left the window: alerts flow again
    clock.t += DAY
    again = [n.send(alert()) for _ in range(5)]
    assert [(d.sent, d.silenced, d.suppressed) for d in again] == [
        (True, False, False)] * 3 + [(True, True, False), (False, False, True)]


def test_rate_limit_window_slides(hook: Hook, tmp_path: Path) -> None:
    clock = Clock()
    n = make(hook, tmp_path, clock=clock)
    start = clock.t
    for hour in range(5):  # 3 alerts, silence, suppressed
        clock.t = start + hour * 3600
        n.send(alert())
    clock.t = start + DAY + 1  # only the first alert has left the window: one slot
    assert n.send(alert()).silenced is False
    d = n.send(alert())  # a new run of alerts since the silence: announced once more
    assert d.silenced and d.sent
    assert n.send(alert()).suppressed
    assert [b["silenced"] for b in hook.bodies] == [False] * 3 + [True, False, True]


def test_failed_deliveries_still_count(hook: Hook, tmp_path: Path) -> None:
    """The documented decision: an alert counts once the decision to send it is made, so a
    webhook that fails and recovers cannot release a storm."""
    hook.plan.extend([500] * 3)
    n = make(hook, tmp_path, retries=0)
    failed = [n.send(alert()) for _ in range(3)]
    assert all(not d.sent and d.error == "HTTP 500: bad request to <webhook>" for d in failed)
    d = n.send(alert())
    assert d.sent and d.silenced
    assert n.send(alert()).suppressed


def test_state_shared_between_notifiers(hook: Hook, tmp_path: Path) -> None:
    first, second = make(hook, tmp_path), make(hook, tmp_path)
    assert [first.send(alert()).sent for _ in range(2)] == [True, True]
    assert second.send(alert()).silenced is False
    assert second.send(alert()).silenced is True
    assert first.send(alert()).suppressed


def test_unusable_state_falls_back_to_memory(hook: Hook, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "isadir").mkdir()
    n = Notifier(hook.url, state_path=tmp_path / "isadir", backoff_s=0.01, sleep=Sleeps())
    results = [n.send(alert(node="fallback-node")) for _ in range(5)]
    assert [(d.sent, d.silenced, d.suppressed) for d in results] == [
        (True, False, False)] * 3 + [(True, True, False), (False, False, True)]
    assert "in memory" in caplog.text


def test_concurrent_processes_never_exceed_limit(hook: Hook, tmp_path: Path) -> None:
    script = tmp_path / "sender.py"
    script.write_text(textwrap.dedent("""
        import json, sys, time
        from stetho.publish.notify import Alert, Notifier
        url, state, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
        n = Notifier(url, state_path=state, backoff_s=0.01, lock_timeout_s=20)
        a = Alert("gpu-node-07", "xid-79", "GPU fell off the bus", "Xid 79", "critical")
        while time.time() < start:
            time.sleep(0.001)
        out = [n.send(a) for _ in range(5)]
        print(json.dumps([[d.sent, d.silenced, d.suppressed, d.error] for d in out]))
    """))
    state = tmp_path / "shared.db"
    start = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, str(script), hook.url, str(state), str(start)],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(4)]
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        rows.extend(json.loads(out))
    assert all(r[3] is None for r in rows)
    assert sum(1 for r in rows if r[0] and not r[1]) == 3
    assert sum(1 for r in rows if r[1]) == 1
    assert sum(1 for r in rows if r[2]) == 16
    assert sorted(b["silenced"] for b in hook.bodies) == [False, False, False, True]


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
    hook.plan.extend([("sleep", 1.0)] * 2)
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


def test_url_never_leaks(hook: Hook, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    refused = f"http://u:{TOKEN}pw@127.0.0.1:{closed}/services/T0/B0/{TOKEN}?token={QTOKEN}"
    hook.plan.extend([500, 500, 400, ("sleep", 1.0)])
    seen: list[str] = []
    cases: list[tuple[str, dict[str, Any]]] = [
        (hook.url, {"retries": 1}),  # 500, 500: the body echoes the path
        (hook.url, {}),  # 400
        (hook.url, {"timeout_s": 0.2, "retries": 0}),  # read timeout
        (refused, {"retries": 0}),  # connection refused, password in the userinfo
        (f"hxxp://hooks.example/services/{TOKEN}?token={QTOKEN}", {}),  # no adapter
        (f"http://[bad/services/{TOKEN}?token={QTOKEN}", {}),  # does not parse
    ]
    for url, kw in cases:
        n = Notifier(url, state_path=tmp_path / f"s{len(seen)}", backoff_s=0.01,
                     sleep=Sleeps(), **kw)
        d = n.send(alert())
        assert not d.sent and d.error
        seen += [d.error, repr(d), repr(n), str(n), f"{n!r}", str(vars(n))]
    seen.append(caplog.text)
    seen += [str(r.args) for r in caplog.records]
    blob = "\n".join(seen)
    assert TOKEN not in blob and QTOKEN not in blob and "/services/T0/B0" not in blob
    assert "<webhook>" in blob
    # the captured logs did include urllib3's request lines, redacted
    assert "Starting new HTTP connection" in caplog.text
    assert '"POST <webhook> HTTP/1.1" 500' in caplog.text


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
    hook.plan.extend([("sleep", 3.0)] * 10)
    t0 = time.monotonic()
    out = notify_all([alert(node=f"n{i}") for i in range(4)], url=hook.url,
                     state_path=tmp_path / "s.db", deadline_s=0.6, timeout_s=5.0,
                     backoff_s=0.01, sleep=Sleeps())
    elapsed = time.monotonic() - t0
    assert elapsed < 1.5
    assert len(out) == 4 and not any(d.sent for d in out)
    assert all(d.error and "deadline" in d.error for d in out)
