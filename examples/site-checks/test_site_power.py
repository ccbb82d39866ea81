"""A site check: every GPU runs at the power limit this site sets for its H100s."""

from __future__ import annotations

SITE_POWER_LIMIT_W = 700.0


def test_site_power_limit(gpu, verdict):
    limit = gpu.power_limit_w
    verdict.measure(limit, "W", expected=f"{SITE_POWER_LIMIT_W:g} W")
    verdict.cite(f"{gpu.pci_bus_id}: power limit {limit} W", "nvidia-smi -q -x")
    if limit is None:
        verdict.error("nvidia-smi reports no power limit for this GPU")
    if limit != SITE_POWER_LIMIT_W:
        verdict.fail(f"power limit {limit:g} W, the site runs {SITE_POWER_LIMIT_W:g} W",
                     remediation=f"nvidia-smi -i {gpu.pci_bus_id} -pl {SITE_POWER_LIMIT_W:g}")
    verdict.ok(f"{limit:g} W")
