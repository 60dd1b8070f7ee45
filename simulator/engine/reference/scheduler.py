"""vLLM V1 scheduling, one request at a time: one ``schedule()`` per engine step, then ``update()``.

The rules (``docs/``/README "What is modelled"; checked step by step against recorded vLLM traces
by tests/test_parity.py), with the arithmetic of each in ``simulator/engine/rules.py``:
- running requests first, in admission order, each given what it has left to compute, capped by
  the long-prefill cap and by what is left of the token budget (chunked prefill);
- a running request that cannot get its blocks preempts the tail of the running list (with
  priority scheduling: the lowest-priority, latest-arriving request) and retries, until it fits or
  it was itself the victim, which ends the running pass;
- waiting requests are admitted in queue order only if nothing was preempted in this step, while
  fewer than ``max_num_seqs`` hold a place (``rules.seats_taken``) and budget remains; the first
  that cannot get its blocks stops admission (nobody jumps ahead); swapped-out requests come back
  before any new admission;
- recompute preemption sends the victim to the front of the waiting queue with nothing computed;
  swap preemption copies its blocks to host memory (or, with no host space left, recomputes or
  aborts it, ``on_swap_full``);
- with KV offloading (``simulator/engine/host_tier.py``), a waiting request's lookup continues on the host
  tier where its GPU hits end; the blocks found there are loaded into its new blocks in the step
  that admits it (host-link traffic), and prefill chunks and released requests write their full
  blocks to the host;
- with speculative decoding (``simulator/engine/speculative.py``), a running request that sampled brings
  its drafts to its next step (they count in the budget, which cuts them first); the target
  verifies them and the request outputs those accepted and one token more;
- with async scheduling (``SchedulerConfig.outputs_late``) a request that ends keeps its place and its
  blocks through the next ``schedule()``, which does not schedule it (but counts it among those
  running) and frees it at its end (vLLM could also pick it as a preemption victim, were it last
  in the running list; here it never is); and a request's blocks are hashed as it is scheduled,
  only as far as its tokens are known then (``rules.known_tokens``): a request that ran in the step
  in flight does not know that step's outputs yet, so preempted before its next scheduling it
  leaves the block its last token completed unhashed.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

from simulator.engine import events, host_tier, rules
from simulator.engine.cost import StepWork
from simulator.engine.reference.kv_cache import KVCacheManager
from simulator.engine.requests import RequestTable
from simulator.engine.rules import RequestStatus, SchedulerConfig


@dataclass(frozen=True)
class StepPlan:
    """What ``schedule()`` decided for one step, and the state right after it."""

    rids: tuple[int, ...]  # scheduled requests, in scheduling order
    num_new: tuple[int, ...]  # tokens scheduled for each
    new: tuple[int, ...]
    resumed: tuple[int, ...]
    preempted: tuple[int, ...]
    aborted: tuple[int, ...]
    prefix_hits: tuple[tuple[int, int], ...]  # (request, cached tokens) for new and resumed
    work: StepWork
    recomputed_tokens: int
    kv_usage: float
    num_free_blocks: int
    num_running: int
    num_waiting: int
    num_swapped: int
    long_prefill_cap: int  # the long_prefill_token_threshold in force this step (0: none)
    drafts: tuple[int, ...] = ()  # draft tokens among each scheduled request's (speculative decoding)


@dataclass(frozen=True)
class StepOutput:
    """What ``update()`` observed at the end of a step."""

    num_generated: int
    finished: tuple[int, ...]
    itl_gaps: tuple[float, ...]  # seconds between consecutive tokens of the same request
    spec: tuple[int, int, int] = (0, 0, 0)  # verifications with drafts, drafts verified, accepted


class _Queued:
    """A heap entry of the priority queue, ordered by ``rules.queued_before``."""

    __slots__ = ("arrival", "prio", "rid", "seq")

    def __init__(self, prio: int, arrival: float, seq: int, rid: int) -> None:
        self.prio, self.arrival, self.seq, self.rid = prio, arrival, seq, rid

    def __lt__(self, other: _Queued) -> bool:
        return rules.queued_before(self.prio, self.arrival, self.seq, other.prio, other.arrival, other.seq)


class WaitingQueue:
    """FCFS: a deque (preempted requests go back to the front). Priority: a heap ordered by
    (priority, arrival, submission), as vLLM's ``PriorityRequestQueue``. SGLang's longest output first
    (``lof``): a heap ordered by (-max_tokens, insertion), as its stable sort of the queue keeps it."""

    def __init__(self, policy: str, reqs: RequestTable) -> None:
        self.priority = policy in ("priority", "lof")
        self.lof = policy == "lof"
        self.reqs = reqs
        self._fifo: deque[int] = deque()
        self._heap: list[_Queued] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap) if self.priority else len(self._fifo)

    def push(self, rid: int, front: bool = False) -> None:
        if self.priority:
            R = self.reqs
            if self.lof:
                self._seq += 1
                heapq.heappush(self._heap, _Queued(-int(R.max_tokens[rid]), 0.0, self._seq, rid))
            else:  # a request goes back to its own place (rules.queued_before)
                heapq.heappush(self._heap, _Queued(int(R.priority[rid]), float(R.arrival[rid]), rid, rid))
        elif front:
            self._fifo.appendleft(rid)
        else:
            self._fifo.append(rid)

    def peek(self) -> int:
        return self._heap[0].rid if self.priority else self._fifo[0]

    def pop(self) -> int:
        return heapq.heappop(self._heap).rid if self.priority else self._fifo.popleft()

    def ids(self) -> list[int]:
        """The waiting requests in queue order (FCFS: the deque's)."""
        return list(self._fifo)

    def reorder(self, order) -> None:
        """Put the FCFS queue in a new order: ``order[k]`` is the position, in ``ids()``, of the k-th."""
        ids = list(self._fifo)
        self._fifo = deque(ids[int(i)] for i in order)

    def pop_entry(self) -> _Queued | int:
        """Take the first request off with its place in the queue (``restore`` puts it back there)."""
        return heapq.heappop(self._heap) if self.priority else self._fifo.popleft()

    def restore(self, entries: list) -> None:
        """Put back, at the places they had, requests taken off with ``pop_entry`` (in that order)."""
        if self.priority:
            for e in entries:
                heapq.heappush(self._heap, e)
        else:
            self._fifo.extendleft(reversed(entries))


class Scheduler:
    def __init__(self, cfg: SchedulerConfig, reqs: RequestTable, kv: KVCacheManager) -> None:
        self.cfg = cfg
        self.reqs = reqs
        self.kv = kv
        self.pool = kv.pool
        self.running: list[int] = []
        self.ended: list[int] = []  # ended at the last update, still holding their places (outputs_late)
        # Per request, at its last scheduling: the tokens it had, and those whose blocks were hashed
        # (rules.cacheable); and the requests the last step ran.
        self.tokens_then: dict[int, int] = {}
        self.hashable: dict[int, int] = {}
        self.ran: frozenset[int] = frozenset()
        self.waiting = WaitingQueue(cfg.policy, reqs)
        self.swapped: deque[int] = deque()
        self.swapped_blocks: dict[int, int] = {}  # request -> blocks it holds in host memory
        self.swap_used_blocks = 0
        self.num_preemptions = 0
        self.drafts: dict[int, int] = {}  # running request -> draft tokens it holds (speculative decoding)
        # vLLM's spec-decode counters: verifications with drafts, drafts verified, drafts accepted,
        # and accepted per draft position
        self.spec_counts = [0, 0, 0]
        self.spec_accepted_per_pos = [0] * cfg.spec_tokens
        # Multi-LoRA: the adapters in GPU slots and in host memory (rows: adapter, last use), running
        # requests per adapter, adapters in use, adapters loaded (into a GPU slot, from storage).
        self.lora_gpu = np.full((2, max(cfg.max_loras, 1)), -1, np.int64)
        self.lora_cpu = np.full((2, max(cfg.max_cpu_loras, 1)), -1, np.int64)
        self.lora_running = np.zeros(0, np.int64)
        self.lora_active = 0
        self.lora_loads = [0, 0]
        self._steps = 0

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or self.swapped)

    def add_request(self, rid: int) -> None:
        self.reqs.status[rid] = RequestStatus.WAITING
        self.waiting.push(rid)

    # ---- one step -------------------------------------------------------------------------------
    def _begin_step(self, cap: int) -> None:
        """The step's scratch: its budget and long-prefill cap, and what it schedules."""
        self._budget = self.cfg.max_num_batched_tokens
        self._cap = cap
        self._scheduled: dict[int, int] = {}  # request -> tokens, in scheduling order
        self._preempted: list[int] = []
        self._aborted: list[int] = []
        self._swap_bytes = 0.0
        self._new: list[int] = []
        self._resumed: list[int] = []
        self._hits: list[tuple[int, int]] = []
        self._loads = [0, 0]  # adapters loaded in this step: into a GPU slot, from storage

    def schedule(self, now: float) -> StepPlan:
        while True:
            before = self._schedule_pass(now)
            if not rules.schedules_again(len(self.running), len(self.ended), len(self._preempted)):
                break
            self.free_ended()  # (then none ended: the loop runs twice at most)
        plan = self._plan(before)
        self.free_ended()  # after the scheduling, whose figures (running, free blocks) count them still
        return plan

    def _schedule_pass(self, now: float) -> dict[int, int]:
        """One scheduling of the running, swapped and waiting requests; returns the tokens each
        scheduled request had computed before it."""
        cfg, R, bs = self.cfg, self.reqs, self.cfg.block_size
        self._begin_step(
            rules.long_prefill_cap(
                cfg.long_prefill_token_threshold, self._seats() + len(self.waiting) + len(self.swapped)
            )
        )
        before: dict[int, int] = {}

        # Running requests, in order.
        i = 0
        while i < len(self.running) and self._room() > 0:
            rid = self.running[i]
            nc = int(R.num_computed[rid])
            a = rules.chunk(int(R.num_tokens[rid]) + self.drafts.get(rid, 0), nc, self._cap, self._room())
            m = rules.new_blocks(nc, a + cfg.spec_lookahead, int(R.num_blocks[rid]), bs)
            scheduled = True
            while m > self.pool.num_free:
                victim = self._victim()
                vi = self.running.index(victim)
                del self.running[vi]
                self._preempt(victim, now, self._scheduled.pop(victim, 0))
                if victim == rid:
                    scheduled = False
                    break
                if vi < i:
                    i -= 1
            if not scheduled:
                break
            if a == 0:
                i += 1
                continue
            self._run(rid, a, m, nc)
            before[rid] = nc
            i += 1

        # Waiting requests: swapped ones back first, then new and preempted ones in queue order.
        if not self._preempted:
            self._swap_in(now, before)
            if not self.swapped:
                self._admit(now, before)
        return before

    def _room(self) -> int:
        """Tokens of the budget the next request may be scheduled (``rules.room``)."""
        return rules.room(self._budget, self.cfg.spec_draft_slots)

    def _seats(self) -> int:
        """Requests holding a place under ``max_num_seqs`` (``rules.seats_taken``)."""
        return rules.seats_taken(len(self.running), len(self.ended))

    def free_ended(self) -> None:
        """The requests that ended at the last update and still hold their places (``outputs_late``)
        release them and their blocks, in the order they ended."""
        for rid in self.ended:
            self._free_finished(rid)
        self.ended.clear()

    def _free_finished(self, rid: int) -> None:
        """A finished request releases its blocks (its own content kept findable where the workload
        returns to it) and its adapter."""
        self._release(rid, int(self.reqs.num_computed[rid]), self.cfg.cache_finished_content)
        self._lora_stop(rid)

    def _run(self, rid: int, a: int, m: int, nc: int) -> None:
        """Schedule ``a`` tokens of ``rid`` (computed so far: ``nc``), giving it ``m`` new blocks."""
        R = self.reqs
        if m:
            self.kv.allocate(rid, m)
            R.num_blocks[rid] += m
        self._cache_filled(rid, nc, nc + a)
        ntok = int(R.num_tokens[rid])
        known = rules.known_tokens(ntok, self.tokens_then.get(rid, 0), rid in self.ran, self.cfg.outputs_late)
        self.hashable[rid] = rules.cacheable(nc + a, known)
        self.tokens_then[rid] = ntok
        self._scheduled[rid] = a
        self._budget -= rules.spent(a, self.cfg.spec_draft_slots)

    def _cache_filled(self, rid: int, nc: int, upto: int) -> None:
        """The shared-prefix blocks ``rid`` (computed so far: ``nc``) fills up to token ``upto`` in this
        step, cached now: a request admitted later in the same step finds them (vLLM caches a block as
        it is scheduled)."""
        R = self.reqs
        g, glen = int(R.group[rid]), int(R.group_len[rid])
        if rules.fills_group_blocks(g, glen, nc):
            self.kv.cache_group_blocks(rid, g, glen, upto)

    def _victim(self) -> int:
        """The running request to preempt: the last admitted, or under priority scheduling the one
        ``rules.later_victim`` puts last."""
        if self.cfg.policy == "fcfs":
            return self.running[-1]
        R = self.reqs
        best = self.running[0]
        for rid in self.running[1:]:
            if rules.later_victim(
                int(R.priority[rid]), float(R.arrival[rid]), rid, int(R.priority[best]), float(R.arrival[best]), best
            ):
                best = rid
        return best

    def _preempt(self, rid: int, now: float, undone: int) -> None:
        """Preempt ``rid``; ``undone``: tokens it had been scheduled earlier in this step (only
        with priority scheduling), given back to the budget. Their full blocks were cached when they
        were scheduled, so they are released as cached blocks."""
        cfg, R = self.cfg, self.reqs
        self._budget += rules.spent(undone, cfg.spec_draft_slots)
        self._count_preemption(rid)
        self.drafts.pop(rid, None)
        self._lora_stop(rid)
        nblk = int(R.num_blocks[rid])
        computed = int(R.num_computed[rid]) + undone
        kind = rules.preemption_kind(
            cfg.preemption_mode == "swap",
            cfg.on_swap_full == "abort",
            self.swap_used_blocks,
            nblk,
            cfg.swap_space_blocks,
        )
        if kind == events.PreemptionKind.SWAPPED_OUT:
            self._release(rid, computed, False)
            self.swap_used_blocks += nblk
            self.swapped_blocks[rid] = nblk
            self._swap_traffic(rid, nblk)
            R.status[rid] = RequestStatus.SWAPPED
            self.swapped.append(rid)
        elif kind == events.PreemptionKind.ABORTED:
            self._abort(rid, computed, now)
        else:
            self._requeue(rid, computed, front=True)

    def _count_preemption(self, rid: int) -> None:
        self.reqs.preemptions[rid] += 1
        self.num_preemptions += 1
        self._preempted.append(rid)

    def _release(self, rid: int, computed: int, cache_own: bool) -> None:
        """Free ``rid``'s blocks (its full blocks below ``computed`` hashed, as far as they were when
        it was last scheduled; ``cache_own``: findable as its own content again)."""
        R = self.reqs
        hashable = self.hashable.pop(rid)
        self.tokens_then.pop(rid, None)
        self.kv.free(
            rid, computed, hashable, int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid]), cache_own
        )
        R.num_blocks[rid] = 0

    def _abort(self, rid: int, computed: int, now: float) -> None:
        """``rid`` (no longer running) is aborted now, its blocks freed."""
        R = self.reqs
        self._release(rid, computed, False)
        R.status[rid] = RequestStatus.ABORTED
        R.finish[rid] = now
        self._aborted.append(rid)

    def _requeue(self, rid: int, computed: int, front: bool) -> None:
        """``rid`` (no longer running) waits again to compute everything anew, at the ``front`` or the
        back of the queue; its full blocks below ``computed`` stay findable as its own content."""
        R = self.reqs
        self._release(rid, computed, True)
        R.num_computed[rid] = 0
        R.status[rid] = RequestStatus.WAITING
        self.waiting.push(rid, front=front)

    def _swap_traffic(self, rid: int, nblk: int) -> None:
        nbytes = nblk * self.cfg.block_bytes
        self._swap_bytes += nbytes
        self.reqs.swapped_bytes[rid] += nbytes

    def _swap_in(self, now: float, before: dict) -> None:
        """Swapped requests back in, in the order they went out, while their blocks fit."""
        cfg, R = self.cfg, self.reqs
        while self.swapped and self._room() > 0 and self._seats() < cfg.max_num_seqs:
            rid = self.swapped[0]
            nc = int(R.num_computed[rid])
            a = rules.chunk(int(R.num_tokens[rid]), nc, self._cap, self._room())
            m = rules.new_blocks(nc, a + cfg.spec_lookahead, 0, cfg.block_size)
            if m > self.pool.num_free:
                break
            self.swapped.popleft()
            nblk = self.swapped_blocks.pop(rid)
            self.swap_used_blocks -= nblk
            self._swap_traffic(rid, nblk)
            self.kv.admit(rid, [])
            self._start(rid)
            self._resumed.append(rid)
            self._hits.append((rid, nc))
            self._run(rid, a, m, nc)
            before[rid] = nc

    def _admit(self, now: float, before: dict) -> None:
        """New and preempted requests in queue order; the first that does not fit stops admission."""
        cfg, R, bs = self.cfg, self.reqs, self.cfg.block_size
        skipped: list = []
        while self.waiting and self._room() > 0 and self._seats() < cfg.max_num_seqs:
            rid = self.waiting.peek()
            lora = int(R.lora[rid])
            if cfg.max_loras and rules.lora_skipped(
                lora, int(self.lora_running[lora]) if lora >= 0 else 0, self.lora_active, cfg.max_loras
            ):
                skipped.append(self.waiting.pop_entry())
                continue
            ntok = int(R.num_tokens[rid])
            g, glen, key = int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid])
            hits = self.kv.lookup(ntok, g, glen, key)
            nh = len(hits)
            nx = self.kv.host_lookup(ntok, g, glen, key, nh)  # loaded into new blocks (KV offloading)
            nc = rules.admitted_computed(nh + nx, bs, int(R.external[rid]), R.cached_tokens[rid] < 0)
            nx = rules.host_loads(nx, nh, nc, bs)
            a = rules.chunk(ntok, nc, self._cap, self._room())
            m = rules.new_blocks(nc, a + cfg.spec_lookahead, nh, bs)
            gate = rules.admission_blocks(ntok, nh, m, bs, cfg.admission == "full_prompt")
            evictable = self.pool.unreferenced(hits)  # free now, taken by the hit
            if not rules.admits(gate, evictable, self.pool.num_free):
                break
            self.waiting.pop()
            self._admitted(rid, hits, nc, a, m, now, before, nx)
        if skipped:
            self.waiting.restore(skipped)

    def _admitted(self, rid: int, hits: list, nc: int, a: int, m: int, now: float, before: dict, nx: int = 0) -> None:
        """``rid``, just taken off the waiting queue, starts running: it holds its prefix-cache
        ``hits``, has computed ``nc`` tokens and runs ``a`` more in this step in ``m`` new blocks (``nx``
        of them loaded from the host tier)."""
        R = self.reqs
        self.kv.admit(rid, hits)
        R.num_blocks[rid] = len(hits)
        R.num_computed[rid] = nc
        if R.cached_tokens[rid] < 0:  # first admission
            R.cached_tokens[rid] = nc
            R.host_cached_tokens[rid] = nx * self.cfg.block_size
            R.first_scheduled[rid] = now
            self._new.append(rid)
        else:
            self._resumed.append(rid)
        self._hits.append((rid, nc))
        self._start(rid)
        self._run(rid, a, m, nc)
        if nx:
            self._host_load(rid, nx, nc)
        before[rid] = nc

    def _host_load(self, rid: int, blocks: int, computed: int) -> None:
        """``rid`` was admitted with ``blocks`` blocks found on the host tier: they are copied into
        its new GPU blocks over the host link in this step, and those of its shared prefix are
        cached on the GPU again."""
        R = self.reqs
        assert self.kv.host is not None  # only a host tier finds blocks
        self._swap_bytes += blocks * self.cfg.block_bytes
        self.kv.host.hc[host_tier.HC_LOADED] += blocks
        g = int(R.group[rid])
        if g >= 0:
            self.kv.cache_group_blocks(rid, g, int(R.group_len[rid]), computed)

    def _start(self, rid: int) -> None:
        self.reqs.status[rid] = RequestStatus.RUNNING
        self.running.append(rid)
        a = int(self.reqs.lora[rid])
        if a >= 0 and self.cfg.max_loras:
            run = self.lora_running
            if run[a] == 0:
                self.lora_active += 1
            run[a] += 1
            for k, cache in ((1, self.lora_cpu), (0, self.lora_gpu)):  # from storage, then into a slot
                loaded = rules.lora_cache_use(cache, a, self._steps, run)
                self._loads[k] += loaded
                self.lora_loads[k] += loaded

    def _lora_stop(self, rid: int) -> None:
        """A request stops running (finished or preempted): its adapter has one user fewer."""
        a = int(self.reqs.lora[rid])
        if a >= 0 and self.cfg.max_loras:
            self.lora_running[a] -= 1
            if self.lora_running[a] == 0:
                self.lora_active -= 1

    def add_adapter(self, adapter: int) -> None:
        """Room for requests that ask for ``adapter``."""
        if adapter >= len(self.lora_running):
            grown = np.zeros(max(2 * len(self.lora_running), adapter + 1), np.int64)
            grown[: len(self.lora_running)] = self.lora_running
            self.lora_running = grown

    def _plan(self, before: dict) -> StepPlan:
        """Apply the step's tokens to the requests and sum up its work (with KV offloading, a prefill
        chunk's full blocks are written to the host tier)."""
        R, bs = self.reqs, self.cfg.block_size
        rids = tuple(self._scheduled)
        num_new = tuple(self._scheduled.values())
        w = [0] * rules.N_WORK  # (Python integers: summed one request at a time)
        rec = 0
        drafts = []
        for rid, a in zip(rids, num_new):
            nc = before[rid]
            after = nc + a
            R.num_computed[rid] = after
            ntok = int(R.num_tokens[rid])
            d = rules.drafts_scheduled(after, ntok)
            drafts.append(d)
            real = after - d  # drafts are not work done until accepted
            hwm = int(R.computed_hwm[rid])
            r = rules.recomputed(nc, real, hwm)
            if r:
                R.recomputed[rid] += r
                rec += r
            if real > hwm:
                R.computed_hwm[rid] = real
            rules.add_request(w, a, nc, ntok, d)
            if rules.writes_chunk(nc, ntok):
                self.kv.host_write(int(R.group[rid]), int(R.group_len[rid]), int(R.content_key[rid]), real // bs)
        self.ran = frozenset(rids)
        self._steps += 1
        work = StepWork.of(w, self._swap_bytes, self.lora_active, self._loads[0], self._loads[1])
        return StepPlan(
            rids=rids,
            num_new=num_new,
            new=tuple(self._new),
            resumed=tuple(self._resumed),
            preempted=tuple(self._preempted),
            aborted=tuple(self._aborted),
            prefix_hits=tuple(self._hits),
            work=work,
            recomputed_tokens=rec,
            kv_usage=self.pool.usage,
            num_free_blocks=self.pool.num_free,
            num_running=self._seats(),
            num_waiting=len(self.waiting),
            num_swapped=len(self.swapped),
            long_prefill_cap=self._cap,
            drafts=tuple(drafts),
        )

    # ---- after the step ---------------------------------------------------------------------------
    def finishing(self, plan: StepPlan) -> int:
        """Requests that will sample their last token when this step ends."""
        R = self.reqs
        n = 0
        for rid, d in zip(plan.rids, plan.drafts or (0,) * len(plan.rids)):
            if rules.samples(int(R.num_computed[rid]) - d, int(R.num_tokens[rid])):
                out = int(R.num_out[rid])
                n += rules.finishes(out + self._emitted(rid, d, out), int(R.max_tokens[rid]))
        return n

    def _emitted(self, rid: int, drafts: int, num_out: int) -> int:
        """Tokens ``rid`` outputs at the end of a step in which it verified ``drafts`` drafts."""
        acc = self._accepted(rid, drafts, num_out)
        return rules.spec_emitted(acc, num_out, int(self.reqs.max_tokens[rid]))

    def _accepted(self, rid: int, drafts: int, num_out: int) -> int:
        if not drafts:
            return 0
        cfg = self.cfg
        u = rules.spec_uniform(cfg.spec_seed, rid, num_out)
        return rules.spec_accepted(u, drafts, cfg.spec_accept_at_least)

    def update(self, plan: StepPlan, now: float, shown: float | None = None) -> StepOutput:
        """Requests that computed their last pending token sample one (and, verifying drafts, output
        those accepted before it: the rest of their computed tokens are dropped); those that reached
        their length finish and release their blocks (in running order; with ``outputs_late``, at the
        end of the next ``schedule()``); with speculative decoding
        the others get new drafts. Token and finish times are ``shown``: when the tokens reach their
        clients (``now`` without a front-end)."""
        shown = now if shown is None else shown
        R, k = self.reqs, self.cfg.spec_tokens
        before = tuple(self.spec_counts)
        generated = 0
        finished: list[int] = []
        gaps: list[float] = []
        for rid, d in zip(plan.rids, plan.drafts or (0,) * len(plan.rids)):
            ntok = int(R.num_tokens[rid])
            if not rules.samples(int(R.num_computed[rid]) - d, ntok):
                continue  # a prefill chunk that did not reach the end of the prompt
            out, max_tokens = int(R.num_out[rid]), int(R.max_tokens[rid])
            acc = self._accepted(rid, d, out)
            g = rules.spec_emitted(acc, out, max_tokens)
            if d:
                self._count_verification(d, acc)
                R.num_computed[rid] = ntok + acc
            generated += g
            R.num_tokens[rid] = ntok + g
            R.num_out[rid] = out + g
            if out > 0:
                gaps.append(shown - float(R.last_token[rid]))  # one chunk of tokens, one gap
            else:
                R.first_token[rid] = shown
            R.last_token[rid] = shown
            if rules.finishes(out + g, max_tokens):
                if self.cfg.outputs_late:
                    self.ended.append(rid)
                else:
                    self._free_finished(rid)
                R.status[rid] = RequestStatus.FINISHED
                R.finish[rid] = shown
                R.num_blocks[rid] = 0  # (its blocks are the KV cache manager's to free)
                self.drafts.pop(rid, None)
                finished.append(rid)
            elif k:
                self.drafts[rid] = k
        if finished:
            done = set(finished)
            self.running = [rid for rid in self.running if rid not in done]
        spec = (
            self.spec_counts[0] - before[0],
            self.spec_counts[1] - before[1],
            self.spec_counts[2] - before[2],
        )
        return StepOutput(generated, tuple(finished), tuple(gaps), spec)

    def _count_verification(self, drafts: int, accepted: int) -> None:
        c = self.spec_counts
        c[0] += 1
        c[1] += drafts
        c[2] += accepted
        for i in range(accepted):
            self.spec_accepted_per_pos[i] += 1
