"""The README's shell blocks run as written, in order, so the README cannot rot.

Every ```` ```sh ```` block is run (```` ```sh norun ```` ones are not: installing and
running the suite itself), in one scratch folder that holds the repository's files as a
fresh clone would, with this venv as `.venv`. A line ending in `# exit N` must exit N; every
other line must succeed. The simulated nodes stand in for hardware, as the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```sh(?P<flags>[^\n]*)\n(?P<body>.*?)^```\s*$", re.M | re.S)
_EXIT = re.compile(r"^(?P<cmd>.*?)\s+#\s*exit (?P<code>\d+)\b.*$", re.S)
_HEREDOC = re.compile(r"<<-?\s*'?(?P<tag>\w+)'?")


def blocks(text: str) -> list[str]:
    return [m["body"] for m in _FENCE.finditer(text) if "norun" not in m["flags"].split()]


def script(body: str) -> str:
    """The block as a bash script: stop at the first unexpected exit code, and check the
    documented ones (`# exit N`)."""
    out, logical, heredoc = ["set -e -o pipefail"], "", None
    for line in body.splitlines():
        if heredoc is not None:
            out.append(line)
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        logical += line
        if line.endswith("\\"):
            logical += "\n"
            continue
        m = _EXIT.match(logical)
        if m:
            shown = m["cmd"].replace("'", "'\\''")
            out.append(f"set +e\n{m['cmd']}\nrc=$?\nset -e\n[ $rc -eq {m['code']} ] || "
                       f"{{ echo 'README: expected exit {m['code']}, got '$rc': {shown}' >&2; "
                       "exit 99; }")
        else:
            out.append(logical)
        doc = _HEREDOC.search(logical)
        heredoc = doc["tag"] if doc else None
        logical = ""
    return "\n".join(out) + "\n"


def test_the_extraction_checks_exit_codes() -> None:
    text = "```sh\ntrue   # exit 0\nfalse  # exit 1\nfalse  # exit 0\n```\n```sh norun\nx\n```\n"
    (body,) = blocks(text)
    r = subprocess.run(["bash", "-c", script(body)], capture_output=True, text=True)
    assert r.returncode == 99 and "expected exit 0, got 1: false" in r.stderr


@pytest.mark.xdist_group("readme")
def test_every_readme_block_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "clone"
    work.mkdir()
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                             capture_output=True,
                             text=True, check=True).stdout.split()
    for top in sorted({t.split("/")[0] for t in tracked}):
        (work / top).symlink_to(ROOT / top)
    (work / ".venv").symlink_to(Path(sys.prefix))
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(home),
           "LANG": "C.UTF-8", "TMPDIR": str(tmp_path), "COLUMNS": "80",
           "GIT_AUTHOR_NAME": "readme", "GIT_AUTHOR_EMAIL": "readme@example.invalid",
           "GIT_COMMITTER_NAME": "readme", "GIT_COMMITTER_EMAIL": "readme@example.invalid",
           "ANSIBLE_HOST_KEY_CHECKING": "False"}
    found = blocks((ROOT / "README.md").read_text())
    assert len(found) >= 4, "the README lost its runnable examples"
    for i, body in enumerate(found):
        r = subprocess.run(["bash", "-c", script(body)], cwd=work, env=env, capture_output=True,
                           text=True, timeout=1200)
        assert r.returncode == 0, (f"README block {i + 1}:\n{body}\n--- stdout\n"
                                   f"{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")
    left = sorted(p.name + "/" * p.is_dir() for p in work.iterdir() if not p.is_symlink())
    assert not _not_ignored(left), f"README steps leave files .gitignore misses: {left}"
    _the_sweeps_page_in_chromium(work / "runs", tmp_path / "chromium")


def _the_sweeps_page_in_chromium(runs: Path, work: Path) -> None:
    """The README's sweep over examples/inventory.yml left its run page: headless Chromium
    opens it from the run folder, node02 and node03 (the README's faults) lead in the fail
    colour, each links a report beside the page, and the screenshot is kept as an artefact."""
    from urllib.parse import unquote

    from tests import services

    if services.missing("chromium"):
        return  # the page itself is still checked by the sweep's tests
    (run,) = sorted(d for d in runs.glob("2*/") if (d / "summary.txt").is_file()
              and (d / "summary.txt").read_text().startswith("stetho sweep"))[:1]
    page = run / "index.html"
    rows = services.grid_rows(services.dump_dom(page, work))
    assert list(rows)[:2] == ["node02", "node03"], list(rows)
    for node in ("node02", "node03"):
        assert rows[node]["worst"] == "fail" and "fail" in rows[node]["cells"], rows[node]
        assert any((run / unquote(link)).is_file() and Path(link).name.startswith(f"{node}-")
                   for link in rows[node]["links"]), rows[node]["links"]
    assert rows["node01"]["worst"] != "fail"
    services.screenshot(page, services.artifacts() / "readme-sweep-run-page.png", work)


#: What the README's shell blocks write in the checkout (the sweep's node-venvs/ and
#: node-etc/ through examples/inventory.yml), each a folder (/) or a file.
README_OUTPUTS = ("sim/", "runs/", "node-venvs/", "node-etc/", "fetched/", "wheels.json",
                  "remedy-sim/", "remedy-run/", "remedy.db", "kb-demo/", "out.json")


def _not_ignored(paths: list[str]) -> list[str]:
    """The paths `git check-ignore` would let `git status` show, in this checkout."""
    if not paths:
        return []
    r = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "--stdin"],
                       input="\n".join(paths) + "\n", capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    ignored = set(r.stdout.splitlines())
    return [p for p in paths if p not in ignored]


def test_gitignore_covers_what_the_readme_steps_leave() -> None:
    """Following the README leaves no untracked files in `git status` (the block run above
    checks what they actually leave; this, fast, what they name), and ignores no tracked file
    (`/sim/` is the checkout's, never stetho/sim/)."""
    text = (ROOT / "README.md").read_text() + (ROOT / "examples/inventory.yml").read_text()
    for out in README_OUTPUTS:
        assert re.search(rf"(?<![\w.-]){re.escape(out.rstrip('/'))}\b", text), out
    assert _not_ignored(list(README_OUTPUTS)) == []
    assert _not_ignored(["stetho/sim/", "stetho/sim/builder.py"]) == ["stetho/sim/",
                                                                      "stetho/sim/builder.py"]
    tracked_ignored = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-ci", "--exclude-standard"],
        capture_output=True, text=True, check=True).stdout.split()
    assert tracked_ignored == []


def test_every_check_has_a_row_in_the_readme_check_table() -> None:
    """A check a user cannot look up is one they cannot act on: each `def test_<check>` in
    checks/ has a `| \\`<check>\\` |` row in the README's check tables."""
    text = (ROOT / "README.md").read_text()
    names = {m.group(1) for p in (ROOT / "checks").glob("test_*.py")
             for m in re.finditer(r"^def test_(\w+)\(", p.read_text(), re.M)}
    assert len(names) > 40
    missing = sorted(n for n in names if f"| `{n}` |" not in text)
    assert not missing, f"README check table lacks: {missing}"
