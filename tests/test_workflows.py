"""The GitHub workflows, linted (tests/workflow_lint.py) and their scripts run for real with
hostile tags and inputs: nothing given to a workflow from outside is ever run as code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests import workflow_lint

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
CHECKER = REPO / ".github" / "scripts" / "plain-inputs"
HOSTILE = ["v1$(touch {x})", "v1;touch {x}", "v1`touch {x}`", "v1\n::error::forged line",
           "-rf", "../../etc", "v1 && touch {x}", ""]


def test_shipped_workflows_pass_the_lint() -> None:
    names = sorted(p.name for p in WORKFLOWS.glob("*.yml"))
    assert names == ["ci.yml", "gate.yml", "nightly.yml"]
    assert workflow_lint.lint(WORKFLOWS) == []


def test_lint_fails_on_an_expression_inside_run() -> None:
    """The shape gate.yml had: the tag name and a dispatch input expanded into the script."""
    sample = textwrap.dedent("""\
        name: sample
        on:
          push: {tags: ["v*"]}
          workflow_dispatch: {inputs: {nodes: {default: "gpu[001-008]"}}}
        jobs:
          gate:
            runs-on: ubuntu-latest
            steps:
              - run: stetho gate --job "${{ github.ref_name }}" --nodes ${{ inputs.nodes }}
              - uses: mikepenz/action-junit-report@v4
        """)
    problems = workflow_lint.lint_text(sample, "sample.yml")
    assert "sample.yml: no top-level permissions block (the default token can write to the " \
           "repository)" in problems
    inside = [p for p in problems if "is expanded inside a run: script" in p]
    assert len(inside) == 2 and "`${{ github.ref_name }}`" in inside[0]
    assert "`${{ inputs.nodes }}`" in inside[1]
    assert ("sample.yml: jobs.gate: steps[1]: mikepenz/action-junit-report needs "
            "`permissions: checks: write`") in problems


def test_lint_wants_tainted_env_checked_first() -> None:
    sample = textwrap.dedent("""\
        on: {workflow_dispatch: {inputs: {limit: {}}}}
        permissions: {contents: read}
        jobs:
          sweep:
            runs-on: ubuntu-latest
            env: {LIMIT: "${{ inputs.limit }}", TAG: "${{ github.ref_name }}"}
            steps:
              - run: stetho sweep --limit "$LIMIT"
        """)
    assert workflow_lint.lint_text(sample, "s.yml") == [
        "s.yml: jobs.sweep: takes LIMIT, TAG from inputs, the event or the ref, but its first "
        "run: step is not .github/scripts/plain-inputs"]
    partial = sample.replace("- run: stetho", "- run: .github/scripts/plain-inputs LIMIT:hostlist"
                             "\n      - run: stetho")
    assert workflow_lint.lint_text(partial, "s.yml") == [
        "s.yml: jobs.sweep: .github/scripts/plain-inputs does not check TAG"]
    assert workflow_lint.lint_text("jobs: [", "bad.yml")[0].startswith("bad.yml: not valid YAML")


def checker(env: dict[str, str], *pairs: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECKER), *pairs], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("bad", HOSTILE)
def test_tags_and_inputs_that_are_not_plain_are_refused(tmp_path: Path, bad: str) -> None:
    marker = tmp_path / "PWNED"
    value = bad.format(x=marker)
    for kind in ("version", "hostlist", "path"):
        proc = checker({"VALUE": value}, f"VALUE:{kind}")
        assert proc.returncode == 2, (kind, value)
        assert proc.stderr.startswith("refused VALUE=") and f"not a plain {kind}" in proc.stderr
        assert proc.stderr.count("\n") == 1  # quoted: a newline cannot forge a second line
    assert not marker.exists()


def test_plain_values_pass() -> None:
    env = {"JOB": "v1.4.2", "BRANCH": "release/2026.12", "NODES": "gpu[001-008],cpu07",
           "INV": "/etc/stetho/inventory.yml", "LIMIT": ""}
    proc = checker(env, "JOB:version", "BRANCH:version", "NODES:hostlist", "INV:path",
                   "LIMIT:hostlist?")
    assert proc.returncode == 0, proc.stderr
    assert checker(env, "LIMIT:hostlist").returncode == 2  # not optional: empty is refused


def test_gate_script_passes_a_hostile_tag_as_one_quoted_argument(tmp_path: Path) -> None:
    """Even past the checker, the gate's script only ever sees the tag as "$JOB": a tag named
    `v1$(touch X)` reaches stetho as that literal text and runs nothing."""
    doc = yaml.safe_load((WORKFLOWS / "gate.yml").read_text())
    (step,) = [s for s in doc["jobs"]["gate"]["steps"] if s.get("id") == "gate"]
    fake = tmp_path / ".venv" / "bin" / "stetho"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!{shutil.which('python3')}\nimport json, sys\n"
                    f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                    "sys.exit(1)\n")
    fake.chmod(0o755)
    marker = tmp_path / "PWNED"
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(tmp_path / "out"),
           "NODES": f"gpu[1-2]$(touch {marker})", "INVENTORY": "/etc/stetho/inventory.yml",
           "JOB": f"v1$(touch {marker})`touch {marker}`"}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--job") + 1] == env["JOB"]
    assert argv[argv.index("--nodes") + 1] == env["NODES"]
    assert (tmp_path / "out").read_text() == "rc=1\n"
    assert not marker.exists()


PINNER = REPO / ".github" / "scripts" / "pinned-gates"


def _git(cwd: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=True).stdout.strip()


def test_the_release_gate_takes_policy_and_signers_from_the_default_branch(tmp_path: Path
                                                                           ) -> None:
    """A release tag cut from a branch that relaxed gates/release.yml and added its author to
    the signers: the workflow's gate still reads both from the default branch's tip, and says
    which commit it used."""
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    gates = origin / "gates"
    gates.mkdir()
    strict = (REPO / "gates" / "release.yml").read_text()
    (gates / "release.yml").write_text(strict)
    (gates / "allowed_signers").write_text('lead@corp namespaces="stetho-override" ssh-ed25519 '
                                           "AAAA\n")
    scripts = origin / ".github" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy2(PINNER, scripts / PINNER.name)
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "reviewed policy")
    reviewed = _git(origin, "rev-parse", "HEAD")
    _git(origin, "switch", "-q", "-c", "relax")
    (gates / "release.yml").write_text(strict.replace("block_on: [fail]", "block_on: []"))
    (gates / "allowed_signers").write_text("mallory@corp ssh-ed25519 BBBB\n")
    (gates / "canary.yml").write_text("policy: canary\nblock_on: []\n")
    _git(origin, "commit", "-q", "-am", "relax the gate")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "a policy of its own")
    _git(origin, "tag", "v9.9.9")
    _git(origin, "switch", "-q", "main")
    work = tmp_path / "work"  # what actions/checkout leaves: the tag, one commit deep
    _git(tmp_path, "clone", "-q", "--depth=1", "--branch", "v9.9.9", f"file://{origin}",
         str(work))
    assert "block_on: []" in (work / "gates" / "release.yml").read_text()

    doc = yaml.safe_load((WORKFLOWS / "gate.yml").read_text())
    job = doc["jobs"]["gate"]
    assert "github.event.repository.default_branch" in job["env"]["POLICY_BRANCH"]
    steps = [s.get("run", s.get("uses", "")) for s in job["steps"]]
    pin = steps.index(".github/scripts/pinned-gates")
    assert "POLICY_BRANCH:version" in steps[pin - 1]  # checked before it is used
    assert pin < min(i for i, s in enumerate(steps) if "stetho gate" in s or "pip" in s)

    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "POLICY_BRANCH": "main",
           "GITHUB_ENV": str(tmp_path / "github_env")}
    proc = subprocess.run(["bash", "-e", "-c", steps[pin]], cwd=work, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert (work / "gates" / "release.yml").read_text() == strict
    assert "lead@corp" in (work / "gates" / "allowed_signers").read_text()
    assert not (work / "gates" / "canary.yml").exists()  # nothing the branch added stays
    pinned = work.resolve() / "gates"
    assert proc.stdout.splitlines()[0] == (
        f"policies and signers: {pinned}, from origin/main at {reviewed}")
    assert "  gates/allowed_signers" in proc.stdout and "  gates/release.yml" in proc.stdout
    assert (tmp_path / "github_env").read_text() == f"STETHO_GATES={pinned}\n"

    shown = subprocess.run(  # and the gate's own loader now reads the reviewed policy
        [sys.executable, "-c", "from stetho.gate import policy; "
         "print(policy.find('release'), policy.load('release').block_on)"],
        cwd=work, env={**os.environ, "STETHO_GATES": str(pinned)}, capture_output=True,
        text=True, timeout=60, check=True).stdout
    assert shown.strip() == f"{pinned / 'release.yml'} ('fail',)"

    env["POLICY_BRANCH"] = "nosuch"  # fail closed: no pinned policy, no gate
    proc = subprocess.run([str(PINNER)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode != 0 and (work / "gates" / "release.yml").read_text() == strict


# -- the release gate, called from another repository's pipeline (issue 30) -------------------
CALLER_INPUTS = {"release", "canaries", "controls", "stage"}


def _gate_job() -> dict[str, object]:
    doc = yaml.safe_load((WORKFLOWS / "gate.yml").read_text())
    on = doc.get("on", doc.get(True))
    assert set(on["workflow_call"]["inputs"]) == CALLER_INPUTS
    assert on["workflow_call"]["inputs"]["release"]["required"] is True
    job: dict[str, object] = doc["jobs"]["gate"]
    return job


def test_a_callers_inputs_pass_the_same_plain_inputs_step(tmp_path: Path) -> None:
    """Each workflow_call input reaches the job through env and the first step checks it:
    run that very step with a caller's hostile values, and it refuses them all."""
    job = _gate_job()
    env_map = job["env"]
    assert isinstance(env_map, dict)
    assert "inputs.release" in env_map["JOB"] and "inputs.canaries" in env_map["CANARIES"]
    steps = job["steps"]
    assert isinstance(steps, list)
    check = next(s["run"] for s in steps if "run" in s)
    assert check.startswith(".github/scripts/plain-inputs")
    marker = tmp_path / "PWNED"
    plain = {"PATH": os.environ["PATH"], "NODES": "gpu[001-008]",
             "INVENTORY": "/etc/stetho/inventory.yml", "JOB": "image-2026.12",
             "POLICY_BRANCH": "main", "CANARIES": "gpu[001-004]", "CONTROLS": "gpu[005-008]",
             "STAGE": "canary"}
    ok = subprocess.run(["bash", "-e", "-c", check], cwd=REPO, env=plain, capture_output=True,
                        text=True, timeout=60, check=False)
    assert ok.returncode == 0, ok.stderr
    for var, bad in (("CANARIES", f"gpu[1-2]$(touch {marker})"),
                     ("CONTROLS", "gpu[5-8]\n::error::forged"),
                     ("JOB", f"driver-550`touch {marker}`"), ("STAGE", "early;id")):
        proc = subprocess.run(["bash", "-e", "-c", check], cwd=REPO,
                              env={**plain, var: bad}, capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 2, (var, bad)
        assert proc.stderr.startswith(f"refused {var}=") and proc.stderr.count("\n") == 1
    assert not marker.exists()


def test_the_gate_step_judges_canaries_against_controls_when_called(tmp_path: Path) -> None:
    job = _gate_job()
    steps = job["steps"]
    assert isinstance(steps, list)
    (step,) = [s for s in steps if s.get("id") == "gate"]
    fake = tmp_path / ".venv" / "bin" / "stetho"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!{shutil.which('python3')}\nimport json, sys\n"
                    f"open({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
                    "sys.exit(3)\n")
    fake.chmod(0o755)
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(tmp_path / "out"),
           "NODES": "gpu[001-008]", "INVENTORY": "/etc/stetho/inventory.yml",
           "JOB": "image-2026.12", "CANARIES": "gpu[001-002]", "CONTROLS": "gpu[003-006]",
           "STAGE": "canary"}
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:3] == ["gate", "--policy", "release"]
    assert argv[argv.index("--canaries") + 1] == "gpu[001-002]"
    assert argv[argv.index("--controls") + 1] == "gpu[003-006]"
    assert argv[argv.index("--stage") + 1] == "canary"
    assert argv[argv.index("--job") + 1] == "image-2026.12" and "--nodes" not in argv
    assert (tmp_path / "out").read_text() == "rc=3\n"
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path,
                          env={**env, "CANARIES": "", "STAGE": ""}, capture_output=True,
                          text=True, timeout=60, check=False)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert "--nodes" in argv and "--canaries" not in argv and "--stage" not in argv


def test_lint_wants_every_callers_input_checked() -> None:
    sample = textwrap.dedent("""\
        on:
          workflow_call:
            inputs:
              release: {type: string, required: true}
              nodes: {type: string, required: true}
        permissions: {contents: read}
        jobs:
          gate:
            runs-on: ubuntu-latest
            env: {RELEASE: "${{ inputs.release }}"}
            steps:
              - run: .github/scripts/plain-inputs RELEASE:version
              - uses: some/action@v1
                with: {nodes: "${{ inputs.nodes }}"}
        """)
    assert workflow_lint.lint_text(sample, "c.yml") == [
        "c.yml: on.workflow_call.inputs.nodes: reaches no job through an env: variable that "
        ".github/scripts/plain-inputs checks"]
