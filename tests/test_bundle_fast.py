"""Reading a bundle fast gives what reading it the slow way gave: every probe of real
collected bundles (simulated nodes replaying real recorded outputs, a garbled and a hung tool
among them) builds the same ProbeRecord as the dataclass's own __init__, and the depth guard's
shortcut answers as walking every container does, for bundles and for anything else."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from stetho.evidence import bundle as bundle_mod
from stetho.evidence.bundle import ProbeRecord

NODES = {"healthy": [], "garbage": ["garbage=nvidia-smi"], "hang": ["hang=lspci"],
         "badxml": ["corrupt-xml"]}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from stetho import profiles
    from stetho.evidence import collect
    from stetho.sim.builder import build_node

    root = tmp_path_factory.mktemp("fastbundles")
    prof = profiles.load("h100-sxm-8gpu")
    out = []
    for name, faults in NODES.items():
        node = build_node(root / "sim" / name, name, faults)
        env, host = collect.sim_environment(str(node))
        path = root / f"{name}.json"
        collect.collect(prof, replace(env, timeout_cap=1.0), host).save(path)
        out.append(path)
    return out


def _slow(d: dict) -> ProbeRecord:
    """A probe built by the dataclass's generated __init__, as before the fast path."""
    return ProbeRecord(
        name=d["name"], kind=d["kind"], status=d["status"], argv=tuple(d.get("argv", ())),
        rc=d.get("rc"), stdout=d.get("stdout", ""), stderr=d.get("stderr", ""),
        duration_s=float(d.get("duration_s", 0.0)), binary=bool(d.get("binary", False)),
        files=dict(d.get("files", {})), errors=dict(d.get("errors", {})),
        reason=d.get("reason", ""))


def test_every_real_probe_reads_as_the_dataclass_builds_it(bundles: list[Path]) -> None:
    statuses = set()
    for path in bundles:
        doc = json.loads(path.read_text())
        for raw in doc["probes"].values():
            fast, slow = ProbeRecord.from_json(raw), _slow(raw)
            assert fast == slow and hash(repr(fast)) == hash(repr(slow))
            for f in fields(ProbeRecord):
                a, b = getattr(fast, f.name), getattr(slow, f.name)
                assert a == b and type(a) is type(b), (path.name, raw["name"], f.name)
            assert list(vars(fast)) == [f.name for f in fields(ProbeRecord)]
            assert fast.to_json() == slow.to_json()
            with pytest.raises(AttributeError):
                fast.stdout = "x"  # type: ignore[misc]  # still frozen
            statuses.add(fast.status)
        loaded = bundle_mod.load(path)
        assert loaded.to_json() == bundle_mod.Bundle.from_json(doc).to_json()
        assert loaded.to_json()["probes"] == {k: _slow(v).to_json()
                                              for k, v in doc["probes"].items()}
    assert {"ok", "timeout"} <= statuses  # the hung lspci: a probe that did not finish


def _nest(depth: int) -> object:
    value: object = "leaf"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_the_depth_shortcut_answers_as_the_walk(bundles: list[Path]) -> None:
    docs: list[object] = [json.loads(p.read_text()) for p in bundles]
    base = docs[0]
    assert isinstance(base, dict)
    probe = next(iter(base["probes"]))
    for depth in (0, 1, 2, 3, 5, 28, 29, 30, 31, 32, 40):
        docs.append({**base, "extra": _nest(depth)})  # unknown members are walked too
        docs.append({**base, "probes": {**base["probes"], "x": _nest(depth)}})
        docs.append({**base, "probes": {**base["probes"],
                                        probe: {**base["probes"][probe], "y": _nest(depth)}}})
        docs.append(_nest(depth))
    docs += [[], {}, "text", 3, None, [base], {"probes": [1, 2]}, {"probes": {"p": [1, [2]]}}]
    shaped = 0
    for doc in docs:
        for limit in (1, 3, 4, 5, 6, 32):
            assert bundle_mod._too_deep(doc, limit) == bundle_mod._walk_too_deep(doc, limit)
        if bundle_mod._bundle_shaped(doc):
            shaped += 1
            assert not bundle_mod._walk_too_deep(doc, bundle_mod._BUNDLE_DEPTH)
    assert shaped >= len(bundles)  # the real bundles take the shortcut


def test_a_deep_member_still_refuses_the_bundle(bundles: list[Path], tmp_path: Path) -> None:
    doc = json.loads(bundles[0].read_text())
    name = next(iter(doc["probes"]))
    doc["probes"][name]["files"] = {"a": _nest(40)}
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(bundle_mod.BundleError, match="nested deeper than 32 levels"):
        bundle_mod.load(path)
