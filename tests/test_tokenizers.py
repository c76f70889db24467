"""A tokenizer per model: ShareGPT counts follow it, chars come from the texts (docs/concepts.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.scenario import Scenario
from simulator.specs.catalog import import_hf_config, load_model

DATA = Path(__file__).parent / "data" / "hf_configs"
DOC = Path(__file__).parent.parent / "docs" / "concepts.md"


@pytest.mark.parametrize("model,tok", [("llama-3.1-8b", "llama3"), ("qwen3-32b", "qwen"),
                                       ("gpt-oss-120b", "o200k"), ("llama-2-7b", "")])
def test_catalog_tokenizers(model, tok):
    assert load_model(model).tokenizer == tok


@pytest.mark.parametrize("cfg,tok", [("Llama-3.1-8B", "llama3"), ("Qwen3-32B", "qwen"),
                                     ("gpt-oss-120b", "o200k"), ("Llama-2-7b-hf", "")])
def test_hf_importer_fills_tokenizer(cfg, tok):
    assert import_hf_config(DATA / f"{cfg}.json").tokenizer == tok


def _run(model):
    sc = Scenario(model=model, hardware="h100-sxm", workload="sharegpt", num_requests=1000,
                  rate=4.0, seed=0)
    return sc.run()[1]


def test_docs_two_tokenizers_table():
    """The table in docs/concepts.md is what the simulator gives; tokens differ, chars/s agree."""
    text = DOC.read_text()
    rows = {m.group(1): m for m in re.finditer(
        r"^\| (\S+) \| (\w+) \| ([\d,]+) \| ([\d.]+) \| ([\d,]+) \| ([\d.]+) \|$", text, re.M)}
    assert set(rows) >= {"llama-3.1-8b", "qwen3-30b-a3b"}
    got = {}
    for model in ("llama-3.1-8b", "qwen3-30b-a3b"):
        s = _run(model)
        got[model] = s
        m = rows[model]
        assert m.group(2) == load_model(model).tokenizer
        assert int(m.group(3).replace(",", "")) == s["total_output_tokens"]
        assert float(m.group(4)) == pytest.approx(s["output_throughput"], abs=0.05)
        assert int(m.group(5).replace(",", "")) == round(s["output_chars_per_s"])
        assert float(m.group(6)) == pytest.approx(s["output_chars_per_token"], abs=5e-4)
    a, b = got["llama-3.1-8b"], got["qwen3-30b-a3b"]
    assert a["total_output_tokens"] != b["total_output_tokens"]
    assert a["output_chars_per_token"] != pytest.approx(b["output_chars_per_token"], rel=5e-3)
    assert a["output_chars_per_s"] == pytest.approx(b["output_chars_per_s"], rel=0.02)
