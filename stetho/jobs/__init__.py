"""From a Slurm job to the hardware that touched it: its nodes, window, timeline and slow ranks."""
