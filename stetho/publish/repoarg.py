"""A repository argument, checked before git sees it: what stetho will hand to git as a
repository, and the transports git itself is limited to.

A user (or a configuration file) names a repository; git reads a leading `-` as an option
(`--upload-pack=touch X` runs a command), `ext::` and `fd::` as commands to run, and an ssh host
starting with `-` as an ssh option. So: a leading `-`, control characters, remote helpers
(`transport::address`), an ssh host starting with `-` and any scheme but https, ssh and file
are refused; and every git command runs with `protocol.allow=never` plus those three, so a URL
that reaches git some other way (a working clone's configured remote) is held to them too.
"""

from __future__ import annotations

import re
from pathlib import Path

from stetho.errors import ConfigError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9._-]{2,}:(?!//)[^\s]")
ALLOWED_SCHEMES = ("https", "ssh", "file")
#: git itself refuses every other transport too (ext::, fd::, git://, plain http), also for a
#: URL that reaches git some other way (a working clone's configured remote, a redirect).
PROTOCOLS: tuple[str, ...] = ("-c", "protocol.allow=never", *(x for p in ALLOWED_SCHEMES
                                              for x in ("-c", f"protocol.{p}.allow=always")))


def check_repo(repo: str, what: str = "repository") -> str:
    """`repo` as given, if it is a path or a URL stetho will hand to git; else ConfigError.
    Refused: empty, a leading '-' (git would read an option), control characters, and any URL
    scheme but https, ssh and file (no ext::, no fd::, no plain http or git://)."""
    text = (repo or "").strip()
    if not text:
        raise ConfigError(f"no {what} given")
    if text.startswith("-"):
        raise ConfigError(f"{what} {text!r} starts with '-': refused (git would read it as an "
                          "option)")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ConfigError(f"{what} {text!r} has control characters: refused")
    m = _SCHEME.match(text)
    if m and m.group(1).lower() not in ALLOWED_SCHEMES:
        raise ConfigError(f"{what} {text!r}: scheme {m.group(1)}:// is not allowed (use "
                          f"{', '.join(ALLOWED_SCHEMES)}, scp-like user@host:path, or a path)")
    if "::" in text.split("/", 1)[0]:
        raise ConfigError(f"{what} {text!r}: git remote helpers (transport::address) are not "
                          "allowed")
    host = _host(text)
    if host is not None and host.startswith("-"):
        raise ConfigError(f"{what} {text!r}: the host {host!r} starts with '-': refused (ssh "
                          "would read it as an option)")
    return text


def _host(text: str) -> str | None:
    """The user@host part of a URL or scp-like address, None for a path."""
    m = _SCHEME.match(text)
    if m:
        return text[m.end():].split("/", 1)[0].rsplit("@", 1)[-1]
    if _SCP_LIKE.match(text) or re.match(r"^[^/:]+@", text):
        return text.split(":", 1)[0].rsplit("@", 1)[-1]
    return None


def is_remote(repo: str) -> bool:
    return bool(_SCHEME.match(repo)) or (bool(_SCP_LIKE.match(repo))
                                         and not Path(repo).expanduser().exists())
