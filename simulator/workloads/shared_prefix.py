"""Prompts with shared prefixes: shared system prompts, multi-turn chat, Mooncake `hash_ids`.

A prompt is a sequence of *segments* `(segment_id, num_tokens)`. A segment id names a token
stream: two segments with the same id hold the same tokens (token j of segment s is the same
token wherever it appears), segments with different ids share none. A generator gives every
distinct text its own id, so a prefix cache can be exact without token ids.

`block_hashes(segments, B)` chains the prompt's *full* blocks of B tokens by prefix, as vLLM V1's
prefix cache does (`hash_block_tokens(parent_hash, block_token_ids)`): block k's hash is a hash
of (block k-1's hash, the tokens of block k), so two prompts share block k's hash iff their first
(k + 1) x B tokens are identical; a partial last block gets no hash (it is never shared).

Generators (all deterministic from `seed`):

- `shared_prefix`: kubernetes-sigs/inference-perf's `shared_prefix` data generator
  (`inference_perf/datagen/synthetic/shared_prefix_datagen.py`): `num_groups` system prompts of
  `system_prompt_len` tokens, `num_prompts_per_group` questions of `question_len` tokens each,
  all N = groups x prompts shuffled; request i uses prompt i mod N. With `multi_turn`, prompt
  index p is a user session and request i is round i div N of session i mod N: rounds of a
  session are serialised and each re-sends the history (inference-perf's `LocalUserSession`:
  context starts as the system prompt; a round sends context + question; the context then
  becomes that prompt + the response).
- `multi_turn_chats`: chat conversations whose turn k sends the system prompt and every earlier
  user turn and answer, then user turn k; the next turn is sent a think time after the answer.
- `mooncake_segments` / `read_mooncake_prefix`: a Mooncake trace row's `hash_ids` (one id per
  512-token block, chained by prefix in the published traces) as segments.

Departures from the sources, on purpose: token texts are not generated, so the separators
inference-perf inserts (" " between context and question) and any BOS count as zero tokens; the
shuffle uses its own seeded generator (same structure, not inference-perf's exact order).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np

from simulator.specs.checks import MAX_TOKENS, SpecError, check_int
from simulator.workloads.workload import Workload, arrivals, object_column

#: The parent hash of block 0 (any fixed int: only equality of hashes matters).
_ROOT_HASH = 0

#: prompts (groups x prompts per group) a shared-prefix workload may shuffle and build
MAX_PROMPTS = 10_000_000

#: Tokens per `hash_ids` block in the Mooncake traces.
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Segment:
    """`num_tokens` tokens of the token stream `segment_id` (from its start)."""

    segment_id: int
    num_tokens: int

    def __post_init__(self) -> None:
        if isinstance(self.num_tokens, bool) or not isinstance(self.num_tokens, (int, np.integer)):
            raise SpecError(f"segment.num_tokens: {self.num_tokens!r} must be an integer >= 0")
        if self.num_tokens < 0:
            raise SpecError(f"segment.num_tokens: {self.num_tokens!r} must be an integer >= 0")
        if isinstance(self.segment_id, bool) or not isinstance(self.segment_id, (int, np.integer)):
            raise SpecError(f"segment.segment_id: {self.segment_id!r} must be an integer")


class Turn(Sequence[Segment]):
    """A prompt that is an earlier prompt `parent` followed by the segments `own`: a multi-turn
    request re-sends its session's history. Stored as a link to the parent, so the n turns of
    a session take O(n) memory, not the O(n^2) of flattened tuples (issue 26, cause 8); it reads
    as the flat sequence of segments (len, index, slice, iteration, == with a tuple)."""

    __slots__ = ("parent", "own", "_len", "tokens")

    def __init__(self, parent: Sequence[Segment], own: tuple[Segment, ...]) -> None:
        self.parent = parent
        self.own = own
        self._len = len(parent) + len(own)
        #: total tokens, kept so `prompt_tokens` is O(1) rather than a walk of the history
        self.tokens = prompt_tokens(parent) + sum(s.num_tokens for s in own)

    def __len__(self) -> int:
        return self._len

    def _parts(self) -> list[Sequence[Segment]]:
        """The segment runs from the first turn on (iterative: sessions have many turns)."""
        parts: list[Sequence[Segment]] = []
        node: Sequence[Segment] = self
        while isinstance(node, Turn):
            parts.append(node.own)
            node = node.parent
        parts.append(node)
        parts.reverse()
        return parts

    def __iter__(self) -> Iterator[Segment]:
        return itertools.chain.from_iterable(self._parts())

    @overload
    def __getitem__(self, i: int) -> Segment: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Segment, ...]: ...

    def __getitem__(self, i: int | slice) -> Segment | tuple[Segment, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        k = i + self._len if i < 0 else i
        if not 0 <= k < self._len:
            raise IndexError("prompt segment index out of range")
        node: Sequence[Segment] = self
        while isinstance(node, Turn):  # a loop, not recursion: sessions have many turns
            start = node._len - len(node.own)
            if k >= start:
                return node.own[k - start]
            node = node.parent
        return node[k]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (tuple, Turn)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Turn({len(self)} segments, {self.tokens} tokens)"


Prompt = Sequence[Segment]


def prompt_tokens(segments: Sequence[Segment]) -> int:
    """Total tokens of a prompt."""
    if isinstance(segments, Turn):
        return segments.tokens
    return sum(s.num_tokens for s in segments)


def block_hashes(segments: Sequence[Segment], block_size: int) -> list[int]:
    """Hashes of the prompt's full blocks, chained by prefix (vLLM V1 prefix caching).

    h_0 = H(ROOT, b_0), h_k = H(h_{k-1}, b_k), where b_k is block k's token content written as
    its runs (segment_id, first offset, length). The content is canonical (segments always start
    at offset 0), so equal hashes mean equal token prefixes (up to 64-bit collisions). Python's
    hash of int tuples does not depend on PYTHONHASHSEED, so the values are reproducible.
    """
    check_int("block_size", block_size)
    chain = _Chain(block_size)
    chain.extend(segments)
    return chain.hashes.tolist()


#: where a chain stood: (chain, full blocks, parent hash, open block's runs, room left)
_Mark = tuple["_Chain", int, int, tuple[tuple[int, int, int], ...], int]


class _Chain:
    """The block-hash chain of a token sequence that grows segment by segment: the full blocks'
    hashes (`prefix`, a frozen view of the chain it was forked from, then its own `hashes`) and
    the open block (its parent hash, runs and room left). A multi-turn session's turns extend
    one chain, and the prompts of a group fork the group's system-prompt chain, so every hash
    is computed once and stored once."""

    __slots__ = ("prefix", "hashes", "parent", "runs", "room", "bs")

    def __init__(self, block_size: int) -> None:
        self.prefix: Sequence[int] = ()
        # 8 bytes a hash (a list would hold a pointer and a 32-byte int object for each)
        self.hashes = array("q")
        self.parent = _ROOT_HASH
        self.runs: list[tuple[int, int, int]] = []
        self.bs = self.room = block_size

    def __len__(self) -> int:
        return len(self.prefix) + len(self.hashes)

    def view(self) -> HashView:
        """The chain's full-block hashes as they are now (later growth stays out of the view)."""
        return HashView(self.prefix, self.hashes, len(self))

    def mark(self) -> _Mark:
        """Where the chain is now, to extend it (or a fork of it) from here later (`resume`)."""
        return (self, len(self), self.parent, tuple(self.runs), self.room)

    @staticmethod
    def resume(mark: _Mark) -> _Chain:
        """The chain at `mark`: the chain itself while nothing was added since, else a fork
        whose prefix is a view of the marked hashes (shared, not copied)."""
        chain, n, parent, runs, room = mark
        if len(chain) == n and chain.parent == parent and chain.room == room and tuple(chain.runs) == runs:
            return chain
        fork = _Chain(chain.bs)
        fork.prefix = HashView(chain.prefix, chain.hashes, n)
        fork.parent, fork.runs, fork.room = parent, list(runs), room
        return fork

    def extend(self, segments: Sequence[Segment]) -> None:
        out, runs, parent, room, bs = self.hashes, self.runs, self.parent, self.room, self.bs
        for seg in segments:
            off = 0
            left = int(seg.num_tokens)
            sid = int(seg.segment_id)
            while left > 0:
                take = min(left, room)
                runs.append((sid, off, take))
                off += take
                left -= take
                room -= take
                if room == 0:
                    parent = hash((parent, tuple(runs)))
                    out.append(parent)
                    runs = []
                    room = bs
        self.runs, self.parent, self.room = runs, parent, room


