"""Write the example notebooks from the cell sources below (outputs stripped, clean diffs).

    python notebooks/make_notebooks.py          # rewrite every notebook
    python notebooks/make_notebooks.py --check  # exit 1 if a notebook differs from its source

Each notebook runs top to bottom on a fresh install in well under a minute, uses the public
Python API (`import simulator as llmsim`, docs/api.md), and checks itself: every check prints
the computed and the expected value and asserts it (tests/test_notebooks.py runs them all).
Edit the cells here, never the .ipynb files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

SETUP = '''\
import math
import numpy as np
import matplotlib.pyplot as plt
import simulator as llmsim

def check(name, computed, expected, ok):
    """Print computed vs expected and fail the notebook when they disagree."""
    print(f"{'PASS' if ok else 'FAIL'}  {name}: computed {computed}, expected {expected}")
    assert ok, name
'''

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {}

# ---------------------------------------------------------------------------------------------
NOTEBOOKS["prefill_vs_decode.ipynb"] = [
    ("md", """\
# Prefill vs decode: where the time goes

An LLM server does two kinds of work. **Prefill** runs the whole prompt through the model in one
step: thousands of tokens share every weight read, so it is compute-bound. **Decode** emits one
token per sequence per step: the step reads all the weights for only `batch` tokens, so it is
memory-bound until the batch is large. This notebook reads both off the roofline cost model
(`docs/performance_model.md`) for Llama-3.1-8B on an A100-SXM-80GB and an H100-SXM, and checks
three facts by hand: the parameter count, the batch-1 decode time and the batch at which
decode turns compute-bound."""),
    ("code", SETUP),
    ("md", """\
## The model: parameter count vs the model card

The model card of Llama-3.1-8B states 8.03 B parameters. llmsim counts them from the
architecture (embeddings, attention, gated MLP, norms, untied LM head)."""),
    ("code", '''\
model = llmsim.load_model("llama-3.1-8b")
print(model.describe() if hasattr(model, "describe") else model)
params_b = model.param_count / 1e9
check("Llama-3.1-8B parameters (B)", f"{params_b:.3f}", "8.03 (model card)", abs(params_b - 8.03) / 8.03 < 0.005)
'''),
    ("md", """\
## Batch-1 decode is a weight read

In ideal mode (`ideal=True`: efficiencies 1, no overheads) a batch-1 decode step streams every
weight the step uses once through HBM, so its time is weight bytes / HBM bandwidth. The token
embedding is a gather (one row per token), not a read of the whole table, so the bytes are the
non-embedding parameters x 2 bytes (bf16). The KV cache at 16 cached tokens adds < 0.1 %."""),
    ("code", '''\
HARDWARE = ["a100-sxm-80gb", "h100-sxm"]
ideal = {hw: llmsim.make_cost_model(model, hw, ideal=True) for hw in HARDWARE}
real = {hw: llmsim.make_cost_model(model, hw) for hw in HARDWARE}
for hw, cost in ideal.items():
    bw = cost.hardware.hbm_bandwidth_bytes_per_s
    weight_bytes = (model.param_count - model.embedding_params) * 2
    expected_ms = weight_bytes / bw * 1e3
    computed_ms = cost.time(llmsim.decode_step(model, 1, 16)) * 1e3
    check(f"{hw}: batch-1 decode step (ms)", f"{computed_ms:.3f}", f"{expected_ms:.3f} = {weight_bytes/1e9:.2f} GB / {bw/1e12:.2f} TB/s",
          abs(computed_ms - expected_ms) / expected_ms < 0.01)
    print(f"     with the fitted efficiencies and overheads: {real[hw].time(llmsim.decode_step(model, 1, 16))*1e3:.2f} ms")
'''),
    ("md", """\
## Step time vs batch size and vs context

