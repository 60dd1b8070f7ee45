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

With KV offloading, the host tier (``simulator.engine.host_tier``) continues a lookup where the GPU's
cached blocks end, and takes a request's full blocks after each prefill chunk and at release.
"""

from __future__ import annotations

import numpy as np

from simulator.engine import host_tier
from simulator.engine.reference.block_pool import BlockPool
from simulator.engine.rules import group_blocks, group_blocks_below, hashed_blocks, hit_limit


class HostTier:
    """The host tier's arrays (KV offloading; the rules are ``simulator.engine.host_tier``'s): a row per
    own-content key, in the order the keys first reach the tier, and a row per shared-prefix group."""

    def __init__(self, capacity: int) -> None:
        self.own = np.full((64, host_tier.N_H), -1, np.int64)
        self.grp = np.full((8, host_tier.N_H), -1, np.int64)
        self.hc = np.zeros(host_tier.N_HC, np.int64)
        self.hc[host_tier.HC_CAP] = capacity
        self.hc[host_tier.HC_LRU] = self.hc[host_tier.HC_MRU] = -1
        self._rows: dict[int, int] = {}

    def keys(self, group: int, key: int) -> tuple[int, int]:
        """The tier's keys of a request's own content (``key``) and of its group (-1: none)."""
        row = self._rows.setdefault(key, len(self._rows))
        if row >= len(self.own):
            self.own = _grown(self.own, row)
        if group >= len(self.grp):
            self.grp = _grown(self.grp, group)
        return row, (-2 - group if group >= 0 else -1)


def _grown(a: np.ndarray, index: int) -> np.ndarray:
    out = np.full((max(2 * len(a), index + 1), a.shape[1]), -1, np.int64)
    out[: len(a)] = a
    return out


class KVCacheManager:
    def __init__(self, pool: BlockPool, block_size: int, enable_caching: bool, host_blocks: int = 0) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.tables: dict[int, list[int]] = {}  # request id -> its blocks, in token order
        self.host = HostTier(host_blocks) if host_blocks else None  # KV offloading's host tier

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

    def host_lookup(self, num_tokens: int, group: int, group_len: int, key: int, gpu_hits: int) -> int:
        """Leading blocks found on the host tier after ``gpu_hits`` GPU hits (0 without one)."""
        if self.host is None:
            return 0
        h = self.host
        own, grp = h.keys(group, key)
        n_group = group_blocks(group, group_len, self.block_size)
        limit = hit_limit(num_tokens, self.block_size)
        return host_tier.lookup(h.own, h.grp, h.hc, own, grp, gpu_hits, n_group, limit)

    def host_write(self, group: int, group_len: int, key: int, full_blocks: int) -> None:
        """Write a request's first ``full_blocks`` blocks to the host tier (if there is one)."""
        if self.host is not None:
            h = self.host
            own, grp = h.keys(group, key)
            n_group = group_blocks(group, group_len, self.block_size)
            host_tier.store(h.own, h.grp, h.hc, own, grp, n_group, full_blocks)

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

    def free(
        self, rid: int, computed: int, hashable: int, group: int, group_len: int, key: int, cache_own: bool
    ) -> None:
        """Release a request's blocks, tail first (vLLM frees in reverse, so its tail is evicted first).

        Its full blocks below ``computed`` that were hashed when it was last scheduled (``hashable``
        tokens: ``rules.cacheable``) carry a hash and go to the tail of the free queue; the others
        do not. ``cache_own``: index its own hashed blocks so that it (or its session's next turn)
        can find them again.
        """
        table = self.tables.pop(rid)
        n_full = hashed_blocks(computed, hashable, self.block_size, self.enable_caching)
        self.host_write(group, group_len, key, n_full)
        if cache_own:
            for k in range(group_blocks(group, group_len, self.block_size), n_full):
                self.pool.cache(table[k], ("own", key, k))
        order = list(range(len(table) - 1, -1, -1))
        self.pool.free([table[k] for k in order], [k < n_full for k in order])
