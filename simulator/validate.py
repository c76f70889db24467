"""Agree with real servers: compare the model's predictions with measured numbers.

Inputs are rows in the format of `docs/measurement_schema.md` (one measured
number per row, with its exact settings) read by `read_measurements`, or a `vllm bench serve`
result JSON turned into such rows by `read_vllm_result` (the model, hardware and engine
settings come from the caller: the JSON does not record them).

`Validator.predict_row(row)` prices one row:

* `static_batch` rows go through `predict.predict_static` (B prompts of I tokens prefilled
  in one step, then O-1 decode steps); the row's metric is read from the prediction, with
  `output_tokens_per_s` counting every replica (num_gpus / (tp*pp)) and `_per_gpu` dividing
  by num_gpus.
* `offline_max_throughput`, `online_poisson` and `closed_loop` rows run the discrete-event
  engine (`engine.simulate`) with the row's limits (max_batch_size -> max_num_seqs,
  max_num_tokens -> max_num_batched_tokens), else its benchmark tool's, else the engine
  profile's (`engine_setup.row_settings`), at rate inf / request_rate / concurrency, with
  fixed lengths or a named dataset mapped to a trace file by the caller.

Every row is priced by the engine profile its `engine` column names (`engines.engine_for_row`;
`Validator(engine=...)` forces one): the profile's overheads and kernel factors on the cost
model, its scheduler, limits and KV rule; each point carries the profile id (`engine`).

Rows that cannot be priced honestly (unknown model or hardware, a dtype the model does not
support, a dataset that is not available, a metric that needs a length the row does not
state) are skipped with the reason, never guessed. Identical settings are priced once.

error % = (predicted - measured) / measured * 100; APE = |error %|.
No printing and no files written here; the CLI does that.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import serving_rows
from .checks import (
    MAX_BATCH,
    MAX_REQUESTS,
    MAX_RESULT_BYTES,
    MAX_TOKENS,
    check_int,
    check_path,
    load_json,
    show,
)
from .engine_setup import frontend_s_for, lag_steps_for, profile_model, row_settings, with_frontend
from .engines import EngineProfile, apply_profile, engine_for_row, load_engine
from .specs import DTYPES, HardwareSpec, SpecError, is_number

SCENARIOS = ("static_batch", "offline_max_throughput", "online_poisson", "closed_loop")

#: metric -> unit (docs/measurement_schema.md)
METRICS: dict[str, str] = {
    "ttft_ms": "ms",
    "tpot_ms": "ms",
    "e2e_ms": "ms",
    "decode_tokens_per_s": "tokens/s",
    "prefill_tokens_per_s": "tokens/s",
    "output_tokens_per_s": "tokens/s",
    "output_tokens_per_s_per_gpu": "tokens/s",
    "request_throughput": "req/s",
    **{f"{s}_{k}_ms": "ms" for k in ("ttft", "tpot", "itl") for s in ("mean", "median", "p99")},
    "mean_e2el_ms": "ms",
    "median_e2el_ms": "ms",
    "p99_e2el_ms": "ms",
}
STATIC_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s", "prefill_tokens_per_s",
                  "output_tokens_per_s", "output_tokens_per_s_per_gpu")
#: metric -> key of the simulator's vLLM-style summary
SERVING_METRICS: dict[str, str] = {
    "output_tokens_per_s": "output_throughput",
    "output_tokens_per_s_per_gpu": "output_throughput_per_gpu",
    "request_throughput": "request_throughput",
    **{f"{s}_{k}_ms": f"{s}_{k}_ms" for k in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")},
}
#: `p{X}_{ttft|tpot|itl|e2el}_ms`, X in (0, 100): every percentile vLLM's --metric-percentiles writes
_PERCENTILE_METRIC = re.compile(r"^p(\d{1,2}(?:\.\d{1,4})?)_(ttft|tpot|itl|e2el)_ms$")


def metric_unit(metric: str) -> str | None:
    """The unit of a metric name (METRICS, or any percentile key), None if unknown."""
    if metric in METRICS:
        return METRICS[metric]
    m = _PERCENTILE_METRIC.match(metric)
    return "ms" if m and 0 < float(m.group(1)) < 100 else None


def metric_percentile(metric: str) -> float | None:
    """X of a `p{X}_..._ms` metric name, else None."""
    m = _PERCENTILE_METRIC.match(metric)
    return float(m.group(1)) if m else None


_UNIT_ALIASES = {"ms": "ms", "tokens/s": "tokens/s", "tok/s": "tokens/s", "token/s": "tokens/s",
                 "req/s": "req/s", "requests/s": "req/s"}

REQUIRED_COLUMNS = ("id", "source", "model", "hardware", "num_gpus", "tp", "pp", "weight_dtype",
                    "activation_dtype", "kv_dtype", "scenario", "metric", "value", "unit")
OPTIONAL_COLUMNS = ("engine", "batch_size", "request_rate", "concurrency", "num_requests",
                    "input_len", "output_len", "dataset", "max_batch_size", "max_num_tokens",
                    "quality", "notes")
_INT_COLUMNS = ("num_gpus", "tp", "pp", "batch_size", "concurrency", "num_requests", "input_len",
                "output_len", "max_batch_size", "max_num_tokens")

#: decode-only metrics of a row that does not state output_len are priced over this many
#: tokens (at batch 1 the context growth over 128 tokens moves tpot by well under 1 %)
ASSUMED_DECODE_LEN = 128
#: serving rows that do not state num_requests simulate this many
DEFAULT_NUM_REQUESTS = 1000


class SkipRow(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """This row cannot be priced; the message is the reason."""


# --------------------------------------------------------------------------- reading


#: the largest value each integer column accepts (checks.py bounds; beyond them no row can be
#: priced without unbounded time or memory)
_INT_MAX = {"batch_size": MAX_BATCH, "input_len": MAX_TOKENS, "output_len": MAX_TOKENS,
            "num_requests": MAX_REQUESTS, "concurrency": MAX_REQUESTS, "max_batch_size": MAX_BATCH,
            "max_num_tokens": MAX_TOKENS, "num_gpus": MAX_BATCH, "tp": MAX_BATCH, "pp": MAX_BATCH}


def _parse_int(text: str, col: str) -> int:
    try:
        f = float(text)
    except ValueError:
        raise ValueError(f"{col}: {show(text)} is not an integer") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"{col}: {show(text)} is not an integer")
    if f < 1:
        raise ValueError(f"{col}: {show(text)} must be >= 1")
    if f > _INT_MAX[col]:
        raise ValueError(f"{col}: {show(text)} must be <= {_INT_MAX[col]}")
    return int(f)


def _parse_float(text: str, col: str, allow_inf: bool = False) -> float:
    s = text.strip().lower()
    if allow_inf and s in ("inf", "infinity"):
        return math.inf
    try:
        v = float(s)
    except ValueError:
        raise ValueError(f"{col}: {show(text)} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{col}: {show(text)} must be a finite number > 0")
    return v


def parse_row(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Type and check one measurement row (a mapping of column -> text). Raises ValueError
    with `column: value: problem` for the first problem found."""
    row: dict[str, Any] = {}
    for col in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS):
        v = raw.get(col)
        row[col] = "" if v is None else str(v).strip()
    for col in ("id", "model", "hardware", "scenario", "metric"):
        if not row[col]:
            raise ValueError(f"{col}: empty")
    for col in _INT_COLUMNS:
        row[col] = _parse_int(row[col], col) if row[col] else None
    for col in ("num_gpus", "tp", "pp"):
        if row[col] is None:
            raise ValueError(f"{col}: empty")
    if row["num_gpus"] % (row["tp"] * row["pp"]):
        raise ValueError(f"num_gpus: {row['num_gpus']} is not a multiple of tp*pp = {row['tp'] * row['pp']}")
    row["request_rate"] = _parse_float(row["request_rate"], "request_rate", allow_inf=True) if row["request_rate"] else None
    row["value"] = _parse_float(row["value"], "value") if row["value"] else None
    if row["value"] is None:
        raise ValueError("value: empty")
    _check_categories(row)
    row["replicas"] = row["num_gpus"] // (row["tp"] * row["pp"])
    return row


