"""Issue 25's plot and progress fixes: plain log-axis ticks, the timeline's title and all-zero
panels, scatter labels that never overlap, a progress total known before the first run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from simulator.cli import plotkit, plots
from simulator.cli.commands import main

DATA = Path(__file__).parent / "data"


@pytest.fixture
def figures(monkeypatch):
    """The figures the PNG functions render (kept open for inspection)."""
    kept: list = []
    monkeypatch.setattr(plots, "_png_bytes", lambda fig: kept.append(fig) or b"")
    return kept


def labels(ax, which: str = "y") -> list[str]:
    axis = ax.yaxis if which == "y" else ax.xaxis
    return [t.get_text() for minor in (False, True) for t in axis.get_ticklabels(minor=minor) if t.get_text()]


def _sweep(tpot_p99: list[float]) -> dict:
    rates = [1.0, 2.0, 4.0, 6.0, 8.0]
    pts = [{"curve": "base", "rate": r, "kind": "grid", "achieved_rate": r * 0.99, "saturated": r >= 8,
            "p99_ttft_ms": 50.0 * (1 + i), "p50_ttft_ms": 40.0 * (1 + i), "p99_tpot_ms": t, "p50_tpot_ms": t * 0.9}
           for i, (r, t) in enumerate(zip(rates, tpot_p99, strict=True))]
    info = {"curve": "base", "knee": None, "slo_capacity": None, "saturation_rate": 7.9,
            "offline_max_throughput": 8.2}
    return {"model": "llama-3.1-70b", "hardware": "h100-sxm", "workload": "random",
            "scenario": {"tp": 4, "num_requests": 200, "input_len": 1024, "output_len": 128},
            "curves": [info], "points": pts, "goodput_slos_ms": {}}


def test_log_axes_have_plain_tick_labels():
    """A 70B's TPOT from 40 to 1,500 ms: a log axis, labelled 40, 60, 100, ... not 6x10^1."""
    fig = plots.sweep_latency_fig(_sweep([40.0, 45.0, 60.0, 300.0, 1500.0]))
    fig.canvas.draw()
    tpot = fig.axes[1]
    assert tpot.get_yscale() == "log"
    for ax in fig.axes:
        for text in labels(ax):
            assert "times" not in text and "^" not in text and "$" not in text, text
            float(text.replace(",", "").replace("\u2212", "-"))
    assert "100" in labels(tpot) and "1,000" in labels(tpot)
    # a log axis spanning less than a decade labels its minor ticks, plainly
    fig = plots.sweep_latency_fig(_sweep([40.0, 45.0, 50.0, 55.0, 60.0 * 40]))
    fig.canvas.draw()
    assert all("$" not in t for t in labels(fig.axes[1]))
    assert plotkit.plain_number(0.2) == "0.2" and plotkit.plain_number(20000.0) == "20,000"


def _timeline(queue: int) -> pd.DataFrame:
    t = np.linspace(0, 10, 50)
    return pd.DataFrame({"time_s": t, "replica": np.zeros(50, int), "batch_size": np.full(50, 3),
                         "kv_utilization": np.full(50, 0.2), "queue_length": np.full(50, queue)})


def test_all_zero_panel_is_zero_to_one(figures):
    plots.timeline_png(_timeline(0), "t")
    fig = figures[-1]
    fig.canvas.draw()
    queue = fig.axes[2]
    assert queue.get_ylim() == (0.0, 1.0)
    assert labels(queue) == ["0", "1"]  # not -0.04 ... 0.04
    assert fig.axes[0].get_ylim()[0] == 0.0 and all(float(x) == int(float(x)) for x in labels(fig.axes[0]))


def test_timeline_title_has_parallelism_replicas_and_rate(tmp_path):
    code, _, err = CliRunner().invoke(main, ["simulate", "-m", "llama-3.1-8b", "--tp", "2", "--replicas", "2",
                                             "-n", "40", "--input-len", "128", "--output-len", "8", "-r", "3",
                                             "-q", "--out", str(tmp_path / "o")]).exit_code, "", ""
    assert code == 0, err
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    title = plots.timeline_title(summary)
    assert "llama-3.1-8b on h100-sxm (tp=2, 2 replicas)" in title
    assert f"{summary['offered_rate']:.3g} req/s offered" in title and "40 requests" in title
    closed = plots.timeline_title({**summary, "concurrency": 4, "replicas": 1})
    assert "1 replica)" in closed and "4 clients" in closed


def _points(*args: str) -> list[dict]:
    r = CliRunner().invoke(main, ["validate", *args, "-H", "h100-sxm", "--json", "-q"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["points"]


@pytest.mark.parametrize("args", [
    (str(DATA / "vllm_bench_serve_result.json"), "-m", "llama-3.1-8b", "--input-len", "512", "--output-len", "128"),
    (str(DATA / "guidellm_benchmarks_synthetic.json"),),
])
def test_scatter_labels_do_not_overlap(figures, args):
    points = _points(*args)
    plots.validation_scatter_png(points, "t")
    fig = figures[-1]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(r)) for ax in fig.axes for t in ax.texts if t.get_text()]
    overlaps = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    assert overlaps == []
    shown = ", ".join(text for text, _ in boxes)
    assert shown.count("p99 ttft") == sum(p["metric"] == "p99_ttft_ms" for p in points)  # every point named
    for ax in fig.axes:
        assert all("$" not in t for t in labels(ax, "x") + labels(ax, "y"))


def test_sweep_progress_total_is_known_before_the_first_run():
    from simulator.analysis import sweep as sw
    from simulator.scenario import Scenario

    calls: list[tuple[int, int]] = []
    sc = Scenario(workload="random", input_len=256, output_len=16, num_requests=40, goodput={"ttft": 60})
    sw.sweep(sc, [2, 6, 10, 14], progress=lambda d, t: calls.append((d, t)))
    done = calls[-1][0]
    assert calls[0] == (0, calls[0][1]) and calls[0][1] >= done  # the total before any simulation
    totals = [t for _, t in calls]
    assert all(b <= a for a, b in zip(totals, totals[1:], strict=False))  # never grows
    assert calls[-1] == (done, done)


def test_plan_progress_total_is_known_before_the_first_run():
    from simulator.analysis import plan as pl
    from simulator.scenario import Scenario

    calls: list[tuple[int, int]] = []
    sc = Scenario(workload="random", input_len=256, output_len=16, num_requests=30, goodput={"ttft": 500})
    pl.plan(sc, 5.0, hardware=["h100-sxm", "a100-sxm-80gb"], tps=[1], progress=lambda d, t: calls.append((d, t)))
    done = calls[-1][0]
    assert calls[0][0] == 0 and calls[0][1] >= done
    assert calls[-1][1] == done


def test_progress_bar_is_created_with_the_planned_total():
    import io

    from simulator.cli.report import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    p = Progress("sweeping", False, stream=Tty())
    p(0, 40)
    assert p.bar is not None and p.bar.total == 40 and p.bar.n == 0