class HashView(Sequence[int]):
    """The first `n` hashes of `prefix` followed by the list `base`: a request's block hashes
    as a view of its session's or group's shared chain (no copy per request)."""

    __slots__ = ("prefix", "base", "n", "_p")

    def __init__(self, prefix: Sequence[int], base: Sequence[int], n: int) -> None:
        self.prefix = prefix
        self.base = base
        self.n = n
        self._p = len(prefix)

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...

    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            start, stop, step = i.indices(self.n)
            if step == 1 and start >= self._p:
                return list(self.base[start - self._p:stop - self._p])
            return list(itertools.islice(self, start, stop, step)) if step > 0 else list(self)[i]
        k = i + self.n if i < 0 else i
        if not 0 <= k < self.n:
            raise IndexError("block hash index out of range")
        return self.prefix[k] if k < self._p else self.base[k - self._p]

    def __iter__(self) -> Iterator[int]:
        if self.n <= self._p:
            return itertools.islice(self.prefix, self.n)
        return itertools.chain(self.prefix, itertools.islice(self.base, self.n - self._p))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, HashView)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"HashView({list(self)!r})"


def _prompt_hashes(prompts: Sequence[Sequence[Segment]], block_size: int) -> list[Sequence[int]]:
    """Per prompt, its full blocks' hashes, each computed once and stored once: the same prompt
    object (shared-prefix cycles its N prompts) or an equal short flat prompt gets the same
    list, and a `Turn` extends (or forks) its parent's chain, so a request holds a `HashView`,
    not a copy. Memory and time are then linear in the requests for multi-turn sessions, not
    quadratic in their length, and a group's system prompt is hashed once (issue 26)."""
    check_int("block_size", block_size)
    marks: dict[int, _Mark] = {}  # id(prompt or parent) -> where its chain ends
    keep: list[Sequence[Segment]] = []  # the objects marked (so no id is reused meanwhile)
    memo: dict[int, Sequence[int]] = {}
    flat: dict[tuple[Segment, ...], Sequence[int]] = {}

    parents = {id(p.parent) for p in prompts if isinstance(p, Turn)}

    def chain_of(p: Sequence[Segment]) -> _Chain:
        # p and its ancestors not hashed yet, nearest first (a loop: sessions have many turns);
        # the farthest is a flat prompt or a Turn whose parent is hashed
        path: list[Sequence[Segment]] = []
        node: Sequence[Segment] | None = p
        while node is not None and id(node) not in marks:
            path.append(node)
            node = node.parent if isinstance(node, Turn) else None
        if not path:  # p was hashed as an ancestor of an earlier prompt
            return _Chain.resume(marks[id(p)])
        chain = _Chain(block_size)
        for q in reversed(path):
            if isinstance(q, Turn):  # its parent was hashed (marked) before it
                chain = _Chain.resume(marks[id(q.parent)])
                chain.extend(q.own)
            else:
                chain.extend(q)
            if q is not p or id(p) in parents:
                marks[id(q)] = chain.mark()
                keep.append(q)
        return chain

    out: list[Sequence[int]] = []
    for p in prompts:
        got = memo.get(id(p))
        if got is None:
            key = tuple(p) if isinstance(p, tuple) or (isinstance(p, Turn) and len(p) <= 4) else None
            got = flat.get(key) if key is not None else None
            if got is None:
                got = chain_of(p).view()
                if key is not None:
                    flat[key] = got
            memo[id(p)] = got
            keep.append(p)
        out.append(got)
    return out


