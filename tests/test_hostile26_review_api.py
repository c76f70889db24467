"""Issue 26 review (hostile user of the Python API and the engine, against the fixed main):
settings accepted and silently ignored in some combination, and a time outside the simulated
clock accepted by the engine's own entry. Each test failed on the commit reviewed (af57e05).

* the synthetic lengths (`input_len`, `output_len`, `range_ratio`) given for a workload that
  does not read them: the CLI refused them, `Scenario(...)`, `Scenario.from_dict`, a scenario
  YAML and `llmsim.make_workload` ran the trace or dataset's own lengths (8 tests of the suite
  did this unknowingly: `Scenario(input_len=32, ...)` served azure-conv);
* `warm_cache` and `kv_offloading_size` (`EngineConfig.cpu_offload_bytes`) with prefix caching
  off: accepted, no effect;
* `replicas` and `request_timeout_s` under `disagg`: accepted, no effect (the deployment gives
  the replicas; the disaggregated engine has no client view);
* a `Workload` with an arrival beyond the simulated clock (`MAX_CLOCK_S`) given to `simulate`:
  `Scenario` refused it, `simulate` ran it and reported a TTFT and an E2EL of 0;
* the ledger property widened (`benchmarks/ledger_property.py --wide`): ShareGPT, Mooncake,
  MoE with EP/PP, max_model_len, clients, speculative decoding, per-pool overrides and links.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import load_script

import simulator as L
from simulator.scenario import Scenario
from simulator.serving.records import MAX_CLOCK_S
from simulator.specs.checks import SpecError

ROOT = Path(__file__).resolve().parent.parent
SMALL = dict(model="llama-3.1-8b", hardware="h100-sxm", num_requests=6, rate=10.0)


# ============================================================== lengths for a workload that has its own


@pytest.mark.parametrize("kw, field, owner", [
    (dict(workload="sharegpt", input_len=5000), "input_len", "workload 'sharegpt'"),
    (dict(workload="sharegpt", output_len=7), "output_len", "workload 'sharegpt'"),
    (dict(workload="azure-conv", range_ratio=0.5), "range_ratio", "trace 'azure-conv'"),
    (dict(input_len=32), "input_len", "trace 'azure-conv'"),  # the default workload is a trace
    (dict(workload="shared-prefix", input_len=64), "input_len", "workload 'shared-prefix'"),
    (dict(workload="inference-perf-shared-prefix-general-ez", output_len=9), "output_len",
     "workload 'inference-perf-shared-prefix-general-ez'"),
])
def test_lengths_for_a_workload_that_does_not_read_them_are_refused(kw, field, owner):
    value = kw[field]
    msg = f"{field}: {value!r} applies to workload random"
    with pytest.raises(SpecError, match=msg) as e:
        Scenario(**SMALL, **kw)
    assert owner in str(e.value)
    with pytest.raises(SpecError, match=f"scenario: {msg}"):
        Scenario.from_dict({**SMALL, **kw})


def test_lengths_refused_in_make_workload_and_kept_where_read():
    with pytest.raises(SpecError, match="input_len: 10 applies to workload random"):
        L.make_workload(num_requests=5, input_len=10)  # azure-conv by default
    # where they are read they act: 5 random prompts of exactly 10 tokens, outputs of 3
    w = L.make_workload("random", num_requests=5, input_len=10, output_len=3)
    assert w.input_len.tolist() == [10] * 5 and w.output_len.tolist() == [3] * 5
    # shared-prefix reads output_len only: 2 groups x 2 prompts, every output 9 tokens
    sc = Scenario(**{**SMALL, "num_requests": 4}, workload="shared-prefix", output_len=9,
                  workload_params={"num_groups": 2, "prompts_per_group": 2, "system_prompt_len": 16,
                                   "question_len": 4})
    assert sc.make_workload().output_len.tolist() == [9] * 4


def test_replace_to_another_workload_drops_the_lengths_it_does_not_read():
    """As `replace` already drops workload parameters the new workload does not take."""
    sc = Scenario(**SMALL, workload="random", input_len=300, output_len=20, range_ratio=0.5)
    sg = sc.replace(workload="sharegpt")
    assert (sg.input_len, sg.output_len, sg.range_ratio) == (1024, 128, 0.0)
    sp = sc.replace(workload="shared-prefix")
    assert (sp.input_len, sp.output_len, sp.range_ratio) == (1024, 20, 0.0)  # output_len is read there
    assert Scenario(**sg.as_dict()).workload == "sharegpt"  # the round trip sweeps and plans use


# ============================================================== prefix cache companions without a prefix cache


@pytest.mark.parametrize("kw, field", [
    (dict(warm_cache=True), "warm_cache: True"),
    (dict(kv_offloading_size=1.0), "kv_offloading_size: 1.0"),
])
def test_prefix_cache_settings_without_prefix_caching_are_refused(kw, field):
    with pytest.raises(SpecError, match=f"{field} applies only with prefix caching, and enable_prefix_caching is false"):
        Scenario(**SMALL, workload="random", enable_prefix_caching=False, **kw)
    # the profile's default named: trtllm leaves caching off
    with pytest.raises(SpecError, match=f"{field} applies only with prefix caching, and engine 'trtllm' leaves it off"):
        Scenario(**SMALL, workload="random", engine="trtllm", **kw)
    Scenario(**SMALL, workload="random", enable_prefix_caching=True, **kw)  # accepted where it acts


def test_engine_config_prefix_cache_settings_need_prefix_caching():
    with pytest.raises(SpecError, match="warm_cache: True applies only with enable_prefix_caching=True"):
        L.EngineConfig(warm_cache=True)
    with pytest.raises(SpecError, match="cpu_offload_bytes: 1000000000.0 applies only with enable_prefix_caching"):
        L.EngineConfig(cpu_offload_bytes=1e9)
    L.EngineConfig(enable_prefix_caching=True, warm_cache=True, cpu_offload_bytes=1e9)


# ============================================================== aggregated-only settings under disagg


def test_disagg_refuses_replicas():
    with pytest.raises(SpecError, match=r"replicas: 3 applies only to an aggregated run; disagg 1:1 sets the replicas"):
        Scenario(**SMALL, workload="random", disagg="1:1", replicas=3)
    with pytest.raises(SpecError, match="scenario: replicas: 2 applies only"):
        Scenario.from_dict({**SMALL, "workload": "random", "disagg": "2:1", "replicas": 2})
    assert Scenario(**SMALL, workload="random", disagg="1:1", replicas=1).disagg == "1:1"


def test_disagg_refuses_a_client_timeout():
    """The aggregated run with a 50 ms timeout fails every request (TTFT alone is ~27 ms, E2EL
    ~166 ms); the disaggregated one accepted it and completed all 12 (E2EL ~148 ms)."""
    kw = dict(**{**SMALL, "num_requests": 12}, workload="random", input_len=300, output_len=20,
              kv_capacity_tokens=4000, request_timeout_s=0.05)
    _, agg = Scenario(**kw).run()
    assert agg["completed"] == 0 and agg["failed"] == 12
    with pytest.raises(SpecError, match="request_timeout_s: 0.05: the client's timeout is not modelled for a "
                                        r"disaggregated deployment \(disagg 1:1\)"):
        Scenario(**kw, disagg="1:1")


# ============================================================== arrivals beyond the simulated clock


def _workload(arrivals: list[float]) -> Any:
    n = len(arrivals)
    return L.Workload(np.array(arrivals, dtype=float), np.full(n, 10), np.full(n, 5))


def test_simulate_refuses_arrivals_beyond_the_clock():
    """An arrival at 1e300 s: every step after it rounds to 0 s (1e300 + 0.009 == 1e300), so the
    run reported a TTFT and an E2EL of 0 for that request."""
    cost = L.make_cost_model("llama-3.1-8b", "h100-sxm")
    with pytest.raises(SpecError, match=r"workload.arrival_s\[1\]: 1e\+300 s is beyond the simulated clock's range "
                                        "of 1e\\+10 s"):
        L.simulate(cost, _workload([0.0, 1e300]), L.EngineConfig())
    res = L.simulate(cost, _workload([0.0, MAX_CLOCK_S]), L.EngineConfig())  # the edge itself runs
    ttft = res.first_token_s - res.arrival_s
    assert ttft[1] == pytest.approx(ttft[0], rel=1e-3) and ttft[1] > 0
    # a closed loop ignores arrival times: not refused
    w = L.Workload(np.array([0.0, 1e300]), np.full(2, 10), np.full(2, 5), concurrency=1)
    assert L.simulate(cost, w, L.EngineConfig()).status.tolist() == [1, 1]


def test_disaggregated_run_refuses_arrivals_beyond_the_clock():
    sc = Scenario(**SMALL, workload="random", disagg="1:1")
    with pytest.raises(SpecError, match=r"workload.arrival_s\[1\]: 1e\+300 s is beyond"):
        sc.run(workload=_workload([0.0, 1e300]))


# ============================================================== the ledger property, widened


LEDGER = load_script("benchmarks/ledger_property.py")


@pytest.fixture(scope="module")
def mooncake_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    p = tmp_path_factory.mktemp("mooncake") / "mc.jsonl"
    p.write_text("\n".join(LEDGER.MOONCAKE_ROWS) + "\n")
    return str(p)


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_ledger_property_wide(mooncake_file, data):
    """The review's axes on top of the ledger property: a run conserves requests, keeps peak
    KV <= 1, and gives finite, ordered times, or is refused with one SpecError
    (`benchmarks/ledger_property.py --wide --n 2000`: 0 violations)."""
    kw = LEDGER.draw_wide_config(lambda name, options: data.draw(st.sampled_from(list(options)), label=name),
                                 mooncake_file)
    out = LEDGER.check_config(kw)
    assert out is None or out.startswith("refused"), f"{kw}: {out}"


def test_wide_draw_reaches_every_new_axis(mooncake_file):
    """The widened draw does reach its axes (a property that never draws them cannot fail)."""
    rng = np.random.default_rng(0)
    seen: set[str] = set()
    for _ in range(300):
        kw = LEDGER.draw_wide_config(LEDGER.seeded_choose(rng), mooncake_file)
        seen.update(k for k in ("speculative_config", "deployment", "concurrency", "max_model_len") if k in kw)
        seen.add(str(kw["workload"]).rsplit("/", 1)[-1])
        if kw.get("ep", 1) > 1:
            seen.add("ep")
        if kw.get("pp", 1) > 1:
            seen.add("pp")
    assert {"speculative_config", "deployment", "concurrency", "max_model_len", "sharegpt", "mc.jsonl",
            "ep", "pp"} <= seen


# ============================================================== run_whatif's list arguments


WI_BASE = dict(model="llama-3.1-8b", hardware="h100-sxm", workload="random", num_requests=8, input_len=200,
               output_len=20, rate=2.0)
SPEC = {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}


@pytest.mark.parametrize("kind, kw, message", [
    ("kv-dtype", dict(values=2.0, load=False), r"values: 2.0 \(float\) is not a list of KV formats"),
    ("kv-dtype", dict(values=None, load=False), r"values: None \(NoneType\) is not a list of KV formats"),
    ("kv-dtype", dict(values="fp8", load=False), r"values: 'fp8' \(str\) is not a list of KV formats"),
    ("kv-dtype", dict(values=[None], load=False), r"values\[0\]: None is not one of fp32, bf16"),
    ("hardware", dict(hardware=1.5, load=False), r"hardware: 1.5 \(float\) is not a list of hardware ids"),
    ("hardware", dict(hardware=[None], load=False), r"hardware\[0\]: None \(NoneType\) is not a hardware id"),
    ("hardware", dict(hardware=["h100-sxm"], prices=2.0, load=False),
     r"prices: 2.0 \(float\) is not a mapping of hardware to \$ per GPU-hour"),
    ("hardware", dict(hardware=["h100-sxm"], prices=["h100-sxm"], load=False), r"prices: \['h100-sxm'\] \(list\)"),
    ("speculative", dict(speculative_config=SPEC, concurrencies=4), r"concurrencies: 4 \(int\) is not a list of integers"),
])
def test_whatif_list_arguments_are_checked(kind, kw, message):
    """TypeError ('float' object is not iterable), KeyError (None) and AttributeError ('float'
    object has no attribute 'items') before: 33 of 140 hostile whatif calls."""
    with pytest.raises(SpecError, match=message) as e:
        L.run_whatif(kind, Scenario(**WI_BASE), **kw)
    if "is not a list" in message or "is not a mapping" in message or "is not a hardware" in message:
        assert isinstance(e.value, TypeError)  # a SpecTypeError, as the other object arguments


def test_whatif_lists_still_work():
    r = L.run_whatif("kv-dtype", Scenario(**WI_BASE), ("bf16", "fp8"), load=False)
    rows = {row["kv_dtype"]: row for row in r["values"]}
    # fp8 halves the KV bytes per token: twice the tokens in the same budget (within a block)
    assert rows["fp8"]["kv_bytes_per_token"] * 2 == rows["bf16"]["kv_bytes_per_token"]
    assert rows["fp8"]["kv_capacity_tokens"] == pytest.approx(2 * rows["bf16"]["kv_capacity_tokens"], abs=32)


# ============================================================== make_plan's candidate axes


PLAN_BASE = dict(model="llama-3.2-1b", hardware="h100-sxm", workload="random", num_requests=20, input_len=100,
                 output_len=10, goodput={"ttft": 2000})


@pytest.mark.parametrize("kw, message, is_type", [
    (dict(hardware=2.0), r"hardware: 2.0 \(float\) is not a list of hardware ids", True),
    (dict(tps=float("nan")), r"tps: nan \(float\) is not a list of integers >= 1", True),
    (dict(kv_dtypes=2.0), r"kv_dtypes: 2.0 \(float\) is not a list of KV formats", True),
    (dict(weight_dtypes=True), r"weight_dtypes: True \(bool\) is not a list of weight formats", True),
    # a bad format fails the plan, as a bad hardware name does; it was an "infeasible" row
    (dict(kv_dtypes=["fp8", "bogus"]), r"kv_dtypes\[1\]: 'bogus' is not one of fp32, bf16", False),
    (dict(weight_dtypes=[1.5]), r"weight_dtypes\[0\]: 1.5 is not one of fp32, bf16", False),
])
def test_plan_candidate_axes_are_checked(kw, message, is_type):
    with pytest.raises(SpecError, match=message) as e:
        L.make_plan(Scenario(**PLAN_BASE), 1.0, **{"hardware": ["h100-sxm"], "tps": [1], **kw})
    assert isinstance(e.value, TypeError) == is_type


# ============================================================== a speculative setting made for another replica


def test_simulate_refuses_a_speculative_setting_made_for_another_cost_model():
    """`Scenario` refuses speculative decoding with pp > 1 (not modelled); `simulate` given a
    setting made for a pp = 1 cost model and a pp = 2 one ran it, and priced the draft and the
    memory for the replica it was not running."""
    cost = L.make_cost_model("llama-3.1-8b", "h100-sxm")
    spec = Scenario(workload="random", speculative_config=SPEC).speculative(cost)
    w = L.Workload(np.zeros(4), np.full(4, 100), np.full(4, 20))
    with pytest.raises(SpecError, match=r"speculative: made for llama-3.1-8b on h100-sxm \(tp=1, pp=1, ep=1\), but "
                                        r"the run prices llama-3.1-8b on h100-sxm \(tp=1, pp=2, ep=1\)"):
        L.simulate(L.make_cost_model("llama-3.1-8b", "h100-sxm", pp=2), w, L.EngineConfig(), speculative=spec)
    with pytest.raises(SpecError, match="speculative_config: speculative decoding with pp > 1 is not modelled"):
        Scenario(workload="random", pp=2, speculative_config=SPEC).speculative()
    with pytest.raises(SpecError, match=r"but the run prices llama-3.2-1b"):
        L.simulate(L.make_cost_model("llama-3.2-1b", "h100-sxm"), w, L.EngineConfig(), speculative=spec)
    # an equal cost model made again is the same replica: it runs, all 4 complete
    res = L.simulate(L.make_cost_model("llama-3.1-8b", "h100-sxm"), w, L.EngineConfig(), speculative=spec)
    assert res.status.tolist() == [1, 1, 1, 1]
