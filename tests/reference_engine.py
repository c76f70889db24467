"""A slow, obviously correct serving loop: the oracle for simulator.engine.

One Python object per sequence, one iteration per engine step, no segments, no slot arrays.
It implements the same documented policy (vLLM chunked prefill, FCFS admission, paged KV,
preempt-the-newest by recompute) for a single replica with open-loop arrivals.
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
                       total_blocks, block_size=16, max_model_len=10**9):
    n = len(arrivals)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    preempt = np.zeros(n, dtype=int)
    rejected = np.zeros(n, dtype=bool)
    itl: list[float] = []
    waiting: list[int] = []
    gen_before: dict[int, int] = {}
    last_before: dict[int, float] = {}
    running: list[Seq] = []
    free = total_blocks
    clock = 0.0
    nxt = 0
    counter = 0
    window = cost.model.sliding_window.window if cost.model.sliding_window else None

    def blocks_for(tokens):
        return math.ceil(tokens / block_size)

    while nxt < n or waiting or running:
        if not waiting and not running:
            clock = max(clock, arrivals[nxt])
        while nxt < n and arrivals[nxt] <= clock:
            need = input_len[nxt] + output_len[nxt]
            if need > max_model_len or blocks_for(need) > total_blocks:
                rejected[nxt] = True
            else:
                waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            continue
        # ---- schedule
        budget = max_num_batched_tokens
        batch: list[tuple[Seq, int]] = []
        preempted = False
        for s in list(running):
            if s not in running:
                continue
            if budget <= 0:
                break
            rem = s.prompt - s.computed
            need = 1 if rem <= 0 else min(rem, budget)
            extra = blocks_for(s.computed + need) - s.blocks
            ok = True
            while extra > free:
                victim = max(running, key=lambda x: x.order)
                running.remove(victim)
                free += victim.blocks
                gen_before[victim.rid] = victim.generated
                last_before[victim.rid] = victim.last_tok
                preempt[victim.rid] += 1
                waiting.insert(0, victim.rid)
                preempted = True
                if victim is s:
                    ok = False
                    break
            if not ok:
                continue
            s.blocks += extra
            free -= extra
            batch.append((s, need))
            budget -= need
        if not preempted:
            while waiting and budget > 0 and len(running) < max_num_seqs:
                r = waiting[0]
                g = gen_before.get(r, 0)
                prompt = input_len[r] + g
                need = min(prompt, budget)
                nb = blocks_for(need)
                if nb > free:
                    break
                waiting.pop(0)
                gen_before.pop(r, None)
                s = Seq(r, prompt, output_len[r], generated=g, blocks=nb, order=counter,
                        last_tok=last_before.pop(r, 0.0))
                counter += 1
                free -= nb
                running.append(s)
                batch.append((s, need))
                budget -= need
        if not batch:
            continue
        # ---- price the step from each sequence's (q, p)
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
        clock += cost.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        for s, q in batch:
            s.computed += q
            if s.computed >= s.prompt:
                if s.generated == 0:
                    first[s.rid] = clock
                else:
                    itl.append(clock - s.last_tok)
                s.generated += 1
                s.last_tok = clock
                if s.generated >= s.out_len:
                    finish[s.rid] = clock
                    free += s.blocks
                    running.remove(s)
    return {"first": first, "finish": finish, "preemptions": preempt, "rejected": rejected,
            "itl": np.sort(np.array(itl)), "free_blocks_end": free}
