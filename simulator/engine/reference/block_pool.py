"""The paged KV block pool (vLLM V1's ``BlockPool``): free queue, reference counts, prefix-cache index.

One block is kept aside as the null block. Free blocks sit in a queue; allocation takes them from
its head, evicting whatever cached content they held. A released block that carries a content hash
goes to the tail (cached content is evicted least-recently-freed first); one without (a partial
block, or any block with caching off) goes to the head, to be reused first. A cached block that a
new request re-uses while it sits in the free queue is "touched": taken out of the queue without
being evicted.

The prefix-cache index maps a content hash to the physical blocks holding that content, in the
order they were cached: two requests may compute the same content concurrently, and vLLM keeps
every copy and serves a lookup from the earliest still cached.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable

from simulator.engine.rules import kv_usage


class BlockPool:
    def __init__(self, num_gpu_blocks: int) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (one is the null block), got {num_gpu_blocks}")
        n = num_gpu_blocks - 1  # vLLM keeps one block aside as the null block
        self.num_blocks = n
        self.ref = [0] * n  # requests holding each block
        self.hash: list[Hashable | None] = [None] * n  # the content a block is cached under
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(n))  # head first
        self.cached: dict[Hashable, dict[int, None]] = {}  # content -> its copies, earliest first

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage: the fraction of (non-null) blocks not free."""
        return kv_usage(self.num_free, self.num_blocks)

    # ---- allocation ---------------------------------------------------------------------------
    def allocate(self, m: int) -> list[int]:
        """Take ``m`` blocks from the head of the free queue, evicting their cached content."""
        if m > self.num_free:
            raise RuntimeError(f"allocate({m}) with only {self.num_free} free blocks")
        out = []
        for _ in range(m):
            b, _ = self.free_queue.popitem(last=False)
            self._evict(b)
            self.ref[b] = 1
            out.append(b)
        return out

    def unreferenced(self, blocks: Iterable[int]) -> int:
        """How many of ``blocks`` (a lookup's hits) no request holds: free now, taken by the hit."""
        return sum(1 for b in blocks if self.ref[b] == 0)

    def touch(self, blocks: Iterable[int]) -> None:
        """One more request takes these (cached) blocks into use: out of the free queue if they were there."""
        for b in blocks:
            if self.ref[b] == 0:
                del self.free_queue[b]
            self.ref[b] += 1

    def free(self, blocks: list[int], hashed: list[bool]) -> None:
        """Release one request's hold on ``blocks`` (given in eviction order: first evicted first).

        Of the blocks nobody holds any more, those without a hash go to the head of the free queue
        in the given order (``blocks[0]`` first), those with one to the tail (vLLM ``free_blocks``).
        """
        front: list[int] = []
        back: list[int] = []
        for b, h in zip(blocks, hashed):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (back if h else front).append(b)
        for b in reversed(front):
            self.free_queue[b] = None
            self.free_queue.move_to_end(b, last=False)
        for b in back:
            self.free_queue[b] = None

    # ---- the prefix-cache index ----------------------------------------------------------------
    def cache(self, b: int, content: Hashable) -> None:
        """Index block ``b`` as a copy of ``content`` (after the copies already there)."""
        if self.hash[b] == content:
            return
        assert self.hash[b] is None, f"block {b} already holds {self.hash[b]}"
        self.hash[b] = content
        self.cached.setdefault(content, {})[b] = None

    def cached_copy(self, content: Hashable) -> int | None:
        """The earliest-cached block still holding ``content``, if any."""
        copies = self.cached.get(content)
        return next(iter(copies)) if copies else None

    def _evict(self, b: int) -> None:
        content = self.hash[b]
        if content is not None:
            copies = self.cached[content]
            del copies[b]
            if not copies:
                del self.cached[content]
            self.hash[b] = None

    # ---- checks ---------------------------------------------------------------------------------
    def free_order(self) -> list[int]:
        """The free queue, head first."""
        return list(self.free_queue)

    def check(self) -> None:
        """Invariants: a block is free exactly when nobody holds it; the index and the hashes agree."""
        for b in range(self.num_blocks):
            assert (self.ref[b] == 0) == (b in self.free_queue), f"block {b}: ref {self.ref[b]}"
            assert self.ref[b] >= 0
            h = self.hash[b]
            assert h is None or b in self.cached[h]
        assert sum(len(c) for c in self.cached.values()) == sum(h is not None for h in self.hash)
