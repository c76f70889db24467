"""Hostile-input corpus of issue 17 (spec, catalog, validation and physics layer).

One case per cause of issue 17 that lives in specs/catalog/validate/calibrate/roofline/predict/
memory/resolve, numbered as in the issue. Each asserts one of: a one-line `error:` with exit
status 2 naming the field, the value and what is allowed; a correct result checked by hand; or a
clean refusal from the Python API (SpecError/TypeError naming the argument). Every case is
bounded in time (a hang or blow-up before the fix is a refusal in well under a second now).
"""

from __future__ import annotations

import csv
import json
import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_helpers import invoke, one_line_error

from simulator.analysis import measurements
from simulator.analysis import validate as V
from simulator.cost.memory import memory_plan
from simulator.cost.predict import DECODE_CHUNK, decode_step_arrays, predict_static
from simulator.cost.roofline import CostModel
from simulator.resolve import make_cost_model
from simulator.specs.catalog import import_hf_config, load_hardware, load_model, read_yaml
from simulator.specs.checks import MESSAGE_CHARS, SpecError, check_number, show
from simulator.specs.fields import build
from simulator.specs.hardware import HardwareSpec

pytestmark = pytest.mark.reliability

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
H100_YAML = (ROOT / "hardware_specs" / "h100-sxm.yaml").read_text()
VLLM = json.loads((DATA / "vllm_bench_serve_result.json").read_text())
COLUMNS = [*measurements.REQUIRED_COLUMNS, *measurements.OPTIONAL_COLUMNS]
GOOD_ROW = {"id": "r1", "source": "s", "model": "llama-3.1-8b", "hardware": "h100-sxm", "num_gpus": "1",
            "tp": "1", "pp": "1", "weight_dtype": "bf16", "activation_dtype": "bf16", "kv_dtype": "bf16",
            "scenario": "static_batch", "batch_size": "1", "input_len": "128", "output_len": "128",
            "metric": "output_tokens_per_s", "value": "100", "unit": "tokens/s"}




def write_csv(path: Path, **changes: str) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        w.writerow({**GOOD_ROW, **changes})
    return path


def overlay(tmp_path: Path, text: str, name: str = "hw.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


# --------------------------------------------------------------------------- cause 5


def test_5_vllm_request_rate_not_a_number_is_refused(tmp_path):
    f = tmp_path / "fast.json"
    f.write_text(json.dumps({**VLLM, "request_rate": "fast"}))
    one_line_error(invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm"),
                   "request_rate", "'fast'", "inf")
    with pytest.raises(SpecError, match="request_rate: 'fast'"):
        measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")
    # the valid spellings still map as documented: inf -> offline, 4.0 -> online at 4 req/s
    f.write_text(json.dumps({**VLLM, "request_rate": "inf"}))
    assert measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")[0]["scenario"] == "offline_max_throughput"
    rows = measurements.read_vllm_result(DATA / "vllm_bench_serve_result.json", model="llama-3.1-8b", hardware="h100-sxm")
    assert rows[0]["scenario"] == "online_poisson" and rows[0]["request_rate"] == 4.0


# --------------------------------------------------------------------------- cause 6


@pytest.mark.parametrize("cmd", [["simulate", "-n", "3", "--json"], ["predict"]])
def test_6_absurd_efficiency_override_is_refused_with_its_range(cmd):
    r = invoke(*cmd, "-m", "llama-3.1-8b", "-H", "h100-sxm", "--efficiency", "step_overhead_s=1e300")
    one_line_error(r, "step_overhead_s", "1e+300", "must be a number >= 0 and <= 10 s")


def test_6_ideal_with_efficiency_applies_the_overrides_on_top():
    ideal = make_cost_model("llama-3.1-8b", "h100-sxm", ideal=True)
    both = make_cost_model("llama-3.1-8b", "h100-sxm", ideal=True, efficiency={"step_overhead_s": 0.25})
    # pure roofline plus exactly the added per-step overhead (before: the override was dropped)
    for T, S, R in ((1, 1, 100), (512, 1, 512), (64, 64, 64 * 900)):
        assert both.step_time(T, S, R=R) == pytest.approx(ideal.step_time(T, S, R=R) + 0.25, rel=1e-12)
    assert both.hardware.efficiency.compute_efficiency == 1.0
    # --engine none: the engine core's steps only (the default vllm profile adds the client's
    # view, API-server latency and one step of async-scheduling lag, to TTFT and E2E)
    base = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-w", "random", "-n", "1",
            "--input-len", "16", "--output-len", "2", "--json", "--ideal", "--engine", "none"]
    a = json.loads(invoke(*base).stdout)
    b = json.loads(invoke(*base, "--efficiency", "step_overhead_s=0.25").stdout)
    # one request, 2 output tokens: 2 steps, each 250 ms longer
    assert b["mean_e2el_ms"] - a["mean_e2el_ms"] == pytest.approx(500.0, rel=1e-9)


