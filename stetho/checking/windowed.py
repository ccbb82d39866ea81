"""The checks that judge cumulative counters by their growth within the profile's counter
window (stetho.facts.window): where a run has no history (a sweep's node side), the place that
has it runs these again over the node's evidence (stetho.fleet.sweep)."""

WINDOWED_CHECKS = ("ib_counters", "gpu_nvlink", "pcie_aer", "gpu_throttle",
                   "gpu_ecc_correctable")
