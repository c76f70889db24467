"""Agree with real servers: compare the model's predictions with measured numbers.

Inputs are rows in the format of `docs/measurement_schema.md` (one measured
number per row, with its exact settings) read by `read_measurements`, a `vllm bench serve`
result JSON turned into such rows by `read_vllm_result` (the model, hardware and engine
settings come from the caller: the JSON does not record them), or a GuideLLM, inference-perf
or AIPerf result read by `result_files` (its rows carry the run the file describes, `run`,
priced by `result_files.predict_metric` with the tool's own metric definitions).

`Validator.predict_row(row)` prices one row:

* `static_batch` rows go through `predict.predict_static` (B prompts of I tokens prefilled
  in one step, then O-1 decode steps); the row's metric is read from the prediction, with
  `output_tokens_per_s` counting every replica (num_gpus / (tp*pp)) and `_per_gpu` dividing
  by num_gpus.
* `offline_max_throughput`, `online_poisson` and `closed_loop` rows run the discrete-event
  engine (`engine.simulate`) with the row's limits (max_batch_size -> max_num_seqs,
  max_num_tokens -> max_num_batched_tokens), else its benchmark tool's, else the engine
  profile's (`profiles.apply.row_settings`), at rate inf / request_rate / concurrency, with
  fixed lengths or a named dataset mapped to a trace file by the caller.

Every row is priced by the engine profile its `engine` column names (`profiles.profile.engine_for_row`;
`Validator(engine=...)` forces one): the profile's overheads and kernel factors on the cost
model, its scheduler, limits and KV rule; each point carries the profile id (`engine`).

Rows that cannot be priced honestly (unknown model or hardware, a dtype the model does not
support, a dataset that is not available, a metric that needs a length the row does not
state) are skipped with the reason, never guessed. Identical settings are priced once.

error % = (predicted - measured) / measured * 100; APE = |error %|.
No printing and no files written here; the CLI does that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from simulator.analysis import mlperf_rows, result_files, serving_rows
from simulator.analysis.measurements import (
    ASSUMED_DECODE_LEN,
    DEFAULT_NUM_REQUESTS,
    SERVING_METRICS,
    STATIC_METRICS,
    SkipRow,
    check_rows,
    disagg_layout,
    engine_family,
    metric_percentile,
    metric_unit,
    note_facts,
    speculative_stated,
    system_parts,
)
from simulator.profiles.apply import (
    assumed_layout,
    client_view_for,
    profile_model,
    row_settings,
)
from simulator.profiles.profile import EngineProfile, apply_profile, engine_for_row, load_engine
from simulator.specs.checks import MAX_REQUESTS, SpecError, check_int, show
from simulator.specs.hardware import HardwareSpec

# --------------------------------------------------------------------------- predicting


class Validator:
    """Prices measurement rows; caches cost models and predictions of identical settings.

    `hardware_specs` maps a hardware id used in the rows to a HardwareSpec (or a YAML/overlay
    path) to use instead of the catalog entry (e.g. a calibrated overlay). `workloads` maps a
    dataset name to a trace file. `efficiency` overrides efficiency fields for every row.

    Request counts: a row (or result file) that states how many requests its run sent is
    simulated at that count, because a shorter run is a different experiment: its cold prefix
    cache and its queue start-up weigh more in every percentile, and an overloaded stage never
    builds the queue the measured one did (dev_serving.csv's p99 rows: 13.1 % median error at
    the stated counts, 22.8 % when cut to 1,000). A run whose benchmark fixes its length keeps
    it too: an inference-perf stage (rate x duration), an offline benchmark row
    (`profiles.apply.bench_num_requests`). `num_requests` is the count of any other row
    (default DEFAULT_NUM_REQUESTS); `max_requests` caps every run, stated or not
    (a quick look that measures a shorter experiment, said in each row's note). An MLPerf
    row's query is LoadGen's: only `max_requests` touches it, by lowering the pilot run
    (`mlperf_rows`).
    """

    def __init__(self, hardware_specs: Mapping[str, HardwareSpec | str] | None = None,
                 workloads: Mapping[str, str] | None = None,
                 efficiency: Mapping[str, float] | None = None,
                 num_requests: int | None = None, engine: str | EngineProfile | None = None,
                 max_requests: int | None = None) -> None:
        for name, arg in (("hardware_specs", hardware_specs), ("workloads", workloads), ("efficiency", efficiency)):
            if arg is not None and not isinstance(arg, Mapping):
                raise SpecError(f"{name}: {type(arg).__name__} is not a mapping")
        check_int("num_requests", num_requests, maximum=MAX_REQUESTS, optional=True)
        check_int("max_requests", max_requests, maximum=MAX_REQUESTS, optional=True)
        self.hardware_specs = dict(hardware_specs or {})
        self.workloads = {k.lower(): v for k, v in (workloads or {}).items()}
        self.efficiency = dict(efficiency or {})
        self.num_requests = num_requests
        self.max_requests = max_requests
        if engine is not None and not isinstance(engine, (str, EngineProfile)):
            raise SpecError(f"engine: {show(engine)} must be an engine profile id, a profile file or an EngineProfile")
        self.engine = None if engine is None else load_engine(engine)  # None: each row's own
        self._hw: dict[str, HardwareSpec] = {}
        self._model: dict[str, Any] = {}
        self._cost: dict[tuple, Any] = {}
        self._pred: dict[tuple, Any] = {}

    @property
    def pilot_cap(self) -> int | None:
        """What lowers an MLPerf row's pilot run: max_requests only. LoadGen fixes the query,
        so num_requests (the count of runs nothing fixes) leaves it alone: a 500-sample pilot
        moved the Llama-3.1-405B rows by 3-7 % (B200 median 4.4 % -> 9.8 %)."""
        return self.max_requests

    def run_count(self, stated: int | None) -> tuple[int, str]:
        """(requests to simulate, note) for a run that sent `stated` requests (None: not
        stated): the stated count, else num_requests, else DEFAULT_NUM_REQUESTS; at most
        max_requests. The note says when the count is not the run's own."""
        return self.cut(int(stated or self.num_requests or DEFAULT_NUM_REQUESTS), own=bool(stated))

    def cut(self, n: int, own: bool) -> tuple[int, str]:
        """(n, "") or, above max_requests, (max_requests, the note saying so); `own`: n is the
        run's own length (stated, or fixed by its benchmark)."""
        if self.max_requests is None or self.max_requests >= n:
            return n, ""
        what = f"the run's {n}" if own else f"{n}"
        return self.max_requests, (f"simulated {self.max_requests} of {what} requests (--max-requests): "
                                   "a shorter run than the measured one")

    def cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """A prediction kept for the rows that share `key` (one simulation per run): computed
        by `compute()` the first time."""
        if key not in self._pred:
            self._pred[key] = compute()
        return self._pred[key]

    # ---- specs
    def hardware(self, hw_id: str) -> HardwareSpec:
        if hw_id not in self._hw:
            from simulator.specs.catalog import load_hardware, resolve_hardware_id

            ref = self.hardware_specs.get(hw_id)
            if ref is None:
                try:
                    ref = resolve_hardware_id(hw_id)  # an id or alias (h100-sxm-80gb, H100)
                except SpecError as e:
                    raise SkipRow(str(e)) from None
                if ref is None:
                    raise SkipRow(f"hardware {hw_id} not in the catalog")
            try:
                hw = load_hardware(ref)
                if self.efficiency:
                    hw = hw.with_efficiency(**self.efficiency)
            except (SpecError, TypeError) as e:
                raise SkipRow(f"hardware {show(hw_id)}: {e}") from None
            self._hw[hw_id] = hw
        return self._hw[hw_id]

    def model(self, ref: str) -> Any:
        """A catalog id or alias (the HF id vLLM writes as model_id), or a config.json/YAML path."""
        if ref not in self._model:
            from simulator.specs.catalog import load_model

            try:
                self._model[ref] = load_model(ref)
            except SpecError:
                raise SkipRow(f"model {ref} not in the catalog") from None
        return self._model[ref]

    def profile_of(self, row: Mapping[str, Any]) -> EngineProfile:
        """The engine profile that prices `row` (`profiles.profile.engine_for_row` of its engine
        and model columns)."""
        return self.engine or load_engine(engine_for_row(str(row.get("engine") or ""), str(row.get("model") or "")))

    def parts(self, row: Mapping[str, Any]) -> list[tuple[str, int]]:
        """[(catalog hardware id, GPUs)] of a heterogeneous system (its notes list several
        chips with counts: `measurements.system_parts`), [] for a row of one chip. A row whose
        `hardware` is a catalog id is one chip, whatever its notes say. Raises SkipRow when a
        listed chip is not in the catalog or the counts do not add up."""
        from simulator.specs.catalog import resolve_hardware_id

        hw = str(row.get("hardware") or "")
        if hw in self.hardware_specs:
            return []
        try:
            if resolve_hardware_id(hw) is not None:
                return []
            listed = system_parts(row)
        except (SpecError, ValueError) as e:
            raise SkipRow(str(e)) from None
        out = []
        for name, n in listed:
            try:
                ref = resolve_hardware_id(name)
            except SpecError as e:
                raise SkipRow(str(e)) from None
            if ref is None:
                raise SkipRow(f"hardware {show(name)} (part of {hw}) not in the catalog")
            out.append((self.hardware(ref).id, n))
        return out

    def hardware_id(self, row: Mapping[str, Any]) -> str:
        """The catalog id of the row's chip; a heterogeneous system's parts joined by '+' in
        id order (mi300x+mi325x, whatever order the notes list them in)."""
        parts = self.parts(row)
        return "+".join(sorted(hw for hw, _ in parts)) if parts else self.hardware(row["hardware"]).id

    def resolve_row(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """`row` with its layout: as stated, or (tp and pp both empty in the source) the one
        `profiles.apply.assumed_layout` gives, with `layout_note` saying so. Raises SkipRow when
        its model or hardware is unknown. A heterogeneous system (`parts`) has one layout per
        part and is returned as it is."""
        if row.get("layout_stated", True) or self.parts(row):
            return row
        from simulator.specs.dtypes import DTypes

        model, hw = self.model(row["model"]), self.hardware(row["hardware"])
        try:
            tp, pp = assumed_layout(model, hw, DTypes(row["weight_dtype"], row["activation_dtype"], row["kv_dtype"]),
                                    row["num_gpus"])
        except SpecError as e:
            raise SkipRow(str(e)) from None
        return {**row, "tp": tp, "pp": pp, "replicas": row["num_gpus"] // (tp * pp), "layout_stated": False,
                "layout_note": f"tp/pp not stated: ASSUMED tp={tp} pp={pp}"}

    def engine_of(self, row: Mapping[str, Any]) -> str:
        return self.profile_of(row).id

    def cost_model(self, row: Mapping[str, Any], pool: Mapping[str, Any] | None = None) -> Any:
        """The row's cost model; `pool`: one pool of a disaggregated row (`disagg_layout`), whose
        EP and data-parallel attention replace the notes' single-server ones."""
        from simulator.cost.roofline import CostModel
        from simulator.specs.dtypes import DTypes
        from simulator.specs.parallelism import Parallelism

        profile = self.profile_of(row)
        # the layout's expert parallelism and data-parallel attention where the notes state them
        # (InferenceMAX: "TP8 EP8 dp-attention true"); MoE models only, else 1 and none
        facts = note_facts(row) if pool is None else {"expert_parallel": pool["ep"], "dp_attention": pool["dp_attention"]}
        moe = self.model(row["model"]).moe is not None
        ep = int(facts.get("expert_parallel", 1)) if moe else 1
        dpa = int(row["tp"]) if moe and facts.get("dp_attention") else 1
        key = (row["model"], row["hardware"], row["tp"], row["pp"], row["weight_dtype"],
               row["activation_dtype"], row["kv_dtype"], profile.id, ep, dpa)
        if key not in self._cost:
            model = profile_model(self.model(row["model"]), profile)
            hw = apply_profile(self.hardware(row["hardware"]), profile)
            try:
                # an engine that keeps pipeline micro-batches in flight (profile kernels.pipeline)
                par = Parallelism(row["tp"], row["pp"], ep=ep, dp_attention=dpa,
                                  pp_interleaved=profile.kernels.pipeline == "interleaved")
                cost = CostModel(model, hw, par,
                                 DTypes(row["weight_dtype"], row["activation_dtype"], row["kv_dtype"]),
                                 link_dtype=profile.link_dtype)
            except SpecError as e:
                raise SkipRow(f"unsupported setting: {e}") from None
            # a GEMM dtype the chip has no rate for would be priced at another format: a guess
            for want, got in zip(cost.gemm_formats, (cost.gemm_dtype, cost.expert_gemm_dtype), strict=True):
                if got != want and not _fallback_ok(want, got):
                    raise SkipRow(f"{hw.id} has no {want} tensor rate (dtype unsupported on this chip)")
            self._cost[key] = cost
        return self._cost[key]

    # ---- one row
    def predict_row(self, row: Mapping[str, Any]) -> float:
        """The model's value of `row['metric']` in the row's unit. Raises SkipRow(reason)."""
        value, _ = self.predict_row_detail(row)
        return value

    def predict_row_detail(self, row: Mapping[str, Any]) -> tuple[float, str]:
        """(predicted value, note on any assumption made)."""
        parts = self.parts(row)
        if parts:
            return self._heterogeneous(row, parts)
        row = self.resolve_row(row)
        pre = row.get("layout_note", "")
        layout, spec = self._note_layouts(row)
        if row["scenario"] == "static_batch":
            v, note = self._static(row)
        elif mlperf_rows.is_mlperf_row(row) and str(row.get("dataset")).lower() not in self.workloads:
            v, note = mlperf_rows.predict(self, row)
        else:
            v, note = self._serving(row, layout, spec)
        return v, "; ".join(n for n in (pre, note) if n)

    def _note_layouts(self, row: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(the disaggregated pools, the speculative decoding) the notes state (`disagg_layout`,
        `speculative_stated`; None: none). They are priced only by the serving simulation of a
        row's own workload (`_serving`, `_run_row`): a static, MLPerf, result-file or
        inference-perf row that states either is skipped with that reason, never priced as the
        aggregated, draft-free run it was not."""
        try:
            layout = disagg_layout(row)
        except ValueError as e:
            raise SkipRow(str(e)) from None
        spec = speculative_stated(row)
        if layout is None and spec is None:
            return None, None
        ds = str(row.get("dataset") or "").strip().lower()
        other = ("a static batch" if row["scenario"] == "static_batch"
                 else "an MLPerf run" if mlperf_rows.is_mlperf_row(row) and ds not in self.workloads
                 else "a rebuilt result file" if row.get("run") is not None
                 else "an inference-perf run" if serving_rows.is_serving_run_row(row) and ds not in self.workloads
                 else None)
        if other is not None:
            what = ("a disaggregated deployment" if layout is not None
                    else f"speculative decoding ({(spec or {}).get('method')})")
            raise SkipRow(f"notes state {what}: not modelled for {other} (only for a serving run of the row's own "
                          "workload)")
        return layout, spec

    def _heterogeneous(self, row: Mapping[str, Any], parts: list[tuple[str, int]]) -> tuple[float, str]:
        """An MLPerf Offline row of a system built from several chips (MangoBoost's MI300X +
        MI325X clusters): the sum of its homogeneous parts, each priced as an Offline row of its
        own (its own layout, engine instances and LoadGen query; a layout the row states holds
        for every part). Offline throughput adds up when the one query is split in proportion to
        the parts' rates, so that they finish together (ASSUMED: the submission does not say how
        its load balancer splits it). Other scenarios do not add up and are skipped."""
        if (row["scenario"] != "offline_max_throughput" or not mlperf_rows.is_mlperf_row(row)
                or row["metric"] not in ("output_tokens_per_s", "request_throughput")):
            raise SkipRow(f"heterogeneous system {row['hardware']}: only MLPerf Offline throughput rows are priced "
                          "(the sum of its parts)")
        total, notes = 0.0, []
        for hw_id, n in parts:
            if row.get("layout_stated"):
                per = row["tp"] * row["pp"]
                if n % per:
                    raise SkipRow(f"tp x pp: {per} does not divide the {n} {hw_id} GPUs of {row['hardware']}")
                part = {**row, "hardware": hw_id, "num_gpus": n, "replicas": n // per}
            else:
                part = {**row, "hardware": hw_id, "num_gpus": n, "tp": None, "pp": None, "replicas": None}
            value, note = self.predict_row_detail(part)
            total += value
            layout = self.resolve_row(part)
            notes.append(f"{n} x {hw_id} tp={layout['tp']} pp={layout['pp']}: {value:.6g} ({note})")
        return total, ("heterogeneous system priced as the sum of its parts, the query split by their rates "
                       f"(ASSUMED): {'; '.join(notes)}")

    def static_setting(self, row: Mapping[str, Any]) -> tuple[Any, int, int, int, str]:
        """(cost model, batch, input_len, output_len, note) a static_batch row is priced at."""
        metric = row["metric"]
        if metric not in STATIC_METRICS:
            raise SkipRow(f"metric {metric} is not defined for static_batch")
        if row["input_len"] is None:
            raise SkipRow("input_len not stated")
        out_len, note = row["output_len"], ""
        if out_len is None:
            if metric in ("ttft_ms", "prefill_tokens_per_s"):
                out_len = 1
            elif metric in ("tpot_ms", "decode_tokens_per_s"):
                out_len, note = ASSUMED_DECODE_LEN, f"output_len not stated: tpot over {ASSUMED_DECODE_LEN} tokens"
            else:
                raise SkipRow(f"output_len not stated; {metric} depends on it")
        if metric in ("tpot_ms", "decode_tokens_per_s") and out_len < 2:
            raise SkipRow(f"{metric} needs output_len >= 2")
        return self.cost_model(row), row["batch_size"], row["input_len"], out_len, note

    def _static(self, row: Mapping[str, Any]) -> tuple[float, str]:
        from simulator.cost.predict import predict_static

        metric = row["metric"]
        cost, _, _, out_len, note = self.static_setting(row)
        # a static row's max_num_tokens is the engine's prompt tokens per forward pass
        # (llama-bench -b): the prefill runs in pieces of it
        chunk = row.get("max_num_tokens")
        key = ("static", id(cost), row["batch_size"], row["input_len"], out_len, chunk)
        if key not in self._pred:
            try:
                self._pred[key] = predict_static(cost, row["batch_size"], row["input_len"], out_len,
                                                 prefill_chunk_tokens=chunk)
            except SpecError as e:
                raise SkipRow(str(e)) from None
        pred = self._pred[key]
        if chunk and chunk < row["batch_size"] * row["input_len"]:
            note = "; ".join(x for x in (note, f"prefill in chunks of {chunk} tokens (max_num_tokens)") if x)
        v = float(pred[metric])
        if metric == "output_tokens_per_s":
            v *= row["replicas"]  # every replica runs the batch
        elif metric == "output_tokens_per_s_per_gpu":
            v = float(pred["output_tokens_per_s"]) * row["replicas"] / row["num_gpus"]
        return v, note

    def _run_row(self, row: Mapping[str, Any], cost: Any, base: dict[str, Any], limits: dict[str, Any],
                 layout: Mapping[str, Any] | None, spec: dict[str, Any] | None) -> tuple[Any, str]:
        """(records, note) of a serving row's simulation: `base` (the scenario's model, layout,
        formats, workload and load) with the engine `limits`, as one aggregated deployment, as
        the two pools its notes give (`layout`), or with the speculative decoding they state."""
        from simulator.scenario import Scenario
        from simulator.serving.simulate import simulate

        conc = base["concurrency"]
        if layout is not None:
            limits = {k: v for k, v in limits.items() if k != "kv_capacity_tokens"}
            # the catalog's chip and model: each pool's scenario applies the engine profile itself
            # (`cost` carries it already; applying a profile twice compounds its factors)
            base = {**base, "model": self.model(row["model"]), "hardware": self.hardware(row["hardware"])}
            sc = Scenario(**base, disagg=f"{layout['prefill']['workers']}:{layout['decode']['workers']}",
                          deployment=self._pools(cost.model, layout), speculative_config=spec, **limits)
            w = _bench_lengths(row, limits["num_requests"], conc) or sc.make_workload()
            res, _ = sc.run(workload=w)
            return res, _layout_note(layout)
        try:
            sc = Scenario(**base, replicas=row["replicas"], speculative_config=spec, **limits)
            draft = sc.speculative(cost)
        except SpecError as e:
            if spec is None:
                raise
            raise SkipRow(f"notes state speculative decoding {spec}: {e}") from None
        w = _bench_lengths(row, limits["num_requests"], conc) or sc.make_workload()
        res = simulate(cost, w, sc.engine_config(cost), sc.replicas, sc.router,
                       client=client_view_for(self.profile_of(row)), speculative=draft)
        return res, "; ".join(draft.notes) if draft is not None else ""

    @staticmethod
    def _pools(model: Any, layout: Mapping[str, Any]) -> dict[str, dict[str, int]]:
        """A disaggregated row's `deployment:` pools (`disagg_layout`): each pool's TP, and for
        an MoE model its EP and data-parallel attention (one group per GPU, as for one server)."""
        moe = model.moe is not None
        return {n: {"tp": layout[n]["tp"], "ep": layout[n]["ep"] if moe else 1,
                    "dp_attention": layout[n]["tp"] if moe and layout[n]["dp_attention"] else 1}
                for n in ("prefill", "decode")}

    def _workload_of(self, row: Mapping[str, Any], ds: str) -> str:
        """The workload a serving row is simulated on: its dataset's trace (--workload), ShareGPT
        sampled as `vllm bench serve` samples it (sharegpt.py), else the row's random lengths."""
        if ds:
            if ds.lower() in self.workloads:
                return str(self.workloads[ds.lower()])
            if ds.lower() == "sharegpt":
                return "sharegpt"
            raise SkipRow(f"dataset {ds} not available; pass --workload {ds}=FILE")
        if row["input_len"] is None or row["output_len"] is None:
            raise SkipRow("input_len/output_len not stated and no dataset named")
        return "random"

    def _serving(self, row: Mapping[str, Any], layout: Mapping[str, Any] | None = None,
                 spec: dict[str, Any] | None = None) -> tuple[float, str]:
        from simulator.metrics.summary import summarize

        metric = row["metric"]
        pct = metric_percentile(metric)
        if metric not in SERVING_METRICS and pct is None:
            raise SkipRow(f"metric {metric} is defined for static_batch only")
        if row.get("run") is not None:  # a GuideLLM / inference-perf / AIPerf run, rebuilt from its file
            try:
                return result_files.predict_metric(self, row, self.profile_of(row))
            except SpecError as e:
                raise SkipRow(str(e)) from None
        ds = (row.get("dataset") or "").strip()
        if serving_rows.is_serving_run_row(row) and ds.lower() not in self.workloads:
            try:  # an inference-perf shared-prefix run: serving_rows maps it
                return serving_rows.predict_metric(self, row, self.profile_of(row))
            except SpecError as e:
                raise SkipRow(str(e)) from None
        workload = self._workload_of(row, ds)
        sc_name = row["scenario"]
        rate = math.inf if sc_name == "offline_max_throughput" else row["request_rate"]
        if rate is None:
            rate = math.inf
        conc = row["concurrency"] if sc_name == "closed_loop" else None
        n = int(row["num_requests"] or self.num_requests or DEFAULT_NUM_REQUESTS)  # before --max-requests
        if layout is not None:  # the limits of one decode replica; each pool's KV is its own
            row = {**row, "tp": layout["decode"]["tp"], "replicas": 1}
        cost = self.cost_model(row, None if layout is None else layout["decode"])
        f = note_facts(row)
        key = ("serve", id(cost), workload, row["input_len"], row["output_len"], rate, conc, n,
               row["max_batch_size"], row["max_num_tokens"], row["replicas"],
               f.get("range_ratio"), f.get("nominal_input_len"), f.get("nominal_output_len"), repr(layout), repr(spec))
        if key not in self._pred:
            try:
                # the row's limits, else its benchmark tool's, else the engine profile's
                # the row's lengths make a random workload; a dataset or trace has its own
                lengths: dict[str, Any] = ({"input_len": row["input_len"] or 1, "output_len": row["output_len"] or 1}
                           if workload == "random" else {})
                # an offline benchmark row's run is sized by its benchmark (BENCH_WAVES x the seats
                # it fills), as a stated count would be: --num-requests does not shorten it
                limits = row_settings(self.profile_of(row), cost, dict(row), n,
                                      offline=sc_name == "offline_max_throughput")
                own = bool(row["num_requests"]) or limits["num_requests"] != n
                limits["num_requests"], note = self.cut(limits["num_requests"], own)
                base = dict(model=cost.model, hardware=cost.hardware, tp=row["tp"], pp=row["pp"],
                            weight_dtype=row["weight_dtype"], activation_dtype=row["activation_dtype"],
                            kv_dtype=row["kv_dtype"], workload=workload, rate=rate, concurrency=conc, **lengths)
                res, more = self._run_row(row, cost, base, limits, layout, spec)
                note = "; ".join(x for x in (note, more) if x)
                self._pred[key] = (summarize(res, {}), res, note)
            except SpecError as e:
                raise SkipRow(str(e)) from None
        s, res, count_note = self._pred[key]
        if metric not in SERVING_METRICS and metric not in s:
            assert pct is not None
            s.update(summarize(res, {}, (pct,)))  # a percentile the default summary lacks
        v = s.get(SERVING_METRICS.get(metric, metric))
        if v is None or not math.isfinite(float(v)):
            raise SkipRow(f"simulation gave no {metric} (completed {s.get('completed')} of {s.get('num_requests')})")
        return float(v), count_note


def _layout_note(layout: Mapping[str, Any]) -> str:
    """What a disaggregated row was priced as, with what its notes did not state."""
    pools = ", ".join(f"{n} {layout[n]['workers']} x TP{layout[n]['tp']} EP{layout[n]['ep']} "
                      f"dp-attention {str(layout[n]['dp_attention']).lower()}" for n in ("prefill", "decode"))
    assumed = f" (ASSUMED: {', '.join(layout['assumed'])})" if layout["assumed"] else ""
    return f"disaggregated: {pools}{assumed}"


def _bench_lengths(row: Mapping[str, Any], n: int, concurrency: int | None) -> Any:
    """The request lengths of a benchmark_serving run whose notes give a random-range ratio r
    and nominal lengths L (InferenceMAX's utils/bench_serving, the 2024 vLLM client: each
    length uniform on the integers of [int(r L), L], `np.random.randint(int(L r), L + 1)`), all
    sent at once to `concurrency` closed-loop clients; ignore_eos: every request yields its drawn output length. None when the notes
    give no such lengths. Warm-up requests (2 x concurrency) finish before the timed run starts
    from an idle engine, so they are not simulated."""
    from simulator.workloads.workload import Workload

    f = note_facts(row)
    if not {"range_ratio", "nominal_input_len", "nominal_output_len"} <= f.keys():
        return None
    g_in, g_out = (np.random.default_rng(s) for s in np.random.SeedSequence(0).spawn(2))
    r = f["range_ratio"]
    li, lo = f["nominal_input_len"], f["nominal_output_len"]
    inp = g_in.integers(max(1, int(li * r)), li + 1, size=n)
    out = g_out.integers(max(1, int(lo * r)), lo + 1, size=n)
    return Workload(np.zeros(n), inp, out, name=f"bench_serving random r={r:g} {li}/{lo}", concurrency=concurrency)


def _fallback_ok(wanted: str, got: str) -> bool:
    """A narrower format run on a wider tensor rate is what engines do (fp8 weights on A100
    are dequantized to bf16; int8/int4 weight-only GEMMs run at fp16)."""
    from simulator.specs.dtypes import DTYPE_BYTES

    return DTYPE_BYTES[got] >= DTYPE_BYTES[wanted] and wanted not in ("fp8", "fp4")


def predict_row(row: Mapping[str, Any], **kw: Any) -> float:
    """Price one row with a fresh Validator (see `Validator.predict_row`)."""
    return Validator(**kw).predict_row(row)


# --------------------------------------------------------------------------- statistics


def error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0


def error_stats(errors: Iterable[float]) -> dict[str, Any]:
    """rows, median_ape, p90_ape, mean_signed_error (percent) of signed errors in percent."""
    e = np.asarray(list(errors), dtype=float)
    if e.size == 0:
        return {"rows": 0, "median_ape": None, "p90_ape": None, "mean_signed_error": None}
    a = np.abs(e)
    return {"rows": int(e.size), "median_ape": float(np.median(a)),
            "p90_ape": float(np.percentile(a, 90)), "mean_signed_error": float(e.mean()),
            "median_signed_error": float(np.median(e))}


def _grouped(points: list[dict], key: str) -> dict[str, dict]:
    groups: dict[str, list[float]] = {}
    for p in points:
        groups.setdefault(str(p[key]), []).append(p["error_pct"])
    return {k: error_stats(v) for k, v in sorted(groups.items())}


#: per-row fields of a point besides the prediction (for grouping errors by chip, engine,
#: dtype, batch, ...): `validate --points FILE` writes them all
POINT_FIELDS = ("id", "source", "scenario", "engine", "engine_family", "hardware", "model", "metric",
                "num_gpus", "tp", "pp", "weight_dtype", "activation_dtype", "kv_dtype", "batch_size",
                "concurrency", "request_rate", "num_requests", "input_len", "output_len", "dataset",
                "max_batch_size", "max_num_tokens", "measured", "predicted", "error_pct", "note")


def _point(v: Validator, row: Mapping[str, Any], pred: float, note: str) -> dict[str, Any]:
    r = v.resolve_row(row)
    out = {k: r.get(k) for k in POINT_FIELDS}
    out.update({"hardware": v.hardware_id(row),  # the catalog id (rows may use an alias)
                "engine": v.engine_of(row), "engine_family": engine_family(str(row.get("engine") or "")),
                "measured": row["value"], "predicted": pred, "error_pct": error_pct(pred, row["value"]),
                "note": note})
    return out


def skip_counts(skipped: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per skip reason, most rows first: {reason, rows, example}. A reason names the
    missing feature ("hardware sn40l not in the catalog", "model decilm-7b not in the
    catalog"), so its count is what that feature costs."""
    groups: dict[str, list[str]] = {}
    for sk in skipped:
        groups.setdefault(str(sk["reason"]), []).append(str(sk["id"]))
    return [{"reason": k, "rows": len(ids), "example": ids[0]}
            for k, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def _checked_rows(rows: Any, skipped: Any) -> tuple[list[Mapping[str, Any]], list[dict]]:
    """`validate`'s inputs as lists (`measurements.check_rows`; skipped rows: mappings with an
    id and a reason), refused with one line otherwise (issue 26)."""
    out = check_rows(rows)
    if skipped is not None and (isinstance(skipped, (str, bytes, Mapping)) or not isinstance(skipped, Iterable)):
        raise SpecError(f"skipped: {show(skipped)} is not a list of skipped rows")
    skip = list(skipped or [])
    for i, r in enumerate(skip):
        if not isinstance(r, Mapping) or "id" not in r or "reason" not in r:
            raise SpecError(f"skipped[{i}]: {show(r)} is not a mapping with an id and a reason")
    return out, skip


def validate(rows: Iterable[Mapping[str, Any]], *, scenario: str | None = None,
             hardware_filter: str | None = None, skipped: Iterable[dict] | None = None,
             validator: Validator | None = None,
             progress: Callable[[int, int], None] | None = None, **kw: Any) -> dict[str, Any]:
    """Predict every row and summarise the errors.

    `scenario` / `hardware_filter` keep only rows of that scenario / hardware id (others are
    not counted). `skipped` carries rows already skipped while reading. Other keyword
    arguments build the Validator (hardware_specs, workloads, efficiency, num_requests,
    max_requests).
    Returns rows, predicted, skipped [{id, reason}], skip_counts [{reason, rows, example}],
    median_ape, p90_ape, mean_signed_error, by_scenario / by_engine / by_engine_family /
    by_hardware / by_source / by_metric ({rows, median_ape, p90_ape, mean_signed_error}) and
    points (per row: POINT_FIELDS).
    """
    rows, skipped = _checked_rows(rows, skipped)
    if validator is not None and not isinstance(validator, Validator):
        raise SpecError(f"validator: {type(validator).__name__} is not a Validator (or None)")
    v = validator or Validator(**kw)
    rows = [r for r in rows
            if (scenario is None or r["scenario"] == scenario)
            and (hardware_filter is None or r["hardware"] == hardware_filter)]
    skip = list(skipped or [])
    points: list[dict] = []
    for i, row in enumerate(rows):
        try:
            pred, note = v.predict_row_detail(row)
        except SkipRow as e:
            skip.append({"id": row["id"], "reason": str(e)})
        else:
            if not math.isfinite(pred) or pred <= 0:
                skip.append({"id": row["id"], "reason": f"prediction {pred!r} is not a positive number"})
            else:
                points.append(_point(v, row, pred, note))
        if progress:
            progress(i + 1, len(rows))
    overall = error_stats(p["error_pct"] for p in points)
    return {
        "rows": len(rows) + len(list(skipped or [])),
        "predicted": len(points),
        "skipped": skip,
        "skip_counts": skip_counts(skip),
        "median_ape": overall["median_ape"],
        "p90_ape": overall["p90_ape"],
        "mean_signed_error": overall["mean_signed_error"],
        "by_scenario": _grouped(points, "scenario"),
        "by_engine": _grouped(points, "engine"),
        "by_engine_family": _grouped(points, "engine_family"),
        "by_hardware": _grouped(points, "hardware"),
        "by_source": _grouped(points, "source"),
        "by_metric": _grouped(points, "metric"),
        "points": points,
    }


def summary_table(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for a terminal table: one per source, scenario and hardware, then overall."""
    out = []
    for group, key in (("source", "by_source"), ("engine", "by_engine"), ("engine family", "by_engine_family"),
                       ("scenario", "by_scenario"),
                       ("hardware", "by_hardware")):
        for name, st in result[key].items():
            out.append({"group": group, "name": name, **_fmt(st)})
    out.append({"group": "overall", "name": "all", **_fmt(error_stats(p["error_pct"] for p in result["points"]))})
    return out


def point_label(point: Mapping[str, Any]) -> str:
    """A short name of a point for scatter labels: `p99 ttft`, `output tok/s`."""
    m = str(point["metric"])
    for suffix, unit in (("_ms", ""), ("_tokens_per_s_per_gpu", "_tok/s/gpu"), ("_tokens_per_s", "_tok/s")):
        if m.endswith(suffix):
            m = m[: -len(suffix)] + unit
            break
    return m.replace("_", " ")


def metric_table(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per predicted point: id, metric, unit, measured, predicted, error %."""
    return [{"id": p["id"], "metric": p["metric"], "unit": metric_unit(p["metric"]),
             "measured": round(float(p["measured"]), 3), "predicted": round(float(p["predicted"]), 3),
             "error_%": round(float(p["error_pct"]), 1)} for p in result["points"]]


def _fmt(st: Mapping[str, Any]) -> dict[str, Any]:
    def r(x: Any) -> Any:
        return None if x is None else round(float(x), 1)

    return {"rows": st["rows"], "median_ape_%": r(st["median_ape"]), "p90_ape_%": r(st["p90_ape"]),
            "mean_signed_error_%": r(st["mean_signed_error"])}


def points_frame(result: Mapping[str, Any], full: bool = False) -> Any:
    """The per-row points as a DataFrame: validation.csv's columns, or (`full`) every
    POINT_FIELDS column (`validate --points FILE`)."""
    import pandas as pd

    cols = list(POINT_FIELDS) if full else ["id", "source", "engine", "scenario", "hardware", "model", "metric",
                                            "measured", "predicted", "error_pct"]
    return pd.DataFrame([{c: p.get(c) for c in cols} for p in result["points"]], columns=cols)


__all__ = [
    "POINT_FIELDS",
    "Validator",
    "error_pct",
    "error_stats",
    "metric_table",
    "point_label",
    "points_frame",
    "predict_row",
    "skip_counts",
    "summary_table",
    "validate",
]
