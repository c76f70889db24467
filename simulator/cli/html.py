"""One self-contained HTML page per run (`--html FILE` on simulate, sweep, plan and validate).

The page opens offline: CSS and a few lines of JavaScript (click a table header to sort) are
inline, the charts are the PNGs the other outputs write (`plots`, `planplots`), embedded as
data: URIs, and the result itself is embedded as JSON (`<script type="application/json"
id="llmsim-data">`, the object `--json` prints). Charts are matplotlib's rather than a
JavaScript charting library's: they are the same charts as the PNG files (one look, one set
of fixes), need no third-party code vendored into the repository, and render with scripts off.

Every number shown in a table carries `data-key` (its dotted path in the embedded JSON, e.g.
`p99_ttft_ms` or `curves.0.saturation_rate`) and `data-value` (the full-precision value), so
a test (tests/test_html_report.py, in headless Chromium) checks that the page shows the JSON's
numbers.
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from simulator.cli.plotkit import _finite, _png_bytes
from simulator.cli.report import clean, versioned

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232b;
       margin: 0 auto; max-width: 1180px; padding: 16px 24px 48px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 2px; } h2 { font-size: 17px; margin: 28px 0 8px;
     border-bottom: 1px solid #d8dde3; padding-bottom: 4px; }
.sub { color: #5a6570; margin: 0 0 12px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e6e9ed; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
td.text { text-align: left; white-space: normal; }
th { background: #f3f5f7; font-weight: 600; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th:hover { background: #e6eaee; }
tr.best td { background: #eaf6ea; font-weight: 600; }
.grid { display: flex; flex-wrap: wrap; gap: 8px 40px; align-items: flex-start; }
img.chart { max-width: 100%; height: auto; border: 1px solid #e6e9ed; margin: 6px 0; }
.note { color: #5a6570; font-size: 13px; }
.warn { color: #8a5300; }
details { margin: 8px 0; } summary { cursor: pointer; color: #31557a; }
footer { margin-top: 32px; color: #8893a0; font-size: 12px; }
"""

#: click a header: sort by that column (numbers by data-value), again: reverse
SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.getAttribute("data-dir") === "asc" ? -1 : 1;
      th.setAttribute("data-dir", dir === 1 ? "asc" : "desc");
      function key(row) {
        var cell = row.cells[col];
        var v = cell ? cell.getAttribute("data-value") : null;
        return v !== null && v !== "" && !isNaN(Number(v)) ? Number(v) : (cell ? cell.textContent : "");
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x === "number" && typeof y === "number") { return dir * (x - y); }
        return dir * String(x).localeCompare(String(y));
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


# ---------------------------------------------------------------------------- building blocks


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def fmt(v: Any, digits: int = 4) -> str:
    """A number as shown: integers whole, others to `digits` significant digits."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "–"
        if v != 0 and (abs(v) >= 10 ** digits or abs(v) < 1e-3):
            return f"{v:.{digits - 1}e}"
        s = f"{v:.{digits}g}"
        return s if "e" not in s else f"{v:.{digits - 1}e}"
    return str(v)


def num(data: Any, path: str, digits: int = 4) -> str:
    """A <td> showing the number at `path` (dotted) of `data`, with data-key/data-value."""
    return cell(lookup(data, path), path, digits)


def cell(v: Any, key: str | None, digits: int = 4) -> str:
    """A <td> showing v; a finite number also carries data-value, and data-key when its path
    can be written dotted (`key`; None for a name that has dots of its own)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and (not isinstance(v, float) or math.isfinite(v)):
        attr = f' data-key="{esc(key)}"' if key else ""
        return f'<td{attr} data-value="{esc(repr(v))}">{esc(fmt(v, digits))}</td>'
    return f"<td>{esc(fmt(v, digits))}</td>"


def text(v: Any, wrap: bool = False) -> str:
    """A <td> of text; `wrap`: a long note that may break over lines."""
    cls = ' class="text"' if wrap else ""
    return f'<td{cls}>{esc("" if v is None else v)}</td>'


