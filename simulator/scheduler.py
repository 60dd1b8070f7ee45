"""vLLM V1 scheduling: one ``schedule()`` per engine step, then ``update()`` with the step's output.

The rules (README, "What is modelled, and how"; checked step by step against recorded vLLM traces by
tests/test_parity.py):
- running requests first, in admission order, each given ``num_tokens - num_computed`` tokens
  capped by what is left of the token budget (chunked prefill);
- a running request that cannot get its blocks preempts the tail of the running list (with
  priority scheduling: the lowest-priority, latest-arriving request) and retries, until it fits or
  it was itself the victim;
- waiting requests are admitted in queue order only if nothing was preempted in this step, while
  ``len(running) < max_num_seqs`` and budget remains; the first that cannot get its blocks stops
  admission (nobody jumps ahead);
- recompute preemption sends the victim to the front of the waiting queue with nothing computed;
  swap preemption copies its blocks to host memory, and swapped requests come back before any
  new admission.

The common step (nobody preempted) is handled with numpy over the whole running list; only
preemptions and admissions walk requests one at a time.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from simulator.cost import StepWork
from simulator.decode_runs import DecodeRuns
from simulator.kv_cache import KVCacheManager
from simulator.plan import StepOutput, StepPlan
from simulator.requests import ABORTED, FINISHED, RUNNING, SWAPPED, WAITING, RequestTable

_EMPTY = np.empty(0, np.int64)


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    admission: str = "first_chunk"  # or "full_prompt" (vLLM's scheduler_reserve_full_isl)
    policy: str = "fcfs"  # or "priority"
    preemption_mode: str = "recompute"  # or "swap"
    swap_space_blocks: int = 0
    block_bytes: float = 0.0  # KV bytes of one block on one GPU (for swap traffic)
    on_swap_full: str = "recompute"  # or "abort"
    cache_finished_content: bool = False  # keep finished requests' own blocks findable (sessions)


class Scheduler(DecodeRuns):
    # Private switch: admit a run of plain requests at the head of the FCFS queue at once
    # (``_admit_plain``). Results are identical either way; tests/test_batched_admission.py checks.
    batch_admission = True

    def __init__(self, cfg: SchedulerConfig, reqs: RequestTable, kv: KVCacheManager) -> None:
        self.cfg = cfg
        self.reqs = reqs
        self.kv = kv
        self.pool = kv.pool
        self._run = np.zeros(max(cfg.max_num_seqs, 16), np.int64)
        self._n = 0
        self._fifo: deque[int] = deque()
        self._heap: list[tuple[int, float, int, int]] = []
        self._seq = 0
        self.swapped: deque[int] = deque()
        self._swap_blocks: dict[int, int] = {}
        self.swap_used_blocks = 0
        self.num_preemptions = 0
        self._thr = cfg.long_prefill_token_threshold  # in force this step; set by schedule()
        self._grouped = False  # whether any request so far has a shared-prefix group

    # ---- queues -------------------------------------------------------------------------------
    @property
    def running(self) -> np.ndarray:
        return self._run[: self._n]

    @property
    def num_waiting(self) -> int:
        return len(self._heap) if self.cfg.policy == "priority" else len(self._fifo)

    def has_work(self) -> bool:
        return self._n > 0 or self.num_waiting > 0 or len(self.swapped) > 0

    def add_request(self, rid: int) -> None:
        self.reqs.status[rid] = WAITING
        if self.reqs.group[rid] >= 0:
            self._grouped = True
        self._push(rid, front=False)

    def _push(self, rid: int, front: bool) -> None:
        if self.cfg.policy == "priority":
            self._seq += 1
            R = self.reqs
            heapq.heappush(self._heap, (int(R.priority[rid]), float(R.arrival[rid]), self._seq, rid))
        elif front:
            self._fifo.appendleft(rid)
        else:
            self._fifo.append(rid)

    def _peek(self) -> int:
        return self._heap[0][3] if self.cfg.policy == "priority" else self._fifo[0]

    def _pop(self) -> int:
        return heapq.heappop(self._heap)[3] if self.cfg.policy == "priority" else self._fifo.popleft()

    def _append_running(self, rids: int | np.ndarray) -> None:
        """Append one request, or several in order, to the running list."""
        k = len(rids) if isinstance(rids, np.ndarray) else 1
        if self._n + k > len(self._run):
            self._run = np.concatenate([self._run, np.zeros(max(len(self._run), k), np.int64)])
        self._run[self._n : self._n + k] = rids
        self._n += k

    # ---- scheduling -----------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        cfg, R = self.cfg, self.reqs
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        self._preempted: list[int] = []
        self._aborted: list[int] = []
        self._swap_bytes = 0.0
        parts_r: list[np.ndarray] = []
        parts_a: list[np.ndarray] = []
        # The long-prefill cap only applies when some other request could use the budget: vLLM's
        # ``Scheduler.schedule`` sets it to 0 when running + waiting requests <= 1 at step start.
        thr = cfg.long_prefill_token_threshold
        if self._n + self.num_waiting + len(self.swapped) <= 1:
            thr = 0
        self._thr = thr

        n = self._n
        if n:
            r = self._run[:n].copy()
            nc = R.num_computed[r]
            need = R.num_tokens[r] - nc
            if thr > 0:
                np.minimum(need, thr, out=need)
            cum = np.add.accumulate(need)
            alloc = np.minimum(np.maximum(budget - (cum - need), 0), need)  # np.clip costs ~10x more
            nb = (nc + alloc + bs - 1) // bs - R.num_blocks[r]
            cb = np.add.accumulate(nb)
            if cb[-1] <= self.pool.num_free:
                self.kv.allocate_many(r, nb)
                R.num_blocks[r] += nb
                sel = alloc > 0
                parts_r.append(r[sel])
                parts_a.append(alloc[sel])
                budget -= int(alloc.sum())
            else:
                i = int(cb.searchsorted(self.pool.num_free, side="right"))
                self.kv.allocate_many(r[:i], nb[:i])
                R.num_blocks[r[:i]] += nb[:i]
                budget -= int(alloc[:i].sum())
                if cfg.policy == "fcfs":
                    done_r, done_a, budget = self._schedule_running_fcfs(r, alloc, nb, cb, i, budget, now)
                else:
                    done_r, done_a, budget = self._schedule_running_priority(r, alloc, i, budget, now)
                parts_r.append(done_r)
                parts_a.append(done_a)
            self._cache_group_prefill(parts_r[-1], parts_a[-1])

        new: list[int] = []
        resumed: list[int] = []
        hits: list[tuple[int, int]] = []
        if not self._preempted:
            ar, aa, budget = self._admit(now, budget, new, resumed, hits)
            if len(ar):
                parts_r.append(ar)
                parts_a.append(aa)

        if parts_r:
            rids = parts_r[0] if len(parts_r) == 1 else np.concatenate(parts_r)
            num_new = parts_a[0] if len(parts_a) == 1 else np.concatenate(parts_a)
        else:
            rids, num_new = _EMPTY, _EMPTY
        before = R.num_computed[rids]
        after = before + num_new
        R.num_computed[rids] = after
        hwm = R.computed_hwm[rids]
        rec = np.maximum(np.minimum(after, hwm) - before, 0)
        recomputed = int(rec.sum())
        if recomputed:
            R.recomputed[rids] += rec
        R.computed_hwm[rids] = np.maximum(hwm, after)

        ntok = R.num_tokens[rids]
        sampled = after == ntok
        decode = int(np.count_nonzero((num_new == 1) & sampled & (before > 0)))
        total = int(num_new.sum())
        work = StepWork(
            num_seqs=len(rids),
            num_tokens=total,
            num_prefill_tokens=total - decode,
            num_decode_tokens=decode,
            context_tokens=int(before.sum()),
            attn_pairs=float(np.dot(num_new, before) + 0.5 * np.dot(num_new, num_new + 1)),
            num_sampled=int(np.count_nonzero(sampled)),
            swap_bytes=self._swap_bytes,
        )
        return StepPlan(
            rids=rids,
            num_new=num_new,
            computed_before=before,
            new=tuple(new),
            resumed=tuple(resumed),
            preempted=tuple(self._preempted),
            aborted=tuple(self._aborted),
            prefix_hits=tuple(hits),
            work=work,
            recomputed_tokens=recomputed,
            kv_usage=self.pool.usage,
            num_free_blocks=self.pool.num_free,
            num_running=self._n,
            num_waiting=self.num_waiting,
            num_swapped=len(self.swapped),
            long_prefill_cap=self._thr,
            sampled=rids[sampled],
        )

    def _schedule_running_fcfs(
        self, r: np.ndarray, alloc: np.ndarray, nb: np.ndarray, cb: np.ndarray, start: int, budget: int, now: float
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """The running list from ``start`` under FCFS, preempting as vLLM does, vectorised between
        preemptions (``_schedule_running_priority`` is the one-request-at-a-time walk).

        Under FCFS the victim is always the last running request, which has not been scheduled
        yet in this step (the request being scheduled is itself the victim once it is last), so
        the requests between two preemptions can be scheduled at once as in the fast path: only
        each preemption is handled one request at a time. Preempting from the tail changes
        neither the budget nor the blocks of the requests ahead of it, so the tokens (``alloc``)
        and new blocks (``nb``, cumulated in ``cb``) the fast path computed for them stand; only
        the free-block count moves.
        """
        R, kv, pool = self.reqs, self.kv, self.pool
        keep_r, keep_a = [r[:start]], [alloc[:start]]
        j, end = start, len(r)
        while j < end and budget > 0:
            base = int(cb[j - 1]) if j else 0
            p = int(cb[j:end].searchsorted(pool.num_free + base, side="right"))
            if p:
                kv.allocate_many(r[j : j + p], nb[j : j + p])
                R.num_blocks[r[j : j + p]] += nb[j : j + p]
                keep_r.append(r[j : j + p])
                keep_a.append(alloc[j : j + p])
                budget -= int(alloc[j : j + p].sum())
            if p == end - j:
                break
            q = j + p
            aq, mq = int(alloc[q]), int(nb[q])
            fits = True
            while mq > pool.num_free:
                end -= 1
                self._preempt(int(r[end]), now)
                if end == q:
                    fits = False
                    break
            if not fits:
                break
            if mq > 0:
                kv.allocate(int(r[q]), mq)
                R.num_blocks[r[q]] += mq
            keep_r.append(r[q : q + 1])
            keep_a.append(alloc[q : q + 1])
            budget -= aq
            j = q + 1
        self._n = end
        self._run[:end] = r[:end]
        rr, aa = np.concatenate(keep_r), np.concatenate(keep_a)
        sel = aa > 0
        return rr[sel], aa[sel], budget

    def _schedule_running_priority(
        self, r: np.ndarray, alloc: np.ndarray, start: int, budget: int, now: float
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Walk the running list from ``start`` one request at a time, preempting as vLLM does under
        priority scheduling (the victim is the lowest-priority, latest-arriving request)."""
        R, bs = self.reqs, self.cfg.block_size
        order = r.tolist()
        scheduled: dict[int, int] = {rid: int(a) for rid, a in zip(order[:start], alloc[:start].tolist()) if a > 0}
        thr = self._thr
        j = start
        while j < len(order) and budget > 0:
            rid = order[j]
            a = int(R.num_tokens[rid] - R.num_computed[rid])
            if thr > 0:
                a = min(a, thr)
            a = min(a, budget)
            m = (int(R.num_computed[rid]) + a + bs - 1) // bs - int(R.num_blocks[rid])
            fits = True
            while m > self.pool.num_free:
                # vLLM: max over (priority, arrival_time). Exact arrival ties (a simulator's, not a
                # clock's) go to the later-submitted request; letting them fall to list order lets
                # two equal requests preempt each other forever.
                vi = max(range(len(order)), key=lambda k: (R.priority[order[k]], R.arrival[order[k]], order[k]))
                victim = order.pop(vi)
                undone = 0
                if victim in scheduled:
                    undone = scheduled.pop(victim)
                    budget += undone
                self._preempt(victim, now, undone)
                if victim == rid:
                    fits = False
                    break
                if vi < j:
                    j -= 1
            if not fits:
                break
            if m > 0:
                self.kv.allocate(rid, m)
                R.num_blocks[rid] += m
            scheduled[rid] = a
            budget -= a
            j += 1
        self._n = len(order)
        self._run[: self._n] = order
        keep = [rid for rid in order if rid in scheduled]
        return (
            np.array(keep, np.int64),
            np.array([scheduled[rid] for rid in keep], np.int64),
            budget,
        )

    def _cache_group_prefill(self, rids: np.ndarray, alloc: np.ndarray) -> None:
        """Index shared-prefix blocks that running requests' prefill chunks have just filled."""
        if not self._grouped or not self.cfg.enable_prefix_caching or not len(rids):
            return
        R = self.reqs
        mask = (R.group[rids] >= 0) & (R.num_computed[rids] < R.group_len[rids])
        if np.count_nonzero(mask):
            for rid, a in zip(rids[mask].tolist(), alloc[mask].tolist()):
                upto = int(R.num_computed[rid]) + a
                self.kv.cache_group_blocks(rid, int(R.group[rid]), int(R.group_len[rid]), upto)

    def _preempt(self, rid: int, now: float, undone: int = 0) -> None:
        """Preempt ``rid``; ``undone``: tokens it had been scheduled earlier in this step.

        Those tokens' full blocks were already cached when they were scheduled (vLLM's
        ``allocate_slots`` caches before a later request of the step preempts it, which only
        happens with priority scheduling), so they are released as cached blocks.
        """
        cfg, R = self.cfg, self.reqs
        R.preemptions[rid] += 1
        self.num_preemptions += 1
        self._preempted.append(rid)
        nblk = int(R.num_blocks[rid])
        cached = int(R.num_computed[rid]) + undone
        args = (cached, int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid]))
        if undone and args[1] >= 0:
            self.kv.cache_group_blocks(rid, args[1], args[2], cached)
        R.num_blocks[rid] = 0
        if cfg.preemption_mode == "swap":
            if self.swap_used_blocks + nblk <= cfg.swap_space_blocks:
                self.kv.free(rid, *args, cache_own=False)
                self.swap_used_blocks += nblk
                self._swap_blocks[rid] = nblk
                nbytes = nblk * cfg.block_bytes
                self._swap_bytes += nbytes
                R.swapped_bytes[rid] += nbytes
                R.status[rid] = SWAPPED
                self.swapped.append(rid)
                return
            if cfg.on_swap_full == "abort":
                self.kv.free(rid, *args, cache_own=False)
                R.status[rid] = ABORTED
                R.finish[rid] = now
                self._aborted.append(rid)
                return
        self.kv.free(rid, *args)
        R.num_computed[rid] = 0
        R.status[rid] = WAITING
        self._push(rid, front=True)

    def _swap_in_demand(self, rid: int, thr: int, budget: int) -> tuple[int, int]:
        """Tokens a swapped request would run this step, and the blocks it needs back on the GPU."""
        R, bs = self.reqs, self.cfg.block_size
        c = int(R.num_computed[rid])
        a = int(R.num_tokens[rid]) - c
        if thr > 0:
            a = min(a, thr)
        a = min(a, budget)
        return a, (c + a + bs - 1) // bs

    def _admission_demand(self, rid: int, thr: int, budget: int) -> tuple[np.ndarray, int, int, int, int]:
        """For the waiting request ``rid``: (prefix-cache hit blocks, how many of them are evictable,
        tokens to run, new blocks for them, blocks the admission gate asks to be free)."""
        R = self.reqs
        ntok = int(R.num_tokens[rid])
        hit_ids, n_evictable = self.kv.lookup(ntok, int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid]))
        _, a, m, gate = self._first_chunk(ntok, len(hit_ids), thr, budget)
        return hit_ids, n_evictable, a, m, gate

    def _first_chunk(self, ntok: int, nh: int, thr: int, budget: int) -> tuple[int, int, int, int]:
        """A waiting request's first step with ``nh`` cached blocks: (tokens it wants, tokens it
        runs within ``budget``, new blocks for them, blocks the admission gate asks to be free)."""
        bs = self.cfg.block_size
        need = ntok - nh * bs
        if thr > 0:
            need = min(need, thr)
        a = min(need, budget)
        m = (nh * bs + a + bs - 1) // bs - nh
        gate = (ntok + bs - 1) // bs - nh if self.cfg.admission == "full_prompt" else m
        return need, a, m, gate

    def _admit(
        self, now: float, budget: int, new: list[int], resumed: list[int], hits: list[tuple[int, int]]
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Swapped requests back in first, then waiting requests in queue order."""
        cfg, R, bs, kv = self.cfg, self.reqs, self.cfg.block_size, self.kv
        thr = self._thr
        out_r: list[int] = []
        out_a: list[int] = []
        while self.swapped and budget > 0 and self._n < cfg.max_num_seqs:
            rid = self.swapped[0]
            c = int(R.num_computed[rid])
            a, m = self._swap_in_demand(rid, thr, budget)
            if m > self.pool.num_free:
                break
            self.swapped.popleft()
            kv.admit(rid, _EMPTY)
            kv.allocate(rid, m)
            R.num_blocks[rid] = m
            nblk = self._swap_blocks.pop(rid)
            self.swap_used_blocks -= nblk
            nbytes = nblk * cfg.block_bytes
            self._swap_bytes += nbytes
            R.swapped_bytes[rid] += nbytes
            self._start_running(rid, a, out_r, out_a)
            resumed.append(rid)
            hits.append((rid, c))
            budget -= a
        if self.swapped:
            return np.array(out_r, np.int64), np.array(out_a, np.int64), budget
        while budget > 0 and self._n < cfg.max_num_seqs and self.num_waiting:
            rid = self._peek()
            # Two or more plain requests in a row: admit them together (one alone: the loop is cheaper).
            if (self.batch_admission and cfg.policy == "fcfs" and len(self._fifo) > 1 and self._n + 1 < cfg.max_num_seqs
                    and self._plain(rid) and self._plain(self._fifo[1])):
                budget, blocked = self._admit_plain(now, budget, new, resumed, hits, out_r, out_a)
                if blocked:
                    break
                continue
            group, glen = int(R.group[rid]), int(R.group_len[rid])
            hit_ids, n_evictable, a, m, gate = self._admission_demand(rid, thr, budget)
            nh = len(hit_ids)
            hit_tokens = nh * bs
            if gate + n_evictable > self.pool.num_free:
                break
            self._pop()
            kv.admit(rid, hit_ids)
            kv.allocate(rid, m)
            R.num_blocks[rid] = nh + m
            R.num_computed[rid] = hit_tokens
            if group >= 0:
                kv.cache_group_blocks(rid, group, glen, hit_tokens + a)
            if R.cached_tokens[rid] < 0:
                R.cached_tokens[rid] = hit_tokens
                R.first_scheduled[rid] = now
                new.append(rid)
            else:
                resumed.append(rid)
            hits.append((rid, hit_tokens))
            self._start_running(rid, a, out_r, out_a)
            budget -= a
        return np.array(out_r, np.int64), np.array(out_a, np.int64), budget

    def _plain(self, rid: int) -> bool:
        """Whether a waiting request can have no prefix-cache hit: no shared prefix, and nothing
        indexed under its content key (or caching off)."""
        R = self.reqs
        return R.group[rid] < 0 and (not self.cfg.enable_prefix_caching or not self.kv.has_own(int(R.content_key[rid])))

    def _admit_plain(
        self, now: float, budget: int, new: list[int], resumed: list[int], hits: list[tuple[int, int]],
        out_r: list[int], out_a: list[int],
    ) -> tuple[int, bool]:
        """Admit the run of plain requests at the head of the FCFS queue at once (at least the head
        is plain and the caller checked budget and seats): what the one-at-a-time loop does for
        them, as none has a cache hit and nothing is freed between their allocations. Returns the
        budget left and whether a plain request was refused (admission then stops there)."""
        cfg, R = self.cfg, self.reqs
        seats = cfg.max_num_seqs - self._n
        thr, free = self._thr, self.pool.num_free
        heads: list[int] = []
        toks: list[int] = []
        blocks: list[int] = []
        left, taken = budget, 0  # budget left when the next one's turn comes; blocks the run took
        refused = False
        for rid in self._fifo:
            if len(heads) == seats or not self._plain(rid):
                break
            if left <= 0:
                refused = True
                break
            need, a, m, gate = self._first_chunk(int(R.num_tokens[rid]), 0, thr, left)
            if gate > free - taken:
                refused = True
                break
            heads.append(rid)
            toks.append(a)
            blocks.append(m)
            left -= need
            taken += m
        k = len(heads)
        if k == 0:
            return budget, True
        h = np.array(heads, np.int64)
        m = np.array(blocks, np.int64)
        for _ in range(k):
            self._fifo.popleft()
        self.kv.admit_many(h)
        self.kv.allocate_many(h, m)
        R.num_blocks[h] = m
        R.num_computed[h] = 0
        fresh = R.cached_tokens[h] < 0
        if np.count_nonzero(fresh):
            R.cached_tokens[h[fresh]] = 0
            R.first_scheduled[h[fresh]] = now
        R.status[h] = RUNNING
        self._append_running(h)
        hl = h.tolist()
        for rid, f in zip(hl, fresh.tolist()):
            (new if f else resumed).append(rid)
            hits.append((rid, 0))
        out_r.extend(hl)
        out_a.extend(toks)
        return budget - sum(toks), refused

    def _start_running(self, rid: int, a: int, out_r: list[int], out_a: list[int]) -> None:
        self.reqs.status[rid] = RUNNING
        self._append_running(rid)
        out_r.append(rid)
        out_a.append(a)

    # ---- after the step -------------------------------------------------------------------------
    def update(self, plan: StepPlan, now: float) -> StepOutput:
        """Append the sampled tokens, finish requests that reached their length, free their blocks."""
        R = self.reqs
        r = plan.rids
        if not len(r):
            return StepOutput(0, _EMPTY, np.empty(0))
        s = r if plan.sampled is None else plan.sampled
        R.num_tokens[s] += 1
        out = R.num_out[s] + 1
        R.num_out[s] = out
        prev = out > 1
        gaps = now - R.last_token[s[prev]]
        R.first_token[s[~prev]] = now
        R.last_token[s] = now
        done = s[out >= R.max_tokens[s]]
        if len(done):
            self.kv.free_many(done, R.num_computed[done], R.group[done], R.group_len[done], R.content_key[done],
                              cache_own=self.cfg.cache_finished_content)
            R.status[done] = FINISHED
            R.finish[done] = now
            R.num_blocks[done] = 0
            run = self._run[: self._n]
            kept = run[R.status[run] == RUNNING]
            self._n = len(kept)
            self._run[: self._n] = kept
        return StepOutput(len(s), done, gaps)
