"""Expert parallelism, pipelined micro-batches and node-crossing links (issue 15): by hand."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.cost.network import scaleout_link
from simulator.cost.parallel import alltoall_time_s, bubble_fraction, pipeline_time_s, pp_sends
from simulator.cost.roofline import CostModel
from simulator.cost.stepbatch import StepBatch
from simulator.scenario import Scenario
from simulator.specs.catalog import load_hardware, load_model
from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTypes
from simulator.specs.parallelism import Parallelism

H200 = load_hardware("h200-sxm")
DSV3 = load_model("deepseek-v3")


def _op_ms(cost: CostModel, batch: StepBatch, name: str) -> float:
    return next(o["time_ms"] for o in cost.breakdown(batch)["ops"] if o["name"] == name)


def test_alltoall_one_moe_layer_ep8_by_hand():
    # DeepSeek-V3: H = 7168, k = 8; 1024 tokens, bf16 activations, EP 8 on NVLink
    # busiest rank, one direction: 1024/8 tokens x 8 experts x 7168 x 2 B x 7/8 = 12,845,056 B
    per_dir = 1024 / 8 * 8 * 7168 * 2 * 7 / 8
    assert per_dir == 12_845_056
    bw = 450e9 * 0.8
    assert alltoall_time_s(1024, 8, 7168, 2, 8, bw, 5e-6) == pytest.approx(2 * (per_dir / bw + 5e-6))
    assert alltoall_time_s(1024, 8, 7168, 2, 8, bw, 0.0) == pytest.approx(2 * 12_845_056 / 360e9)  # 71.36 us
    # imbalance: the busiest rank carries rho x the mean
    assert alltoall_time_s(1024, 8, 7168, 2, 8, bw, 0.0, 1.5) == pytest.approx(1.5 * 2 * per_dir / bw)
    assert alltoall_time_s(1024, 8, 7168, 2, 1, bw) == 0.0


def test_cost_model_prices_the_alltoall_per_moe_layer():
    T = 1024
    ep8 = CostModel(DSV3, H200, Parallelism(8, 1, ep=8), DTypes(weight="fp8"))
    tp8 = CostModel(DSV3, H200, Parallelism(8, 1), DTypes(weight="fp8"))
    b = StepBatch(T, 64, 64 * 2000.0, 0.0, 64 * 2000.0)
    rate = H200.link_bandwidth_bytes_per_s * H200.efficiency.link_efficiency
    per_layer = alltoall_time_s(T, 8, 7168, 2, 8, rate, H200.link_latency_s)
    assert _op_ms(ep8, b, "moe_alltoall") == pytest.approx(DSV3.num_moe_layers * per_layer * 1e3)
    # the MoE layers' second all-reduce is gone: 2 L - n_moe all-reduces remain
    ar = _op_ms(tp8, b, "allreduce") / (2 * DSV3.num_layers)
    assert _op_ms(ep8, b, "allreduce") == pytest.approx(ar * (2 * DSV3.num_layers - DSV3.num_moe_layers))
    # k = 8 = ep: all-to-all bytes equal the ring all-reduce's, 2 (ep-1)/ep H b per token
    # (k (ep-1)/ep^2 x 2 = 1.75 = 2 x 7/8): only the doubled latency differs
    diff = ep8.time(b) - tp8.time(b)
    assert diff == pytest.approx(DSV3.num_moe_layers * H200.link_latency_s, rel=1e-6)


def test_expert_imbalance_slows_the_expert_gemms():
    b = StepBatch(4096, 64, 0.0, 4096 * 2048.0, 4096.0)
    base = CostModel(DSV3, H200, Parallelism(8, 1, ep=8), DTypes(weight="fp8"))
    skew = CostModel(DSV3, H200, Parallelism(8, 1, ep=8, expert_imbalance=2.0), DTypes(weight="fp8"))
    assert _op_ms(skew, b, "moe_experts") > 1.5 * _op_ms(base, b, "moe_experts")
    lat_ms = DSV3.num_moe_layers * 2 * H200.link_latency_s * 1e3  # latencies do not scale with rho
    assert _op_ms(skew, b, "moe_alltoall") - lat_ms == pytest.approx(2 * (_op_ms(base, b, "moe_alltoall") - lat_ms))


def test_ep_errors():
    with pytest.raises(SpecError, match="ep: 3 must divide tp"):
        Parallelism(8, 1, ep=3)
    with pytest.raises(SpecError, match="dense"):
        CostModel(load_model("llama-3.1-8b"), H200, Parallelism(2, 1, ep=2))
    with pytest.raises(SpecError, match="expert_imbalance"):
        Scenario(model="mixtral-8x7b", tp=2, ep=2, expert_imbalance=3.0)


@pytest.mark.parametrize("model", ["deepseek-v3", "mixtral-8x7b", "qwen3-30b-a3b", "gpt-oss-120b"])
def test_moe_models_run_end_to_end_with_ep(model):
    sc = Scenario(model=model, hardware="h200-sxm", tp=8, ep=8, workload="random", num_requests=20,
                  input_len=500, output_len=20, rate=10.0, debug=True)
    _, s = sc.run()
    assert s["completed"] == 20 and s["mean_tpot_ms"] > 0


def test_pipeline_time_by_hand():
    # stages 1, 2, 1.5 ms, 4 micro-batches: 4.5 + 3 x 2 = 10.5 ms
    assert pipeline_time_s([1.0, 2.0, 1.5], 4) == pytest.approx(10.5)
    assert pipeline_time_s([1.0, 2.0, 1.5], 1) == pytest.approx(4.5)  # stages one after another
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(4, 1) == pytest.approx(3 / 4)


def test_pp_microbatches_step_time_formula():
    m = load_model("llama-3.1-70b")
    one = CostModel(m, H200, Parallelism(2, 4))
    four = CostModel(m, H200, Parallelism(2, 4, pp_microbatches=4))
    T, S, Ad, R = 256.0, 256.0, 256 * 3000.5, 256 * 3001.0
    # balanced stages: t = (M + pp - 1) / pp x t_model(x / M), x / M the per-micro-batch statistics
    stage = one.step_time(T / 4, S / 4, Ad / 4, 0.0, R / 4) / 4
    assert four.step_time(T, S, Ad, 0.0, R) == pytest.approx(7 * stage, rel=1e-12)
    assert four.step_time(T, S, Ad, 0.0, R) == pytest.approx(pipeline_time_s([stage] * 4, 4), rel=1e-12)
    assert float(four.step_times(T, S, Ad, 0.0, R)) == pytest.approx(four.step_time(T, S, Ad, 0.0, R), rel=1e-12)
    # decode of a large batch is weight-bound: micro-batching raises the step time (each
    # micro-batch re-reads the weights) but the bubble shrinks: 3/7 of stage time idle, not 3/4
    assert bubble_fraction(4, 4) < bubble_fraction(4, 1)


def test_pp_microbatches_run_in_the_engine():
    sc = Scenario(model="llama-3.1-70b", hardware="h200-sxm", tp=2, pp=4, pp_microbatches=4, workload="random",
                  num_requests=20, input_len=500, output_len=20, rate=5.0, debug=True)
    _, s = sc.run()
    assert s["completed"] == 20


def test_groups_crossing_nodes_use_the_scaleout_link():
    assert pp_sends(H200, Parallelism(8, 2)) == (0, 1)
    assert pp_sends(H200, Parallelism(2, 4)) == (3, 0)
    assert pp_sends(H200, Parallelism(4, 4)) == (2, 1)
    m = load_model("llama-3.1-405b")
    b = StepBatch(64, 64, 64 * 1000.5, 0.0, 64 * 1001.0)
    two_nodes = CostModel(m, H200, Parallelism(8, 2))
    out = scaleout_link(H200)
    assert (out.bandwidth_bytes_per_s, out.latency_s) == (50e9, 10e-6)
    send_s = 64 * m.hidden_size * 2 / (50e9 * H200.efficiency.link_efficiency) + 10e-6
    assert _op_ms(two_nodes, b, "pp_send_scaleout") == pytest.approx(send_s * 1e3)
    # TP 16 spans two nodes: its all-reduce is priced on the NIC, 9x slower than NVLink's 450 GB/s
    tp16 = CostModel(load_model("deepseek-v3"), H200, Parallelism(16, 1))
    tp8 = CostModel(load_model("deepseek-v3"), H200, Parallelism(8, 1))
    ring16 = _op_ms(tp16, b, "allreduce") - 2 * 61 * 10e-6 * 1e3
    ring8 = _op_ms(tp8, b, "allreduce") - 2 * 61 * H200.link_latency_s * 1e3
    assert ring16 / ring8 == pytest.approx((15 / 16) / (7 / 8) * 450e9 / 50e9, rel=1e-9)
    # a spec may give its own scale-out NIC and node size
    hw = dataclasses.replace(H200, scaleout_bandwidth_bytes_per_s=100e9, gpus_per_node=4)
    assert scaleout_link(hw).bandwidth_bytes_per_s == 100e9
    assert pp_sends(hw, Parallelism(4, 2)) == (0, 1)
