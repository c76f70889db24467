"""Multi-GPU shapes of one replica: expert parallelism, pipelined micro-batches, node crossings.

Expert parallelism (DeepSeek-V3 report, arXiv:2412.19437 sec. 3.4; DeepEP; vLLM's
`--enable-expert-parallel`). The MoE layers' experts are sharded whole over `ep` ranks of the
replica's TP group (ep | tp; each expert's FFN is TP-split over the tp / ep ranks of its
shard). Around a MoE layer the T tokens of the step are split over the ep ranks (the
attention all-reduce becomes reduce-scatter + all-gather, the same bytes), and each token's
hidden state is sent to the ranks of its k experts (dispatch) and the expert outputs come back
(combine). With the busiest rank carrying rho times the mean load, per MoE layer:

    bytes_dir = rho (T / ep) k H b_a (ep - 1) / ep       (one direction, busiest rank)
    t_a2a     = 2 (bytes_dir / (B_link eta_link) + lambda)   (dispatch + combine)

replacing the MoE layer's second all-reduce (the one after the MLP). The expert GEMMs of the
busiest rank take rho times the mean: the step waits for it. Expert weights per GPU are the
same as TP sharding's (E W_e / tp): in this placement EP's gain is whole-expert GEMMs and
fewer bytes on the link when k < ep; EP across replicas with data-parallel attention (the
memory-saving DeepSeek layout) is left out (docs/deployments.md).

Pipelined micro-batches (GPipe, Huang et al. NeurIPS'19). A step's batch is split into M
micro-batches that flow through pp stages. With stage times s_1..s_pp per micro-batch,

    t_step = sum_i s_i + (M - 1) max_i s_i        (steady state: one micro-batch per max s_i)

and for balanced stages s = t_model(x / M) / pp:  t_step = (M + pp - 1) s, bubble fraction
(pp - 1) / (M + pp - 1). M = 1 is the stages run one after another (t_model(x)). An engine that
keeps micro-batches in flight from step to step (TensorRT-LLM in-flight batching, vLLM's virtual
engines; `Parallelism.pp_interleaved`) has no fill or drain: t_step = M s = t_model(x / pp) at
M = pp.

Node crossings (`network.py`). A TP/EP group of g GPUs within gpus_per_node runs on NVLink;
a larger one is bound by the scale-out NIC (a ring's slowest hop). Of the pp - 1 pipeline
sends, ceil(tp pp / gpus_per_node) - 1 cross nodes (stages fill nodes in order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from simulator.cost.network import Link, group_link
from simulator.specs.hardware import HardwareSpec
from simulator.specs.parallelism import Parallelism


def alltoall_time_s(tokens: float, experts_per_token: int, hidden_size: int, bytes_per_element: float, ep: int,
                    link_bytes_per_s: float, link_latency_s: float = 0.0, imbalance: float = 1.0) -> float:
    """Dispatch + combine of one MoE layer over ep ranks, seconds (module docstring);
    `link_bytes_per_s` = B_link eta_link. 0 for ep = 1."""
    if ep <= 1:
        return 0.0
    per_dir = imbalance * tokens / ep * experts_per_token * hidden_size * bytes_per_element * (ep - 1) / ep
    return 2.0 * (per_dir / link_bytes_per_s + link_latency_s)


def pipeline_time_s(stage_s: Sequence[float], microbatches: int) -> float:
    """GPipe forward time of M micro-batches over stages of times s_i: sum s + (M - 1) max s."""
    return float(sum(stage_s)) + (microbatches - 1) * float(max(stage_s))


def bubble_fraction(pp: int, microbatches: int) -> float:
    """Idle share of each stage over a step with balanced stages: (pp - 1) / (M + pp - 1)."""
    return (pp - 1) / (microbatches + pp - 1)


def tp_link(hw: HardwareSpec, par: Parallelism) -> Link:
    """The link the TP all-reduce (and the EP all-to-all inside the TP group) runs on."""
    return group_link(hw, par.tp)


def pp_sends(hw: HardwareSpec, par: Parallelism) -> tuple[int, int]:
    """(sends within a node, sends across nodes) of the pp - 1 stage boundaries."""
    total = par.pp - 1
    crossing = min(total, max(0, math.ceil(par.tp * par.pp / hw.gpus_per_node) - 1))
    return total - crossing, crossing


__all__ = [
    "alltoall_time_s",
    "bubble_fraction",
    "pipeline_time_s",
    "pipelined",
    "pp_sends",
    "tp_link",
]


def pipelined(step_time: Callable[..., Any], step_times: Callable[..., Any], pp: int,
              microbatches: int, drain: bool = True) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Step-time functions of a replica whose step is split into M micro-batches over pp
    balanced stages: (M + pp - 1) / pp x t_model(x / M), x the batch statistics (module
    docstring); the per-step constant terms are paid by each micro-batch. `drain=False`: the
    engine keeps micro-batches in flight across steps (no fill or drain): M / pp x t_model(x / M),
    t_model(x / pp) at M = pp (each stage busy with one micro-batch at a time)."""
    M = float(microbatches)
    f = (microbatches + pp - 1) / pp if drain else microbatches / pp

    def one(T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0, Aw: Any = None, Rw: Any = None,
            Pc: Any = 0.0) -> Any:
        Aw = Ad + Ap if Aw is None else Aw
        Rw = R if Rw is None else Rw
        return f * step_time(T / M, S / M, Ad / M, Ap / M, R / M, Aw / M, Rw / M, Pc / M)

    def many(T: Any, S: Any, Ad: Any = 0.0, Ap: Any = 0.0, R: Any = 0.0, Aw: Any = None, Rw: Any = None,
             Pc: Any = 0.0) -> Any:
        Aw = np.asarray(Ad) + np.asarray(Ap) if Aw is None else Aw
        Rw = R if Rw is None else Rw
        return f * step_times(np.asarray(T) / M, np.asarray(S) / M, np.asarray(Ad) / M, np.asarray(Ap) / M,
                              np.asarray(R) / M, np.asarray(Aw) / M, np.asarray(Rw) / M, np.asarray(Pc) / M)

    return one, many