def _check_categories(row: dict[str, Any]) -> None:
    """The dtype, scenario, metric and unit columns, and what each scenario requires (in place:
    the unit is normalised)."""
    for col in ("weight_dtype", "activation_dtype", "kv_dtype"):
        if row[col] not in DTYPES:
            raise ValueError(f"{col}: {show(row[col])} is not one of {', '.join(DTYPES)}")
    if row["scenario"] not in SCENARIOS:
        raise ValueError(f"scenario: {show(row['scenario'])} is not one of {', '.join(SCENARIOS)}")
    expected = metric_unit(row["metric"])
    if expected is None:
        raise ValueError(f"metric: {show(row['metric'])} is not one of {', '.join(METRICS)} "
                         "or p<X>_<ttft|tpot|itl|e2el>_ms")
    unit = _UNIT_ALIASES.get(row["unit"].lower())
    if unit != expected:
        raise ValueError(f"unit: {show(row['unit'])} does not match metric {row['metric']} "
                         f"(expected {expected})")
    row["unit"] = unit
    sc = row["scenario"]
    if sc == "static_batch" and row["batch_size"] is None:
        raise ValueError("batch_size: empty (required for static_batch)")
    if sc == "online_poisson" and row["request_rate"] is None:
        raise ValueError("request_rate: empty (required for online_poisson)")
    if sc == "closed_loop" and row["concurrency"] is None:
        raise ValueError("concurrency: empty (required for closed_loop)")


