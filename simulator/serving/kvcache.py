"""Paged KV memory of one replica: a pool of fixed-size blocks and who holds which.

PagedAttention (Kwon et al., SOSP 2023, arXiv:2309.06180) stores a sequence's keys and values
in blocks of `block_size` tokens; a sequence with c tokens in cache covers them with

    blocks(c) = ceil(c / block_size)

blocks, and needs a new block exactly when its next token crosses a block boundary. The pool
here counts blocks rather than naming them: each request slot holds `held[slot]` *private*
blocks (reference count 1, freed with the request), and the pool keeps `free_blocks`. Every
operation is O(1) (freeing a request is O(its shared blocks)).

Shared blocks (prefix caching, vLLM V33 `vllm/v1/core/block_pool.py` — `BlockPool`; SGLang's
radix cache) are the one place block identity matters, so only they carry an id and a
reference count: `share(slot, block_id)` references a block, allocating it from the free pool
on its first reference; `free(slot)` drops the slot's references and returns a shared block
to the pool when its count reaches 0. Prefix caching (`prefix_cache.PrefixKVCache`) extends
this class: a shared block's id is its prefix hash, and a block whose count reaches 0 stays
cached in an LRU free queue (still counted as free for admission, docs/engines.md §1.6).
"""

from __future__ import annotations


class KVCache:
    """Block accounting of one replica: `total_blocks` blocks of `block_size` tokens."""

    __slots__ = ("block_size", "total_blocks", "free_blocks", "held", "shared_of", "ref_count")

    #: True when every slot holds exactly ceil(tokens / block_size) blocks even with shared
    #: blocks (prefix caching: shared blocks are the slot's full leading blocks)
    ceil_blocks = False
    #: True when a slot's blocks derive from its token count (CeilKVCache: no `held` kept)
    derived_counts = False

    def __init__(self, total_blocks: int, block_size: int, num_slots: int) -> None:
        self.block_size = block_size
        self.total_blocks = total_blocks
        self.free_blocks = total_blocks
        self.held = [0] * num_slots  # private blocks of each slot (reference count 1)
        self.shared_of: dict[int, list[int]] = {}  # slot -> ids of the shared blocks it references
        self.ref_count: dict[int, int] = {}  # shared block id -> references (> 0)

    # ------------------------------------------------------------------ queries
    def blocks_for(self, tokens: int) -> int:
        """ceil(tokens / block_size): blocks that cover `tokens` tokens."""
        return -(-tokens // self.block_size)

    def blocks_of(self, slot: int) -> int:
        """Blocks the slot's sequence covers (private + shared)."""
        shared = self.shared_of.get(slot)
        return self.held[slot] + (len(shared) if shared else 0)

    def blocks_per_slot(self) -> list[int]:
        """Blocks each slot covers, indexed by slot: the live `held` list itself when no block
        is shared (read it, never write it), else a snapshot. Lets hot loops index a list."""
        if not self.shared_of:
            return self.held
        return [self.blocks_of(s) for s in range(len(self.held))]

    def grow_to_cover(self, items: list[tuple[int, int]], computed: list[int], total: int = -1) -> None:
        """For each (slot, new tokens): allocate the blocks that cover computed + new tokens
        (the caller checked they are free). `total`, when >= 0, is how many that is in all
        (the scheduler counted them): only CeilKVCache, which keeps no per-slot counts, uses it."""
        covered = self.blocks_per_slot()
        held, bs = self.held, self.block_size
        taken = 0
        for s, tokens in items:
            need = -(-(computed[s] + tokens) // bs) - covered[s]
            if need > 0:
                held[s] += need
                taken += need
        self.free_blocks -= taken

    def blocks_to_grow(self, slot: int, tokens: int) -> int:
        """New blocks the slot needs so that its blocks cover `tokens` tokens."""
        need = -(-tokens // self.block_size) - self.blocks_of(slot)
        return need if need > 0 else 0

    def reclaimable(self, slot: int) -> int:
        """Blocks that return to the pool if the slot is freed now (shared ones only when
        this slot holds their last reference)."""
        shared = self.shared_of.get(slot)
        extra = sum(1 for b in shared if self.ref_count[b] == 1) if shared else 0
        return self.held[slot] + extra

    @property
    def utilization(self) -> float:
        return 1.0 - self.free_blocks / self.total_blocks

    # ------------------------------------------------------------------ updates
    def allocate(self, slot: int, blocks: int) -> None:
        """Give the slot `blocks` more private blocks (the caller checked they are free)."""
        self.held[slot] += blocks
        self.free_blocks -= blocks

    def allocate_one_each(self, slots: list[int]) -> None:
        """One more private block for each slot (decodes crossing a block boundary)."""
        held = self.held
        for s in slots:
            held[s] += 1
        self.free_blocks -= len(slots)

    def release(self, slot: int, blocks: int) -> None:
        """Return the slot's last `blocks` private blocks to the pool (speculative decoding: the
        blocks of rejected draft tokens and of the unused lookahead, `serving/speculative.py`)."""
        self.held[slot] -= blocks
        self.free_blocks += blocks

    def share(self, slot: int, block_id: int) -> None:
        """The slot references shared block `block_id` (taken from the pool on its first use)."""
        n = self.ref_count.get(block_id, 0)
        if n == 0:
            if self.free_blocks < 1:
                raise ValueError("share: no free block for a new shared block")
            self.free_blocks -= 1
        self.ref_count[block_id] = n + 1
        self.shared_of.setdefault(slot, []).append(block_id)

    def free(self, slot: int) -> int:
        """Release everything the slot holds; returns the blocks that went back to the pool."""
        freed = self.held[slot]
        self.held[slot] = 0
        if self.shared_of:
            for b in self.shared_of.pop(slot, ()):
                n = self.ref_count[b] - 1
                if n:
                    self.ref_count[b] = n
                else:
                    del self.ref_count[b]
                    freed += 1
        self.free_blocks += freed
        return freed

    def check(self, slots: list[int]) -> None:
        """Conservation: blocks of `slots` (the live ones) + shared + free == total, and no
        more blocks in use than exist (free >= 0)."""
        if self.free_blocks < 0:
            raise AssertionError(f"kv: {-self.free_blocks} blocks more in use than the {self.total_blocks} there are")
        held = sum(self.held[s] for s in slots)
        refs = sum(len(self.shared_of.get(s, ())) for s in slots)
        if refs != sum(self.ref_count.values()):
            raise AssertionError("kv: shared-block references do not match their counts")
        if held + len(self.ref_count) + self.free_blocks != self.total_blocks:
            raise AssertionError(f"kv: blocks held {held} + shared {len(self.ref_count)} + free "
                                 f"{self.free_blocks} != {self.total_blocks}")


class CeilKVCache(KVCache):
    """Private blocks only (the engine without prefix caching): at every step boundary a slot
    with c tokens in cache holds exactly blocks(c) = ceil(c / block_size) blocks (the replica's
    debug check asserts it), so the counts derive from the replica's `computed` list and the
    hot loops only move `free_blocks` (the engine before the KVCache split worked this way).

    Callers allocate a slot's blocks before its new tokens are counted in `computed` (or, for
    a slot seated with its tokens already counted, right after); `allocate` only takes blocks
    from the pool, `free` returns blocks(computed[slot]) to it.
    """

    __slots__ = ("computed",)
    derived_counts = True

    def __init__(self, total_blocks: int, block_size: int, computed: list[int]) -> None:
        super().__init__(total_blocks, block_size, len(computed))
        self.computed = computed  # the replica's list, shared (never written here)

    def blocks_of(self, slot: int) -> int:
        return -(-self.computed[slot] // self.block_size)

    def blocks_per_slot(self) -> list[int]:
        """Blocks each slot covers (a snapshot; free slots' entries are meaningless)."""
        bs = self.block_size
        return [-(-c // bs) for c in self.computed]

    def grow_to_cover(self, items: list[tuple[int, int]], computed: list[int], total: int = -1) -> None:
        if total >= 0:
            self.free_blocks -= total
            return
        bs = self.block_size
        taken = 0
        for s, tokens in items:
            c = computed[s]
            need = -(-(c + tokens) // bs) - -(-c // bs)
            if need > 0:
                taken += need
        self.free_blocks -= taken

    def reclaimable(self, slot: int) -> int:
        return self.blocks_of(slot)

    def allocate(self, slot: int, blocks: int) -> None:
        self.free_blocks -= blocks

    def allocate_one_each(self, slots: list[int]) -> None:
        self.free_blocks -= len(slots)

    def release(self, slot: int, blocks: int) -> None:
        """Blocks derive from `computed`: the caller lowered it first; only the pool grows."""
        self.free_blocks += blocks

    def share(self, slot: int, block_id: int) -> None:
        raise TypeError("CeilKVCache holds private blocks only (use KVCache to share blocks)")

    def free(self, slot: int) -> int:
        freed = -(-self.computed[slot] // self.block_size)  # blocks_of, inline: once per request
        self.free_blocks += freed
        return freed

    def check(self, slots: list[int]) -> None:
        if self.free_blocks < 0:
            raise AssertionError(f"kv: {-self.free_blocks} blocks more in use than the {self.total_blocks} there are")
        held = sum(self.blocks_of(s) for s in slots)
        if held + self.free_blocks != self.total_blocks:
            raise AssertionError(f"kv: blocks held {held} + free {self.free_blocks} != {self.total_blocks}")
