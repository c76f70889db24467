"""Reliability (issue 9), hostile input: the YAML spec loader, the HF config importer, every
trace reader (mutated real traces), the scenario YAML and the CLI option parsers either give a
valid result or one `error: ...` line with exit status 2: never a traceback, a hang or a
NaN/negative time. Conservation, numerical guards and resumable sweeps: test_reliability.py.

Every fuzzer is derandomized and bounded (CI is deterministic); docs/reliability.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from reliability_helpers import _check_json_numbers, _one_line_error, fuzz

from simulator.cli.commands import main
from simulator.scenario import Scenario
from simulator.specs.catalog import import_hf_config, load_hardware, load_model
from simulator.specs.checks import SpecError
from simulator.specs.hardware import HardwareSpec
from simulator.specs.model import ModelSpec
from simulator.workloads.traces import builtin, read_trace

pytestmark = pytest.mark.reliability

DATA = Path(__file__).parent / "data"
HF_CONFIGS = sorted((DATA / "hf_configs").glob("*.json"))


# =========================================================================== hostile input: specs


_JUNK = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10),
              st.sampled_from(["bf16", "fp8", "gated", "1e12", "", "h100-sxm", "llama-3.1-8b"])),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=6), kids, max_size=3)),
    max_leaves=6,
)


def _model_fields() -> dict:
    return dict(yaml.safe_load((Path(load_model.__code__.co_filename).parents[2] / "model_specs"
                                / "llama-3.1-8b.yaml").read_text()))


def _hw_fields() -> dict:
    return dict(yaml.safe_load((Path(load_model.__code__.co_filename).parents[2] / "hardware_specs"
                                / "h100-sxm.yaml").read_text()))


@fuzz(120)
@given(kind=st.sampled_from(["model", "hardware", "overlay"]),
       drop=st.lists(st.text(min_size=1, max_size=30), max_size=2),
       changes=st.dictionaries(st.one_of(st.sampled_from(
           ["hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "moe", "mla",
            "sliding_window", "max_context", "mlp", "peak_flops_per_s", "hbm_capacity_bytes",
            "hbm_bandwidth_bytes_per_s", "efficiency", "base", "id", "aliases", "tdp_w"]),
           st.text(max_size=8)), _JUNK, max_size=3),
       raw=st.one_of(st.none(), st.text(max_size=40)))
def test_yaml_spec_loader_never_crashes(tmp_path_factory, kind, drop, changes, raw):
    """Real specs with random fields changed, dropped or added, or random YAML text: a valid
    spec or one SpecError line naming the file."""
    d = tmp_path_factory.mktemp("spec")
    p = d / "spec.yaml"
    if raw is not None:
        p.write_text(raw, encoding="utf-8")
    else:
        data = _model_fields() if kind == "model" else _hw_fields()
        if kind == "overlay":
            data = {"base": "h100-sxm"}
        for k in drop:
            data.pop(k, None)
        data.update(changes)
        p.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    loader = load_model if kind == "model" else load_hardware
    try:
        spec = loader(str(p))
    except SpecError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert isinstance(spec, (ModelSpec, HardwareSpec))


@fuzz(120)
@given(base=st.sampled_from(HF_CONFIGS),
       drop=st.lists(st.sampled_from(["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                      "num_key_value_heads", "intermediate_size", "architectures",
                                      "num_experts_per_tok", "kv_lora_rank", "head_dim"]), max_size=2),
       changes=st.dictionaries(st.sampled_from(
           ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
            "head_dim", "intermediate_size", "max_position_embeddings", "num_local_experts", "n_routed_experts",
            "num_experts_per_tok", "moe_intermediate_size", "kv_lora_rank", "qk_rope_head_dim", "sliding_window",
            "layer_types", "quantization_config", "text_config", "architectures", "hidden_act",
            "tie_word_embeddings", "is_encoder_decoder", "n_shared_experts", "first_k_dense_replace",
            "mlp_only_layers", "shared_expert_intermediate_size", "model_type"]), _JUNK, max_size=3),
       whole=st.one_of(st.none(), _JUNK))
def test_hf_config_importer_never_crashes(tmp_path_factory, base, drop, changes, whole):
    """Mutated real config.json files (and random JSON documents): a valid ModelSpec or one
    SpecError line."""
    p = tmp_path_factory.mktemp("hf") / "config.json"
    if whole is not None:
        p.write_text(json.dumps(whole), encoding="utf-8")
    else:
        cfg = json.loads(base.read_text())
        for k in drop:
            cfg.pop(k, None)
        cfg.update(changes)
        p.write_text(json.dumps(cfg), encoding="utf-8")
    try:
        spec = import_hf_config(p)
    except SpecError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert isinstance(spec, ModelSpec) and spec.param_count > 0


# =========================================================================== hostile input: traces


_BAD_CELLS = ["abc", "-1", "0", "1.5", "nan", "inf", "", "1e99", '"', "0x10"]


def _real_rows(k: int = 30) -> list[tuple[float, int, int]]:
    w = builtin("azure-conv")
    return [(float(w.arrival_s[i]), int(w.input_len[i]), int(w.output_len[i])) for i in range(k)]


def _cells(fmt: str) -> list[list[str]]:
    """The real rows as the text cells of `fmt` (time, prompt tokens, output tokens)."""
    out = []
    for a, b, c in _real_rows():
        if fmt == "azure":
            t = f"2023-11-16 18:{int(a // 60):02d}:{a % 60:09.6f}"
        elif fmt == "mooncake":
            t = repr(a * 1000.0)
        else:
            t = repr(a)
        out.append([t, str(b), str(c)])
    return out


def _render(fmt: str, rows: list[list[str]]) -> tuple[str, str]:
    """Rows of text cells in `fmt`: (file text, extension)."""
    if fmt == "simple":
        return "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows), ".csv"
    if fmt == "burstgpt":
        return ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                + "".join(f"{a},ChatGPT,{b},{c},0,Conversation log\n" for a, b, c in rows), ".csv")
    if fmt == "azure":
        return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows), ".csv"

    def cell(x: str) -> str:  # a JSON value: the text itself if it is JSON, else as a string
        try:
            json.loads(x)
            return x
        except ValueError:
            return json.dumps(x)

    return "".join(f'{{"timestamp": {cell(a)}, "input_length": {cell(b)}, "output_length": {cell(c)}, '
                   f'"hash_ids": [1, 2]}}\n' for a, b, c in rows), ".jsonl"


def _cell_is_bad(fmt: str, col: int, cell: str) -> bool:
    """Is a mutated cell (one of _BAD_CELLS) invalid, so that its row must be reported?"""
    if col == 0:  # time: azure needs a date-time; the others a finite number >= 0
        return fmt == "azure" or cell not in ("0", "1.5", "1e99")
    if fmt == "burstgpt" and col == 2 and cell == "0":
        return False  # a request BurstGPT records as failed: dropped and counted, not bad
    return True  # token counts: none of _BAD_CELLS is a whole number in 1..1e9


@fuzz(120)
@given(fmt=st.sampled_from(["simple", "azure", "burstgpt", "mooncake"]),
       muts=st.dictionaries(st.integers(0, 29), st.tuples(st.integers(0, 2), st.sampled_from(_BAD_CELLS)), max_size=4),
       skip=st.booleans())
def test_mutated_real_traces(tmp_path_factory, fmt, muts, skip):
    """The first 30 rows of the azure-conv trace in each published format, with cells replaced
    by bad values: without skip_bad_rows the error names the first bad line; with it the bad
    rows are skipped and counted, and the others read exactly."""
    rows = _cells(fmt)
    bad, failed = set(), set()
    for i, (col, cell) in muts.items():
        rows[i][col] = cell
        if _cell_is_bad(fmt, col, cell):
            bad.add(i)
        elif fmt == "burstgpt" and col == 2:
            failed.add(i)
    text, ext = _render(fmt, rows)
    p = tmp_path_factory.mktemp("tr") / f"trace{ext}"
    p.write_text(text, encoding="utf-8")
    first_line = 1 if fmt == "mooncake" else 2  # line of row 0
    if bad and not skip:
        with pytest.raises(SpecError) as e:
            read_trace(p)
        assert "\n" not in str(e.value)
        assert str(e.value).startswith(f"{p}:{min(bad) + first_line}: "), str(e.value)
        return
    w = read_trace(p, skip_bad_rows=skip)
    assert w.bad_rows == len(bad) and w.failed_in_trace == len(failed)
    keep = [i for i in range(30) if i not in bad and i not in failed]
    real = _real_rows()
    assert w.num_requests == len(keep)
    np.testing.assert_array_equal(np.sort(w.input_len), np.sort([real[i][1] for i in keep]))
    assert np.all(np.diff(w.arrival_s) >= 0) and w.arrival_s[0] == 0.0


def test_bad_rows_in_simulate_json(tmp_path):
    """`--skip-bad-rows` continues and the summary counts the skipped rows; without it the
    error names the line."""
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.1,abc,10\n"
                 "0.2,100,0\n0.3,50,5\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["simulate", "-w", str(p), "-n", "2", "--json", "-q", "--skip-bad-rows"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["bad_rows_skipped"] == 2 and s["completed"] == 2
    r = CliRunner().invoke(main, ["simulate", "-w", str(p), "-n", "10", "--json", "-q"])
    assert f"{p}:3: column 'num_prefill_tokens'" in _one_line_error(r)


def test_zero_output_tokens_row_is_bad(tmp_path):
    """A trace row with 0 output tokens is malformed (a served request emits >= 1 token):
    an error naming the line, or with --skip-bad-rows skipped and counted."""
    p = tmp_path / "t.csv"
    p.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,0\n1,100,3\n", encoding="utf-8")
    with pytest.raises(SpecError, match=r":2: column 'num_decode_tokens'.*zero"):
        read_trace(p)
    w = read_trace(p, skip_bad_rows=True)
    assert w.bad_rows == 1 and w.num_requests == 1


# =========================================================================== hostile input: CLI


_OPT_JUNK = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e309", "1e-9", "1e-320", "0.0", "1,2", "2:1:3", "1:2:0",
                     "1:2:1001", "1:2", "tp=1,2", "tp=", "=1", "rate=1", "max_num_seqs=0", "x=1", "auto", " ", "",
                     "ttft:0", "ttft:-5", "ttft:1e400", "tpot:nan", "ttft=5", "compute_efficiency=2",
                     "compute_efficiency=nan", "step_overhead_s=-1", "step_overhead_s=1e308", "foo=1", "random",
                     "azure_code", "/nonexistent", ".", "/dev/null", "1e18", "99999999999999999999", "0x10",
                     "1_0", "True", "concurrency=1,2", "scheduler=static,vllm", "max_model_len=0"]))
_OPTS = ["--rate", "--goodput", "--efficiency", "--tp", "--pp", "--workload", "--num-requests", "--max-num-seqs",
         "--max-num-batched-tokens", "--input-len", "--output-len", "--range-ratio", "--burstiness",
         "--concurrency", "--max-duration-s", "--gpu-memory-utilization", "--max-model-len", "--seed",
         "--replicas", "--router", "--scheduler", "--kv-dtype", "--weight-dtype", "--model", "--hardware"]
_PREDICT_OPTS = ("--tp", "--pp", "--efficiency", "--kv-dtype", "--weight-dtype", "--model", "--hardware")


@fuzz(120)
@given(cmd=st.sampled_from(["simulate", "sweep", "predict"]),
       pairs=st.lists(st.tuples(st.sampled_from([*_OPTS, "--rates", "--sweep"]), _OPT_JUNK), min_size=1, max_size=3))
def test_cli_options_fuzz(cmd, pairs):
    """Random strings for the option parsers: a valid JSON result (no NaN, no negative time)
    or one error line with exit status 2."""
    if cmd == "predict":
        args = ["predict", "-m", "llama-3.1-8b", "-g", "h100-sxm", "--json"]
        pairs = [(o, v) for o, v in pairs if o in _PREDICT_OPTS]
    else:
        args = [cmd, "-n", "5", "--json", "-w", "random", "--input-len", "64", "--output-len", "4",
                "--max-duration-s", "100", "-q"]
        if cmd == "sweep":
            args += ["--serial", "--rates", "1,2"]
        else:
            pairs = [(o, v) for o, v in pairs if o not in ("--rates", "--sweep")]
    for o, v in pairs:
        args += [o, v]
    r = CliRunner().invoke(main, args)
    if r.exit_code == 0:
        _check_json_numbers(json.loads(r.output))
    else:
        _one_line_error(r)


_SCENARIO_FIELDS = [f for f in Scenario.__dataclass_fields__]


@fuzz(100)
@given(d=st.dictionaries(st.sampled_from([*_SCENARIO_FIELDS, "bogus", "num-requests"]), _JUNK, max_size=4),
       raw=st.one_of(st.none(), st.text(max_size=30)))
def test_scenario_yaml_fuzz(tmp_path_factory, d, raw):
    """Random scenario YAML (`-c`): any field, any value, or random text."""
    p = tmp_path_factory.mktemp("sc") / "s.yaml"
    if raw is not None:
        p.write_text(raw, encoding="utf-8")
    else:
        base = {"num_requests": 5, "workload": "random", "input_len": 32, "output_len": 4}
        for k, v in d.items():  # keep runs small: large counts are the scale benchmark's job
            big = isinstance(v, int) and not isinstance(v, bool) and v > 2000
            base[k] = 2000 if big and k not in ("seed",) else v
        if isinstance(base.get("num_requests"), int) and not isinstance(base["num_requests"], bool):
            base["num_requests"] = min(base["num_requests"], 20)
        p.write_text(yaml.safe_dump(base, allow_unicode=True), encoding="utf-8")
    r = CliRunner().invoke(main, ["simulate", "-c", str(p), "--json", "-q", "--max-duration-s", "1000"])
    if r.exit_code == 0:
        _check_json_numbers(json.loads(r.output))
    else:
        _one_line_error(r)
