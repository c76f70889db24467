"""How one replica is laid out over GPUs: `Parallelism` (tensor, pipeline and expert degrees)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.specs.checks import SpecError, check_int, check_number

# --------------------------------------------------------------------------- replica setup


@dataclass(frozen=True)
class Parallelism:
    """Tensor- and pipeline-parallel degrees of one replica (GPUs per replica = tp * pp).

    `ep`: expert-parallel degree of the MoE layers, a divisor of tp (experts sharded whole over
    ep ranks of the TP group; `parallel.py`); `expert_imbalance` (rho >= 1): tokens of the
    busiest EP rank over the mean (1: uniform routing); `pp_microbatches` (M): micro-batches a
    step is split into through the pipeline (1: stages one after another)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    pp_microbatches: int = 1
    expert_imbalance: float = 1.0

    def __post_init__(self) -> None:
        check_int("tp", self.tp)
        check_int("pp", self.pp)
        check_int("ep", self.ep)
        check_int("pp_microbatches", self.pp_microbatches)
        if self.tp % self.ep:
            raise SpecError(f"ep: {self.ep} must divide tp ({self.tp}): experts are sharded over ranks of the TP group")
        check_number("expert_imbalance", self.expert_imbalance, 1.0, float(self.ep))

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp
