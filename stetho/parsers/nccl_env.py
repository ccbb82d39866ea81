"""The NCCL a job's environment brings: a container image's environment, or an environment
module's `module show`.

- Image: `docker image inspect --format '{{json .Config.Env}}' IMAGE` (podman's is the same)
  prints the image's ENV as a JSON array of "NAME=value"; `docker inspect IMAGE` prints the
  whole record (a list of objects with Config.Env), accepted too. NVIDIA's CUDA base images set
  NCCL_VERSION (with the Debian package revision: '2.20.5-1') and NV_LIBNCCL_PACKAGE_VERSION.
- Module: `module show NAME` (Environment Modules: `setenv NCCL_VERSION 2.21.5`,
  `prepend-path LD_LIBRARY_PATH /opt/nccl/2.21.5/lib`; Lmod: `setenv("NCCL_VERSION","2.21.5")`,
  `prepend_path("LD_LIBRARY_PATH","/opt/nccl/2.21.5/lib")`). The version is NCCL_VERSION where
  the module sets it, else a libnccl.so.X.Y.Z it names, else the X.Y.Z of an nccl folder on
  its LD_LIBRARY_PATH (`.../nccl/2.24.3/lib`, `nccl_2.21.5-1+cuda12.4_x86_64/lib`).

A version found is returned with the line it came from; an image or module that names no NCCL
is `version=None` (the check says so); text that is neither is a ParseError.
"""

from __future__ import annotations

import json
import re

from stetho.core.record import record
from stetho.parsers import ParseError
from stetho.parsers._text import require_text

IMAGE_TOOL = "docker image inspect"
MODULE_TOOL = "module show"

_VERSION = re.compile(r"^(\d+\.\d+\.\d+)(?:-\d+)?(?:\+[\w.]+)?$")
_IMAGE_KEYS = ("NCCL_VERSION", "NV_LIBNCCL_VERSION", "NV_LIBNCCL_PACKAGE_VERSION")
_SETENV = re.compile(r"""^\s*setenv\s*\(?\s*["']?NCCL_VERSION["']?\s*[,\s]\s*["']?([^"'\s)]+)""",
                     re.M)
_LIB = re.compile(r"libnccl\.so\.(\d+\.\d+\.\d+)\b")
_PATH = re.compile(r"""^\s*(?:prepend[-_]path|append[-_]path|setenv)\s*\(?\s*["']?"""
                   r"""(?:LD_LIBRARY_PATH|LIBRARY_PATH|NCCL_HOME|NCCL_DIR|NCCL_ROOT)["']?"""
                   r"""\s*[,\s]\s*["']?([^"'\s)]+)""", re.M)
_NCCL_DIR = re.compile(r"nccl[^/]*?[/_-](\d+\.\d+\.\d+)(?:-\d+)?(?=[/+_]|$)", re.I)
_MODULE_MARKS = ("setenv", "prepend-path", "prepend_path", "append-path", "append_path",
                 "module-whatis", "whatis(", "conflict", "module load", "load(")


@record
class NcclEnv:
    """What one job environment says about its NCCL: `version` (X.Y.Z, the package revision
    dropped) and `evidence`, the line it was read from; None where it names no NCCL."""

    version: str | None
    evidence: str


def _clean(tool: str, raw: str) -> str:
    m = _VERSION.match(raw.strip())
    if not m:
        raise ParseError(tool, f"not an NCCL version: {raw.strip()[:40]!r}")
    return m.group(1)


def image_env(text: str) -> NcclEnv:
    """The NCCL of a container image, from its Config.Env as docker/podman print it."""
    body = require_text(IMAGE_TOOL, text).strip()
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ParseError(IMAGE_TOOL, f"not JSON: {body[:60]!r} ({exc})") from None
    env = _env_list(data)
    if env is None:
        raise ParseError(IMAGE_TOOL, "no Config.Env list of NAME=value strings")
    values = dict(e.split("=", 1) for e in env if "=" in e)
    for key in _IMAGE_KEYS:
        if key in values:
            return NcclEnv(_clean(IMAGE_TOOL, values[key]), f"{key}={values[key]}")
    return NcclEnv(None, f"no {', '.join(_IMAGE_KEYS)} among {len(values)} variables")


def _env_list(data: object) -> list[str] | None:
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        data = data[0]  # `docker inspect IMAGE`: a one-element list of the image record
    if isinstance(data, dict):
        config = data.get("Config") or data.get("config")
        data = config.get("Env") if isinstance(config, dict) else None
    if isinstance(data, list) and all(isinstance(e, str) for e in data):
        return list(data)
    return None


def module_show(text: str) -> NcclEnv:
    """The NCCL of an environment module, from `module show NAME` (stdout and stderr)."""
    body = require_text(MODULE_TOOL, text)
    lowered = body.lower()
    if "unable to locate a modulefile" in lowered or "module(s) are unknown" in lowered:
        raise ParseError(MODULE_TOOL, f"no such module: {body.strip().splitlines()[0][:80]!r}")
    if not any(mark in body for mark in _MODULE_MARKS):
        raise ParseError(MODULE_TOOL, f"no modulefile commands in {body.strip()[:60]!r}")
    if m := _SETENV.search(body):
        return NcclEnv(_clean(MODULE_TOOL, m.group(1)), m.group(0).strip())
    for line in body.splitlines():
        if lib := _LIB.search(line):
            return NcclEnv(lib.group(1), line.strip())
    for m in _PATH.finditer(body):
        if d := _NCCL_DIR.search(m.group(1)):
            return NcclEnv(d.group(1), m.group(0).strip())
    return NcclEnv(None, "the module sets no NCCL_VERSION and names no libnccl.so.X.Y.Z or "
                   "versioned nccl folder")
