"""The engine's ledger over random configurations (issue 26): every built-in engine profile (and
now and then another scheduler policy under it, or TensorRT-LLM's MAX_UTILIZATION) x prefix
caching on/off x disaggregation (none, 1:1, 2:1, 1:2, 2:3) x workloads (random, shared-prefix,
multi-turn shared-prefix) x small KV caches x seat and token caps x block sizes x rates (inf
included) x simulated-time caps x replicas and routers, each run with the debug ledger on (`EngineConfig.debug`: blocks,
seats, tokens and time order after every step and at the end, in every pool).

A configuration passes when it runs, or is refused with one `SpecError` (a setting the engine
does not model), and its result conserves requests: every request completed or rejected with a
reason, only rejected ones have one, and the peak KV utilisation of every pool is <= 1. A
violation is an `AssertionError` from the ledger, any other exception, or a broken invariant.

    python benchmarks/ledger_property.py --n 2000 [--seed 0] [--wide]

`--wide` (`draw_wide_config`) adds the axes of the issue-26 review: ShareGPT and Mooncake
(a small JSONL with shared hash ids) workloads, MoE models with EP, PP and micro-batches,
`max_model_len`, closed-loop clients and `--max-concurrency`, speculative decoding, and per-pool
`deployment:` overrides and link values under disaggregation. Every run is also checked for
finite, non-negative and ordered request times (arrival <= first token <= finish).

prints the counts (ran, refused, violations) and the wall time; tests/test_hostile26_engine.py
runs a bounded, derandomized subset in the default pytest run with the same `draw_config`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

# the engine of the tree this script is in (not an installed llmsim elsewhere)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simulator.profiles.profile import engine_catalog  # noqa: E402
from simulator.scenario import Scenario  # noqa: E402
from simulator.serving.records import COMPLETED, REJECTED  # noqa: E402
from simulator.specs.checks import SpecError  # noqa: E402

#: every built-in engine profile (engine_specs/*.yaml)
ENGINES: tuple[str, ...] = tuple(sorted(engine_catalog()))
#: the profiles that run TensorRT-LLM's capacity scheduler (it has two capacity policies)
TRTLLM_POLICY = frozenset(e for e in ENGINES if Scenario(engine=e).scheduler == "trtllm")
DISAGG: tuple[str | None, ...] = (None, None, "1:1", "2:1", "1:2", "2:3")
WORKLOADS = ("random", "random", "shared-prefix", "multi-turn")

#: choose(name, options) -> one of options (a seeded generator, or a hypothesis draw)
Choose = Callable[[str, Sequence[Any]], Any]


def draw_config(choose: Choose) -> dict[str, Any]:
    """Scenario settings of one random configuration (small: a run takes milliseconds)."""
    disagg = choose("disagg", DISAGG)
    workload = choose("workload", WORKLOADS)
    if disagg is not None and workload == "multi-turn":
        workload = "shared-prefix"  # a disaggregated run serves open-loop arrivals only
    kw: dict[str, Any] = {
        "model": "llama-3.1-8b", "hardware": "h100-sxm",
        "engine": choose("engine", ENGINES),
        "enable_prefix_caching": choose("prefix_caching", (True, False)),
        "disagg": disagg,
        "kv_capacity_tokens": choose("kv_capacity_tokens", (1000, 2000, 3000, 3000, 6000, 40000)),
        "rate": choose("rate", (math.inf, math.inf, math.inf, 2.0, 20.0, 200.0)),
        "max_duration_s": choose("max_duration_s", (None, None, None, 0.5, 5.0)),
        "seed": choose("seed", tuple(range(8))),
        "debug": True,
    }
    seqs = choose("max_num_seqs", (None, None, 1, 3, 16))
    if seqs is not None:
        kw["max_num_seqs"] = seqs
    budget = choose("max_num_batched_tokens", (None, None, 64, 512, 4096))
    if budget is not None:
        kw["max_num_batched_tokens"] = budget
    scheduler = choose("scheduler", (None, None, None, None, "prefill-priority", "vllm-multistep", "static"))
    if scheduler == "static" and disagg is not None:
        scheduler = None  # refused in a decode pool (its requests arrive prefilled): tested on its own
    if scheduler is not None:
        kw["scheduler"] = scheduler  # another policy under the profile's limits and memory rule
    elif kw["engine"] in TRTLLM_POLICY and choose("trtllm_capacity", (0, 0, 1)):
        kw["policy_params"] = {"capacity_policy": "max_utilization"}  # the other TRT-LLM capacity policy
    block = choose("block_size", (None, None, 1, 16, 64))
    if block is not None:
        kw["block_size"] = block
    if disagg is None:
        # the client view inside the engine: timeouts abort requests mid-run (aggregated only)
        kw["request_timeout_s"] = choose("request_timeout_s", (None, None, None, 0.3, 3.0))
        if kw["enable_prefix_caching"]:
            kw["kv_offloading_size"] = choose("kv_offloading_size", (0.0, 0.0, 0.01))  # GiB: ~80 blocks
        kw["replicas"] = choose("replicas", (1, 1, 2, 3))
        kw["router"] = choose("router", ("round-robin", "least-outstanding", "least-kv"))
    if workload == "random":
        kw.update(workload="random", num_requests=choose("num_requests", (1, 5, 20, 60, 100, 100)),
                  input_len=choose("input_len", (1, 16, 200, 600, 600, 1500)),
                  output_len=choose("output_len", (1, 2, 20, 60, 200)),
                  range_ratio=choose("range_ratio", (0.0, 0.5, 0.9)))
    else:
        groups, per = choose("num_groups", (1, 2, 4)), choose("prompts_per_group", (1, 3, 6))
        multi = workload == "multi-turn"
        kw.update(workload="shared-prefix", output_len=choose("output_len", (1, 8, 40)),
                  num_requests=groups * per * (choose("rounds", (2, 3)) if multi else 1),
                  workload_params={"num_groups": groups, "prompts_per_group": per,
                                   "system_prompt_len": choose("system_prompt_len", (0, 40, 300, 900)),
                                   "question_len": choose("question_len", (1, 30, 200)),
                                   "multi_turn": multi})
    return kw


#: a Mooncake trace (timestamps in ms, 16-token blocks) whose rows share hash-id prefixes
MOONCAKE_ROWS = tuple(json.dumps(r) for r in (
    {"timestamp": 0, "input_length": 300, "output_length": 20, "hash_ids": list(range(1, 20))},
    {"timestamp": 10, "input_length": 300, "output_length": 5, "hash_ids": [*range(1, 19), 20]},
    {"timestamp": 20, "input_length": 40, "output_length": 60, "hash_ids": [1, 2, 30]},
    {"timestamp": 25, "input_length": 900, "output_length": 1, "hash_ids": [40]},
    {"timestamp": 400, "input_length": 17, "output_length": 7, "hash_ids": [1, 2]},
    {"timestamp": 400, "input_length": 600, "output_length": 100, "hash_ids": [1, 2, 3, 4, 5, 6]},
))
MOE_MODELS = ("qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite")


def draw_wide_config(choose: Choose, mooncake_path: str) -> dict[str, Any]:
    """`draw_config` plus the review's axes (module docstring); `mooncake_path`: a file holding
    `MOONCAKE_ROWS`."""
    kw = draw_config(choose)
    other = choose("other_workload", (None, None, "sharegpt", "mooncake"))
    if other is not None:
        for k in ("input_len", "output_len", "range_ratio", "workload_params"):
            kw.pop(k, None)
        kw["workload"] = "sharegpt" if other == "sharegpt" else mooncake_path
        kw["num_requests"] = choose("num_requests", (1, 7, 30) if other == "sharegpt" else (3, 6, 12))
        if other == "mooncake" and choose("trace_clock", (0, 1)):
            kw["rate"] = None  # the trace's own timestamps
    if choose("moe", (0, 0, 1)):
        tp = choose("tp", (1, 2, 4))
        ep = choose("ep", (1, tp))  # a divisor of tp
        kw.update(model=choose("moe_model", MOE_MODELS), tp=tp, ep=ep, pp=choose("pp", (1, 2)),
                  pp_microbatches=choose("pp_microbatches", (1, 2, 4)),
                  expert_imbalance=choose("expert_imbalance", (1.0, 1.0, float(ep))))
        if choose("auto_kv", (0, 1)):
            kw["kv_capacity_tokens"] = None
    if choose("has_max_model_len", (0, 0, 0, 1)):
        kw["max_model_len"] = choose("max_model_len", (64, 700, 2048))
    if kw["disagg"] is None:
        clients = choose("concurrency", (None, None, 1, 4))  # closed loop, or a cap at a finite rate
        if clients is not None:
            kw["concurrency"] = clients
        if choose("speculative", (0, 0, 1)):
            method = choose("spec_method", ("ngram", "eagle", "eagle3", "draft_model", "mtp"))
            kw["speculative_config"] = {"method": method, "num_speculative_tokens": choose("spec_k", (1, 3, 5)),
                                        "acceptance_rate": choose("spec_acceptance", (0.0, 0.5, 0.99)),
                                        **({"model": "llama-3.2-1b"} if method == "draft_model" else {})}
    else:
        dep: dict[str, Any] = {}
        if choose("prefill_overrides", (0, 1)):
            dep["prefill"] = {k: v for k, v in (
                ("tp", choose("prefill_tp", (1, 2))),
                ("max_num_batched_tokens", choose("prefill_budget", (None, 128, 2048))),
                ("kv_capacity_tokens", choose("prefill_kv", (None, 500, 5000)))) if v is not None}
        if choose("decode_overrides", (0, 1)):
            dep["decode"] = {k: v for k, v in (
                ("tp", choose("decode_tp", (1, 2))), ("max_num_seqs", choose("decode_seqs", (None, 1, 4))),
                ("kv_capacity_tokens", choose("decode_kv", (None, 700, 5000))),
                ("block_size", choose("decode_block", (None, 1, 32)))) if v is not None}
        if choose("link", (0, 1)):
            dep["link"] = {"kind": choose("link_kind", ("auto", "nvlink", "scale-out")),
                           "latency_s": choose("link_latency", (0.0, 1e-3, 1.0)),
                           "overhead_s": choose("link_overhead", (0.0, 0.01)),
                           "efficiency": choose("link_efficiency", (0.1, 1.0)),
                           "bandwidth_bytes_per_s": choose("link_bandwidth", (1e6, 1e9, 1e12))}
        if dep:
            kw["deployment"] = dep
    return kw


def check_config(kw: dict[str, Any]) -> str | None:
    """Run one configuration: None when it ran clean or was refused with a SpecError ("refused: ..."
    is returned then), else the violation."""
    try:
        res, summary = Scenario(**kw).run()
    except SpecError as e:
        return f"refused: {e}"
    except AssertionError as e:
        return f"VIOLATION ledger: {e}"
    except Exception as e:  # noqa: BLE001 - any other exception is a finding, reported as one
        return f"VIOLATION {type(e).__name__}: {e}"
    st = res.status
    n = int(kw["num_requests"])  # a trace replays tiled or cut to it
    rejected = set(np.flatnonzero(st == REJECTED).tolist())
    if len(st) != n or not ((st == COMPLETED) | (st == REJECTED)).all():
        return "VIOLATION conservation: a request ended neither completed nor rejected"
    if set(res.reasons) != rejected or not all(res.reasons.values()):
        return "VIOLATION conservation: reasons do not match the rejected requests"
    if summary["completed"] + summary["failed"] != n:
        return f"VIOLATION conservation: completed {summary['completed']} + failed {summary['failed']} != {n}"
    for key in ("peak_kv_utilization", "prefill_peak_kv_utilization"):
        v = res.meta.get(key)
        if v is not None and not v <= 1.0 + 1e-12:
            return f"VIOLATION {key} = {v} > 1"
    done = st == COMPLETED
    arrival, first, finish = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    for name, a in (("first_token_s", first), ("finish_s", finish)):
        if not (np.isfinite(a).all() and (a >= 0).all()):
            return f"VIOLATION {name}: a completed request has a non-finite or negative time"
    if (first < arrival - 1e-9).any() or (finish < first - 1e-9).any():
        return "VIOLATION time order: arrival <= first token <= finish broken"
    if summary["completed"]:
        for key in ("duration", "mean_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "output_throughput"):
            v = summary.get(key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                return f"VIOLATION summary {key} = {v!r}"
    return None


def seeded_choose(rng: np.random.Generator) -> Choose:
    def choose(name: str, options: Sequence[Any]) -> Any:
        return options[int(rng.integers(len(options)))]
    return choose


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="configurations to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=10, help="violations printed in full")
    ap.add_argument("--wide", action="store_true", help="also the review's axes (draw_wide_config)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    choose = seeded_choose(rng)
    tmp = tempfile.TemporaryDirectory()
    mooncake = Path(tmp.name) / "mooncake.jsonl"
    mooncake.write_text("\n".join(MOONCAKE_ROWS) + "\n")
    draw = (lambda c: draw_wide_config(c, str(mooncake))) if args.wide else draw_config
    t0 = time.perf_counter()
    counts: Counter[str] = Counter()
    by_axis: Counter[tuple[str, str]] = Counter()
    shown = 0
    for i in range(args.n):
        kw = draw(choose)
        out = check_config(kw)
        kind = "ran" if out is None else ("refused" if out.startswith("refused") else "violation")
        counts[kind] += 1
        by_axis[("engine", kw["engine"])] += kind == "ran"
        by_axis[("disagg", str(kw["disagg"]))] += kind == "ran"
        if kind == "refused":
            counts["refused: " + out.split(": ", 2)[1][:40]] += 1
        if kind == "violation" and shown < args.show:
            shown += 1
            print(f"config {i}: {kw}\n  {out}")
    wall = time.perf_counter() - t0
    print(f"{args.n} configurations in {wall:.1f} s: {counts['ran']} ran, {counts['refused']} refused "
          f"with one SpecError, {counts['violation']} ledger violations")
    for k, v in sorted(counts.items()):
        if k.startswith("refused: "):
            print(f"  {v:5d} {k}")
    print("  ran per engine: " + ", ".join(f"{e} {by_axis[('engine', e)]}" for e in ENGINES))
    print("  ran per disagg: " + ", ".join(f"{d} {by_axis[('disagg', str(d))]}" for d in DISAGG[1:]))


if __name__ == "__main__":
    main()