def test_6_duplicate_yaml_key_is_an_error_naming_it(tmp_path):
    f = overlay(tmp_path, "base: h100-sxm\nhbm_capacity_bytes: 1e9\nhbm_capacity_bytes: 2e9\n")
    one_line_error(invoke("show", f), "duplicate key 'hbm_capacity_bytes'", "line 3")
    with pytest.raises(SpecError, match="duplicate key 'compute_efficiency'"):
        load_hardware(overlay(tmp_path, "base: h100-sxm\nefficiency:\n  compute_efficiency: 0.5\n"
                                        "  compute_efficiency: 0.6\n", "e.yaml"))


# --------------------------------------------------------------------------- cause 9


def test_9_overlay_base_on_itself_or_in_a_cycle(tmp_path):
    me = overlay(tmp_path, "base: SELF\nhbm_capacity_bytes: 1e9\n", "self.yaml")
    Path(me).write_text(f"base: {me}\nhbm_capacity_bytes: 1e9\n")
    one_line_error(invoke("show", me), "cycle", "self.yaml -> self.yaml")
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(f"base: {b}\n")
    b.write_text(f"base: {a}\n")
    with pytest.raises(SpecError, match=r"cycle \(a.yaml -> b.yaml -> a.yaml\)"):
        load_hardware(a)
    # a legitimate chain of two overlays still resolves
    c = tmp_path / "c.yaml"
    d = overlay(tmp_path, "base: h100-sxm\nlink_latency_s: 1.0e-5\n", "d.yaml")
    c.write_text(f"base: {d}\nefficiency: {{step_overhead_s: 0.002}}\n")
    hw = load_hardware(c)
    assert hw.link_latency_s == 1e-5 and hw.efficiency.step_overhead_s == 0.002


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("kind", ["hardware_yaml", "model_yaml", "config_json", "vllm_json"])
def test_9_deeply_nested_documents_are_refused(tmp_path, kind):
    if kind == "hardware_yaml":
        f = overlay(tmp_path, f"base: h100-sxm\nnotes: {DEEP}\n")
        one_line_error(invoke("show", f), "nested more than 64 levels")
    elif kind == "model_yaml":
        f = overlay(tmp_path, f"id: m\nhidden_size: {DEEP}\n", "m.yaml")
        one_line_error(invoke("show", f), "nested more than 64 levels")
    elif kind == "config_json":
        f = tmp_path / "config.json"
        f.write_text('{"hidden_size": ' + DEEP + "}")
        one_line_error(invoke("show", str(f)), "nested more than 64 levels")
        with pytest.raises(SpecError, match="nested more than 64 levels"):
            import_hf_config(f)
    else:
        f = tmp_path / "r.json"
        f.write_text(json.dumps(VLLM)[:-1] + ', "extra": ' + DEEP + "}")
        one_line_error(invoke("validate", str(f), "-m", "llama-3.1-8b", "-H", "h100-sxm"),
                       "nested more than 64 levels")


def test_9_recursive_yaml_alias_is_refused(tmp_path):
    f = overlay(tmp_path, "base: h100-sxm\nsources: &a [x, *a]\n")
    one_line_error(invoke("show", f), "contains itself")