def shared_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading block hashes two prompts share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PrefixWorkload:
    """Requests whose prompts carry their prefix structure.

    Request i is sent at max(arrival_s[i], finish of request parent[i] + think_time_s[i]) when
    parent[i] >= 0 (an earlier round of the same session, which must complete first), else at
    arrival_s[i]. input_len[i] = total tokens of prompts[i]; output_len[i] >= 1.
    """

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    prompts: tuple[Prompt, ...]
    session: np.ndarray
    parent: np.ndarray
    think_time_s: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.prompts)
        for name in ("arrival_s", "input_len", "output_len", "session", "parent", "think_time_s"):
            if len(getattr(self, name)) != n:
                raise SpecError(
                    f"prefix workload: {name} has {len(getattr(self, name))} rows, not {n}"
                )
        if n == 0:
            return
        if not np.all(np.isfinite(self.arrival_s)) or np.any(self.arrival_s < 0):
            raise SpecError("prefix workload: arrival_s must be finite and >= 0")
        if np.any(np.diff(self.arrival_s) < 0):
            raise SpecError("prefix workload: arrival_s must be nondecreasing")
        if np.any(self.output_len < 1) or np.any(self.input_len < 1):
            raise SpecError("prefix workload: input_len and output_len must be >= 1")
        lens = np.array([prompt_tokens(p) for p in self.prompts], dtype=np.int64)
        if not np.array_equal(lens, self.input_len):
            i = int(np.flatnonzero(lens != self.input_len)[0])
            raise SpecError(
                f"prefix workload: request {i}: input_len {int(self.input_len[i])} != "
                f"its segments' {int(lens[i])} tokens"
            )
        idx = np.arange(n)
        if np.any(self.parent >= idx) or np.any(self.parent < -1):
            raise SpecError("prefix workload: parent[i] must be -1 or an earlier request")
        if not np.all(np.isfinite(self.think_time_s)) or np.any(self.think_time_s < 0):
            raise SpecError("prefix workload: think_time_s must be finite and >= 0")

    @property
    def num_requests(self) -> int:
        return len(self.prompts)

    def block_hashes(self, block_size: int) -> list[Sequence[int]]:
        """Per request, its full blocks' chained hashes (shared between requests, `_prompt_hashes`)."""
        return _prompt_hashes(self.prompts, block_size)

    def to_workload(self, name: str = "", clock_start_s: float | None = None) -> Workload:
        """The engine's `Workload`, carrying the prompts (`extra["prompt_segments"]`) and,
        when any request has a parent, `parent` and `think_time_s` (the engine releases
        request i at max(arrival_s[i], finish of parent[i] + think_time_s[i]));
        `clock_start_s`: `Workload.clock_start_s` (0 for a load generator's schedule)."""
        extra: dict[str, np.ndarray] = {"prompt_segments": object_column(self.prompts)}
        if np.any(self.parent >= 0):
            extra["parent"] = self.parent
            extra["think_time_s"] = self.think_time_s
            extra["session"] = self.session
        return Workload(self.arrival_s, self.input_len, self.output_len, name=name, extra=extra,
                        clock_start_s=clock_start_s)


