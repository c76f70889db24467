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
* `prompt_token_s` (b): the API server's tokenizer time per prompt token (the engine
  profile's `overheads.per_prompt_token_s`). vLLM's API server tokenises a request's text
  before it hands the token ids to the engine core, one request at a time in arrival order
  (one process, one event loop). So the tokenizer is a FIFO single server after F: request r,
  sent at s_r, reaches the engine at e_r = max(s_r + F, e_(r-1)) + b L_r, with L_r its prompt
  tokens (`TokenizerQueue`). R replicas are R API servers: R tokenizers, each request taken by
  the first free one, and handed to the engine in the order it was sent (e_r >= e_(r-1)), which
  is the single server above at R = 1. Its TTFT and E2E grow by e_r - s_r - F as well, its TPOT and ITL do
  not, and it does not hold up the engine's steps (what a 7,372-token prompt's TTFT shows at
  every TP while the step that prefills it, read off the p99 ITL of the same runs, does not:
  docs/serving_model.md). Requests reach the engine in the order they were sent, as before.
* `stream_output_s` (c): the API server's event-loop time per streamed output (the engine
  profile's `overheads.per_stream_output_s`). vLLM's API server hands every step's outputs to
  their clients one at a time on one event loop (detokenise, SSE chunk, write), so a step's
  outputs leave as a burst: running sequences first, in batch order, then the requests that
  joined the step; the one at place j leaves at max(step end, the previous burst's end) + j c
  (`Replica._stream_step`). A request that reaches the API server during a burst is taken up
  after it (`Pool.through_api_server`, before the tokenizer). TTFT and E2E move by a new
  request's place in its burst; TPOT and ITL keep the engine's gaps. When the loop falls
  behind (c x batch above the step), a step that ends before the loop has begun its burst
  merges into the burst waiting (vLLM's `RequestOutputCollector` keeps one pending output per
  request): the bursts run back to back, each carrying the tokens made since the last, the
  engine's rate holds, the client lags by up to a burst, and an inter-token gap is the time
  between the bursts that carry a request's chunks (one a chunk, as `vllm bench serve` counts).
* `api_servers` (N): API-server processes in front of one replica (vLLM's `--api-server-count`,
  whose default is the data-parallel size): each takes its share of the requests on its own
  event loop and tokenizer. The replica's stream is priced as one loop at c / N (N loops side
  by side, each with 1/N of a step's outputs, the places interleaved), and its tokenizer
  queue has N servers.
* `timeout_s`: the client gives up on a request that has not finished `timeout_s` after it was
  sent; the server aborts it (vLLM frees its KV when the client disconnects) and it counts as
  failed, with the time it failed (`Records.failed_s`), out of every latency statistic, as the
  clients count failures. None: no timeout (`vllm bench serve`'s aiohttp timeout is 6 h).
  inference-perf with `request_timeout: null` gets aiohttp's default total timeout of 300 s.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from simulator.specs.checks import SpecError

#: the largest tokenizer time per prompt token a view accepts (1 ms: a thousand times vLLM's)
MAX_PROMPT_TOKEN_S = 1e-3
#: the largest API-server time per streamed output a view accepts (1 s: no server is that slow;
#: the hand-worked schedules of the tests use tenths of a second against 1 s steps)
MAX_STREAM_OUTPUT_S = 1.0
#: the most API-server processes in front of one replica (vLLM starts one per data-parallel rank)
MAX_API_SERVERS = 1024


def check_prompt_token_s(where: str, b: object) -> None:
    """The tokenizer's seconds per prompt token: a finite number in [0, MAX_PROMPT_TOKEN_S]
    (the view's own check, and the engine profile's at load time, where its file is named)."""
    _check_seconds(where, b, "prompt token", MAX_PROMPT_TOKEN_S)


def check_stream_output_s(where: str, c: object) -> None:
    """The API server's seconds per streamed output: a finite number in [0, MAX_STREAM_OUTPUT_S]."""
    _check_seconds(where, c, "streamed output", MAX_STREAM_OUTPUT_S)


def check_api_servers(where: str, n: object) -> None:
    """API-server processes per replica: an integer in [1, MAX_API_SERVERS]."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_API_SERVERS:
        raise SpecError(f"{where}: {n!r} must be an integer number of API servers in [1, {MAX_API_SERVERS}]")


def _check_seconds(where: str, x: object, per: str, most: float) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not (math.isfinite(x) and 0 <= x <= most):
        raise SpecError(f"{where}: {x!r} must be a number of seconds per {per} in [0, {most}]")


@dataclass(frozen=True)
class ClientView:
    """The client-side times of one engine and load generator (module docstring); the
    default adds nothing."""

    frontend_s: float = 0.0
    lag_steps: int = 0
    timeout_s: float | None = None
    prompt_token_s: float = 0.0
    stream_output_s: float = 0.0
    api_servers: int = 1

    @property
    def loop_output_s(self) -> float:
        """The replica's stream priced as one event loop: c / N (module docstring)."""
        return self.stream_output_s / self.api_servers

    def __post_init__(self) -> None:
        f = self.frontend_s
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and f >= 0):
            raise SpecError(f"frontend_s: {f!r} must be a finite number of seconds >= 0")
        if self.lag_steps not in (0, 1):
            raise SpecError(f"lag_steps: {self.lag_steps!r} must be 0 or 1 (steps of async-scheduling lag)")
        check_prompt_token_s("prompt_token_s", self.prompt_token_s)
        check_stream_output_s("stream_output_s", self.stream_output_s)
        check_api_servers("api_servers", self.api_servers)
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not (math.isfinite(t) and t > f)):
            raise SpecError(f"timeout_s: {t!r} must be a number of seconds > the API-server latency {f} (or none)")


