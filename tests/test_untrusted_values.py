"""Values from outside (a bundle, a results row, a node's outcome) that are malformed make
their node could-not-evaluate with the reason, and every other node is still judged
(issue 28): the replay and the gate through the CLI, each loader on seeded garbage."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import zlib

import pytest

from stetho.history.store import History, NodeRun
from stetho.results import Result


def stetho(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stetho", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


# -- replay: one bad bundle among good ones ----------------------------------------------------

def _variants(base: dict) -> dict[str, tuple[str, str]]:
    """node -> (bundle text, what its error must say)."""
    def edit(node: str, change) -> str:
        d = json.loads(json.dumps(base))
        d["node"] = node
        change(d)
        return json.dumps(d)

    smi = "nvidia_smi"
    return {
        "status01": (edit("status01", lambda d: d["probes"][smi].update(status="GO")),
                     "unknown status 'GO'"),
        "rc01": (edit("rc01", lambda d: d["probes"][smi].update(rc=10**30)),
                 "is not an exit code"),
        "neg01": (edit("neg01", lambda d: d["probes"][smi].update(rc=-10**30)),
                  "is not an exit code"),
        "bigint01": (edit("bigint01", lambda d: d["probes"][smi].update(rc=12345))
                     .replace("12345", "9" * 5000), "digits"),
        "nan01": (edit("nan01", lambda d: d["probes"][smi].update(duration_s=1.5))
                  .replace("1.5", "NaN"), "NaN"),
        "surr01": (edit("surr01", lambda d: d["probes"][smi].update(stdout="XSURRX"))
                   .replace('"XSURRX"', '"\\udc80"'), "lone surrogate"),
        "deep01": (edit("deep01", lambda d: d["probes"][smi].update(files="XDEEPX"))
                   .replace('"XDEEPX"', "[" * 100000 + "]" * 100000), "nested deeper"),
        "path01": (edit("path01", lambda d: d.update(profile="../../../../etc/passwd")),
                   "profile must be a name"),
        "abs01": (edit("abs01", lambda d: d.update(profile="/etc/hostname")),
                  "profile must be a name"),
        "yml01": (edit("yml01", lambda d: d.update(profile="evil.yml")),
                  "profile must be a name"),
        "prof01": (edit("prof01", lambda d: d.update(profile="no-such-profile")),
                   "unknown profile 'no-such-profile'"),
    }


@pytest.mark.xdist_group("faultsim")
@pytest.mark.parametrize("workers", [None, "2"], ids=["serial", "xdist"])
def test_a_replay_judges_every_good_node_beside_bad_bundles(fault_bundles, tmp_path, workers):
    base = json.loads((fault_bundles / "healthy.json").read_text())
    folder = tmp_path / "bundles"
    folder.mkdir()
    (folder / "healthy.json").write_text(json.dumps(base))
    variants = _variants(base)
    for node, (text, _) in variants.items():
        (folder / f"{node}.json").write_text(text)
    out = tmp_path / "r.json"
    proc = stetho("check", "--evidence", str(folder), "--json", str(out), "-q",
                  *(["-n", workers] if workers else []))
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    healthy = [r for r in rows if r["node"] == "healthy"]
    assert len(healthy) > 90 and {r["status"] for r in healthy} <= {"pass", "skip"}
    assert not [r for r in rows if r["node"] == "*"]  # nothing killed the whole run
    for node, (_, why) in variants.items():
        mine = [r for r in rows if r["node"] == node]
        assert mine and {r["status"] for r in mine} == {"error"}, node
        assert why in mine[0]["message"], (node, mine[0]["message"])
    assert "passwd" not in out.read_text() and "root:" not in out.read_text()


# -- the gate over history rows whose status is unknown ----------------------------------------

def _sign(db, c, node, node_id, blob):
    """Sign an edited row with the controller's key, as a row it wrote itself would be."""
    from stetho.history import integrity

    key = integrity.load(integrity.key_path(db))
    run, t, profile, code, *tally, seq, prev, digest = c.execute(
        "SELECT r.id, nr.time, nr.profile, nr.exit_code, nr.fail, nr.error, nr.warn, nr.skip, "
        "nr.pass, nr.seq, nr.prev, nr.metrics_digest FROM node_runs nr JOIN runs r ON "
        "r.key = nr.run_key WHERE nr.node_id = ?", (node_id,)).fetchone()
    c.execute("UPDATE node_runs SET mac = ? WHERE node_id = ?",
              (integrity.mac(key, node, run, t, profile, code, tuple(tally), blob,
                             (seq, prev, digest)), node_id))