class NoHashes(Sequence[Sequence[int]]):
    """`n` requests none of whose blocks is named (no prompt structure): every request's hashes
    are the one empty tuple, at no memory per request (a 1M-request trace under an engine
    with prefix caching on, issue 26)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return NoHashes(len(range(self.n)[i]))
        range(self.n)[i]  # IndexError as a list would raise it
        return ()


def request_block_hashes(wl: Workload, block_size: int) -> Sequence[Sequence[int]]:
    """Per request of `wl`, its prompt's full-block hashes for blocks of `block_size` tokens:
    from `extra["prompt_segments"]`, else from Mooncake `extra["hash_ids"]` (512-token blocks,
    re-cut to `block_size` through `mooncake_segments`), else none (no request shares a block).
    Hash lists are shared, never copied per request (`_prompt_hashes`)."""
    n = wl.num_requests
    if "prompt_segments" in wl.extra:
        hashes = _prompt_hashes(list(wl.extra["prompt_segments"]), block_size)
        if "parent" in wl.extra:
            _extend_to_answers(hashes, wl, block_size)
        return hashes
    if "hash_ids" in wl.extra:
        return _mooncake_hashes(list(wl.extra["hash_ids"]), wl.input_len.tolist(), block_size)
    return NoHashes(n)


def _mooncake_hashes(hash_ids: Sequence[Sequence[int]], input_len: Sequence[int],
                     block_size: int) -> list[Sequence[int]]:
    """Per Mooncake row, the block hashes of `mooncake_segments(ids, length, _UNIQUE_BASE + i)`,
    each stored once: the hash of the last block of a 512-token id names its whole prefix (the
    chain), so `nodes` maps it to the chain and length where that prefix ends, and a row whose
    leading ids were seen continues along (or forks) that chain instead of storing them again.
    A row holds a `HashView`; only its unseen blocks cost memory, 8 bytes each (issue 26: 20k
    rows of 64k tokens took 225 kB a row as lists of int objects). With a block size that does
    not divide 512 every row's hashes are its own (no sharing)."""
    check_int("block_size", block_size)
    out: list[Sequence[int]] = []
    share = MOONCAKE_BLOCK_TOKENS % block_size == 0
    nodes: dict[int, tuple[_Chain, int]] = {}  # last hash of a 512-token prefix -> (chain, its length)
    for i, (hids, length) in enumerate(zip(hash_ids, input_len, strict=True)):
        segs = mooncake_segments(list(hids), int(length), unique_id=_UNIQUE_BASE + i)  # checks the row
        chain, at, k = _Chain(block_size), 0, 0  # the chain holding this row's prefix, the prefix's length
        while share and k < len(segs) and segs[k].num_tokens == MOONCAKE_BLOCK_TOKENS:
            probe = _Chain(block_size)  # this id's blocks, chained from the prefix's last hash
            probe.parent = _hash_at(chain, at - 1)
            probe.extend(segs[k:k + 1])
            k += 1
            node = nodes.get(probe.hashes[-1])
            if node is not None:  # seen: continue along the chain that holds this prefix
                chain, at = node
                continue
            chain = _tip(chain, at)
            chain.hashes.extend(probe.hashes)
            chain.parent = probe.hashes[-1]
            at = len(chain)
            nodes[chain.parent] = (chain, at)
        if k < len(segs):  # a partial last id, an unshared tail, or no sharing: this row's own blocks
            chain = _tip(chain, at)
            chain.extend(segs[k:])
            out.append(chain.view())
        else:
            out.append(HashView(chain.prefix, chain.hashes, at))
    return out


