#!/bin/sh
# Slurm Prolog (or HealthCheckProgram): the pre-job gate on this node, before a job starts.
#
# slurm.conf:
#   Prolog=/etc/slurm/stetho-prolog.sh
#   PrologFlags=Alloc            # run at allocation, before the job's first step
#   # or, periodically on idle nodes:
#   HealthCheckProgram=/etc/slurm/stetho-prolog.sh
#   HealthCheckInterval=600
#   HealthCheckNodeState=IDLE
#
# A non-zero exit makes Slurm drain the node and requeue the job, so a node that fails the
# policy's quick checks never runs it. Exit 3 (could not evaluate) also drains under the
# pre-job policy, which blocks on errors. Results are recorded in the node's history database.
STETHO=${STETHO:-/opt/stetho/current/bin/stetho}
POLICY=${STETHO_POLICY:-/etc/stetho/gates/pre-job.yml}
export STETHO_PROFILE=${STETHO_PROFILE:-h100-sxm-8gpu}
export STETHO_PROBE_TIMEOUT=${STETHO_PROBE_TIMEOUT:-20}
exec "$STETHO" gate --local --policy "$POLICY" --quiet
