"""What the client sees of a served request, beyond the engine core: the API server's latency
and the admission lag of asynchronous scheduling (`ClientView`).

    shift_i = frontend_s + lag_steps x tau_i,   tau_i = (finish_i - first_i) / (output_len_i - 1)

`frontend_s`: API-server latency outside the engine core (HTTP, tokenisation, streaming).
`lag_steps` = 1 under vLLM V1's async scheduling: step k+1 is scheduled while step k runs, so a
request that arrives during step k is first scheduled into step k+2, one step later than the
event engine's synchronous scheduler admits it; tau_i (the request's own mean inter-token time)
stands for the step time around its arrival. TTFT and E2E grow by shift_i; TPOT does not.
The engine profile gives both numbers (`profiles.apply.client_view_for`); `simulate(...,
client=ClientView(...))` applies them, the one place they are applied.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from simulator.serving.records import SimResult


@dataclass(frozen=True)
class ClientView:
    """The client-side latency of one engine (module docstring); the default adds nothing."""

    frontend_s: float = 0.0
    lag_steps: int = 0

    def apply(self, res: SimResult) -> SimResult:
        """`res` as the client sees it: first-token and finish times later by shift_i."""
        if self.frontend_s == 0 and self.lag_steps == 0:
            return res
        shift = np.full(len(res.first_token_s), float(self.frontend_s))
        if self.lag_steps:
            out = np.asarray(res.output_len)
            tau = np.where(out > 1, (res.finish_s - res.first_token_s) / np.maximum(out - 1, 1), 0.0)
            shift = shift + self.lag_steps * np.nan_to_num(tau)
        # a shallow copy, not dataclasses.replace: that reads every field, and reading the
        # timeline builds its DataFrame (records.py), which a run that never reads it skips
        seen = copy.copy(res)
        seen.first_token_s = res.first_token_s + shift
        seen.finish_s = res.finish_s + shift
        return seen
