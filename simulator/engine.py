"""The engine: one SimPy process per replica, one timeout per engine step.

    plan = scheduler.schedule(now); yield env.timeout(cost.step_time(plan.work)); scheduler.update(plan)

Requests enter through ``submit``; the scheduler, block pool and cost model never see ``env``.
"""

from __future__ import annotations

import heapq

import numpy as np
import simpy
from simpy.events import NORMAL

from simulator.cost import CostModel
from simulator.requests import ABORTED, FINISHED, REJECTED, RequestTable
from simulator.scheduler import Scheduler
from simulator.step_log import StepLog


class TimeoutAt(simpy.Timeout):
    """A timeout that fires at exactly time ``t`` (>= now).

    ``env.timeout(d)`` fires at ``now + d`` in floats, and no ``d`` may give ``t`` exactly (when
    ``now + d`` falls halfway between two floats, ties-to-even skips every other one). An event has
    to land exactly on a time computed elsewhere (a step's end, a trace's arrival), so this one
    goes on SimPy's event queue at ``t`` itself, with the priority and sequence number a timeout
    created now would get.
    """

    def __init__(self, env: simpy.Environment, t: float) -> None:
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = t - env.now
        self._ok = True
        heapq.heappush(env._queue, (t, NORMAL, next(env._eid), self))


class SimulationStalled(RuntimeError):
    """The engine has work but can schedule none of it: a diagnostic, never a silent hang."""


