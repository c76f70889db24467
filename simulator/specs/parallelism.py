"""How one replica is laid out over GPUs: `Parallelism` (tensor, pipeline and expert degrees)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.specs.checks import SpecError, check_int, check_number, show

# --------------------------------------------------------------------------- replica setup

#: the most pipeline micro-batches per pipeline stage (`Parallelism.pp_microbatches` <= this x pp)
MICROBATCHES_PER_STAGE = 32


@dataclass(frozen=True)
class Parallelism:
    """Tensor- and pipeline-parallel degrees of one replica (GPUs per replica = tp * pp).

    `ep`: expert-parallel degree of the MoE layers, a divisor of tp (experts sharded whole over
    ep ranks of the TP group; `parallel.py`); `expert_imbalance` (rho >= 1): tokens of the
    busiest EP rank over the mean (1: uniform routing); `pp_microbatches` (M): micro-batches a
    step is split into through the pipeline (1: stages one after another).

    `dp_attention` (d): data-parallel attention inside the replica (DeepSeek's serving layout;
    SGLang `--enable-dp-attention --dp d`, TensorRT-LLM `enable_attention_dp`, vLLM
    `--data-parallel-size d --enable-expert-parallel` with the replica's tp * d GPUs written as tp
    here). The tp GPUs form d attention groups of tp / d GPUs; each group runs attention (and the
    dense layers, router, embedding and LM head) on its own share of the sequences with the
    weights sharded over its tp / d GPUs only, and keeps its sequences' KV cache alone; the MoE
    layers run over all tp GPUs (ep = tp: wide expert parallelism, an all-to-all dispatch and
    combine; ep < tp: experts sharded as under TP, tokens gathered and reduce-scattered).

    `pp_interleaved`: with pp > 1 the engine keeps pp micro-batches in flight across steps (no
    pipeline fill or drain; `parallel.pipelined`): a step costs the model's time on 1/pp of the
    batch, as TensorRT-LLM's in-flight batching and vLLM's virtual engines run it."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    pp_microbatches: int = 1
    expert_imbalance: float = 1.0
    dp_attention: int = 1
    pp_interleaved: bool = False

    def __post_init__(self) -> None:
        check_int("tp", self.tp)
        check_int("pp", self.pp)
        check_int("ep", self.ep)
        # a step split into more than MICROBATCHES_PER_STAGE x pp micro-batches gains nothing (the
        # bubble (pp - 1) / (M + pp - 1) is already under 1/33 of it; GPipe runs M ~ 4 pp) and
        # pays the per-step overheads M times: 1e9 gave a mean TTFT of 87 days
        check_int("pp_microbatches", self.pp_microbatches, maximum=MICROBATCHES_PER_STAGE * self.pp,
                  note=f"({MICROBATCHES_PER_STAGE} per pipeline stage, pp = {self.pp})")
        check_int("dp_attention", self.dp_attention)
        if self.tp % self.ep:
            raise SpecError(f"ep: {self.ep} must divide tp ({self.tp}): experts are sharded over ranks of the TP group")
        if self.tp % self.dp_attention:
            raise SpecError(f"dp_attention: {self.dp_attention} must divide tp ({self.tp}): the replica's GPUs "
                            "split into dp_attention groups of tp / dp_attention")
        check_number("expert_imbalance", self.expert_imbalance, 1.0, float(self.ep))
        if not isinstance(self.pp_interleaved, bool):
            raise SpecError(f"pp_interleaved: {show(self.pp_interleaved)} must be true or false")

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp

    @property
    def attention_tp(self) -> int:
        """GPUs one attention group shards its heads over: tp / dp_attention."""
        return self.tp // self.dp_attention
