"""The reference engine: one SimPy timeout per step.

plan = scheduler.schedule(now); yield timeout(cost.step_time(plan.work)); scheduler.update(plan, now)

Between steps it takes in the requests its API server (``api_server.ApiServer``) has handed over;
idle, it waits for the next one to reach it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from simulator.engine import events as E
from simulator.engine import host_tier, rules
from simulator.engine.core import Engine, SimulationStalled
from simulator.engine.cost import first_compile, new_shapes
from simulator.engine.host import step_start
from simulator.engine.reference.api_server import ApiServer
from simulator.engine.reference.block_pool import BlockPool
from simulator.engine.reference.kv_cache import KVCacheManager
from simulator.engine.reference.scheduler import Scheduler
from simulator.engine.reference.sglang import SGLangScheduler
from simulator.engine.rules import RequestStatus
from simulator.engine.simtime import TimeoutAt


class ReferenceEngine(Engine):
    def __init__(self, env, cfg, num_gpu_blocks, cost, reqs, **kw) -> None:
        pool = BlockPool(num_gpu_blocks)
        policy = SGLangScheduler if cfg.framework == "sglang" else Scheduler
        self.sched = policy(cfg, reqs, KVCacheManager(pool, cfg.block_size, cfg.enable_prefix_caching, cfg.host_blocks))
        self._events_log: list[tuple[float, int, int, int]] = []
        self.api = ApiServer(cost.params.tolist())
        self.shapes = new_shapes(cost.params, cfg)  # the kernels compiled so far (cost.new_shapes)
        self.jit_n, self.jit_s = 0, 0.0  # steps that waited for kernels they ran first, and how long
        super().__init__(env, cfg, num_gpu_blocks, cost, reqs, **kw)

    def _enqueue(self, rid: int, total: int, group: int, content_key: int) -> None:
        R = self.reqs
        self.api.send(rid, float(R.ready[rid]), int(R.prompt_len[rid]))

    def _take_in(self, now: float) -> list[int]:
        """Requests that reached the engine by ``now``: queued, or rejected now if they can never
        fit; returns the rejected."""
        R, rejected = self.reqs, []
        self.api.run_until(now)
        for rid in self.api.reached(now):
            if self._rejects(int(R.prompt_len[rid]) + int(R.max_tokens[rid])):
                R.status[rid] = RequestStatus.REJECTED
                R.finish[rid] = now
                rejected.append(rid)
            else:
                self.sched.add_request(rid)
        return rejected

    def _loop(self):
        env, sched, cost, log = self.env, self.sched, self.cost, self.log
        idle_steps = 0
        while True:
            if self.num_steps >= self.max_steps:
                raise self.max_steps_reached()
            self.api.run_until(env.now)
            start = step_start(cost.params, env.now, self.api.batch_start)
            if start > env.now:  # the API server has not yet taken the last step's outputs (pieces
                yield TimeoutAt(env, start)  # of intake may push them back meanwhile: look again then)
                continue
            rejected = self._take_in(start)
            if rejected and self._notify(rejected) and self.clients_same_step:
                yield env.timeout(0)
                continue
            if not sched.has_work():  # until a request is sent, or the API server's intake moves on
                sched.free_ended()  # (an empty schedule: those that ended last are freed now)
                self._wake = env.event()
                t = self.api.next_event()
                if t < float("inf"):
                    TimeoutAt(env, t).callbacks.append(self._wake_up)
                yield self._wake
                self._wake = None
                continue
            plan = sched.schedule(start)
            if self.trace_level:
                self._record_schedule(start, plan)
            work = plan.work
            jit = first_compile(cost.params, self.shapes, work.num_seqs, work.num_tokens)
            if jit:  # it waits for kernels it is the first to run
                self.jit_n += 1
                self.jit_s += jit
                work = replace(work, jit_s=jit)
            dt = cost.step_time(work)
            yield TimeoutAt(env, start + dt)
            # When the step's tokens reach their clients, through the API server.
            self.api.run_until(env.now)
            shown = self.api.stream(env.now, plan.work.num_sampled, sched.finishing(plan))
            out = sched.update(plan, env.now, shown)
            if self.progress is not None:
                self.progress(env.now, self.num_done)
            if self.trace_level:
                self._record_update(env.now, shown, plan, out)
            self.num_steps += 1
            log.add(start, dt, plan, out)
            woke = self._notify(plan.aborted) if plan.aborted else False
            if out.finished:
                woke = self._notify(out.finished) or woke
            if woke and self.clients_same_step:
                yield env.timeout(0)
            if not rules.made_progress(plan.work.num_tokens, plan.recomputed_tokens):
                idle_steps += 1
                if idle_steps >= self.stall_steps:
                    raise SimulationStalled(self.diagnose())
            else:
                idle_steps = 0

    def _wake_up(self, _event) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _record_schedule(self, t: float, plan) -> None:
        R, rec = self.reqs, self._events_log
        for rid in plan.preempted:
            kind = (
                E.PreemptionKind.ABORTED
                if rid in plan.aborted
                else E.PreemptionKind.SWAPPED_OUT
                if R.status[rid] == RequestStatus.SWAPPED
                else E.PreemptionKind.RECOMPUTED
            )
            rec.append((t, E.EventKind.PREEMPTED, rid, kind))
        for rid, hit in plan.prefix_hits:
            rec.append((t, E.EventKind.NEW if rid in plan.new else E.EventKind.RESUMED, rid, hit))
        if self.trace_level >= 2:
            rec.extend((t, E.EventKind.SCHEDULED, rid, a) for rid, a in zip(plan.rids, plan.num_new))

    def _record_update(self, t: float, shown: float, plan, out) -> None:
        R, rec = self.reqs, self._events_log
        finished = set(out.finished)
        for rid in plan.rids:
            if R.first_token[rid] == shown and R.num_out[rid] == 1:
                rec.append((t, E.EventKind.FIRST_TOKEN, rid, 0))
            if rid in finished:
                rec.append((t, E.EventKind.FINISHED, rid, 0))

    def trace_events(self) -> np.ndarray:
        return np.array(self._events_log, np.float64).reshape(-1, 4)

    def _new_adapter(self, adapter: int) -> None:
        self.sched.add_adapter(adapter)

    def jit_counts(self) -> tuple[int, float]:
        return self.jit_n, self.jit_s

    def lora_counts(self) -> list[int]:
        return list(self.sched.lora_loads)

    def host_counts(self) -> list[int]:
        h = self.sched.kv.host
        return [0, 0] if h is None else [int(h.hc[host_tier.HC_LOADED]), int(h.hc[host_tier.HC_STORED])]

    def spec_counts(self) -> list[int]:
        return [*self.sched.spec_counts, *self.sched.spec_accepted_per_pos]

    def queues(self) -> tuple[int, int, int, int]:
        s = self.sched
        return len(s.running), s.num_waiting, len(s.swapped), s.pool.num_free