Decode step time is flat in the batch size while the weight read dominates, then grows
linearly once the GEMMs are compute-bound. Prefill time grows linearly with the prompt
(and quadratically for attention at long prompts). Both panels use the fitted (real)
efficiencies; dashed lines are ideal."""),
    ("code", '''\
batches = np.unique(np.logspace(0, 10, 41, base=2).astype(int))
contexts = np.unique(np.logspace(7, 17, 41, base=2).astype(int))
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
for hw, color in zip(HARDWARE, ["C0", "C1"]):
    for costs, ls, tag in ((real, "-", ""), (ideal, "--", " (ideal)")):
        c = costs[hw]
        axes[0].plot(batches, [c.time(llmsim.decode_step(model, int(b), 1024)) * 1e3 for b in batches], ls, color=color, label=hw + tag)
        axes[1].plot(contexts, [c.time(llmsim.decode_step(model, 1, int(n))) * 1e3 for n in contexts], ls, color=color, label=hw + tag)
        axes[2].plot(contexts[:30], [c.time(llmsim.prefill_step(model, 1, int(n))) * 1e3 for n in contexts[:30]], ls, color=color, label=hw + tag)
axes[0].set(xscale="log", yscale="log", xlabel="decode batch size (context 1024)", ylabel="step time (ms)", title="decode vs batch")
axes[1].set(xscale="log", yscale="log", xlabel="cached context (tokens), batch 1", ylabel="step time (ms)", title="decode vs context")
axes[2].set(xscale="log", yscale="log", xlabel="prompt tokens, batch 1", ylabel="step time (ms)", title="prefill vs prompt")
for ax in axes:
    ax.grid(True, which="both", alpha=0.3); ax.legend(fontsize=8)
plt.tight_layout(); plt.show()
'''),
    ("md", """\
## The batch where decode turns compute-bound

A decode GEMM over `B` tokens does `2·B·N` FLOPs for `N·b_w` weight bytes: its arithmetic
intensity is `2B/b_w` FLOP/byte. It becomes compute-bound when that passes the chip's ridge point
`peak FLOP/s / HBM bytes/s`, i.e. at `B* ≈ ridge · b_w / 2` (= the ridge itself for bf16
weights: ~150 on an A100, ~300 on an H100). Activation traffic lowers the intensity a little,
so the model's crossover sits slightly above. We find the smallest batch where the largest GEMM
(`mlp_gate_up`) is compute-bound, in ideal mode, and check it is within 25 % of `B*`."""),
    ("code", '''\
def gemm_bound(cost, batch, op="mlp_gate_up"):
    ops = cost.breakdown(llmsim.decode_step(model, batch, 128))["ops"]
    return next(o["bound"] for o in ops if o["name"] == op)

crossover = {}
for hw, cost in ideal.items():
    ridge = cost.hardware.ridge_point("bf16")
    expected = ridge * 2 / 2  # ridge * b_w / 2, b_w = 2 bytes (bf16)
    b = next(b for b in range(1, 4096) if gemm_bound(cost, b) == "compute")
    crossover[hw] = b
    check(f"{hw}: compute-bound crossover batch", b, f"~{expected:.0f} (ridge {ridge:.0f} FLOP/byte x b_w/2)",
          0.8 < b / expected < 1.25)
check("the faster-memory-per-FLOP chip crosses over later", crossover, "h100 > a100",
      crossover["h100-sxm"] > crossover["a100-sxm-80gb"])
'''),
    ("md", """\
With the fitted efficiencies the crossover comes much earlier. A large GEMM reaches
`compute_efficiency` (eta_c) of the peak P while a weight read reaches `memory_efficiency`
(eta_m) of the bandwidth bw, and a GEMM over B tokens reaches only eta_c·B/(B + T0) of the peak
(`gemm_ramp_tokens` T0, fitted to kernel timings). Its compute time then passes its weight-read
time at `B ≈ P·eta_c/(bw·eta_m) − T0`. The calibration caps T0 at half of `P·eta_c/(bw·eta_m)`
(docs/concepts.md, "Small GEMMs and the ramp cap"), so batch-1 decode stays memory-bound on
every chip and the fitted crossover lands near T0 itself. The step time grows well before the
ideal crossover (first panel above): that is kernel inefficiency, not arithmetic."""),
    ("code", '''\
for hw, cost in real.items():
    h, e = cost.hardware, cost.hardware.efficiency
    ridge_eff = h.flops("bf16") * e.compute_efficiency / (h.hbm_bandwidth_bytes_per_s * e.memory_efficiency)
    expected = ridge_eff - e.gemm_ramp_tokens
    b = next(b for b in range(1, 4096) if gemm_bound(cost, b) == "compute")
    check(f"{hw}: fitted-efficiency crossover batch", b,
          f"~{expected:.0f} = {ridge_eff:.0f} - T0 {e.gemm_ramp_tokens:.0f} (ideal: {crossover[hw]})", 0.8 < b / expected < 1.25)
    check(f"{hw}: batch-1 decode GEMM with the fitted efficiencies", gemm_bound(cost, 1), "memory",
          gemm_bound(cost, 1) == "memory")
'''),
    ("md", """\
