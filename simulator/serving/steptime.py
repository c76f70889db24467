"""The one check of a step time where the engine uses it: a cost model (a custom one from the
Python API above all) may be bad only for some shapes (NaN above 1,000 tokens, 0 for a 2-token
step, negative above 100 sequences, a string), which the three probes of
`specs.checks.check_cost_model` cannot see. Every step time the engine prices is checked as it
is priced: `bad_step` after a scalar comparison (O(1) per step, a few ns: `0.0 < dt < INF`),
`check_step_times` on an array of them (one vectorised test per priced segment).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from simulator.specs.checks import SpecError, show

INF = math.inf


def step_ok(dt: Any) -> bool:
    """dt is a finite number of seconds > 0 (False for NaN, inf, <= 0 and non-numbers)."""
    try:
        return bool(0.0 < dt < INF)
    except TypeError:
        return False


def checked(dt: Any, T: Any, S: Any, R: Any) -> Any:
    """dt itself when it is a finite number of seconds > 0, else `bad_step` is raised."""
    try:
        if 0.0 < dt < INF:
            return dt
    except TypeError:
        pass
    raise bad_step(dt, T, S, R)


def bad_step(dt: Any, T: Any, S: Any, R: Any) -> SpecError:
    """The error for a step time `dt` that is not a finite number of seconds > 0, naming the
    step's shape (tokens T, sequences S, context R)."""
    return SpecError(f"cost model: step_time({float(T):g} tokens, {float(S):g} seqs, context {float(R):g}) = "
                     f"{show(dt)} must be a finite number of seconds > 0")


def check_step_times(times: Any, T: Any, S: Any, R: Any) -> np.ndarray:
    """`times` (step times from `step_times`, one per step, with the steps' T, S, R as scalars or
    arrays) as a float array, each a finite number of seconds > 0; else `bad_step` for the first
    bad one."""
    try:
        a = np.asarray(times, dtype=float)
        ok = (a > 0.0) & (a < INF)
    except (TypeError, ValueError):
        raise bad_step(times, np.max(T), np.max(S), np.max(R)) from None
    if not ok.all():
        i = int(np.argmin(ok)) if ok.ndim else 0

        def pick(v: Any) -> Any:
            return np.broadcast_to(v, a.shape)[i] if np.ndim(v) else v

        raise bad_step(float(a[i] if a.ndim else a), pick(T), pick(S), pick(R))
    return a
