"""`stetho remedy` from the CLI on simulated nodes: a dry run says what would run, `--act`
resets the idle GPU through the sim's nvidia-smi, refuses the one a job holds, POSTs the
ticket to a real local HTTP server, records every action in the history, and escalates the
reset the same fault outlived to a ticket. Reboots on the real Slurm testbed are in
tests/test_remedy_slurm.py."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stetho.evidence.runner import Environment
from stetho.remedy import gpu_reset, ticket
from stetho.remedy.plan import Step
from stetho.results import Result
from stetho.sim.builder import build_node
from stetho.sinks import json_out

pytestmark = pytest.mark.xdist_group("remedy")


class Hook:
    """A real HTTP server on localhost that keeps each JSON document POSTed to it."""

    def __init__(self) -> None:
        self.got: list[dict[str, object]] = []
        self.status = 201
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                hook.got.append(json.loads(body))
                self.send_response(hook.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/tickets?token=s3cret"


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    t = threading.Thread(target=h.server.serve_forever, daemon=True)
    t.start()
    try:
        yield h
    finally:
        h.server.shutdown()
        h.server.server_close()


def _stetho(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def _check_into(run: Path, sim: Path, nodes: list[str]) -> None:
    """`stetho check --sim` each node into one run folder (results.json + hosts/<n>/)."""
    results: list[Result] = []
    for n in nodes:
        (run / "hosts" / n).mkdir(parents=True, exist_ok=True)
        out = run / f"{n}.json"
        r = _stetho("check", "--sim", str(sim / n), "--profile", "h100-sxm-8gpu", "-q",
                    "--no-history", "--json", str(out),
                    "--evidence-out", str(run / "hosts" / n / "evidence.json"))
        assert r.returncode in (0, 1), r.stderr
        results += json_out.load(out.read_text())
        out.unlink()
    (run / "results.json").write_text(json_out.render(results))


def _uuids(node: Path) -> list[str]:
    text = (node / "data" / "nvidia-smi-q.txt").read_text()
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if "GPU UUID" in ln]


def test_remedy_from_the_cli_on_simulated_nodes(tmp_path, hook):
    sim, run, db = tmp_path / "sim", tmp_path / "run", tmp_path / "history.db"
    built = _stetho("sim", "build", str(sim), "--nodes", "3",
                    "--fault", "node01=rowremap-pending",
                    "--fault", "node02=xid=94", "--fault", "node02=gpu-job=gpu2",
                    "--fault", "node03=ib-rate-downgrade")
    assert built.returncode == 0, built.stderr
    _check_into(run, sim, ["node01", "node02", "node03"])

    dry = _stetho("remedy", str(run), "--sim", str(sim), "--db", str(db),
                  "--webhook", hook.url, "--json", str(tmp_path / "dry.json"))
    assert dry.returncode == 0, dry.stderr + dry.stdout
    lines = dry.stdout.splitlines()
    assert any(ln.startswith("node01: gpu-remap-pending [gpu:") and "-> gpu-reset: planned: "
               "dry run, GPU idle: would run `nvidia-smi -r -i 6`" in ln for ln in lines), lines
    assert any(ln.startswith("node02: gpu-memory-failing") and "-> gpu-reset: refused: busy: "
               "process 100477 on GPU 2" in ln for ln in lines), lines
    assert any(ln.startswith("node03: ib-link-degraded [hca:mlx5_4/1] -> ticket: planned: "
                             "dry run") for ln in lines), lines
    assert lines[-1] == "dry run: 2 gpu-reset, 1 ticket; nothing changed (--act carries it out)"
    assert not (sim / "node01" / "data" / "resets.log").exists() and not hook.got
    assert "s3cret" not in dry.stdout + dry.stderr
    with sqlite3.connect(db) as c:  # a dry run records nothing
        assert c.execute("SELECT count(*) FROM remedies").fetchone() == (0,)

    act = _stetho("remedy", str(run), "--sim", str(sim), "--db", str(db), "--act",
                  "--webhook", hook.url)
    assert act.returncode == 0, act.stderr + act.stdout
    assert "node01: gpu-remap-pending" in act.stdout and "-> gpu-reset: done: " \
        "`nvidia-smi -r -i 6`: GPU 00000000:CB:00.0 was successfully reset." in act.stdout
    assert (sim / "node01" / "data" / "resets.log").read_text().split()[0] == "6"
    assert not (sim / "node02" / "data" / "resets.log").exists()  # the job's GPU untouched
    assert [t["node"] for t in hook.got] == ["node03"]
    sent = hook.got[0]
    assert sent["cause"] == "ib-link-degraded" and sent["schema"] == "stetho.ticket"
    parts = sent["parts"]
    assert isinstance(parts, dict) and parts["device"] == "mlx5_4" and parts["guid"]
    assert parts["cable"].startswith("mlx5_4 port 1 -> cable to ")
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT node, cause, action, outcome FROM remedies ORDER BY node"
                         ).fetchall()
    assert rows == [("node01", "gpu-remap-pending", "gpu-reset", "done"),
                    ("node02", "gpu-memory-failing", "gpu-reset", "refused"),
                    ("node03", "ib-link-degraded", "ticket", "done")]

    # the same evidence again: nothing repeats, nobody is told twice
    again = _stetho("remedy", str(run), "--sim", str(sim), "--db", str(db), "--act",
                    "--webhook", hook.url, "--node", "node01", "--node", "node03")
    assert again.returncode == 0, again.stderr
    assert "check node01 again to see whether it helped" in again.stdout
    assert "ticket already sent" in again.stdout and len(hook.got) == 1

    # node01 checked again after its reset, still pending: the reset did not help -> ticket
    time.sleep(1.1)  # evidence stamps are whole seconds: collected strictly after the reset
    _check_into(run, sim, ["node01"])
    esc = _stetho("remedy", str(run), "--sim", str(sim), "--db", str(db), "--act",
                  "--webhook", hook.url)
    assert esc.returncode == 0, esc.stderr
    assert "node01: gpu-remap-pending" in esc.stdout and "-> ticket: done" in esc.stdout
    assert "why: escalated: gpu-reset ran" in esc.stdout
    assert "earlier on this fault: gpu-reset done 20" in esc.stdout
    assert len((sim / "node01" / "data" / "resets.log").read_text().splitlines()) == 1
    assert [t["node"] for t in hook.got] == ["node03", "node01"]
    assert hook.got[1]["earlier"][0]["action"] == "gpu-reset"  # type: ignore[index]


@pytest.fixture(scope="module")
def busy_node(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("busy")
    build_node(root / "n1", "n1", ["gpu-job=gpu3"])
    return root / "n1"


def _step(where: dict[str, str]) -> Step:
    return Step("n1", "gpu-remap-pending", "GPU row remap pending", "gpu:X", "gpu-reset",
                "rule", tuple(where.items()))


def test_a_gpu_is_reset_only_when_no_process_holds_it(busy_node):
    from stetho.evidence.collect import sim_environment

    env, _ = sim_environment(str(busy_node))
    uuids = _uuids(busy_node)
    held = gpu_reset.reset(_step({"gpu": "3", "uuid": uuids[3]}), env, act=True)
    assert held.outcome == "refused" and held.detail == "busy: process 100477 on GPU 3: not reset"
    # the job's GPU UUID unknown: any process on any GPU refuses (fail closed)
    blind = gpu_reset.reset(_step({"gpu": "5"}), env, act=True)
    assert blind.outcome == "refused" and "UUID is not known" in blind.detail
    assert not (busy_node / "data" / "resets.log").exists()
    free = gpu_reset.reset(_step({"gpu": "5", "uuid": uuids[5]}), env, act=True)
    assert free.outcome == "done" and free.argv == ("nvidia-smi", "-r", "-i", "5")
    assert (busy_node / "data" / "resets.log").read_text().split()[0] == "5"


def test_a_gpu_reset_fails_closed(busy_node, tmp_path):
    # no tools for the node here: planned, never run on this machine
    assert gpu_reset.reset(_step({"gpu": "5"}), None, act=True).outcome == "planned"
    # no GPU index in the evidence: nothing to reset
    assert gpu_reset.reset(_step({"pci": "0000:9b:00.0"}), None, act=True).outcome == "refused"
    # nvidia-smi missing: its processes are unknown, so no reset
    empty = Environment(sysroot=str(tmp_path), path=str(tmp_path))
    why = gpu_reset.reset(_step({"gpu": "5", "uuid": "GPU-x"}), empty, act=True)
    assert why.outcome == "refused" and why.detail.startswith("could not list the GPU's")


def test_a_ticket_the_webhook_refused_is_failed_and_names_no_secret(hook):
    step = Step("n1", "riser-pcie-slot", "PCIe path", "gpu:S1", "ticket", "rule",
                (("gpu", "4"), ("pci", "0000:9b:00.0"), ("serial", "S1")))
    hook.status = 500
    bad = ticket.send(step, hook.url, act=True)
    assert bad.outcome == "failed" and "HTTP 500" in bad.detail and "s3cret" not in bad.detail
    hook.status = 200
    ok = ticket.send(step, hook.url, act=True)
    assert ok.outcome == "done"
    assert hook.got[-1]["parts"] == {"gpu": "4", "pci": "0000:9b:00.0", "serial": "S1"}
    down = ticket.send(step, "http://127.0.0.1:9/t?token=s3cret", act=True)
    assert down.outcome == "failed" and "s3cret" not in down.detail
    assert ticket.send(step, None, act=True).outcome == "planned"


def test_gpu_resets_run_only_where_the_nodes_tools_are(busy_node):
    import socket

    from stetho.cli.remedy import _env_for

    me = socket.gethostname().split(".")[0]
    assert _env_for(None, False)(me) is None  # by default, never on this machine
    assert _env_for(None, True)("other-node") is None
    assert _env_for(None, True)(me) is not None  # --local: this host is the node
    sim = _env_for(str(busy_node.parent), False)
    env = sim("n1")
    assert env is not None and env.path.startswith(str((busy_node / "bin").resolve()))
    assert sim("not-built") is None
