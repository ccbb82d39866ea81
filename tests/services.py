"""Real Prometheus, node_exporter and headless Chromium for the observability tests.

Debian's binaries (`apt-get install -y prometheus prometheus-node-exporter chromium`), started
on free loopback ports under a temp folder, polled for readiness (never a fixed sleep), and
stopped by the PIDs we started. `missing()` names what is not installed so a test can skip with
that reason; nothing here is simulated.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.sshd import free_port

START_TIMEOUT_S = 30.0
BINARIES = {"prometheus": "prometheus", "node_exporter": "prometheus-node-exporter",
            "promtool": "promtool", "chromium": "chromium",
            "alertmanager": "prometheus-alertmanager", "amtool": "amtool"}
PACKAGES = {"prometheus": "prometheus", "node_exporter": "prometheus-node-exporter",
            "promtool": "prometheus", "chromium": "chromium",
            "alertmanager": "prometheus-alertmanager", "amtool": "prometheus-alertmanager"}


def which(name: str) -> str | None:
    return shutil.which(BINARIES[name])


def missing(*names: str) -> str | None:
    """A skip reason naming the Debian packages to install, or None when all are there."""
    absent = [n for n in names if which(n) is None]
    if not absent:
        return None
    pkgs = " ".join(sorted({PACKAGES[n] for n in absent}))
    return f"{', '.join(BINARIES[n] for n in absent)} not installed (apt-get install -y {pkgs})"


@dataclass
class Service:
    name: str
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def poll(what: str, probe: Callable[[], Any], timeout: float = START_TIMEOUT_S,
         service: Service | None = None) -> Any:
    """Call `probe` until it returns something truthy; fail naming `what` (and the service's
    log) when it never does."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if service is not None and service.proc.poll() is not None:
            break
        try:
            last = probe()
        except (OSError, ValueError) as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    log = service.log.read_text(errors="replace")[-3000:] if service else ""
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n{log}")


def _start(name: str, argv: list[str], folder: Path, port: int, ready_path: str) -> Service:
    log = folder / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    svc = Service(name, f"http://127.0.0.1:{port}", proc, log)
    try:
        poll(f"{name} on port {port}", lambda: http_get(svc.url + ready_path)[0] == 200,
             service=svc)
    except BaseException:
        svc.stop()
        raise
    return svc


