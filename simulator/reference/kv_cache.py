"""Per-request block tables and prefix caching on top of the block pool (vLLM V1's ``KVCacheManager``).

Tokens have no text in a simulator, so content is identified by position: the leading
``group_len`` tokens of a request in shared-prefix group ``g`` are the group's (block k of them is
the content ``("group", g, k)``); everything after belongs to the request's own content key (its
id, or its session's id in multi-turn workloads), block k being ``("own", key, k)``. As in vLLM, only
full blocks are cached, a lookup takes the longest run of leading cached blocks (at most
``num_tokens - 1`` tokens), and a released block keeps its content until the pool hands it out
again.

Shared-prefix blocks are cached as soon as the tokens that fill them are scheduled (vLLM
``cache_full_blocks``), since any request of the group may look them up. A request's own content
is only ever looked up by itself (re-admitted after preemption) or by its session's next turn,
both after it released its blocks, so its own blocks are indexed when it releases them: the same
lookups, without indexing blocks nobody can ask for.
"""

from __future__ import annotations

from simulator.reference.block_pool import BlockPool
from simulator.rules import group_blocks, group_blocks_below, hashed_blocks, hit_limit


class KVCacheManager:
    def __init__(self, pool: BlockPool, block_size: int, enable_caching: bool) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.tables: dict[int, list[int]] = {}  # request id -> its blocks, in token order

    def lookup(self, num_tokens: int, group: int, group_len: int, key: int) -> list[int]:
        """Cached leading blocks for a request about to be admitted (``get_computed_blocks``)."""
        if not self.enable_caching:
            return []
        limit = hit_limit(num_tokens, self.block_size)
        n_group = group_blocks(group, group_len, self.block_size)
        hits: list[int] = []
        for k in range(limit):
            content = ("group", group, k) if k < n_group else ("own", key, k)
            b = self.pool.cached_copy(content)
            if b is None:
                break
            hits.append(b)
        return hits

    def admit(self, rid: int, hits: list[int]) -> None:
        """Start the block table of an admitted request with its cached leading blocks."""
        self.pool.touch(hits)
        self.tables[rid] = list(hits)

    def allocate(self, rid: int, m: int) -> None:
        self.tables[rid].extend(self.pool.allocate(m))

    def cache_group_blocks(self, rid: int, group: int, group_len: int, upto_tokens: int) -> None:
        """Index this request's full shared-prefix blocks (those covering tokens < ``upto_tokens``)."""
        if not self.enable_caching:
            return
        table = self.tables[rid]
        for k in range(group_blocks_below(group, group_len, upto_tokens, self.block_size)):
            self.pool.cache(table[k], ("group", group, k))

    def free(self, rid: int, computed: int, group: int, group_len: int, key: int, cache_own: bool) -> None:
        """Release a request's blocks, tail first (vLLM frees in reverse, so its tail is evicted first).

        Its full blocks (those below ``computed``) carry a hash and go to the tail of the free
        queue; its partial last block does not. ``cache_own``: index its own full blocks so that
        it (or its session's next turn) can find them again.
        """
        table = self.tables.pop(rid)
        n_full = hashed_blocks(computed, self.block_size, self.enable_caching)
        if cache_own:
            for k in range(group_blocks(group, group_len, self.block_size), n_full):
                self.pool.cache(table[k], ("own", key, k))
        order = list(range(len(table) - 1, -1, -1))
        self.pool.free([table[k] for k in order], [k < n_full for k in order])
