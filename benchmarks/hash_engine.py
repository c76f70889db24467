"""Bit-identity check for engine speed work: one SHA-256 per scenario over every result field.

Run: python benchmarks/hash_engine.py > before.txt; (change); python benchmarks/hash_engine.py | diff before.txt -
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

import simulator as llmsim

try:  # the layered package (issue 21)
    from simulator.serving.disagg import KVLink, simulate_disagg
    from simulator.workloads import traces as T
    from simulator.workloads import workload as W
    from simulator.workloads.shared_prefix import multi_turn_chats, shared_prefix
except ImportError:  # earlier revisions: one flat package (the same script runs on both)
    from simulator.disagg import KVLink, simulate_disagg  # type: ignore[no-redef]
    from simulator.prefix import multi_turn_chats, shared_prefix  # type: ignore[no-redef]

    from simulator import workload as W  # type: ignore[no-redef]
    T = W  # type: ignore[misc]

EngineConfig, simulate, make_cost_model = llmsim.EngineConfig, llmsim.simulate, llmsim.make_cost_model

def digest(res) -> str:
    h = hashlib.sha256()
    for name in ("arrival_s", "input_len", "output_len", "first_token_s", "finish_s", "preemptions", "replica",
                 "status", "itl_values_s", "itl_counts", "scheduled_s", "cached_tokens"):
        a = getattr(res, name)
        h.update(name.encode())
        if a is not None:
            h.update(np.ascontiguousarray(a).tobytes())
    h.update(repr(sorted(res.reasons.items())).encode())
    h.update(res.timeline.to_csv(float_format="%r").encode())
    h.update(repr(sorted((k, repr(v)) for k, v in res.meta.items())).encode())
    return h.hexdigest()[:16]


def scenarios():
    cost = make_cost_model("codellama-34b", "a100-sxm-80gb", tp=2)
    small = make_cost_model("llama-2-7b", "a100-sxm-80gb")
    base = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048)
    az = W.scale_to_rate(W.take(T.builtin("azure-conv"), 1500), 3.0)
    syn = W.synthetic(800, 6.0, 1024, 256, range_ratio=0.5, seed=1)
    tight = replace(base, kv_capacity_tokens=12_000)
    yield "vllm", cost, az, base, 1
    yield "vllm-first-chunk", cost, az, replace(base, policy_params={"admission_gate": "first_chunk"}), 1
    for s in ("trtllm", "sglang", "prefill-priority", "vllm-v0", "vllm-multistep", "static"):
        yield s, cost, syn, replace(base, scheduler=s), 1
        yield s + "-kv", cost, syn, replace(tight, scheduler=s), 1
    yield "vllm-kv", cost, syn, tight, 1
    yield "vllm-3rep", cost, az, base, 3
    yield "vllm-low-rate", cost, W.scale_to_rate(W.take(T.builtin("azure-conv"), 300), 0.05), base, 1
    yield "mistral-window", make_cost_model("mistral-7b", "h100-sxm"), W.synthetic(200, 2.0, 6000, 200, seed=2), \
        replace(base, max_num_batched_tokens=8192), 1
    pw = shared_prefix(8, 20, 800, 100, 50, rate=4.0)
    pc = replace(base, enable_prefix_caching=True)
    yield "prefix", small, pw.to_workload(), pc, 1
    yield "prefix-warm", small, pw.to_workload(), replace(pc, warm_cache=True), 1
    yield "prefix-offload", small, pw.to_workload(), replace(pc, kv_capacity_tokens=4000, cpu_offload_bytes=1e9), 1
    yield "prefix-3rep", small, pw.to_workload(), pc, 3
    rng = np.random.default_rng(3)
    conv = [[(int(rng.integers(20, 200)), int(rng.integers(20, 200))) for _ in range(5)] for _ in range(30)]
    mt = multi_turn_chats(conv, system_prompt_len=300, rate=2.0, think_time_s=1.0)
    yield "multi-turn", small, mt.to_workload(), pc, 1
    yield "multi-turn-kv", small, mt.to_workload(), replace(pc, kv_capacity_tokens=3000), 1
    n = 400
    closed = W.Workload(np.zeros(n), np.full(n, 700, dtype=np.int64), np.full(n, 120, dtype=np.int64), concurrency=16)
    yield "closed", cost, closed, base, 1
    yield "time-cap", cost, az, replace(base, max_duration_s=120.0), 1
    yield "debug", cost, syn, replace(tight, debug=True), 1
    yield "multistep-debug", cost, syn, replace(tight, scheduler="vllm-multistep", debug=True), 1
    capped = replace(az, max_concurrency=12)
    for s in ("vllm", "trtllm", "sglang"):
        yield s + "-capped", cost, capped, replace(base, scheduler=s), 1


def scenario_runs():
    """Whole runs through `Scenario` (engine profiles, the client view, summaries)."""
    for engine in ("vllm", "sglang", "trtllm"):
        sc = llmsim.Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv", num_requests=600,
                             rate=4.0, engine=engine)
        res, summary = sc.run()
        yield "scenario-" + engine, res, summary
    sc = llmsim.Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv", num_requests=400,
                         rate=4.0, concurrency=8)
    res, summary = sc.run()
    yield "scenario-capped", res, summary


def disagg_runs():
    pc = make_cost_model("llama-2-7b", "h100-sxm")
    dc = make_cost_model("llama-2-7b", "h100-sxm")
    wl = W.synthetic(300, 8.0, 1500, 200, range_ratio=0.5, seed=4)
    link = KVLink("nvlink", 450e9, lanes=1, efficiency=0.8, latency_s=5e-6, overhead_s=1e-4)
    cfg = EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096)
    yield "disagg", simulate_disagg(pc, dc, wl, link, cfg, cfg, 2, 1)
    yield "disagg-kv", simulate_disagg(pc, dc, wl, link, cfg, replace(cfg, kv_capacity_tokens=20_000, debug=True), 1, 2)
    yield "disagg-cap", simulate_disagg(pc, dc, wl, link, replace(cfg, max_duration_s=10.0), cfg, 1, 1)


def main() -> None:
    for name, cost, wl, cfg, reps in scenarios():
        print(name, digest(simulate(cost, wl, cfg, replicas=reps)), flush=True)
    for name, res in disagg_runs():
        print(name, digest(res), flush=True)
    for name, res, summary in scenario_runs():
        print(name, digest(res), hashlib.sha256(repr(sorted((k, repr(v)) for k, v in summary.items())).encode()
                                                ).hexdigest()[:16], flush=True)


if __name__ == "__main__":
    main()
