"""`stetho sweep`: `stetho check --local` on every inventory host through Ansible.

Each host ends with exactly one outcome: the node's own results (written to the run folder as
soon as its event arrives, so a crash loses nothing already done), or an `error` result saying
why there are none (unreachable, install failed, timed out, unreadable output). Fleet checks
then compare the nodes of each profile, and the merged results decide the exit code.

Run folder: runs/<UTC time>-<id>/
  hosts/<node>/{evidence.json,results.json,junit.xml}   what each node brought back
  results.json  junit.xml  summary.json  summary.txt    the whole fleet (stetho.fleet.run_folder)
  index.html  reports/                                  the run page, the diagnosis reports
  ansible/                                              ansible-runner's artifacts (events)
  meta.json                                             what was run, on what, by whom,
                                                        each playbook step's share of the time
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from stetho import __version__
from stetho.core import hostlist
from stetho.core.locks import SweepLock
from stetho.core.resources import shipped
from stetho.errors import ConfigError, Interrupted
from stetho.evidence import busy as busy_mod
from stetho.evidence.bundle import Bundle
from stetho.fleet import hostvars
from stetho.fleet import outcome as outcome_mod
from stetho.fleet.ansible import HostEvent, inventory_hosts, run_playbook
from stetho.fleet.finish import (
    Finish,
    HostState,
    SweepResult,
    cannot_write,
    finish,
    node_summaries,
    save_host,
    sweep_again,
)
from stetho.fleet.run_folder import write_json as _write_json

#: What callers of this module used from it before the tail moved to stetho.fleet.finish.
__all__ = ["HostState", "SweepOptions", "SweepResult", "cannot_write", "node_summaries",
           "sweep"]

CHECK_TASKS = ("stetho check", "stetho check (after install)")
RECOVER_TASK = "recover the evidence of a killed check"


@dataclass
class SweepOptions:
    inventory: Path | None
    out: Path
    limit: str | None = None
    forks: int = 50
    timeout_s: int | None = None  # None: per host, what its probes and --bench can take
    playbook: Path | None = None
    progress: Callable[[str, int, int, int], None] | None = None  # host, done, total, failing
    #: What it is doing before the hosts report, a line a step ("wheelhouse: 3/30 dependency
    #: wheels"): a first wheelhouse build takes minutes.
    steps: Callable[[str], None] | None = None
    #: True once the sweep must stop (the CLI got SIGTERM/SIGINT): Ansible's processes are
    #: killed and the sweep raises Interrupted.
    cancel: Callable[[], bool] | None = None
    db: Path | None = None  # history: drift checks and recording (None: neither)
    reports: bool = True  # diagnose failing nodes into run_dir/reports (and alert)
    bench: str | None = None  # a benchmark suite every node runs too (idle nodes only)
    #: the knowledge base: earlier reports (repeats, similar incidents) and the rules'
    #: accuracy on resolved reports, on the run page and in the textfile (None: neither)
    kb_repo: str | None = None
    #: node_exporter textfile: the fleet's results and, with kb_repo, the rules' accuracy
    textfile: Path | None = None


def sweep(opts: SweepOptions) -> SweepResult:
    from stetho.history.store import new_run_id

    run_id = new_run_id()
    with SweepLock(opts.out / ".sweep.lock", run_id):
        return _sweep(opts, run_id)


def _sweep(opts: SweepOptions, run_id: str) -> SweepResult:
    from stetho.fleet import wheels

    run_dir = opts.out / run_id
    (run_dir / "hosts").mkdir(parents=True)
    inventory = opts.inventory or _localhost_inventory(run_dir)
    limit = hostlist.expand(opts.limit) if opts.limit else None
    all_hosts = inventory_hosts(inventory)
    for h in all_hosts:
        hostlist.validate(h, f"inventory {inventory}")
    if limit:
        unknown = [h for h in limit if h not in all_hosts]
        if unknown:
            raise ConfigError(f"--limit names hosts not in {inventory}: "
                              f"{hostlist.compress(unknown)}")
    hosts = {h: HostState(h) for h in (limit or list(all_hosts))}
    if not hosts:
        raise ConfigError(f"inventory {inventory} has no hosts")
    hostvars.validate(inventory, all_hosts, hosts)
    cap = _probe_cap()
    limits = _check_budget(opts.bench, opts.timeout_s, all_hosts, hosts, cap)
    say = opts.steps or (lambda _text: None)
    house = wheels.build(progress=lambda text: say(f"wheelhouse: {text}"))
    meta = {"run_id": run_id, "stetho_version": __version__, "version_id": house.version_id,
            "inventory": str(inventory), "limit": opts.limit, "hosts": sorted(hosts),
            "forks": opts.forks, "timeout_s": opts.timeout_s, "host_timeouts": limits,
            "probe_timeout": cap,
            "bench": opts.bench,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    _write_json(run_dir / "meta.json", meta)

    lock = threading.Lock()
    failing = 0

    def on_event(ev: HostEvent) -> None:
        nonlocal failing
        st = hosts.get(ev.host)
        if st is None or st.done:
            return
        with lock:
            finished = _apply(st, ev, run_dir)
            if finished:
                if any(r.status in ("fail", "error") for r in st.results) or st.error:
                    failing += 1
                if opts.progress:
                    opts.progress(ev.host, sum(h.done for h in hosts.values()), len(hosts),
                                  failing)

    if opts.cancel is not None and opts.cancel():
        raise Interrupted(f"stopped before Ansible started; run folder {run_dir}")
    say(f"ansible: checking {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
        f" ({min(opts.forks, len(hosts))} at a time)")
    run = run_playbook(
        playbook=opts.playbook or shipped("playbooks") / "stetho-check.yml",
        inventory=inventory, private_data_dir=run_dir / "ansible", ident="sweep",
        limit=sorted(hosts) if limit else None, forks=opts.forks,
        extravars={**wheels.extra_vars(house), "stetho_host_timeouts": limits,
                   **({"stetho_probe_timeout": f"{cap:g}"} if cap else {}),
                   **({"stetho_bench": opts.bench} if opts.bench else {})},
        on_event=on_event, cancel=opts.cancel)
    if run.status == "canceled":
        raise Interrupted(f"ansible-playbook and its processes were killed; what finished "
                          f"hosts sent is in {run_dir / 'hosts'}")
    meta["ansible"] = run.steps.as_dict()  # each playbook step's share of the sweep
    try:
        _write_json(run_dir / "meta.json", meta)
        unwritten = None
    except OSError as exc:
        unwritten = cannot_write(exc, run_dir / "meta.json")
    result = finish(run_dir, hosts, run_id, datetime.fromisoformat(str(meta["started"])), Finish(
        kind="sweep", command=f"sweep {opts.limit or ''}".strip(), title="stetho sweep",
        missing=f"no result from Ansible for this host (playbook {run.status}, rc {run.rc})",
        remediation=sweep_again, db=opts.db, reports=opts.reports, kb_repo=opts.kb_repo,
        textfile=opts.textfile, bench=opts.bench,
        runner={"status": run.status, "rc": run.rc, "stats": run.stats}))
    if unwritten:
        result.output_problems.append(unwritten)
    return result


def _apply(st: HostState, ev: HostEvent, run_dir: Path) -> bool:
    """Fold one Ansible event into a host's state; True when the host is finished."""
    if ev.kind == "unreachable":
        st.done, st.error = True, f"unreachable: {ev.message}"
        return True
    if ev.task in CHECK_TASKS and ev.kind == "ok":
        rc = ev.result.get("rc")
        if rc == 127 and ev.task == CHECK_TASKS[0]:
            return False  # not installed yet: the install block runs next
        if rc in (124, 137):  # killed: the next task brings back the evidence it left
            st.killed = (f"stetho check was killed at the per-host timeout (rc {rc}): results "
                         "from the evidence it left")
            return False
        st.done = True
        if rc == 127:
            st.error = f"stetho is not runnable after install: {ev.message}"
        else:
            try:
                out = outcome_mod.parse(str(ev.result.get("stdout", "")), host=st.name)
            except (outcome_mod.OutcomeError, ValueError, KeyError) as exc:
                stderr = str(ev.result.get("stderr", "")).strip().splitlines()[-1:]
                st.error = f"stetho check exited {rc}: {exc}" + (
                    f"; stderr: {stderr[0][:300]}" if stderr else "")
            else:
                save_host(run_dir, st.name, out)
                st.results = out.results
                st.busy = busy_mod.from_bundle(out.evidence) if out.evidence else None
        return True
    if ev.task == RECOVER_TASK and st.killed:
        st.done = True
        st.partial, why = _partial_bundle(ev, st.name)
        if st.partial is None:
            st.error = f"stetho check was killed at the per-host timeout; {why}"
        return True
    if ev.kind == "failed":
        st.done = True
        st.error = f"task '{ev.task}' failed: {ev.message}"
        if ev.task not in CHECK_TASKS:
            st.error = f"installing stetho failed at '{ev.task}': {ev.message}"
        return True
    return False


