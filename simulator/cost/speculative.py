"""The draft's price in one engine step of speculative decoding, by the same roofline, and what
the draft takes of the KV budget.

One engine step of vLLM V1 with speculative decoding (vllm-project/vllm@00024d3:
vllm/v1/core/sched/scheduler.py; the drafter runs inside the same model-runner step, after the
target's forward and sampling) is, for a decoding sequence with p cached tokens and k drafts:

1. the target's **verify** forward over q = 1 + k tokens (the last emitted token and the k
   drafts, causal on the p cached ones; logits at all q positions). The engine prices it as a
   multi-token decode: T += q, S += q (LM-head rows), Ad += q (p + q/2), R += p + q (the replica
   builds those statistics; `roofline.CostModel.step_time` prices them);
2. the draft's **catch-up** pass over every token the target processed in the step (vLLM's
   padded drafter batch: all q tokens of a verified sequence, rejected ones included, and every
   prefill chunk, so that the draft's own KV covers the prompt): priced by the draft network's
   `CostModel` with the target's statistics, LM-head rows one per proposing sequence;
3. k - 1 further **draft passes**, one token per proposing sequence at growing context (pass j
   sees c_i + j - 2 cached tokens, c_i the sequence's context after the verify).

`Drafter.step_time` is 2 + 3. The draft network per method:

* `draft_model`: the catalog model named by `model` (its own weights, KV, TP);
* `eagle` / `eagle3`: an EAGLE head, one decoder layer of the target's attention and dense-MLP
  shape (vLLM `llama_eagle3.py`, vllm-project/vllm@00bd1493b3e82d6c13c68ee8a0e1c5a96707e190:
  vllm/model_executor/models/llama_eagle3.py), full attention, with an fc fusing the target's
  hidden states (EAGLE: 2H -> H every pass; EAGLE-3: 3H -> H over the catch-up tokens, and a QKV
  projection fed 2H wide every pass) and an LM head of `draft_vocab_size` rows (EAGLE-3: 32000
  by default; EAGLE: the target's vocabulary, its LM head shared);
* `mtp`: the target's multi-token-prediction module, one target decoder layer (MoE and MLA as
  the target's) with an eh_proj (2H -> H) every pass and the target's shared LM head;
* `ngram`: prompt lookup on the CPU: no GPU work is priced.

Every draft pass pays its kernel launches (`kernel_overhead_s` per op) but not the engine's
per-step overhead (`step_overhead_s`: one scheduler iteration, sampling, host sync), which the
target's step already pays once. Memory (vLLM allocates the draft's layers in the same block
pool): the draft's weights come out of the KV budget and every KV token holds the draft's KV
too: tokens = (budget - draft weights) / (target + draft KV bytes per token), per GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from simulator.cost.memory import MemoryPlan, kv_bytes_per_gpu_token, weights_bytes_per_gpu
from simulator.cost.roofline import CostModel, Rates
from simulator.specs.checks import SpecError
from simulator.specs.dtypes import DTYPE_BYTES, DTypes
from simulator.specs.model import ModelSpec
from simulator.specs.parallelism import Parallelism
from simulator.specs.speculative import EAGLE3_DRAFT_VOCAB, SpeculativeConfig


@dataclass(frozen=True)
class ExtraGemm:
    """A GEMM the draft network has beyond a decoder layer (an EAGLE fc, MTP's eh_proj, EAGLE-3's
    wider QKV input): time over t rows = max(a (t + T0), m0 + m1 t) + launch, the roofline GEMM
    of `roofline.gemm_time_s` with the draft's rates folded in; `first_pass_only`: it runs over
    the catch-up tokens only."""

    name: str
    n_in: float
    n_out: float
    first_pass_only: bool
    comp_per_row: float
    ramp_s: float
    mem_s: float
    mem_per_row: float
    launch_s: float

    def time(self, rows: float) -> float:
        if rows <= 0:
            return 0.0
        c = self.comp_per_row * rows + self.ramp_s
        m = self.mem_s + self.mem_per_row * rows
        return (c if c > m else m) + self.launch_s


def head_spec(target: ModelSpec, method: str, draft_vocab: int | None) -> ModelSpec:
    """The draft head of an EAGLE or MTP method as a one-layer `ModelSpec` (module docstring):
    the roofline prices it like any model."""
    changes: dict[str, Any] = dict(
        id=f"{target.id}:{method}-head", name=f"{method} head of {target.id}", aliases=(), hf_id="",
        num_layers=1, sliding_window=None, tie_word_embeddings=False, sources=(), notes="")
    if method in ("eagle", "eagle3"):
        # a Llama decoder layer: full attention, dense gated MLP of the target's intermediate size
        changes.update(moe=None, mla=None, parallel_attention=False, mlp="gated",
                       vocab_size=draft_vocab or (EAGLE3_DRAFT_VOCAB if method == "eagle3" else target.vocab_size),
                       # a dense head: one format for all its weights (the Drafter picks it)
                       quantized_weights="all", unquantized_weight_dtype=None,
                       default_weight_dtype=target.unquantized_dtype(target.default_weight_dtype))
        if target.mla is not None and target.head_dim is None:
            changes["head_dim"] = target.hidden_size // target.num_heads
    elif target.moe is not None:  # mtp: one MoE layer when the target's layers are MoE
        changes["moe"] = dataclasses.replace(target.moe, first_dense_layers=0)
    return dataclasses.replace(target, **changes)


def _head_params(head: ModelSpec, method: str, extras: list[ExtraGemm], tp: int) -> float:
    """Parameters per GPU of an EAGLE / MTP head: its layer (sharded by tp), its own LM head
    (EAGLE-3 only: the others share the target's) and the fc GEMMs (replicated)."""
    layer = head.attention_params_per_layer + head.norm_params_per_layer
    if head.moe is None:
        layer += head.dense_mlp_params
    else:
        layer += head.moe.num_experts * head.expert_params + head.shared_expert_params + head.router_params
    own_head = head.vocab_size * head.hidden_size if method == "eagle3" else 0
    fc = sum(g.n_in * g.n_out for g in extras if g.name != "qkv_wide")
    wide = sum(g.n_in * g.n_out for g in extras if g.name == "qkv_wide")  # QKV-parallel: sharded
    return (layer + own_head + wide) / tp + fc


class Drafter:
    """The draft network of one replica: its `CostModel` (engine step overhead removed), the
    extra GEMMs of its method, and its memory per GPU."""

    def __init__(self, target: CostModel, config: SpeculativeConfig, draft_model: ModelSpec | None = None) -> None:
        self.method = config.method
        self.k = config.k
        tp = config.draft_tensor_parallel_size or target.par.tp
        if tp not in (1, target.par.tp):
            raise SpecError(f"speculative_config.draft_tensor_parallel_size: {tp} must be 1 or the target's tp "
                            f"({target.par.tp}), as vLLM allows")
        self.tp = tp
        self.extras: list[ExtraGemm] = []
        self.cost: CostModel | None = None
        self.window: int | None = None
        self.weights_bytes_per_gpu = 0.0
        self.kv_bytes_per_gpu_token = 0.0
        if self.method == "ngram":
            return
        # the target's (profile-adjusted) hardware, without the per-step engine overhead
        hw = target.hardware.with_efficiency(step_overhead_s=0.0)
        kv = config.draft_kv_dtype or target.dtypes.kv
        par = Parallelism(tp)
        if self.method == "draft_model":
            if draft_model is None:
                raise SpecError("speculative_config.model: method draft_model needs the draft model's spec")
            if draft_model.vocab_size != target.model.vocab_size:
                raise SpecError(f"speculative_config.model: {draft_model.id} has a vocabulary of "
                                f"{draft_model.vocab_size} tokens, the target {target.model.id} "
                                f"{target.model.vocab_size}; vLLM refuses a draft model with another vocabulary")
            net = draft_model
            dtypes = DTypes(config.draft_weight_dtype or draft_model.default_weight_dtype, target.dtypes.activation, kv)
        else:
            net = head_spec(target.model, self.method, config.draft_vocab_size)
            # a dense head (EAGLE) ships in the format the target's checkpoint leaves unquantised
            # (gpt-oss's EAGLE3 heads are bf16 beside its MXFP4 experts); an MoE head (MTP) in
            # the target's weight format
            own = target.dtypes.weight if net.moe is not None else target.model.unquantized_dtype(target.dtypes.weight)
            dtypes = DTypes(config.draft_weight_dtype or own, target.dtypes.activation, kv)
        if net.num_heads % tp:
            raise SpecError(f"speculative_config.draft_tensor_parallel_size: {tp} does not divide the draft's "
                            f"{net.num_heads} attention heads ({net.id})")
        self.cost = CostModel(net, hw, par, dtypes, link_dtype=target.link_dtype)
        self.window = net.sliding_window.window if net.sliding_window else None
        self.extras = self._extra_gemms(net, hw, dtypes, tp)
        self.kv_bytes_per_gpu_token = kv_bytes_per_gpu_token(net, par, kv)
        if self.method == "draft_model":
            self.weights_bytes_per_gpu = weights_bytes_per_gpu(net, par, dtypes)
        else:
            self.weights_bytes_per_gpu = _head_params(net, self.method, self.extras, tp) * DTYPE_BYTES[dtypes.weight]

    def _extra_gemms(self, net: ModelSpec, hw: Any, dtypes: DTypes, tp: int) -> list[ExtraGemm]:
        H = float(net.hidden_size)
        shapes: list[tuple[str, float, float, bool]]
        if self.method == "eagle":
            shapes = [("fc", 2 * H, H, False)]
        elif self.method == "eagle3":
            qkv = (net.num_heads + 2 * net.num_kv_heads) * net.d_head / tp
            shapes = [("fc", 3 * H, H, True), ("qkv_wide", H, qkv, False)]
        elif self.method == "mtp":
            shapes = [("eh_proj", 2 * H, H, False)]
        else:
            return []
        assert self.cost is not None
        rates = Rates.of(hw, self.cost.gemm_dtype, self.cost.attention_dtype, dtypes.kv, hw.efficiency, hw.link_latency_s,
                         vector_dtype=hw.gemm_dtype(dtypes.activation))
        b = DTYPE_BYTES[dtypes.weight]
        out = []
        for name, n_in, n_out, first in shapes:
            f = 2.0 * n_in * n_out
            out.append(ExtraGemm(name, float(n_in), float(n_out), first, f / rates.gemm_flops_per_s,
                                 f * rates.ramp_tokens / rates.gemm_flops_per_s,
                                 n_in * n_out * b / rates.hbm_bytes_per_s, (n_in + n_out) * b / rates.hbm_bytes_per_s,
                                 rates.kernel_overhead_s))
        return out

    # ------------------------------------------------------------------ pricing
    def catch_up_s(self, T: float, S: float, Ad: float, Ap: float, R: float, Aw: float, Rw: float, Pc: float) -> float:
        """The draft's first pass over the step's T tokens (statistics as the target's, `S`
        LM-head rows: one per proposing sequence); `Aw`, `Rw` windowed with the draft's window."""
        if self.cost is None or T <= 0:
            return 0.0
        t = self.cost.step_time(T, S, Ad, Ap, R, Aw, Rw, Pc)
        for g in self.extras:
            t += g.time(T)
        return t

    def propose_s(self, B: int, context_sum: float, contexts: list[int] | None = None) -> float:
        """Passes 2..k: one token per proposing sequence; pass j at c_i + j - 2 cached tokens
        (c_i each sequence's context after the verify, summing to `context_sum`). `contexts`
        is needed only for a draft with a sliding window."""
        if self.cost is None or B <= 0 or self.k < 2:
            return 0.0
        st = self.cost.step_time
        W = self.window
        extra = sum(g.time(B) for g in self.extras if not g.first_pass_only)
        t = 0.0
        for j in range(2, self.k + 1):
            cached = context_sum + B * (j - 2)
            if W is None:
                t += st(B, B, cached + 0.5 * B, 0.0, cached + B)
            else:
                assert contexts is not None
                t += st(B, B, cached + 0.5 * B, 0.0, cached + B,
                        sum(min(c + j - 2 + 0.5, W) for c in contexts), sum(min(c + j - 1, W) for c in contexts))
            t += extra
        return t


class SpeculativeDecoding:
    """Speculative decoding on one replica: the checked setting, the target's cost model and
    the draft (`Drafter`); what `serving.simulate` takes to run it (`speculative=`)."""

    def __init__(self, target: CostModel, config: SpeculativeConfig, draft_model: ModelSpec | None = None) -> None:
        if target.par.pp > 1:
            raise SpecError("speculative_config: speculative decoding with pp > 1 is not modelled")
        self.target = target
        self.config = config
        self.drafter = Drafter(target, config, draft_model)
        d = self.drafter
        what = {"draft_model": f"draft model {config.model} (tp={d.tp})", "ngram": "n-gram prompt lookup (no GPU work)",
                "mtp": f"the target's MTP module (one layer, tp={d.tp})"}.get(
            config.method, f"an {config.method} head of {target.model.id} (one layer, tp={d.tp})")
        self.notes = [config.describe() + f"; draft: {what}"]

    def memory(self, gpu_memory_utilization: float = 0.9, max_num_batched_tokens: int = 8192,
               max_num_seqs: int = 256, seq_len: int | None = None) -> MemoryPlan:
        """The target's memory plan with the draft's weights out of the KV budget and its KV in
        every token (module docstring)."""
        mem = self.target.memory(gpu_memory_utilization, max_num_batched_tokens, max_num_seqs, seq_len)
        d = self.drafter
        budget = mem.kv_budget_bytes_per_gpu - d.weights_bytes_per_gpu
        per_tok = mem.kv_bytes_per_token_per_gpu + d.kv_bytes_per_gpu_token
        tokens = int(max(budget, 0.0) // per_tok)
        fits = mem.fits and budget > 0 and tokens >= 16
        msg = mem.message
        if mem.fits and not fits:
            msg = (f"{self.target.model.id} with its {self.config.method} draft does not fit on "
                   f"{self.target.hardware.id} tp={self.target.par.tp}: the draft's {d.weights_bytes_per_gpu / 1e9:.1f} GB "
                   f"of weights per GPU leave no KV memory ({mem.kv_budget_bytes_per_gpu / 1e9:.1f} GB budget)")
        return dataclasses.replace(mem, kv_budget_bytes_per_gpu=budget, kv_bytes_per_token_per_gpu=per_tok,
                                   kv_capacity_tokens=tokens, max_concurrent_sequences=tokens // mem.seq_len,
                                   fits=fits, message=msg)


__all__ = ["Drafter", "ExtraGemm", "SpeculativeDecoding", "head_spec"]