class Engine:
    def __init__(
        self,
        env: simpy.Environment,
        scheduler: Scheduler,
        cost: CostModel,
        reqs: RequestTable,
        *,
        max_model_len: int,
        max_blocks_per_request: int,
        max_steps: int = 50_000_000,
        stall_steps: int = 1000,
        log: StepLog | None = None,
    ) -> None:
        self.env = env
        self.sched = scheduler
        self.cost = cost
        self.reqs = reqs
        self.max_model_len = max_model_len
        self.max_blocks = max_blocks_per_request
        # The longest prompt + max_tokens accepted (see _reject_reason): a request's blocks hold all
        # of its tokens but the last.
        self._longest = min(max_model_len, max_blocks_per_request * scheduler.cfg.block_size + 1)
        self.max_steps = max_steps
        self.stall_steps = stall_steps
        self.log = log if log is not None else StepLog(scheduler.pool.num_blocks)
        self.reject_reasons: dict[int, str] = {}
        self._events: dict[int, simpy.Event] = {}
        self._wake: simpy.Event | None = None
        self.num_steps = 0
        self.num_done = 0  # finished + rejected + aborted
        self.all_done: simpy.Event = env.event()
        self.expected: int | None = None  # when set, all_done fires once this many are done
        # Private switch: run provably uneventful decode steps as one timeout (see _decode_run).
        # Needs a cost model that prices many steps at once; results are identical either way.
        self.macro_steps = hasattr(cost, "step_times")
        self.process = env.process(self._loop())

    def submit(
        self,
        prompt_len: int,
        max_tokens: int,
        group: int = -1,
        group_len: int = 0,
        priority: int = 0,
        content_key: int = -1,
        client: int = -1,
        client_class: int = -1,
        want_event: bool = False,
    ) -> simpy.Event | None:
        R, env = self.reqs, self.env
        rid = R.add(env.now, prompt_len, max_tokens, priority, group, group_len, content_key, client, client_class)
        ev = simpy.Event(env) if want_event else None
        if prompt_len + max_tokens > self._longest:
            R.status[rid] = REJECTED
            R.finish[rid] = env.now
            self.reject_reasons[rid] = self._reject_reason(prompt_len, max_tokens)
            if ev is not None:
                ev.succeed(rid)
            self._count_done(1)
            return ev
        if ev is not None:
            self._events[rid] = ev
        self._enqueue(rid, prompt_len + max_tokens)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return ev

    def _enqueue(self, rid: int, total: int) -> None:
        """Queue an accepted request (``total``: its prompt + max_tokens)."""
        self.sched.add_request(rid)

    def finish_run(self) -> None:
        """Called when the run stops: bring any state held outside the request records into them."""

    def _reject_reason(self, prompt_len: int, max_tokens: int) -> str:
        total = prompt_len + max_tokens
        if total > self.max_model_len:
            return f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} > max_model_len ({self.max_model_len})"
        bs = self.sched.cfg.block_size
        need = (total - 1 + bs - 1) // bs
        if need > self.max_blocks:
            return f"needs {need} KV blocks, more than the whole pool ({self.max_blocks})"
        return ""

    def _count_done(self, k: int) -> None:
        self.num_done += k
        if self.expected is not None and self.num_done >= self.expected and not self.all_done.triggered:
            self.all_done.succeed()

    def _notify(self, rids: np.ndarray | tuple) -> None:
        events = self._events
        for rid in rids if isinstance(rids, tuple) else rids.tolist():
            ev = events.pop(rid, None)
            if ev is not None:
                ev.succeed(rid)
        self._count_done(len(rids))

    def _loop(self):
        env, sched, cost, log = self.env, self.sched, self.cost, self.log
        idle_steps = 0
        decoding = False
        while True:
            if not sched.has_work():
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if self.num_steps >= self.max_steps:
                raise self.max_steps_reached()
            start = env.now
            plan = None
            # A run longer than one step needs the next SimPy event to lie beyond this instant
            # (otherwise, e.g. a client resubmitting at a finish, it is one step: step singly).
            if decoding and self.macro_steps and env.peek() > start:
                plan, start, dt = yield from self._decode_run(start)
            if plan is None:
                plan = sched.schedule(start)
                dt = cost.step_time(plan.work)
                yield env.timeout(dt)
            out = sched.update(plan, env.now)
            # Every running request sampled: all of them decode next step (see _decode_run).
            decoding = plan.work.num_sampled == plan.num_running > 0 and not plan.preempted
            self.num_steps += 1
            log.add(start, dt, plan, out)
            if plan.aborted:
                self._notify(plan.aborted)
            if len(out.finished):
                self._notify(out.finished)
            # Progress means computing tokens never computed before; steps that only redo
            # preempted work (or do nothing) for stall_steps in a row are a livelock.
            if plan.work.num_tokens - plan.recomputed_tokens <= 0:
                idle_steps += 1
                if idle_steps >= self.stall_steps:
                    raise SimulationStalled(self.diagnose())
            else:
                idle_steps = 0

    def _decode_run(self, start: float):
        """Run k >= 1 pure decode steps with one SimPy timeout (a generator: yields, then returns).

        The scheduler proves the steps uneventful (``Scheduler.decode_run``: only the last may
        finish requests). The run is cut so that every step but the first is scheduled strictly
        before the next SimPy event (``env.peek()``: an arrival, a client's think time, the stop
        of ``env.run``): nothing can observe or change the state until the last step is under
        way, so all k steps are scheduled and all but the last applied at once, and the engine
        loop applies the last step's outcome (finishes included) when it ends, as for a single
        step. Step times come from ``CostModel.step_times`` and are accumulated with the same
        sequential float additions SimPy does, so requests.csv, steps.csv and the ITL
        statistics are byte-identical to stepping one step at a time.

        Returns (the last step's plan, its start, its duration), or (None, start, 0.0) when no
        run applies (then nothing was changed or yielded).
        """
        env, sched = self.env, self.sched
        run = sched.decode_run(self.max_steps - self.num_steps)
        if run is None:
            return None, start, 0.0
        n = len(run.rids)
        nc0 = int(run.num_computed.sum())
        ctx = nc0 + n * np.arange(run.max_steps, dtype=np.int64)
        dts = self.cost.step_times(n, n, ctx, (ctx + n).astype(np.float64), n)
        times = np.add.accumulate(np.concatenate(([start], dts)))
        # Steps 1.. are scheduled at times[j]; an event at exactly times[j] would come first.
        k = 1 + int(times[1 : run.max_steps].searchsorted(env.peek(), side="left"))
        first_gaps, plan = sched.apply_decode_run(run, k, times)
        if k > 1:
            free = run.free_after[: k - 1]
            self.log.add_rows({
                "start": times[: k - 1], "duration": dts[: k - 1], "num_running": n,
                "num_waiting": plan.num_waiting, "num_swapped": plan.num_swapped,
                "num_free_blocks": free, "num_seqs": n,
                "prefill_tokens": 0, "decode_tokens": n, "recomputed_tokens": 0, "num_preemptions": 0,
                "num_generated": n, "num_finished": 0,
            })
            self.log._push_gaps(first_gaps)
            self.log.add_gap_runs(times[2:k] - times[1 : k - 1], n)
            self.num_steps += k - 1
        yield TimeoutAt(env, float(times[k]))
        return plan, float(times[k - 1]), float(dts[k - 1])

    def max_steps_reached(self) -> SimulationStalled:
        return SimulationStalled(f"run.max_steps ({self.max_steps}) reached at t={self.env.now:.3f} s")

    def queues(self) -> tuple[int, int, int, int]:
        """(running, waiting, swapped, free blocks) now."""
        s = self.sched
        return s._n, s.num_waiting, len(s.swapped), s.pool.num_free

    def diagnose(self) -> str:
        running, waiting, swapped, free = self.queues()
        cfg = self.sched.cfg
        return (
            f"no progress for {self.stall_steps} steps (no new token computed) at t={self.env.now:.3f} s: "
            f"running={running} waiting={waiting} swapped={swapped} "
            f"free_blocks={free}/{self.sched.pool.num_blocks} budget={cfg.max_num_batched_tokens} "
            f"max_num_seqs={cfg.max_num_seqs}"
        )

    def count(self, status: int) -> int:
        return int(np.count_nonzero(self.reqs.status[: self.reqs.n] == status))

    @property
    def num_finished(self) -> int:
        return self.count(FINISHED)

    @property
    def num_aborted(self) -> int:
        return self.count(ABORTED)
