"""`stetho gate --policy release --canaries ... --controls ...`: hold the nodes, run the same
benchmarks on both groups in the same window, repeat, and judge canaries against controls.

Each repeat runs one round of single-node all-reduce on every node at once, then one round of
cross-leaf pairs (canary pairs and control pairs at once), through localize's runners
(`srun --reservation=...`, or `mpirun`), so both sides see the same fabric at the same time.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stetho.core import hostlist
from stetho.errors import ConfigError
from stetho.gate.release import compare as cmp
from stetho.gate.release import opinion, plan, reservation, settings
from stetho.localize import runners
from stetho.localize.model import Measurement
from stetho.results import Result

Group = tuple[str, ...]


@dataclass(frozen=True)
class ReleaseRequest:
    policy: str
    canaries: str
    controls: str
    inventory: Path | None = None
    topology: str = "slurm"
    runner: str = "srun"
    command: str = runners.DEFAULT_NCCL
    gpus_per_node: int = 8
    repeats: int = 3
    minutes: int = 60
    stage: str | None = None
    profile: str | None = None


@dataclass
class Bench:
    """One benchmark's groups on both sides, filled repeat by repeat."""

    name: str
    nodes: int
    canaries: list[Group]
    controls: list[Group]
    runs: dict[Group, list[Measurement]] = field(default_factory=dict)


@dataclass
class ReleaseOutcome:
    policy: str
    canaries: list[str]
    controls: list[str]
    reservation: str | None
    comparisons: list[cmp.Comparison]
    opinions: list[str]
    verdict: str
    stage: str | None = None
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # reservation left behind, ...

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "fail": 1}.get(self.verdict, 3)

    def lines(self) -> list[str]:
        out = [f"release gate ({self.policy}): canaries {hostlist.compress(self.canaries)} vs "
               f"controls {hostlist.compress(self.controls)}"
               + (f", reservation {self.reservation}" if self.reservation else "")]
        out += self.notes
        for c, op in zip(self.comparisons, self.opinions, strict=False):
            out.append(f"{c.benchmark}: {c.verdict.upper()}: {c.reasons[0]}  [{op}]")
            out += [f"  {r}" for r in c.reasons[1:]]
        if self.stage:
            out.append(self.stage)
        return out

    def summary(self) -> str:
        word = {"pass": "GO", "fail": "BLOCKED"}.get(self.verdict, "COULD NOT EVALUATE")
        bad = [c.benchmark for c in self.comparisons if c.verdict != "pass"]
        return f"{word}: release gate, canaries against controls" + \
            (f" ({', '.join(bad)})" if bad and self.verdict != "pass" else "")

    def results(self) -> list[Result]:
        """One result per benchmark, on the canaries, for JUnit and the like: unknown is an
        error, never a pass."""
        status = {"pass": "pass", "fail": "fail"}
        return [Result("canaries", "release_canary", c.benchmark, status.get(c.verdict, "error"),
                       "; ".join((*c.reasons, op)), value=c.canary_gbps, unit="GB/s",
                       reference=c.control_gbps)
                for c, op in zip(self.comparisons, self.opinions, strict=False)]

    def to_json(self, job: str | None = None) -> dict[str, object]:
        return {"job": job, "policy": self.policy, "verdict": self.verdict,
                "exit_code": self.exit_code,
                "canaries": self.canaries, "controls": self.controls,
                "reservation": self.reservation, "stage": self.stage, "notes": self.notes,
                "comparisons": [dict(c.to_json(), baseline=op) for c, op in
                                zip(self.comparisons, self.opinions, strict=False)],
                "problems": self.problems}