## The roofline chart

`simulator.cli.plots.roofline_chart` (the `llmsim roofline` command) places every op of a prefill
step and a decode step on the chip's roofline: decode GEMMs sit far left (memory-bound), prefill
GEMMs right of the ridge (compute-bound); decode attention stays memory-bound at any batch."""),
    ("code", '''\
from IPython.display import Image, display
from simulator.cli.plots import roofline_chart

# the chart as PNG bytes: nothing is written to disk
for hw in HARDWARE:
    display(Image(data=roofline_chart(real[hw], 8, 1024)))
'''),
    ("md", """\
## Prefill vs decode in one static batch

`predict_static` prefills a batch of prompts in one step (TTFT), then runs the decode steps
(TPOT). Prefill produces thousands of tokens per second per sequence; decode one per step."""),
    ("code", '''\
for hw in HARDWARE:
    for batch in (1, 32):
        r = llmsim.predict_static(real[hw], batch, 1024, 128)
        print(f"{hw:14s} batch {batch:3d}: TTFT {r['ttft_ms']:7.1f} ms ({r['prefill']['bound']}-bound), "
              f"TPOT {r['tpot_ms']:5.2f} ms ({r['decode']['bound']}-bound), "
              f"{r['output_tokens_per_s']:7.0f} output tok/s")
'''),
]

# ---------------------------------------------------------------------------------------------
NOTEBOOKS["find_the_knee.ipynb"] = [
    ("md", """\
# Find the knee: latency under load

A replica serving a request stream keeps latency flat while it has slack, then tail latency
climbs steeply (the **knee**), and past the **saturation rate** the queue grows without bound.
The **SLO capacity** is the highest rate at which 99 % of requests meet the TTFT and TPOT SLOs.
`llmsim.run_sweep` reads all three off a curve of simulations at increasing offered rates
(definitions in docs/sweep.md). Here: Llama-3.1-8B on one H100-SXM serving the Azure
conversation trace (time-scaled to each rate), then how the knee moves with `max_num_seqs`,
`max_num_batched_tokens` and burstiness."""),
    ("code", SETUP + '''\

SLOS = {"ttft": 2000, "tpot": 100}  # ms, as vLLM's --goodput ttft:2000 --goodput tpot:100
base = llmsim.Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="azure-conv",
                       num_requests=4000, goodput=SLOS)
executor = llmsim.make_executor(serial=True)  # or llmsim.make_executor(workers=4) for a process pool
'''),
    ("md", """\
## One long sweep

4000 requests per point: long enough that the completion rate past saturation reaches a
steady state (with 500 the sweep warns that the runs are too short)."""),
    ("code", '''\
result = llmsim.run_sweep(base, "auto", executor=executor)
curve = result["curves"][0]
pts = [p for p in result["points"] if p["kind"] == "grid"]
for key in ("offline_max_throughput", "saturation_rate", "max_stable_rate", "slo_capacity"):
    print(f"{key:24s} {curve[key]:.3f} req/s")
print(f"{'knee':24s} {curve['knee']['rate']:.3f} req/s (p99 TTFT {curve['knee']['value']:.0f} ms)")
print("warnings:", curve["warnings"] or "none")
'''),
    ("code", '''\
x = [p["rate"] for p in pts]
fig, axes = plt.subplots(1, 2, figsize=(13, 4))
axes[0].plot(x, [p["p99_ttft_ms"] for p in pts], "o-", label="p99 TTFT")
axes[0].plot(x, [p["median_ttft_ms"] for p in pts], "o--", label="median TTFT")
axes[0].axhline(SLOS["ttft"], color="gray", lw=0.8, label="TTFT SLO")
axes[0].set(yscale="log", xlabel="offered rate (req/s)", ylabel="ms", title="TTFT vs load")
axes[1].plot(x, [p["achieved_rate"] for p in pts], "o-", label="achieved")
axes[1].plot(x, [p["request_goodput"] for p in pts], "o--", label="goodput")
axes[1].plot(x, x, ":", color="gray", label="y = x")
axes[1].set(xlabel="offered rate (req/s)", ylabel="req/s", title="throughput vs load")
for ax in axes:
    for key, ls in (("saturation_rate", "-"), ("slo_capacity", "-.")):
        ax.axvline(curve[key], color="k", ls=ls, lw=0.8, label=key)
    ax.axvline(curve["knee"]["rate"], color="r", ls=":", label="knee")
    ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
    ("md", """\
