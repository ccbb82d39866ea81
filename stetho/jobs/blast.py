"""The blast radius of a part: the running jobs on its nodes, whose they are, and how many
GPUs a fault (or a drain) there takes from them; and switch incidents, several nodes under one
leaf failing together, told as the one switch they share.

Pure but for `drain_radius`, which asks squeue: the jobs come from
`stetho.jobs.squeue.running`, the nodes from `stetho.jobs.parts.resolve`. A GPU count Slurm
does not give comes from the node profile, else it is unknown and said so: a total over an
unknown count is never a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from stetho.core.hostlist import compress
from stetho.jobs.parts import Part
from stetho.jobs.squeue import Job
from stetho.localize.topology import Topology


@dataclass(frozen=True)
class JobImpact:
    """One job and the nodes of the part it runs on. `gpus` is the GPUs it has on those nodes
    (None: unknown), `gpu_source` where that count came from (slurm, profile, unknown)."""

    job: Job
    affected: tuple[str, ...]
    gpus: int | None
    gpu_source: str

    def phrase(self) -> str:
        """'job 1234 (alice, gpu, 64 nodes)'"""
        j = self.job
        n = len(j.nodes)
        return f"job {j.job_id} ({j.user}, {j.partition}, {n} node{'s' * (n != 1)})"

    def to_json(self) -> dict[str, object]:
        return {**self.job.to_json(), "affected_nodes": len(self.affected),
                "affected": compress(list(self.affected)), "gpus_affected": self.gpus,
                "gpu_source": self.gpu_source}


@dataclass(frozen=True)
class Impact:
    part: Part
    jobs: tuple[JobImpact, ...]

    @property
    def gpus(self) -> int | None:
        counts = [j.gpus for j in self.jobs]
        return None if any(c is None for c in counts) else sum(c or 0 for c in counts)

    @property
    def idle(self) -> list[str]:
        busy = {n for j in self.jobs for n in j.affected}
        return [n for n in self.part.nodes if n not in busy]

    def to_json(self) -> dict[str, object]:
        return {"part": self.part.spec, "kind": self.part.kind,
                "nodes": list(self.part.nodes), "note": self.part.note or None,
                "jobs": [j.to_json() for j in self.jobs], "running_jobs": len(self.jobs),
                "users": sorted({j.job.user for j in self.jobs}),
                "gpus_affected": self.gpus, "nodes_without_jobs": self.idle}


def radius(nodes: Iterable[str], jobs: Sequence[Job], node_gpus: Mapping[str, int]
           ) -> tuple[JobImpact, ...]:
    """The jobs running on any of `nodes`, each with the nodes it has there and their GPUs:
    Slurm's count per node, else `node_gpus` (the nodes' profiles), else unknown."""
    wanted = set(nodes)
    out = []
    for job in jobs:
        hit = tuple(n for n in job.nodes if n in wanted)
        if not hit:
            continue
        if job.gpus_per_node is not None:
            out.append(JobImpact(job, hit, job.gpus_per_node * len(hit), "slurm"))
        elif all(n in node_gpus for n in hit):
            out.append(JobImpact(job, hit, sum(node_gpus[n] for n in hit), "profile"))
        else:
            out.append(JobImpact(job, hit, None, "unknown"))
    return tuple(out)


def of(part: Part, jobs: Sequence[Job], node_gpus: Mapping[str, int]) -> Impact:
    return Impact(part, radius(part.nodes, jobs, node_gpus))


def render(impact: Impact) -> str:
    """`stetho impact`'s text: the part, a line per job, the totals."""
    p = impact.part
    lines = [f"{p.describe()}: {compress(list(p.nodes))}"]
    if p.note:
        lines.append(f"note: {p.note}")
    if not impact.jobs:
        lines.append(f"no running jobs on {compress(list(p.nodes))}")
        return "\n".join(lines) + "\n"
    lines.append(f"{'JOB':<12} {'USER':<12} {'PARTITION':<12} {'NODES':>6} {'AFFECTED':>8} "
                 f"{'GPUS':>7}  NAME")
    for j in impact.jobs:
        gpus = str(j.gpus) if j.gpus is not None else "unknown"
        lines.append(f"{j.job.job_id:<12} {j.job.user:<12} {j.job.partition:<12} "
                     f"{len(j.job.nodes):>6} {len(j.affected):>8} {gpus:>7}  {j.job.name}")
    users = sorted({j.job.user for j in impact.jobs})
    total = impact.gpus
    gpus = f"{total} GPUs" if total is not None else (
        "GPUs affected: unknown (no GPU count from Slurm or --profile for "
        + ", ".join(f"job {j.job.job_id}" for j in impact.jobs if j.gpus is None) + ")")
    lines.append(f"total: {len(impact.jobs)} running job{'s' * (len(impact.jobs) != 1)} of "
                 f"{len(users)} user{'s' * (len(users) != 1)} ({', '.join(users)}), {gpus}")
    if impact.idle:
        lines.append(f"without jobs: {compress(impact.idle)}")
    return "\n".join(lines) + "\n"


