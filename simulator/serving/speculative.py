"""Speculative decoding inside the event simulation: a replica whose decode steps verify drafts.

`SpecReplica` runs vLLM V1's scheduler with drafts (`sched/speculative.py`) and, each step:

1. **Plans** as vLLM does: a decoding sequence takes q = 1 + k tokens (fewer when the budget is
   short), its blocks must cover computed + q + the lookahead L (k for EAGLE/MTP/draft models);
   they are allocated before the step.
2. **Draws** the acceptance of every verified sequence: request r's j-th verify step uses the
   j-th of its own uniforms U_j from `numpy.random.default_rng((seed, r))` (deterministic, and
   independent of which requests share the step), and accepts A_j = #{i : U_j < u_i} drafts,
   u_i = c_1 ... c_i the unconditional rates of the configured conditional ones c_i (one
   uniform inverts the distribution of the accepted count: P(A >= i) = u_i), cut to the q - 1
   drafts verified.
3. **Prices** the step: the target's verify forward (each verified sequence q tokens on p cached:
   T += q, S += q LM-head rows, Ad += q (p + q/2), R += p + q; prompt chunks as without drafts)
   plus the drafter's catch-up and proposal passes (`cost/speculative.py`).
4. **Emits** at the step's end A + 1 tokens per verified sequence (the accepted drafts and the
   bonus token; at most the outputs it has left): its KV grows by A + 1 (the last token and the
   accepted drafts; the bonus is the next step's input), and the blocks beyond that, the rejected
   drafts' and the unused lookahead's, return to the pool (vLLM keeps them attached to the
   request until its next step allocates them again; the free count between steps differs by
   those blocks, never the blocks a step needs).

ITL is counted per chunk, as `vllm bench serve` counts it (one ITL entry per SSE message, and
vLLM streams one message per engine step per request): a verify step that emits n tokens adds
one gap (the time since that request's previous chunk) and n - 1 tokens without a gap of their
own (`StepLog.merged_tokens`); TPOT = (E2EL - TTFT) / (output - 1) counts every token. So the
bursts of a speculative stream show as fewer, longer ITLs and a TPOT below the mean ITL.

vLLM's spec-decode counters are kept per replica (`n_drafts`, ...): drafts (verify steps with at
least one draft), draft tokens, accepted tokens and accepted tokens per position, as
`vllm bench serve` reports them (`spec_decode_summary`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.cost.roofline import CostModel
from simulator.cost.speculative import SpeculativeDecoding
from simulator.serving.prefix_cache import reservations_after
from simulator.serving.records import Records
from simulator.serving.replica import Replica
from simulator.serving.sched.interface import StepPlan
from simulator.serving.sched.registry import EngineConfig
from simulator.serving.sched.speculative import SpeculativeChunkedPrefill
from simulator.serving.steplog import StepLog
from simulator.serving.steptime import bad_step, step_ok
from simulator.workloads.workload import Workload

#: the schedulers speculative decoding runs under (vLLM V1's)
SPECULATIVE_SCHEDULERS = ("vllm", "vllm-v1")


class SpecReplica(Replica):
    """A replica of vLLM V1 with speculative decoding (module docstring)."""

    emits_several = True  # a verify emits up to k + 1 tokens of a sequence
    __slots__ = ("spec", "drafter", "draft_window", "thresholds", "seed", "draws", "draw_pos", "spec_policy",
                 "n_drafts", "n_draft_tokens", "n_accepted", "accepted_per_pos")

    def __init__(self, index: int, cost: CostModel, cfg: EngineConfig, total_blocks: int, max_model_len: int,
                 wl: Workload, records: Records, log: StepLog, on_finish: Callable[[int, float], None] | None,
                 spec: SpeculativeDecoding) -> None:
        super().__init__(index, cost, cfg, total_blocks, max_model_len, wl, records, log, on_finish)
        c = spec.config
        self.spec = spec
        self.spec_policy = SpeculativeChunkedPrefill(cfg, c.k, c.lookahead_tokens, c.draft_slots_per_seq,
                                                     max_model_len)
        self.policy = self.spec_policy
        self.checks_arrivals = False
        self.idle_segments = False  # every step is planned: emission is random per sequence
        self.drafter = spec.drafter if spec.drafter.cost is not None else None
        self.draft_window = spec.drafter.window
        # -u_i, non-decreasing: A = #{i : U < u_i} = searchsorted(-u, -U, "left")
        self.thresholds = -np.array(c.unconditional, dtype=float)
        self.seed = c.seed
        self.draws: dict[int, list[int]] = {}  # request -> accepted drafts of each of its verify steps
        self.draw_pos: dict[int, int] = {}  # request -> verify steps done
        # vLLM's counters (`vllm:spec_decode_*`): verify steps with drafts, draft tokens,
        # accepted tokens, accepted tokens per draft position
        self.n_drafts = 0
        self.n_draft_tokens = 0
        self.n_accepted = 0
        self.accepted_per_pos = [0] * c.k

    # ------------------------------------------------------------------ acceptance draws
    def _draws_of(self, r: int) -> list[int]:
        """Accepted drafts of each verify step of request r (at most one per output token),
        drawn from the request's own generator."""
        d = self.draws.get(r)
        if d is None:
            u = np.random.default_rng((self.seed, r)).random(max(int(self.out_len[r]), 1))
            d = np.searchsorted(self.thresholds, -u, side="left").tolist()
            self.draws[r] = d
            self.draw_pos[r] = 0
        return d

    def _finish(self, s: int, t_client: float | None = None) -> None:
        r = self.rid[s]
        self.draws.pop(r, None)
        self.draw_pos.pop(r, None)
        super()._finish(s, t_client)

    # ------------------------------------------------------------------ planning
    def _decode_segment(self, t_limit: float) -> None:
        self.run_plan(self.spec_policy.next_step(self, allow_segment=False))

    def run_plan(self, plan: StepPlan) -> None:
        """Preempt, allocate the running sequences' blocks with the lookahead, admit, then run
        the verify step."""
        if plan.reject_head is not None:
            self._reject_head(plan.reject_head)
            return
        for s in plan.preempt:
            self._preempt(s, plan.preempt_to_tail)
        kv, comp, cover = self.kv, self.computed, self.spec_policy.cover
        sched: list[tuple[int, int]] = []
        covers: list[int] = []
        for s, q in plan.running:
            cv = cover(comp[s], q)
            grow = kv.blocks_to_grow(s, cv)
            if grow:
                kv.allocate(s, grow)
            sched.append((s, q))
            covers.append(cv)
        if plan.admit:
            if self.prefix is None:
                admitted = [self._admit(r, tokens) for r, tokens in plan.admit]
            else:
                after = reservations_after(plan.admit, self.bs)
                admitted = [self._admit(r, tokens, after[i]) for i, (r, tokens) in enumerate(plan.admit)]
            for s, q in admitted:
                sched.append((s, q))
                covers.append(comp[s] + q)  # a fresh admission reserves no lookahead
        if sched:
            self._verify_step(sched, covers)
        elif self.waiting and not self.active:
            self._reject_head("could not be scheduled on an empty replica")

    # ------------------------------------------------------------------ one step
    def _step_outcomes(self, sched: list[tuple[int, int]]) -> tuple[tuple, list[int], float, float, int, int,
                                                                       list[int] | None]:
        """The target's statistics (T, S, Ad, Ap, R, Aw, Rw, Pc), the accepted drafts of each
        scheduled sequence (-1: a prompt chunk), the draft's windowed sums (Aw, Rw), and the
        proposing sequences: their count, their contexts' sum after the step (and the contexts,
        for a draft with a window)."""
        comp, prompt, rid = self.computed, self.prompt, self.rid
        W, Wd = self.window, self.draft_window
        T = S = 0
        Ad = Ap = R = Aw = Rw = Pc = Awd = Rwd = 0.0
        outcomes: list[int] = []
        proposing = 0
        ctx_sum = 0
        contexts: list[int] | None = [] if Wd is not None else None
        draws, pos = self.draws, self.draw_pos
        for s, q in sched:
            p = comp[s]
            T += q
            R += p + q
            if p >= prompt[s]:  # a verify: the last token and q - 1 drafts
                S += q
                Ad += q * (p + q / 2.0)
                r = rid[s]
                d = draws.get(r)
                if d is None:
                    d = self._draws_of(r)
                j = pos[r]
                a = d[j] if j < len(d) else 0
                if a > q - 1:
                    a = q - 1
                outcomes.append(a)
                after = p + 1 + a
            else:
                Ap += q * (p + q / 2.0)
                Pc += p
                outcomes.append(-1)
                after = p + q
                if after < prompt[s]:
                    after = -1  # mid-prompt: no token, no proposal
                else:
                    S += 1
            if W is not None:
                Aw += q * min(p + q / 2.0, W)
                Rw += min(p + q, W)
            if Wd is not None:
                Awd += q * min(p + q / 2.0, Wd)
                Rwd += min(p + q, Wd)
            if after >= 0:
                proposing += 1
                ctx_sum += after
                if contexts is not None:
                    contexts.append(after)
        if W is None:
            Aw, Rw = Ad + Ap, R
        if Wd is None:
            Awd, Rwd = Ad + Ap, R
        return (T, S, Ad, Ap, R, Aw, Rw, Pc), outcomes, Awd, Rwd, proposing, ctx_sum, contexts

    def _verify_step(self, sched: list[tuple[int, int]], covers: list[int]) -> None:
        """Price one step (target verify + draft), emit its tokens, release the rejected
        drafts' and the lookahead's blocks (module docstring)."""
        stats, outcomes, Awd, Rwd, proposing, ctx_sum, contexts = self._step_outcomes(sched)
        T, S, Ad, Ap, R, Aw, Rw, Pc = stats
        dt = self.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        if not step_ok(dt):  # the cost model's answer for this shape (`steptime.py`)
            raise bad_step(dt, T, S, R)
        drafter = self.drafter
        if drafter is not None:
            dt += drafter.catch_up_s(T, proposing, Ad, Ap, R, Awd, Rwd, Pc)
            dt += drafter.propose_s(proposing, ctx_sum, contexts)
        if self.prefix is not None and self.prefix.pending_s:
            dt += self.prefix.pending_s
            self.prefix.pending_s = 0.0
        prev = self.clock
        t_end = prev + dt
        lg = self.log
        lg.steps += 1
        lg.batch_token_sum += len(sched)
        lg.busy_s += dt
        # gaps between the starts of the API server's bursts, as `Replica._execute` does
        t_chunk, merge = self._chunk_start(t_end) if self.stream_s else (t_end, None)
        done = self._emit(sched, covers, outcomes, prev, t_chunk)
        self.in_step = len(sched) == len(self.active) and t_chunk == t_end
        self.clock = t_end
        kv = self.kv
        n_verify_tokens = sum(q for (s, q), a in zip(sched, outcomes, strict=True) if a >= 0)
        lg.record(t_end, self.index, len(sched), 1.0 - kv.free_blocks / kv.total_blocks, len(self.waiting),
                  dt, 1, n_verify_tokens, stats)
        if self.debug:
            self.check()
        if self.stream_s:  # one streamed output per emitting sequence (its accepted tokens)
            self._stream_step(t_end, sched, None, done, merge)
        else:
            for s in done:
                self._finish(s)

    def _emit(self, sched: list[tuple[int, int]], covers: list[int], outcomes: list[int], prev: float,
              t_end: float) -> list[int]:
        """Apply the step: KV growth, block release, tokens and their gaps (each chunk's from
        t_end, where the step's chunks start; a request whose last chunk starts there is in
        the API server's waiting burst and merges all its tokens into it); returns the slots
        that finished."""
        comp, prompt, gen, last, outl, rid = (self.computed, self.prompt, self.generated, self.last_tok,
                                              self.outlen, self.rid)
        kv, bs, lg = self.kv, self.bs, self.log
        first_token_s = self.rec_first_token_s
        register = self.prefix.register if self.prefix is not None else None
        regular = 0
        added = 0
        done: list[int] = []
        for (s, q), a, cv in zip(sched, outcomes, covers, strict=True):
            before = comp[s]
            if a < 0:  # a prompt chunk
                after = before + q
                comp[s] = after
                added += q
                if register is not None:
                    register(s, after)
                surplus = -(-cv // bs) - -(-after // bs)
                if surplus > 0:
                    kv.release(s, surplus)
                if after < prompt[s]:
                    continue
                self.n_prefilling -= 1
                n = 1
            else:  # a verify: a accepted drafts + the bonus token
                after = before + 1 + a
                comp[s] = after
                added += 1 + a
                surplus = -(-cv // bs) - -(-after // bs)
                if surplus > 0:
                    kv.release(s, surplus)
                self._count_verify(rid[s], q, a)
                n = 1 + a
            g = gen[s]
            left = outl[s] - g
            if n > left:
                n = left
            if g == 0:
                first_token_s[rid[s]] = t_end
            elif last[s] == t_end:
                lg.loop_merged(n)  # no chunk of its own: last_tok kept
                gen[s] = g + n
                if g + n >= outl[s]:
                    done.append(s)
                continue
            elif last[s] == prev:
                regular += 1
            else:
                lg.gap(t_end - last[s], 1)
            if n > 1:
                lg.merged_tokens += n - 1
            gen[s] = g + n
            last[s] = t_end
            if g + n >= outl[s]:
                done.append(s)
        self.context_sum += added
        lg.gap(t_end - prev, regular)
        return done

    def _count_verify(self, r: int, q: int, a: int) -> None:
        """Request r's verify of q - 1 drafts accepted a of them: its draw position and the
        acceptance counters."""
        self.draw_pos[r] += 1
        if q > 1:
            self.n_drafts += 1
            self.n_draft_tokens += q - 1
            self.n_accepted += a
            per_pos = self.accepted_per_pos
            for i in range(a):
                per_pos[i] += 1


def spec_decode_summary(counters: dict[str, Any]) -> dict[str, Any]:
    """vLLM's spec-decode result keys (`vllm bench serve`, vllm-project/vllm@009e6d4:
    vllm/benchmarks/serve.py) from the summed replica counters (`merged_spec_counters`):
    acceptance rate in percent of draft tokens, acceptance length 1 + accepted / drafts,
    per-position rates accepted_i / drafts."""
    drafts, draft_tokens = counters["num_drafts"], counters["draft_tokens"]
    accepted, per_pos = counters["accepted_tokens"], counters["accepted_per_position"]
    return {
        "spec_decode_acceptance_rate": 100.0 * accepted / draft_tokens if draft_tokens else None,
        "spec_decode_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "spec_decode_num_drafts": int(drafts),
        "spec_decode_draft_tokens": int(draft_tokens),
        "spec_decode_accepted_tokens": int(accepted),
        "spec_decode_per_position_acceptance_rates": [n / drafts for n in per_pos] if drafts else [],
    }


def merged_spec_counters(replicas: list[Any]) -> dict[str, Any] | None:
    """The speculative replicas' counters summed (None when none runs speculative decoding)."""
    spec = [p for p in replicas if isinstance(p, SpecReplica)]
    if not spec:
        return None
    return {"num_drafts": sum(p.n_drafts for p in spec), "draft_tokens": sum(p.n_draft_tokens for p in spec),
            "accepted_tokens": sum(p.n_accepted for p in spec),
            "accepted_per_position": [sum(col) for col in zip(*(p.accepted_per_pos for p in spec), strict=True)]}


__all__ = ["SPECULATIVE_SCHEDULERS", "SpecReplica", "merged_spec_counters", "spec_decode_summary"]
