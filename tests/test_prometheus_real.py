"""A simulated run in a real Prometheus (issue 25): `simulate --metrics-out` backfilled with
`promtool tsdb create-blocks-from openmetrics`, served by Debian's `prometheus` on 127.0.0.1,
and every query of docs/grafana/llmsim-vllm.json run through the HTTP API. Each must return
data, and `histogram_quantile(0.99, ...)` over the run must agree with llmsim's own p99 TTFT
and TPOT within one bucket. The server is stopped by the fixture's finalizer.

Skips (with the reason) only where the prometheus package is not installed; `.ci/run`
installs it.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from promserver import Prometheus, backfill, binaries

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "llmsim-vllm.json"
MODEL = "meta-llama/Llama-3.1-8B"
INTERVAL = 15.0  # the default --metrics-interval: what a user backfills

BIN = binaries()
pytestmark = pytest.mark.skipif(isinstance(BIN, str), reason=str(BIN))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 2-replica run of about 5 simulated minutes, written as a series and a snapshot."""
    from simulator.cli.commands import main

    d = tmp_path_factory.mktemp("promrun")
    args = ["simulate", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-n", "1500", "-r", "5", "--replicas", "2",
            "--input-len", "512", "--output-len", "128", "--range-ratio", "0.5", "--seed", "7", "--json", "-q"]
    r = CliRunner().invoke(main, [*args, "--metrics-out", str(d / "run.om")])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    r = CliRunner().invoke(main, [*args, "--metrics-out", str(d / "run.prom"), "--metrics-format", "text"])
    assert r.exit_code == 0, r.output
    return d, summary


@pytest.fixture(scope="module")
def prom(run, tmp_path_factory):
    d, _ = run
    prometheus, promtool = BIN  # type: ignore[misc]
    backfill(promtool, d / "run.om", d / "tsdb")
    server = Prometheus(prometheus, d / "tsdb", tmp_path_factory.mktemp("promserver"))
    try:
        yield server
    finally:
        server.stop()


def _stamps(path: Path) -> tuple[float, float]:
    """First and last sample timestamps of an OpenMetrics file (seconds)."""
    first = last = None
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            t = float(line.rsplit(" ", 1)[1])
            first = t if first is None else min(first, t)
            last = t if last is None else max(last, t)
    assert first is not None and last is not None
    return first, last


def _exprs() -> list[tuple[str, str]]:
    d = json.loads(DASHBOARD.read_text())
    return [(f"{p['title']} / {t['legendFormat']}", t["expr"]) for p in d["panels"] for t in p["targets"]]


def _finite_values(result: list[dict]) -> list[float]:
    return [float(v) for s in result for _, v in s["values"] if math.isfinite(float(v))]


def test_promtool_checks(run):
    """promtool check metrics on the snapshot: it parses, and the only lint it reports is the
    ':' in vLLM's own names (vLLM's /metrics reports the same); with ':' replaced, no lint."""
    d, _ = run
    _, promtool = BIN  # type: ignore[misc]
    text = (d / "run.prom").read_text()
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert r.returncode in (0, 3), r.stderr  # 3: lint problems only (1 would be a parse error)
    assert problems and all(p.endswith("metric names should not contain ':'") for p in problems), problems
    r = subprocess.run([promtool, "check", "metrics"], input=text.replace("vllm:", "vllm_"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_backfill_blocks(run, tmp_path):
    d, _ = run
    _, promtool = BIN  # type: ignore[misc]
    out = backfill(promtool, d / "run.om", tmp_path / "tsdb")
    assert "NUM SAMPLES" in out and list((tmp_path / "tsdb").iterdir())


@pytest.mark.parametrize("title,expr", _exprs(), ids=[t for t, _ in _exprs()])
def test_every_dashboard_query_returns_data(prom, run, title, expr):
    d, _ = run
    t0, t1 = _stamps(d / "run.om")
    q = expr.replace("$model_name", MODEL).replace("$__rate_interval", f"{4 * INTERVAL:g}s")
    res = prom.query_range(q, t0, t1, INTERVAL)
    vals = _finite_values(res)
    assert vals, f"{title}: {q} returned no data ({res!r:.300})"
    assert all(v >= 0 for v in vals), f"{title}: negative values"


def _bucket(bounds: tuple[float, ...], x: float) -> int:
    """Index of the bucket holding x (upper bound inclusive; len(bounds): the +Inf bucket)."""
    return int(np.searchsorted(np.asarray(bounds), x, side="left"))


@pytest.mark.parametrize("metric,key,bounds_name", [
    ("vllm:time_to_first_token_seconds", "ttft", "TTFT_BUCKETS_S"),
    ("vllm:request_time_per_output_token_seconds", "tpot", "ITL_BUCKETS_S"),
    ("vllm:e2e_request_latency_seconds", "e2el", "REQUEST_LATENCY_BUCKETS_S"),
])
def test_p99_over_the_run_agrees_with_llmsim(prom, run, metric, key, bounds_name):
    """histogram_quantile(0.99) over the whole run lies within one bucket of llmsim's p99
    (the quantile a histogram can give is only as fine as its buckets), and the mean from
    _sum / _count equals llmsim's mean."""
    from simulator.cli import prometheus as P

    d, summary = run
    t0, t1 = _stamps(d / "run.om")
    window = f"{int(t1 - t0 + 2 * INTERVAL)}s"
    sel = f'{{model_name="{MODEL}"}}'
    got = prom.query(f"histogram_quantile(0.99, sum by (le) (increase({metric}_bucket{sel}[{window}])))", t1)
    assert len(got) == 1
    p99_prom = float(got[0]["value"][1])
    p99_sim = summary[f"p99_{key}_ms"] / 1e3
    bounds = getattr(P, bounds_name)
    assert abs(_bucket(bounds, p99_prom) - _bucket(bounds, p99_sim)) <= 1, (p99_prom, p99_sim)
    mean = prom.query(f"sum(increase({metric}_sum{sel}[{window}])) / sum(increase({metric}_count{sel}[{window}]))", t1)
    assert float(mean[0]["value"][1]) == pytest.approx(summary[f"mean_{key}_ms"] / 1e3, rel=1e-6)


def test_counters_over_the_run(prom, run):
    """The counters at the run's last sample equal the summary's totals, split over 2 engines."""
    d, summary = run
    _, t1 = _stamps(d / "run.om")
    sel = f'{{model_name="{MODEL}"}}'

    def total(expr: str) -> float:
        return float(prom.query(expr, t1)[0]["value"][1])

    assert total(f"sum(vllm:request_success_total{sel})") == summary["completed"]
    assert total(f"sum(vllm:generation_tokens_total{sel})") == summary["total_output_tokens"]
    assert total(f"sum(vllm:prompt_tokens_total{sel})") == summary["total_input_tokens"]
    engines = prom.query(f"count by (engine) (vllm:time_to_first_token_seconds_count{sel})", t1)
    assert sorted(e["metric"]["engine"] for e in engines) == ["0", "1"]
