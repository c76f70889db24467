"""What every chart module shares: the curve colours, a finite-number test, PNG rendering,
plain tick labels on log axes and label placement that keeps labels apart.
matplotlib is imported inside the functions (see `plots`)."""

from __future__ import annotations

import math
from typing import Any, TypeGuard

#: One colour per curve / hardware (matplotlib's tab10).
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
          "tab:gray", "tab:olive", "tab:cyan"]


def _png_bytes(fig: Any) -> bytes:
    """Render a figure to PNG bytes (the caller writes the file atomically) and close it."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _finite(v: Any) -> TypeGuard[float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def plain_number(v: float) -> str:
    """A tick label without scientific notation: 0.2, 60, 1,500, 20,000."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.6g}"


def plain_log_axis(ax: Any, which: str = "y") -> None:
    """Log-axis tick labels as plain numbers ("60", not "6x10^1"), on the ticks matplotlib's
    own log formatter would label (minor ticks only when the axis spans about a decade)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x: float, pos: Any = None) -> str:
            return plain_number(x) if super().__call__(x, pos) else ""

    for name in ("x", "y") if which == "both" else (which,):
        axis = ax.xaxis if name == "x" else ax.yaxis
        base = float(getattr(axis.get_transform(), "base", 10.0))  # a base-2 batch axis: 1, 2, 4, 8
        axis.set_major_formatter(Plain(base=base))
        axis.set_minor_formatter(Plain(base=base, labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def zero_based(ax: Any, values: Any, pad: float = 1.05) -> None:
    """y from 0 to just above the largest value, and 0 to 1 when every value is 0 (matplotlib
    would centre an all-zero line between -0.05 and 0.05)."""
    vals = [float(v) for v in values if _finite(v)]
    top = max(vals, default=0.0)
    ax.set_ylim(0, top * pad if top > 0 else 1)


def place_labels(ax: Any, xy: list[tuple[float, float]], texts: list[str], renderer: Any,
                 fontsize: float = 7) -> list[Any]:
    """Annotate each data point `xy[i]` with `texts[i]` where the label overlaps no label placed
    before it, no other point and stays inside the axes: the first free spot of 8 directions
    at 3 distances; if none is free, the spot with the fewest overlaps, joined to its point
    by a thin line. Points closer than 10 px share one label ("a, b"). Returns the annotations.
    The axes' limits and aspect must be final (draw the figure once before)."""
    from matplotlib.transforms import Bbox

    disp = ax.transData.transform(xy) if xy else []
    groups: list[list[int]] = []
    for i in sorted(range(len(xy)), key=lambda k: (disp[k][0], disp[k][1])):
        for g in groups:
            gx, gy = disp[g[0]]
            if abs(disp[i][0] - gx) < 10 and abs(disp[i][1] - gy) < 10:
                g.append(i)
                break
        else:
            groups.append([i])
    frame = ax.get_window_extent(renderer)
    marks = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in disp]
    placed: list[Any] = []
    out = []
    dirs = [(1, 1, "left", "bottom"), (-1, 1, "right", "bottom"), (1, -1, "left", "top"), (-1, -1, "right", "top"),
            (1, 0, "left", "center"), (-1, 0, "right", "center"), (0, 1, "center", "bottom"), (0, -1, "center", "top")]
    for g in groups:
        text = ", ".join(dict.fromkeys(texts[i] for i in g))
        best: tuple[int, tuple[float, float, str, str]] | None = None
        for dist in (6, 16, 30):
            for dx, dy, ha, va in dirs:
                spot = (dx * dist, dy * dist, ha, va)
                ann = ax.annotate(text, xy[g[0]], xytext=spot[:2], textcoords="offset points",
                                  fontsize=fontsize, ha=ha, va=va)
                bb = ann.get_window_extent(renderer)
                ann.remove()
                inside = frame.x0 <= bb.x0 and bb.x1 <= frame.x1 and frame.y0 <= bb.y0 and bb.y1 <= frame.y1
                hits = (sum(bb.overlaps(p) for p in placed) + (0 if inside else 1)
                        + sum(bb.overlaps(m) for j, m in enumerate(marks) if j not in g))
                if best is None or hits < best[0]:
                    best = (hits, spot)
                if hits == 0:
                    break
            if best is not None and best[0] == 0:
                break
        assert best is not None
        hits, (ox, oy, ha, va) = best
        # no free spot: the least crowded one, joined to its point by a thin line
        arrow = {"arrowstyle": "-", "lw": 0.5, "color": "0.4"} if hits else None
        ann = ax.annotate(text, xy[g[0]], xytext=(ox, oy), textcoords="offset points", fontsize=fontsize,
                          ha=ha, va=va, zorder=4, arrowprops=arrow)
        placed.append(ann.get_window_extent(renderer))
        out.append(ann)
    return out
