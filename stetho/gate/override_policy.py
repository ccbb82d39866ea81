"""What a gate policy says about overrides (OverridePolicy, and the principal names it may
list), apart from the override records and their signed bytes (stetho.gate.overrides) and the
ssh-keygen signatures (stetho.gate.signatures): every gate loads its policy, and a gate with no
override repository never needs the records, their checks and their dataclasses."""

from __future__ import annotations

import re
from pathlib import Path

from stetho.core.record import record

#: A principal that can be a person's identity: a plain name, no patterns (`*`, `?`, `!`).
PRINCIPAL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")


@record
class OverridePolicy:
    """What a gate policy says about overrides: the allowed signers file that is the trust
    root, the principals who may approve, the sentence, the longest life. `problem` says why
    overrides are off under this policy (an approvers section stetho cannot use)."""

    name: str
    principals: tuple[str, ...]
    signers: Path | None
    acknowledgement: str
    max_lifetime_s: float
    problem: str | None = None

    def disabled(self) -> str | None:
        """Why no override can pass under this policy, or None. An empty sentence would
        otherwise be matched by an empty --acknowledge."""
        if self.problem:
            return f"policy {self.name!r}: {self.problem}: overrides are disabled"
        if self.signers is None:
            return (f"policy {self.name!r} names no allowed signers file (overrides: approvers: "
                    "signers:): overrides are disabled")
        if not self.principals:
            return f"policy {self.name!r} names no approver principals: overrides are disabled"
        if not self.acknowledgement.strip():
            return (f"policy {self.name!r} has no acknowledgement sentence: overrides are "
                    "disabled")
        return None
