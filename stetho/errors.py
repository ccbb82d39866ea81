"""The errors the CLI maps to exit codes. Library code raises these; only the CLI exits."""

from __future__ import annotations


class StethoError(Exception):
    """Base class. `exit_code` is what the CLI returns for it."""

    exit_code = 3


class ConfigError(StethoError):
    """A malformed profile, policy or flag: exit 2, naming the file and line."""

    exit_code = 2


class WriteFailed(ConfigError):
    """An output could not be written (a full disk, a read-only folder): named, with the
    reason ("cannot write X: No space left on device"). A ConfigError where a command has
    nothing but that output to give (exit 2, a path that cannot be a file); a check run names
    it after its verdict line and exits 3."""


class EvaluationError(StethoError):
    """Could not evaluate at all (no evidence, unreadable bundle): exit 3."""

    exit_code = 3


class Interrupted(StethoError):
    """Stopped from outside (a signal) before it finished; the CLI exits 128 + the signal."""

    exit_code = 130