def _decoded_lines(fh: Any, path: Path, at: list[int]) -> Iterator[str]:
    """The lines of a binary file as text: UTF-8 (a leading BOM dropped), each line decoded on
    its own so that a bad byte is reported with its line number; `at[0]` is the line last read."""
    for number, raw in enumerate(fh, start=1):
        at[0] = number
        try:
            yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError as e:
            raise SpecError(f"{path}:{number}: not UTF-8 text (byte 0x{raw[e.start]:02x} at column "
                            f"{e.start + 1}); save the file as UTF-8") from None


def read_measurements(path: str | Path, skip_bad_rows: bool = False) -> tuple[list[dict], list[dict]]:
    """Read a docs/measurement_schema.md measurement CSV. Returns (rows, skipped).

    A malformed row raises SpecError `FILE:LINE: column: problem` (LINE counts the header as
    line 1), unless `skip_bad_rows`, which records it in `skipped` with that reason instead.
    Duplicate ids are malformed. A file that is not UTF-8, holds a field longer than the csv
    module's limit (131,072 characters) or fails to read is one SpecError naming FILE:LINE.
    """
    p = check_path("path", path)
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    at = [0]
    reader = csv.DictReader(_decoded_lines(fh, p, at))
    try:
        with fh:
            return _read_rows(reader, p, skip_bad_rows)
    except csv.Error as e:
        raise SpecError(f"{p}:{at[0]}: malformed CSV: {e}") from None
    except OSError as e:
        raise SpecError(f"{p}:{at[0]}: read failed ({e.__class__.__name__}: {e.strerror or e})") from None


