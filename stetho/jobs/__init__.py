"""From nodes to the jobs on them and back: what Slurm runs where, which jobs a bad part
(node, switch, port) hurts, and what a job's nodes went through.

stetho's verdicts are about nodes; the people who read them think in jobs. This layer joins
the two from Slurm's own records (squeue, sacct) and the fabric's tree (topology.conf). It sits
above localize (it reads its topology) and below the gate (whose drains name their blast
radius).
"""
