"""SGLang's scheduling (``engine.framework: sglang``), one request at a time: the readable form of the
policy the compiled step follows in ``simulator/engine/compiled/sglang.py``.

What differs from vLLM's scheduler (``scheduler.py``), after SGLang 0.5's
``srt/managers/scheduler.py: get_next_batch_to_run`` and ``srt/managers/schedule_policy.py:
PrefillAdder`` (data/sources/sglang/sglang_scheduler.md, sections 2-6), the arithmetic in
``simulator/engine/rules.py`` (the ``sgl_`` rules):
- **prefill first, never mixed**: a step is a prefill step whenever a prompt is being chunked or a
  waiting request can be admitted; it computes only prompt tokens, and the running requests make no
  progress in it. Otherwise the step decodes one token for every running request (no token budget);
- **the chunk**: the request being chunked (at most one) goes first, then waiting requests in queue
  order while prompt tokens are left in the chunk (``chunked_prefill_size``) and in
  ``max_prefill_tokens``; the one that crosses the chunk is cut to fill it and is chunked next step;
- **admission keeps room for output**: a request is admitted only if its prompt, its whole remaining
  output (clipped at 4,096) and a page fit in what is left after every running request's expected
  remaining output (its remaining output times the new-token ratio) and what this step admitted;
  the first that does not fit stops admission and marks the batch full, so admission is not tried
  again until a running request finishes or is retracted; at most ``max_running_requests`` run;
- **retraction**: a decode step whose KV does not fit retracts running requests (fewest output
  tokens first, then the longest prompt) to the back of the waiting queue until it fits, never the
  last one. A retracted request keeps its output; its prompt's KV stays in the prefix cache (the
  tokens it decoded do not) and it computes the rest again when re-admitted;
- **the cache-aware policies** (``lpm``, ``dfs-weight``): before a prefill step the waiting queue is
  re-ordered by what each request finds in the prefix cache (``rules.sgl_waiting_order``);
- **a prefill's tokens are found after it has run**: a request admitted beside another of its group
  does not find the prefix the other is computing in the same step;
- **the new-token ratio** starts at 0.7, falls by a fixed step every decode step that retracts
  nothing down to a floor, is re-estimated from the requests kept after a retraction, and starts
  again whenever the scheduler goes idle.
"""

from __future__ import annotations

import numpy as np

from simulator.engine import rules
from simulator.engine.reference.scheduler import Scheduler, StepOutput, StepPlan


