"""The paged KV block pool: free queue, reference counts, generations.

Mirrors vLLM V1's block pool: one block is kept aside as the null block; free blocks sit in a queue
and allocation takes them from its head, which evicts whatever cached content they held. A freed
block that carries a prefix-cache hash goes to the tail (LRU eviction of cached content); a freed
block without one (a partial block, or any block with caching off) goes to the head, to be reused
first (vLLM ``BlockPool.free_blocks``: ``prepend_n`` for unhashed, ``append_n`` for hashed blocks).
A cached block that a new request re-uses while it sits in the free queue is "touched": taken out
of the queue without being evicted.

Implementation: block state lives in numpy arrays. The free queue is an array of
(block id, free serial) entries between ``_head`` and ``_tail``, with slack on both sides so blocks
can be put in front of the head as well as behind the tail; taking a block out of the middle leaves
a stale entry that is skipped when it reaches the head, so every operation is a slice, not a
per-block Python loop. A block gets a new generation whenever it is handed out (a stamp no block
had before: one per allocation), which invalidates any cache entry that still points at its old
content (see ``kv_cache.py``).
"""

from __future__ import annotations

import numpy as np


class BlockPool:
    def __init__(self, num_gpu_blocks: int) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks must be >= 2 (one is the null block), got {num_gpu_blocks}")
        n = num_gpu_blocks - 1  # vLLM reserves one block as the null block
        self.num_blocks = n
        self.num_free = n
        self.gen = np.zeros(n, np.int64)
        self._stamp = 0  # the last generation handed out (generations are compared, never counted)
        self.ref = np.zeros(n, np.int32)
        self.in_free = np.ones(n, np.bool_)
        self._serial = np.zeros(n, np.int64)  # stamp of a block's latest release (its valid queue entry)
        self._fstamp = 0
        cap = max(4 * n, 64)
        self._q_id = np.zeros(cap, np.int64)
        self._q_ser = np.zeros(cap, np.int64)
        h = (cap - n) // 2
        self._q_id[h : h + n] = np.arange(n)
        self._head, self._tail = h, h + n

    @property
    def usage(self) -> float:
        """vLLM's kv_cache_usage: the fraction of (non-null) blocks not free."""
        return 1.0 - self.num_free / self.num_blocks

    def allocate(self, m: int) -> np.ndarray:
        """Take ``m`` blocks from the head of the free queue (caller checked ``m <= num_free``)."""
        if m <= 0:
            return np.empty(0, np.int64)
        if m > self.num_free:
            raise RuntimeError(f"allocate({m}) with only {self.num_free} free blocks")
        out = []
        got = 0
        h = self._head
        while got < m:
            end = min(self._tail, h + (m - got) + 8)
            ids = self._q_id[h:end]
            ok = self.in_free[ids] & (self._serial[ids] == self._q_ser[h:end])
            if np.count_nonzero(ok) == len(ok) and end - h >= m - got:
                take = ids[: m - got].copy()  # a copy: queue slots get reused by prepends
                h += m - got
            else:
                pos = ok.nonzero()[0][: m - got]
                take = ids[pos]
                h = (h + int(pos[-1]) + 1) if len(pos) == m - got else end
            out.append(take)
            got += len(take)
        self._head = h
        ids = out[0] if len(out) == 1 else np.concatenate(out)
        self.in_free[ids] = False
        self._stamp += 1
        self.gen[ids] = self._stamp
        self.ref[ids] = 1
        self.num_free -= m
        return ids

    def touch(self, ids: np.ndarray) -> None:
        """Take cached blocks into use by one more request (out of the free queue if they were there)."""
        if len(ids) == 0:
            return
        was_free = self.ref[ids] == 0
        nf = int(was_free.sum())
        if nf:
            self.in_free[ids[was_free]] = False
            self.num_free -= nf
        self.ref[ids] += 1

    def free(self, ids: np.ndarray, hashed: np.ndarray | None = None) -> None:
        """Release one request's hold on ``ids`` (given in eviction order: first evicted first).

        ``hashed[i]`` tells whether ``ids[i]`` carries a prefix-cache hash (None: none does).
        Mirrors vLLM ``BlockPool.free_blocks``: of the blocks whose ref count drops to 0, those
        without a hash go to the head of the free queue, keeping their given order (the first is
        reused first); those with a hash are appended at the tail.
        """
        if len(ids) == 0:
            return
        self.ref[ids] -= 1
        zmask = self.ref[ids] == 0
        if not np.count_nonzero(zmask):
            return
        zero = ids[zmask]
        if hashed is None:
            self._release(zero, zero[:0])
        else:
            hz = hashed[zmask]
            self._release(zero[~hz], zero[hz])

    def free_many(self, ids: np.ndarray, hashed: np.ndarray | None, seg: np.ndarray) -> None:
        """``free`` once per request, in order, in one call: ``ids`` are the requests' blocks one
        after the other (each in eviction order), ``seg[i]`` the position of ``ids[i]``'s request.

        Consecutive calls prepend each request's unhashed blocks in front of the previous one's
        and append hashed blocks behind them, so the head gets the last request's first; a block
        held by several of the requests is released by the last of them.
        """
        if len(ids) == 0:
            return
        if not np.count_nonzero(self.ref[ids] != 1):  # nobody else holds any (so no block appears twice)
            self.ref[ids] = 0
            zero, zseg, hz = ids, seg, hashed
        else:
            np.subtract.at(self.ref, ids, 1)
            last = np.full(self.num_blocks, -1, np.int64)
            np.maximum.at(last, ids, np.arange(len(ids)))
            zmask = (self.ref[ids] == 0) & (last[ids] == np.arange(len(ids)))
            if not np.count_nonzero(zmask):
                return
            zero, zseg = ids[zmask], seg[zmask]
            hz = None if hashed is None else hashed[zmask]
        if hz is None:
            front, fseg, back = zero, zseg, zero[:0]
        else:
            f = ~hz
            front, fseg, back = zero[f], zseg[f], zero[hz]
        if len(front) and fseg[0] != fseg[-1]:
            front = front[(-fseg).argsort(kind="stable")]  # later requests' blocks ahead
        self._release(front, back)

    def _release(self, front: np.ndarray, back: np.ndarray) -> None:
        """Put blocks whose ref count reached 0 into the free queue: ``front`` ahead of the head
        (``front[0]`` first), ``back`` behind the tail."""
        zero = np.concatenate((front, back)) if len(back) else front
        self._fstamp += 1
        self._serial[zero] = self._fstamp
        self.in_free[zero] = True
        self.num_free += len(zero)
        kf, kb = len(front), len(back)
        if self._head < kf or self._tail + kb > len(self._q_id):
            self._compact(kf, kb)
        if kf:
            h = self._head - kf
            self._q_id[h : self._head] = front
            self._q_ser[h : self._head] = self._fstamp
            self._head = h
        if kb:
            t = self._tail
            self._q_id[t : t + kb] = back
            self._q_ser[t : t + kb] = self._fstamp
            self._tail = t + kb

    def _compact(self, front: int, back: int) -> None:
        """Drop stale entries and re-centre the queue with room for ``front`` + ``back`` more."""
        q = self._q_id[self._head : self._tail]
        s = self._q_ser[self._head : self._tail]
        valid = self.in_free[q] & (self._serial[q] == s)
        q, s = q[valid], s[valid]
        live = len(q)
        cap = len(self._q_id)
        need = live + front + back
        if 2 * need > cap:
            cap = max(2 * cap, 4 * need)
        h = (cap - need) // 2 + front
        q_id = np.zeros(cap, np.int64)
        q_ser = np.zeros(cap, np.int64)
        q_id[h : h + live] = q
        q_ser[h : h + live] = s
        self._q_id, self._q_ser = q_id, q_ser
        self._head, self._tail = h, h + live

    def free_order(self) -> np.ndarray:
        """The free queue, head first (for tests and debugging)."""
        q = self._q_id[self._head : self._tail]
        valid = self.in_free[q] & (self._serial[q] == self._q_ser[self._head : self._tail])
        return q[valid]

    def check(self) -> None:
        """Invariant check for tests: the free count matches the blocks marked free and unreferenced."""
        assert self.num_free == int(self.in_free.sum()), (self.num_free, int(self.in_free.sum()))
        assert not (self.in_free & (self.ref > 0)).any()
        assert ((self.ref > 0) | self.in_free).all(), "a block is neither free nor referenced"
        q = self._q_id[self._head : self._tail]
        valid = self.in_free[q] & (self._serial[q] == self._q_ser[self._head : self._tail])
        assert int(valid.sum()) == self.num_free
