"""The simulated node's `bin/`: one sh script per tool, each printing the node's recorded (and
fault-edited) outputs from `data/`, as `NodeDraft.finish` wrote them.

A shim answers the argument lists stetho's probes and benchmark definitions pass, and refuses
anything else with `unsupported arguments` and exit 2, so a probe or benchmark that changes
its command line fails loudly here instead of reading the wrong recording.

`dcgmi diag -r 1|2|3 -j` (also `--run N`, `--json`, in any order) prints the recorded DCGM
JSON in `data/dcgmi-diag.json` and exits as dcgmi did on that run: the DCGM 3.1.0 level-1
document that passed (exit 0), or, with the `dcgm-diag-fail` fault, the DCGM 4.2.3 level-1
document whose `software` test failed (dcgmi exited 226). No level-2 or level-3 JSON
recording exists (fixtures/real/12-gpu-bench holds level-1 documents only; 08-dcgm's level-3
runs are the text table, not `-j`), so levels 2 and 3 answer the recorded level-1 document:
the parser and the verdict read the same fields at every level.
"""

from __future__ import annotations

from pathlib import Path

from stetho.sim import hostfs, jobenv, nvme

#: `dcgmi diag -r 1 -j`, DCGM 3.1.0, 8 GPUs, every test passed (dcgmi exits 0).
DCGMI_PASS = "12-gpu-bench/dcgmi-diag-r1-j-8gpu-dcgm3.1.0-pass-null-entries-warning-prefix.json"
#: `dcgmi diag -r 1 -j`, DCGM 4.2.3: the `software` test failed (persistence mode off), and
#: dcgmi exited 226 (fixtures/real/SOURCES.tsv).
DCGMI_FAIL = "12-gpu-bench/dcgmi-diag-r1-j-gb10-dcgm4.2.3-software-fail.json"
DCGMI_FAIL_RC = 226
#: The run levels `dcgmi diag -r` takes (benchmarks/dcgmi-diag-r{1,2,3}.yml pass each).
DCGMI_LEVELS = ("1", "2", "3")
COMPUTE_APPS = "--query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
#: The processes per GPU (stetho.remedy checks a GPU's before resetting it).
COMPUTE_APPS_GPU = "--query-compute-apps=pid,gpu_uuid --format=csv,noheader"
#: `nvidia-smi -r -i N`: the simulated GPU reset appends "N <epoch>" to data/resets.log and
#: prints the line nvidia-smi prints on success, with GPU N's bus id from the recorded
#: `nvidia-smi -q`; nothing else changes (a reset clears no fault the recordings hold, as a
#: reset that did not help). An index the node does not have is refused.
RESET = ['case "$*" in "-r -i "*) [ $# -eq 3 ] || exit 2',
         '  case "$3" in *[!0-9]*|"") echo "No devices were found" >&2; exit 6 ;; esac',
         "  bus=$(grep '^GPU [0-9A-Fa-f]' \"$D/nvidia-smi-q.txt\" | "
         "sed -n \"$(($3 + 1))p\" | cut -d' ' -f2)",
         '  [ -n "$bus" ] || { echo "No devices were found" >&2; exit 6; }',
         '  echo "$3 $(date -u +%s)" >> "$D/resets.log"',
         '  echo "GPU $bus was successfully reset."; exit 0 ;; esac']

#: tool -> (argument pattern, data file) for the shims that only pick a file by arguments.
CASES: dict[str, list[tuple[str, str]]] = {
    "nvidia-smi": [(COMPUTE_APPS, "compute-apps.csv"),
                   (COMPUTE_APPS_GPU, "compute-apps-gpu.csv"),
                   ("-q -x", "nvidia-smi-q-x.xml"), ("-q", "nvidia-smi-q.txt"),
                   ("nvlink -s|nvlink --status", "nvlink-s.txt"),
                   ("nvlink -e|nvlink --errorcounters", "nvlink-e.txt"),
                   ("topo -m", "nvidia-topo.txt")],
    "dmesg": [],
    "ibstat": [("*", "ibstat.txt")],
    "lspci": [("*", "lspci.txt")],
    "all_reduce_perf": [("*", "all_reduce_perf.txt")],
    "dcgmi": [],
    "gpu_burn": [("*", "gpu_burn.txt")],
    "nvbandwidth": [("*", "nvbandwidth.txt")],
    "mlxlink": [],
    "perfquery": [],
    "iblinkinfo": [],
    "ethtool": [],  # ethtool -S <netdev>, mlnx_qos -i <netdev>: that netdev's output
    "mlnx_qos": [],
    "df": [("-P -B1", "df-B1.txt"), ("-P -i", "df-i.txt")],
    "systemctl": [],
    "chronyc": [("tracking", "chronyc-tracking.txt")],
    "nvme": [],  # nvme smart-log /dev/nvmeN -o json: that controller's log
    "docker": [], "module": [],  # stetho.sim.jobenv
}