# --------------------------------------------------------------------------- cause 10


def test_10_huge_integers_in_yaml_are_refused(tmp_path):
    f = overlay(tmp_path, "id: m\nhidden_size: " + "9" * 5000 + "\n", "m.yaml")
    one_line_error(invoke("show", f), "integer of 5000 digits", "at most 30")
    f = overlay(tmp_path, H100_YAML.replace("hbm_capacity_bytes:", "hbm_capacity_bytes: " + "9" * 400 + "\n#", 1))
    one_line_error(invoke("show", f), "integer of 400 digits")
    # an integer that parses (the Python API, or under 30 digits) is range-checked, not overflowed
    f = overlay(tmp_path, "base: h100-sxm\nhbm_capacity_bytes: " + "9" * 25 + "\n", "o.yaml")
    one_line_error(invoke("show", f), "hbm_capacity_bytes", "<= 1e+15 bytes")
    with pytest.raises(SpecError, match=r"hbm_capacity_bytes: <integer of 401 digits> must be"):
        dataclasses_replace(load_hardware("h100-sxm"), hbm_capacity_bytes=10 ** 400)


def dataclasses_replace(spec, **kw):
    import dataclasses

    return dataclasses.replace(spec, **kw)


def test_10_huge_integers_in_json_and_csv_are_refused(tmp_path):
    f = tmp_path / "config.json"
    f.write_text('{"hidden_size": 1' + "0" * 5000 + "}")
    with pytest.raises(SpecError, match="integer of 5001 digits"):
        import_hf_config(f)
    f = write_csv(tmp_path / "m.csv", batch_size="1e308")
    one_line_error(invoke("validate", str(f)), "m.csv:2", "batch_size", "'1e308'", "<= 1000000")


def test_10_integer_dtype_key_is_an_error_not_a_typeerror(tmp_path):
    f = overlay(tmp_path, "base: h100-sxm\npeak_flops_per_s: {8: 1.0e+15}\n")
    one_line_error(invoke("show", f), "peak_flops_per_s.8", "unknown dtype", "bf16")
    with pytest.raises(SpecError, match="peak_flops_per_s.8: unknown dtype"):
        build(HardwareSpec, {**yaml.safe_load(H100_YAML), "peak_flops_per_s": {8: 1e15}})


# --------------------------------------------------------------------------- cause 11


@pytest.mark.parametrize("change,words", [
    ("hbm_bandwidth_bytes_per_s: 1.0e-300", ["hbm_bandwidth_bytes_per_s", "1e-300", ">= 1e+06", "bytes/s"]),
    ("peak_flops_per_s: {bf16: 1.0e-300}", ["peak_flops_per_s.bf16", "1e-300", ">= 1e+09", "FLOP/s"]),
    ("link_bandwidth_bytes_per_s: 1.0e-300", ["link_bandwidth_bytes_per_s", ">= 1e+06"]),
    ("efficiency: {step_overhead_s: 1.0e+308}", ["efficiency.step_overhead_s", "1e+308", "<= 10 s"]),
    ("efficiency: {kernel_overhead_s: 1.0e+308}", ["efficiency.kernel_overhead_s", "<= 1 s"]),
    ("link_latency_s: 1.0e+308", ["link_latency_s", "<= 1 s"]),
    ("efficiency: {compute_efficiency: 1.0e-300}", ["efficiency.compute_efficiency", ">= 0.001"]),
])
@pytest.mark.parametrize("cmd", ["simulate", "predict"])
def test_11_physically_meaningless_hardware_is_refused(tmp_path, change, words, cmd):
    f = overlay(tmp_path, f"base: h100-sxm\n{change}\n")
    extra = ["-n", "3"] if cmd == "simulate" else []
    one_line_error(invoke(cmd, "-m", "llama-3.1-8b", "-H", f, *extra), *words)


