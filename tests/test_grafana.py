"""docs/grafana/llmsim-vllm.json: the committed dashboard is its generator's output, and every
query selects the dashboard's model (tests/test_prometheus_real.py runs each one against a real
Prometheus holding a simulated run)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "llmsim-vllm.json"


def _generator():
    spec = importlib.util.spec_from_file_location("build_dashboard", ROOT / "docs" / "grafana" / "build_dashboard.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_json_is_generated():
    assert DASHBOARD.read_text() == _generator().render(), "run python docs/grafana/build_dashboard.py"


def test_every_query_selects_the_model_and_names_vllm_metrics():
    d = json.loads(DASHBOARD.read_text())
    titles = [p["title"] for p in d["panels"]]
    for want in ("Time to first token", "Time per output token", "Inter-token latency", "E2E request latency",
                 "Requests running and waiting", "KV-cache usage", "Prefix-cache hit rate", "Token throughput",
                 "MFU and MBU (busy time)"):
        assert want in titles
    ids = [p["id"] for p in d["panels"]]
    assert len(set(ids)) == len(ids)
    for p in d["panels"]:
        for t in p["targets"]:
            assert '{model_name="$model_name"}' in t["expr"], t["expr"]
            assert "vllm:" in t["expr"] or "llmsim_" in t["expr"]
    assert d["templating"]["list"][0]["name"] == "model_name"