def _partial_bundle(ev: HostEvent, host: str) -> tuple[Bundle | None, str]:
    """The evidence a killed check left on `host` (gzip, base64), or why there is none."""
    from stetho.core import untrusted
    from stetho.evidence.bundle import BundleError

    if ev.kind != "ok" or ev.result.get("rc") != 0:
        return None, f"it left no evidence ({ev.message or ev.result.get('stderr', '')})"[:400]
    try:
        raw = untrusted.loads(outcome_mod.unpack(str(ev.result.get("stdout", ""))))
        return outcome_mod.own_bundle(
            Bundle.from_json(raw, source="the killed check's evidence"), host), ""
    except (ValueError, OSError, EOFError, BundleError) as exc:
        return None, f"its evidence was unreadable: {exc}"


def _probe_cap() -> float | None:
    """The probe timeout cap in force here (STETHO_PROBE_TIMEOUT or `probe_timeout`): the
    playbook hands it to every node, so the per-host timeouts may count on it."""
    from stetho import config

    return config.active().probe_timeout


def _check_budget(bench: str | None, timeout_s: int | None,
                  all_hosts: dict[str, dict[str, Any]], hosts: dict[str, HostState],
                  cap: float | None = None) -> dict[str, int]:
    """Each host's per-host timeout: the one configured (--timeout, or its `stetho_timeout`),
    refused with the numbers where the node's probes and benchmarks could outlast it (the
    kill would lose what it measured), else what the node needs (stetho.fleet.budget) under
    the probe cap `cap` the nodes are handed."""
    from stetho.fleet.budget import host_budget

    limits = {}
    for name in hosts:
        hv = all_hosts.get(name, {})
        profile = _profile_of(hv)
        need, parts = host_budget(profile, bench, cap)
        configured = hv.get("stetho_timeout", timeout_s)
        limit = need if configured is None else hostvars.seconds(configured)
        if limit < need:
            what = "--timeout" if "stetho_timeout" not in hv else "its stetho_timeout"
            raise ConfigError(
                f"{name}: per-host timeout {limit} s ({what}) is shorter than the check can "
                f"take on profile {profile}{' with the ' + bench + ' benchmarks' if bench else ''}"
                f": {need} s ({', '.join(parts)}); give {need} or more, or leave it out "
                f"(computed per host)")
        limits[name] = limit
    return limits


def _profile_of(hostvars: dict[str, Any]) -> str:
    from stetho import config

    return str(hostvars.get("stetho_profile") or config.active().profile or "generic")


def _localhost_inventory(run_dir: Path) -> Path:
    """The embedded default: this machine, through Ansible's local connection."""
    from stetho import config

    cfg = config.active()
    path = run_dir / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "stetho_venv": str(cfg.venvs), "stetho_python": sys.executable,
            "stetho_etc": str(cfg.venvs.parent / "etc"),
            "stetho_path": cfg.path or "/usr/bin:/bin"}
    if cfg.profile:
        host["stetho_profile"] = cfg.profile
    if cfg.sysroot and cfg.sysroot != "/":
        host["stetho_sysroot"] = cfg.sysroot
    _write_json(path, {"all": {"hosts": {"localhost": host}}})
    return path
