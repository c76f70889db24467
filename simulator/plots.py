"""Charts. matplotlib is imported inside each function and draws on an Agg canvas (no
pyplot state), so importing this module has no side effects and costs nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .roofline import CostModel, decode_step, op_points, prefill_step


def roofline_chart(cost: CostModel, batch_size: int, input_len: int, path: str | Path) -> Path:
    """Write a log-log roofline chart of one prefill step (`batch_size` prompts of
    `input_len` tokens) and one decode step (`batch_size` sequences, `input_len` cached
    tokens each) to `path` (format from the suffix, e.g. .png). Returns the path.

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
    out = Path(path)
    fig.savefig(out, dpi=120)
    return out


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


def _png_bytes(fig: Any) -> bytes:
    """Render a figure to PNG bytes (the caller writes the file atomically) and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def timeline_png(timeline: Any, title: str = "") -> bytes:
    """Batch size, KV-cache utilisation and queue length over simulated time (PNG bytes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    for rep, g in timeline.groupby("replica"):
        lbl = f"replica {rep}"
        axes[0].step(g["time_s"], g["batch_size"], where="post", lw=0.8, label=lbl)
        axes[1].step(g["time_s"], 100 * g["kv_utilization"], where="post", lw=0.8, label=lbl)
        axes[2].step(g["time_s"], g["queue_length"], where="post", lw=0.8, label=lbl)
    axes[0].set_ylabel("batch size (seqs)")
    axes[1].set_ylabel("KV cache used (%)")
    axes[2].set_ylabel("waiting requests")
    axes[2].set_xlabel("simulated time (s)")
    if timeline["replica"].nunique() > 1:
        axes[0].legend(fontsize=7, ncol=4)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(title or "engine timeline")
    return _png_bytes(fig)
