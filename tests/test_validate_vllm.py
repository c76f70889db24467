"""Issue 16 findings 4 and 5: `validate` on real `vllm bench serve` output, hardware aliases.

Finding 4: `-m` took catalog ids only (the `model_id` vLLM writes, or a config.json path, gave
"0 of N rows predicted" and exit 0); lengths were not derived from the totals; p50/p90 keys
were ignored; no per-metric table; an unlabelled scatter.
Finding 5: `-H h100-sxm-80gb` (another tool's id) was rejected.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from simulator.analysis import measurements
from simulator.analysis import validate as V
from simulator.cli.commands import main
from simulator.specs import catalog as C
from simulator.specs.checks import SpecError

DATA = Path(__file__).parent / "data"
RESULT = DATA / "vllm_bench_serve_result.json"


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


def _result(tmp_path: Path, **changes: object) -> Path:
    """The fixture with keys changed (None removes a key)."""
    data = json.loads(RESULT.read_text())
    for k, v in changes.items():
        if v is None:
            data.pop(k, None)
        else:
            data[k] = v
    p = tmp_path / "result.json"
    p.write_text(json.dumps(data))
    return p


# --------------------------------------------------------------------------- finding 5: hardware aliases


@pytest.mark.parametrize("ref", ["h100-sxm-80gb", "h100", "H100-SXM5-80GB", "H100_SXM5_80GB",
                                 "NVIDIA H100 80GB HBM3", "H100-SXM"])
def test_hardware_alias_resolves_to_canonical_id(ref):
    assert C.load_hardware(ref).id == "h100-sxm"
    assert C.resolve_hardware_id(ref) == "h100-sxm"


def test_unknown_hardware_still_one_line_error():
    with pytest.raises(SpecError, match="not a catalog id or a file"):
        C.load_hardware("h999-sxm")
    assert C.resolve_hardware_id("h999-sxm") is None


def test_ambiguous_alias_lists_candidates():
    cat = C.hardware_catalog()
    a = cat["h100-sxm"]
    b = cat["h100-pcie"]
    import dataclasses

    twin = {"h100-sxm": a, "h100-pcie": dataclasses.replace(b, aliases=(*b.aliases, "h100"))}
    assert C.hardware_alias_index(twin)["h100"] == ("h100-sxm", "h100-pcie")
    with pytest.raises(SpecError, match=r"ambiguous: it names h100-sxm, h100-pcie"):
        C.resolve_hardware_id("H100", twin)


def test_catalog_aliases_are_unambiguous():
    """No alias of the shipped catalog names two chips (or another chip's id)."""
    index = C.hardware_alias_index(C.hardware_catalog())
    assert {k: v for k, v in index.items() if len(v) > 1} == {}
    assert sum(len(h.aliases) for h in C.hardware_catalog().values()) >= 18


def test_hardware_command_lists_aliases():
    r = _runner().invoke(main, ["hardware", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["id"]: row for row in json.loads(r.stdout)}
    assert "h100-sxm-80gb" in rows["h100-sxm"]["aliases"]


def test_simulate_accepts_hardware_alias():
    r = _runner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm-80gb", "-n", "20",
                                "--input-len", "128", "--output-len", "16", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["hardware"] == "h100-sxm"


# --------------------------------------------------------------------------- finding 4: validate


def test_hf_model_id_and_hardware_alias_are_priced():
    """vLLM's model_id and another tool's hardware id: every row priced (was 0 of N)."""
    rows = measurements.read_vllm_result(RESULT, model="meta-llama/Llama-3.1-8B-Instruct", hardware="h100-sxm-80gb")
    res = V.validate(rows, num_requests=50)
    assert res["predicted"] == len(rows) == 14, res["skipped"]


def test_config_json_path_is_priced():
    rows = measurements.read_vllm_result(RESULT, model=str(DATA / "hf_configs" / "Llama-3.1-8B.json"), hardware="h100-sxm")
    res = V.validate(rows, num_requests=50)
    assert res["predicted"] == len(rows), res["skipped"]
    # the imported config is the catalog model: the same predictions
    cat = V.validate(measurements.read_vllm_result(RESULT, model="llama-3.1-8b", hardware="h100-sxm"), num_requests=50)
    for p, q in zip(res["points"], cat["points"], strict=True):
        assert p["predicted"] == pytest.approx(q["predicted"], rel=1e-9)


def test_lengths_derived_from_totals(tmp_path):
    """No input_lens/output_lens: input_len = 102400 / 200 = 512, output_len = 25600 / 200 = 128."""
    p = _result(tmp_path, input_lens=None, output_lens=None, dataset_name="random")
    rows = measurements.read_vllm_result(p, model="llama-3.1-8b", hardware="h100-sxm")
    assert {(r["input_len"], r["output_len"], r["dataset"]) for r in rows} == {(512, 128, "")}
    assert "total_input_tokens / completed" in rows[0]["notes"]
    # completed (not num_prompts) divides: vLLM sums the totals over completed requests
    p = _result(tmp_path, input_lens=None, output_lens=None, completed=100, num_prompts=200)
    rows = measurements.read_vllm_result(p, model="llama-3.1-8b", hardware="h100-sxm")
    assert (rows[0]["input_len"], rows[0]["output_len"]) == (1024, 256)
    res = V.validate(rows, num_requests=50)
    assert res["predicted"] == len(rows)


def test_lengths_from_totals_not_used_when_dataset_named(tmp_path):
    p = _result(tmp_path, input_lens=None, output_lens=None, dataset_name="sharegpt")
    rows = measurements.read_vllm_result(p, model="llama-3.1-8b", hardware="h100-sxm", dataset="sharegpt")
    assert rows[0]["input_len"] is None and rows[0]["dataset"] == "sharegpt"


def test_every_percentile_key_is_read(tmp_path):
    p = _result(tmp_path, p50_ttft_ms=36.0, p90_ttft_ms=55.0, **{"p99.9_itl_ms": 30.0, "p95_e2el_ms": 1300.0})
    rows = measurements.read_vllm_result(p, model="llama-3.1-8b", hardware="h100-sxm")
    metrics = {r["metric"] for r in rows}
    assert {"p50_ttft_ms", "p90_ttft_ms", "p99.9_itl_ms", "p95_e2el_ms"} <= metrics
    res = V.validate(rows, num_requests=200)
    by = {q["metric"]: q["predicted"] for q in res["points"]}
    # the simulator's p50 is its median; percentiles are ordered
    assert by["p50_ttft_ms"] == pytest.approx(by["median_ttft_ms"])
    assert by["median_ttft_ms"] <= by["p90_ttft_ms"] <= by["p99_ttft_ms"]
    assert by["p99.9_itl_ms"] >= by["p99_itl_ms"]


@pytest.mark.parametrize("metric,unit", [("p50_ttft_ms", "ms"), ("p99.9_itl_ms", "ms"),
                                         ("p100_ttft_ms", None), ("p0_ttft_ms", None),
                                         ("p50_foo_ms", None), ("mean_ttft_ms", "ms")])
def test_metric_unit(metric, unit):
    assert measurements.metric_unit(metric) == unit


def test_cli_table_scatter_and_exit_code(tmp_path):
    out = tmp_path / "out"
    r = _runner().invoke(main, ["validate", str(RESULT), "-m", "meta-llama/Llama-3.1-8B-Instruct",
                                "-H", "H100-SXM5-80GB", "--num-requests", "50", "-q", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "14 of 14 rows predicted" in r.stdout
    # per-metric measured vs predicted table: one line per metric with both values
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("vllm_bench_serve_result-p99_ttft_ms"))
    assert "71.35" in line
    assert (out / "scatter.png").stat().st_size > 10_000


def test_scatter_points_are_labelled(monkeypatch):
    """Each point of a small scatter carries its metric's name next to it."""
    from simulator.cli import plots

    seen = {}
    monkeypatch.setattr(plots, "_png_bytes", lambda fig: seen.setdefault("fig", fig) and b"")
    pts = [{"metric": m, "measured": x, "predicted": x * 1.1, "hardware": "h100-sxm",
            "scenario": "online_poisson"} for m, x in (("p99_ttft_ms", 70.0), ("mean_tpot_ms", 9.0),
                                                        ("output_tokens_per_s", 490.0))]
    plots.validation_scatter_png(pts)
    labels = {t.get_text(): t.xy for ax in seen["fig"].axes for t in ax.texts}
    assert labels == {"p99 ttft": (70.0, 77.0), "mean tpot": (9.0, pytest.approx(9.9)),
                      "output tok/s": (490.0, pytest.approx(539.0))}


def test_nothing_predicted_exits_nonzero(tmp_path):
    r = _runner().invoke(main, ["validate", str(RESULT), "-m", "no-such/model", "-H", "h100-sxm", "-q"])
    assert r.exit_code == 1
    assert "0 of 14 rows predicted" in r.stdout
    assert "none of 14 rows could be predicted" in (r.stderr if hasattr(r, "stderr") else r.output)
    assert "Traceback" not in r.output
