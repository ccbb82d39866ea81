"""The name of the profile a node falls back to when nothing names its hardware, apart from
stetho.profiles: the history and the gate's pinning need only the name, and importing the
profiles' schema (22 dataclasses) was a third of a pre-job gate's imports.
tests/test_gate_imports.py holds it equal to stetho.profiles.DEFAULT_PROFILE."""

DEFAULT_PROFILE = "generic"