def test_11_the_limits_of_the_ranges_still_price_finitely():
    hw = load_hardware("h100-sxm")
    slow = dataclasses_replace(hw, hbm_bandwidth_bytes_per_s=1e6, peak_flops_per_s={"bf16": 1e9},
                               link_bandwidth_bytes_per_s=1e6).with_efficiency(
        step_overhead_s=10.0, kernel_overhead_s=1.0, compute_efficiency=1e-3, memory_efficiency=1e-3)
    cost = CostModel(load_model("llama-3.1-8b"), slow)
    t = cost.step_time(8192, 256, R=256 * 4096)
    assert np.isfinite(t) and t > 10.0
    p = predict_static(cost, 1, 16, 4)
    assert np.isfinite(p["ttft_ms"]) and np.isfinite(p["tpot_ms"])


# --------------------------------------------------------------------------- cause 12


def test_12_non_utf8_measurements_name_file_and_line(tmp_path):
    f = write_csv(tmp_path / "m.csv", notes="caf\u00e9")
    f.write_bytes(f.read_bytes().replace("caf\u00e9".encode(), b"caf\xe9"))
    one_line_error(invoke("validate", str(f)), "m.csv:2", "not UTF-8", "0xe9")


def test_12_oversized_field_names_file_and_line(tmp_path):
    f = write_csv(tmp_path / "m.csv", notes="x" * 200_000)
    one_line_error(invoke("validate", str(f)), "m.csv:2", "field larger than field limit")


def test_12_io_error_while_reading_is_one_line(tmp_path, monkeypatch):
    f = write_csv(tmp_path / "m.csv")

    class Failing:
        def __init__(self, *a, **k):
            self.lines = iter([Path(f).read_bytes().splitlines(keepends=True)[0]])

        def __iter__(self):
            return self

        def __next__(self):
            line = next(self.lines, None)
            if line is None:
                raise OSError(5, "Input/output error")
            return line

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    from simulator.specs import readers

    monkeypatch.setattr(readers, "open", Failing, raising=False)  # the reader layer opens it
    with pytest.raises(SpecError, match=r"m.csv:1: read failed \(OSError: Input/output error\)"):
        measurements.read_measurements(f)
    monkeypatch.undo()
    with pytest.raises(SpecError, match=r"cannot read \((IsADirectoryError|PermissionError)"):
        measurements.read_measurements(tmp_path)


# --------------------------------------------------------------------------- cause 13


def test_13_api_accepts_paths():
    p = ROOT / "model_specs" / "llama-3.1-8b.yaml"
    assert load_model(p) == load_model(str(p))
    h = ROOT / "hardware_specs" / "h100-sxm.yaml"
    assert load_hardware(h) == load_hardware("h100-sxm")
    assert make_cost_model(p, h).model.id == "llama-3.1-8b"
    rows, _ = measurements.read_measurements(write_csv(Path(__import__("tempfile").mkdtemp()) / "m.csv"))
    assert rows[0]["batch_size"] == 1


@pytest.mark.parametrize("call,match", [
    (lambda: load_model(123), r"^model: 123 is not a catalog id, file path or ModelSpec$"),
    (lambda: load_hardware(None), r"^hardware: None is not a catalog id"),
    (lambda: load_model(["llama"]), r"^model: \['llama'\] is not"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", activation_dtype="bf17"), r"^activation_dtype: 'bf17' is not one of"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", kv_dtype=8), r"^kv_dtype: 8 is not one of"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", tp=-1), r"^tp: -1 must be an integer >= 1$"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", ideal="yes"), r"^ideal: 'yes' must be true or false$"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", efficiency=["step_overhead_s"]), r"^efficiency: list is not a mapping"),
    (lambda: make_cost_model("llama-3.1-8b", "h100-sxm", efficiency={"step_overhead_s": float("nan")}),
     r"^efficiency.step_overhead_s: nan is not a finite number$"),
    (lambda: predict_static(make_cost_model("llama-3.1-8b", "h100-sxm"), -4, 16, 16), r"^batch_size: -4 must be an integer >= 1"),
    (lambda: predict_static("llama-3.1-8b", 1, 16, 16), r"^cost: str is not a CostModel"),
    (lambda: memory_plan(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), *_par_dt(), max_num_seqs="8"),
     r"^max_num_seqs: '8' must be an integer >= 1$"),
    (lambda: memory_plan(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), *_par_dt(), gpu_memory_utilization="0.9"),
     r"^gpu_memory_utilization: '0.9' must be in \(0, 1\]$"),
    (lambda: measurements.read_measurements(123), r"^path: 123 is not a file path"),
    (lambda: V.Validator(efficiency=[("compute_efficiency", 0.5)]), r"^efficiency: list is not a mapping$"),
    (lambda: V.Validator(num_requests=-1), r"^num_requests: -1 must be an integer >= 1"),
    (lambda: measurements.read_vllm_result(DATA / "vllm_bench_serve_result.json", model="m", hardware="h", tp=0),
     r"^tp: 0 must be an integer >= 1"),
])
def test_13_api_wrong_types_and_values_are_one_line_spec_errors(call, match):
    with pytest.raises(SpecError, match=match) as e:
        call()
    assert "\n" not in str(e.value)


