"""Remediation behind the drain budget: from a diagnosis to the action its rule declares (reset
an idle GPU, reboot through Slurm, send a ticket), escalated when the same fault outlives it,
and every action kept in the history."""
