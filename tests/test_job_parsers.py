"""The job parsers on outputs recorded from the multi-node testbed
(fixtures/recorded/slurm-jobs-testbed/), on garbage, and the step-time and NCCL-log readers on
the real NCCL debug log."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import pytest

from stetho.errors import ConfigError, EvaluationError, StethoError
from stetho.jobs import sacct, stragglers
from tests.conftest import REPO

REC = REPO / "fixtures" / "recorded" / "slurm-jobs-testbed"
NCCL_LOG = (REPO / "fixtures" / "real" / "03-nccl" /
            "nccl-debug-info-net-socket-1node-2xA100-80GB.log")
GARBAGE = ["", "\n\n", "\x00\xff\xfe binary", "JobId=", "NodeName=n01 State=IDLE",
           "slurm_load_jobs error: Invalid job id specified"]


def _out(stem: str) -> tuple[int, str, str]:
    return (int((REC / f"{stem}.rc").read_text()), (REC / f"{stem}.stdout").read_text(),
            (REC / f"{stem}.stderr").read_text())


def _t(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_every_recording_has_its_three_parts() -> None:
    stems = {p.name.rsplit(".", 1)[0] for p in REC.glob("*.rc")}
    assert len(stems) >= 7
    for stem in stems:
        assert (REC / f"{stem}.stdout").exists() and (REC / f"{stem}.stderr").exists()


def test_a_running_job_from_scontrol_has_no_end_yet() -> None:
    rc, out, _ = _out("scontrol-show-job-running")
    job = sacct.parse_scontrol_job(out, "1")
    assert rc == 0
    assert (job.id, job.name, job.user, job.partition, job.state) == (
        "1", "train-llm", "root", "gpu", "RUNNING")
    assert job.nodes == ("n01", "n02")
    assert job.start == _t("2026-12-06T18:15:34") and job.end is None
    assert job.gpus is None  # TRES=cpu=2,node=2,billing=2: no GPUs on the testbed
    assert job.source == "scontrol"


@pytest.mark.parametrize("stem,state,job_id,nodes", [
    ("scontrol-show-job-cancelled", "CANCELLED", "1", ("n01", "n02")),
    ("scontrol-show-job-completed", "COMPLETED", "2", ("n01",)),
])
def test_a_finished_job_has_its_end(stem: str, state: str, job_id: str,
                                    nodes: tuple[str, ...]) -> None:
    _, out, _ = _out(stem)
    job = sacct.parse_scontrol_job(out, job_id)
    end = out.split(" EndTime=", 1)[1].split()[0]
    assert job.state == state and job.nodes == nodes and job.end == _t(end)


def test_a_running_jobs_projected_end_is_not_its_end() -> None:
    """With a time limit, scontrol prints the limit's projection as EndTime while it runs."""
    _, out, _ = _out("scontrol-show-job-running")
    line = out.replace("EndTime=Unknown", "EndTime=2026-12-07T18:15:34")
    assert sacct.parse_scontrol_job(line, "1").end is None


def test_the_scontrol_parser_reads_gpus_and_user_from_tres() -> None:
    _, out, _ = _out("scontrol-show-job-running")
    line = (out.replace("UserId=root(0)", "UserId=alice(1000)")
            .replace("TRES=cpu=2,node=2,billing=2", "TRES=cpu=2,node=2,billing=2,gres/gpu=16"))
    job = sacct.parse_scontrol_job(line, "1")
    assert job.user == "alice" and job.gpus == 16


