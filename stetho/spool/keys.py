"""Per-node spool keys: HMAC(secret, "stetho-spool:" + node).

The controller holds one secret; each node is provisioned with its own key only (`stetho
spool key NODE` prints it). A file in `<spool>/n01/` must be signed with n01's key, so a node
that holds its key can sign for itself and for no other node, and a file copied from one
node's folder into another's fails verification there.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from stetho.errors import ConfigError

#: What the signature line of a spool file starts with: the algorithm, then the hex MAC.
SCHEME = "hmac-sha256:"
CONTEXT = b"stetho-spool:"


def node_key(secret: bytes, node: str) -> bytes:
    """`node`'s key (hex text, as provisioned in its key file) from the controller's secret."""
    from stetho.core import hostlist

    hostlist.validate(node)
    if len(secret) < 16:
        raise ConfigError("the spool secret is shorter than 16 bytes: make one with "
                          "`head -c 32 /dev/urandom | base64 > SECRET` (STETHO_SPOOL_SECRET)")
    return hmac.new(secret, CONTEXT + node.encode(), hashlib.sha256).hexdigest().encode()


def sign(key: bytes, body: bytes) -> str:
    """The signature line for a file's `body`: SCHEME + HMAC-SHA256(key, body) in hex."""
    return SCHEME + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(key: bytes, body: bytes, signature: str) -> bool:
    """Whether `signature` is `body` signed with `key` (in constant time)."""
    return hmac.compare_digest(sign(key, body), signature)


def read_key(path: Path, what: str) -> bytes:
    """A key or secret file's bytes (surrounding whitespace dropped), or a ConfigError naming
    the file and the setting."""
    try:
        data = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    if not data:
        raise ConfigError(f"the {what} {path} is empty")
    return data