## Checks

* the knee comes before saturation: knee <= saturation rate;
* the SLO capacity is a sustainable rate: SLO capacity <= saturation rate;
* with runs this long, the saturation rate (completions/s of a backlogged replica) is within
  5 % of the offline max throughput (every request at t = 0)."""),
    ("code", '''\
sat, knee, slo, offline = curve["saturation_rate"], curve["knee"]["rate"], curve["slo_capacity"], curve["offline_max_throughput"]
check("knee <= saturation rate", f"{knee:.3f} <= {sat:.3f}", "true", knee <= sat)
check("SLO capacity <= saturation rate", f"{slo:.3f} <= {sat:.3f}", "true", slo <= sat)
check("saturation / offline max throughput", f"{sat / offline:.3f}", "within 5 % of 1", abs(sat / offline - 1) <= 0.05)
'''),
    ("md", """\
## How the knee moves

One curve per value of a scheduler setting (`--sweep FIELD=V1,V2` on the command line),
1000 requests per point (short runs: the saturation rates read low, the knees are what we
compare here).

* `max_num_seqs` caps the decode batch: a small cap saturates early, and the knee moves down
  with it.
* `max_num_batched_tokens` is the per-step token budget: a small budget splits prompts into
  more chunks (more steps before the first token) but keeps decode steps short."""),
    ("code", '''\
short = base.replace(num_requests=1000)
variants = {"max_num_seqs": [16, 64, 256], "max_num_batched_tokens": [2048, 8192]}
moves = {}
for field, values in variants.items():
    r = llmsim.run_sweep(short, "auto", llmsim.parse_sweep([f"{field}={','.join(map(str, values))}"]), executor)
    moves[field] = r
    for c in r["curves"]:
        knee = c["knee"]["rate"] if c["knee"] else float("nan")
        sat = c["saturation_rate"] or float("nan")
        cap = c["slo_capacity"] or float("nan")
        print(f"{c['curve']:28s} offline {c['offline_max_throughput']:6.2f}  knee {knee:6.2f}  "
              f"saturation {sat:6.2f}  SLO capacity {cap:6.2f} req/s")
'''),
    ("code", '''\
fig, axes = plt.subplots(1, len(moves), figsize=(15, 4))
for ax, (field, r) in zip(axes, moves.items()):
    for c in r["curves"]:
        cp = [p for p in r["points"] if p["curve"] == c["curve"] and p["kind"] == "grid"]
        line, = ax.plot([p["rate"] for p in cp], [p["p99_ttft_ms"] for p in cp], "o-", ms=3, label=c["curve"])
        if c["knee"]:
            ax.axvline(c["knee"]["rate"], color=line.get_color(), ls=":")
    ax.set(yscale="log", xlabel="offered rate (req/s)", ylabel="p99 TTFT (ms)", title=field)
    ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.tight_layout(); plt.show()
'''),
    ("code", '''\
seqs = {c["values"]["max_num_seqs"]: c["offline_max_throughput"] for c in moves["max_num_seqs"]["curves"]}
check("offline max throughput grows with max_num_seqs", {k: round(v, 2) for k, v in seqs.items()},
      "increasing", seqs[16] < seqs[64] <= seqs[256] * 1.001)
knees = {c["values"]["max_num_seqs"]: c["knee"]["rate"] for c in moves["max_num_seqs"]["curves"] if c["knee"]}
check("the knee moves up with max_num_seqs", knees, "increasing", list(knees.values()) == sorted(knees.values()))
'''),
    ("md", """\
## Burstiness