def dcgmi(rc: int) -> list[str]:
    """`dcgmi diag -r N -j`: data/dcgmi-diag.json, then exit `rc` (what dcgmi exited with on
    the recorded run). Any other command or level is refused, as a shim does."""
    usage = 'echo "simulated dcgmi: unsupported arguments: $all" >&2; exit 2'
    return ['all="$*"', f'[ "$1" = diag ] || {{ {usage}; }}', "shift", "level= json=",
            'while [ $# -gt 0 ]; do', '  case "$1" in',
            f'    -r|--run) [ $# -ge 2 ] || {{ {usage}; }}; level=$2; shift 2 ;;',
            "    -j|--json) json=1; shift ;;", f"    *) {usage} ;;", "  esac", "done",
            f'case "$level" in {"|".join(DCGMI_LEVELS)}) ;; *) {usage} ;; esac',
            f'[ -n "$json" ] || {{ {usage}; }}',
            '# levels 2 and 3 answer the recorded level-1 document: no recording of theirs',
            'cat "$D/dcgmi-diag.json"', f"exit {int(rc)}"]


def write(bin_dir: Path, hang: set[str], garbage: set[str], dcgmi_rc: int) -> None:
    """Write every tool's shim into `bin_dir` (executable)."""
    from stetho.sim.iblinks import SHIM as IBLINKINFO_SHIM

    for tool, table in CASES.items():
        body = ['#!/bin/sh', f'# stetho simulated {tool}: replays recorded outputs '
                '(see stetho/sim/builder.py and stetho/sim/shims.py)',
                # the data folder beside bin/, found without forking `dirname` (a check
                # runs some 60 of these: the forks were a third of the simulated node's CPU)
                'case "$0" in */*) D="${0%/*}/../data" ;; *) D=../data ;; esac']
        if tool in hang:
            body.append("exec sleep 86400")
        elif tool in garbage:
            body.append('exec cat "$D/garbage.bin"')
        elif tool == "perfquery":  # perfquery -x|-E -C <device> -P 1
            body += ['case "$1" in', '  -x) exec cat "$D/perfquery-x-$3.txt" ;;',
                     '  -E) exec cat "$D/perfquery-E-$3.txt" ;;',
                     '  *) echo "simulated perfquery: unsupported arguments: $*" >&2; '
                     'exit 2 ;;', 'esac']
        elif tool == "dmesg":  # dmesg --time-format=iso: stamps relative to now, as on a node
            body += ['now=$(date -u +%s)',
                     "exec awk -F '\\t' -v now=\"$now\" '{ t = now - $1; us = $2; "
                     'sub(/^[^\\t]*\\t[^\\t]*\\t/, ""); printf "%s,%s+00:00 %s\\n", '
                     'strftime("%Y-%m-%dT%H:%M:%S", t, 1), us, $0 }\' "$D/dmesg.tsv"']
        elif tool in ("ethtool", "mlnx_qos"):
            data = f'"$D/{"ethtool-S" if tool == "ethtool" else tool}-$2.txt"'
            body += [f'[ -f {data} ] && exec cat {data}',
                     f'echo "simulated {tool}: unsupported arguments: $*" >&2; exit 2']
        elif tool == "dcgmi":
            body += dcgmi(dcgmi_rc)
        elif tool == "nvme":
            body += nvme.SHIM
        elif tool in ("docker", "module"):
            body += jobenv.DOCKER_SHIM if tool == "docker" else jobenv.MODULE_SHIM
        elif tool == "systemctl":  # is-active UNIT...: the units' states (units.tsv)
            body += hostfs.SYSTEMCTL_SHIM
        elif tool == "iblinkinfo":  # -C <device> ...: that HCA's line and its far end
            body += IBLINKINFO_SHIM
        elif tool == "mlxlink":  # mlxlink -d <device> ...: that device's recording
            body += ['[ "$1" = "-d" ] && [ -f "$D/mlxlink-$2.json" ] && '
                     'exec cat "$D/mlxlink-$2.json"', 'exec cat "$D/mlxlink.json"']
        else:
            if tool == "nvidia-smi":
                body += RESET
            body.append('case "$*" in')
            body += [f'  {_case(pat)}) exec cat "$D/{f}" ;;' for pat, f in table]
            body.append(f'  *) echo "simulated {tool}: unsupported arguments: $*" >&2; '
                        'exit 2 ;;')
            body.append("esac")
        path = bin_dir / tool
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(body) + "\n", encoding="utf-8")
        path.chmod(0o755)


def _case(pattern: str) -> str:
    """A sh case pattern: '*' as is, else each '|' alternative quoted."""
    return "*" if pattern == "*" else "|".join(f'"{p}"' for p in pattern.split("|"))
