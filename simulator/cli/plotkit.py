"""What every chart module shares: the curve colours, a finite-number test and PNG rendering.
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