`burstiness` < 1 draws gamma-distributed gaps (vLLM's `--burstiness`: shape = burstiness,
1 = Poisson): the same average rate arrives in clumps, and requests in a clump queue behind
each other. With a trace, `burstiness` != 1 replaces the trace's own timing with gamma arrivals
at `rate` (burstiness 1 replays the trace's timing, itself bursty), so this comparison uses
the `random` workload (prompt 1024 ± 50 %, output 256 ± 50 % tokens) at a fixed fraction of its
offline throughput. At a loose 2 s TTFT SLO the bursts are absorbed and the SLO capacity
barely moves; the tail latency below the knee is what changes."""),
    ("code", '''\
rnd = base.replace(workload="random", input_len=1024, output_len=256, range_ratio=0.5, num_requests=1000)
x_rnd = rnd.replace(rate=math.inf).run()[1]["request_throughput"]
loads = [0.5, 0.7, 0.85]
p99 = {b: [rnd.replace(burstiness=b, rate=f * x_rnd).run()[1]["p99_ttft_ms"] for f in loads] for b in (0.25, 1.0, 4.0)}
for b, v in p99.items():
    print(f"burstiness {b:4}: p99 TTFT " + ", ".join(f"{t:5.0f} ms at {f:.0%}" for t, f in zip(v, loads)) + f" of {x_rnd:.1f} req/s")
at70 = {b: round(v[1]) for b, v in p99.items()}
check("p99 TTFT at 70 % load falls as arrivals get smoother", at70, "burstiness 0.25 > 1 > 4", at70[0.25] > at70[1.0] > at70[4.0])
'''),
]

# ---------------------------------------------------------------------------------------------
NOTEBOOKS["capacity_planning.ipynb"] = [
    ("md", """\
# Capacity planning: how many GPUs of which kind?

Target: serve the Azure conversation trace at **R = 40 requests/s** with Llama-3.1-8B, such that
99 % of requests see **TTFT <= 2 s** and **TPOT <= 100 ms**, keeping 20 % headroom. For each
candidate accelerator, `llmsim.make_plan` finds one replica's **SLO capacity** (the highest rate at
which 99 % of requests meet both SLOs and the replica is not saturated, as `llmsim sweep` defines
it; docs/sweep.md), found by a bracketed search below the offline maximum, sizes the fleet by it,
then simulates the cheapest fleets as pools, N replicas behind the router at R / (1 - headroom),
and keeps the fewest that meet the SLOs (docs/plan.md):

    replicas_linear = ceil(R / (capacity x (1 - headroom)))
    replicas        = the pooled count (replicas_verified), else replicas_linear
    $/hour   = replicas x GPUs per replica x $/GPU-hour
    $ per million output tokens = $/hour / (R x mean output tokens x 3600) x 1e6

Prices are the catalog's indicative on-demand prices (`price_per_gpu_hour_usd` in the
hardware YAML); pass your own with `prices={"h100-sxm": 2.1}`. docs/plan.md documents the
`llmsim plan` command."""),
    ("code", SETUP + '''\
import pandas as pd

R, HEADROOM = 40.0, 0.2
SLOS = {"ttft": 2000, "tpot": 100}
base = llmsim.Scenario(model="llama-3.1-8b", workload="azure-conv", num_requests=1000, goodput=SLOS)
HARDWARE = ["a100-sxm-80gb", "h100-sxm", "h200-sxm", "l40s"]
result = llmsim.make_plan(base, R, hardware=HARDWARE, tps=[1], headroom=HEADROOM)
cols = ["rank", "hardware", "tp", "slo_capacity", "binding_slo", "replicas_linear", "replicas", "replicas_verified",
        "gpus", "price_per_gpu_hour_usd",
        "cost_per_hour_usd", "cost_per_million_output_tokens_usd", "kv_capacity_tokens", "offline_max_throughput"]
table = pd.DataFrame(result["candidates"])[cols]
print(f"mean output tokens per request: {result['mean_output_tokens']:.1f}")
table.round(3)
'''),
    ("code", '''\
for r in result["infeasible"]:
    print("infeasible:", r["hardware"], r["tp"], "-", r["reason"])
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
axes[0].bar(table.hardware, table.slo_capacity, color="C0")
axes[0].set(ylabel="req/s", title="SLO capacity of one replica")
axes[1].bar(table.hardware, table.cost_per_million_output_tokens_usd, color="C1")
for i, (g, c) in enumerate(zip(table.gpus, table.cost_per_million_output_tokens_usd)):
    axes[1].annotate(f"{g} GPUs", (i, c), ha="center", va="bottom")
axes[1].set(ylabel="$ per million output tokens", title=f"cost at {R:g} req/s")
plt.tight_layout(); plt.show()
'''),
    ("md", """\
## Checks: the sizing arithmetic, by hand

