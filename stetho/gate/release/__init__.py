"""The release gate that compares like with like: canary nodes (the new image, driver or NCCL)
against control nodes (the current one), measured in the same window under a Slurm
reservation, the stored baseline only a second opinion; and the waves a release rolls out in."""
