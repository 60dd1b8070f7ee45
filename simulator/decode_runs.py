"""Runs of uneventful decode steps (macro-steps): proved by the scheduler, then applied at once.

A run is k >= 1 upcoming steps in which every running request decodes one token and nothing is
admitted, preempted or finished before the last step. The engine prices the run with
``CostModel.step_times``, cuts it at the next SimPy event and advances it with one timeout; the
results are byte-identical to stepping one step at a time (``tests/test_macro_steps.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cost import StepWork
from simulator.plan import StepPlan


@dataclass(frozen=True)
class DecodeRun:
    """Up to ``max_steps`` pure decode steps that ``Scheduler.decode_run`` proved uneventful."""

    rids: np.ndarray  # the running requests, in running order
    num_computed: np.ndarray  # their computed tokens before the run
    residue: np.ndarray  # first step (mod block_size) at which each needs a new block
    alloc: np.ndarray  # blocks allocated at each step
    free_after: np.ndarray  # free blocks after each step's allocation
    max_steps: int


def _ones(n: int) -> np.ndarray:
    """``np.ones(n, np.int64)`` without the module function's dispatch cost (a few us here)."""
    a = np.empty(n, np.int64)
    a.fill(1)
    return a


class DecodeRuns:
    """The macro-step part of ``Scheduler`` (mixed into it; uses its running list, queues and pool)."""

    def decode_run(self, max_steps: int) -> DecodeRun | None:
        """The longest run of upcoming steps that are provably pure decode steps, or None.

        Call only when every running request sampled a token in the previous step (so each now
        needs exactly one token). The run is k steps in which nothing finishes before the last
        one, every block the running requests need fits in the free pool (so nobody is
        preempted), and no waiting or swapped request can be admitted: the queue is empty, or
        ``max_num_seqs`` is reached, or its head does not fit even before the run's allocations. Free blocks only shrink during
        such a run and a head's block requirement only grows as cached blocks are evicted, so a
        head that does not fit at the first step does not fit at any later one. The engine then
        prices the steps with ``CostModel.step_times`` and cuts the run at the next SimPy event.
        """
        n, cfg, R = self._n, self.cfg, self.reqs
        budget = cfg.max_num_batched_tokens
        if n == 0 or n > budget or max_steps < 1:
            return None
        # Cheap early exit (None is always safe: the engine then steps once): a request can be
        # admitted even if every running request takes a block in the first step.
        need = self._admission_need(n, budget - n)
        if need <= self.pool.num_free - n:
            return None
        r = self._run[:n].copy()
        nc = R.num_computed[r]
        rem = R.max_tokens[r] - R.num_out[r]
        kmax = min(int(rem.min()), max_steps)  # the first step that samples a last token ends a run
        if kmax < 1:
            return None
        nb = R.num_blocks[r]
        bs = cfg.block_size
        # Preconditions that the previous step's sampling implies; checked, as they are cheap.
        if np.count_nonzero(R.num_tokens[r] - nc != 1) or np.count_nonzero(R.computed_hwm[r] != nc) or np.count_nonzero(nb * bs < nc):
            return None
        # Step j (0-based) computes token position nc + j: a request needs a new block when that
        # position starts one, i.e. at the steps j with (nc + j) % bs == 0 (nb == ceil(nc / bs)).
        if np.count_nonzero(nb != (nc + bs - 1) // bs):
            return None
        if self._grouped and self.cfg.enable_prefix_caching and np.count_nonzero(R.group_len[r] > nc):
            return None  # a request still filling shared-prefix blocks (never happens in decode)
        res = (-nc) % bs
        per_res = np.bincount(res, minlength=bs)
        steps = np.arange(kmax)
        alloc = per_res[steps % bs]  # blocks allocated at each step
        free_after = self.pool.num_free - np.add.accumulate(alloc)
        kmax = min(kmax, int((-free_after).searchsorted(0, side="right")))
        if kmax < 1:
            return None
        if need <= free_after[0]:
            return None
        return DecodeRun(r, nc, res, alloc[:kmax], free_after[:kmax], kmax)

    def _admission_need(self, n: int, budget_left: int) -> float:
        """Free blocks the next swapped or waiting request needs to be admitted (inf: none can be,
        whatever is free). See decode_run."""
        cfg = self.cfg
        if n >= cfg.max_num_seqs or budget_left <= 0:
            return np.inf
        thr = cfg.long_prefill_token_threshold  # in force: a request runs and another waits
        if self.swapped:
            return self._swap_in_demand(self.swapped[0], thr, budget_left)[1]
        if not self.num_waiting:
            return np.inf
        # The evictable hit blocks are left out: evicting a copy can swap it for an in-use copy,
        # so only the gate (which never shrinks under eviction) is a safe lower bound.
        return self._admission_demand(self._peek(), thr, budget_left)[4]

    def apply_decode_run(self, run: DecodeRun, k: int, times: np.ndarray) -> tuple[np.ndarray, StepPlan]:
        """Schedule the first ``k`` steps of ``run`` and apply the outcome of all but the last.

        Step j ends at ``times[j + 1]``. This leaves the state k single steps would leave just
        before the last one ends; the caller passes the returned plan of the last step to
        ``update`` once it has. Blocks are taken from the pool in the order single steps take
        them (step by step, running order within a step). Also returns the first step's
        inter-token gaps (per request; empty when k == 1): each later step's gap is the same for
        every request, ``times[j + 1] - times[j]``.
        """
        R, bs = self.reqs, self.cfg.block_size
        r, nc, res = run.rids, run.num_computed, run.residue
        n = len(r)
        total = int(run.alloc[:k].sum())
        if total and k <= bs:
            # At most one block each: request i takes one at step res_i if res_i < k, and blocks go
            # out step by step, in running order within a step.
            idx = (res < k).nonzero()[0]
            pos = np.empty(len(idx), np.int64)
            pos[res[idx].argsort(kind="stable")] = np.arange(len(idx))
            ids = self.pool.allocate(total)
            self.kv.append_blocks(r[idx], _ones(len(idx)), ids[pos])
        elif total:
            # Request i allocates at steps res_i, res_i + bs, ... < k; its block at step j is the
            # (blocks taken before step j) + (rank of i among the requests allocating at step j)-th.
            counts = np.where(res < k, (k - res + bs - 1) // bs, 0)
            order = res.argsort(kind="stable")
            rank = np.empty(n, np.int64)
            starts = res[order].searchsorted(np.arange(bs))
            rank[order] = np.arange(n) - starts[res[order]]
            before = np.concatenate(([0], np.add.accumulate(run.alloc[: k - 1])))
            who = np.arange(n).repeat(counts)
            m = np.arange(total) - (np.add.accumulate(counts) - counts).repeat(counts)
            pos = before[res[who] + m * bs] + rank[who]
            ids = self.pool.allocate(total)
            self.kv.append_blocks(r, counts, ids[pos])
        after = nc + k
        R.num_computed[r] = after
        R.computed_hwm[r] = after
        R.num_blocks[r] = (after + bs - 1) // bs
        if k > 1:
            R.num_tokens[r] += k - 1
            R.num_out[r] += k - 1
            first_gaps = times[1] - R.last_token[r]
            R.last_token[r] = times[k - 1]
        else:
            first_gaps = np.empty(0)
        before = after - 1
        ctx = int(before.sum())
        free = int(run.free_after[k - 1])
        nw, ns = self.num_waiting, len(self.swapped)
        last = StepPlan(
            rids=r,
            num_new=_ones(n),
            computed_before=before,
            new=(),
            resumed=(),
            preempted=(),
            aborted=(),
            prefix_hits=(),
            work=StepWork(num_seqs=n, num_tokens=n, num_prefill_tokens=0, num_decode_tokens=n,
                          context_tokens=ctx, attn_pairs=float(ctx + n), num_sampled=n),
            recomputed_tokens=0,
            kv_usage=1.0 - free / self.pool.num_blocks,
            num_free_blocks=free,
            num_running=n,
            num_waiting=nw,
            num_swapped=ns,
            long_prefill_cap=0 if n + nw + ns <= 1 else self.cfg.long_prefill_token_threshold,
        )
        return first_gaps, last
