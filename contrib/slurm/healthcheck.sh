#!/bin/sh
# Slurm HealthCheckProgram: the pre-job gate on an idle node, every HealthCheckInterval.
#
# slurm.conf:
#   HealthCheckProgram=/etc/slurm/stetho-healthcheck.sh
#   HealthCheckInterval=600
#   HealthCheckNodeState=IDLE,CYCLE   # a few nodes at a time through the interval
#
# Slurm ignores a health check's exit code; stetho acts itself, as LBNL NHC does: it drains
# this node (`scontrol update ... Reason="stetho: <check>: <why>"`) when the policy blocks,
# resumes it only from a drain stetho wrote, and never touches a person's drain. A watchdog
# drains the node with "checks did not finish" before Slurm's 60 s limit
# (STETHO_HEALTH_TIMEOUT, default 50 s). Both drains ask the drain budget, a ledger every node
# shares (STETHO_DRAIN_LEDGER, on a filesystem with POSIX locks): a broken check pushed
# everywhere drains at most max(2, 10%) of the cluster per hour.
# Where `stetho sweep` installed it: the host's stetho_venv (default /opt/stetho), whose
# current/ is the swept version and etc/gates/ the policies (or <stetho_etc>/gates).
STETHO_ROOT=${STETHO_ROOT:-/opt/stetho}
STETHO=${STETHO:-$STETHO_ROOT/current/bin/stetho}
POLICY=${STETHO_POLICY:-$STETHO_ROOT/etc/gates/pre-job.yml}
export STETHO_PROFILE=${STETHO_PROFILE:-h100-sxm-8gpu}
export STETHO_PROBE_TIMEOUT=${STETHO_PROBE_TIMEOUT:-20}
exec "$STETHO" gate --local --slurm health-check --policy "$POLICY" \
    --node "${SLURMD_NODENAME:-$(hostname -s)}" --quiet --no-reports
