#!/bin/sh
# Slurm Prolog: the pre-job gate on this node, before a job starts.
#
# slurm.conf:
#   Prolog=/etc/slurm/stetho-prolog.sh
#   PrologFlags=Alloc            # run at allocation, before the job's first step
#   SchedulerParameters=nohold_on_prolog_fail   # the requeued job runs elsewhere, not held
#
# When the policy blocks (or cannot evaluate, or the checks do not finish in
# STETHO_HEALTH_TIMEOUT seconds), stetho drains this node itself through the drain budget with
# its own reason (`stetho: <check>: <why>`, kept by Slurm instead of "Prolog error"), and exits
# 1 only when the node is out of service: Slurm then requeues the job onto another node. When
# the budget refuses (the breaker is open: many nodes failing at once is more likely a broken
# check or driver push), it exits 0 and the job runs: a non-zero exit would make Slurm drain
# the node around the budget (the refusal is in the ledger: `stetho breaker status`). The
# verdict goes to STETHO_RESULT_SPOOL (a folder shared with the controller) for `stetho
# history ingest`; a failing prolog's reason is on stderr, in slurmd's log.
#
# `stetho sweep --via slurm` runs the full check in its own job (comment stetho-sweep:<run>,
# submitted by a uid in STETHO_SWEEP_UIDS, default 0): that job's prolog lets it through, since
# the check inside it judges the node and a blocking prolog would end the sweep's step on
# every node, not on this one.
case " ${STETHO_SWEEP_UIDS:-0} " in
    *" ${SLURM_JOB_UID:-none} "*) case "${SLURM_JOB_COMMENT:-}" in stetho-sweep:*) exit 0;; esac;;
esac
# Where `stetho sweep` installed it: the host's stetho_venv (default /opt/stetho), whose
# current/ is the swept version and etc/gates/ the policies (or <stetho_etc>/gates).
STETHO_ROOT=${STETHO_ROOT:-/opt/stetho}
STETHO=${STETHO:-$STETHO_ROOT/current/bin/stetho}
POLICY=${STETHO_POLICY:-$STETHO_ROOT/etc/gates/pre-job.yml}
export STETHO_PROFILE=${STETHO_PROFILE:-h100-sxm-8gpu}
export STETHO_PROBE_TIMEOUT=${STETHO_PROBE_TIMEOUT:-20}
exec "$STETHO" gate --local --slurm prolog --policy "$POLICY" \
    --node "${SLURMD_NODENAME:-$(hostname -s)}" --quiet ${SLURM_JOB_ID:+--job "$SLURM_JOB_ID"}
