"""The diagnoses a remedy run starts from: a run folder (`stetho sweep`'s runs/<id>/, or any
folder with results.json and hosts/<node>/evidence.json), its failing and warning nodes
diagnosed afresh with the shipped and site rules, each with its node's facts (the GPU's UUID,
the HCA's GUID and cable come from them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stetho.diagnosis import engine, runs
from stetho.diagnosis.model import Diagnosis
from stetho.diagnosis.rules import Rule
from stetho.errors import ConfigError
from stetho.history.store import History


def diagnose_run(folder: Path, rules: list[Rule], nodes: list[str] | None = None,
                 history: History | None = None
                 ) -> list[tuple[Diagnosis, Any, float | None]]:
    """(diagnosis, the node's facts or None, when its evidence was collected or None) per
    failing or warning node."""
    from stetho.sinks.json_out import load

    results_file = folder / "results.json"
    if not results_file.is_file():
        raise ConfigError(f"{folder} is not a run folder (no results.json): run folders come "
                          "from `stetho sweep`, or `stetho check --json RUN/results.json "
                          "--evidence-out RUN/hosts/NODE/evidence.json`")
    results = load(results_file.read_text())
    meta = json.loads((folder / "meta.json").read_text()) \
        if (folder / "meta.json").is_file() else {}
    run = str(meta.get("run_id", folder.name))
    wanted = nodes if nodes else sorted(set(runs.failing_nodes(results))
                                        | set(runs.warning_nodes(results)))
    out = []
    for ctx in runs.contexts(folder, results, wanted, history):
        d = engine.diagnose(ctx, run=run, rules=rules)
        out.append((d, ctx.facts, seen_at(ctx.facts, run)))
    return out


def seen_at(facts: Any, run: str) -> float | None:
    """When the node's evidence was collected: its bundle's stamp, else the run id's time."""
    from datetime import datetime

    stamp = getattr(getattr(facts, "bundle", None), "collected_at", "")
    try:
        if stamp:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    t = engine.run_time(run, -1.0)
    return None if t < 0 else t
