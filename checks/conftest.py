"""stetho's health checks. The stetho pytest plugin parametrizes the tests in this folder over
nodes and their subjects (GPUs, IB ports, disks, ...). A site's own check folder marks itself
the same way, so `pytest site-checks/` runs its checks on this node like any pytest suite."""

stetho_checks = True