def lookup(data: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(data, list):
            data = data[int(part)] if part.isdigit() and int(part) < len(data) else None
        elif isinstance(data, dict):
            data = data.get(part)
        else:
            return None
    return data


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], sortable: bool = False,
          row_classes: Sequence[str] | None = None) -> str:
    """A table of pre-rendered <td> cells (from `num`/`text`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, cells in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes and row_classes[i] else ""
        body.append(f"<tr{cls}>{''.join(cells)}</tr>")
    sort = ' class="sortable"' if sortable else ""
    return f"<table{sort}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def kv_table(data: Any, items: Sequence[tuple[str, str]], digits: int = 4) -> str:
    """Two columns: label, value at path; rows whose value is missing are left out."""
    rows = [[text(label), num(data, path, digits)] for label, path in items if lookup(data, path) is not None]
    return table(["", "value"], rows)


def chart(png: bytes, alt: str) -> str:
    return (f'<img class="chart" alt="{esc(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">')


def page(title: str, subtitle: str, body: Sequence[str], data: Any) -> str:
    """The whole document: inline CSS, the sections, the result as JSON, the sort script."""
    blob = json.dumps(data, allow_nan=False).replace("</", "<\\/")
    version = esc(data.get("llmsim_version", "")) if isinstance(data, dict) else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1><p class=\"sub\">{esc(subtitle)}</p>"
        + "".join(body)
        + f"<footer>llmsim {version}: a simulation, not a measurement "
          "(docs/validation.md says how close its predictions have been).</footer>"
        f"<script type=\"application/json\" id=\"llmsim-data\">{blob}</script>"
        f"<script>{SCRIPT}</script></body></html>\n")


def section(title: str, *parts: str) -> str:
    return f"<section><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def notes(lines: Iterable[Any], cls: str = "note") -> str:
    items = [f'<li class="{cls}">{esc(x)}</li>' for x in lines if x]
    return f"<ul>{''.join(items)}</ul>" if items else ""


def settings(scenario: dict[str, Any] | None) -> str:
    """The run's settings, folded."""
    if not scenario:
        return ""
    rows = [[text(k), text(json.dumps(v) if isinstance(v, (dict, list)) else v, wrap=True)]
            for k, v in scenario.items() if v not in (None, {}, [])]
    return f"<details><summary>Every setting of the run</summary>{table(['setting', 'value'], rows)}</details>"


# ---------------------------------------------------------------------------- simulate

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E latency"))
STATS = (("mean", "mean"), ("median", "median"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))


def simulate_page(sc: Any, res: Any, summary: dict[str, Any]) -> str:
    """A simulated run: vLLM's summary, latency percentiles, engine numbers, the per-request
    and timeline charts."""
    from simulator.cli import plots

    data = clean(versioned(dict(summary)))
    title = f"{data.get('model')} on {data.get('num_gpus')} x {data.get('hardware')}"
    sub = (f"simulate: workload {data.get('workload')}, {data.get('replicas', 1)} replica(s), TP {data.get('tp')}, "
           f"engine {data.get('engine', 'none')}, offered rate {fmt(data.get('offered_rate'))} req/s")
    overview = kv_table(data, [
        ("Successful requests", "completed"), ("Failed (rejected) requests", "failed"),
        ("Benchmark duration (s)", "duration"), ("Request throughput (req/s)", "request_throughput"),
        ("Request goodput (req/s)", "request_goodput"), ("Good requests (fraction)", "good_fraction"),
        ("Output token throughput (tok/s)", "output_throughput"),
        ("Total token throughput (tok/s)", "total_token_throughput"),
        ("Total input tokens", "total_input_tokens"), ("Total generated tokens", "total_output_tokens")])
    lat_rows = [[text(label + " (ms)")] + [num(data, f"{s}_{key}_ms") for s, _ in STATS]
                for key, label in LATENCIES]
    latency = table(["", *(h for _, h in STATS)], lat_rows)
    engine = kv_table(data, [
        ("Weights", "weights_format"), ("Activations", "activations_format"), ("KV cache", "kv_cache_format"),
        ("Mean batch size (seqs/step)", "mean_batch_size"), ("Peak KV-cache utilisation", "peak_kv_utilization"),
        ("Preemptions", "preemptions"), ("Prefix-cache hit rate", "prefix_cache_hit_rate"),
        ("MFU mean (busy steps)", "mfu_mean"), ("MBU mean (busy steps)", "mbu_mean"),
        ("MFU p99", "mfu_p99"), ("MBU p99", "mbu_p99"), ("Busy utilisation", "busy_utilization"),
        ("KV capacity per replica (tokens)", "kv_capacity_tokens_per_replica"),
        ("Energy (J/output token, rough)", "joules_per_output_token"),
        ("GPU-hours ($/M output tokens)", "gpu_usd_per_million_output_tokens")])
    warn = []
    if data.get("unstable"):
        warn.append(f"UNSTABLE: offered {fmt(data.get('offered_rate'))} req/s exceeds capacity "
                    f"(achieved {fmt(data.get('achieved_rate'))} req/s); latencies grow with run length")
    warn += [f"rejected x{n}: {r}" for r, n in (data.get("failed_reasons") or {}).items()]
    body = [
        section("Summary", notes(warn, "warn"), '<div class="grid">', overview, engine, "</div>"),
        section("Latency", latency,
                '<p class="note">TPOT: (E2E - TTFT) / (output tokens - 1) per request; ITL: every gap '
                "between two tokens (vLLM's definitions).</p>"),
        section("Per request", chart(requests_png(res), "per-request latencies")),
        section("Timeline", chart(plots.timeline_png(res.timeline, plots.timeline_title(
            {**summary, "concurrency": sc.concurrency if sc is not None and sc.rate is None else None})),
            "timeline")),
        section("Settings", settings(sc.as_dict() if sc is not None else None), notes(data.get("notes") or [])),
    ]
    return page(title, sub, body, data)


