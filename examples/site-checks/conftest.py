"""A site's own checks: any folder whose conftest.py says so is loaded by `stetho check
--checks examples/site-checks/` (and works under plain pytest with the stetho plugin)."""

stetho_checks = True
