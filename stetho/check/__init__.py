"""The use case "check": one request in, one outcome out, every output written from it.

`run(CheckRequest(...))` collects or loads the evidence, runs the checks (stetho.checking, the
pytest runner), records the run in history when asked and writes the outputs the request
selects (stetho.check.outputs). `stetho check`, `bench run`, `gate --local`, the sweep's own
evaluation and baseline screening all call it.
"""

from stetho.check.outcome import CheckOutcome, NothingSelected
from stetho.check.pipeline import run
from stetho.check.request import CheckRequest, Outputs, SpoolTarget

__all__ = ["CheckOutcome", "CheckRequest", "NothingSelected", "Outputs", "SpoolTarget", "run"]