def test_sacct_lines_in_the_documented_parsable_format() -> None:
    """Not recorded (the testbed has no accounting): the `-P` format sacct documents."""
    text = ("1234|train|alice|gpu|RUNNING|2026-12-06T02:00:00|Unknown|gpu[001-004]|"
            "billing=32,cpu=32,gres/gpu=32,mem=1T,node=4\n")
    job = sacct.parse_sacct(text, "1234")
    assert job is not None
    assert job.nodes == ("gpu001", "gpu002", "gpu003", "gpu004") and job.gpus == 32
    assert job.start == _t("2026-12-06T02:00:00") and job.end is None
    assert job.user == "alice" and job.source == "sacct"
    done = sacct.parse_sacct(text.replace("RUNNING", "CANCELLED by 1000").replace(
        "Unknown", "2026-12-06T06:00:00"), "1234")
    assert done is not None and done.state == "CANCELLED" and done.end == _t(
        "2026-12-06T06:00:00")
    assert sacct.parse_sacct("", "1234") is None


@pytest.mark.parametrize("text", ["1|2|3\n", "1234|a|b|c|RUNNING|yesterday|Unknown|n1|\n",
                                  "1234|a|b|c|RUNNING|2026-12-06T02:00:00|Unknown|n[1-|\n"])
def test_malformed_sacct_is_a_named_parse_error(text: str) -> None:
    with pytest.raises(sacct.JobParseError, match="sacct -j 1234"):
        sacct.parse_sacct(text, "1234")


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_is_a_named_parse_error_not_a_job(text: str) -> None:
    with pytest.raises(sacct.JobParseError, match="scontrol show job 7"):
        sacct.parse_scontrol_job(text, "7")


def test_a_record_of_another_job_is_not_this_job() -> None:
    _, out, _ = _out("scontrol-show-job-completed")  # job 2
    with pytest.raises(sacct.JobParseError, match="no JobId=1 record"):
        sacct.parse_scontrol_job(out, "1")


def test_recorded_errors_are_recognised() -> None:
    assert sacct.accounting_off(_out("sacct-running")[2])
    assert sacct.accounting_off(_out("sacct-invalid")[2])
    assert sacct.invalid_job(_out("scontrol-show-job-invalid")[2])
    assert not sacct.invalid_job(_out("scontrol-show-job-unreachable")[2])


class _Replay:
    """Answers each command with a recorded output of the testbed: stem by command."""

    def __init__(self, stems: Mapping[str, str]) -> None:
        self.stems = stems
        self.asked: list[list[str]] = []

    def __call__(self, argv: list[str], env: Mapping[str, str]) -> tuple[int, str, str]:
        self.asked.append(argv)
        assert env["SLURM_TIME_FORMAT"] == "standard"
        return _out(self.stems[argv[0]])


def test_lookup_falls_back_to_scontrol_when_accounting_is_off() -> None:
    run = _Replay({"sacct": "sacct-running", "scontrol": "scontrol-show-job-running"})
    job = sacct.lookup("1", {}, run)
    assert [a[0] for a in run.asked] == ["sacct", "scontrol"]
    assert job.nodes == ("n01", "n02") and job.source == "scontrol"


def test_lookup_of_an_unknown_id_is_a_usage_error_naming_it() -> None:
    run = _Replay({"sacct": "sacct-invalid", "scontrol": "scontrol-show-job-invalid"})
    with pytest.raises(sacct.UnknownJob, match="job 999999: Slurm knows no such job") as e:
        sacct.lookup("999999", {}, run)
    assert e.value.exit_code == 2
    assert "accounting storage is disabled" in str(e.value)


def test_lookup_with_the_controller_down_cannot_evaluate() -> None:
    run = _Replay({"sacct": "sacct-running", "scontrol": "scontrol-show-job-unreachable"})
    with pytest.raises(sacct.SlurmJobError, match="Unable to contact slurm controller") as e:
        sacct.lookup("1", {}, run)
    assert e.value.exit_code == 3


@pytest.mark.parametrize("bad", ["", "12a", "1;reboot", "-1", "1 2", "$(id)"])
def test_a_malformed_job_id_is_refused_before_any_command(bad: str) -> None:
    run = _Replay({})
    with pytest.raises(ConfigError, match="job id"):
        sacct.lookup(bad, {}, run)
    assert run.asked == []