def run(req: ReleaseRequest, progress: Callable[[str], None] = lambda s: None,
        slurm: reservation.Slurm | None = None) -> ReleaseOutcome:
    from stetho import profiles
    from stetho.gate import policy as policy_mod
    from stetho.localize import setup

    pol = policy_mod.load(req.policy)
    rel = settings.load(Path(pol.source))
    judged = settings.find_stage(rel.stages, req.stage, pol.name) if req.stage else None
    canaries, controls = _nodes(req.canaries, "--canaries"), _nodes(req.controls, "--controls")
    both = set(canaries) & set(controls)
    if both:
        raise ConfigError(f"{hostlist.compress(sorted(both))}: in both --canaries and "
                          "--controls; a node is one or the other")
    if len(canaries) < 2:
        raise ConfigError(f"--canaries {req.canaries}: give at least 2 canary nodes, so that "
                          "a multi-node pair of canaries runs")
    if req.runner not in ("srun", "mpirun"):
        raise ConfigError(f"--runner {req.runner}: the release gate runs srun or mpirun")
    profile = profiles.load(req.profile) if req.profile else None
    fl = setup.fleet(req.inventory, hostlist.compress(canaries + controls))
    topo = setup.build_topology(req.topology, setup.Fleet(canaries + controls, fl.groups,
                                                          fl.hostvars))
    out = ReleaseOutcome(pol.name, canaries, controls, None, [], [], "unknown")
    single = Bench("single-node all_reduce", 1, [(n,) for n in canaries],
                   [(n,) for n in controls])
    can_pairs, spans = plan.cross_leaf_pairs(canaries, topo)
    ctl_pairs, ctl_spans = plan.cross_leaf_pairs(controls, topo)
    multi = Bench("multi-node all_reduce across leaves" if spans and ctl_spans else
                  "multi-node all_reduce (some pairs within one leaf)", 2, list(can_pairs),
                  list(ctl_pairs))
    if not (spans and ctl_spans):
        out.notes.append("note: canaries or controls sit under one leaf switch; their pairs "
                         "do not cross a leaf uplink")
    if len(controls) < rel.canary.min_controls:
        out.comparisons = [cmp.Comparison(b.name, "unknown", (
            f"{len(controls)} control node(s), the policy needs at least "
            f"{rel.canary.min_controls}",)) for b in (single, multi)]
        out.opinions = ["baseline: not consulted"] * 2
        return _finish(out, rel, judged)
    name = f"stetho-release-{time.strftime('%Y%m%d%H%M%S', time.gmtime())}-" \
           f"{secrets.token_hex(3)}"
    sl = slurm or reservation.Slurm()
    removed: list[str | None] = []
    with reservation.held(sl, name, canaries + controls, req.minutes, removed.append):
        out.reservation = name
        progress(f"reservation {name} holds {hostlist.compress(canaries + controls)}")
        runner = _runner(req, name)
        for r in range(req.repeats):
            for b in (single, multi):
                groups = b.canaries + b.controls
                if groups:
                    progress(f"repeat {r + 1}/{req.repeats}: {b.name}, {len(groups)} groups")
                    for g, m in zip(groups, runner.run(groups), strict=True):
                        b.runs.setdefault(g, []).append(m)
    if removed and removed[0] is not None:
        out.problems.append(f"reservation {name} could not be removed: {removed[0]} (remove "
                            f"it: scontrol delete ReservationName={name})")
    for b in (single, multi):
        c, op = _judge(b, rel.canary, profile, req.gpus_per_node)
        out.comparisons.append(c)
        out.opinions.append(op)
    return _finish(out, rel, judged)


def _nodes(expr: str, flag: str) -> list[str]:
    try:
        nodes = hostlist.expand(expr)
    except ValueError as exc:
        raise ConfigError(f"{flag} {expr!r}: {exc}") from None
    if not nodes:
        raise ConfigError(f"{flag}: give a Slurm hostlist, e.g. 'gpu[001-004]'")
    return nodes


def _runner(req: ReleaseRequest, reservation_name: str) -> runners.Runner:
    if req.runner == "srun":
        return runners.SrunRunner(1.0, req.command, req.gpus_per_node,
                                  extra=(f"--reservation={reservation_name}",))
    return runners.MpirunRunner(1.0, req.command, req.gpus_per_node)


def _group_run(g: Group, ms: Sequence[Measurement]) -> tuple[cmp.GroupRun, dict[str, object]]:
    """A group's repeats -> values, errors and tool failures; plus what its output says of
    NCCL (version, the size measured, the shape) for the baseline's opinion."""
    from stetho.benchmarks.verdict import judge_text
    from stetho.parsers import ParseError, nccl_tests

    values: list[float] = []
    errors: list[str] = []
    failed: list[str] = []
    seen: dict[str, object] = {}
    for m in ms:
        if m.error:
            errors.append(m.error.splitlines()[0][:200] if m.error.strip() else "no output")
            continue
        if m.failed or m.value is None:
            v = judge_text("nccl_tests", m.raw)
            (failed if v is not None and v.status == "fail" else errors).append(
                v.summary if v else "nccl-tests gave no busbw")
            continue
        values.append(m.value)
        if not seen:
            try:
                parsed = nccl_tests.parse(m.raw)
            except ParseError:
                continue
            top = parsed.largest
            seen = {"nccl": parsed.nccl_version, "size": top.size_bytes if top else None,
                    "shape": parsed.shape}
    return cmp.GroupRun(g, tuple(values), tuple(errors), tuple(failed)), seen


def _judge(b: Bench, rules: settings.CanaryRules, profile: object,
           gpus_per_node: int) -> tuple[cmp.Comparison, str]:
    can = [_group_run(g, b.runs.get(g, [])) for g in b.canaries]
    ctl = [_group_run(g, b.runs.get(g, [])) for g in b.controls]
    min_groups = max(1, rules.min_controls // b.nodes)
    c = cmp.compare(b.name, [r for r, _ in can], [r for r, _ in ctl], rules, min_groups)
    seen = next((s for _, s in can if s), {})
    shape = seen.get("shape")
    op = opinion.opinion(profile, b.nodes,  # type: ignore[arg-type]
                         getattr(shape, "gpus_per_node", None) or gpus_per_node,
                         getattr(shape, "ranks", None),
                         seen.get("size"), c.canary_gbps,  # type: ignore[arg-type]
                         seen.get("nccl"))  # type: ignore[arg-type]
    return c, op


def _finish(out: ReleaseOutcome, rel: settings.ReleaseSettings,
            judged: int | None) -> ReleaseOutcome:
    out.verdict = cmp.overall(out.comparisons)
    if judged is not None:
        out.stage = settings.stage_line(rel.stages, judged, out.verdict)
    return out
