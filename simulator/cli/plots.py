"""Charts. matplotlib is imported inside each function and draws on an Agg canvas (no
pyplot state), so importing this module has no side effects and costs nothing. The plan and
what-if charts live in `planplots` (re-exported here); shared helpers in `plotkit`."""

from __future__ import annotations

import io
from typing import Any

from simulator.cli.plotkit import (
    COLORS,
    _finite,
    _png_bytes,
    place_labels,
    plain_log_axis,
    zero_based,
)
from simulator.cost.predict import op_points
from simulator.cost.roofline import CostModel
from simulator.cost.stepbatch import decode_step, prefill_step


def roofline_chart(cost: CostModel, batch_size: int, input_len: int, fmt: str = "png") -> bytes:
    """A log-log roofline chart of one prefill step (`batch_size` prompts of `input_len`
    tokens) and one decode step (`batch_size` sequences, `input_len` cached tokens each), as
    bytes in `fmt` (png, svg, pdf; the caller writes the file through the output layer).

    Roofs: the dense peak of the GEMM dtype and HBM bandwidth; when the hardware profile
    has efficiencies below 1 the attainable roof (peak x eta_c, bandwidth x eta_m) is drawn
    dashed. Ops are placed at (FLOPs / bytes, FLOPs / op time).
    """
    # An Agg canvas on a bare Figure: no pyplot, so no global backend switch or figure registry.
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    hw, m = cost.hardware, cost.model
    eff = hw.efficiency
    peak = hw.flops(cost.gemm_dtype)
    bw = hw.hbm_bandwidth_bytes_per_s
    ridge = peak / bw

    phases: list[tuple[str, dict[str, Any], str, str]] = [
        (f"prefill ({batch_size}x{input_len} tokens)", cost.breakdown(prefill_step(m, batch_size, input_len)), "o", "tab:blue"),
        (f"decode (batch {batch_size}, context {input_len})", cost.breakdown(decode_step(m, batch_size, input_len)), "^", "tab:orange"),
    ]
    points = [(label, op_points(b), marker, color) for label, b, marker, color in phases]
    xs = [p["intensity"] for _, pts, _, _ in points for p in pts]
    ys = [p["flops_per_s"] for _, pts, _, _ in points for p in pts]
    x_lo = min([ridge / 100.0, *xs]) / 2.0
    x_hi = max([ridge * 100.0, *xs]) * 2.0
    x = np.logspace(np.log10(x_lo), np.log10(x_hi), 400)

    fig = Figure(figsize=(10, 7))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.loglog(x, np.minimum(peak, bw * x), color="black", lw=2,
              label=f"roof: {cost.gemm_dtype} peak {peak / 1e12:.0f} TFLOP/s, HBM {bw / 1e12:.2f} TB/s")
    if eff.compute_efficiency < 1 or eff.memory_efficiency < 1:
        pe, be = peak * eff.compute_efficiency, bw * eff.memory_efficiency
        ax.loglog(x, np.minimum(pe, be * x), color="gray", ls="--", lw=1,
                  label=f"attainable (eta_c {eff.compute_efficiency:.2f}, eta_m {eff.memory_efficiency:.2f})")
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.plot([ridge], [peak], "s", color="black", ms=7)

    for label, pts, marker, color in points:
        if not pts:
            continue
        ax.scatter([p["intensity"] for p in pts], [p["flops_per_s"] for p in pts], marker=marker,
                   s=60, color=color, edgecolor="black", zorder=3, label=label)
        for px, py, names, bound in _clusters(pts):
            text = "\n".join(", ".join(names[i:i + 3]) for i in range(0, len(names), 3))
            if bound == "compute":  # on the flat roof: slanted labels above, out of each other's way
                ax.annotate(text, (px, py), textcoords="offset points", xytext=(0, 8), fontsize=7,
                            color=color, rotation=50, ha="left", va="bottom",
                            rotation_mode="anchor")
            else:  # on the slope: to the right, prefill above the line, decode below
                up = marker == "o"
                ax.annotate(text, (px, py), textcoords="offset points",
                            xytext=(8, 6 if up else -6), fontsize=7, color=color,
                            ha="left", va="bottom" if up else "top")

    ax.set_xlim(x_lo, x_hi)
    y_lo = min([bw * x_lo, *ys]) / 2.0
    ax.set_ylim(y_lo, peak * 12.0)
    # the ridge label runs up the dotted line from the bottom, clear of the op labels
    ax.annotate(f"ridge point: {ridge:.0f} FLOP/byte ({cost.gemm_dtype})", (ridge, y_lo),
                textcoords="offset points", xytext=(-4, 6), fontsize=9, rotation=90,
                ha="right", va="bottom")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable performance (FLOP/s)")
    par = f"tp={cost.par.tp}" + (f" pp={cost.par.pp}" if cost.par.pp > 1 else "")
    ax.set_title(f"Roofline: {m.id} on {hw.id} ({par}), batch {batch_size}, input {input_len}, "
                 f"w/a/kv {cost.dtypes.weight}/{cost.dtypes.activation}/{cost.dtypes.kv}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=120)
    return buf.getvalue()


def roofline_bytes(cost: CostModel, batch_size: int, input_len: int, fmt: str = "png") -> bytes:
    """The roofline chart of `roofline_chart` as bytes in `fmt` (png, svg, pdf), so the
    caller can write it atomically."""
    return roofline_chart(cost, batch_size, input_len, fmt)


def _clusters(pts: list[dict[str, Any]], tol: float = 0.06) -> list[tuple[float, float, list[str], str]]:
    """Group points that would sit on top of each other (within `tol` decades on both axes)
    so that each group gets one label listing its ops."""
    import math

    groups: list[tuple[float, float, list[str], str]] = []
    for p in sorted(pts, key=lambda q: q["intensity"]):
        lx, ly = math.log10(p["intensity"]), math.log10(p["flops_per_s"])
        for gx, gy, names, _ in groups:
            if abs(math.log10(gx) - lx) < tol and abs(math.log10(gy) - ly) < tol:
                names.append(p["name"])
                break
        else:
            groups.append((p["intensity"], p["flops_per_s"], [p["name"]], p["bound"]))
    return groups


__all__ = ["roofline_chart"]


def _binned_utilization(timeline: Any, bins: int = 80) -> dict[str, Any]:
    """MFU/MBU split into prefill and decode, time-weighted within `bins` time bins (pooled
    over replicas): sum(v t) / sum(t) over the busy time t of the rows in each bin, so the
    prefill and decode curves add up to the step's total. A row (a step or a run of decode
    steps, logged at its end) is placed at the middle of its busy time."""
    import numpy as np

    t_end = timeline["time_s"].to_numpy(dtype=float)
    busy = timeline["busy_s"].to_numpy(dtype=float)
    edges = np.linspace(0.0, float(t_end.max()) if len(t_end) else 1.0, bins + 1)
    idx = np.clip(np.searchsorted(edges, t_end - busy / 2, side="right") - 1, 0, bins - 1)
    w = np.bincount(idx, weights=busy, minlength=bins)
    out: dict[str, Any] = {"time_s": (edges[:-1] + edges[1:]) / 2}
    for col in ("mfu_prefill", "mfu_decode", "mbu_prefill", "mbu_decode"):
        v = np.nan_to_num(timeline[col].to_numpy(dtype=float))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[col] = np.where(w > 0, np.bincount(idx, weights=v * busy, minlength=bins) / w, np.nan)
    return out


def timeline_title(summary: dict[str, Any]) -> str:
    """'model on hardware (tp, pp, replicas), workload, rate, n requests' of a simulate run."""
    par = [f"tp={summary.get('tp', 1)}"]
    if summary.get("pp", 1) != 1:
        par.append(f"pp={summary['pp']}")
    reps = summary.get("replicas", 1)
    par.append(f"{reps} replica{'s' if reps != 1 else ''}")
    rate = summary.get("offered_rate")
    load = f"{rate:.3g} req/s offered" if _finite(rate) else "all requests at t = 0"
    if summary.get("concurrency"):
        load = f"{summary['concurrency']} clients"
    return (f"{summary.get('model')} on {summary.get('hardware')} ({', '.join(par)})\n"
            f"{summary.get('workload')}, {load}, {summary.get('num_requests', '?')} requests")


def timeline_png(timeline: Any, title: str = "") -> bytes:
    """Batch size, KV-cache utilisation, queue length and (when the timeline has them) MFU and
    MBU split into prefill and decode, over simulated time (PNG bytes). Count panels start at
    0 (and show 0 to 1 when nothing happened, not matplotlib's -0.05 to 0.05)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    util = "mfu" in timeline and len(timeline) > 0
    fig, axes = plt.subplots(4 if util else 3, 1, figsize=(9, 9 if util else 7), sharex=True)
    for rep, g in timeline.groupby("replica"):
        lbl = f"replica {rep}"
        axes[0].step(g["time_s"], g["batch_size"], where="post", lw=0.8, label=lbl)
        axes[1].step(g["time_s"], 100 * g["kv_utilization"], where="post", lw=0.8, label=lbl)
        axes[2].step(g["time_s"], g["queue_length"], where="post", lw=0.8, label=lbl)
    axes[0].set_ylabel("batch size (seqs)")
    axes[1].set_ylabel("KV cache used (%)")
    axes[2].set_ylabel("waiting requests")
    for ax, col, scale in ((axes[0], "batch_size", 1), (axes[1], "kv_utilization", 100), (axes[2], "queue_length", 1)):
        zero_based(ax, (timeline[col] * scale).tolist() if len(timeline) else [])
        if col != "kv_utilization":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole ticks
    if util:
        b = _binned_utilization(timeline)
        styles = {"mfu_prefill": ("C3", "-"), "mfu_decode": ("C0", "-"),
                  "mbu_prefill": ("C3", "--"), "mbu_decode": ("C0", "--")}
        has = np.isfinite(b["mfu_decode"])  # bins with busy time (idle or mid-run bins skipped)
        for col, (color, ls) in styles.items():
            axes[3].plot(b["time_s"][has], 100 * b[col][has], color=color, ls=ls, lw=0.9,
                         label=col.upper().replace("_", " "))
        zero_based(axes[3], [100 * v for col in styles for v in b[col][has]], pad=1.15)
        axes[3].set_ylabel("% of peak (busy time)")
        axes[3].legend(fontsize=7, ncol=4, loc="upper right")
    axes[-1].set_xlabel("simulated time (s)")
    if timeline["replica"].nunique() > 1:
        axes[0].legend(fontsize=7, ncol=4)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title or "engine timeline")
    return _png_bytes(fig)


# ---- sweep charts (llmsim sweep) ----------------------------------------------------------


def _offered_rate_label(result: dict[str, Any]) -> str:
    """What the sweep's x value means: a named workload sends on vLLM's schedule (the last of
    n requests at n / rate, so exactly `rate` were offered); a trace is time-scaled to it."""
    from simulator.workloads.named import named_workload

    wl = str(result.get("workload", (result.get("scenario") or {}).get("workload", "")))
    if named_workload(wl) is None:
        return "offered rate (req/s, trace time-scaled: (n-1) / (last - first arrival))"
    return "offered rate (req/s, vLLM schedule: last request sent at n/rate)"


def _sweep_title(result: dict[str, Any], what: str) -> str:
    """'<what>: model on hardware (tp, replicas), workload, n requests, SLOs'."""
    sc = result.get("scenario") or {}
    par = []
    if sc.get("tp", 1) != 1:
        par.append(f"tp={sc['tp']}")
    if sc.get("pp", 1) != 1:
        par.append(f"pp={sc['pp']}")
    if sc.get("replicas", 1) != 1:
        par.append(f"{sc['replicas']} replicas")
    head = f"{what}: {result.get('model')} on {result.get('hardware')}" + (f" ({', '.join(par)})" if par else "")
    wl = str(result.get("workload", sc.get("workload", "")))
    if wl.lower() in ("random", "synthetic"):
        wl = f"random {sc.get('input_len')} in / {sc.get('output_len')} out"
        if sc.get("range_ratio"):
            wl += f" ±{sc['range_ratio']:g}"
    tail = f"workload {wl}, {sc.get('num_requests', '?')} requests"
    slos = result.get("goodput_slos_ms") or {}
    if slos:
        tail += ", SLO " + " ".join(f"{k}≤{v:g} ms" for k, v in slos.items())
    swept = result.get("sweep") or {}
    if swept:
        tail += "; sweep " + ", ".join(swept)
    return f"{head}\n{tail}"


def _sweep_curves(result: dict[str, Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]], str]]:
    """(curve info, its points sorted by offered rate, colour) for each curve."""
    colors = COLORS
    out = []
    for i, info in enumerate(result.get("curves", [])):
        pts = sorted((p for p in result.get("points", []) if p.get("curve") == info["curve"]),
                     key=lambda p: p["rate"])
        out.append((info, pts, colors[i % len(colors)]))
    return out


def _rate_marks(info: dict[str, Any]) -> list[tuple[float, str, str]]:
    """(rate, line style, name) of a curve's knee (dotted), SLO capacity (dash-dot) and
    saturation rate (solid)."""
    marks = []
    if info.get("knee"):
        marks.append((info["knee"]["rate"], ":", "knee"))
    if info.get("slo_capacity") is not None:
        marks.append((info["slo_capacity"], "-.", "SLO capacity"))
    if info.get("saturation_rate") is not None:
        marks.append((info["saturation_rate"], "-", "saturation"))
    return marks


def _rate_markers(ax: Any, info: dict[str, Any], color: str) -> None:
    """Vertical lines at the knee, SLO capacity and saturation rate. Their values are listed
    in the legend (`_rate_legend`), not written on the axes, where close rates (an SLO
    capacity of 13 next to a saturation of 13.1) made the labels overlap."""
    for x, ls, _ in _rate_marks(info):
        ax.axvline(x, color=color, ls=ls, lw=1.2, alpha=0.7)


def _rate_legend(curves: list[tuple[dict[str, Any], list[dict[str, Any]], str]]) -> list[Any]:
    """Legend handles, one per curve and marker kind, labelled with the rate (a legend table)."""
    from matplotlib.lines import Line2D

    handles = []
    for info, _, color in curves:
        prefix = f"{info['curve']}: " if len(curves) > 1 else ""
        for x, ls, name in _rate_marks(info):
            handles.append(Line2D([], [], color=color, ls=ls, label=f"{prefix}{name} {x:.3g} req/s"))
    return handles


def sweep_latency_png(result: dict[str, Any]) -> bytes:
    """`sweep_latency_fig` as PNG bytes."""
    return _png_bytes(sweep_latency_fig(result))


def sweep_latency_fig(result: dict[str, Any]) -> Any:
    """Latency vs offered rate from a `simulator.analysis.sweep.sweep` result (PNG bytes).

    Two panels, TTFT and TPOT: p99 solid, p50 dashed, one colour per curve; saturated points
    (unstable, or achieved < 0.95 x offered) drawn as x. Vertical lines mark each curve's
    knee (dotted), SLO capacity (dash-dot) and saturation rate (solid); horizontal grey lines
    the goodput SLOs. The y axis is logarithmic when a panel spans more than 30x.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(13, 5.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharex=True)
    curves = _sweep_curves(result)
    slos = result.get("goodput_slos_ms") or {}
    for ax, key, name in ((axes[0], "ttft", "TTFT"), (axes[1], "tpot", "TPOT")):
        ys: list[float] = []
        for info, pts, color in curves:
            for pct, ls in (("p99", "-"), ("p50", "--")):
                xy = [(p["rate"], v, bool(p.get("saturated")))
                      for p in pts if _finite(v := p.get(f"{pct}_{key}_ms"))]
                if not xy:
                    continue
                ax.plot([a for a, _, _ in xy], [b for _, b, _ in xy], ls=ls, color=color, lw=1.5,
                        label=f"{info['curve']}" if pct == "p99" and len(curves) > 1 else None)
                ok = [(a, b) for a, b, s in xy if not s]
                bad = [(a, b) for a, b, s in xy if s]
                if ok:
                    ax.plot(*zip(*ok, strict=True), "o", color=color, ms=3.5)
                if bad:
                    ax.plot(*zip(*bad, strict=True), "x", color=color, ms=7, mew=1.5)
                ys += [b for _, b, _ in xy]
            _rate_markers(ax, info, color)
        if key in slos:
            ax.axhline(slos[key], color="dimgray", ls="--", lw=1)
            ax.annotate(f"{name} SLO {slos[key]:g} ms", (0.99, slos[key]), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=8, color="dimgray", ha="right")
            ys.append(slos[key])
        pos = [y for y in ys if y > 0]
        if pos and max(pos) / min(pos) > 30:
            ax.set_yscale("log")
            plain_log_axis(ax)  # "60", not matplotlib's "6x10^1" on a 70B's TPOT axis
        ax.set_xlabel(_offered_rate_label(result))
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name}: p99 (solid) and p50 (dashed)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    legend = [Line2D([], [], color="black", ls="-", label="p99"),
              Line2D([], [], color="black", ls="--", label="p50"),
              Line2D([], [], color="black", ls="", marker="x", label="saturated point"),
              *_rate_legend(curves)]
    if len(curves) > 1:
        legend = [Line2D([], [], color=c, lw=2, label=i["curve"]) for i, _, c in curves] + legend
    fig.legend(handles=legend, fontsize=8, loc="lower center", ncol=min(len(legend), 6),
               bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.suptitle(_sweep_title(result, "Latency vs offered rate"), fontsize=11)
    fig.tight_layout(rect=(0, 0.04 * (1 + (len(legend) - 1) // 6), 1, 1))
    return fig


def sweep_throughput_png(result: dict[str, Any]) -> bytes:
    """`sweep_throughput_fig` as PNG bytes."""
    return _png_bytes(sweep_throughput_fig(result))


def sweep_throughput_fig(result: dict[str, Any]) -> Any:
    """Achieved request throughput and goodput vs offered rate (PNG bytes).

    One colour per curve: achieved throughput solid with dots, request goodput dashed with
    squares (only with SLOs), the offline max throughput a dotted horizontal line; the
    black dotted y = x line is 'every offered request served'. Vertical lines as in
    `sweep_latency_png` (knee, SLO capacity, saturation rate).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(9, 7))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    curves = _sweep_curves(result)
    top = 0.0
    offline: list[Any] = []
    for info, pts, color in curves:
        xs = [p["rate"] for p in pts]
        ach = [a if _finite(a := p.get("achieved_rate")) else float("nan") for p in pts]
        ax.plot(xs, ach, "-o", color=color, ms=4, lw=1.5)
        gp = [p.get("request_goodput") for p in pts]
        if any(_finite(g) for g in gp):
            ax.plot(xs, [g if _finite(g) else float("nan") for g in gp], "--s", color=color, ms=3.5, lw=1.2)
        off = info.get("offline_max_throughput")
        if _finite(off):
            ax.axhline(off, color=color, ls=":", lw=1)
            offline.append(Line2D([], [], color=color, ls=":", label=(f"{info['curve']}: " if len(curves) > 1 else "")
                                  + f"offline max {off:.3g} req/s"))
            top = max(top, off)
        _rate_markers(ax, info, color)
        top = max([top, *xs, *[a for a in ach if _finite(a)]])
    ax.plot([0, top * 1.05], [0, top * 1.05], color="black", ls=":", lw=1)
    ax.set_xlim(0, top * 1.05)
    ax.set_ylim(0, top * 1.1)
    ax.set_xlabel(_offered_rate_label(result))
    ax.set_ylabel("requests/s")
    ax.grid(True, alpha=0.3)
    legend = [Line2D([], [], color="black", marker="o", label="achieved request throughput"),
              Line2D([], [], color="black", ls="--", marker="s", label="request goodput (meets every SLO)"),
              Line2D([], [], color="black", ls=":", label="y = x (all offered load served)"),
              *offline, *_rate_legend(curves)]
    if len(curves) > 1:
        legend = [Line2D([], [], color=c, lw=2, label=i["curve"]) for i, _, c in curves] + legend
    # below the axes, so it never hides a point (it used to cover the goodput squares)
    ax.legend(handles=legend, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    ax.set_title(_sweep_title(result, "Throughput vs offered rate"), fontsize=11)
    fig.tight_layout()
    return fig


def validation_scatter_png(points: list[dict[str, Any]], title: str = "") -> bytes:
    """Predicted vs measured, log-log, one panel per unit (ms; tokens/s; req/s): the y = x
    line, +-10 % and +-25 % bands, colour by hardware, marker by scenario (PNG bytes).

    `points` are `validate()` points (measured, predicted, metric, hardware, scenario)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from simulator.analysis.measurements import metric_unit

    units = [u for u in ("ms", "tokens/s", "req/s") if any(metric_unit(p["metric"]) == u for p in points)]
    if not units:
        units = ["ms"]
    hws = sorted({p["hardware"] for p in points})
    scs = sorted({p["scenario"] for p in points})
    colors = {h: plt.get_cmap("tab10")(i % 10) for i, h in enumerate(hws)}
    markers = dict(zip(scs, "o^sDvP*X", strict=False))
    names = {"ms": "latency metrics (ms)", "tokens/s": "token throughput metrics (tokens/s)",
             "req/s": "request throughput (req/s)"}
    fig, axes = plt.subplots(1, len(units), figsize=(6.2 * len(units), 6), squeeze=False)
    for ax, unit in zip(axes[0], units, strict=True):
        pts = [p for p in points if metric_unit(p["metric"]) == unit]
        vals = [v for p in pts for v in (p["measured"], p["predicted"])] or [1.0, 10.0]
        lo, hi = min(vals) / 1.6, max(vals) * 1.6
        x = np.logspace(np.log10(lo), np.log10(hi), 50)
        ax.fill_between(x, x / 1.25, x * 1.25, color="0.92", label="±25 %")
        ax.fill_between(x, x / 1.10, x * 1.10, color="0.80", label="±10 %")
        ax.plot(x, x, color="black", lw=1, label="y = x")
        for h in hws:
            for s in scs:
                sel = [p for p in pts if p["hardware"] == h and p["scenario"] == s]
                if sel:
                    ax.scatter([p["measured"] for p in sel], [p["predicted"] for p in sel], s=28,
                               color=colors[h], marker=markers.get(s, "o"), edgecolor="black",
                               linewidth=0.4, alpha=0.85, zorder=3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        plain_log_axis(ax, "both")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_aspect("equal")
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted ({unit})")
        ax.set_title(f"{names[unit]}: {len(pts)} rows", fontsize=10)
        ax.grid(True, which="both", alpha=0.25)
    handles = [Line2D([], [], color="black", lw=1, label="y = x"),
               Patch(color="0.80", label="±10 %"), Patch(color="0.92", label="±25 %")]
    handles += [Line2D([], [], ls="", marker="o", color=colors[h], markeredgecolor="black", label=h) for h in hws]
    handles += [Line2D([], [], ls="", marker=markers.get(s, "o"), color="0.6", markeredgecolor="black", label=s)
                for s in scs]
    axes[0][-1].legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    fig.suptitle(title or "llmsim predictions vs measurements")
    _label_points(fig, axes[0], units, points)
    return _png_bytes(fig)


def _label_points(fig: Any, axes: Any, units: list[str], points: list[dict[str, Any]]) -> None:
    """Few points (a result file): say which is which, with labels that do not overlap
    (`plotkit.place_labels`, after the layout is final). A metric measured at several load
    points is told apart by what its ids do not share (e.g. a GuideLLM benchmark "b1")."""
    from simulator.analysis.measurements import metric_unit
    from simulator.analysis.validate import point_label

    fig.canvas.draw()  # the equal aspect moves the axes: place labels on the final layout
    renderer = fig.canvas.get_renderer()
    for ax, unit in zip(axes, units, strict=True):
        pts = [p for p in points if metric_unit(p["metric"]) == unit]
        if not pts or len(pts) > 40:
            continue
        names = [point_label(p) for p in pts]
        if len(set(names)) < len(names):
            tags = _distinct_tags([str(p["id"]) for p in pts], [str(p["metric"]) for p in pts])
            names = [f"{t} {n}".strip() for t, n in zip(tags, names, strict=True)]
        place_labels(ax, [(p["measured"], p["predicted"]) for p in pts], names, renderer)


def _distinct_tags(ids: list[str], metrics: list[str]) -> list[str]:
    """The part of each id between what all ids share in front and its metric name."""
    import os

    stems = [i[: -len(m)].rstrip("-_ ") if i.endswith(m) else i for i, m in zip(ids, metrics, strict=True)]
    head = os.path.commonprefix(stems)
    head = head[: max(head.rfind("-"), head.rfind("_")) + 1]  # whole words: "b0", not "0"
    return [s[len(head):].strip("-_ ") for s in stems]
