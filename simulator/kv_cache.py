"""Per-request block tables and prefix caching on top of the block pool.

Tokens have no text in a simulator, so content is identified by position: the leading
``group_len`` tokens of a request in shared-prefix group ``g`` are the group's (block k of them is
"(g, k)"), everything after belongs to the request's own content key (its id, or its session's id in
multi-turn workloads), block k being "(key, k)". As in vLLM, only full blocks are cached, a block is
cached as soon as the tokens that fill it are scheduled, lookups take the longest run of leading
cached blocks (at most ``num_tokens - 1`` tokens), and a freed block keeps its content until the
pool hands it out again (the block's generation in the pool tells whether it still does).

One content block may have several physical copies (two requests computed the same group block
concurrently, or a resumed request recomputed blocks of its own whose older copies were not evicted
yet). vLLM keeps every copy under the hash and a lookup returns the earliest-inserted copy still
cached (``BlockHashToBlockMap.get_one_block``); ``_Copies`` keeps them the same way, one row per
copy in insertion order. A request's own blocks are only looked up by the request itself (or its
session), and only when it is admitted after a release, so they are indexed when it releases them.
"""

from __future__ import annotations

import numpy as np

from simulator.block_pool import BlockPool

_EMPTY = np.empty(0, np.int64)


class _Copies:
    """Physical copies of a run of content blocks: ``ids[r, k]`` is copy ``r`` of block ``k``.

    Rows are in insertion order per column; an entry is live while the pool generation of its
    block still equals the one recorded (-1 id: no entry).
    """

    __slots__ = ("gens", "ids")

    def __init__(self, ncols: int) -> None:
        self.ids = np.full((1, ncols), -1, np.int64)
        self.gens = np.zeros((1, ncols), np.int64)

    @classmethod
    def of(cls, pool: BlockPool, lo: int, blocks: np.ndarray) -> _Copies:
        """A first copy of blocks ``lo..`` (what ``_Copies(0).add(pool, lo, blocks)`` gives)."""
        c = cls.__new__(cls)
        hi = lo + len(blocks)
        c.ids = np.full((1, hi), -1, np.int64)
        c.ids[0, lo:] = blocks
        c.gens = np.zeros((1, hi), np.int64)
        c.gens[0, lo:] = pool.gen[blocks]
        return c

    def _live(self, pool: BlockPool, lo: int, hi: int) -> np.ndarray:
        ids = self.ids[:, lo:hi]
        return (ids >= 0) & (pool.gen[np.maximum(ids, 0)] == self.gens[:, lo:hi])

    def hits(self, pool: BlockPool, lo: int, hi: int) -> np.ndarray:
        """Earliest live copy of each block from ``lo`` on, for the leading run of blocks that have one."""
        hi = min(hi, self.ids.shape[1])
        if hi <= lo:
            return _EMPTY
        live = self._live(pool, lo, hi)
        has = live.any(axis=0)
        n = len(has) if np.count_nonzero(has) == len(has) else int(has.argmin())
        if n == 0:
            return _EMPTY
        row = live[:, :n].argmax(axis=0)
        return self.ids[row, lo + np.arange(n)]

    def add(self, pool: BlockPool, lo: int, blocks: np.ndarray) -> None:
        """Record ``blocks`` as copies of blocks ``lo..``, after the live copies, unless already there."""
        hi = lo + len(blocks)
        if hi > self.ids.shape[1]:
            rows, cols = self.ids.shape
            ids = np.full((rows, hi), -1, np.int64)
            ids[:, :cols] = self.ids
            gens = np.zeros((rows, hi), np.int64)
            gens[:, :cols] = self.gens
            self.ids, self.gens = ids, gens
        live = self._live(pool, lo, hi)
        known = (live & (self.ids[:, lo:hi] == blocks)).any(axis=0)
        if np.count_nonzero(known) == len(known):
            return
        nrows = live.shape[0]
        # Row after the last live copy of each column (0 when none is live).
        slot = np.where(live.any(axis=0), nrows - live[::-1].argmax(axis=0), 0)
        if np.count_nonzero(slot[~known] >= nrows):
            self.ids = np.vstack([self.ids, np.full((1, self.ids.shape[1]), -1, np.int64)])
            self.gens = np.vstack([self.gens, np.zeros((1, self.gens.shape[1]), np.int64)])
        cols = (~known).nonzero()[0]
        self.ids[slot[cols], lo + cols] = blocks[cols]
        self.gens[slot[cols], lo + cols] = pool.gen[blocks[cols]]


