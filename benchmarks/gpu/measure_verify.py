"""Speculative decoding's verify step on one GPU: a Llama-3.1-8B forward of q tokens per sequence
on a KV cache of L tokens, against q = 1 (a plain decode step), for the batch sizes where
llmsim's crossover lives (issue 23).

What it settles: llmsim prices a verify step as q tokens of causal work per sequence (T = B q
GEMM rows, logits at every verified position, attention q (L + q/2) pairs per sequence,
`cost/speculative.py`), so the step grows with B q once the GEMMs leave the bandwidth-bound
regime. This script measures that growth: `verify.csv` has one row per (B, L, q, mode) with the
median step time; `compare_verify.py` (CPU, the repository installed) puts llmsim's prediction
beside it.

Same conventions as `measure_gpu.py` (whose `Llama`, `Bench` and `measure` it reuses): random
bf16 weights and data from a seeded generator, CUDA events, medians of >= 10 repetitions,
`eager` and `cuda_graph` modes. The causal mask of a verify step is lower-right aligned (query
i of q sees the L cached tokens and queries 0..i): `torch.nn.attention.bias.causal_lower_right`
where PyTorch has it, else an explicit boolean mask.

Run (H200 or H100, about 1-2 min; `--quick --device cpu` for a tiny CPU check):

    python3 benchmarks/gpu/measure_verify.py --out $OUT
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure_gpu import LLAMA8B, TINY, Bench, Llama, measure, randn  # noqa: E402

BATCHES = [1, 8, 32, 64, 128]
QS = [1, 2, 4, 8]
CONTEXTS = [1024]
COLUMNS = ["B", "L", "q", "tokens", "mode", "n_reps", "time_ms", "time_ms_min", "time_ms_p90", "status"]


def lower_right_mask(T: int, S: int, dev: torch.device):
    """The verify step's causal mask: query t (of T) sees keys 0 .. S - T + t."""
    try:
        from torch.nn.attention.bias import causal_lower_right
        return causal_lower_right(T, S)
    except Exception:  # older PyTorch: an explicit boolean mask (True = attend)
        q = torch.arange(T, device=dev).view(T, 1)
        k = torch.arange(S, device=dev).view(1, S)
        return k <= q + (S - T)


class VerifyLlama(Llama):
    """`measure_gpu.Llama` with a lower-right causal mask and logits at every position (what
    a verify step computes: the target's distribution after each draft)."""

    def verify(self, tokens, pos0, kcache, vcache, mask):
        c = self.cfg
        hq, hkv, D = c["heads"], c["kv_heads"], c["head_dim"]
        B, T = tokens.shape
        S = pos0 + T
        h = F.embedding(tokens, self.embed)
        cos = self.cos[pos0:S].view(1, T, 1, D)
        sin = self.sin[pos0:S].view(1, T, 1, D)
        for li, W in enumerate(self.layers):
            x = self.rms(h, W["ln1"])
            q, k, v = torch.matmul(x, W["wqkv"].t()).split([hq * D, hkv * D, hkv * D], dim=-1)
            q = q.view(B, T, hq, D)
            k = k.view(B, T, hkv, D)
            v = v.view(B, T, hkv, D)
            q = q * cos + self.rot(q) * sin
            k = k * cos + self.rot(k) * sin
            kc, vc = kcache[li, :B], vcache[li, :B]
            kc[:, :, pos0:S].copy_(k.transpose(1, 2))
            vc[:, :, pos0:S].copy_(v.transpose(1, 2))
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kc[:, :, :S], vc[:, :, :S],
                                               attn_mask=mask, enable_gqa=True)
            o = o.transpose(1, 2).reshape(B, T, hq * D)
            h = h + torch.matmul(o, W["wo"].t())
            x = self.rms(h, W["ln2"])
            g, u = torch.matmul(x, W["wgu"].t()).chunk(2, dim=-1)
            h = h + torch.matmul(F.silu(g) * u, W["wd"].t())
        h = self.rms(h, self.norm)
        return torch.matmul(h, self.lm_head.t()).argmax(-1)  # (B, T): every verified position


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny model, 3 repetitions (CPU check)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--budget-s", type=float, default=240.0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    dev = torch.device(args.device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(args.seed)
    log_path = os.path.join(args.out, "verify_log.txt")

    def log(msg, quiet=False):
        with open(log_path, "a") as fh:
            fh.write(msg + "\n")
        if not quiet:
            print(msg, flush=True)

    bench = Bench(dev, args.quick, log)
    cfg = TINY if args.quick else LLAMA8B
    batches = [1, 2] if args.quick else BATCHES
    contexts = [32] if args.quick else CONTEXTS
    model = VerifyLlama(cfg, dev, gen, max(contexts) + max(QS) + 1)
    modes = ["eager", "cuda_graph"] if bench.cuda else ["eager"]
    path = os.path.join(args.out, "verify.csv")
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for L in contexts:
            S = L + max(QS)
            shape = (cfg["layers"], max(batches), cfg["kv_heads"], S, cfg["head_dim"])
            kc = randn(shape, torch.bfloat16, dev, gen)
            vc = randn(shape, torch.bfloat16, dev, gen)
            for B in batches:
                for q in QS:
                    if time.perf_counter() - t0 > args.budget_s:
                        log(f"budget reached before B={B} q={q}")
                        return 0
                    tok = torch.randint(0, cfg["vocab"], (B, q), device=dev, generator=gen)
                    mask = lower_right_mask(q, L + q, dev) if q > 1 else None

                    def step(tok=tok, L=L, mask=mask, kc=kc, vc=vc):
                        return model.verify(tok, L, kc, vc, mask)
                    for mode, st, status in measure(bench, modes, step, reps=3 if args.quick else 15,
                                                    flush=False, warmup=2):
                        ms = {k: st[k] * 1e3 if isinstance(st[k], float) else st[k]
                              for k in ("time_s", "time_s_min", "time_s_p90")}
                        w.writerow({"B": B, "L": L, "q": q, "tokens": B * q, "mode": mode, "n_reps": st["n_reps"],
                                    "time_ms": ms["time_s"], "time_ms_min": ms["time_s_min"],
                                    "time_ms_p90": ms["time_s_p90"], "status": status})
                        fh.flush()
                        log(f"verify B={B:4d} L={L:5d} q={q} {mode:10s} {ms['time_s']:9.3f} ms ({status})")
                    del step, tok
                    bench.free()
            del kc, vc
            bench.free()
    log(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
