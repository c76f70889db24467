"""Fitting a few parameters to measurements: the objective, the bounded transforms, Nelder-Mead.

Objective over rows i with weights w_i (`calibrate` explains the choice):

    msle   = sum_i w_i ln(pred_i / meas_i)^2 / sum_i w_i
    median = the weighted median of ln(pred_i / meas_i)^2   (robust to a few bad rows)

Parameters are optimised in an unbounded variable x: efficiencies as 0.02 + 0.98 sigmoid(x)
(in (0.02, 1)), times and token counts as scale * exp(x) (positive). Minimised by Nelder-Mead
(Nelder & Mead, Comput. J. 1965; numpy, no scipy), restarted once and from a few starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from simulator.specs.checks import SpecError

OBJECTIVES = ("msle", "median")


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                max_iter: int = 2000, xtol: float = 1e-7, ftol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Minimise f from x0 (standard Nelder-Mead: reflection 1, expansion 2, contraction 1/2)."""
    n = len(x0)
    simplex = [np.asarray(x0, dtype=float)]
    for i in range(n):
        x = simplex[0].copy()
        x[i] += step
        simplex.append(x)
    vals = [f(x) for x in simplex]
    for _ in range(max_iter):
        order = np.argsort(vals)
        simplex = [simplex[i] for i in order]
        vals = [vals[i] for i in order]
        if (max(np.max(np.abs(s - simplex[0])) for s in simplex[1:]) < xtol
                and abs(vals[-1] - vals[0]) < ftol):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        xr = centroid + (centroid - simplex[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(xe)
            simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            simplex[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (simplex[-1] - centroid) if fr >= vals[-1] else centroid + 0.5 * (xr - centroid)
            fc = f(xc)
            if fc < min(fr, vals[-1]):
                simplex[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    simplex[i] = simplex[0] + 0.5 * (simplex[i] - simplex[0])
                    vals[i] = f(simplex[i])
    i = int(np.argmin(vals))
    return simplex[i], float(vals[i])


#: transforms from an unbounded optimiser variable to a parameter value
def _to_value(name: str, x: float) -> float:
    if name.endswith("efficiency"):
        return 0.02 + 0.98 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))
    scale = {"gemm_ramp_tokens": 64.0, "kernel_overhead_s": 5e-6, "step_overhead_s": 1e-3,
             "link_latency_s": 1e-5}[name]
    return scale * math.exp(max(min(x, 30.0), -30.0))


def _to_x(name: str, v: float) -> float:
    if name.endswith("efficiency"):
        q = min(max((v - 0.02) / 0.98, 1e-6), 1 - 1e-6)
        return math.log(q / (1 - q))
    scale = {"gemm_ramp_tokens": 64.0, "kernel_overhead_s": 5e-6, "step_overhead_s": 1e-3,
             "link_latency_s": 1e-5}[name]
    return math.log(max(v, scale * 1e-6) / scale)


def _loss(pred: np.ndarray, meas: np.ndarray, weights: np.ndarray, objective: str) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        e = np.log(pred / meas) ** 2
    e = np.where(np.isfinite(e), e, 1e6)
    if objective == "median":
        order = np.argsort(e)
        cw = np.cumsum(weights[order])
        return float(e[order][np.searchsorted(cw, cw[-1] / 2.0)])
    return float(np.sum(weights * e) / np.sum(weights))


def fit(predict: Callable[[dict[str, float]], np.ndarray], measured: np.ndarray,
        start: Mapping[str, float], names: Sequence[str], *, weights: np.ndarray | None = None,
        objective: str = "msle", tie_attention: bool = True,
        starts: Sequence[Mapping[str, float]] = (),
        adjust: Callable[[dict[str, float]], None] | None = None) -> tuple[dict[str, float], float]:
    """Minimise the objective over parameters `names` (others fixed at `start`); `adjust`
    may enforce a physical constraint on every trial parameter set (in place)."""
    if objective not in OBJECTIVES:
        raise SpecError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    w = np.ones(len(measured)) if weights is None else np.asarray(weights, dtype=float)

    def params(x: np.ndarray) -> dict[str, float]:
        p = dict(start)
        for n, xi in zip(names, x, strict=True):
            p[n] = _to_value(n, float(xi))
        if tie_attention and "compute_efficiency" in names:
            p["attention_efficiency"] = p["compute_efficiency"]
        if adjust is not None:
            adjust(p)
        return p

    def f(x: np.ndarray) -> float:
        return _loss(predict(params(x)), measured, w, objective)

    best_x, best_f = np.zeros(len(names)), math.inf
    inits = [dict(start), *[{**start, **s} for s in starts]]
    for init in inits:
        x0 = np.array([_to_x(n, init[n]) for n in names])
        x, fx = nelder_mead(f, x0, step=0.7)
        x, fx = nelder_mead(f, x, step=0.2)  # restart: Nelder-Mead can stall on a ridge
        if fx < best_f:
            best_x, best_f = x, fx
    return params(best_x), best_f


def levenberg_marquardt(residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, *, max_iter: int = 60,
                        step: float = 1e-4, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """Minimise sum(residuals(x)^2) from x0 (Levenberg 1944, Marquardt 1963): Gauss-Newton steps
    on a forward-difference Jacobian, damped by lambda (x10 on a failed step, /3 on a kept one).
    For fits of tens of parameters where Nelder-Mead crawls; numpy only. Returns (x, cost)."""
    x = np.asarray(x0, dtype=float).copy()
    r = residuals(x)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(max_iter):
        J = np.empty((r.size, x.size))
        for j in range(x.size):
            xj = x.copy()
            xj[j] += step
            J[:, j] = (residuals(xj) - r) / step
        g = J.T @ r
        A = J.T @ J
        improved = False
        for _ in range(12):
            try:
                dx = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            except np.linalg.LinAlgError:
                lam *= 10.0
                continue
            r_new = residuals(x + dx)
            c_new = float(r_new @ r_new)
            if np.isfinite(c_new) and c_new < cost:
                done = cost - c_new < tol * max(cost, 1e-30)
                x, r, cost = x + dx, r_new, c_new
                lam = max(lam / 3.0, 1e-9)
                improved = True
                break
            lam *= 10.0
        if not improved or done:
            break
    return x, cost


def _source_weights(sources: Sequence[str], balance: bool) -> np.ndarray:
    if not balance:
        return np.ones(len(sources))
    counts: dict[str, int] = {}
    for s in sources:
        counts[s] = counts.get(s, 0) + 1
    return np.array([1.0 / counts[s] for s in sources])


__all__ = ["OBJECTIVES", "fit", "levenberg_marquardt", "nelder_mead"]