class KVCacheManager:
    """Block tables of the requests that hold blocks, and the prefix-cache index.

    Block tables are rows of one 2-D array (a row per request holding blocks, reused once it frees
    them), so the blocks a step hands out are written with one vectorised store
    whatever the number of requests, and a table is a view, never a concatenation.
    """

    def __init__(self, pool: BlockPool, block_size: int, enable_caching: bool) -> None:
        self.pool = pool
        self.block_size = block_size
        self.enable_caching = enable_caching
        self._tab = np.zeros((64, 16), np.int64)  # row -> block ids, first _len[row] valid
        self._len = np.zeros(64, np.int64)
        self._spare = list(range(63, -1, -1))  # free rows, popped from the end
        self._row_of = np.full(1024, -1, np.int64)  # request id -> row (-1: holds no table)
        # Group g -> copies of its blocks.
        self._group: dict[int, _Copies] = {}
        # Content key -> (first own block index, copies of its released full blocks from there).
        self._own: dict[int, tuple[int, _Copies]] = {}

    # ---- table storage ----------------------------------------------------------------------
    def _new_row(self, rid: int) -> int:
        if not self._spare:
            n = len(self._len)
            self._tab = np.concatenate([self._tab, np.zeros_like(self._tab)])
            self._len = np.concatenate([self._len, np.zeros(n, np.int64)])
            self._spare = list(range(2 * n - 1, n - 1, -1))
        if rid >= len(self._row_of):
            grown = np.full(max(2 * len(self._row_of), rid + 1), -1, np.int64)
            grown[: len(self._row_of)] = self._row_of
            self._row_of = grown
        row = self._spare.pop()
        self._row_of[rid] = row
        self._len[row] = 0
        return row

    def _fit_cols(self, need: int) -> None:
        cols = self._tab.shape[1]
        if need > cols:
            tab = np.zeros((self._tab.shape[0], max(need, 2 * cols)), np.int64)
            tab[:, :cols] = self._tab
            self._tab = tab

    # ---- lookups ----------------------------------------------------------------------------
    def lookup(self, num_tokens: int, group: int, group_len: int, key: int) -> tuple[np.ndarray, int]:
        """Cached leading blocks for a request about to be admitted: (block ids, evictable count).

        Mirrors ``KVCacheManager.get_computed_blocks``: the hit is capped at ``num_tokens - 1``
        tokens, whole blocks only, the longest run of cached blocks from the start.
        """
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
                h = entry.hits(self.pool, 0, min(n_group, limit))
                if len(h):
                    hits.append(h)
                k = len(h)
            if k < n_group:
                return self._finish_lookup(hits)
        own = self._own.get(key)
        if own is not None and own[0] == k and k < limit:
            h = own[1].hits(self.pool, k, limit)
            if len(h):
                hits.append(h)
        return self._finish_lookup(hits)

    def _finish_lookup(self, hits: list[np.ndarray]) -> tuple[np.ndarray, int]:
        if not hits:
            return _EMPTY, 0
        ids = hits[0] if len(hits) == 1 else np.concatenate(hits)
        return ids, int((self.pool.ref[ids] == 0).sum())

    # ---- allocation -------------------------------------------------------------------------
    def admit(self, rid: int, hit_ids: np.ndarray) -> None:
        """Start a block table for an admitted request, re-using its cached leading blocks."""
        self.pool.touch(hit_ids)
        row = self._new_row(rid)
        nh = len(hit_ids)
        if nh:
            self._fit_cols(nh)
            self._tab[row, :nh] = hit_ids
            self._len[row] = nh

    def admit_many(self, rids: np.ndarray) -> None:
        """``admit`` for requests with no cached blocks."""
        for rid in rids.tolist():
            self._new_row(rid)

    def has_own(self, key: int) -> bool:
        """Whether blocks of this content key were ever indexed (a lookup may then hit)."""
        return key in self._own

    def allocate(self, rid: int, m: int) -> None:
        if m > 0:
            row = int(self._row_of[rid])
            n = int(self._len[row])
            self._fit_cols(n + m)
            self._tab[row, n : n + m] = self.pool.allocate(m)
            self._len[row] = n + m

    def allocate_many(self, rids: np.ndarray, counts: np.ndarray) -> None:
        """Allocate ``counts[i]`` blocks to ``rids[i]``, in order, with one pool call."""
        total = int(counts.sum())
        if total == 0:
            return
        self.append_blocks(rids, counts, self.pool.allocate(total))

    def append_blocks(self, rids: np.ndarray, counts: np.ndarray, ids: np.ndarray) -> None:
        """Append ``ids`` (grouped by request, in ``rids`` order) to the block tables, ``counts[i]`` each."""
        nz = counts.nonzero()[0]
        if not len(nz):
            return
        rows = self._row_of[rids[nz]]
        c = counts[nz]
        start = self._len[rows]
        self._fit_cols(int((start + c).max()))
        if len(ids) == len(nz):  # one block each (decode steps)
            self._tab[rows, start] = ids
        else:
            first = np.add.accumulate(c) - c  # where each request's blocks start in ``ids``
            cols = np.arange(len(ids)) + (start - first).repeat(c)
            self._tab[rows.repeat(c), cols] = ids
        self._len[rows] = start + c

    def cache_group_blocks(self, rid: int, group: int, group_len: int, upto_tokens: int) -> None:
        """Index this request's full group blocks (those covering tokens < ``upto_tokens``).

        vLLM ``BlockPool.cache_full_blocks`` at schedule time: each newly full block gets its hash
        and joins the copies already cached under it (a hit block is the same copy, not a new one).
        """
        if not self.enable_caching or group < 0:
            return
        n = min(group_len, upto_tokens) // self.block_size
        if n == 0:
            return
        entry = self._group.get(group)
        if entry is None:
            entry = self._group[group] = _Copies(group_len // self.block_size)
        entry.add(self.pool, 0, self._table_array(rid)[:n])

    def _table_array(self, rid: int) -> np.ndarray:
        """The request's block ids (a view: use before its row is reused)."""
        row = int(self._row_of[rid])
        return self._tab[row, : self._len[row]]

    # ---- release ----------------------------------------------------------------------------
    def _index_own(self, table: np.ndarray, computed: int, group: int, group_len: int, key: int) -> None:
        """Index a releasing request's own full blocks under its content key (before the pool frees them)."""
        first = group_len // self.block_size if group >= 0 else 0
        n_full = computed // self.block_size
        if n_full > first:
            entry = self._own.get(key)
            if entry is None or entry[0] != first:
                self._own[key] = (first, _Copies.of(self.pool, first, table[first:n_full]))
            else:
                entry[1].add(self.pool, first, table[first:n_full])

    def free(self, rid: int, computed: int, group: int, group_len: int, key: int, cache_own: bool = True) -> int:
        """Release a request's blocks (tail first, as vLLM does). Returns how many it held."""
        row = int(self._row_of[rid])
        table = self._tab[row, : self._len[row]]
        self._row_of[rid] = -1
        self._spare.append(row)
        n = len(table)
        if self.enable_caching and cache_own:
            self._index_own(table, computed, group, group_len, key)
        if n:
            # Tail first (vLLM ``SingleTypeKVCacheManager.free``). The request's full blocks up to
            # ``computed`` carry a hash (hit blocks, and blocks cached when their tokens were
            # scheduled, ``FullAttentionManager.cache_blocks``); its partial tail block does not.
            hashed = None
            if self.enable_caching:
                hashed = np.arange(n - 1, -1, -1) < computed // self.block_size
            self.pool.free(table[::-1], hashed)
        return n

    def free_many(
        self, rids: np.ndarray, computed: np.ndarray, group: np.ndarray, group_len: np.ndarray, key: np.ndarray,
        cache_own: bool = True,
    ) -> None:
        """``free`` for each of ``rids`` in order (the requests a step finished), with one pool call."""
        if len(rids) == 1:  # one request: its own release is cheaper than the batched bookkeeping
            self.free(int(rids[0]), int(computed[0]), int(group[0]), int(group_len[0]), int(key[0]), cache_own)
            return
        if self.enable_caching and cache_own:
            for i, rid in enumerate(rids.tolist()):
                self._index_own(self._table_array(rid), int(computed[i]), int(group[i]), int(group_len[i]), int(key[i]))
        rows = self._row_of[rids]
        self._row_of[rids] = -1
        self._spare.extend(rows.tolist())
        lens = self._len[rows]
        total = int(lens.sum())
        if total == 0:
            return
        # Each table tail first, the tables one after the other.
        seg = np.arange(len(rids)).repeat(lens)
        col = (lens - 1 + np.add.accumulate(lens) - lens).repeat(lens) - np.arange(total)
        ids = self._tab[rows[seg], col]
        hashed = col < (computed // self.block_size)[seg] if self.enable_caching else None
        self.pool.free_many(ids, hashed, seg)

    def forget(self, key: int) -> None:
        """Drop the index of a finished request's own blocks when nothing can hit them again."""
        self._own.pop(key, None)