def test_a_missing_slurm_command_cannot_evaluate(tmp_path: Path) -> None:
    with pytest.raises(StethoError) as e:
        sacct.lookup("1", {"PATH": str(tmp_path)})
    assert e.value.exit_code == 3 and "scontrol" in str(e.value)


# -- stragglers ------------------------------------------------------------------------------


def test_the_real_nccl_log_maps_ranks_to_host_and_gpu() -> None:
    """3767c65d25c4's two ranks: rank 0 cudaDev 0, rank 1 cudaDev 1 (the Destroy lines print
    the thread's device in brackets, [1] for rank 0: not the rank's)."""
    places = stragglers.parse_nccl_ranks(NCCL_LOG.read_text(), str(NCCL_LOG))
    assert places == {0: stragglers.Place("3767c65d25c4", 0),
                      1: stragglers.Place("3767c65d25c4", 1)}


@pytest.mark.parametrize("text", ["", "random words\n", "\x00\x01",
                                  "host:1:2 [0] NCCL INFO Using network Socket\n"])
def test_a_log_without_rank_lines_is_a_named_error(text: str) -> None:
    with pytest.raises(ConfigError, match="nccl.log: no 'NCCL INFO comm"):
        stragglers.parse_nccl_ranks(text, "nccl.log")


def test_the_widest_communicator_is_the_jobs_world() -> None:
    lines = [f"h{r // 2}:1:2 [{r % 2}] NCCL INFO comm 0xa rank {r} nranks 4 cudaDev {r % 2} "
             "nvmlDev 0 busId a4000 commId 0x1 - Init START" for r in range(4)]
    lines.append("h9:1:2 [0] NCCL INFO comm 0xb rank 0 nranks 2 cudaDev 5 nvmlDev 0 busId "
                 "a4000 commId 0x2 - Init START")
    places = stragglers.parse_nccl_ranks("\n".join(lines), "x")
    assert places[3] == stragglers.Place("h1", 1) and places[0] == stragglers.Place("h0", 0)


def test_one_slow_rank_is_found_and_placed() -> None:
    rows = ["rank,step,seconds"]
    for rank in range(8):
        for step in range(20):
            base = 1.0 + 0.004 * ((rank * 7 + step * 3) % 5)  # +-1 % noise
            rows.append(f"{rank},{step},{base * (1.3 if rank == 5 else 1.0):.4f}")
    steps = stragglers.parse_steps("\n".join(rows) + "\n", "steps.csv")
    places = {r: stragglers.Place(f"n{r // 4 + 1:02d}", r % 4) for r in range(8)}
    found, job = stragglers.find(steps, places)
    assert [s.rank for s in found] == [5]
    assert found[0].where == "n02 GPU 1"
    assert 1.0 <= job <= 1.02 and found[0].median_s > 1.29


def test_even_noise_has_no_straggler_and_too_few_ranks_are_not_judged() -> None:
    steps = {r: [1.0 + 0.01 * ((r + s) % 3) for s in range(10)] for r in range(6)}
    assert stragglers.find(steps)[0] == []
    with pytest.raises(ValueError, match="at least 3"):
        stragglers.find({0: [1.0], 1: [2.0]})


@pytest.mark.parametrize("text,where", [
    ("", "first line"), ("a,b,c\n1,1,1\n", "first line"), ("rank,step,seconds\n", "no step"),
    ("rank,step,seconds\n1,2\n", "line 2"), ("rank,step,seconds\n0,0,1\nx,1,2\n", "line 3"),
    ("rank,step,seconds\n0,0,nan\n", "line 2"), ("rank,step,seconds\n0,0,-1\n", "line 2"),
    ("rank,step,seconds\n0,0,1,9\n", "line 2")])
def test_malformed_step_files_name_the_file_and_line(text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=f"steps.csv.*{where}"):
        stragglers.parse_steps(text, "steps.csv")


def test_parse_errors_are_could_not_evaluate() -> None:
    assert issubclass(sacct.JobParseError, EvaluationError)
    assert sacct.JobParseError("x").exit_code == 3
