"""Catalog contents, HF config import, parameter counts and KV sizes (issue: Foundation: catalogs)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from simulator.specs.catalog import (
    hardware_catalog,
    import_hf_config,
    load_hardware,
    load_model,
    model_catalog,
)
from simulator.specs.checks import SpecError
from simulator.specs.fields import build
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec

HERE = Path(__file__).resolve().parent
HF_DIR = HERE / "data" / "hf_configs"
SHARED_HF = Path(__file__).resolve().parents[2] / "shared" / "reference" / "hf_configs"

HARDWARE_IDS = (
    "a100-sxm-40gb a100-sxm-80gb a100-pcie-80gb h100-sxm h100-pcie h200-sxm b200 gb200 l40s l4 "
    "a10g mi300x mi325x mi355x tpu-v5e tpu-v5p tpu-v6e gaudi3"
).split()
MODEL_IDS = (
    "gpt-j-6b llama-2-7b llama-2-13b llama-2-70b codellama-34b llama-3-8b llama-3-70b "
    "llama-3.1-8b llama-3.1-70b llama-3.1-405b llama-3.3-70b mistral-7b mixtral-8x7b "
    "mixtral-8x22b falcon-180b internlm-20b qwen3-32b qwen3-30b-a3b qwen3-235b-a22b "
    "deepseek-v3 gpt-oss-120b"
).split()

#: hf_configs file -> catalog id
HF_TO_ID = {
    "DeepSeek-V3.json": "deepseek-v3",
    "Llama-2-7b-hf.json": "llama-2-7b",
    "Llama-3.1-405B.json": "llama-3.1-405b",
    "Llama-3.1-70B.json": "llama-3.1-70b",
    "Llama-3.1-8B.json": "llama-3.1-8b",
    "Mixtral-8x7B-v0.1.json": "mixtral-8x7b",
    "Qwen3-235B-A22B.json": "qwen3-235b-a22b",
    "Qwen3-30B-A3B.json": "qwen3-30b-a3b",
    "Qwen3-32B.json": "qwen3-32b",
    "gpt-oss-120b.json": "gpt-oss-120b",
}

#: published (total, active) parameter counts in billions; active None = dense
PUBLISHED = {
    "llama-3.1-8b": (8.03, None),
    "llama-3.1-70b": (70.6, None),
    "llama-3.1-405b": (405.9, None),
    "mixtral-8x7b": (46.7, 12.9),
    "deepseek-v3": (671.0, 37.0),
    "qwen3-235b-a22b": (235.0, 22.0),
    "gpt-oss-120b": (117.0, 5.1),
}
ID_TO_HF = {v: k for k, v in HF_TO_ID.items()}


# --------------------------------------------------------------------------- catalogs


def test_all_ids_present():
    """The canonical ids of the measurement schema are all in the catalogs (the catalogs hold
    more: tests/test_catalog_models.py checks those)."""
    assert set(MODEL_IDS) <= set(model_catalog())
    assert set(HARDWARE_IDS) <= set(hardware_catalog())
    for spec in [*model_catalog().values(), *hardware_catalog().values()]:
        assert spec.sources, spec.id


def test_catalog_file_names_are_ids():
    from simulator.specs.catalog import iter_catalog_files, read_yaml

    for kind in ("model_specs", "hardware_specs"):
        for path in iter_catalog_files(kind):
            assert read_yaml(path)["id"] == path.stem


@pytest.mark.parametrize("mid", MODEL_IDS)
def test_model_entries_complete(mid):
    m = model_catalog()[mid]
    assert m.hf_id and m.sources and m.name
    assert m.chars_per_token is not None and 3.0 < m.chars_per_token < 5.0
    assert "approximate" in m.notes
    assert load_model(m.hf_id) is m
    for alias in m.aliases:
        assert load_model(alias) is m
        assert load_model(alias.upper()) is m


def test_aliases_unique():
    seen: dict[str, str] = {}
    for mid, m in model_catalog().items():
        for name in (mid, m.hf_id, *m.aliases):
            key = name.lower()
            assert seen.setdefault(key, mid) == mid, f"{name} names {seen[key]} and {mid}"


@pytest.mark.parametrize("hid", HARDWARE_IDS)
def test_hardware_entries_complete(hid):
    h = hardware_catalog()[hid]
    assert "bf16" in h.peak_flops_per_s
    assert h.price_per_gpu_hour_usd and h.sources
    assert "indicative" in h.notes  # the price is marked as indicative
    # fitted or derived defaults, each with a recorded source
    assert 0 < h.efficiency.compute_efficiency <= 1 and 0 < h.efficiency.memory_efficiency <= 1
    assert h.efficiency.sources
    # dense peaks: fp8 at most twice bf16, bf16 >= fp32
    if "fp8" in h.peak_flops_per_s:
        assert h.peak_flops_per_s["fp8"] <= 2.05 * h.peak_flops_per_s["bf16"]
    if "fp32" in h.peak_flops_per_s:
        assert h.peak_flops_per_s["fp32"] < h.peak_flops_per_s["bf16"]
    assert 1e9 < h.hbm_capacity_bytes < 400e9
    assert 1e11 < h.hbm_bandwidth_bytes_per_s < 1e13
    assert 1e10 <= h.link_bandwidth_bytes_per_s <= 1e12


def test_hardware_key_figures():
    hw = hardware_catalog()
    assert hw["h100-sxm"].flops("bf16") == 989e12
    assert hw["h100-sxm"].flops("fp8") == 1979e12
    assert hw["h100-sxm"].link_bandwidth_bytes_per_s == 450e9  # per direction
    assert hw["a100-sxm-80gb"].gemm_dtype("fp8") == "bf16"  # no FP8 on Ampere
    assert hw["mi355x"].flops("bf16") == hw["mi355x"].flops("fp8") / 2  # documented estimate
    assert hw["mi355x"].flops("fp4") == hw["mi355x"].flops("fp8") * 2  # CDNA 4's FP4/FP6 rate, an estimate
    assert "ESTIMATE" in hw["mi355x"].notes
    assert "CONFLICT" in hw["a10g"].notes
    assert hw["h200-sxm"].hbm_capacity_bytes == pytest.approx(141 * 2**30, rel=1e-3)
    assert hw["b200"].flops("fp4") == 9000e12


# --------------------------------------------------------------------------- parameters and KV


def _check_counts(m: ModelSpec, total_b: float, active_b: float | None):
    assert m.param_count / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b is not None:
        assert m.active_param_count / 1e9 == pytest.approx(active_b, rel=0.03)


@pytest.mark.parametrize("mid", sorted(PUBLISHED))
def test_param_counts_catalog(mid):
    _check_counts(model_catalog()[mid], *PUBLISHED[mid])


@pytest.mark.parametrize("mid", sorted(PUBLISHED))
def test_param_counts_hf_import(mid):
    _check_counts(import_hf_config(HF_DIR / ID_TO_HF[mid]), *PUBLISHED[mid])


def test_other_param_counts_plausible():
    # published sizes for models without a config here (1.5 % tolerance)
    published = {"gpt-j-6b": 6.05, "llama-2-7b": 6.74, "llama-2-13b": 13.0, "llama-2-70b": 69.0,
                 "codellama-34b": 33.7, "mistral-7b": 7.24, "mixtral-8x22b": 141.0}
    for mid, b in published.items():
        assert model_catalog()[mid].param_count / 1e9 == pytest.approx(b, rel=0.015), mid


def test_kv_bytes_per_token_exact():
    cat = model_catalog()
    assert cat["llama-3.1-70b"].kv_bytes_per_token("bf16") == 327_680
    assert cat["deepseek-v3"].kv_bytes_per_token("bf16") == 70_272
    assert cat["deepseek-v3"].kv_bytes_per_token("fp8") == 35_136
    assert cat["llama-2-7b"].kv_bytes_per_token("bf16") == 524_288  # MHA, 32 x 2 x 4096 x 2


def test_structure_flags():
    cat = model_catalog()
    assert cat["gpt-j-6b"].parallel_attention and cat["gpt-j-6b"].mlp_bias
    assert cat["gpt-j-6b"].mlp == "plain" and cat["falcon-180b"].mlp == "plain"
    assert cat["falcon-180b"].parallel_attention
    assert cat["gpt-oss-120b"].attention_bias
    assert cat["gpt-oss-120b"].sliding_window.window == 128
    assert cat["gpt-oss-120b"].num_sliding_layers == 18
    assert cat["mistral-7b"].sliding_window.window == 4096
    assert cat["mistral-7b"].num_sliding_layers == 32
    assert cat["deepseek-v3"].moe.num_shared_experts == 1
    assert cat["deepseek-v3"].moe.first_dense_layers == 3
    assert cat["deepseek-v3"].default_weight_dtype == "fp8"
    # the checkpoint vLLM loads is the default: MXFP4 experts (0.5 bytes a weight), the rest
    # (attention, router, embeddings, LM head) bf16: 36 x 128 x 3 x 2880^2 = 114.66 B expert
    # weights -> 57.33 GB, the other 2.13 B -> 4.26 GB; 61.59 GB against 233.58 GB in bf16
    oss = cat["gpt-oss-120b"]
    assert oss.default_weight_dtype == "fp4" and oss.unquantized_dtype("fp4") == "bf16"
    experts = 36 * 128 * 3 * 2880 * 2880
    assert oss.routed_expert_param_count == experts
    assert oss.weight_bytes() == experts * 0.5 + (oss.param_count - experts) * 2
    assert abs(oss.weight_bytes() / 1e9 - 61.59) < 0.01 and abs(oss.weight_bytes("bf16") / 1e9 - 233.58) < 0.01
    assert "MXFP4" in cat["gpt-oss-120b"].notes
    assert cat["qwen3-32b"].d_head == 128 != cat["qwen3-32b"].hidden_size // 64
    assert {m.attention_kind for m in cat.values()} == {"MHA", "GQA", "MLA"}


# --------------------------------------------------------------------------- HF import


def _hf_files() -> list[Path]:
    return sorted(HF_DIR.glob("*.json"))


def test_hf_copy_matches_shared():
    if not SHARED_HF.is_dir():
        pytest.skip("shared/reference not present")
    shared = sorted(p.name for p in SHARED_HF.glob("*.json"))
    assert shared == [p.name for p in _hf_files()]
    for name in shared:
        assert json.loads((SHARED_HF / name).read_text()) == json.loads((HF_DIR / name).read_text())


def test_every_shared_hf_config_imports():
    if not SHARED_HF.is_dir():
        pytest.skip("shared/reference not present")
    for p in sorted(SHARED_HF.glob("*.json")):
        assert isinstance(import_hf_config(p), ModelSpec)


_GEOMETRY = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "d_head", "vocab_size",
             "max_context", "mlp", "parallel_attention", "tie_word_embeddings", "attention_bias",
             "mlp_bias", "moe", "mla", "sliding_window", "default_weight_dtype", "param_count",
             "active_param_count")


@pytest.mark.parametrize("fname", sorted(HF_TO_ID))
def test_hf_import_matches_catalog(fname):
    imported = import_hf_config(HF_DIR / fname)
    entry = model_catalog()[HF_TO_ID[fname]]
    for attr in _GEOMETRY:
        assert getattr(imported, attr) == getattr(entry, attr), attr
    if entry.moe is None:
        assert imported.intermediate_size == entry.intermediate_size


# --------------------------------------------------------------------------- user files


def test_user_model_yaml_file_and_folder(tmp_path):
    text = "id: my-model\nhidden_size: 1024\nnum_layers: 4\nnum_heads: 8\nnum_kv_heads: 2\n" \
           "intermediate_size: 4096\nvocab_size: 32000\n"
    f = tmp_path / "mine.yaml"
    f.write_text(text)
    m = load_model(str(f))
    assert m.id == "my-model" and m.d_head == 128 and m.attention_kind == "GQA"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.yaml").write_text(text)
    assert load_model(str(folder)) == m
    hf_folder = tmp_path / "hf"
    hf_folder.mkdir()
    shutil.copy(HF_DIR / "Qwen3-32B.json", hf_folder / "config.json")
    assert load_model(str(hf_folder)).param_count == model_catalog()["qwen3-32b"].param_count


def test_user_hardware_yaml_and_overlay(tmp_path):
    f = tmp_path / "chip.yaml"
    f.write_text("id: chip\nname: Chip\nvendor: X\npeak_flops_per_s: {bf16: 1e14}\n"
                 "hbm_capacity_bytes: 16e9\nhbm_bandwidth_bytes_per_s: 1e12\n"
                 "link_bandwidth_bytes_per_s: 50e9\n")
    h = load_hardware(str(f))
    assert h.id == "chip" and h.ridge_point("bf16") == pytest.approx(100.0)
    assert h.flops("fp8") == 1e14  # falls back to bf16
    ov = tmp_path / "overlay.yaml"
    ov.write_text("base: h100-sxm\nefficiency: {compute_efficiency: 0.6}\n")
    h2 = load_hardware(str(ov))
    base = hardware_catalog()["h100-sxm"]
    assert h2.efficiency.compute_efficiency == 0.6
    assert h2.efficiency.memory_efficiency == base.efficiency.memory_efficiency
    assert h2.peak_flops_per_s == base.peak_flops_per_s
    assert load_hardware("H100-SXM") is base


def test_build_rejects_non_string_aliases():
    data = {"id": "x", "hidden_size": 64, "num_layers": 1, "num_heads": 1, "num_kv_heads": 1,
            "intermediate_size": 64, "vocab_size": 10, "aliases": [1, 2]}
    with pytest.raises(SpecError, match="aliases"):
        build(ModelSpec, data)


def test_specs_frozen():
    h = hardware_catalog()["h100-sxm"]
    assert isinstance(h, HardwareSpec)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.tdp_w = 1  # type: ignore[misc]


# --------------------------------------------------------------------------- shared checks


def test_check_int_one_line_errors():
    import numpy as np

    from simulator.specs.checks import check_int
    from simulator.specs.dtypes import DTypes
    from simulator.specs.parallelism import Parallelism

    assert check_int("n", 3) == 3
    assert check_int("n", np.int64(2)) == 2
    assert check_int("n", 0, minimum=0) == 0
    assert check_int("n", None, optional=True) is None
    for bad in (True, 0, -1, 1.0, "2", None):
        with pytest.raises(SpecError) as e:
            check_int("max_num_seqs", bad)
        assert str(e.value) == f"max_num_seqs: {bad!r} must be an integer >= 1"
    with pytest.raises(SpecError, match=r"^gamma: 0 must be an integer >= 1 \(draft tokens\) \(or omitted\)$"):
        check_int("gamma", 0, note="(draft tokens)", optional=True)
    with pytest.raises(SpecError, match=r"^tp: True must be an integer >= 1$"):
        Parallelism(True, 1)
    with pytest.raises(SpecError, match=r"^pp: 0 must be an integer >= 1$"):
        Parallelism(1, 0)
    with pytest.raises(SpecError, match=r"^kv_dtype: 'fp6' is not one of fp32, bf16"):
        DTypes("bf16", "bf16", "fp6")
    assert DTypes("int4", "bf16").gemm == "bf16" and DTypes("fp8", "fp8").gemm == "fp8"
    assert Parallelism(2, 4).num_gpus == 8


def test_checks_layer_ranges_bounds_and_one_line_messages():
    """The shared checks (simulator.specs.checks, re-exported by specs): ranges name both ends and the
    unit, huge integers never overflow, values in messages are cut, messages are one line."""
    from simulator.specs import checks

    assert checks.SpecError is checks.SpecError and checks.check_int is checks.check_int
    assert checks.check_number("x", 5, 0, 10) == 5.0
    assert checks.check_number("x", 10, 0, 10, low_open=True) == 10.0
    for bad, shown in ((0, "0"), (11, "11"), (float("nan"), "nan"), (float("inf"), "inf"), ("3", "'3'"),
                       (True, "True"), (10 ** 500, "<integer of 501 digits>")):
        with pytest.raises(SpecError) as e:
            checks.check_number("link_latency_s", bad, 0, 10, low_open=True, unit="s")
        assert str(e.value) == f"link_latency_s: {shown} must be a number > 0 and <= 10 s"
    with pytest.raises(SpecError, match=r"^tp: 9 must be an integer >= 1 and <= 8$"):
        checks.check_int("tp", 9, maximum=8)
    assert str(SpecError("a\nb")) == "a\\nb"
    assert checks.show("x" * 500) == "'" + "x" * 79 + "...'"
    assert checks.show([[1], [2]]) == "<nested list of 2 items>"
    # check_tree: aliases are sized without being expanded; depth and self-reference refused
    shared = ["lol"] * 9
    for _ in range(8):
        shared = [shared] * 9  # 9^9 values once expanded, 9 * 9 distinct list slots
    with pytest.raises(SpecError, match="more than 100,000 values"):
        checks.check_tree({"a": shared}, "f.yaml")
    checks.check_tree({"a": [[1, 2]] * 1000}, "f.yaml")  # 3,000 values: fine
    deep: list = []
    node = deep
    for _ in range(70):
        node.append([])
        node = node[0]
    with pytest.raises(SpecError, match="nested more than 64 levels"):
        checks.check_tree(deep, "f.yaml")
    loop: list = []
    loop.append(loop)
    with pytest.raises(SpecError, match="contains itself"):
        checks.check_tree(loop, "f.yaml")


def test_physical_ranges_of_hardware_fields():
    hw = load_hardware("h100-sxm")
    for field_, value, words in (("hbm_capacity_bytes", 1e16, "<= 1e+15 bytes"),
                                 ("hbm_bandwidth_bytes_per_s", 1.0, ">= 1e+06 and <= 1e+16 bytes/s"),
                                 ("link_latency_s", 2.0, "<= 1 s"),
                                 ("hbm_capacity_bytes", -1.0, "must be > 0")):
        with pytest.raises(SpecError) as e:
            dataclasses.replace(hw, **{field_: value})
        assert str(e.value).startswith(f"{field_}: ") and words in str(e.value), str(e.value)
    with pytest.raises(SpecError, match=r"^efficiency.step_overhead_s: 11.0 must be a number >= 0 and <= 10 s$"):
        hw.with_efficiency(step_overhead_s=11.0)
    with pytest.raises(SpecError, match=r"^peak_flops_per_s.bf16: 1e\+20 must be a number >= 1e\+09 and <= 1e\+19 FLOP/s$"):
        dataclasses.replace(hw, peak_flops_per_s={"bf16": 1e20})
    # every catalog chip sits inside the ranges (they were chosen around real hardware)
    assert set(HARDWARE_IDS) <= set(hardware_catalog())


def test_unquantized_weight_dtype_is_checked_against_the_rest_of_the_spec() -> None:
    from simulator.specs.catalog import load_model

    oss = load_model("gpt-oss-20b")
    with pytest.raises(SpecError, match=r"^unquantized_weight_dtype: bf16 applies to an MoE checkpoint"):
        dataclasses.replace(oss, quantized_weights="all")
    with pytest.raises(SpecError, match=r"^unquantized_weight_dtype: fp8 is narrower than default_weight_dtype bf16"):
        dataclasses.replace(oss, default_weight_dtype="bf16", unquantized_weight_dtype="fp8")
    # fp8 experts on an fp4-default checkpoint: the experts fp8, the rest its bf16
    assert oss.unquantized_dtype("fp8") == "bf16" and oss.unquantized_dtype("bf16") == "bf16"


def test_an_fp8_checkpoint_runs_w8a8_by_default() -> None:
    # DeepSeek-V3/R1 and Kimi-K2 ship FP8 weights with dynamic activation scales: vLLM runs them
    # W8A8 (fp8 GEMMs). Priced W8A16 (the bf16 default before) its GEMMs ran at bf16 rates:
    # `llmsim predict -m deepseek-r1 -H h200-sxm --tp 8 --input-len 8192 --output-len 2` gives
    # TTFT 214 ms W8A8 against 369 ms with --activation-dtype bf16. Another weight format keeps
    # bf16 activations.
    from simulator.resolve import make_cost_model
    from simulator.specs.catalog import import_hf_config, load_model

    ds = load_model("deepseek-v3")
    assert ds.default_activation_dtype == "fp8" and load_model("kimi-k2").default_activation_dtype == "fp8"
    assert ds.activation_for(None) == ds.activation_for("fp8") == "fp8" and ds.activation_for("bf16") == "bf16"
    assert load_model("gpt-oss-120b").activation_for(None) == "bf16"  # MXFP4 W4A16
    assert load_model("llama-3.1-8b").activation_for("fp8") == "bf16"  # a run's own fp8 says its activations
    c = make_cost_model("deepseek-v3", "h200-sxm", tp=8)
    assert (c.dtypes.weight, c.dtypes.activation, c.dtypes.kv) == ("fp8", "fp8", "bf16") and c.dtypes.gemm == "fp8"
    assert make_cost_model("deepseek-v3", "h200-sxm", tp=8, activation_dtype="bf16").dtypes.activation == "bf16"
    hf = SHARED_HF / "DeepSeek-R1.json"
    if hf.is_file():
        assert import_hf_config(hf).default_activation_dtype == "fp8"
