"""Automatic prefix caching over paged KV blocks, as vLLM V1 does it.

vLLM V1 (`vllm/v1/core/kv_cache_manager.py`, `block_pool.py`) names each *full* block of a
prompt by a hash chained by prefix (h_k = H(h_{k-1}, tokens of block k); `prefix.block_hashes`),
keeps a block's hash after its request frees it, and serves a later request whose first k
hashes are cached from those blocks: their prefill is skipped, they are shared (reference
counts) and read by attention like any other block.

Free blocks form one queue (vLLM's `FreeKVCacheBlockQueue`): a new block is taken from the
head, a freed request's blocks are appended at the tail in reverse order of its block table
(its last block first, so a prefix's tail is evicted before its head), and a cached block
that is hit while free is taken out of the queue. A free cached block is therefore evicted
exactly when the queue's head reaches it: LRU over all free blocks. Free cached blocks count
as free for admission (they are reclaimable at once).

`PrefixKVCache` keeps the queue as an ordered map whose entries are either a hash (one cached
block) or a run of anonymous free blocks (a 1-tuple key -> count), so every operation is O(1)
amortised. Allocation sites only decrement `free_blocks` (as for `KVCache`); the queue catches
up lazily (`_sync` pops `queued - free_blocks` blocks from the head) before anything reads or
appends to it. Allocation always takes the head, so the lazy catch-up evicts the same blocks
in the same order as evicting on each allocation.

A hit covers at most prompt_len - 1 tokens (vLLM recomputes the last prompt token to get its
logits): hit blocks = the longest run of leading hashes that are cached, capped at
floor((prompt_len - 1) / block_size) blocks.

Departures, on purpose: two requests that compute the same block at the same time both keep
a copy, but only the first copy is registered under the hash (vLLM registers both); blocks of
generated tokens are not hashed (vLLM hashes them too, which only matters when a preempted
request is re-admitted).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from simulator.serving.kvcache import KVCache


class PrefixKVCache(KVCache):
    """`KVCache` whose shared blocks are cached prefix blocks named by their hash."""

    __slots__ = ("queue", "queued", "cached", "_anon", "n_shared", "cpu", "cpu_blocks")

    #: a slot's blocks are its cached full prefix blocks then private ones, so it always holds
    #: ceil(computed / block_size) blocks (the replica's private-block fast path stays valid)
    ceil_blocks = True

    def __init__(self, total_blocks: int, block_size: int, num_slots: int) -> None:
        super().__init__(total_blocks, block_size, num_slots)
        # hash -> 1 (a free cached block), or (k,) -> length of anonymous free run k
        # an OrderedDict, not a dict: taking the head after many deletions stays O(1)
        self.queue: OrderedDict[int | tuple[int], int] = OrderedDict()
        self.n_shared = [0] * num_slots  # per slot: len(shared_of[slot])
        # CPU offload tier: hashes of evicted blocks kept in host memory (LRU, cpu_blocks max)
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.cpu_blocks = 0
        self._anon = 0  # anonymous runs made so far
        self.cached: set[int] = set()  # hashes with a block: referenced or free in the queue
        self.queued = 0
        self._append_anon(total_blocks)

    # ------------------------------------------------------------------ the free queue
    def _append_anon(self, n: int) -> None:
        if n > 0:
            self._anon += 1
            self.queue[(self._anon,)] = n
            self.queued += n

    def _sync(self) -> None:
        """Take from the head the blocks allocated since the last call (evicting cached ones)."""
        excess = self.queued - self.free_blocks
        queue = self.queue
        while excess > 0:
            key, n = queue.popitem(last=False)
            if type(key) is int:  # a cached block: evicted (to the CPU tier if there is one)
                self.cached.discard(key)
                if self.cpu_blocks:
                    self._offload(key)
                excess -= 1
                self.queued -= 1
            elif n > excess:
                queue[key] = n - excess
                queue.move_to_end(key, last=False)
                self.queued -= excess
                excess = 0
            else:
                excess -= n
                self.queued -= n

    def _offload(self, h: int) -> None:
        cpu = self.cpu
        cpu[h] = None
        cpu.move_to_end(h)
        if len(cpu) > self.cpu_blocks:
            cpu.popitem(last=False)

    # ------------------------------------------------------------------ lookups
    def blocks_of(self, slot: int) -> int:
        return self.held[slot] + self.n_shared[slot]

    def blocks_per_slot(self) -> list[int]:
        return [h + n for h, n in zip(self.held, self.n_shared, strict=True)]

    def hit_blocks(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Leading blocks of a prompt found in the cache (at most (prompt_len - 1) // bs)."""
        self._sync()
        limit = min(len(hashes), (prompt_len - 1) // self.block_size)
        cached, cpu = self.cached, self.cpu
        k = 0
        while k < limit and (hashes[k] in cached or hashes[k] in cpu):
            k += 1
        return k

    def evictable_among(self, hashes: Sequence[int]) -> int:
        """How many of these hit blocks use a free block: free cached ones and ones to reload
        from the CPU tier."""
        queue, cached = self.queue, self.cached
        return sum(1 for h in hashes if h in queue or h not in cached)

    # ------------------------------------------------------------------ updates
    def take_cached(self, slot: int, hashes: Sequence[int]) -> int:
        """The slot references these hit blocks (its prefix), in order; a block found only in
        the CPU tier takes a new block and is cached again. Returns the blocks reloaded."""
        if not hashes:
            return 0
        self._sync()
        refs, cached, cpu = self.ref_count, self.cached, self.cpu
        mine = self.shared_of.setdefault(slot, [])
        loaded = 0
        for h in hashes:
            n = refs.get(h, 0)
            if n == 0:
                if h in cached:
                    del self.queue[h]
                    self.queued -= 1
                else:  # reload from host memory (taken from the head at the next sync)
                    cached.add(h)
                    cpu.move_to_end(h)
                    loaded += 1
                self.free_blocks -= 1
            refs[h] = n + 1
            mine.append(h)
        self.n_shared[slot] += len(hashes)
        return loaded

    def register(self, slot: int, hashes: Iterable[int]) -> None:
        """The slot's next private blocks are now full and computed: name them by these
        hashes (a hash already cached elsewhere leaves that block private)."""
        cached, refs = self.cached, self.ref_count
        new = [h for h in hashes if h not in cached]
        if not new:
            return
        self.shared_of.setdefault(slot, []).extend(new)
        for h in new:
            cached.add(h)
            refs[h] = 1
        self.held[slot] -= len(new)
        self.n_shared[slot] += len(new)

    def release(self, slot: int, blocks: int) -> None:
        """Return the slot's last `blocks` private blocks (never cached ones: they hold no full
        computed block) to the tail of the free queue."""
        self._sync()
        self.held[slot] -= blocks
        self._append_anon(blocks)
        self.free_blocks += blocks

    def free(self, slot: int) -> int:
        """Release the slot: its private blocks, then its cached blocks from the last one,
        join the tail of the free queue (cached ones keep their hash)."""
        self._sync()
        freed = self.held[slot]
        self.held[slot] = 0
        self._append_anon(freed)
        self.n_shared[slot] = 0
        refs, queue = self.ref_count, self.queue
        for h in reversed(self.shared_of.pop(slot, ())):
            n = refs[h] - 1
            if n:
                refs[h] = n
            else:
                del refs[h]
                queue[h] = 1
                self.queued += 1
                freed += 1
        self.free_blocks += freed
        return freed

    def warm(self, hashes: Iterable[int]) -> None:
        """Pre-load free cached blocks (a warm cache: an earlier run's prompts), most recent
        last; beyond the capacity the oldest are evicted (LRU)."""
        self._sync()
        queue = self.queue
        for h in hashes:
            if h in self.ref_count:
                continue
            if h in queue:
                del queue[h]  # re-appended below: most recently used
            else:
                self.cached.add(h)
                self.free_blocks -= 1  # taken from the head, then freed with its hash
                self._sync()
                self.queued += 1
                self.free_blocks += 1
            queue[h] = 1

    def check(self, slots: list[int]) -> None:
        super().check(slots)
        self._sync()
        if self.queued != self.free_blocks or sum(self.queue.values()) != self.queued:
            raise AssertionError(f"kv: free queue holds {self.queued} blocks, free {self.free_blocks}")
        if self.cached != set(self.ref_count) | {h for h in self.queue if type(h) is int}:
            raise AssertionError("kv: cached hashes are neither referenced nor free")


class PrefixState:
    """A replica's prefix caching: the cache, each request's block hashes, and per seat the
    request's hashes and how many of them its blocks already carry (hit or registered)."""

    __slots__ = ("kv", "hashes", "slot_hashes", "n_reg", "bs", "reload_s_per_block", "pending_s",
                 "reloaded_blocks")

    def __init__(self, kv: KVCache, hashes: Sequence[Sequence[int]], warm: bool = False, cpu_blocks: int = 0,
                 reload_s_per_block: float = 0.0) -> None:
        slots = len(kv.held)
        self.kv = PrefixKVCache(kv.total_blocks, kv.block_size, slots)
        self.kv.cpu_blocks = cpu_blocks
        self.reload_s_per_block = reload_s_per_block
        self.pending_s = 0.0  # reload time the next step waits for
        self.reloaded_blocks = 0
        self.bs = kv.block_size
        self.hashes = hashes
        self.slot_hashes: list[Sequence[int]] = [[] for _ in range(slots)]
        self.n_reg = [0] * slots
        if warm:  # an earlier run of the same workload: every prompt, in request order
            for h in hashes:
                self.kv.warm(h)

    def hit_tokens(self, r: int, prompt_len: int) -> int:
        return self.kv.hit_blocks(self.hashes[r], prompt_len) * self.bs

    def hit(self, r: int, prompt_len: int) -> tuple[int, int]:
        """(cached prompt tokens of request r, free blocks they take when r references them:
        cached blocks no request holds, and ones reloaded from the CPU tier)."""
        h = self.hashes[r]
        hb = self.kv.hit_blocks(h, prompt_len)
        return hb * self.bs, self.kv.evictable_among(h[:hb]) if hb else 0

    def admit(self, s: int, r: int, prompt_len: int, tokens: int, reserved_after: int) -> tuple[int, int]:
        """Request r takes seat s: (cached tokens, new tokens of its first chunk)."""
        h = self.slot_hashes[s] = self.hashes[r]
        hb, q, loaded = admit_cached(self.kv, s, h, prompt_len, tokens, reserved_after)
        self.n_reg[s] = hb
        if loaded:
            self.reloaded_blocks += loaded
            self.pending_s += loaded * self.reload_s_per_block
        return hb * self.bs, q

    def register(self, s: int, computed: int) -> None:
        """Seat s has `computed` tokens in KV: its full blocks with a known hash become cached."""
        h = self.slot_hashes[s]
        k = min(computed // self.bs, len(h))
        if k > self.n_reg[s]:
            self.kv.register(s, h[self.n_reg[s]:k])
            self.n_reg[s] = k


def admit_cached(kv: PrefixKVCache, slot: int, hashes: Sequence[int], prompt_len: int, tokens: int,
                 reserved_after: int) -> tuple[int, int, int]:
    """A request takes a seat with its cached prefix: (hit blocks, new tokens q, reloaded).

    The policy planned `tokens` new tokens and left `reserved_after` free blocks for the
    admissions after this one. The hit's free cached blocks (taken out of the free queue)
    plus the new tokens' blocks must fit in what is left: the hit is shortened from its end
    until they do (only chunked admissions can need that). q = min(tokens, prompt_len - hit).
    """
    bs = kv.block_size
    hb = kv.hit_blocks(hashes, prompt_len)
    avail = kv.free_blocks - reserved_after
    q = tokens
    while hb > 0:
        q = min(tokens, prompt_len - hb * bs)
        new = -(-q // bs)
        # at most hb of the hit blocks are free ones: count them only when that could matter
        if hb + new <= avail or kv.evictable_among(hashes[:hb]) + new <= avail:
            break
        hb -= 1
    if hb == 0:
        q = tokens
    loaded = kv.take_cached(slot, hashes[:hb])
    kv.allocate(slot, -(-q // bs))
    return hb, q, loaded


def reservations_after(admit: Sequence[tuple[int, int]], block_size: int) -> list[int]:
    """For each admission of a plan, the blocks the policy planned for the ones after it."""
    out = [0] * len(admit)
    acc = 0
    for i in range(len(admit) - 1, -1, -1):
        out[i] = acc
        acc += -(-admit[i][1] // block_size)
    return out
