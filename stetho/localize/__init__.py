"""Localization: find the bad node, link or switch in a fleet with few group benchmarks.

topology (the fabric as a tree) -> search (adaptive group-testing steps) -> judge (noise-aware
verdicts) -> engine (rounds of disjoint groups through a runner) -> report (what to do first,
JSON, markdown, history). Runners (runners.py) and the simulated fabric (fabric.py) are
interchangeable: the search sees only verdicts.
"""
