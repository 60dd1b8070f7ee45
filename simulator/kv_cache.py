"""Per-request block tables and prefix caching on top of the block pool.

Tokens have no text in a simulator, so content is identified by position: the leading
``group_len`` tokens of a request in shared-prefix group ``g`` are the group's (block k of them is
"(g, k)"), everything after belongs to the request's own content key (its id, or its session's id in
multi-turn workloads), block k being "(key, k)". As in vLLM, only full blocks are cached, a block is
cached as soon as the tokens that fill it are scheduled, lookups take the longest run of leading
cached blocks (at most ``num_tokens - 1`` tokens), and a freed block keeps its content until the
pool hands it out again (the pool's generation counter tells whether it still does).

Documented simplifications (both need two physical copies of the same content, which only arise
when two requests compute the same block concurrently): a second copy of a group block is not
indexed, and a request's own blocks are indexed only from its latest release.
"""

from __future__ import annotations

import numpy as np

from simulator.block_pool import BlockPool

_EMPTY = np.empty(0, np.int64)


class KVCacheManager:
    def __init__(self, pool: BlockPool, block_size: int, enable_caching: bool) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.tables: dict[int, list[np.ndarray]] = {}
        # Group g -> (block ids, their generations) per block index k; id -1 = not cached.
        self._group: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Content key -> (first block index, ids, generations) of its last released full blocks.
        self._own: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}

    # ---- lookups ----------------------------------------------------------------------------
    def _valid_prefix(self, ids: np.ndarray, gens: np.ndarray) -> int:
        if len(ids) == 0:
            return 0
        ok = (ids >= 0) & (self.pool.gen[np.maximum(ids, 0)] == gens)
        return len(ids) if ok.all() else int(np.argmin(ok))

    def lookup(self, num_tokens: int, group: int, group_len: int, key: int) -> tuple[np.ndarray, int]:
        """Cached leading blocks for a request about to be admitted: (block ids, evictable count)."""
        if not self.enable_caching:
            return _EMPTY, 0
        bs = self.block_size
        limit = (num_tokens - 1) // bs
        hits = []
        n_group = group_len // bs if group >= 0 else 0
        k = 0
        if n_group:
            entry = self._group.get(group)
            if entry is not None:
                m = min(n_group, limit)
                h = self._valid_prefix(entry[0][:m], entry[1][:m])
                if h:
                    hits.append(entry[0][:h])
                k = h
            if k < n_group:
                return self._finish_lookup(hits)
        own = self._own.get(key)
        if own is not None and own[0] == k and k < limit:
            m = limit - k
            h = self._valid_prefix(own[1][:m], own[2][:m])
            if h:
                hits.append(own[1][:h])
        return self._finish_lookup(hits)

    def _finish_lookup(self, hits: list[np.ndarray]) -> tuple[np.ndarray, int]:
        if not hits:
            return _EMPTY, 0
        ids = hits[0] if len(hits) == 1 else np.concatenate(hits)
        return ids, int((self.pool.ref[ids] == 0).sum())

    # ---- allocation -------------------------------------------------------------------------
    def num_blocks(self, rid: int) -> int:
        t = self.tables.get(rid)
        return sum(len(a) for a in t) if t else 0

    def admit(self, rid: int, hit_ids: np.ndarray) -> None:
        """Start a block table for an admitted request, re-using its cached leading blocks."""
        self.pool.touch(hit_ids)
        self.tables[rid] = [hit_ids] if len(hit_ids) else []

    def allocate(self, rid: int, m: int) -> None:
        if m > 0:
            self.tables[rid].append(self.pool.allocate(m))

    def allocate_many(self, rids: np.ndarray, counts: np.ndarray) -> None:
        """Allocate ``counts[i]`` blocks to ``rids[i]``, in order, with one pool call."""
        total = int(counts.sum())
        if total == 0:
            return
        ids = self.pool.allocate(total)
        nz = np.flatnonzero(counts)
        ends = np.cumsum(counts[nz]).tolist()
        tables = self.tables
        start = 0
        for rid, end in zip(rids[nz].tolist(), ends):
            tables[rid].append(ids[start:end])
            start = end

    def cache_group_blocks(self, rid: int, group: int, group_len: int, upto_tokens: int) -> None:
        """Index this request's full group blocks (those covering tokens < ``upto_tokens``)."""
        if not self.enable_caching or group < 0:
            return
        n = min(group_len, upto_tokens) // self.block_size
        if n == 0:
            return
        entry = self._group.get(group)
        total = group_len // self.block_size
        if entry is None or len(entry[0]) < total:
            # Requests of one group may carry prefixes of different lengths (one is a prefix of the other).
            ids = np.full(total, -1, np.int64)
            gens = np.zeros(total, np.int64)
            if entry is not None:
                ids[: len(entry[0])] = entry[0]
                gens[: len(entry[1])] = entry[1]
            entry = (ids, gens)
            self._group[group] = entry
        ids, gens = entry
        mine = self._table_array(rid)[:n]
        stale = (ids[:n] < 0) | (self.pool.gen[np.maximum(ids[:n], 0)] != gens[:n])
        if stale.any():
            ids[:n][stale] = mine[stale]
            gens[:n][stale] = self.pool.gen[mine[stale]]

    def _table_array(self, rid: int) -> np.ndarray:
        t = self.tables[rid]
        if len(t) > 1:
            t[:] = [np.concatenate(t)]
        return t[0] if t else _EMPTY

    # ---- release ----------------------------------------------------------------------------
    def free(self, rid: int, computed: int, group: int, group_len: int, key: int, cache_own: bool = True) -> int:
        """Release a request's blocks (tail first, as vLLM does). Returns how many it held."""
        table = self._table_array(rid)
        del self.tables[rid]
        n = len(table)
        if self.enable_caching and cache_own:
            first = group_len // self.block_size if group >= 0 else 0
            n_full = computed // self.block_size
            if n_full > first:
                own = table[first:n_full]
                self._own[key] = (first, own, self.pool.gen[own])
        if n:
            self.pool.free(table[::-1])
        return n

    def forget(self, key: int) -> None:
        """Drop the index of a finished request's own blocks when nothing can hit them again."""
        self._own.pop(key, None)
