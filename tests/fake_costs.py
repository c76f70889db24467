"""A step-cost model simple enough to compute schedules by hand (shared by the policy and
concurrency-cap oracle tests)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class LinearCost:
    """step_time = 1 s + 1 ms x tokens in the step (T); nothing else matters."""

    model = SimpleNamespace(sliding_window=None, max_context=10**9, chars_per_token=4.0)
    par = SimpleNamespace(num_gpus=1)

    @staticmethod
    def step_time(T, S, Ad, Ap, R, Aw=None, Rw=None, Pc=0.0):
        return 1.0 + 0.001 * T

    @staticmethod
    def step_times(T, S, Ad, Ap, R, Aw=None, Rw=None, Pc=0.0):
        return np.broadcast_to(1.0 + 0.001 * np.asarray(T, dtype=float), np.shape(Ad)).astype(float)


COST = LinearCost()


def d(tokens):
    """The step time of a step of `tokens` tokens under `COST`."""
    return 1.0 + 0.001 * tokens
