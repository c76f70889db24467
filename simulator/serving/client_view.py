"""What lies between the client and the engine core (`ClientView`): the API server's latency,
the admission lag of asynchronous scheduling, and the client's own timeout. `simulate` applies
each where it happens, so everything that reacts to a request's end (a `--max-concurrency`
slot, a closed-loop client, the next turn of a session) sees the times the client sees.

* `frontend_s` (F): API-server time outside the engine core per request (HTTP, tokenisation,
  streaming detokenisation; the engine profile's `overheads.per_request_s`). The request
  reaches the engine F after the client sends it; tokens reach the client when the engine
  emits them. So TTFT and E2E grow by F, TPOT and ITL do not, and a client slot is held for
  F longer: a capped or closed-loop client sends its next request when it sees the previous
  one end, and that request reaches the engine F later. (How F splits between the way in and
  the way out changes no client-side number: only the sum enters a request's span and the
  engine's timeline is merely shifted.)
* `lag_steps` (1 under vLLM V1's async scheduling, `scheduler.params.async_scheduling`): the
  engine plans step k+1 while step k runs (`EngineCore.step_with_batch_queue`), so a request
  that arrives while a step is in flight is first scheduled into the step after the next
  one. The replica holds such a request out of one scheduling decision (`Replica.held`); a
  request that finds the engine idle is scheduled at once.
* `timeout_s`: the client gives up on a request that has not finished `timeout_s` after it was
  sent; the server aborts it (vLLM frees its KV when the client disconnects) and it counts as
  failed, with the time it failed (`Records.failed_s`), out of every latency statistic, as the
  clients count failures. None: no timeout (`vllm bench serve`'s aiohttp timeout is 6 h).
  inference-perf with `request_timeout: null` gets aiohttp's default total timeout of 300 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.specs.checks import SpecError


@dataclass(frozen=True)
class ClientView:
    """The client-side times of one engine and load generator (module docstring); the
    default adds nothing."""

    frontend_s: float = 0.0
    lag_steps: int = 0
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        f = self.frontend_s
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and f >= 0):
            raise SpecError(f"frontend_s: {f!r} must be a finite number of seconds >= 0")
        if self.lag_steps not in (0, 1):
            raise SpecError(f"lag_steps: {self.lag_steps!r} must be 0 or 1 (steps of async-scheduling lag)")
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not (math.isfinite(t) and t > f)):
            raise SpecError(f"timeout_s: {t!r} must be a number of seconds > the API-server latency {f} (or none)")
