"""Benchmarks as data: `benchmarks/*.yml` definitions and their loader (`spec`).

A benchmark names a command (argv, no shell), the parser that reads its output and the metrics
taken from the parsed result, with units, direction and the suites it belongs to. Running them
is the runner's job; this package only loads and validates the definitions.
"""