def requests_png(res: Any) -> bytes:
    """Per request: TTFT, TPOT and E2E latency against arrival time (colour: replica), and
    their distributions (CDF, log x) with p50/p99 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from simulator.cli.plotkit import COLORS

    rec = res.records()
    done = rec[rec["status"] == "completed"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    series = (("ttft_s", "TTFT (ms)"), ("tpot_s", "TPOT (ms)"), ("e2el_s", "E2E latency (ms)"))
    for ax, (col, label) in zip(axes.flat[:3], series, strict=True):
        for rep, rows in done.groupby("replica"):
            y = rows[col].to_numpy() * 1e3
            ax.scatter(rows["arrival_s"], y, s=5, alpha=0.6, color=COLORS[int(rep) % len(COLORS)],
                       label=f"replica {int(rep)}", linewidths=0)
        ax.set_xlabel("arrival time (s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        _log_if_spread(ax, done[col].to_numpy() * 1e3)
    if done["replica"].nunique() > 1:
        axes.flat[0].legend(fontsize=8, markerscale=3)
    ax = axes.flat[3]
    for k, (col, label) in enumerate(series):
        v = np.sort(done[col].dropna().to_numpy() * 1e3)
        v = v[v > 0]
        if len(v):
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), color=COLORS[k], label=label.replace(" (ms)", ""))
            for q, ls in ((0.5, ":"), (0.99, "--")):
                ax.axvline(float(np.quantile(v, q)), color=COLORS[k], ls=ls, lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("ms (dotted: p50, dashed: p99)")
    ax.set_ylabel("fraction of requests")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.suptitle(f"{len(done)} completed requests")
    fig.tight_layout()
    return _png_bytes(fig)


def _log_if_spread(ax: Any, v: Any) -> None:
    import numpy as np

    v = v[np.isfinite(v) & (v > 0)]
    if len(v) and v.max() / v.min() > 100:
        ax.set_yscale("log")


# ---------------------------------------------------------------------------- sweep


def binding_key(row: dict[str, Any]) -> str | None:
    """The binding-SLO field of a plan candidate or sweep row, when the result has one (its
    name starts with 'binding')."""
    if "binding_slo" in row:  # plan and sweep rows name it so (analysis/capacity.py)
        return "binding_slo"
    return next((k for k in row if k.startswith("binding")), None)


def sweep_page(result: dict[str, Any]) -> str:
    """A rate sweep: per curve the knee, saturation and SLO capacity; the latency-vs-rate and
    throughput curves (marked); every point."""
    from simulator.cli import plots

    data = clean(versioned(result))
    title = f"Rate sweep: {data.get('model')} on {data.get('hardware')}"
    slos = ", ".join(f"{k} {v:g} ms" for k, v in (data.get("goodput_slos_ms") or {}).items()) or "none"
    sub = f"workload {data.get('workload')}; SLOs {slos}, target good fraction {fmt(data.get('slo_target'))}"
    curves = data.get("curves") or []
    crows = []
    for i, c in enumerate(curves):
        crows.append([text(c.get("curve")), num(data, f"curves.{i}.offline_max_throughput"),
                      num(data, f"curves.{i}.knee.rate"), num(data, f"curves.{i}.saturation_rate"),
                      num(data, f"curves.{i}.saturation_lower_bound"), num(data, f"curves.{i}.max_stable_rate"),
                      num(data, f"curves.{i}.slo_capacity"), text(_binding(c) or c.get("slo_note"), wrap=True)])
    ctable = table(["curve", "offline max (req/s)", "knee (req/s)", "saturation (req/s)",
                    "saturation ≥ (req/s)", "max stable (req/s)", "SLO capacity (req/s)", "binding SLO / note"],
                   crows)
    points = data.get("points") or []
    bkey = binding_key(points[0]) if points else None
    cols = [("rate", "rate"), ("achieved_rate", "achieved"), ("p99_ttft_ms", "p99 TTFT ms"),
            ("p99_tpot_ms", "p99 TPOT ms"), ("p99_itl_ms", "p99 ITL ms"), ("p99_e2el_ms", "p99 E2E ms"),
            ("good_fraction", "good fraction"), ("output_throughput", "tok/s")]
    prows = [[text(p.get("curve"))] + [num(data, f"points.{i}.{k}") for k, _ in cols]
             + [text("yes" if p.get("saturated") else "")] + ([text(p.get(bkey))] if bkey else [])
             for i, p in enumerate(points)]
    ptable = table(["curve", *(h for _, h in cols), "saturated", *(["binding SLO"] if bkey else [])],
                   prows, sortable=True)
    warn = [w for c in curves for w in (c.get("warnings") or [])]
    body = [section("Curves", notes(warn, "warn"), ctable),
            section("Latency vs rate", chart(plots.sweep_latency_png(result), "latency vs rate"),
                    chart(plots.sweep_throughput_png(result), "throughput vs rate")),
            section("Points", ptable),
            section("Settings", settings(data.get("scenario")))]
    return page(title, sub, body, data)


def _binding(row: dict[str, Any]) -> str | None:
    k = binding_key(row)
    return None if k is None or row.get(k) is None else str(row[k])


# ---------------------------------------------------------------------------- plan


PLAN_COLS = (("tp", "TP"), ("replicas", "replicas"), ("gpus", "GPUs"), ("slo_capacity", "SLO capacity/replica"),
             ("usable_capacity", "usable/replica"), ("saturation_rate", "saturation/replica"),
             ("cost_per_hour_usd", "$/hour"), ("cost_per_million_output_tokens_usd", "$/M output tokens"))


def plan_page(result: dict[str, Any]) -> str:
    """A fleet plan: the cheapest deployment, every candidate (with the SLO that binds it,
    when the result says), the infeasible ones and why, the plan chart."""
    from simulator.cli import planplots

    data = clean(versioned(result))
    title = f"Plan: {data.get('model')} at {fmt(data.get('rate'))} req/s"
    slos = ", ".join(f"{k} {v:g} ms" for k, v in (data.get("goodput_slos_ms") or {}).items()) or "none"
    sub = f"workload {data.get('workload')}; SLOs {slos}; headroom {fmt(data.get('headroom'))}"
    cands = data.get("candidates") or []
    bkey = next((binding_key(c) for c in cands if binding_key(c)), None)
    rows, classes = [], []
    for i, c in enumerate(cands):
        cells = [num(data, f"candidates.{i}.rank"), text(c.get("hardware")),
                 text(f"{c.get('weight_dtype')}/{c.get('kv_dtype')}")]
        cells += [num(data, f"candidates.{i}.{k}") for k, _ in PLAN_COLS]
        cells += [text(c.get("status"))] + ([text(c.get(bkey))] if bkey else [])
        rows.append(cells)
        classes.append("best" if c.get("rank") == 1 else "")
    ctable = table(["rank", "hardware", "weights/KV", *(h for _, h in PLAN_COLS), "status",
                    *(["binding SLO"] if bkey else [])], rows, sortable=True, row_classes=classes)
    best = data.get("best")
    head = (f"<p>Cheapest: <b>{esc(best.get('replicas'))} x {esc(best.get('hardware'))} TP{esc(best.get('tp'))}</b> "
            f"({esc(fmt(best.get('gpus')))} GPUs, ${esc(fmt(best.get('cost_per_hour_usd')))}/hour)</p>"
            if isinstance(best, dict) else "<p>No candidate serves the rate within the SLOs.</p>")
    infeasible = data.get("infeasible") or []
    irows = [[text(x.get("hardware")), text(x.get("tp")), text(x.get("reason") or x.get("status") or "", wrap=True)]
             for x in infeasible]
    body = [section("Cheapest deployment", head, notes((best or {}).get("warnings") or [], "warn")),
            section("Candidates", ctable,
                    '<p class="note">Capacities are per replica (req/s); the fleet serves the rate with '
                    "the headroom kept free.</p>"),
            section("Chart", chart(planplots.plan_png(result), "plan")),
            section("Infeasible", table(["hardware", "TP", "why"], irows)) if irows else "",
            section("Settings", settings(data.get("scenario")))]
    return page(title, sub, body, data)


# ---------------------------------------------------------------------------- validate


def validate_page(result: dict[str, Any], file: str) -> str:
    """Predictions against measurements: the error summary, by group, the scatter, every row
    and every skipped row with its reason."""
    from simulator.cli import plots

    data = clean(versioned(result))
    title = f"Validation against {file}"
    sub = f"{data.get('predicted')} of {data.get('rows')} rows predicted; error % = (predicted - measured) / measured x 100"
    overall = kv_table(data, [("Rows", "rows"), ("Predicted", "predicted"), ("Median |error| %", "median_ape"),
                              ("p90 |error| %", "p90_ape"), ("Mean signed error %", "mean_signed_error")])
    groups = []
    for key, label in (("by_source", "source"), ("by_hardware", "hardware"), ("by_scenario", "scenario"),
                       ("by_metric", "metric"), ("by_engine", "engine")):
        g = data.get(key) or {}
        if not g:
            continue
        rows = [[text(name, wrap=True)] + [cell(g[name].get(k), None if "." in name else f"{key}.{name}.{k}")
                                           for k in ("rows", "median_ape", "p90_ape", "mean_signed_error")]
                for name in g]
        groups.append(f"<h3>By {label}</h3>" + table([label, "rows", "median |err| %", "p90 |err| %",
                                                      "mean signed %"], rows, sortable=True))
    points = data.get("points") or []
    shown = points[:2000]
    prow = [[text(p.get("id")), text(p.get("hardware")), text(p.get("model")), text(p.get("metric")),
             num(data, f"points.{i}.measured"), num(data, f"points.{i}.predicted"),
             num(data, f"points.{i}.error_pct")] for i, p in enumerate(shown)]
    more = f'<p class="note">{len(points) - len(shown)} more rows in the JSON.</p>' if len(points) > len(shown) else ""
    skipped = data.get("skipped") or []
    srows = [[text(s.get("id") if isinstance(s, dict) else ""),
              text(s.get("reason") if isinstance(s, dict) else s, wrap=True)]
             for s in skipped]
    scatter = chart(plots.validation_scatter_png(result.get("points") or [], title), "predicted vs measured") \
        if any(_finite(p.get("measured")) and _finite(p.get("predicted")) for p in points) else ""
    body = [section("Errors", overall, *groups),
            section("Predicted vs measured", scatter),
            section("Rows", table(["id", "hardware", "model", "metric", "measured", "predicted", "error %"],
                                  prow, sortable=True), more),
            section("Skipped rows", table(["id", "reason"], srows)) if srows else ""]
    return page(title, sub, body, data)


__all__ = ["fmt", "lookup", "plan_page", "requests_png", "simulate_page", "sweep_page", "validate_page"]