@pytest.mark.parametrize("status", ["GO", "PASS", "", "pass ", ["pass"], None])
def test_an_unknown_status_in_history_is_never_go(tmp_path, status):
    db = tmp_path / "h.db"
    with History(db) as h:
        h.record("r1", "sweep", [
            NodeRun(n, "generic", [Result(n, "gpu_count", "", "pass", "8 GPUs")], [])
            for n in ("n1", "n2")], when=time.time() - 60)
    with sqlite3.connect(db) as c:
        (node_id,) = c.execute("SELECT id FROM nodes WHERE name = 'n2'").fetchone()
        (blob,) = c.execute("SELECT results FROM node_runs WHERE node_id = ?",
                            (node_id,)).fetchone()
        rows = json.loads(zlib.decompress(blob))
        rows[0]["status"] = status
        blob = zlib.compress(json.dumps(rows).encode())
        c.execute("UPDATE node_runs SET results = ? WHERE node_id = ?", (blob, node_id))
        _sign(db, c, "n2", node_id, blob)  # as the controller wrote it: a signed row
    with History(db) as h:
        h.reseal()  # and sealed
    policy = tmp_path / "ops.yml"
    policy.write_text("policy: ops\nchecks: [gpu_count]\nblock_on: [fail]\nfreshness: 6h\n")
    proc = stetho("gate", "--policy", str(policy), "--nodes", "n[1-2]", "--db", str(db),
                  "--no-reports", "--json", str(tmp_path / "g.json"))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 3, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("gate ops: COULD NOT EVALUATE"), last
    assert "1 go" in last, last
    assert "unknown status" in proc.stdout


# -- property style: seeded malformed values through every loader ------------------------------

import random  # noqa: E402
import re  # noqa: E402

from stetho.core import yamlconf  # noqa: E402
from stetho.core.resources import shipped  # noqa: E402
from stetho.errors import ConfigError  # noqa: E402

#: Malformed values as JSON text: Unicode edge cases, non-finite and huge numbers, wrong
#: types, deep nesting, paths.
JSON_BAD = ['"\\ud800"', '"\\udfff x"', '"\\u0000"', '"\\u202e"', '"\\ud83d\\ude00"', '""',
            "NaN", "Infinity", "-Infinity", "1e400", "9" * 5000, "-" + "9" * 40,
            str(2**64), "-1", "true", "null", "[]", "{}", "[" * 3000 + "]" * 3000,
            '"../../../etc/passwd"', '"/etc/shadow"', '"x.yml"', '"a\\nb"', '"GO"']
#: ... and as YAML scalars or structures.
YAML_BAD = ['"\\ud800"', ".nan", ".inf", "-.inf", "9" * 5000, "-" + "9" * 40, "1e400",
            "[" * 100 + "]" * 100, "*nowhere", "~", "[]", "{}", "true", "0x10",
            "'{{ $labels.node }}'", '"a\\nb"', "!!python/object/apply:os.system [id]",
            "!!binary AAAA", "&x [*x]", "'../../etc/passwd'", "-1", "0"]


def _mutations(text: str, values: list[str], pattern: str, rounds: int, seed: int):
    """`text` with one or two values (matches of `pattern`) replaced by malformed ones."""
    rng = random.Random(seed)
    spots = [m.span(1) for m in re.finditer(pattern, text)]
    assert spots
    for _ in range(rounds):
        out = text
        for start, end in sorted(rng.sample(spots, min(len(spots), rng.randint(1, 2))),
                                 reverse=True):
            out = out[:start] + rng.choice(values) + out[end:]
        yield out


def _expect(fn, error: type[BaseException], text: str, outcomes: set[str]) -> None:
    try:
        fn(text)
        outcomes.add("read")
    except error as exc:
        assert str(exc).strip(), type(exc)
        outcomes.add("refused")


@pytest.mark.parametrize("name", ["h100-sxm-8gpu", "generic"])
def test_malformed_profile_values_are_config_errors(tmp_path, name):
    from stetho import profiles

    text = (shipped("baselines") / f"{name}.yml").read_text()
    seen: set[str] = set()
    for i, mutated in enumerate(_mutations(text, YAML_BAD, r":[ \t]+([^\s#\[{][^\n#]*)",
                                           150, seed=28)):
        path = tmp_path / f"p{i}.yml"
        path.write_text(mutated)
        _expect(lambda _t, p=path: profiles.load(str(p)), ConfigError, mutated, seen)
    assert seen == {"read", "refused"}  # the edits were not all harmless, nor all fatal


