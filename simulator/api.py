"""Convenience functions of the public Python API (`import simulator as llmsim`; docs/api.md).

Everything else in the public API is a re-export of the module that implements it; this
module only holds the few helpers that have no better home.
"""

from __future__ import annotations

from typing import Any


def make_workload(workload: str = "azure-conv", num_requests: int = 1000, rate: float | None = None,
                  **kw: Any) -> Any:
    """The request stream `llmsim simulate -w WORKLOAD -n N -r RATE ...` would serve.

    `workload`: a built-in trace (``azure-conv``, ``azure-code``), a trace file, or
    ``random`` (synthetic lengths from `input_len`, `output_len`, `range_ratio`; Poisson or,
    with `burstiness` != 1, gamma arrivals at `rate`, inf = all at t = 0). A trace replays its
    own timestamps unless `rate` is given. Other keywords: any `Scenario` field (`seed`,
    `burstiness`, `concurrency`, `input_len`, `output_len`, `range_ratio`, `skip_bad_rows`).
    Returns a `Workload` (arrays `arrival_s`, `input_len`, `output_len`).
    """
    from simulator.scenario import Scenario

    return Scenario(workload=workload, num_requests=num_requests, rate=rate, **kw).make_workload()


def run(**fields: Any) -> dict[str, Any]:
    """Simulate one scenario given as `Scenario` keyword fields; returns vLLM's summary dict.

    ``llmsim.run(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv",
    num_requests=200)`` is ``llmsim simulate -m ... -H ... -w ... -n 200 --json``.
    """
    from simulator.scenario import Scenario

    return Scenario(**fields).run()[1]


__all__ = ["make_workload", "run"]