class SGLangScheduler(Scheduler):
    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.ratio = self.cfg.sgl_ratio[0]  # the new-token ratio
        self.batch_full = False  # admission stopped on the KV budget or the request cap
        self.chunked: int | None = None  # the request whose prompt is being chunked
        self.order = rules.SGL_ORDER_CODES.get(self.cfg.policy, 0)  # lpm, dfs-weight: re-ordered
        self._filled: list[tuple[int, int, int]] = []  # this step's prefix blocks, cached after it

    def schedule(self, now: float) -> StepPlan:
        self._begin_step(0)
        self._filled = []
        before: dict[int, int] = {}
        self._prefill(now, before)
        if not self._scheduled and self.running:
            self._decode(now, before)
        for rid, nc, upto in self._filled:
            super()._cache_filled(rid, nc, upto)
        return self._plan(before)

    def _cache_filled(self, rid: int, nc: int, upto: int) -> None:
        """Held until the step's requests are all scheduled: SGLang puts a prefill's tokens into its radix
        tree once the prefill has run (``cache_unfinished_req``), so a request admitted beside it does
        not find them (and computes the prefix again, which is what lpm's in-queue check defers)."""
        self._filled.append((rid, nc, upto))

    # ---- a prefill step ---------------------------------------------------------------------------
    def _prefill(self, now: float, before: dict) -> None:
        """The chunked request's next chunk, then waiting requests as ``PrefillAdder`` admits them."""
        cfg, R, bs = self.cfg, self.reqs, self.cfg.block_size
        if rules.sgl_orders(
            self.order,
            len(self.waiting),
            self.batch_full,
            self.chunked is not None,
            len(self.running),
            cfg.max_num_seqs,
        ):
            self._order_waiting()
        page = cfg.sgl_page
        rem_chunk, rem_input = cfg.max_num_batched_tokens, cfg.sgl_prefill_tokens
        free0 = self.pool.num_free  # free and evictable blocks before this step's allocations
        offset = 0.0  # KV tokens held back: running requests' expected output, this step's charges
        for rid in self.running:
            if rid != self.chunked:
                offset += rules.sgl_running_reserve(int(R.max_tokens[rid]), int(R.num_out[rid]), self.ratio)
        cur_offset = 0  # this step's tokens and pages
        locked = 0  # evictable blocks this step's prefix hits took
        had_chunk = self.chunked is not None
        if self.chunked is not None:
            rid = self.chunked
            nc, ntok = int(R.num_computed[rid]), int(R.num_tokens[rid])
            rem = min(rem_chunk, int(free0 * bs - offset))
            a = min(ntok - nc, rem if rem > 0 else rem_chunk)
            a = min(a, (int(R.num_blocks[rid]) + self.pool.num_free) * bs - nc)  # what the pool holds
            if a > 0:
                self._run(rid, a, rules.new_blocks(nc, a, int(R.num_blocks[rid]), bs), nc)
                before[rid] = nc
                last = nc + a == ntok
                offset += rules.sgl_admission_tokens(a, int(R.max_tokens[rid]), int(R.num_out[rid]), page, last)
                cur_offset += a + page
                rem_chunk -= a
                rem_input -= a
                if last:
                    self.chunked = None
        if not self.waiting or (self.batch_full and self.chunked is None and not had_chunk):
            return
        admitted = 0
        while self.waiting and rem_chunk > 0 and rem_input > 0 and self.chunked is None:
            if len(self.running) >= cfg.max_num_seqs:
                self.batch_full = True
                return
            rid = self.waiting.peek()
            ntok, maxt, nout = int(R.num_tokens[rid]), int(R.max_tokens[rid]), int(R.num_out[rid])
            hits = self.kv.lookup(ntok, int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid]))
            nh = len(hits)
            nc = nh * bs
            evictable = self.pool.unreferenced(hits)  # locked by the hit
            extend = ntok - nc
            rem_total = (free0 - locked - evictable) * bs - offset
            if not rules.sgl_fits(rules.sgl_admission_tokens(extend, maxt, nout, page, True), rem_total):
                self.batch_full = True
                return
            if rules.sgl_over_prefill_budget(cfg.max_num_batched_tokens, admitted, extend, rem_input):
                return
            a = extend if extend <= rem_chunk else rules.sgl_truncated(rem_chunk, nc, page)
            if a <= 0:
                return
            m = rules.new_blocks(nc, a, nh, bs)
            if m > self.pool.num_free - evictable:  # the pool cannot hold it: SGLang's allocation fails
                self.batch_full = True
                return
            self.waiting.pop()
            self._admitted(rid, hits, nc, a, m, now, before)
            admitted += 1
            locked += evictable
            last = a == extend
            if not last:
                self.chunked = rid
            offset += rules.sgl_admission_tokens(a, maxt, nout, page, last)
            cur_offset += a + page
            rem_chunk -= a
            rem_input -= a
            if (free0 - locked) * bs - offset <= 0 or (free0 - locked) * bs - cur_offset <= 0:
                self.batch_full = True
                return

    def _order_waiting(self) -> None:
        """The waiting queue in the cache-aware policy's order (``calc_priority``)."""
        R, bs = self.reqs, self.cfg.block_size
        ids = self.waiting.ids()
        w = np.zeros((rules.N_WO, len(ids)), np.int64)
        for i, rid in enumerate(ids):
            ntok, g, glen = int(R.num_tokens[rid]), int(R.group[rid]), int(R.group_len[rid])
            w[rules.WO_HITS, i] = len(self.kv.lookup(ntok, g, glen, int(R.content_key[rid])))
            w[rules.WO_NGROUP, i] = rules.group_blocks(g, glen, bs)
            w[rules.WO_GROUP, i] = g
            w[rules.WO_SHARED, i] = rules.sgl_shared_tokens(g, glen, ntok)
        rules.sgl_waiting_order(self.order, w, len(ids), bs)
        self.waiting.reorder(w[rules.WO_ORDER])

    # ---- a decode step ----------------------------------------------------------------------------
    def _decode(self, now: float, before: dict) -> None:
        """One token for every running request; if their KV does not fit, retract until it does."""
        R, bs = self.reqs, self.cfg.block_size
        need = sum(self._blocks_for_one(rid) for rid in self.running)
        retracted = False
        while need > self.pool.num_free and len(self.running) > 1:
            victim = self._retraction_victim()
            need -= self._blocks_for_one(victim)
            self._retract(victim)
            retracted = True
        _, floor, decay = self.cfg.sgl_ratio
        if retracted:
            out = sum(int(R.num_out[r]) for r in self.running)
            max_new = sum(int(R.max_tokens[r]) for r in self.running)
            self.ratio = rules.sgl_ratio_after_retract(out, len(self.running), max_new)
        else:
            self.ratio = rules.sgl_ratio_decayed(self.ratio, floor, decay)
        if need > self.pool.num_free:  # the last request alone does not fit: SGLang aborts it
            rid = self.running.pop()
            self._count_preemption(rid)
            self._abort(rid, 0, now)
            return
        for rid in self.running:
            nc = int(R.num_computed[rid])
            self._run(rid, 1, rules.new_blocks(nc, 1, int(R.num_blocks[rid]), bs), nc)
            before[rid] = nc

    def _blocks_for_one(self, rid: int) -> int:
        R = self.reqs
        return rules.new_blocks(int(R.num_computed[rid]), 1, int(R.num_blocks[rid]), self.cfg.block_size)

    def _retraction_victim(self) -> int:
        """The running request retracted next (``rules.sgl_retract_first``; the later one on a tie)."""
        R = self.reqs
        best = self.running[0]
        for rid in self.running[1:]:
            if rules.sgl_retract_first(
                int(R.num_out[rid]),
                int(R.num_tokens[rid]) - int(R.num_out[rid]),
                int(R.num_out[best]),
                int(R.num_tokens[best]) - int(R.num_out[best]),
            ):
                best = rid
        return best

    def _retract(self, rid: int) -> None:
        """Back to the end of the waiting queue, its prompt's KV left in the prefix cache."""
        R = self.reqs
        self.running.remove(rid)
        self._count_preemption(rid)
        cacheable = min(
            int(R.num_computed[rid]), rules.sgl_prompt_cacheable(int(R.num_tokens[rid]), int(R.num_out[rid]))
        )
        self._requeue(rid, cacheable, front=False)
        self.batch_full = False

    # ---- after the step ---------------------------------------------------------------------------
    def update(self, plan: StepPlan, now: float, shown: float | None = None) -> StepOutput:
        out = super().update(plan, now, shown)
        if out.finished or plan.aborted:
            self.batch_full = False  # the running batch shrank
        if not self.running and not self.waiting:
            self.ratio = self.cfg.sgl_ratio[0]  # idle: the ratio starts again
        return out
