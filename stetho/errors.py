"""The errors the CLI maps to exit codes. Library code raises these; only the CLI exits."""

from __future__ import annotations


class StethoError(Exception):
    """Base class. `exit_code` is what the CLI returns for it."""

    exit_code = 3


class ConfigError(StethoError):
    """A malformed profile, policy or flag: exit 2, naming the file and line."""

    exit_code = 2


class EvaluationError(StethoError):
    """Could not evaluate at all (no evidence, unreadable bundle): exit 3."""

    exit_code = 3


class Interrupted(StethoError):
    """Stopped from outside (a signal) before it finished; the CLI exits 128 + the signal."""

    exit_code = 130