def _par_dt():
    from simulator.specs.dtypes import DTypes
    from simulator.specs.parallelism import Parallelism

    return Parallelism(), DTypes()


def test_13_cost_model_parts_of_the_wrong_type():
    with pytest.raises(TypeError, match="parallelism must be a Parallelism"):
        CostModel(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), parallelism=(1, 1))


# --------------------------------------------------------------------------- cause 18


def test_18_row_lengths_beyond_the_bound_are_refused_before_work(tmp_path):
    f = write_csv(tmp_path / "m.csv", output_len="1e9")
    t0 = time.perf_counter()
    one_line_error(invoke("validate", str(f)), "m.csv:2", "output_len", "'1e9'", "<= 10000000")
    f = write_csv(tmp_path / "s.csv", scenario="online_poisson", request_rate="2", metric="mean_ttft_ms",
                  unit="ms", num_requests="1e9")
    one_line_error(invoke("calibrate", str(f), "-H", "h100-sxm", "--out", str(tmp_path / "o.yaml")), "num_requests", "<= 1000000")
    j = tmp_path / "r.json"
    j.write_text(json.dumps({**VLLM, "num_prompts": 10 ** 9}))
    one_line_error(invoke("validate", str(j), "-m", "llama-3.1-8b", "-H", "h100-sxm"),
                   "num_requests", "'1000000000'", "<= 1000000")
    one_line_error(invoke("predict", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-o", "1000000000"),
                   "output_len", "<= 10000000")
    assert time.perf_counter() - t0 < 20


def test_18_long_static_decode_is_priced_in_bounded_memory():
    cost = make_cost_model("llama-3.1-8b", "h100-sxm")
    O = 2 * DECODE_CHUNK + 7  # noqa: E741
    p = predict_static(cost, 2, 100, O)
    dec = decode_step_arrays(2, 100, O)  # the whole decode at once, as before the fix
    whole = float(cost.step_times(dec["T"], dec["S"], dec["Ad"], dec["Ap"], dec["R"]).sum())
    assert p["tpot_ms"] == pytest.approx(whole / (O - 1) * 1e3, rel=1e-12)
    tracemalloc.start()
    predict_static(cost, 1, 1024, 1_000_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 100e6, peak  # the unchunked arrays of 10^6 steps took ~350 MB


# --------------------------------------------------------------------------- cause 19


def billion_laughs(levels: int = 9) -> str:
    s = 'l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels):
        s += f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]\n"
    return s


def test_19_alias_bomb_is_refused_quickly(tmp_path):
    # the bomb reaches a field whose error message would print its value (vendor: not a string)
    body = "".join(f"  - {ln}\n" for ln in billion_laughs().splitlines())
    f = overlay(tmp_path, "base: h100-sxm\nsources:\n" + body + "vendor: *l8\n")
    t0 = time.perf_counter()
    line = one_line_error(invoke("show", f), "more than 100,000 values")
    assert time.perf_counter() - t0 < 5 and len(line) < 300


def test_19_values_in_messages_are_cut_short(tmp_path):
    f = overlay(tmp_path, "base: h100-sxm\nhbm_capacity_bytes: '" + "x" * 900_000 + "'\n")
    line = one_line_error(invoke("show", f), "hbm_capacity_bytes", "is not a number")
    assert len(line) < 300
    assert show(list(range(10 ** 6))) == "<list of 1000000 items>"
    assert show("y" * 1000).endswith("...'") and len(show("y" * 1000)) < 100
    with pytest.raises(SpecError) as e:
        check_number("x", "z" * 10 ** 6, 0, 1)
    assert len(str(e.value)) < 200
    assert len(str(SpecError("w" * 10 ** 6))) <= MESSAGE_CHARS + 3


# --------------------------------------------------------------------------- cause 20


def test_20_oversized_spec_is_refused_fast(tmp_path):
    f = overlay(tmp_path, H100_YAML + "notes: " + "x" * 5_000_000 + "\n")
    t0 = time.perf_counter()
    one_line_error(invoke("show", f), "larger than 1,000,000 bytes")
    assert time.perf_counter() - t0 < 2
    with pytest.raises(SpecError, match="larger than 1,000,000 bytes"):
        read_yaml(f)


# --------------------------------------------------------------------------- messages


def test_error_messages_are_one_line_even_with_newlines_in_the_input(tmp_path):
    f = overlay(tmp_path, 'base: h100-sxm\n"bad\\nkey": 1\n')
    line = one_line_error(invoke("show", f), "bad\\nkey", "unknown field")
    assert re.search(r"bad\\nkey", line)
    assert str(SpecError("a\nb\r\nc")) == "a\\nb\\r\\nc"


# --------------------------------------------------------------------------- bounded fuzz


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
GOOD_CSV = ",".join(COLUMNS) + "\n" + ",".join(GOOD_ROW.get(c, "") for c in COLUMNS) + "\n"


@FUZZ
@given(cuts=st.lists(st.tuples(st.integers(0, len(GOOD_CSV)), st.binary(max_size=6)), max_size=4))
def test_fuzz_measurement_csv_reader(tmp_path_factory, cuts):
    """Byte-level mutations of a valid measurement CSV: rows or one SpecError line, nothing else."""
    data = GOOD_CSV.encode()
    for at, junk in cuts:
        data = data[:at] + junk + data[at + 1:]
    f = tmp_path_factory.mktemp("fz") / "m.csv"
    f.write_bytes(data)
    try:
        rows, _ = measurements.read_measurements(f)
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) <= MESSAGE_CHARS + 3
    else:
        for r in rows:
            assert 1 <= r["num_gpus"] <= 10 ** 6 and r["value"] > 0


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 40, 10 ** 40), st.floats(),
                        st.text(max_size=8), st.lists(st.integers(0, 5), max_size=3))


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(sorted(VLLM)), JSON_VALUES, max_size=4))
def test_fuzz_vllm_result_reader(tmp_path_factory, changes):
    """Any values in a vLLM result's keys: rows with a valid scenario, or one SpecError line."""
    f = tmp_path_factory.mktemp("fz") / "r.json"
    f.write_text(json.dumps({**VLLM, **changes}))
    try:
        rows = measurements.read_vllm_result(f, model="llama-3.1-8b", hardware="h100-sxm")
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) <= MESSAGE_CHARS + 3
    else:
        assert rows and all(r["scenario"] in measurements.SCENARIOS for r in rows)
        rate = changes.get("request_rate", VLLM["request_rate"])
        if rows[0]["scenario"] == "offline_max_throughput":
            assert rate is None or rate == float("inf") or str(rate).lower() in ("inf", "infinity")