def test_malformed_policy_values_are_config_errors(tmp_path):
    from stetho.gate import policy

    text = (shipped("gates") / "release.yml").read_text()
    seen: set[str] = set()
    for i, mutated in enumerate(_mutations(text, YAML_BAD, r":[ \t]+([^\s#\[{][^\n#]*)",
                                           150, seed=29)):
        path = tmp_path / f"g{i}.yml"
        path.write_text(mutated)
        _expect(lambda _t, p=path: policy.load(str(p)), ConfigError, mutated, seen)
    assert "refused" in seen


def test_malformed_yaml_structure_is_a_config_error():
    rng = random.Random(30)
    seen: set[str] = set()
    for _ in range(300):
        parts = [rng.choice(YAML_BAD) for _ in range(rng.randint(1, 4))]
        text = "a: " + parts[0] + "".join(f"\nk{i}: {p}" for i, p in enumerate(parts[1:]))
        _expect(lambda t: yamlconf.loads(t, "x.yml"), ConfigError, text, seen)
    assert seen == {"read", "refused"}


def _bundle_text() -> str:
    probe = {"name": "nvidia_smi", "kind": "command", "status": "ok", "argv": ["nvidia-smi"],
             "rc": 0, "stdout": "out", "stderr": "", "duration_s": 0.5, "binary": False,
             "files": {"/sys/x": "1"}, "errors": {}, "reason": ""}
    return json.dumps({"schema": "stetho.evidence", "schema_version": 1, "node": "n1",
                       "collected_at": "2026-01-01T00:00:00+00:00", "stetho_version": "0.1",
                       "profile": "generic", "sysroot": "/", "probes": {"nvidia_smi": probe}})


#: A JSON value after a key: a string, a number, a literal, an empty list or object.
_JSON_VALUE = r':\s*("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|true|false|null|\[\]|\{\})'


def test_malformed_bundles_are_bundle_errors(tmp_path):
    from stetho.evidence import bundle as bundle_mod

    seen: set[str] = set()
    for i, mutated in enumerate(_mutations(_bundle_text(), JSON_BAD, _JSON_VALUE, 300, 31)):
        path = tmp_path / f"b{i}.json"
        path.write_text(mutated, encoding="utf-8", errors="surrogatepass")
        _expect(lambda _t, p=path: bundle_mod.load(p), bundle_mod.BundleError, mutated, seen)
    assert seen == {"read", "refused"}


def test_malformed_outcomes_are_outcome_errors():
    from stetho.fleet import outcome

    rows = [{"node": "n1", "check": "gpu_count", "subject": "", "status": "pass",
             "message": "8 GPUs", "value": 8, "duration_s": 0.1}]
    text = json.dumps({"schema": "stetho.outcome", "schema_version": 1, "node": "n1",
                       "exit_code": 0, "results": {"results": rows}, "junit": "",
                       "summary": {"node": "n1", "profile": "generic", "versions": {},
                                   "busbw": {"8": 1.5}, "metrics": [["a", "b", "c", 1, ""]],
                                   "collected_at": "x"}}, separators=(",", ":"))
    seen: set[str] = set()
    for mutated in _mutations(text, JSON_BAD, _JSON_VALUE, 300, 32):
        def parse(t: str) -> None:
            out = outcome.parse(t, host="n1")
            for r in out.results:  # what is kept is known and about this node
                assert r.status in ("pass", "warn", "fail", "error", "skip") and r.node == "n1"
        _expect(parse, outcome.OutcomeError, mutated, seen)
    assert seen == {"read", "refused"}


def test_malformed_inventory_values_are_config_errors(tmp_path):
    from stetho.fleet import hostvars

    rng = random.Random(33)
    inv = tmp_path / "inventory.yml"
    inv.write_text("all:\n  hosts:\n    n1:\n      stetho_timeout: x\n")
    values = [float("nan"), float("inf"), -float("inf"), 10**5000, -10**30, 2**64, -1, 0,
              True, None, [], {}, "abc", "\ud800", "a\nb", "\x00", "600", 600.0, 600.5, 5]
    seen: set[str] = set()
    for _ in range(200):
        var = rng.choice(["stetho_timeout", "stetho_deadline", "stetho_venv", "stetho_profile"])
        hv = {"n1": {var: rng.choice(values)}}
        _expect(lambda _t, h=hv: hostvars.validate(inv, h, ["n1"]), ConfigError, "", seen)
    assert seen == {"read", "refused"}