For every candidate: replicas_linear = ceil(R / (capacity x (1 - headroom))); a pooled count
was simulated and passed; GPUs = replicas x tp, and the cost per million output tokens from
the $/hour."""),
    ("code", '''\
mean_out = result["mean_output_tokens"]
for r in result["candidates"]:
    expected = math.ceil(R / (r["slo_capacity"] * (1 - HEADROOM)))
    check(f"{r['hardware']}: replicas by one replica", r["replicas_linear"],
          f"ceil({R:g} / ({r['slo_capacity']:.3f} x {1 - HEADROOM:g})) = {expected}", r["replicas_linear"] == expected)
    if r["replicas_verified"]:
        passed = [c["replicas"] for c in r["pool_checks"] if c["meets_slo"]]
        check(f"{r['hardware']}: the pool of {r['replicas']} met the SLOs at R / (1 - headroom)", passed,
              f"contains {r['replicas']}", r["replicas"] in passed)
    else:
        check(f"{r['hardware']}: replicas", r["replicas"], r["replicas_linear"], r["replicas"] == r["replicas_linear"])
    per_hour = r["replicas"] * r["tp"] * r["price_per_gpu_hour_usd"]
    per_m = per_hour / (R * mean_out * 3600) * 1e6
    check(f"{r['hardware']}: $ per million output tokens", f"{r['cost_per_million_output_tokens_usd']:.4f}",
          f"{per_m:.4f}", math.isclose(r["cost_per_million_output_tokens_usd"], per_m, rel_tol=1e-9))
'''),
    ("md", """\
## Check: the chosen fleet meets the SLOs

Simulate the cheapest deployment as a whole: `replicas` copies behind a least-outstanding-
requests router, the trace time-scaled to R, 3000 requests."""),
    ("code", '''\
best = result["best"]
fleet = base.replace(hardware=best["hardware"], tp=best["tp"], replicas=best["replicas"],
                     router="least-outstanding", rate=R, num_requests=3000)
_, s = fleet.run()
print(f"{best['replicas']} x {best['hardware']}: {s['request_throughput']:.1f} req/s, p99 TTFT {s['p99_ttft_ms']:.0f} ms, "
      f"p99 TPOT {s['p99_tpot_ms']:.1f} ms, good fraction {s['good_fraction']:.4f}")
check("good fraction of the chosen fleet at R", f"{s['good_fraction']:.4f}", ">= 0.99", s["good_fraction"] >= 0.99)
check("the fleet is stable at R", s["unstable"], False, not s["unstable"])
'''),
    ("md", """\
Caveats: the SLO capacity comes from finite runs (1000 requests per point here; raise
`num_requests` for a tighter number), the catalog prices are indicative, and a replica's
capacity depends on the workload's length mix: plan with your own trace
(`workload="my_trace.csv"`). The what-if analyses (`llmsim.run_whatif("hardware", base, [...])`)
compare accelerators at a fixed rate instead."""),
]

# ---------------------------------------------------------------------------------------------
NOTEBOOKS["kv_quantization_whatif.ipynb"] = [
    ("md", """\
# What if the KV cache were fp8 or int4?

The KV cache bounds how many sequences run at once, which bounds the decode batch, which sets
throughput. Quantizing it halves (fp8) or quarters (int4) the bytes per cached token: the same
HBM holds 2x or 4x the tokens, and decode attention reads fewer bytes per step. Here: Llama-3.1-8B
on one H100-SXM with long prompts (random workload: 8192 prompt tokens, 512 output tokens), where
the KV cache, not `max_num_seqs`, is the limit. (The same comparison from the command line:
`llmsim simulate --kv-dtype fp8 ...`, or `llmsim whatif kv-dtype` where installed.)"""),
    ("code", SETUP + '''\
DTYPES = ["bf16", "fp8", "int4"]
IN, OUT = 8192, 512
SLOS = {"ttft": 2000, "tpot": 50}
base = llmsim.Scenario(model="llama-3.1-8b", hardware="h100-sxm", workload="random",
                       input_len=IN, output_len=OUT, num_requests=300, goodput=SLOS)
'''),
    ("md", """\
## Capacity: KV tokens and concurrent sequences

KV budget = `gpu_memory_utilization` of HBM (0.92, vLLM's default, under the default `vllm`
engine profile) - weights - activation reserve, the same for every KV format; KV tokens
= budget / KV bytes per token. From bf16 (2 bytes) to fp8 (1 byte) the capacity doubles."""),
    ("code", '''\
plans = {}
for kv in DTYPES:
    sc = base.replace(kv_dtype=kv)
    plans[kv] = sc.cost_model().memory(sc.gpu_memory_utilization, sc.max_num_batched_tokens, sc.max_num_seqs,
                                       seq_len=IN + OUT)
    p = plans[kv]
    print(f"{kv:5s} KV bytes/token {p.kv_bytes_per_token/1e3:6.1f} kB  KV budget {p.kv_budget_bytes_per_gpu/1e9:5.1f} GB  "
          f"capacity {p.kv_capacity_tokens:>9,d} tokens = {p.max_concurrent_sequences:3d} sequences of {IN + OUT}")
ratio = plans["fp8"].kv_capacity_tokens / plans["bf16"].kv_capacity_tokens
check("KV token capacity fp8 / bf16", f"{ratio:.4f}", "2 (within 2 %)", abs(ratio - 2) / 2 < 0.02)
ratio4 = plans["int4"].kv_capacity_tokens / plans["bf16"].kv_capacity_tokens
check("KV token capacity int4 / bf16", f"{ratio4:.4f}", "4 (within 2 %)", abs(ratio4 - 4) / 4 < 0.02)
'''),
    ("md", """\
