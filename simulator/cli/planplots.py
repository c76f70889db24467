"""Charts of `llmsim plan` and `llmsim whatif` (kv-dtype, speculative, hardware). matplotlib is
imported inside each function and draws on an Agg canvas, as in `plots` (which re-exports
these)."""

from __future__ import annotations

from typing import Any

from simulator.cli.plotkit import COLORS, _finite, _png_bytes, plain_log_axis


def plan_png(result: dict[str, Any]) -> bytes:
    """`plan_fig` as PNG bytes."""
    return _png_bytes(plan_fig(result))


def plan_fig(result: dict[str, Any]) -> Any:
    """Cost per hour vs GPUs needed, one point per feasible candidate of a
    `simulator.analysis.plan.plan` result (cheapest marked with a star). Points carry their rank only;
    the candidates are described in a legend table beside the axes, so long labels of nearby
    candidates never overlap (coincident candidates share one rank label, "2,3")."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(12, 6))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cands = [c for c in result.get("candidates", []) if _finite(c.get("cost_per_hour_usd"))]
    colors = COLORS
    hws = list(dict.fromkeys(c["hardware"] for c in cands))
    ranks: dict[tuple[float, float], list[str]] = {}  # coincident candidates: one label
    handles = []
    for n, c in enumerate(cands, 1):
        color = colors[hws.index(c["hardware"]) % len(colors)]
        best = n == 1
        xy = (c["gpus"], c["cost_per_hour_usd"])
        ax.scatter([xy[0]], [xy[1]], s=160 if best else 60, marker="*" if best else "o",
                   color=color, edgecolor="black", zorder=4 if best else 3)
        ranks.setdefault(xy, []).append(str(n))
        handles.append(Line2D([], [], ls="", marker="*" if best else "o", color=color, markeredgecolor="black",
                              label=f"{n}. {c['hardware']} tp{c['tp']}" + (f" ep{c['ep']}" if c.get("ep", 1) != 1 else "")
                              + (f" pp{c['pp']}" if c.get("pp", 1) != 1 else "")
                              + f" w:{c['weight_dtype']} kv:{c['kv_dtype']}: {c['replicas']} x "
                              f"{c['slo_capacity']:.3g} req/s, ${c['cost_per_hour_usd']:.3g}/h"))
    labels = [ax.annotate(",".join(names), xy, xytext=(6, 4), textcoords="offset points", fontsize=8)
              for xy, names in ranks.items()]
    if cands:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  title="rank. candidate (star: cheapest)", title_fontsize=8, frameon=False)
        ax.set_xlim(0, max(c["gpus"] for c in cands) * 1.25 + 1)
        ax.set_ylim(0, max(c["cost_per_hour_usd"] for c in cands) * 1.2)
    else:
        ax.text(0.5, 0.5, "no feasible candidate", transform=ax.transAxes, ha="center")
    ax.set_xlabel("GPUs needed (replicas x tp x pp)")
    ax.set_ylabel("cost ($ per hour)")
    ax.grid(True, alpha=0.3)
    slos = " ".join(f"{k}≤{v:g} ms" for k, v in (result.get("goodput_slos_ms") or {}).items())
    ax.set_title(f"Plan: {result.get('model')} at {result.get('rate'):g} req/s of {result.get('workload')}\n"
                 f"SLO {slos} for ≥{result.get('slo_target', 0.99):g} of requests, "
                 f"headroom {result.get('headroom', 0):.0%}", fontsize=10)
    fig.tight_layout()
    _spread_labels(fig, labels)
    return fig


def _spread_labels(fig: Any, labels: list[Any], step_points: float = 9.0, tries: int = 40) -> None:
    """Move each annotation up by `step_points` until it overlaps no label placed before it."""
    if not labels:
        return
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    for t in labels:
        x, y = t.xyann
        for _ in range(tries):
            box = t.get_window_extent(renderer)
            if not any(box.overlaps(b) for b in placed):
                break
            y += step_points
            t.xyann = (x, y)
        placed.append(t.get_window_extent(renderer))


def kv_dtype_png(result: dict[str, Any]) -> bytes:
    """KV-cache quantization what-if: grouped bars of each KV format's gain over the first
    (KV capacity, concurrent sequences, batch-1 decode speed, decode throughput at the
    capacity-limited batch, saturation rate, SLO capacity), as ratios (PNG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics = [("kv_capacity_tokens", "KV capacity\n(tokens)", False),
               ("max_concurrent_sequences", "concurrent\nsequences", False),
               ("tpot_ms_batch1", "batch-1 speed\n(1 / TPOT)", True),
               ("decode_tokens_per_s_capacity_batch", "decode tok/s at\ncapacity batch", False),
               ("saturation_rate", "saturation\nrate", False),
               ("slo_capacity_rate", "SLO\ncapacity", False)]
    rows = result.get("values", [])
    metrics = [m for m in metrics if any(_finite((r.get("ratios") or {}).get(m[0])) for r in rows)]
    fig = Figure(figsize=(10, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    n = max(len(rows), 1)
    width = 0.8 / n
    colors = ["tab:gray", "tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:red"]
    for i, r in enumerate(rows):
        vals = []
        for key, _, inverse in metrics:
            v = (r.get("ratios") or {}).get(key)
            vals.append((1.0 / v if inverse else v) if _finite(v) and v > 0 else 0.0)
        xs = [j + (i - (n - 1) / 2) * width for j in range(len(metrics))]
        bars = ax.bar(xs, vals, width, color=colors[i % len(colors)], label=f"KV {r['kv_dtype']}",
                      edgecolor="black", lw=0.5)
        for b, v in zip(bars, vals, strict=True):
            if v > 0:
                ax.annotate(f"{v:.2f}x", (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                            textcoords="offset points", ha="center", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(metrics)))
    ax.set_xticklabels([m[1] for m in metrics], fontsize=9)
    ax.set_ylabel(f"ratio to KV {result.get('reference')}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title(f"KV-cache format what-if: {result.get('model')} on {result.get('hardware')} tp={result.get('tp')}, "
                 f"{result.get('workload')} (sequences of {result.get('seq_len')} tokens)", fontsize=10)
    fig.tight_layout()
    return _png_bytes(fig)


def _concurrency_axis(ax: Any, cs: list[int]) -> None:
    """A log-2 x axis labelled with the concurrencies themselves."""
    ax.set_xscale("log", base=2)
    if cs:
        ax.set_xticks(cs)
        ax.set_xticklabels([str(c) for c in cs])
        ax.minorticks_off()
    ax.set_xlabel("concurrency (closed-loop clients)")


def speculative_png(result: dict[str, Any]) -> bytes:
    """Speculative decoding what-if: per-user speed and total output throughput against
    concurrency, plain and speculative (left), and their speedups with the crossover (where
    total throughput falls below plain) marked (right). PNG bytes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = result.get("rows", [])
    cs = [r["concurrency"] for r in rows]
    fig = Figure(figsize=(13, 5))
    FigureCanvasAgg(fig)
    ax, ax2 = fig.subplots(1, 2)
    for key, label, style in (("per_user_tokens_per_s", "per-user tok/s", "-"), ("output_throughput", "total tok/s", "--")):
        for name, color in (("plain", "tab:blue"), ("speculative", "tab:orange")):
            ys = [r.get(f"{name}_{key}") for r in rows]
            pts = [(c, y) for c, y in zip(cs, ys, strict=True) if _finite(y)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", color=color, lw=2,
                        label=f"{label}, {name}")
    ax.set_yscale("log")
    plain_log_axis(ax, "y")  # 60, not 6x10^1
    _concurrency_axis(ax, cs)
    ax.set_ylabel("output tokens/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    for key, label, color in (("per_user_speedup", "per-user speed", "tab:green"),
                              ("throughput_speedup", "total throughput", "tab:red")):
        pts = [(c, r.get(key)) for c, r in zip(cs, rows, strict=True) if _finite(r.get(key))]
        if pts:
            ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=color, lw=2, label=f"speedup: {label}")
    ax2.axhline(1.0, color="black", lw=1)
    cross = result.get("crossover_concurrency")
    if cross is not None:
        ax2.axvline(cross, color="tab:red", ls=":", lw=1.5)
        ax2.annotate(f"crossover: concurrency {cross}", (cross, 1.0), xytext=(6, 12), textcoords="offset points",
                     fontsize=9, color="tab:red")
    _concurrency_axis(ax2, cs)
    ax2.set_ylabel("speculative / plain")
    ax2.grid(True, which="both", alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle(f"Speculative decoding: {result.get('model')} on {result.get('hardware')} tp={result.get('tp')}, "
                 f"{result.get('method')} k={result.get('num_speculative_tokens')}, "
                 f"{result.get('mean_acceptance_length', 0):.2f} tokens/verify step; {result.get('workload')}",
                 fontsize=10)
    fig.tight_layout()
    return _png_bytes(fig)


def hardware_png(result: dict[str, Any]) -> bytes:
    """Hardware what-if: bars per accelerator of p99 TTFT and TPOT at the base rate,
    saturation rate and SLO capacity, $/hour and $ per million output tokens (PNG bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [r for r in result.get("hardware", []) if r.get("fits")]
    names = [r["hardware"] for r in rows]
    panels = [
        ("latency at the base rate (ms)", [("p99_ttft_ms", "p99 TTFT"), ("p99_tpot_ms", "p99 TPOT")], True),
        ("capacity (requests/s)", [("saturation_rate", "saturation rate"), ("slo_capacity_rate", "SLO capacity")], False),
        ("cost ($ per hour)", [("cost_per_hour_usd", "$/hour")], False),
        ("$ per million output tokens", [("cost_per_million_output_tokens_usd", "at the base rate"),
                                         ("cost_per_million_output_tokens_at_slo_capacity_usd", "at SLO capacity")], False),
    ]
    fig = Figure(figsize=(12, 7.5))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2).ravel()
    colors = ["tab:blue", "tab:orange", "tab:green"]
    for ax, (title, series, logy) in zip(axes, panels, strict=True):
        k = len(series)
        width = 0.8 / k
        for i, (key, label) in enumerate(series):
            vals = [r.get(key) if _finite(r.get(key)) else 0.0 for r in rows]
            xs = [j + (i - (k - 1) / 2) * width for j in range(len(rows))]
            bars = ax.bar(xs, vals, width, label=label, color=colors[i % 3], edgecolor="black", lw=0.5)
            for b, v in zip(bars, vals, strict=True):
                if v > 0:
                    ax.annotate(f"{v:.3g}", (b.get_x() + b.get_width() / 2, v), xytext=(0, 2),
                                textcoords="offset points", ha="center", fontsize=7)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(names, fontsize=8)
        pos = [r.get(key) for r in rows for key, _ in series if _finite(r.get(key)) and r.get(key) > 0]
        if logy and pos and max(pos) / min(pos) > 30:
            ax.set_yscale("log")
            plain_log_axis(ax)
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        if k > 1:
            ax.legend(fontsize=7)
    rate = result.get("rate")
    missing = [r["hardware"] for r in result.get("hardware", []) if not r.get("fits")]
    fig.suptitle(f"Hardware what-if: {result.get('model')} tp={result.get('tp')}, {result.get('workload')}"
                 + (f" at {rate:g} req/s" if _finite(rate) else "")
                 + (f"; does not fit: {', '.join(missing)}" if missing else ""), fontsize=11)
    fig.tight_layout()
    return _png_bytes(fig)
