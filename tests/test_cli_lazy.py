"""The CLI path imports only what the command uses (issue 32).

`stetho --help` lists every command from the table in stetho.cli (no command module loaded);
these tests keep that table equal to the commands' own docstrings and the listing equal to
what click prints with every command loaded. Then, in real subprocesses, which modules each
path imported: the heavy ones (Ansible, Jinja2, sqlite-utils, requests, the diagnosis engine,
localization, jobs, ...) must stay out. No timing here: bench/check_local.py measures that.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from stetho import config, configsource
from stetho.cli import COMMANDS, HELP, cli
from stetho.cli.helptext import render

#: Never imported by `stetho --help`, `stetho check --help` or a node's `stetho check`.
HEAVY = ("ansible", "ansible_runner", "jinja2", "sqlite_utils", "requests", "rich", "xdist",
         "stetho.diagnosis", "stetho.localize", "stetho.jobs", "stetho.reliability",
         "stetho.fleet", "stetho.publish", "stetho.gate", "stetho.remedy", "stetho.sim",
         "stetho.evidence.bench_run", "stetho.cli.gate", "stetho.cli.sweep")

#: The stetho modules `stetho --help` may import: the CLI tables, the page's layout and the
#: configuration (a broken config file is reported as for any command).
HELP_MODULES = {"stetho", "stetho.cli", "stetho.cli.table", "stetho.cli.helptext", "stetho.config",
                "stetho.configsource", "stetho.errors",
                "stetho.core", "stetho.core.record"}  # Config is a record: no exec() at import
#: Not imported by a node's `stetho check` without --bench (the bundle holds no benchmark run).
NODE_SKIPS = ("stetho.benchmarks.spec", "stetho.benchmarks.measure",
              "stetho.benchmarks.fieldpath")
#: Not imported by `stetho --help` when no config file exists and no variable needs checking:
#: building the configuration (dataclasses, pathlib) cost more than the page itself.
HELP_SKIPS = ("stetho.config", "dataclasses", "pathlib", "shutil", "typing", "inspect")

_SHOW_MODULES = (
    "import atexit, json, runpy, sys\n"
    "atexit.register(lambda: sys.__stderr__.write("
    "'\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
    "sys.argv = ['stetho', *sys.argv[1:]]\n"
    "runpy.run_module('stetho', run_name='__main__', alter_sys=True)\n")


def imported(*args: str, env: dict[str, str] | None = None) -> tuple[int, set[str]]:
    """Run `stetho ARGS` in a fresh interpreter: its exit code and every module it imported."""
    proc = subprocess.run([sys.executable, "-c", _SHOW_MODULES, *args], capture_output=True,
                          text=True, timeout=120, env=env)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("MODULES ")]
    assert lines, proc.stderr[-2000:]
    return proc.returncode, set(json.loads(lines[-1].removeprefix("MODULES ")))


def heavy_in(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def docstring_line(name: str) -> str:
    module, attr = COMMANDS[name][0].split(":")
    cmd = getattr(importlib.import_module(module), attr)
    assert isinstance(cmd, click.Command) and cmd.help, name
    return cmd.help.strip().splitlines()[0].strip()


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_table_help_line_is_the_commands_docstring_first_line(name: str) -> None:
    assert COMMANDS[name][1] == docstring_line(name)


def eager_group() -> click.Group:
    """The group as click would build it with every command loaded."""
    eager = click.Group(name="stetho", help=cli.help, params=cli.params,
                        context_settings=cli.context_settings)
    for name in COMMANDS:
        module, attr = COMMANDS[name][0].split(":")
        eager.add_command(getattr(importlib.import_module(module), attr), name)
    return eager


@pytest.mark.parametrize("columns", ["30", "52", "60", "67", "72", "80", "81", "120"])
def test_help_is_what_click_prints_with_every_command_loaded(
        columns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    eager = eager_group()
    want = eager.get_help(eager.make_context("stetho", ["--help"], resilient_parsing=True))
    lazy = cli.get_help(cli.make_context("stetho", ["--help"], resilient_parsing=True))
    assert lazy == want  # the click path (a usage error shows it too)
    fast = render("stetho", HELP, [(n, COMMANDS[n][1]) for n in sorted(COMMANDS)])
    assert fast == want  # the path `stetho --help` takes, without click
    for name in COMMANDS:
        assert f"\n  {name} " in fast


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_stetho_help_prints_the_page_and_exits_0(flag: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "stetho", flag], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("Usage: stetho [OPTIONS] COMMAND [ARGS]...\n")
    assert "\nCommands:\n  baseline " in proc.stdout and "  sweep " in proc.stdout


def test_help_with_a_broken_config_file_reports_it_as_every_command_does(
        tmp_path: Path) -> None:
    bad = tmp_path / "stetho.toml"
    bad.write_text("db = [unclosed\n")
    env = dict(os.environ, STETHO_CONFIG=str(bad))
    fast = subprocess.run([sys.executable, "-m", "stetho", "--help"], capture_output=True,
                          text=True, timeout=60, env=env)
    other = subprocess.run([sys.executable, "-m", "stetho", "check", "--help"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert fast.returncode == other.returncode == 2
    assert fast.stderr == other.stderr and "stetho.toml" in fast.stderr


def test_help_imports_no_command_module() -> None:
    code, modules = imported("--help")
    assert code == 0
    assert {m for m in modules if m.startswith("stetho")} <= HELP_MODULES
    assert heavy_in(modules) == []
    assert "click" not in modules  # importing click alone costs ~4x starting Python


def test_check_help_imports_only_the_check_command() -> None:
    code, modules = imported("check", "--help")
    assert code == 0
    assert heavy_in(modules) == []
    assert "stetho.cli.check" in modules
    others = {m for m in modules if m.startswith("stetho.cli.")} - {
        "stetho.cli.table", "stetho.cli.group", "stetho.cli.check", "stetho.cli.common"}
    assert others == set()
    assert "pytest" not in modules  # the checks' machinery loads when checks run


def test_node_check_imports_nothing_heavy(tmp_path: Path) -> None:
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "node01", "node01")
    env = dict(os.environ, STETHO_DB=str(tmp_path / "history.db"))
    code, modules = imported("check", "--local", "--sim", str(node), "--profile",
                             "h100-sxm-8gpu", "-q", env=env)
    assert code == 0  # a healthy simulated H100: it really ran and recorded
    assert (tmp_path / "history.db").is_file()
    assert "stetho.checking.plugin" in modules and "stetho.history.store" in modules
    assert heavy_in(modules) == []
    # no benchmark ran: their definitions, measurement and field paths stay unloaded
    assert sorted(m for m in NODE_SKIPS if m in modules) == []
    # pytest's debugging plugin is off in a check run: no debugger is imported for a --pdb
    # the check cannot be given
    assert "pdb" not in modules


def test_node_check_builds_its_records_without_dataclass(tmp_path: Path) -> None:
    """The check path's data records are `@record`s (stetho.core.record): no class on it is
    built by `dataclasses.dataclass`, whose exec() per method was a fifth of a check's CPU.
    Only stetho.results (another stage's), the history store's own rows and the spool's
    file record, the configuration and the history statistics (standard library only) are."""
    from stetho.sim.builder import build_node

    node = build_node(tmp_path / "node01", "node01")
    probe = ("import dataclasses, runpy, sys\n"
             "made = []\n"
             "orig = dataclasses._process_class\n"
             "def spy(cls, *a, **k):\n"
             "    made.append(cls.__module__)\n"
             "    return orig(cls, *a, **k)\n"
             "dataclasses._process_class = spy\n"
             "sys.argv = ['stetho', *sys.argv[1:]]\n"
             "try:\n"
             "    runpy.run_module('stetho', run_name='__main__')\n"
             "finally:\n"
             "    print('MADE', ' '.join(sorted({m for m in made if m.startswith('stetho')})))\n")
    proc = subprocess.run([sys.executable, "-c", probe, "check", "--local", "--sim", str(node),
                           "--profile", "h100-sxm-8gpu", "-q"], capture_output=True, text=True,
                          env=dict(os.environ, STETHO_DB=str(tmp_path / "history.db")),
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = set(proc.stdout.split("MADE", 1)[1].split())
    assert made <= {"stetho.results", "stetho.history.store", "stetho.history.chain",
                    "stetho.history.latest", "stetho.history.stats", "stetho.spool.files",
                    "stetho.config",
                    # two empty dataclasses, once: where a record's __dataclass_params__ comes from
                    "stetho.core.record"}, made



def quiet_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This environment less every STETHO_* variable, with a HOME and XDG config folder that
    hold no stetho.toml, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STETHO_")}
    return {**env, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), **extra}


def test_help_builds_no_configuration_when_nothing_could_fail(tmp_path: Path) -> None:
    if Path("/etc/stetho/stetho.toml").exists():
        pytest.skip("this machine has a system config file: --help must read it")
    env = quiet_env(tmp_path, STETHO_DB=str(tmp_path / "h.db"), STETHO_PROFILE="h100-sxm-8gpu")
    code, modules = imported("--help", env=env)
    assert code == 0
    assert sorted(m for m in HELP_SKIPS if m in modules) == []
    # a config file that exists is read (and so checked) before the page is drawn
    (tmp_path / "cfg" / "stetho").mkdir(parents=True)
    (tmp_path / "cfg" / "stetho" / "stetho.toml").write_text('profile = "generic"\n')
    code, modules = imported("--help", env=env)
    assert code == 0 and "stetho.config" in modules


@pytest.mark.parametrize("var, value", [("STETHO_PROBE_TIMEOUT", "soon"),
                                        ("STETHO_RESULT_SPOOL", "relative/spool"),
                                        ("STETHO_CONFIG", "/nonexistent/stetho.toml")])
def test_help_with_a_refused_variable_reports_it_as_every_command_does(
        tmp_path: Path, var: str, value: str) -> None:
    env = quiet_env(tmp_path, **{var: value})
    fast = subprocess.run([sys.executable, "-m", "stetho", "--help"], capture_output=True,
                          text=True, timeout=60, env=env)
    other = subprocess.run([sys.executable, "-m", "stetho", "check", "--help"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert fast.returncode == other.returncode == 2
    assert fast.stderr == other.stderr and var in fast.stderr


@pytest.mark.parametrize("var", sorted(configsource.ALWAYS_ACCEPTED))
def test_always_accepted_variables_are_never_refused(var: str, tmp_path: Path) -> None:
    """What lets --help skip building the configuration: these take any value (not `~...`)."""
    assert var in config.ENVIRONMENT
    for value in ("x", "/abs/path", "rel/path", "a:b:c", " padded ", "0", "-1", "no", "::",
                  "a b", "ü"):
        config.load(env={var: value}, files=[])
    assert not configsource.nothing_to_validate({var: "~nobody-here/x"})
    assert not configsource.nothing_to_validate({"STETHO_PROBE_TIMEOUT": "1"})


@pytest.mark.parametrize("columns", [None, "", "abc", "0", "-3", "33", "200"])
def test_terminal_columns_is_what_shutil_says(columns: str | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert configsource.terminal_columns() == shutil.get_terminal_size().columns


_FROZEN_AT_EXIT = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: sys.__stderr__.write(f'FROZEN {gc.get_freeze_count()}\\n'))\n"
    "sys.argv = ['stetho', *sys.argv[1:]]\n"
    "from stetho.cli import main\n"
    "main()\n")


def test_the_process_entry_freezes_the_gc_as_it_ends_and_a_library_call_never_does():
    """main() without argv ends the process: its objects are frozen out of the last GC (the
    exit's collection walked them all), and the exit code and atexit handlers are as
    before. main(argv) is a library call (tests, other tools): the caller's GC untouched."""
    import gc

    from stetho.cli import main

    frozen: list[bool] = []
    with pytest.MonkeyPatch.context() as mp:  # counting frozen objects is not stable here:
        mp.setattr(gc, "freeze", lambda: frozen.append(True))  # a frozen one freed leaves
        with pytest.raises(SystemExit) as exc:
            main(["--version"])
    assert exc.value.code == 0 and frozen == []
    for args, code in ((["--version"], 0), (["gate", "--nodes", "x"], 2)):
        proc = subprocess.run([sys.executable, "-c", _FROZEN_AT_EXIT, *args],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, proc.stderr[-2000:]
        frozen = [ln for ln in proc.stderr.splitlines() if ln.startswith("FROZEN ")]
        assert frozen and int(frozen[-1].split()[1]) > 1000, proc.stderr[-2000:]
    assert "version" in subprocess.run([sys.executable, "-c", _FROZEN_AT_EXIT, "--version"],
                                       capture_output=True, text=True, timeout=120).stdout
