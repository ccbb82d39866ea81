"""Simulated nodes: serve real recorded tool outputs, with injected faults, to the checks."""