# --------------------------------------------------------------------------- CLI layer


def test_show_with_a_file_name_the_os_refuses_is_one_line():
    """`show` probes `Path(ref).is_file()` in resolve.load_any_spec, which raises OSError (ENAMETOOLONG)
    for a 5,000-character name; catalog's loaders already treat such names as "not a file"."""
    one_line_error(invoke("show", "x" * 5000), "is not a model or hardware id")


# ------------------------------------------------------------- CLI/orchestration layer (round two)


@pytest.mark.parametrize("args, words", [
    (["-w", "random", "-n", "20", "-r", "1e-200"], ["rate: 1e-200", "1e+10 s", "use a rate >="]),
    (["-w", "random", "-n", str(2 ** 63)], ["num_requests", "at most 1,000,000,000,000"]),
    (["-w", "random", "-n", "0"], ["num_requests: 0"]),
    (["-w", "random", "--input-len", "0"], ["input_len: 0"]),
])
def test_simulate_refuses_what_it_cannot_simulate_faithfully(args, words):
    one_line_error(invoke("simulate", "-q", *args), *words)


def test_trace_beyond_the_clock_range_is_refused(tmp_path):
    trace = tmp_path / "far.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n1e300,100,10\n")
    r = invoke("simulate", "-q", "-w", str(trace), "-n", "2")
    if r.exit_code == 2 and "timestamp" in r.stderr:
        pytest.skip("the trace reader refuses such a timestamp itself")
    one_line_error(r, "workload", "beyond the simulated clock's range")


