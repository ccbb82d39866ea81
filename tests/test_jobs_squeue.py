"""The squeue parser (stetho.jobs.squeue) on a real output of the multi-node test cluster,
with GPU counts in each form Slurm writes them, and on garbage."""

from __future__ import annotations

import random
import string

import pytest

from stetho.jobs import squeue
from stetho.jobs.squeue import SqueueError
from tests.conftest import REPO

RECORDED = REPO / "fixtures" / "recorded" / "squeue-slurm22-testbed"
TEXT = (RECORDED / "squeue-running.txt").read_text()
US = "\x1f"


def test_the_recorded_output_reads_as_the_two_jobs_submitted() -> None:
    """The fixture's README says what ran: job 1 on n[01-02] named 'train|big run', job 2
    on n03 named 'eval', both root's in partition gpu, no GPU GRES."""
    jobs = squeue.parse(TEXT)
    assert [(j.job_id, j.user, j.partition, j.state, j.nodes, j.name) for j in jobs] == [
        ("1", "root", "gpu", "RUNNING", ("n01", "n02"), "train|big run"),
        ("2", "root", "gpu", "RUNNING", ("n03",), "eval")]
    assert [j.gpus_per_node for j in jobs] == [None, None]  # unknown, never 0


def test_the_command_asks_for_the_fields_the_parser_reads() -> None:
    cmd = squeue.argv("/usr/bin/squeue")
    assert cmd[0] == "/usr/bin/squeue" and "--noheader" in cmd
    fmt = next(a for a in cmd if a.startswith("--Format="))
    assert fmt.count(US) == len(squeue.FIELDS) - 1 and fmt.rstrip().endswith("Name:0")


def _line(per_node: str = "N/A", alloc: str = "cpu=2,node=2,billing=2", nodes: str = "n[01-02]",
          count: str = "2", name: str = "job") -> str:
    return US.join(["7", "alice", "gpu", "RUNNING", count, nodes, per_node, alloc, name])


@pytest.mark.parametrize("per_node, alloc, expected", [
    ("gres:gpu:8", "cpu=2,node=2", 8),                    # --gres=gpu:8 (Slurm < 23)
    ("gres/gpu:4", "cpu=2,node=2", 4),                    # --gpus-per-node=4
    ("gres/gpu:h100:2", "cpu=2,node=2", 2),               # a typed request
    ("N/A", "cpu=2,node=2,billing=2,gres/gpu=16", 8),     # --gpus=16 over 2 nodes
    ("N/A", "cpu=2,node=2,gres/gpu=3,gres/gpu:h100=3", None),  # uneven: unknown
    ("N/A", "cpu=2,mem=4G,node=2,billing=2", None),       # no GPU GRES at all
    ("gres:nic:1", "cpu=2,node=2,gres/gpumem=80G", None),  # not GPUs
])
def test_gpus_per_node(per_node: str, alloc: str, expected: int | None) -> None:
    (job,) = squeue.parse(_line(per_node, alloc) + "\n")
    assert job.gpus_per_node == expected


def test_a_name_with_separators_stays_the_name() -> None:
    (job,) = squeue.parse(_line(name=f"a{US}b c") + "\n")
    assert job.name == f"a{US}b c" and job.nodes == ("n01", "n02")


def test_no_running_job_is_an_empty_list() -> None:
    assert squeue.parse("") == [] and squeue.parse("\n\n") == []


@pytest.mark.parametrize("text, says", [
    (TEXT[: TEXT.index(US, 20)], "fields"),                       # truncated mid-line
    ("JOBID PARTITION NAME USER ST TIME NODES NODELIST\n", "fields"),  # squeue's default
    ("NODELIST   NODES PARTITION STATE\nn[01-16]  16 gpu* idle\n", "fields"),  # sinfo
    ("\x00\x01\x02binary", "binary"),
    (_line(count="3"), "names 2 nodes"),
    (_line(count="0"), "positive"),
    (_line(nodes="n[01-"), "does not expand"),
    (_line(nodes="n;rm -rf"), "does not expand"),
    (_line().replace("RUNNING", "running"), "state"),
    (_line().replace("7", "seven", 1), "job id"),
    (_line().replace("alice", ""), "empty user"),
])
def test_garbage_is_a_named_error(text: str, says: str) -> None:
    with pytest.raises(SqueueError, match="squeue") as info:
        squeue.parse(text)
    assert says in str(info.value)
    assert info.value.exit_code == 3  # the jobs are unknown: could not evaluate


def test_random_edits_of_the_real_output_parse_or_fail_by_name() -> None:
    """Seeded edits of the recording: each either parses or is a SqueueError, and both
    happen (the edits were not all harmless)."""
    rng = random.Random(29)
    seen = set()
    for _ in range(300):
        chars = list(TEXT)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(chars))
            if rng.random() < 0.5:
                chars[pos] = rng.choice(string.printable + US)
            else:
                del chars[pos]
        try:
            squeue.parse("".join(chars))
            seen.add("parsed")
        except SqueueError:
            seen.add("error")
    assert seen == {"parsed", "error"}


def test_squeue_missing_is_could_not_evaluate(tmp_path) -> None:
    with pytest.raises(SqueueError, match="not found on PATH"):
        squeue.running({"PATH": str(tmp_path)})
