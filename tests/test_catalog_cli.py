"""`llmsim models`, `llmsim hardware`, `llmsim show`, and one-line errors for malformed specs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from simulator.cli.commands import main
from simulator.specs.catalog import hardware_catalog, model_catalog

HF_DIR = Path(__file__).resolve().parent / "data" / "hf_configs"


def _runner() -> CliRunner:
    try:  # click < 8.2 mixes stderr into output unless told not to
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def run(*args: str):
    return _runner().invoke(main, list(args))


# --------------------------------------------------------------------------- listing and show


def test_models_table():
    r = run("models")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 + len(model_catalog())
    assert "kv_bytes_per_token_bf16" in lines[0]
    assert any(line.split()[0] == "deepseek-v3" and "MLA" in line for line in lines)


def test_hardware_table():
    r = run("hardware")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 + len(hardware_catalog())
    assert "bf16_tflops" in lines[0] and "usd_per_hour" in lines[0]


def test_models_json():
    r = run("models", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == set(model_catalog())
    assert by_id["llama-3.1-70b"]["kv_bytes_per_token_bf16"] == 327680
    assert by_id["deepseek-v3"]["attention"] == "MLA"
    assert by_id["mixtral-8x7b"]["active_b"] < by_id["mixtral-8x7b"]["params_b"]


def test_hardware_json():
    r = run("hardware", "--json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == set(hardware_catalog())
    assert by_id["h100-sxm"]["bf16_tflops"] == 989.0
    assert by_id["a100-sxm-80gb"]["fp8_tflops"] is None
    assert by_id["h100-sxm"]["link_gb_s"] == 450.0


@pytest.mark.parametrize("ref", sorted(model_catalog()) + sorted(hardware_catalog()))
def test_show_every_id(ref):
    r = run("show", ref)
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    assert doc["spec"]["id"] == ref
    assert doc["kind"] in ("model", "hardware")


def test_show_json_model_by_alias():
    r = run("show", "deepseek-ai/DeepSeek-V3", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["kind"] == "model" and doc["spec"]["id"] == "deepseek-v3"
    assert doc["derived"]["kv_bytes_per_token_bf16"] == 70272
    assert doc["derived"]["attention"] == "MLA"


def test_show_json_hardware():
    doc = json.loads(run("show", "h100-sxm", "--json").stdout)
    assert doc["kind"] == "hardware"
    assert doc["derived"]["ridge_point_bf16_flop_per_byte"] == pytest.approx(989e12 / 3.35e12, abs=0.01)
    assert doc["derived"]["ridge_point_fp8_flop_per_byte"] == pytest.approx(1979e12 / 3.35e12, abs=0.01)


def test_show_says_fitted_copied_or_validated():
    # fitted on its own rows; a copy checked on this chip's measurements; a copy with none
    assert json.loads(run("show", "h100-sxm", "--json").stdout)["derived"]["validation"] == (
        "efficiencies fitted to measurements (see efficiency.sources)")
    assert json.loads(run("show", "mi300x", "--json").stdout)["derived"]["validation"] == (
        "efficiencies copied from h100-sxm, validated on measurements of this chip (fp8 GEMMs: own number) "
        "(see efficiency.sources)")
    assert json.loads(run("show", "rtx-pro-6000", "--json").stdout)["derived"]["validation"] == (
        "efficiencies copied from l40s, validated on measurements of this chip (see efficiency.sources)")
    assert json.loads(run("show", "mi355x", "--json").stdout)["derived"]["validation"] == (
        "mi355x: efficiencies copied from h100-sxm, unvalidated")


def test_show_hf_config_path_and_overlay(tmp_path):
    r = run("show", str(HF_DIR / "gpt-oss-120b.json"), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["spec"]["moe"]["num_experts"] == 128
    ov = tmp_path / "cal.yaml"
    ov.write_text("base: h100-sxm\nefficiency: {compute_efficiency: 0.6}\n")
    r = run("show", str(ov), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kind"] == "hardware" and doc["spec"]["efficiency"]["compute_efficiency"] == 0.6


def test_show_unknown_id_suggests():
    r = run("show", "llama-3.1-8")
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1
    assert "llama-3.1-8b" in r.stderr and "Traceback" not in r.stderr


# --------------------------------------------------------------------------- malformed specs

MODEL = {"id": "m", "hidden_size": 1024, "num_layers": 4, "num_heads": 8, "num_kv_heads": 2,
         "intermediate_size": 4096, "vocab_size": 32000}
HW = {"id": "chip", "name": "Chip", "vendor": "X", "peak_flops_per_s": {"bf16": 1e14},
      "hbm_capacity_bytes": 16e9, "hbm_bandwidth_bytes_per_s": 1e12,
      "link_bandwidth_bytes_per_s": 50e9}
HF = json.loads((HF_DIR / "Llama-3.1-8B.json").read_text())


def _with(base: dict, drop: str | None = None, **changes) -> dict:
    d = {k: v for k, v in base.items() if k != drop}
    d.update(changes)
    return d


# (name, file suffix, content: dict written as YAML/JSON or str written verbatim, expected words)
MALFORMED = [
    ("missing_field", ".yaml", _with(MODEL, drop="vocab_size"), ["vocab_size", "missing"]),
    ("string_for_int", ".yaml", _with(MODEL, num_layers="thirty"), ["num_layers", "'thirty'", "integer"]),
    ("negative_bandwidth", ".yaml", _with(HW, hbm_bandwidth_bytes_per_s=-1e12),
     ["hbm_bandwidth_bytes_per_s", "-1000000000000.0", "> 0"]),
    ("zero_layers", ".yaml", _with(MODEL, num_layers=0), ["num_layers", "0", "> 0"]),
    ("heads_not_dividing_hidden", ".yaml", _with(MODEL, hidden_size=1030),
     ["num_heads", "8", "1030", "head_dim"]),
    ("topk_over_experts", ".yaml",
     _with(MODEL, moe={"num_experts": 4, "experts_per_token": 8, "expert_intermediate_size": 512}),
     ["moe.experts_per_token", "8", "4"]),
    ("unknown_dtype", ".yaml", _with(HW, peak_flops_per_s={"bf61": 1e14}),
     ["peak_flops_per_s.bf61", "unknown dtype", "bf16"]),
    ("unknown_key_did_you_mean", ".yaml", {**_with(MODEL, drop="hidden_size"), "hiden_size": 1024},
     ["hiden_size", "did you mean 'hidden_size'"]),
    ("invalid_yaml", ".yaml", "id: m\nhidden_size: [1024\nnum_layers: 4\n", ["invalid YAML", "line"]),
    ("kv_heads_not_dividing", ".yaml", _with(MODEL, num_kv_heads=3), ["num_kv_heads", "3", "8"]),
    ("efficiency_over_one", ".yaml", _with(HW, efficiency={"compute_efficiency": 1.5}),
     ["efficiency.compute_efficiency", "1.5", "<= 1"]),
    ("non_mapping", ".yaml", "- a\n- b\n", ["expected a mapping", "list"]),
    ("hf_missing_layers", ".json", _with(HF, drop="num_hidden_layers"),
     ["num_hidden_layers", "missing", "LlamaForCausalLM"]),
    ("hf_encoder_decoder", ".json",
     {"architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True, "d_model": 512,
      "num_layers": 6, "num_heads": 8, "vocab_size": 32128}, ["T5ForConditionalGeneration", "encoder-decoder"]),
    ("invalid_json", ".json", '{"hidden_size": 4096,', ["invalid JSON", "line"]),
    ("negative_latency", ".yaml", _with(HW, link_latency_s=-1e-6), ["link_latency_s", "-1e-06", ">= 0"]),
    ("bad_mlp_choice", ".yaml", _with(MODEL, mlp="swiglu"), ["mlp", "'swiglu'", "gated"]),
    ("bool_as_string", ".yaml", _with(MODEL, parallel_attention="yes please"),
     ["parallel_attention", "'yes please'", "true or false"]),
    ("sliding_layers_over_total", ".yaml", _with(MODEL, sliding_window={"window": 128, "num_layers": 9}),
     ["sliding_window.num_layers", "9", "4"]),
    ("negative_flops", ".yaml", _with(HW, peak_flops_per_s={"bf16": -5}), ["peak_flops_per_s.bf16", "-5"]),
    ("unknown_overlay_base", ".yaml", {"base": "h101-sxm", "efficiency": {"compute_efficiency": 0.5}},
     ["unknown_overlay_base.yaml: base:", "h101-sxm", "did you mean 'h100-sxm'"]),
    ("moe_missing_expert_size", ".yaml", _with(MODEL, moe={"num_experts": 4, "experts_per_token": 2}),
     ["moe.expert_intermediate_size", "missing"]),
    ("hf_mla_incomplete", ".json",
     {**json.loads((HF_DIR / "DeepSeek-V3.json").read_text()), "qk_rope_head_dim": None},
     ["qk_rope_head_dim", "missing"]),
    ("empty_file", ".yaml", "", ["expected a mapping", "empty"]),
]


@pytest.mark.parametrize("name,suffix,content,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_spec_one_line_exit_2(tmp_path, name, suffix, content, words):
    path = tmp_path / f"{name}{suffix}"
    if isinstance(content, str):
        path.write_text(content)
    elif suffix == ".json":
        path.write_text(json.dumps(content))
    else:
        path.write_text(yaml.safe_dump(content, sort_keys=False))
    r = run("show", str(path))
    assert r.exit_code == 2, (r.stdout, r.stderr, r.exception)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("error: ") and "Traceback" not in line
    for w in words:
        assert w in line, f"{w!r} not in {line!r}"


def test_a_copied_moe_factor_is_noted_only_while_it_is_priced():
    # MI355X (cdna4) copies vLLM's CDNA3 grouped-GEMM factor: every run says so, unless the user
    # replaced it (--efficiency) or priced the pure roofline (--ideal)
    base = ("simulate", "-m", "mixtral-8x7b", "-H", "mi355x", "--engine", "vllm", "--weight-dtype", "fp8",
            "--activation-dtype", "fp8", "-n", "10")
    note = "mi355x: vllm/cdna4 MoE grouped-GEMM factor copied from cdna3, unvalidated"
    r = run(*base)
    assert r.exit_code == 0, r.output
    assert note in r.output
    for extra in (("--efficiency", "moe_gemm_relative=1"), ("--ideal",)):
        r = run(*base, *extra)
        assert r.exit_code == 0 and note not in r.output, (extra, r.output)


def test_copied_weight_only_numbers_are_noted_while_any_is_priced():
    # gpt-oss's MXFP4 experts on MI300X price vLLM's Hopper weight-only numbers (three fields):
    # overriding one leaves two copies priced, so the note stays; --ideal prices none of them
    base = ("simulate", "-m", "gpt-oss-120b", "-H", "mi300x", "--engine", "vllm", "--weight-dtype", "fp4", "-n", "10")
    note = "mi300x: vllm/cdna3 weight-only GEMM numbers copied from hopper, unvalidated"
    assert note in run(*base).output
    assert note in run(*base, "--efficiency", "dequant_gemm_efficiency=0.4").output
    assert note not in run(*base, "--ideal").output


def test_gpt_oss_default_is_its_mxfp4_checkpoint():
    # `vllm serve openai/gpt-oss-120b` loads the MXFP4 checkpoint (61.6 GB here: experts 4-bit,
    # the rest bf16) and serves it on one 80 GB H100; in bf16 it would be 233.6 GB and not fit.
    # The report says which formats it priced.
    r = run("simulate", "-m", "gpt-oss-120b", "-H", "h100-sxm", "-n", "5")
    assert r.exit_code == 0, r.output
    assert "Weights / activations / KV cache:        fp4 (routed experts; rest bf16) / bf16 / bf16" in r.output
    r = run("simulate", "-m", "gpt-oss-120b", "-H", "h100-sxm", "-n", "5", "--weight-dtype", "bf16")
    assert r.exit_code != 0 and "does not fit on h100-sxm" in r.output and "weights 233.6 GB" in r.output
    doc = json.loads(run("simulate", "-m", "llama-3.1-8b", "-n", "5", "--kv-dtype", "fp8", "--json").stdout)
    assert (doc["weights_format"], doc["activations_format"], doc["kv_cache_format"]) == ("bf16", "bf16", "fp8")


def test_a_disaggregated_run_reports_each_pools_formats():
    from simulator.scenario import Scenario

    sc = Scenario(model="llama-3.1-8b", hardware="h100-sxm", disagg="1:1", workload="random", num_requests=20,
                  input_len=200, output_len=20, rate=2.0, deployment={"decode": {"kv_dtype": "fp8", "weight_dtype": "fp8"}})
    _, s = sc.run()
    assert s["weights_format"] == "bf16 (prefill) / fp8 (decode)"
    assert s["kv_cache_format"] == "bf16 (prefill) / fp8 (decode)" and s["activations_format"] == "bf16"
