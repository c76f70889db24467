"""Multi-turn sessions as workload data: which earlier request each request waits for.

A workload whose `extra` carries `parent` (an earlier request's index, or -1) and
`think_time_s` describes sessions: request i is sent once its parent has finished and the user
has thought for `think_time_s[i]` (the serving layer's `serving.multiturn` releases it).
"""

from __future__ import annotations

import numpy as np

from simulator.specs.checks import SpecError
from simulator.workloads.workload import Workload

#: (parent per request, think time per request, children of each request)
Deps = tuple[np.ndarray, np.ndarray, dict[int, list[int]]]


def dependencies(wl: Workload, concurrency: int | None) -> Deps | None:
    """The workload's parent links, or None when it has none."""
    parent = wl.extra.get("parent")
    if parent is None or not np.any(np.asarray(parent) >= 0):
        return None
    if concurrency is not None:
        raise SpecError("workload: multi-turn dependencies (parent) need an open-loop workload, "
                        "without a closed loop or concurrency cap (concurrency / max_concurrency)")
    par = np.asarray(parent, dtype=np.int64)
    think = np.asarray(wl.extra.get("think_time_s", np.zeros(len(par))), dtype=float)
    children: dict[int, list[int]] = {}
    for i, p in enumerate(par.tolist()):
        if p >= 0:
            children.setdefault(p, []).append(i)
    return par, think, children