class TokenizerQueue:
    """The API servers' tokenizers as a FIFO queue of `servers` (one per replica; module
    docstring, `prompt_token_s`): `admit(r, t)` takes request r as it reaches them at engine
    time t (send + F), starts it on the first free one and returns when it reaches the engine
    core: e = max(its end there, the previous request's e), so requests reach the engine in
    the order they were sent; one server gives e = max(t, the previous e) + b L_r.
    `reached_s[r]` keeps t (a client deadline counts from the send, F before it:
    `Replica.enqueue`), `wait_s[r]` e - t (the report's breakdown of TTFT). Times handed to
    `admit` must not decrease (the event loops pop them in time order)."""

    __slots__ = ("free", "last", "reached_s", "service", "wait_s")

    def __init__(self, prompt_token_s: float, input_len: np.ndarray, servers: int = 1) -> None:
        self.service: list[float] = (prompt_token_s * np.asarray(input_len, dtype=float)).tolist()
        self.free = [-math.inf] * max(1, int(servers))  # a heap of the servers' free times
        self.last = -math.inf
        self.reached_s = np.zeros(len(self.service))
        self.wait_s = np.full(len(self.service), np.nan)  # NaN: never admitted

    def admit(self, r: int, t: float, reached: float | None = None) -> float:
        free = self.free
        done = max(t, free[0]) + self.service[r]
        heapq.heapreplace(free, done)
        e = self.last = max(done, self.last)
        at = t if reached is None else reached
        self.reached_s[r] = at
        self.wait_s[r] = e - at
        return e

    def stream(self, times: np.ndarray) -> np.ndarray:
        """`admit` over requests 0..n-1 reaching the tokenizer at `times` (sorted): the
        engine arrival of each."""
        out = np.empty(len(times))
        for r, t in enumerate(times.tolist()):
            out[r] = self.admit(r, t)
        return out


def tokenizer_for(view: ClientView, input_len: np.ndarray, servers: int = 1) -> TokenizerQueue | None:
    """The run's tokenizer queue (`servers`: one per replica), None when the view prices no
    tokenisation (b = 0: every time is then what it was without the queue, bit for bit)."""
    return TokenizerQueue(view.prompt_token_s, input_len, servers) if view.prompt_token_s > 0 else None