def _read_rows(reader: csv.DictReader, p: Path, skip_bad_rows: bool) -> tuple[list[dict], list[dict]]:
    rows: list[dict] = []
    skipped: list[dict] = []
    seen: dict[str, int] = {}
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise SpecError(f"{p}: missing column(s) {', '.join(missing)}; see docs/measurement_schema.md "
                        f"(required: {', '.join(REQUIRED_COLUMNS)})")
    line_end = 1
    for raw in reader:
        line = line_end + 1  # first physical line of this record
        line_end = reader.line_num
        if not any((v or "").strip() for k, v in raw.items() if k is not None):
            continue  # blank line
        try:
            if None in raw:
                raise ValueError(f"{len(header) + len(raw[None])} fields, header has {len(header)}")
            row = parse_row(raw)
            if row["id"] in seen:
                raise ValueError(f"id: {show(row['id'])} duplicates line {seen[row['id']]}")
        except ValueError as e:
            if not skip_bad_rows:
                raise SpecError(f"{p}:{line}: {e}") from None
            skipped.append({"id": (raw.get("id") or "").strip()[:200] or f"line {line}",
                            "reason": f"malformed row ({p.name}:{line}): {e}"})
            continue
        seen[row["id"]] = line
        row["line"] = line
        rows.append(row)
    return rows, skipped


