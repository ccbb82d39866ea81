#!/bin/sh
# Slurm HealthCheckProgram: the pre-job gate on an idle node, every HealthCheckInterval.
#
# slurm.conf:
#   HealthCheckProgram=/etc/slurm/stetho-healthcheck.sh
#   HealthCheckInterval=600
#   HealthCheckNodeState=IDLE
#
# Slurm ignores a health check's exit code; stetho acts itself, as LBNL NHC does: it drains
# this node (`scontrol update ... Reason="stetho: <check>: <why>"`) when the policy blocks,
# resumes it only from a drain stetho wrote, and never touches a person's drain. A watchdog
# drains the node with "checks did not finish" before Slurm's 60 s limit
# (STETHO_HEALTH_TIMEOUT, default 50 s). Both drains ask the drain budget, a ledger every node
# shares (STETHO_DRAIN_LEDGER, on a filesystem with POSIX locks): a broken check pushed
# everywhere drains at most max(2, 10%) of the cluster per hour.
STETHO=${STETHO:-/opt/stetho/current/bin/stetho}
POLICY=${STETHO_POLICY:-/etc/stetho/gates/pre-job.yml}
export STETHO_PROFILE=${STETHO_PROFILE:-h100-sxm-8gpu}
export STETHO_PROBE_TIMEOUT=${STETHO_PROBE_TIMEOUT:-20}
exec "$STETHO" gate --local --slurm health-check --policy "$POLICY" \
    --node "$(hostname -s)" --quiet --no-reports