def test_plan_too_few_requests_says_so_and_refuses_absurd_rates():
    r = invoke("plan", "-q", "--serial", "-n", "20", "-r", "5", "--goodput", "ttft:2000", "--goodput", "tpot:100")
    assert r.exit_code in (0, 1), r.output
    assert "too few for a steady result" in r.output
    assert "good fraction 1.000 <" not in r.output
    one_line_error(invoke("plan", "-q", "--serial", "-r", "1e308", "--goodput", "ttft:2000"), "rate: 1e+308")


def test_closed_loop_with_a_cap_never_dates_unsent_requests_after_it(tmp_path):
    """Issue 17, cause 7: the requests a closed loop never sent have no arrival time."""
    import pandas as pd

    r = invoke("simulate", "-q", "-w", "random", "-n", "60", "--concurrency", "2", "--max-duration-s", "1",
               "--out", str(tmp_path / "o"))
    assert r.exit_code == 0, r.output
    d = pd.read_csv(tmp_path / "o" / "requests.csv")
    unsent = d["reason"].fillna("").str.startswith("never sent")
    assert unsent.sum() > 0 and d.loc[unsent, "arrival_s"].isna().all()
    assert (d.loc[~unsent, "arrival_s"] <= 1.0).all()


def test_whatif_seq_len_zero_is_refused():
    one_line_error(invoke("whatif", "kv-dtype", "--seq-len", "0", "--static-only", "-q"), "seq_len: 0")


class _FixedStep:
    """A custom cost model (Python API) that prices every step at `value` seconds."""

    def __init__(self, cost, value):
        self.cost, self.value = cost, value

    def __getattr__(self, name):
        return getattr(self.cost, name)

    def step_time(self, *a, **k):
        return self.value


@pytest.mark.parametrize("value", [float("nan"), 0.0, -1.0, float("inf"), "1"])
def test_custom_cost_model_with_bad_step_times_is_refused(value):
    from simulator.scenario import Scenario
    from simulator.serving.sched.registry import EngineConfig
    from simulator.serving.simulate import simulate
    from simulator.workloads.workload import synthetic

    cost = Scenario(workload="random", num_requests=3, input_len=16, output_len=2).cost_model()
    with pytest.raises(SpecError, match="cost model: step_time"):
        simulate(_FixedStep(cost, value), synthetic(3, 10.0, 16, 2, seed=0), EngineConfig())


@pytest.mark.parametrize("slos", [{"ttfx": 0.1}, {"ttft": float("nan")}, {"tpot": 0}, ["ttft"]])
def test_summarize_refuses_unknown_or_bad_slos(slos):
    from simulator.metrics.summary import summarize
    from simulator.scenario import Scenario

    res, _ = Scenario(workload="random", num_requests=3, input_len=16, output_len=2).run()
    with pytest.raises(SpecError, match="goodput"):
        summarize(res, slos)