#: vLLM bench serve result keys compared, -> SCHEMA metric
_VLLM_KEYS: dict[str, str] = {
    "request_throughput": "request_throughput",
    "output_throughput": "output_tokens_per_s",
    **{f"{s}_{k}_ms": f"{s}_{k}_ms" for k in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")},
}


def _check_vllm_args(**args: Any) -> None:
    """The settings `read_vllm_result` takes from its caller: positive integers within bounds."""
    for name, v in args.items():
        top = MAX_TOKENS if name in ("input_len", "output_len", "max_num_batched_tokens") else MAX_BATCH
        check_int(name, v, maximum=top, optional=name not in ("tp", "pp"))


def read_vllm_result(path: str | Path, *, model: str, hardware: str, tp: int = 1, pp: int = 1,
                     num_gpus: int | None = None, weight_dtype: str = "bf16",
                     activation_dtype: str = "bf16", kv_dtype: str = "bf16",
                     input_len: int | None = None, output_len: int | None = None,
                     dataset: str | None = None, max_num_seqs: int | None = None,
                     max_num_batched_tokens: int | None = None) -> list[dict]:
    """Turn a `vllm bench serve --save-result` JSON into measurement rows, one per metric.

    Mapped: request_rate (inf or absent -> offline_max_throughput, finite -> online_poisson),
    max_concurrency (-> closed_loop), num_prompts/completed (-> num_requests), output_throughput
    (-> output_tokens_per_s), request_throughput and the mean/median/p99 ttft/tpot/itl/e2el.
    Lengths: the arguments, else `input_lens`/`output_lens` when every request has the same
    length, else `dataset` (or the JSON's `dataset_name`) must name a workload.
    """
    p = check_path("path", path)
    _check_vllm_args(tp=tp, pp=pp, num_gpus=num_gpus, max_num_seqs=max_num_seqs, input_len=input_len,
                     output_len=output_len, max_num_batched_tokens=max_num_batched_tokens)
    data = load_json(p, MAX_RESULT_BYTES, "vllm bench serve result")
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected a JSON object (a vllm bench serve result)")
    found = [k for k in _VLLM_KEYS if is_number(data.get(k))]
    # every percentile the file has (vLLM's --metric-percentiles 50,90,99.9 -> p50_, p90_, p99.9_)
    found += [k for k in data if k not in _VLLM_KEYS and is_number(data[k]) and metric_unit(k)]
    if not found:
        raise SpecError(f"{p}: no vllm bench serve metrics found (expected keys like "
                        "request_throughput, output_throughput, mean_ttft_ms)")

    def num(key: str) -> Any:
        """A numeric setting: absent or null -> None; a number or "inf"; anything else (e.g.
        `"request_rate": "fast"`, once read as offline) is refused, never guessed."""
        v = data.get(key)
        if v is None:
            return None
        if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
            return math.inf
        if not is_number(v) or math.isnan(v) or v < 0:
            raise SpecError(f"{p}: {key}: {show(v)} is not a number >= 0 (or inf, or null)")
        return v

    rate = num("request_rate")
    conc = num("max_concurrency")
    if conc is not None:
        scenario = "closed_loop"
    elif rate is None or math.isinf(rate):
        scenario = "offline_max_throughput"
    else:
        scenario = "online_poisson"
    n = num("num_prompts") or num("completed")

    inp, out, ds, length_note = _vllm_lengths(data, input_len, output_len, dataset)
    tp_pp = tp * pp
    ngpu = num_gpus or tp_pp
    base = {
        "source": f"{p.name} (vllm bench serve, backend {data.get('backend', '?')}, {data.get('date', 'undated')})",
        "model": model, "hardware": hardware, "num_gpus": ngpu, "tp": tp, "pp": pp,
        "engine": str(data.get("backend") or "vllm"), "weight_dtype": weight_dtype,
        "activation_dtype": activation_dtype, "kv_dtype": kv_dtype, "scenario": scenario,
        "batch_size": "", "request_rate": "" if rate is None else str(rate),
        "concurrency": "" if conc is None else str(int(conc)),
        "num_requests": "" if not n else str(int(n)), "input_len": "" if not inp else str(inp),
        "output_len": "" if not out else str(out), "dataset": ds,
        "max_batch_size": "" if max_num_seqs is None else str(max_num_seqs),
        "max_num_tokens": "" if max_num_batched_tokens is None else str(max_num_batched_tokens),
        "quality": "high", "notes": f"model_id {data.get('model_id', '?')}{length_note}",
    }
    rows = []
    for i, key in enumerate(found, start=1):
        metric = _VLLM_KEYS.get(key, key)
        raw = {**base, "id": f"{p.stem}-{key}", "metric": metric, "value": str(data[key]),
               "unit": metric_unit(metric)}
        try:
            row = parse_row(raw)
        except ValueError as e:
            raise SpecError(f"{p}: {key}: {e}") from None
        row["line"] = i
        rows.append(row)
    return rows


def _vllm_lengths(data: Mapping[str, Any], input_len: int | None, output_len: int | None,
                  dataset: str | None) -> tuple[int | None, int | None, str, str]:
    """(input_len, output_len, dataset, note) of a vLLM result: the caller's lengths, else
    `input_lens`/`output_lens` when every request has the same length, else (no dataset named
    by the caller) the mean lengths total_input_tokens / completed and total_output_tokens /
    completed (vLLM sums the totals over completed requests; num_prompts when `completed` is
    absent). Mean lengths price a varied-length run as a fixed-length one: the note says so."""
    def fixed(key: str) -> int | None:
        v = data.get(key)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v) and len(set(v)) == 1:
            return int(v[0])
        return None

    def mean(total_key: str) -> int | None:
        n, total = data.get("completed") or data.get("num_prompts"), data.get(total_key)
        if dataset or not (is_number(n) and is_number(total)):
            return None
        n, total = float(n), float(total)  # type: ignore[arg-type]
        if not (n > 0 and total > 0 and math.isfinite(total / n)):
            return None
        return max(1, round(total / n))

    inp = input_len if input_len is not None else fixed("input_lens")
    out = output_len if output_len is not None else fixed("output_lens")
    note = ""
    if inp is None or out is None:
        m_in, m_out = mean("total_input_tokens"), mean("total_output_tokens")
        if inp is None and m_in is not None and (out is not None or m_out is not None):
            inp, note = m_in, "; input_len = total_input_tokens / completed"
        if out is None and m_out is not None and inp is not None:
            out, note = m_out, note + "; output_len = total_output_tokens / completed"
    ds = dataset or ("" if inp and out else str(data.get("dataset_name") or ""))
    if ds == "random" and inp and out:
        ds = ""
    return inp, out, ds, note


def load_rows(path: str | Path, skip_bad_rows: bool = False, **vllm: Any) -> tuple[list[dict], list[dict]]:
    """A measurement CSV, or a vLLM result JSON (`vllm` keyword arguments: model, hardware, ...)."""
    p = check_path("path", path)
    is_json = p.suffix.lower() == ".json"
    if not is_json:
        try:
            with open(p, "rb") as fh:
                is_json = fh.read(64).lstrip().startswith(b"{")
        except OSError as e:
            raise SpecError(f"{p}: cannot read ({e.__class__.__name__}: {e.strerror or e})") from None
    if is_json:
        if not vllm.get("model") or not vllm.get("hardware"):
            raise SpecError(f"{p}: a vLLM result JSON does not record the model or hardware; "
                            "pass --model and --hardware")
        return read_vllm_result(p, **vllm), []
    return read_measurements(p, skip_bad_rows)