def drain_phrases(nodes: Iterable[str], jobs: Sequence[Job]) -> dict[str, str]:
    """node -> 'draining gpu042 affects job 1234 (alice, gpu, 64 nodes)', one per node; a node
    with no running job says that."""
    out = {}
    for n in nodes:
        hit = radius([n], jobs, {})
        out[n] = (f"draining {n} affects " + ", ".join(j.phrase() for j in hit) if hit
                  else f"draining {n} affects no running job")
    return out


@dataclass(frozen=True)
class SwitchIncident:
    """Several nodes under one leaf failing in one run: the switch is the first suspect."""

    switch: str
    failing: tuple[str, ...]
    members: tuple[str, ...]  # the leaf's nodes this run evaluated
    leaf_size: int  # every node under the leaf

    def line(self, checks: Mapping[str, Iterable[str]]) -> str:
        names = sorted({c for n in self.failing for c in checks.get(n, ())})
        return (f"SWITCH {self.switch}: {len(self.failing)} of {self.leaf_size} nodes failing "
                f"together: {compress(list(self.failing))}"
                + (f" ({', '.join(names)})" if names else "")
                + "; suspect the switch or its uplink before the nodes")

    def to_json(self) -> dict[str, object]:
        return {"switch": self.switch, "failing": list(self.failing),
                "evaluated": list(self.members), "leaf_size": self.leaf_size}


def switch_incidents(topo: Topology, failing: Iterable[str], evaluated: Iterable[str]
                     ) -> list[SwitchIncident]:
    """A leaf is an incident when at least two of its nodes fail and they are at least half of
    its nodes this run evaluated: one node is a node's fault, and two bad nodes among forty
    are more likely two faults than one switch."""
    placed = set(topo.nodes)
    bad = {n for n in failing if n in placed}
    seen = [n for n in evaluated if n in placed]
    out = []
    for leaf, members in topo.leaves(seen).items():
        down = tuple(n for n in members if n in bad)
        if len(down) >= 2 and 2 * len(down) >= len(members):
            out.append(SwitchIncident(leaf, down, tuple(members),
                                      len(topo.leaf_members(leaf))))
    return out


def drain_radius(nodes: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """`drain_phrases` over the jobs squeue reports now; squeue unable to answer says that for
    each node (the radius is unknown, never "no running job")."""
    from stetho.jobs.squeue import SqueueError, running

    try:
        jobs = running(env)
    except SqueueError as exc:
        return {n: f"blast radius of draining {n} could not be evaluated: {exc}"
                for n in nodes}
    return drain_phrases(nodes, jobs)


def at_gate(drains: Sequence[str], blocked: Iterable[str], evaluated: Iterable[str],
            topo: Topology | None, env: Mapping[str, str]
            ) -> tuple[dict[str, str], list[SwitchIncident]]:
    """The gate's two views: each drain's blast radius (squeue asked only when it drains),
    and, given a topology, its switch incidents."""
    return (drain_radius(drains, env) if drains else {},
            switch_incidents(topo, blocked, evaluated) if topo is not None else [])
