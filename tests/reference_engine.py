"""A slow, obviously correct serving loop: the oracle for simulator.serving.simulate.

One Python object per sequence, one iteration per engine step, no segments, no slot arrays,
no scheduler/replica split. It implements the documented policies with open-loop arrivals:

* `vllm`: chunked prefill, running sequences first, FCFS admission (whole prompt must fit), paged KV,
  preempt-the-newest by recompute, no admission in a step that preempted;
* `prefill-priority`: prompts never split; a prefill-only step (whole prompts, FCFS) whenever
  the head of the queue fits, otherwise the running sequences; prompts over the token budget
  rejected at arrival;
* `static`: a batch of FCFS requests (KV for prompt + output reserved) prefilled in one step
  and decoded, every member priced, until its longest member ends;

on `replicas` replicas behind round-robin (request i on replica i mod N: the router looks
at no state, so each replica is an independent run on its share of the requests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Seq:
    rid: int
    prompt: int  # tokens to prefill before the next emission (input + generated, after preemption)
    out_len: int
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    order: int = 0
    last_tok: float = 0.0


def reference_simulate(cost, arrivals, input_len, output_len, *, max_num_seqs, max_num_batched_tokens,
                       total_blocks, block_size=16, max_model_len=10**9, scheduler="vllm", replicas=1):
    if replicas > 1:
        return _round_robin(cost, arrivals, input_len, output_len, replicas, max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=max_num_batched_tokens, total_blocks=total_blocks,
                            block_size=block_size, max_model_len=max_model_len, scheduler=scheduler)
    if scheduler == "static":
        return _static(cost, arrivals, input_len, output_len, max_num_seqs=max_num_seqs,
                       total_blocks=total_blocks, block_size=block_size, max_model_len=max_model_len)
    ref = _Continuous(cost, arrivals, input_len, output_len, max_num_seqs, max_num_batched_tokens,
                      total_blocks, block_size, max_model_len, whole=scheduler == "prefill-priority")
    return ref.run()


class _Continuous:
    """vllm / prefill-priority on one replica, one step per loop iteration."""

    def __init__(self, cost, arrivals, input_len, output_len, max_num_seqs, max_num_batched_tokens,
                 total_blocks, block_size, max_model_len, whole):
        self.cost, self.arrivals, self.input_len, self.output_len = cost, arrivals, input_len, output_len
        self.max_num_seqs, self.budget0 = max_num_seqs, max_num_batched_tokens
        self.total_blocks, self.block_size, self.max_model_len = total_blocks, block_size, max_model_len
        self.whole = whole  # prompts never split (prefill-priority)
        n = len(arrivals)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preempt = np.zeros(n, dtype=int)
        self.rejected = np.zeros(n, dtype=bool)
        self.itl: list[float] = []
        self.waiting: list[int] = []
        self.gen_before: dict[int, int] = {}
        self.last_before: dict[int, float] = {}
        self.running: list[Seq] = []
        self.free = total_blocks
        self.clock = 0.0
        self.counter = 0
        self.window = cost.model.sliding_window.window if cost.model.sliding_window else None

    def blocks_for(self, tokens):
        return math.ceil(tokens / self.block_size)

    def run(self):
        n = len(self.arrivals)
        nxt = 0
        while nxt < n or self.waiting or self.running:
            if not self.waiting and not self.running:
                self.clock = max(self.clock, self.arrivals[nxt])
            while nxt < n and self.arrivals[nxt] <= self.clock:
                self.arrive(nxt)
                nxt += 1
            if not self.waiting and not self.running:
                continue
            batch = self.schedule()
            if batch:
                self.step(batch)
            elif self.waiting and not self.running:
                # nothing runs and the head can never be admitted: impossible after the
                # arrival checks, but never spin forever
                self.rejected[self.waiting.pop(0)] = True
        return {"first": self.first, "finish": self.finish, "preemptions": self.preempt,
                "rejected": self.rejected, "itl": np.sort(np.array(self.itl)), "free_blocks_end": self.free}

    def arrive(self, r):
        need = self.input_len[r] + self.output_len[r]
        if (need > self.max_model_len or self.blocks_for(need) > self.total_blocks
                or (self.whole and self.input_len[r] > self.budget0)):
            self.rejected[r] = True
        else:
            self.waiting.append(r)

    # ---- schedule
    def schedule(self):
        batch: list[tuple[Seq, int]] = []
        budget = self.budget0
        if self.whole and self.waiting and self.admit_head(budget, batch):
            # prefill-priority: the head fits, so this step prefills whole prompts only
            budget -= batch[0][1]
            self.admit_more(budget, batch)
            return batch
        budget, preempted = self.schedule_running(budget, batch)
        if not preempted and not self.whole:
            self.admit_more(budget, batch)
        return batch

    def admit_more(self, budget, batch):
        while self.waiting and budget > 0:
            got = self.admit_head(budget, batch)
            if not got:
                break
            budget -= got

    def admit_head(self, budget, batch):
        """Admit the head of the queue (first chunk, or whole prompt) if it fits; returns its
        new tokens, or 0."""
        r = self.waiting[0]
        g = self.gen_before.get(r, 0)
        prompt = self.input_len[r] + g
        need = prompt if self.whole else min(prompt, budget)
        nb = self.blocks_for(need)
        # vLLM V1 0.33 full-prompt gate: blocks for the whole remaining prompt must be free;
        # a resumed whole prompt over the full budget runs alone once the replica is idle
        # (never rejected after it produced tokens)
        oversize_ok = self.whole and g > 0 and budget == self.budget0 and not self.running
        if ((need > budget and not oversize_ok) or self.blocks_for(prompt) > self.free
                or len(self.running) >= self.max_num_seqs):
            return 0
        self.waiting.pop(0)
        self.gen_before.pop(r, None)
        s = Seq(r, prompt, self.output_len[r], generated=g, blocks=nb, order=self.counter,
                last_tok=self.last_before.pop(r, 0.0))
        self.counter += 1
        self.free -= nb
        self.running.append(s)
        batch.append((s, need))
        return need

    def schedule_running(self, budget, batch):
        preempted = False
        for s in list(self.running):
            if s not in self.running:
                continue
            if budget <= 0:
                break
            rem = s.prompt - s.computed
            need = 1 if rem <= 0 else (rem if self.whole else min(rem, budget))
            if need > budget:
                continue
            extra = self.blocks_for(s.computed + need) - s.blocks
            ok = True
            while extra > self.free:
                victim = max(self.running, key=lambda x: x.order)
                self.preempt_seq(victim)
                preempted = True
                if victim is s:
                    ok = False
                    break
            if not ok:
                continue
            s.blocks += extra
            self.free -= extra
            batch.append((s, need))
            budget -= need
        return budget, preempted

    def preempt_seq(self, victim):
        self.running.remove(victim)
        self.free += victim.blocks
        self.gen_before[victim.rid] = victim.generated
        self.last_before[victim.rid] = victim.last_tok
        self.preempt[victim.rid] += 1
        self.waiting.insert(0, victim.rid)

    # ---- price and run one step from each sequence's (q, p)
    def step(self, batch):
        window = self.window
        T = S = 0
        Ad = Ap = R = Aw = Rw = Pc = 0.0
        for s, q in batch:
            p = s.computed
            T += q
            R += p + q
            if q == 1 and p >= s.prompt:
                Ad += p + 0.5
                Aw += min(p + 0.5, window) if window else 0
            else:
                Ap += q * (p + q / 2)
                Pc += p
                Aw += q * min(p + q / 2, window) if window else 0
            Rw += min(p + q, window) if window else 0
            if p + q >= s.prompt:
                S += 1
        if not window:
            Aw, Rw = Ad + Ap, R
        self.clock += self.cost.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        for s, q in batch:
            s.computed += q
            if s.computed >= s.prompt:
                self.emit(s)

    def emit(self, s):
        if s.generated == 0:
            self.first[s.rid] = self.clock
        else:
            self.itl.append(self.clock - s.last_tok)
        s.generated += 1
        s.last_tok = self.clock
        if s.generated >= s.out_len:
            self.finish[s.rid] = self.clock
            self.free += s.blocks
            self.running.remove(s)


def _static(cost, arrivals, input_len, output_len, *, max_num_seqs, total_blocks, block_size, max_model_len):
    """Static batching, one step at a time: every member of the batch is priced in every step
    (padding) until the longest member ends."""
    n = len(arrivals)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    rejected = np.zeros(n, dtype=bool)
    itl: list[float] = []
    window = cost.model.sliding_window.window if cost.model.sliding_window else None
    cap = window if window else math.inf
    waiting: list[int] = []
    clock = 0.0
    nxt = 0
    while nxt < n or waiting:
        if not waiting:
            clock = max(clock, arrivals[nxt])
        while nxt < n and arrivals[nxt] <= clock:
            need = input_len[nxt] + output_len[nxt]
            if need > max_model_len or math.ceil(need / block_size) > total_blocks:
                rejected[nxt] = True
            else:
                waiting.append(nxt)
            nxt += 1
        if not waiting:
            continue
        batch: list[int] = []
        used = 0
        while waiting and len(batch) < max_num_seqs:
            nb = math.ceil((input_len[waiting[0]] + output_len[waiting[0]]) / block_size)
            if used + nb > total_blocks:
                break
            used += nb
            batch.append(waiting.pop(0))
        ins = [int(input_len[r]) for r in batch]
        # prefill: every prompt whole, causal: q (0 + q/2) query-key pairs each
        T = float(sum(ins))
        Ap = sum(q * q / 2.0 for q in ins)
        Aw = sum(q * min(q / 2.0, cap) for q in ins) if window else Ap
        Rw = sum(min(q, cap) for q in ins) if window else T
        clock += cost.step_time(T, float(len(batch)), 0.0, Ap, T, Aw, Rw)
        for r in batch:
            first[r] = clock
        longest = max(int(output_len[r]) for r in batch)
        for k in range(1, longest):  # decode step k: member contexts p = input + k - 1
            ps = [q + k - 1 for q in ins]
            Ad = sum(p + 0.5 for p in ps)
            R = sum(p + 1.0 for p in ps)
            Awd = sum(min(p + 0.5, cap) for p in ps) if window else Ad
            Rwd = sum(min(p + 1.0, cap) for p in ps) if window else R
            dt = cost.step_time(float(len(batch)), float(len(batch)), Ad, 0.0, R, Awd, Rwd)
            clock += dt
            for r in batch:
                if k < output_len[r]:  # this step made token k + 1 of r
                    itl.append(dt)
                    if k + 1 == output_len[r]:
                        finish[r] = clock
        for r in batch:
            if output_len[r] == 1:
                finish[r] = first[r]
    return {"first": first, "finish": finish, "preemptions": np.zeros(n, dtype=int), "rejected": rejected,
            "itl": np.sort(np.array(itl)), "free_blocks_end": total_blocks}


def _round_robin(cost, arrivals, input_len, output_len, replicas, **kw):
    """Request i on replica i mod N; each replica an independent single-replica run."""
    n = len(arrivals)
    out = {"first": np.full(n, np.nan), "finish": np.full(n, np.nan), "preemptions": np.zeros(n, dtype=int),
           "rejected": np.zeros(n, dtype=bool), "replica": np.arange(n) % replicas}
    itl = []
    free_end = []
    for k in range(min(replicas, n)):
        idx = np.arange(k, n, replicas)
        part = reference_simulate(cost, np.asarray(arrivals)[idx], np.asarray(input_len)[idx],
                                  np.asarray(output_len)[idx], **kw)
        for key in ("first", "finish", "preemptions", "rejected"):
            out[key][idx] = part[key]
        itl.append(part["itl"])
        free_end.append(part["free_blocks_end"])
    out["itl"] = np.sort(np.concatenate(itl)) if itl else np.zeros(0)
    out["free_blocks_end"] = free_end
    return out