# --------------------------------------------------------------------------- predicting


class Validator:
    """Prices measurement rows; caches cost models and predictions of identical settings.

    `hardware_specs` maps a hardware id used in the rows to a HardwareSpec (or a YAML/overlay
    path) to use instead of the catalog entry (e.g. a calibrated overlay). `workloads` maps a
    dataset name to a trace file. `efficiency` overrides efficiency fields for every row.
    """

    def __init__(self, hardware_specs: Mapping[str, HardwareSpec | str] | None = None,
                 workloads: Mapping[str, str] | None = None,
                 efficiency: Mapping[str, float] | None = None,
                 num_requests: int | None = None, engine: str | EngineProfile | None = None) -> None:
        for name, arg in (("hardware_specs", hardware_specs), ("workloads", workloads), ("efficiency", efficiency)):
            if arg is not None and not isinstance(arg, Mapping):
                raise SpecError(f"{name}: {type(arg).__name__} is not a mapping")
        check_int("num_requests", num_requests, maximum=MAX_REQUESTS, optional=True)
        self.hardware_specs = dict(hardware_specs or {})
        self.workloads = {k.lower(): v for k, v in (workloads or {}).items()}
        self.efficiency = dict(efficiency or {})
        self.num_requests = num_requests
        self.engine = None if engine is None else load_engine(engine)  # None: each row's own
        self._hw: dict[str, HardwareSpec] = {}
        self._model: dict[str, Any] = {}
        self._cost: dict[tuple, Any] = {}
        self._pred: dict[tuple, Any] = {}

    # ---- specs
    def hardware(self, hw_id: str) -> HardwareSpec:
        if hw_id not in self._hw:
            from .catalog import load_hardware, resolve_hardware_id

            ref = self.hardware_specs.get(hw_id)
            if ref is None:
                try:
                    ref = resolve_hardware_id(hw_id)  # an id or alias (h100-sxm-80gb, H100)
                except SpecError as e:
                    raise SkipRow(str(e)) from None
                if ref is None:
                    raise SkipRow(f"unknown hardware {show(hw_id)} (not a catalog id or alias)")
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
            from .catalog import load_model

            try:
                self._model[ref] = load_model(ref)
            except SpecError as e:
                raise SkipRow(f"unknown model {show(ref)}: {e}") from None
        return self._model[ref]

    def profile_of(self, row: Mapping[str, Any]) -> EngineProfile:
        """The engine profile that prices `row` (`engines.engine_for_row` of its engine column)."""
        return self.engine or load_engine(engine_for_row(str(row.get("engine") or "")))

    def engine_of(self, row: Mapping[str, Any]) -> str:
        return self.profile_of(row).id

    def cost_model(self, row: Mapping[str, Any]) -> Any:
        from .roofline import CostModel
        from .specs import DTypes, Parallelism

        profile = self.profile_of(row)
        key = (row["model"], row["hardware"], row["tp"], row["pp"], row["weight_dtype"],
               row["activation_dtype"], row["kv_dtype"], profile.id)
        if key not in self._cost:
            model = profile_model(self.model(row["model"]), profile)
            hw = apply_profile(self.hardware(row["hardware"]), profile)
            try:
                cost = CostModel(model, hw, Parallelism(row["tp"], row["pp"]),
                                 DTypes(row["weight_dtype"], row["activation_dtype"], row["kv_dtype"]),
                                 link_dtype=profile.link_dtype)
            except SpecError as e:
                raise SkipRow(f"unsupported setting: {e}") from None
            # a GEMM dtype the chip has no rate for would be priced at another format: a guess
            if cost.gemm_dtype != cost.dtypes.gemm and not _fallback_ok(cost.dtypes.gemm, cost.gemm_dtype):
                raise SkipRow(f"{hw.id} has no {cost.dtypes.gemm} tensor rate (dtype unsupported on this chip)")
            self._cost[key] = cost
        return self._cost[key]

    # ---- one row
    def predict_row(self, row: Mapping[str, Any]) -> float:
        """The model's value of `row['metric']` in the row's unit. Raises SkipRow(reason)."""
        value, _ = self.predict_row_detail(row)
        return value

    def predict_row_detail(self, row: Mapping[str, Any]) -> tuple[float, str]:
        """(predicted value, note on any assumption made)."""
        if row["scenario"] == "static_batch":
            return self._static(row)
        return self._serving(row), ""

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
        from .predict import predict_static

        metric = row["metric"]
        cost, _, _, out_len, note = self.static_setting(row)
        key = ("static", id(cost), row["batch_size"], row["input_len"], out_len)
        if key not in self._pred:
            try:
                self._pred[key] = predict_static(cost, row["batch_size"], row["input_len"], out_len)
            except SpecError as e:
                raise SkipRow(str(e)) from None
        pred = self._pred[key]
        v = float(pred[metric])
        if metric == "output_tokens_per_s":
            v *= row["replicas"]  # every replica runs the batch
        elif metric == "output_tokens_per_s_per_gpu":
            v = float(pred["output_tokens_per_s"]) * row["replicas"] / row["num_gpus"]
        return v, note

    def _serving(self, row: Mapping[str, Any]) -> float:
        from .engine import simulate
        from .metrics import summarize
        from .scenario import Scenario

        metric = row["metric"]
        pct = metric_percentile(metric)
        if metric not in SERVING_METRICS and pct is None:
            raise SkipRow(f"metric {metric} is defined for static_batch only")
        ds = (row.get("dataset") or "").strip()
        if serving_rows.is_serving_run_row(row) and ds.lower() not in self.workloads:
            try:  # an inference-perf shared-prefix run: serving_rows maps it
                return serving_rows.predict_metric(self, row, self.profile_of(row))
            except SpecError as e:
                raise SkipRow(str(e)) from None
        if ds:
            if ds.lower() in self.workloads:
                workload = self.workloads[ds.lower()]
            elif ds.lower() == "sharegpt":
                workload = "sharegpt"  # sampled as `vllm bench serve` samples it (sharegpt.py)
            else:
                raise SkipRow(f"dataset {ds} not available; pass --workload {ds}=FILE")
        else:
            if row["input_len"] is None or row["output_len"] is None:
                raise SkipRow("input_len/output_len not stated and no dataset named")
            workload = "random"
        sc_name = row["scenario"]
        rate = math.inf if sc_name == "offline_max_throughput" else row["request_rate"]
        if rate is None:
            rate = math.inf
        conc = row["concurrency"] if sc_name == "closed_loop" else None
        n = self.num_requests or row["num_requests"] or DEFAULT_NUM_REQUESTS
        cost = self.cost_model(row)
        key = ("serve", id(cost), workload, row["input_len"], row["output_len"], rate, conc, n,
               row["max_batch_size"], row["max_num_tokens"], row["replicas"])
        if key not in self._pred:
            try:
                # the row's limits, else its benchmark tool's, else the engine profile's
                limits = row_settings(self.profile_of(row), cost, dict(row), n,
                                      offline=sc_name == "offline_max_throughput" and not self.num_requests)
                sc = Scenario(model=cost.model, hardware=cost.hardware, tp=row["tp"], pp=row["pp"],
                              weight_dtype=row["weight_dtype"], activation_dtype=row["activation_dtype"],
                              kv_dtype=row["kv_dtype"], replicas=row["replicas"], workload=workload,
                              rate=rate, concurrency=conc, input_len=row["input_len"] or 1,
                              output_len=row["output_len"] or 1, **limits)
                w = sc.make_workload()
                res = simulate(cost, w, sc.engine_config(cost), sc.replicas, sc.router)
                profile = self.profile_of(row)  # what the client sees, as Scenario.run does
                res = with_frontend(res, frontend_s_for(profile), lag_steps_for(profile))
                self._pred[key] = (summarize(res, {}), res)
            except SpecError as e:
                raise SkipRow(str(e)) from None
        s, res = self._pred[key]
        if metric not in SERVING_METRICS and metric not in s:
            assert pct is not None
            s.update(summarize(res, {}, (pct,)))  # a percentile the default summary lacks
        v = s.get(SERVING_METRICS.get(metric, metric))
        if v is None or not math.isfinite(float(v)):
            raise SkipRow(f"simulation gave no {metric} (completed {s.get('completed')} of {s.get('num_requests')})")
        return float(v)


