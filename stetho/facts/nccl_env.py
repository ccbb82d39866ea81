"""The NCCL a job's environment brings (a container image, an environment module) beside the
host's: a job that loads another libnccl than the host's runs with that one, and NCCL across
the ranks of one job, or between a job and the host's plugins, must agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stetho.facts.base import Unavailable

if TYPE_CHECKING:
    from stetho.facts.node import NodeFacts
    from stetho.parsers.nccl_env import NcclEnv

#: subject kind -> (probe, what is asked, how to ask by hand)
SOURCES = {
    "container": ("nccl_image", "container image", "docker image inspect --format "
                  "'{{json .Config.Env}}' {name}"),
    "module": ("nccl_module", "environment module", "module show {name}"),
}


def job_nccl(facts: NodeFacts, kind: str) -> NcclEnv:
    """What the job environment of this kind says about its NCCL. A probe that did not run or
    failed (no docker, no such image, no such module) is an error: the profile names it."""
    from stetho.parsers import nccl_env

    probe = SOURCES[kind][0]

    def load() -> NcclEnv:
        try:
            text = facts.text(probe)
        except Unavailable as u:
            if u.status == "skip":  # docker/podman/sh missing: the profile still names it
                raise Unavailable("error", u.reason, probe) from None
            raise
        rec = facts.record(probe)
        if rec.status == "failed":  # `module show` of an unknown module prints, then exits 1
            said = text.strip().splitlines()[0][:160]
            raise Unavailable("error", f"the {SOURCES[kind][1]} could not be read ({rec.reason}"
                              f"): {said}", probe)
        return nccl_env.image_env(text) if kind == "container" else nccl_env.module_show(text)

    return facts.parsed(probe, load)


def skew(host: str, job: str) -> str | None:
    """'minor' where major.minor differ (a different NCCL: protocols and tuning change between
    minor releases, and ranks that disagree hang or fail at init), 'patch' where only the
    patch level does, None where they are the same release."""
    from stetho.core.versioning import Version

    if Version(host) == Version(job):
        return None
    h, j = host.split("."), job.split(".")
    return "minor" if h[:2] != j[:2] else "patch"
