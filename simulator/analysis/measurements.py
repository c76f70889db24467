"""Measured numbers in: the measurement CSV and `vllm bench serve` result files.

`read_measurements(path)` reads rows in the format of `docs/measurement_schema.md` (one
measured number per row, with its exact settings), checking every cell (one-line errors with
FILE:LINE; `skip_bad_rows` keeps going and reports them). `read_vllm_result(path, model=...,
hardware=...)` turns a `vllm bench serve --save-result` JSON into such rows: the model,
hardware and engine settings come from the caller (the JSON does not record them), lengths
from per-request lists or from the totals, and every percentile key the file has becomes a
row. `load_rows` picks the reader by the file's suffix. Pricing the rows is `validate.py`'s job.
"""


from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from simulator.specs.checks import (
    MAX_BATCH,
    MAX_REQUESTS,
    MAX_RESULT_BYTES,
    MAX_RESULT_NODES,
    MAX_TOKENS,
    SpecError,
    check_int,
    check_path,
    is_number,
    load_json,
    show,
)
from simulator.specs.dtypes import DTYPES
from simulator.specs.fields import Param
from simulator.specs.readers import MAX_TABLE_BYTES, csv_dict_reader, parse_json, read_head

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
    if row["num_gpus"] is None:
        raise ValueError("num_gpus: empty")
    # tp and pp both empty: the source does not state the layout (`layout_stated` False);
    # `validate` assumes one (profiles.apply.assumed_layout) and says so on every such point
    row["layout_stated"] = not (row["tp"] is None and row["pp"] is None)
    for col in ("tp", "pp"):
        if row[col] is None and row["layout_stated"]:
            raise ValueError(f"{col}: empty (give both tp and pp, or neither when the source does not state them)")
    # a disaggregated run's GPUs are its two pools' (`disagg_layout` checks them), not a multiple
    # of one tp (prefill TP4 + decode TP8: 12 GPUs)
    split = row["layout_stated"] and _says_disagg(str(row.get("notes") or ""))
    if row["layout_stated"] and not split and row["num_gpus"] % (row["tp"] * row["pp"]):
        raise ValueError(f"num_gpus: {row['num_gpus']} is not a multiple of tp*pp = {row['tp'] * row['pp']}")
    row["request_rate"] = _parse_float(row["request_rate"], "request_rate", allow_inf=True) if row["request_rate"] else None
    row["value"] = _parse_float(row["value"], "value") if row["value"] else None
    if row["value"] is None:
        raise ValueError("value: empty")
    _check_categories(row)
    row["replicas"] = max(row["num_gpus"] // (row["tp"] * row["pp"]), 1) if row["layout_stated"] else None
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


# --------------------------------------------------------------------------- notes


#: facts the measurement files state only in `notes` (free text), as (key, pattern, type):
#: the run's settings a simulation needs and no column holds
_NOTE_FACTS: tuple[tuple[str, re.Pattern[str], Any], ...] = (
    # MLPerf (dev_mlperf51_offline.csv): LoadGen's min_duration and the run's own mean output
    # per sample (its Tokens/s over its Samples/s: the same makespan cancels)
    ("min_duration_ms", re.compile(r"\bmin_duration (\d+) ms"), int),
    ("run_mean_output", re.compile(r"mean output tokens/sample = (\d+(?:\.\d+)?)"), float),
    ("submitter", re.compile(r"\bsubmitter ([^,;]+)"), str),
    # InferenceMAX (dev_inferencemax_gptoss.csv): lengths uniform in [int(r x nominal), nominal]
    ("range_ratio", re.compile(r"random-range-ratio (\d+(?:\.\d+)?)"), float),
    ("nominal_input_len", re.compile(r"nominal ISL/OSL (\d+)/\d+"), int),
    ("nominal_output_len", re.compile(r"nominal ISL/OSL \d+/(\d+)"), int),
    ("requests_per_slot", re.compile(r"num-prompts = (\d+) x concurrency"), int),
    ("warmups_per_slot", re.compile(r"with (\d+) x concurrency warm-up"), int),
    # InferenceMAX's server layout ("single server, TP8 EP8 dp-attention true"): expert
    # parallelism inside the TP group and data-parallel attention over its ranks
    ("expert_parallel", re.compile(r"\bTP\d+ EP(\d+) dp-attention\b"), int),
    ("dp_attention", re.compile(r"\bTP\d+ EP\d+ dp-attention (true|false)\b"), lambda s: s == "true"),
)


def note_facts(row: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings a row's `notes` state (`_NOTE_FACTS`), plus `ignore_eos` (the notes say
    so). Missing facts are absent from the result."""
    text = str(row.get("notes") or "")
    out: dict[str, Any] = {}
    for key, pattern, kind in _NOTE_FACTS:
        m = pattern.search(text)
        if m:
            out[key] = kind(m.group(1).strip())
    if re.search(r"\bignore_eos\b", text):
        out["ignore_eos"] = True
    return out


#: an MLPerf row's accelerator list, as its notes quote it: "accelerator 'A (x32), B (x16)' x8
#: per node"; a heterogeneous system names each chip with its count
_ACCELERATORS = re.compile(r"\baccelerator '([^']+)' x\d+ per node")
_ACCELERATOR_PART = re.compile(r"^(.+?) \(x(\d+)\)$")


def system_parts(row: Mapping[str, Any]) -> list[tuple[str, int]]:
    """[(accelerator name, count)] of a heterogeneous system whose notes list several chips
    with their counts ("accelerator 'AMD Instinct MI300X 192GB HBM3 (x32), AMD Instinct MI325X
    256GB HBM3e (x16)' x8 per node"); [] for one kind of chip or no such list. The counts must
    add up to the row's num_gpus, else ValueError naming both."""
    m = _ACCELERATORS.search(str(row.get("notes") or ""))
    if not m:
        return []
    parts = []
    for piece in m.group(1).split("), "):
        pm = _ACCELERATOR_PART.match(piece if piece.endswith(")") else piece + ")")
        if not pm:
            return []
        parts.append((pm.group(1).strip(), int(pm.group(2))))
    if len(parts) < 2:
        return []
    total = sum(n for _, n in parts)
    if total != row.get("num_gpus"):
        raise ValueError(f"num_gpus: {row.get('num_gpus')} but the notes list {total} accelerators "
                         f"({', '.join(f'{n} x {name}' for name, n in parts)})")
    return parts


#: a disaggregated run's notes: each pool's layout after the word "prefill" or "decode", up to
#: the other pool, a ";" or the end (InferenceX records prefill_tp/ep/dp_attention/num_workers
#: and the decode_ ones; the notes spell them "TP4 EP4 dp-attention true" as for one server)
_DISAGG_WORD = re.compile(r"\bdisagg", re.I)
_DISAGG_NOT = re.compile(r"(?:\bnon-?|\bnot\s+|\bno\s+)disagg", re.I)
_DISAGG_OFF = re.compile(r"\bdisagg\w*\s*[=:]?\s*(?:false|no|off|0)\s*(?:[;,)]|$)", re.I)
_POOL_TEXT = re.compile(r"\b(prefill|decode)(.*?)(?=\b(?:prefill|decode)|;|$)", re.I | re.S)
_POOL_TP = re.compile(r"(?<![a-z])tp(?:_size)?\s*[=:]?\s*(\d+)", re.I)
_POOL_EP = re.compile(r"(?<![a-z])ep(?:_size)?\s*[=:]?\s*(\d+)", re.I)
_POOL_DPA = re.compile(r"dp[-_ ]?att(?:ention|n)?\s*[=:]?\s*(true|false)", re.I)
#: a pool's worker count inside its own text: "2 x TP4", "TP4 x 2", "2 workers", "num_workers 2"
_POOL_WORKERS = (re.compile(r"(\d+)\s*(?:x|\u00d7)\s*(?=tp)", re.I),
                 re.compile(r"(?<![a-z])tp\s*[=:]?\s*\d+\s*(?:x|\u00d7)\s*(\d+)\b", re.I),
                 re.compile(r"(\d+)\s+(?:workers?|worker\(s\)|replicas?|instances?|servers?)\b", re.I),
                 re.compile(r"(?:num_workers|workers?|replicas?|instances?)\s*[=:]?\s*(\d+)", re.I))
#: ... or before the pool's word: "2 prefill workers", and the "2P1D" shorthand
_POOL_COUNT_BEFORE = re.compile(r"\b(\d+)\s*(?:x\s*)?(prefill|decode)\b", re.I)
_P_D = re.compile(r"\b(\d+)\s*P\s*(\d+)\s*D\b")


def _says_disagg(text: str) -> bool:
    return bool(_DISAGG_WORD.search(text)) and not _DISAGG_NOT.search(text) and not _DISAGG_OFF.search(text)


def disagg_layout(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The two pools of a disaggregated run its notes describe ("disaggregated ... prefill 2
    workers TP4 EP4 dp-attention false, decode 1 worker TP8 EP8 dp-attention true", InferenceX's
    prefill_tp / prefill_num_workers names, "2P1D"): {"prefill": {"workers", "tp", "ep",
    "dp_attention"}, "decode": {...}, "assumed": [what was not stated]}; None when the notes do
    not say the run is disaggregated, or say it is not ("non-disaggregated", "disagg: false").
    Worker counts the notes leave out are taken from the row's num_gpus and pp where that is
    one answer (P tp_p pp + D tp_d pp = num_gpus; both unstated: 1 each if that adds up); EP
    defaults to 1 and dp-attention to false. ValueError (the row is skipped with it) when a
    pool's TP is missing or the pools do not add up to num_gpus."""
    text = str(row.get("notes") or "")
    if not _says_disagg(text):
        return None
    texts: dict[str, str] = {}
    for m in _POOL_TEXT.finditer(text):  # a pool's pieces together ("prefill_tp 4, prefill_ep 4")
        name = m.group(1).lower()
        texts[name] = texts.get(name, "") + " " + m.group(2)
    before = {m.group(2).lower(): int(m.group(1)) for m in _POOL_COUNT_BEFORE.finditer(text)}
    if (pd := _P_D.search(text)) is not None:
        before = {"prefill": int(pd.group(1)), "decode": int(pd.group(2)), **before}
    pools: dict[str, Any] = {}
    for name, seg in texts.items():
        tp = _POOL_TP.search(seg)
        if not tp:
            continue
        ep, dpa = _POOL_EP.search(seg), _POOL_DPA.search(seg)
        workers = next((int(w.group(1)) for pat in _POOL_WORKERS if (w := pat.search(seg))), before.get(name))
        pools[name] = {"workers": workers, "tp": int(tp.group(1)), "ep": int(ep.group(1)) if ep else 1,
                       "dp_attention": bool(dpa and dpa.group(1).lower() == "true")}
    missing = [p for p in ("prefill", "decode") if p not in pools]
    if missing:
        raise ValueError(f"notes: a disaggregated run without the {' and '.join(missing)} pool's TP "
                         "(e.g. 'prefill 1 worker TP4 EP4 dp-attention false, decode 1 worker TP8 ...')")
    return {**pools, "assumed": _pool_counts(pools, row)}


def _pool_counts(pools: dict[str, Any], row: Mapping[str, Any]) -> list[str]:
    """Fill the worker counts the notes leave out from num_gpus (in place) and check that the
    pools add up to it; what was inferred, for the point's note."""
    pp = int(row.get("pp") or 1)
    gpus = row.get("num_gpus")
    p, d = pools["prefill"], pools["decode"]
    per_p, per_d = p["tp"] * pp, d["tp"] * pp
    assumed: list[str] = []
    if gpus is not None:
        gpus = int(gpus)
        if p["workers"] is None and d["workers"] is None:
            if per_p + per_d == gpus:
                p["workers"] = d["workers"] = 1
                assumed.append("1 worker a pool (num_gpus = one of each)")
        else:
            for mine, other, per_m, per_o in ((p, d, per_p, per_d), (d, p, per_d, per_p)):
                if mine["workers"] is None and other["workers"] is not None:
                    rest = gpus - other["workers"] * per_o
                    if rest > 0 and rest % per_m == 0:
                        mine["workers"] = rest // per_m
                        assumed.append(f"{'prefill' if mine is p else 'decode'} workers {mine['workers']} "
                                       "(from num_gpus)")
    if p["workers"] is None or d["workers"] is None:
        raise ValueError(f"notes: a disaggregated run whose worker counts neither the notes nor num_gpus "
                         f"({gpus}) give (prefill TP{p['tp']}, decode TP{d['tp']}, pp {pp})")
    if min(p["workers"], d["workers"]) < 1:
        raise ValueError("notes: a disaggregated pool with 0 workers")
    total = p["workers"] * per_p + d["workers"] * per_d
    if gpus is not None and total != gpus:
        raise ValueError(f"num_gpus: {gpus} but the notes' pools hold {total} GPUs ({p['workers']} x TP{p['tp']} "
                         f"prefill + {d['workers']} x TP{d['tp']} decode, pp {pp})")
    return assumed


#: speculative decoding a row's notes state (InferenceX records spec_method / MTP_MODE; TRT-LLM
#: spells it decoding_type MTP with num_nextn_predict_layers or max_draft_len, vLLM method /
#: num_speculative_tokens)
_SPEC_METHOD = re.compile(r"\b(?:spec(?:ulative)?[_ -]?(?:method|decoding|decode|config)|decoding_type)\s*[=:]?\s*"
                          r"['\"]?([a-z_0-9]+)", re.I)
_SPEC_KNOWN = re.compile(r"\bmethod['\"]?\s*[=:]\s*['\"]?(mtp|eagle3?|ngram|draft_model|[a-z_]*_mtp)\b", re.I)
_SPEC_BARE = re.compile(r"\b(mtp|eagle3?)\b", re.I)
_SPEC_OFF = ("none", "off", "false", "no", "disabled", "0")
_SPEC_NEG = re.compile(r"\b(?:no|without|not)\s+(?:mtp|eagle3?|speculative)|\b(?:mtp|eagle3?|speculative(?: decoding)?)\b"
                       r"[^;,.]{0,24}?\b(?:off|disabled|false|none|unused|not loaded|not used)\b", re.I)
_SPEC_K = (re.compile(r"(?:num_speculative_tokens|num_nextn_predict_layers|max_draft_len|speculative tokens|"
                      r"draft tokens|mtp layers)\s*[=:]?\s*(\d+)", re.I),
           re.compile(r"\bmtp[\s=:_-]*(?:x\s*)?(\d+)\b", re.I))
_SPEC_LENGTH = re.compile(r"acceptance[_ ]length\s*[=:]?\s*(\d+(?:\.\d+)?)", re.I)
_SPEC_RATE = re.compile(r"acceptance[_ ]rate\s*[=:]?\s*(\d*\.\d+|\d+(?:\.\d+)?\s*%|[01])(?![\d.])", re.I)
_SPEC_METHODS = ("mtp", "eagle", "draft", "ngram", "medusa")


def speculative_stated(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """The speculative decoding a row's notes state, as `--speculative-config` would give it
    ({"method", "num_speculative_tokens", and mean_acceptance_length or acceptance_rate where
    stated}); None when the notes state none, or say it is off ("spec_method none", "no MTP",
    "MTP mode: off", "MTP head unused"). A method llmsim does not know is returned under its own
    name (the config's check refuses it by name)."""
    text = str(row.get("notes") or "")
    if _SPEC_NEG.search(text):
        return None
    word = None
    for m in _SPEC_METHOD.finditer(text):  # the first value that names a method or says off
        w = m.group(1).lower()
        if w in _SPEC_OFF:
            return None
        if any(k in w for k in _SPEC_METHODS):
            word = w
            break
    if word is None:
        known = _SPEC_KNOWN.search(text) or _SPEC_BARE.search(text)
        if known is None:
            return None
        word = known.group(1).lower()
    method = ("mtp" if "mtp" in word else "eagle3" if "eagle3" in word else "eagle" if "eagle" in word
              else "draft_model" if "draft" in word else "ngram" if "ngram" in word else word)
    out: dict[str, Any] = {"method": method}
    k = next((int(x.group(1)) for pat in _SPEC_K if (x := pat.search(text))), None)
    if k is not None:
        out["num_speculative_tokens"] = k
    if (length := _SPEC_LENGTH.search(text)) is not None:
        out["mean_acceptance_length"] = float(length.group(1))
    elif (rate := _SPEC_RATE.search(text)) is not None:
        v = rate.group(1).replace(" ", "")
        out["acceptance_rate"] = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    return out


#: engine families for grouping errors (the text before any parenthesis names the engine)
_FAMILIES = (("tensorrt-llm", "trtllm"), ("trtllm", "trtllm"), ("sglang", "sglang"), ("vllm", "vllm"),
             ("llama.cpp", "llama.cpp"), ("deepspeed", "deepspeed"), ("sambaflow", "sambaflow"),
             ("lmdeploy", "lmdeploy"), ("gpt-fast", "gpt-fast"))


def engine_family(engine_text: str) -> str:
    """The engine a row's `engine` column names (trtllm, vllm, sglang, llama.cpp, deepspeed,
    ...), "unknown" when it names none: for grouping errors, not for pricing."""
    low = (engine_text or "").lower()
    for part in (low.split("(", 1)[0], low):
        for key, fam in _FAMILIES:
            if key in part:
                return fam
    return "unknown"


def read_measurements(path: str | Path, skip_bad_rows: bool = False) -> tuple[list[dict], list[dict]]:
    """Read a docs/measurement_schema.md measurement CSV. Returns (rows, skipped).

    A malformed row raises SpecError `FILE:LINE: column: problem` (LINE counts the header as
    line 1), unless `skip_bad_rows`, which records it in `skipped` with that reason instead.
    Duplicate ids are malformed. A file that is not UTF-8, holds a field longer than the csv
    module's limit (131,072 characters) or fails to read is one SpecError naming FILE:LINE.
    """
    p = check_path("path", path)
    reader, at, fh = csv_dict_reader(p, MAX_TABLE_BYTES, "measurement CSV")
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


_MS = Param("number", low=0.0, high=1e12, optional=True)  # a latency statistic in ms
#: request counts: the row's num_requests bound (MAX_REQUESTS) is applied by `parse_row`
_COUNT = Param("int", low=0, high=10 ** 15, optional=True)
_TOKENS_TOTAL = Param("int", low=0, high=10 ** 18, optional=True)
_LENS = Param("list", high=MAX_REQUESTS, optional=True, item=Param("int", low=0, high=MAX_TOKENS))
#: the fields of a `vllm bench serve --save-result` JSON that validate reads or that state the
#: run, each with its type and domain (declared once; `check_vllm_result` checks every one the
#: file has, then their consistency). request_rate is a number >= 0, "inf" or null (`num`).
VLLM_RESULT_FIELDS: dict[str, Param] = {
    "backend": Param("text", optional=True),
    "num_prompts": Param("int", low=1, high=10 ** 15, optional=True),
    "max_concurrency": Param("int", low=1, high=10 ** 15, optional=True),
    "burstiness": Param("number", low=0.0, high=1e6, optional=True),
    "duration": Param("number", low=0.0, high=1e10, optional=True),
    "completed": _COUNT,
    "failed": _COUNT,
    "total_input_tokens": _TOKENS_TOTAL,
    "total_output_tokens": _TOKENS_TOTAL,
    "request_throughput": Param("number", low=0.0, high=1e9, optional=True),
    "output_throughput": Param("number", low=0.0, high=1e12, optional=True),
    "total_token_throughput": Param("number", low=0.0, high=1e12, optional=True),
    "input_lens": _LENS,
    "output_lens": _LENS,
    **{f"{s}_{k}_ms": _MS for k in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99")},
}


def check_vllm_result(data: Mapping[str, Any], p: Path) -> None:
    """Every field of `VLLM_RESULT_FIELDS` the result has, in its domain, and the fields
    consistent with each other: completed <= num_prompts; input_lens and output_lens of equal
    length, no longer than the requests sent (num_prompts) nor than completed plus the failed
    ones the file lists (`errors`, vLLM's per-request error texts; empty = success); a
    completed run has a duration > 0."""
    for key, dom in VLLM_RESULT_FIELDS.items():
        if key in data:
            dom.check(f"{p}: {key}", data[key])
    sent, done = data.get("num_prompts"), data.get("completed")
    if sent is not None and done is not None and done > sent:
        raise SpecError(f"{p}: completed: {done} is more than num_prompts {sent}")
    lens = {k: data[k] for k in ("input_lens", "output_lens") if isinstance(data.get(k), list)}
    if len(lens) == 2 and len(lens["input_lens"]) != len(lens["output_lens"]):
        raise SpecError(f"{p}: input_lens has {len(lens['input_lens'])} entries, output_lens "
                        f"{len(lens['output_lens'])}; one per request each")
    errors = data.get("errors")
    failed = sum(1 for e in errors if e) if isinstance(errors, list) else 0
    for k, v in lens.items():
        if sent is not None and len(v) > sent:
            raise SpecError(f"{p}: {k}: {len(v)} entries, more than num_prompts {sent}")
        if done is not None and len(v) > done + failed:
            raise SpecError(f"{p}: {k}: {len(v)} entries, more than the {done} completed requests"
                            + (f" and {failed} failed ones" if failed else ""))
    if done and data.get("duration") is not None and not data["duration"] > 0:
        raise SpecError(f"{p}: duration: {show(data['duration'])} must be > 0 s for {done} completed requests")


def _saved_engine(data: Mapping[str, Any], p: Path) -> str:
    """The engine profile an llmsim-written result ran under (its `llmsim_scenario`, compact
    JSON text or a mapping). A missing or broken one is refused, never re-priced as generic."""
    saved = data.get("llmsim_scenario")
    if isinstance(saved, str):  # written as --metadata text (cli/vllm_result.py)
        saved = parse_json(saved, f"{p}: llmsim_scenario")
    if not isinstance(saved, dict):
        raise SpecError(f"{p}: llmsim_scenario: {show(saved)} is not the saved scenario (a mapping, or its "
                        "JSON text) that backend 'llmsim' writes")
    engine = saved.get("engine")
    if engine is not None and not (isinstance(engine, str) and engine.strip()):
        raise SpecError(f"{p}: llmsim_scenario.engine: {show(engine)} is not an engine profile id (or null)")
    from simulator.profiles.profile import _engine_files

    known = _engine_files()
    if engine is not None and engine.strip() not in known:
        # rows are priced by a built-in profile (`engine_for_row`): anything else was priced as
        # generic without a word, whatever the run used (a user profile file, a bad id)
        raise SpecError(f"{p}: llmsim_scenario.engine: {show(engine)} is not a built-in engine profile "
                        f"({', '.join(sorted(known))}); validate prices a result by the profile it names")
    from simulator.workloads.named import named_workload

    workload = saved.get("workload")
    if (saved.get("rate") is None and saved.get("ramp_up_strategy") is None and isinstance(workload, str)
            and named_workload(workload) is None and data.get("max_concurrency") is None):
        # a trace replayed at its own timing: the file says request_rate "inf" (vLLM's field has
        # no other spelling), which prices an offline run; the own result was off by 1,268 %
        raise SpecError(f"{p}: llmsim_scenario: the run replayed trace {workload!r} at its own arrival times, "
                        "which request_rate cannot record (the file says inf: all at once); validate a run "
                        "given a --rate (or re-simulate this one)")
    return engine.strip() if engine else "generic"


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
    data = load_json(p, MAX_RESULT_BYTES, "vllm bench serve result", MAX_RESULT_NODES)
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
    check_vllm_result(data, p)  # after `num`: a setting that is no number at all keeps its message

    inp, out, ds, length_note = _vllm_lengths(data, input_len, output_len, dataset)
    tp_pp = tp * pp
    ngpu = num_gpus or tp_pp
    engine = str(data.get("backend") or "vllm")
    if engine == "llmsim":  # llmsim's own saved run: the engine profile it ran under
        engine = _saved_engine(data, p)
    base = {
        "source": f"{p.name} (vllm bench serve, backend {data.get('backend', '?')}, {data.get('date', 'undated')})",
        "model": model, "hardware": hardware, "num_gpus": ngpu, "tp": tp, "pp": pp,
        "engine": engine, "weight_dtype": weight_dtype,
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
        is_json = read_head(p, 64).lstrip().startswith(b"{")
    if is_json:
        if not vllm.get("model") or not vllm.get("hardware"):
            raise SpecError(f"{p}: a vLLM result JSON does not record the model or hardware; "
                            "pass --model and --hardware")
        return read_vllm_result(p, **vllm), []
    return read_measurements(p, skip_bad_rows)


def check_rows(rows: Any, name: str = "rows") -> list[Mapping[str, Any]]:
    """Measurement rows given to the Python API (`validate_rows`, `calibrate_hardware`) as a
    list, refused with one line unless each is a mapping holding every `REQUIRED_COLUMNS`
    (`read_measurements` gives such rows; issue 26: `validate_rows([{'x': 1}])` was a KeyError)."""
    from collections.abc import Iterable

    if isinstance(rows, (str, bytes, Mapping)) or not isinstance(rows, Iterable):
        raise SpecError(f"{name}: {show(rows)} is not a list of rows (mappings of column -> value)")
    out = list(rows)
    for i, r in enumerate(out):
        if not isinstance(r, Mapping):
            raise SpecError(f"{name}[{i}]: {show(r)} is not a mapping of column -> value")
        missing = [c for c in REQUIRED_COLUMNS if c not in r]
        if missing:
            raise SpecError(f"{name}[{i}]: missing column(s) {', '.join(missing)} (required: "
                            f"{', '.join(REQUIRED_COLUMNS)}; read_measurements gives such rows)")
    return out