def _hash_at(chain: _Chain, k: int) -> int:
    """Hash k of the chain (the root hash for k = -1)."""
    if k < 0:
        return _ROOT_HASH
    p = len(chain.prefix)
    return chain.prefix[k] if k < p else chain.hashes[k - p]


def _tip(chain: _Chain, at: int) -> _Chain:
    """A chain to extend from its block `at` (a boundary between blocks): the chain itself when
    it ends there with no open block, else a fork sharing its first `at` hashes."""
    if at == len(chain) and not chain.runs:
        chain.parent = _hash_at(chain, at - 1)
        return chain
    fork = _Chain(chain.bs)
    fork.prefix = HashView(chain.prefix, chain.hashes, at)
    fork.parent = _hash_at(chain, at - 1)
    return fork


def _extend_to_answers(hashes: list[Sequence[int]], wl: Workload, block_size: int) -> None:
    """A request with a later turn also names the blocks of its answer: the child's prompt
    starts with the parent's prompt + answer, so the child's leading hashes are the parent's
    whole sequence (vLLM hashes the blocks of generated tokens too). A view of the child's
    shared list, not a copy."""
    for c, p in enumerate(wl.extra["parent"].tolist()):
        if p >= 0:
            full = (int(wl.input_len[p]) + int(wl.output_len[p])) // block_size
            if full > len(hashes[p]):
                child = hashes[c]
                hashes[p] = (HashView(child.prefix, child.base, min(full, child.n)) if isinstance(child, HashView)
                             else list(child[:full]))