def _fallback_ok(wanted: str, got: str) -> bool:
    """A narrower format run on a wider tensor rate is what engines do (fp8 weights on A100
    are dequantized to bf16; int8/int4 weight-only GEMMs run at fp16)."""
    from .specs import DTYPE_BYTES

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


def validate(rows: Iterable[Mapping[str, Any]], *, scenario: str | None = None,
             hardware_filter: str | None = None, skipped: Iterable[dict] | None = None,
             validator: Validator | None = None,
             progress: Callable[[int, int], None] | None = None, **kw: Any) -> dict[str, Any]:
    """Predict every row and summarise the errors.

    `scenario` / `hardware_filter` keep only rows of that scenario / hardware id (others are
    not counted). `skipped` carries rows already skipped while reading. Other keyword
    arguments build the Validator (hardware_specs, workloads, efficiency, num_requests).
    Returns rows, predicted, skipped [{id, reason}], median_ape, p90_ape, mean_signed_error,
    by_scenario / by_hardware / by_source / by_metric ({rows, median_ape, p90_ape,
    mean_signed_error}) and points (per row: id, source, scenario, hardware, model, metric,
    measured, predicted, error_pct).
    """
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
                points.append({"id": row["id"], "source": row["source"], "scenario": row["scenario"],
                               "engine": v.engine_of(row),
                               "hardware": row["hardware"], "model": row["model"], "metric": row["metric"],
                               "measured": row["value"], "predicted": pred,
                               "error_pct": error_pct(pred, row["value"]), "note": note})
        if progress:
            progress(i + 1, len(rows))
    overall = error_stats(p["error_pct"] for p in points)
    return {
        "rows": len(rows) + len(list(skipped or [])),
        "predicted": len(points),
        "skipped": skip,
        "median_ape": overall["median_ape"],
        "p90_ape": overall["p90_ape"],
        "mean_signed_error": overall["mean_signed_error"],
        "by_scenario": _grouped(points, "scenario"),
        "by_engine": _grouped(points, "engine"),
        "by_hardware": _grouped(points, "hardware"),
        "by_source": _grouped(points, "source"),
        "by_metric": _grouped(points, "metric"),
        "points": points,
    }


def summary_table(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Rows for a terminal table: one per source, scenario and hardware, then overall."""
    out = []
    for group, key in (("source", "by_source"), ("engine", "by_engine"), ("scenario", "by_scenario"),
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


def points_frame(result: Mapping[str, Any]) -> Any:
    """The per-row points as a DataFrame (validation.csv)."""
    import pandas as pd

    cols = ["id", "source", "engine", "scenario", "hardware", "model", "metric", "measured", "predicted", "error_pct"]
    return pd.DataFrame([{c: p[c] for c in cols} for p in result["points"]], columns=cols)


__all__ = [
    "METRICS", "SCENARIOS", "SkipRow", "Validator", "error_pct", "error_stats", "load_rows",
    "metric_percentile", "metric_table", "metric_unit", "parse_row", "point_label", "points_frame", "predict_row", "read_measurements", "read_vllm_result",
    "summary_table", "validate",
]