def start_node_exporter(folder: Path, textfile_dir: Path) -> Service:
    """node_exporter with only the textfile collector, on a free loopback port."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    exe = which("node_exporter")
    assert exe is not None, missing("node_exporter")
    return _start("node_exporter", [
        exe, "--collector.disable-defaults", "--collector.textfile",
        f"--collector.textfile.directory={textfile_dir}",
        f"--web.listen-address=127.0.0.1:{port}"], folder, port, "/metrics")


def start_prometheus(folder: Path, target: str, rules: Path | None = None,
                     alertmanager: str | None = None) -> Service:
    """Prometheus scraping `target` (host:port) every second, evaluating `rules` every second,
    sending its firing alerts to `alertmanager` (host:port) when given."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)] if rules else [],
        "scrape_configs": [{"job_name": "stetho", "static_configs": [{"targets": [target]}]}],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [
            {"targets": [alertmanager]}]}]}
    (folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    exe = which("prometheus")
    assert exe is not None, missing("prometheus")
    return _start("prometheus", [
        exe, f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-admin-api"], folder, port, "/-/ready")


def start_alertmanager(folder: Path, config: Path) -> Service:
    """Alertmanager with `config`, alone (no cluster port), on a free loopback port."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    exe = which("alertmanager")
    assert exe is not None, missing("alertmanager")
    return _start("alertmanager", [
        exe, f"--config.file={config}", f"--storage.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
        folder, port, "/-/ready")


def query(prom: Service, expr: str) -> list[dict[str, Any]]:
    """An instant query through the HTTP API: the result vector."""
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = http_get(url)
    doc = json.loads(body)
    if status != 200 or doc.get("status") != "success":
        raise AssertionError(f"query {expr!r} failed: {status} {body[:500]!r}")
    return list(doc["data"]["result"])


def alerts(prom: Service) -> list[dict[str, Any]]:
    status, body = http_get(f"{prom.url}/api/v1/alerts")
    assert status == 200, body[:500]
    return list(json.loads(body)["data"]["alerts"])


# -- headless Chromium -------------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def chromium(page: Path, work: Path, *args: str, timeout: float = 90.0) -> str:
    """Run headless Chromium on a local page with a fresh profile; its stdout."""
    exe = which("chromium")
    assert exe is not None, missing("chromium")
    work.mkdir(parents=True, exist_ok=True)
    profile = work / f"profile-{len(list(work.glob('profile-*')))}"
    proc = subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
                           page.resolve().as_uri()], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def dump_dom(page: Path, work: Path) -> str:
    return chromium(page, work, "--dump-dom")


def screenshot(page: Path, out: Path, work: Path, size: str = "1280,1600") -> Path:
    chromium(page, work, f"--window-size={size}", f"--screenshot={out}")
    assert out.is_file() and out.stat().st_size > 0, f"no screenshot at {out}"
    return out


def artifacts() -> Path:
    """Where tests keep what a person looks at afterwards (screenshots): $STETHO_TEST_ARTIFACTS,
    else test-artifacts/ in the checkout (gitignored); created on first use."""
    import os

    folder = Path(os.environ.get("STETHO_TEST_ARTIFACTS")
                  or Path(__file__).resolve().parent.parent / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def png_rows(path: Path, max_rows: int | None = None) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes): width, bytes per
    pixel and the first `max_rows` rows of pixels. Enough to ask which colours a screenshot
    shows, without an imaging library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = depth = ctype = interlace = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    i = 0
    for _ in range(min(height, max_rows) if max_rows else height):
        ftype, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        if ftype == 2:
            line = bytearray((x + y) & 0xFF for x, y in zip(line, prev, strict=True))
        elif ftype in (1, 3, 4):
            for x in range(stride):
                a = line[x - bpp] if x >= bpp else 0
                b = prev[x]
                if ftype == 1:
                    line[x] = (line[x] + a) & 0xFF
                elif ftype == 3:
                    line[x] = (line[x] + (a + b) // 2) & 0xFF
                else:
                    c = prev[x - bpp] if x >= bpp else 0
                    pr = a + b - c
                    pa, pb, pc = abs(pr - a), abs(pr - b), abs(pr - c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc
                                          else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def colour_count(path: Path, rgb: tuple[int, int, int], max_rows: int | None = None) -> int:
    """How many pixels of a screenshot (its first `max_rows` rows) have exactly this colour."""
    _, bpp, rows = png_rows(path, max_rows)
    target = bytes(rgb)
    return sum(1 for row in rows for x in range(0, len(row), bpp) if row[x:x + 3] == target)


# -- a small simulated cluster, checked for real ----------------------------------------------

#: node -> faults: node02 fails cpu_governor and nccl_busbw; node03 cannot be evaluated.
SIM_NODES = {"node01": [], "node02": ["governor-powersave", "busbw-drop=20"],
             "node03": ["garbage=nvidia-smi"]}


def sim_results(folder: Path) -> list[Any]:
    """SIM_NODES built from the real recorded outputs and checked through the real CLI (one
    `stetho check --sim` per node): the results a sweep of three nodes gives."""
    import sys

    from stetho.results import Result
    from stetho.sim.builder import build_node

    results: list[Result] = []
    for name, faults in SIM_NODES.items():
        build_node(folder / name, name, faults)
        out = folder / f"{name}.json"
        proc = subprocess.run([sys.executable, "-m", "stetho", "check", "--sim",
                               str(folder / name), "--profile", "h100-sxm-8gpu", "-q",
                               "--json", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1, 3), proc.stderr
        results += [Result.from_json(r) for r in json.loads(out.read_text())["results"]]
    return results


def grid_rows(html: str) -> dict[str, dict[str, Any]]:
    """The run page's grid as the browser built it: node -> its worst status, its cells'
    statuses and its links (in page order)."""
    from html.parser import HTMLParser

    class Rows(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.rows: dict[str, dict[str, Any]] = {}
            self.node: str | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if tag == "tr":
                self.node = a.get("data-node")
                if self.node:
                    self.rows[self.node] = {"worst": a["data-worst"], "cells": [], "links": []}
            elif self.node and tag == "td":
                self.rows[self.node]["cells"].append(a.get("data-status"))
            elif self.node and tag == "a":
                self.rows[self.node]["links"].append(a["href"])

    parser = Rows()
    parser.feed(html)
    return parser.rows