## Offline throughput: every request at t = 0

With all 300 requests waiting, the batch is as large as the KV cache allows. bf16 runs ~50
sequences at a time and preempts when their contexts grow; fp8 and int4 run more at once."""),
    ("code", '''\
offline = {kv: base.replace(kv_dtype=kv, rate=math.inf).run()[1] for kv in DTYPES}
for kv, s in offline.items():
    print(f"{kv:5s} {s['request_throughput']:5.2f} req/s  {s['output_throughput']:6.0f} output tok/s  "
          f"mean batch {s['mean_batch_size']:5.1f}  preemptions {s['preemptions']}")
check("offline throughput increases bf16 < fp8 < int4",
      [round(offline[k]["request_throughput"], 2) for k in DTYPES], "increasing",
      offline["bf16"]["request_throughput"] < offline["fp8"]["request_throughput"] < offline["int4"]["request_throughput"])
'''),
    ("md", """\
## Under load: TPOT and goodput at 1.5 req/s

At 1.5 req/s (Poisson) the bf16 replica is near its capacity: the KV cache fills, requests
queue and TTFT blows through the 2 s SLO. With fp8 the same load fits comfortably, and TPOT
drops because decode attention reads half the bytes."""),
    ("code", '''\
RATE = 1.5
loaded = {kv: base.replace(kv_dtype=kv, rate=RATE).run()[1] for kv in DTYPES}
print(f"{'kv':5s} {'p99 TTFT ms':>12s} {'median TPOT ms':>15s} {'good frac':>10s} {'goodput req/s':>14s}")
for kv, s in loaded.items():
    print(f"{kv:5s} {s['p99_ttft_ms']:12.0f} {s['median_tpot_ms']:15.1f} {s['good_fraction']:10.2f} {s['request_goodput']:14.2f}")
fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
for ax, key, label in zip(axes, ("kv_capacity_tokens_per_replica", "median_tpot_ms", "request_goodput"),
                          ("KV capacity (tokens)", "median TPOT (ms)", f"goodput at {RATE} req/s")):
    ax.bar(DTYPES, [loaded[k][key] for k in DTYPES], color=["C0", "C1", "C2"]); ax.set_title(label)
plt.tight_layout(); plt.show()
check("fp8 goodput >= bf16 goodput", f"{loaded['fp8']['request_goodput']:.2f} vs {loaded['bf16']['request_goodput']:.2f}",
      "fp8 >= bf16", loaded["fp8"]["request_goodput"] >= loaded["bf16"]["request_goodput"])
check("fp8 median TPOT < bf16 median TPOT", f"{loaded['fp8']['median_tpot_ms']:.1f} vs {loaded['bf16']['median_tpot_ms']:.1f} ms",
      "fp8 < bf16", loaded["fp8"]["median_tpot_ms"] < loaded["bf16"]["median_tpot_ms"])
'''),
    ("md", """\
What the model does not say: accuracy. fp8 KV is close to lossless on most models; int4 KV
costs quality that llmsim cannot measure. And the model prices a quantized KV read as fewer
bytes at the same bandwidth efficiency; dequantization cost inside the attention kernel is
not modelled (docs/limits.md)."""),
]

# ---------------------------------------------------------------------------------------------
NOTEBOOKS["validation.ipynb"] = [
    ("md", """\
# Validation: predictions vs published measurements

`dev.csv` holds 280 published measured numbers (TensorRT-LLM, lmdeploy, gpt-fast, the Splitwise
profiling data) on A100, H100 and L40S, each with its exact settings and source. All are static
batches: TTFT, TPOT, end-to-end latency and throughput. `llmsim.validate_rows` prices every row with
its own settings (`predict_static`) and reports the absolute percentage error (APE). The full
method and the known biases are in docs/validation.md.

