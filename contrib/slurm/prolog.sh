#!/bin/sh
# Slurm Prolog: the pre-job gate on this node, before a job starts.
#
# slurm.conf:
#   Prolog=/etc/slurm/stetho-prolog.sh
#   PrologFlags=Alloc            # run at allocation, before the job's first step
#
# A non-zero exit makes Slurm drain the node and requeue the job, so a node that fails the
# policy's quick checks never runs it; the reason (`stetho: <check>: <why>`) is on stderr, in
# slurmd's log. Exit 3 (could not evaluate, or the checks did not finish in
# STETHO_HEALTH_TIMEOUT seconds) also fails the prolog: unknown is never go.
STETHO=${STETHO:-/opt/stetho/current/bin/stetho}
POLICY=${STETHO_POLICY:-/etc/stetho/gates/pre-job.yml}
export STETHO_PROFILE=${STETHO_PROFILE:-h100-sxm-8gpu}
export STETHO_PROBE_TIMEOUT=${STETHO_PROBE_TIMEOUT:-20}
exec "$STETHO" gate --local --slurm prolog --policy "$POLICY" \
    --node "${SLURMD_NODENAME:-$(hostname -s)}" --quiet