#: segment ids of Mooncake prompt tails not covered by hash_ids (apart from generator ids)
_UNIQUE_BASE = 1 << 60


def _pos_int(v: object, what: str, minimum: int = 1) -> int:
    return int(check_int(what, v, minimum))


def _nonneg_float(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        raise SpecError(f"{what}: {v!r} is not a number")
    x = float(v)
    if not (math.isfinite(x) and x >= 0):
        raise SpecError(f"{what}: {v!r} must be a finite number >= 0")
    return x


def shared_prefix(
    num_groups: int,
    num_prompts_per_group: int,
    system_prompt_len: int,
    question_len: int,
    output_len: int,
    num_requests: int | None = None,
    *,
    rate: float = math.inf,
    process: str = "constant",
    burstiness: float = 1.0,
    multi_turn: bool = False,
    seed: int = 0,
) -> PrefixWorkload:
    """inference-perf's shared-prefix workload (see the module docstring).

    Segment ids: system prompt of group g is g; question of prompt p (group p div
    num_prompts_per_group) is num_groups + p; with `multi_turn`, the answer to request i is
    num_groups + N + i. `num_requests` defaults to N = groups x prompts (one round).
    Arrivals from `simulator.workloads.workload.arrivals`: `process` "poisson" is what
    inference-perf's `load.type: constant` sends (n exponential gaps rescaled so the last
    request goes out at n / rate, `inference_perf/loadgen/load_timer.py` ConstantLoadTimer;
    the dev_serving.csv runs), "constant" evenly spaced ((k + 1) / rate), "gamma" (`burstiness`).
    """
    g = _pos_int(num_groups, "num_groups")
    ppg = _pos_int(num_prompts_per_group, "num_prompts_per_group")
    s_len = _pos_int(system_prompt_len, "system_prompt_len", 0)
    q_len = _pos_int(question_len, "question_len", 0)
    o_len = _pos_int(output_len, "output_len")
    if s_len + q_len < 1:
        raise SpecError("system_prompt_len + question_len: must be >= 1 token")
    if s_len + q_len > MAX_TOKENS:
        raise SpecError(f"system_prompt_len + question_len: {s_len} + {q_len} tokens; a prompt is at most "
                        f"{MAX_TOKENS:,} tokens")
    n_prompts = g * ppg
    if n_prompts > MAX_PROMPTS:
        raise SpecError(f"num_groups x num_prompts_per_group: {g} x {ppg} = {n_prompts:,} prompts; at most "
                        f"{MAX_PROMPTS:,} (each is shuffled and built before the run)")
    n = n_prompts if num_requests is None else _pos_int(num_requests, "num_requests")
    # checked before anything is built (issue 26): a multi-turn round re-sends the history, so
    # the last round's prompt is the system prompt + every earlier question and answer
    rounds = (n - 1) // n_prompts if multi_turn else 0
    longest = s_len + q_len + rounds * (q_len + o_len)
    if longest > MAX_TOKENS:
        raise SpecError(f"system_prompt_len: a prompt of {longest:,} tokens (system {s_len} + question {q_len}"
                        + (f", plus {rounds:,} earlier rounds of {q_len} + {o_len} tokens re-sent" if rounds else "")
                        + f"); a prompt is at most {MAX_TOKENS:,} tokens")
    rng = np.random.default_rng(seed)
    # All N prompts shuffled together (inference-perf: rng.permutation over the prompt list).
    order = rng.permutation(n_prompts)
    t = arrivals(n, rate, burstiness, rng=rng, process=process)

    prompts: list[Prompt] = []
    parent = np.full(n, -1, dtype=np.int64)
    session = np.full(n, -1, dtype=np.int64)
    history: dict[int, Prompt] = {}
    # one system prompt per group and one prompt object per prompt index, shared by every
    # request (and every first round) using it: the group's system prompt is hashed once
    systems = [(Segment(k, s_len),) if s_len else () for k in range(g)]
    base: dict[int, Prompt] = {}
    for i in range(n):
        p = int(order[i % n_prompts])
        first = base.get(p)
        if first is None:
            sys_p = systems[p // ppg]
            first = base[p] = Turn(sys_p, (Segment(g + p, q_len),)) if q_len else sys_p
        if not multi_turn:
            prompts.append(first)
            continue
        session[i] = p
        prompt: Prompt
        if i >= n_prompts:
            prev = i - n_prompts
            parent[i] = prev
            answer = Segment(g + n_prompts + prev, o_len)
            # the history by reference: a session's rounds share it (linear memory in -n)
            prompt = Turn(history[p], (answer, Segment(g + p, q_len)) if q_len else (answer,))
        else:
            prompt = first
        history[p] = prompt
        prompts.append(prompt)
    input_len = np.array([prompt_tokens(p) for p in prompts], dtype=np.int64)
    return PrefixWorkload(
        arrival_s=t,
        input_len=input_len,
        output_len=np.full(n, o_len, dtype=np.int64),
        prompts=tuple(prompts),
        session=session,
        parent=parent,
        think_time_s=np.zeros(n, dtype=np.float64),
    )


def multi_turn_chats(
    conversations: Sequence[Sequence[tuple[int, int]]],
    *,
    system_prompt_len: int = 0,
    num_system_prompts: int = 1,
    rate: float = math.inf,
    process: str = "poisson",
    burstiness: float = 1.0,
    think_time_s: float = 0.0,
    think_time_dist: str = "constant",
    seed: int = 0,
) -> PrefixWorkload:
    """Multi-turn chats: conversation c's turn k re-sends the whole history.

    `conversations[c]` lists (user_tokens, answer_tokens) per turn. Turn k's prompt =
    system prompt + u_0 + a_0 + ... + u_{k-1} + a_{k-1} + u_k and its output is a_k, so turn k's
    prompt starts with turn k-1's whole prompt + answer. Conversations start at arrival times
    from `arrivals` (`rate`, `process`, `burstiness`); turn k > 0 is sent `think_time` after turn
    k-1 completes (constant `think_time_s`, or exponential with that mean). Conversation c uses
    system prompt c mod `num_system_prompts` (segment id that index). Requests are ordered by
    conversation start, then turn; a later turn's `arrival_s` is its conversation's start.
    """
    if think_time_dist not in ("constant", "exponential"):
        raise SpecError(f"think_time_dist: {think_time_dist!r} is not one of constant, exponential")
    sys_len = _pos_int(system_prompt_len, "system_prompt_len", 0)
    nsys = _pos_int(num_system_prompts, "num_system_prompts")
    think = _nonneg_float(think_time_s, "think_time_s")
    n_conv = len(conversations)
    if n_conv == 0:
        raise SpecError("conversations: need at least one conversation")
    rng = np.random.default_rng(seed)
    starts = arrivals(n_conv, rate, burstiness, rng=rng, process=process)
    next_id = nsys
    prompts: list[Prompt] = []
    arr: list[float] = []
    outs: list[int] = []
    sess: list[int] = []
    par: list[int] = []
    thinks: list[float] = []
    for c, turns in enumerate(conversations):
        if len(turns) == 0:
            raise SpecError(f"conversations[{c}]: needs at least one turn")
        # segments since the previous turn's prompt (which the next prompt links to, not copies)
        pending: list[Segment] = [Segment(c % nsys, sys_len)] if sys_len else []
        last: Prompt | None = None
        prev = -1
        for k, turn in enumerate(turns):
            try:
                u_raw, a_raw = turn
            except (TypeError, ValueError):
                raise SpecError(
                    f"conversations[{c}][{k}]: {turn!r} must be (user_tokens, answer_tokens)"
                ) from None
            u = _pos_int(u_raw, f"conversations[{c}][{k}].user_tokens", 0)
            a = _pos_int(a_raw, f"conversations[{c}][{k}].answer_tokens")
            pending.append(Segment(next_id, u))
            next_id += 1
            own = tuple(s for s in pending if s.num_tokens)
            pending = []
            prompt: Prompt = own if last is None else Turn(last, own)
            last = prompt
            if not len(prompt):
                raise SpecError(f"conversations[{c}][{k}]: the prompt would be empty")
            prompts.append(prompt)
            arr.append(float(starts[c]))
            outs.append(a)
            sess.append(c)
            par.append(prev)
            if prev < 0:
                thinks.append(0.0)
            elif think_time_dist == "constant":
                thinks.append(think)
            else:
                thinks.append(float(rng.exponential(think)) if think > 0 else 0.0)
            prev = len(prompts) - 1
            pending.append(Segment(next_id, a))
            next_id += 1
    return PrefixWorkload(
        arrival_s=np.array(arr, dtype=np.float64),
        input_len=np.array([prompt_tokens(p) for p in prompts], dtype=np.int64),
        output_len=np.array(outs, dtype=np.int64),
        prompts=tuple(prompts),
        session=np.array(sess, dtype=np.int64),
        parent=np.array(par, dtype=np.int64),
        think_time_s=np.array(thinks, dtype=np.float64),
    )


def mooncake_segments(
    hash_ids: Sequence[int], input_length: int, unique_id: int | None = None
) -> Prompt:
    """A Mooncake row's prompt as segments: hash id h covers 512 tokens as segment -(h + 1).

    The published `hash_ids` are chained by prefix (equal ids at position k mean equal first
    (k + 1) x 512 tokens), so one segment per id keeps `block_hashes` exact for any block size
    dividing 512. Negative ids keep them apart from generator ids (>= 0). The last id covers
    the remainder (input_length - 512 x (len - 1) tokens). Tokens beyond 512 x len(hash_ids)
    (a row with too few ids) become one unshared segment `unique_id` (required then); ids
    beyond the input length are ignored.
    """
    L = _pos_int(input_length, "input_length")
    segs: list[Segment] = []
    left = L
    for h in hash_ids:
        if left == 0:
            break
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0:
            raise SpecError(f"hash_ids: {h!r} must be an integer >= 0")
        take = min(left, MOONCAKE_BLOCK_TOKENS)
        segs.append(Segment(-(int(h) + 1), take))
        left -= take
    if left:
        if unique_id is None:
            raise SpecError(
                f"hash_ids: {len(hash_ids)} ids cover {L - left} of input_length {L} tokens "
                "(pass unique_id for the uncovered tail)"
            )
        segs.append(Segment(int(unique_id), left))
    return tuple(segs)


def read_mooncake_prefix(path: str | Path) -> PrefixWorkload:
    """A Mooncake JSONL trace (`timestamp` ms, `input_length`, `output_length`, `hash_ids`)
    with each prompt's prefix structure from its `hash_ids` (`mooncake_segments`).

    Read by the one Mooncake reader (`traces.read_trace`, format "mooncake": arrivals from the
    earliest, rows stably sorted by arrival, bad rows named by line and key). A row whose ids
    cover fewer tokens than its input_length (or that has none) gets an unshared tail segment
    (id = its 0-based row index after sorting).
    """
    from simulator.workloads.traces import read_trace

    w = read_trace(path, fmt="mooncake")
    hashes = w.extra.get("hash_ids")
    prompts: list[Prompt] = []
    for i, length in enumerate(w.input_len.tolist()):
        try:
            prompts.append(mooncake_segments(() if hashes is None else hashes[i], length, unique_id=i))
        except SpecError as e:
            raise SpecError(f"{path}: request {i}: {e}") from None
    n = len(prompts)
    return PrefixWorkload(
        arrival_s=w.arrival_s,
        input_len=np.array([prompt_tokens(p) for p in prompts], dtype=np.int64),
        output_len=np.asarray(w.output_len, dtype=np.int64),
        prompts=tuple(prompts),
        session=np.full(n, -1, dtype=np.int64),
        parent=np.full(n, -1, dtype=np.int64),
        think_time_s=np.zeros(n, dtype=np.float64),
    )
