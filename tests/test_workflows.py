"""The GitHub workflows, linted (tests/workflow_lint.py) and their scripts run for real with
hostile tags and inputs: nothing given to a workflow from outside is ever run as code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