The notebook reads `../shared/reference/measurements/dev.csv` when the repository sits next to
it; on a fresh install it reads `notebooks/data/dev_static.csv`, a copy of the static-batch rows
of that file (the columns the validation needs; see `notebooks/data/README.md`)."""),
    ("code", SETUP + '''\
import os
from pathlib import Path
import pandas as pd

here = Path.cwd()
candidates = [Path(os.environ["LLMSIM_MEASUREMENTS"])] if os.environ.get("LLMSIM_MEASUREMENTS") else []
for root in (here, *here.parents):
    candidates.append(root / "shared" / "reference" / "measurements" / "dev.csv")
candidates += [here / "data" / "dev_static.csv", here / "notebooks" / "data" / "dev_static.csv"]
path = next(p for p in candidates if p.is_file())
rows, bad = llmsim.read_measurements(path)
print(f"{len(rows)} rows from {path}")
'''),
    ("code", '''\
result = llmsim.validate_rows(rows, scenario="static_batch")
pts = pd.DataFrame(result["points"])
print(f"predicted {result['predicted']} rows, skipped {len(result['skipped'])}")
for s in result["skipped"]:
    print("  skipped", s["id"], "-", s["reason"])
table = pd.DataFrame([{"hardware": k, **v} for k, v in result["by_hardware"].items()])
print(table.round(1).to_string(index=False))
print(pd.DataFrame([{"metric": k, **v} for k, v in result["by_metric"].items()]).round(1).to_string(index=False))
'''),
    ("code", '''\
fig, axes = plt.subplots(1, 2, figsize=(13, 5))
for hw, g in pts.groupby("hardware"):
    axes[0].scatter(g["measured"], g["predicted"], s=12, label=hw, alpha=0.7)
lo, hi = pts[["measured", "predicted"]].min().min(), pts[["measured", "predicted"]].max().max()
axes[0].plot([lo, hi], [lo, hi], "k-", lw=0.8)
axes[0].fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="gray", alpha=0.15, label="±15 %")
axes[0].set(xscale="log", yscale="log", xlabel="measured", ylabel="predicted", title="predicted vs measured (mixed units)")
axes[0].legend()
by_metric = pd.DataFrame(result["by_metric"]).T.sort_values("median_ape")
y = np.arange(len(by_metric))
axes[1].barh(y - 0.2, by_metric["median_ape"], height=0.4, label="median APE")
axes[1].barh(y + 0.2, by_metric["p90_ape"], height=0.4, label="p90 APE")
axes[1].axvline(15, color="k", ls=":", lw=0.8, label="15 % target (median, all rows)")
axes[1].set_yticks(y, list(by_metric.index))
axes[1].set(xlabel="absolute % error", title="error by metric"); axes[1].legend()
plt.tight_layout(); plt.show()
'''),
    ("md", """\
## Check: median APE over the static-batch rows

The target of the performance model is a median APE of at most 15 % over every predicted
static-batch row (docs/validation.md reports the current value)."""),
    ("code", '''\
median_ape = float(np.median(np.abs(pts["error_pct"])))
check("median APE over static rows (%)", f"{median_ape:.1f}", "<= 15", median_ape <= 15)
check("rows predicted", result["predicted"], ">= 250 of the static rows", result["predicted"] >= 250)
print(pts.assign(ape=pts.error_pct.abs()).nlargest(8, "ape")[["id", "metric", "measured", "predicted", "error_pct"]].round(1).to_string(index=False))
'''),
    ("md", """\
The largest errors are the known biases listed in docs/validation.md: TTFT of 1-token prompts
under lmdeploy (a metric-definition mismatch), long-output fp8 rows at TP >= 2 on H100, and
gpt-fast (its int8 Mixtral on one GPU). To check your own hardware, validate your own `vllm bench serve`
results (`llmsim validate result.json --model ... --hardware ...`) and fit an overlay with
`llmsim calibrate` (docs/calibration.md)."""),
]


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for i, (kind, src) in enumerate(cells):
        cell = new_markdown_cell(src) if kind == "md" else new_code_cell(src)
        cell["id"] = f"cell-{i}"  # stable ids: regenerating gives identical files
        nb.cells.append(cell)
    return nb


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, cells in NOTEBOOKS.items():
        text = nbformat.writes(build(cells)) + "\n"
        path = HERE / name
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(HERE.parent)}")
    if stale:
        print("out of date (run python notebooks/make_notebooks.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
