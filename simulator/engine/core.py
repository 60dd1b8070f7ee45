"""The engine as SimPy sees it: one process per replica, requests in through ``submit``.

What is shared by both engine steps lives here: accepting or rejecting a submission, telling the
waiting clients when their requests end, counting what is done, the stall diagnostic. The step
itself is one of two subclasses, each a SimPy process that runs it:
``simulator.engine.reference.engine.ReferenceEngine`` (the readable reference: ``schedule()``, one
timeout for the step's cost, ``update()``) and ``simulator.engine.compiled.engine.CompiledEngine`` (the
compiled production step, many steps per call while nothing outside the engine can intervene).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import simpy

from simulator.engine.cost import ConstantCost, CostModel
from simulator.engine.frontend import after_intake, intake_passes, intake_start, reaches_engine, turnaround
from simulator.engine.requests import RequestTable
from simulator.engine.rules import RequestStatus, SchedulerConfig, cdiv
from simulator.engine.simtime import TimeoutAt
from simulator.engine.step_log import StepLog

# Closed-loop clients whose requests are all rejected resubmit at the same instant forever: after
# this many rejections in a row at one time, with none accepted, the run stops with a diagnostic.
REJECT_LIVELOCK = 100_000

_Callback = Callable[[Any], None]  # what an event calls with itself when it fires (its return value is ignored)


def with_turnaround(env: simpy.Environment, submit: Callable, take_in_at: Callable[[int], float]) -> Callable:
    """``submit`` (an engine's or a fleet's) as the clients call it: a client whose previous request
    ended moments ago has its next one submitted only when the front-end takes it in
    (``take_in_at``; ``frontend.turnaround``), with the time it was sent as its arrival, so the
    wait counts in its TTFT. Submitted then, it gets its id then: requests reach an engine in id
    order. The event returned fires when the request ends, with the value the engine gives it."""

    def submit_turned(*args, client: int = -1, want_event: bool = False, **kw):
        t = take_in_at(client)
        if t <= env.now:
            return submit(*args, client=client, want_event=want_event, **kw)
        sent = env.now
        ended = simpy.Event(env) if want_event else None

        def take_in(_event) -> None:
            ev = submit(*args, client=client, want_event=want_event, sent=sent, **kw)
            if ended is not None:
                ev.callbacks.append(lambda e: ended.succeed(e.value))

        TimeoutAt(env, t).callbacks.append(take_in)
        return ended

    return submit_turned


class SimulationStalled(RuntimeError):
    """The engine has work but can schedule none of it: a diagnostic, never a silent hang."""


class Engine:
    """Submission, rejection, notification and bookkeeping; subclasses run the step (``_loop``)."""

    def __init__(
        self,
        env: simpy.Environment,
        cfg: SchedulerConfig,
        num_gpu_blocks: int,
        cost: CostModel | ConstantCost,
        reqs: RequestTable,
        *,
        max_model_len: int,
        max_steps: int = 50_000_000,
        stall_steps: int = 1000,
        log: StepLog | None = None,
        trace: int = 0,
    ) -> None:
        self.env = env
        self.trace_level = trace  # request events to record (simulator.engine.events): 0 none, 1, 2
        # Called with (now, requests done) as the run goes (simulator.progress).
        self.progress: Callable[[float, int], None] | None = None
        # After requests end, let their clients' reactions at that instant (a resubmission) reach
        # the next step before it is scheduled, as when a client submits between two engine steps
        # (workload.arrival.client_latency_s delays a reaction beyond it).
        self.clients_same_step = True
        # Whether nothing this engine's steps do can reach another engine before the next event that
        # is not another engine's step (simulator.engine.simtime.horizon): set for the replicas of a fleet
        # whose arrivals do not wait on earlier ends; the compiled step then runs ahead to that event.
        self.independent = False
        self.cfg = cfg
        self.cost = cost
        self._cpl = cost.params.tolist()  # the same constants as Python floats (cheaper to read one at a time)
        self.reqs = reqs
        self.num_blocks = num_gpu_blocks - 1  # usable: one is the null block
        self.max_model_len = max_model_len
        # The longest prompt + max_tokens accepted (see _reject_reason): a request's blocks hold all
        # of its tokens but the last.
        self._longest = min(max_model_len, self.num_blocks * cfg.block_size + 1)
        self.max_steps = max_steps
        self.stall_steps = stall_steps
        self.log = log if log is not None else StepLog(self.num_blocks)
        self.reject_reasons: dict[int, str] = {}
        self._events: dict[int, simpy.Event] = {}
        self._wake: simpy.Event | None = None
        self.num_steps = 0
        self.num_done = 0  # finished + rejected + aborted
        self.all_done: simpy.Event = env.event()
        self.expected: int | None = None  # when set, all_done fires once this many are done
        self._rejected_now = (-1.0, 0)  # (time, rejections in a row at that time with none accepted)
        self.num_arrived = 0  # requests that reached the engine (past the front-end), in id order
        self._frontend_free = 0.0
        self._frontend_batch = 0.0  # when the last batch of outputs queued starts
        self._intake_queue: deque[tuple[int, float, float]] = deque()  # (request, this pass's work, the next's)
        self._intake_waits = False  # an event will start the next piece of intake
        self._intake_end = 0.0  # when the piece of intake in progress ends (see _intake_busy)
        self._intake_first: tuple[int, float] = (-1, 0.0)  # the request in its first pass, and its second's work
        self._client_end: dict[int, float] = {}  # client -> when its last request ended (frontend.turnaround)
        self.process = env.process(self._loop())

    # ---- requests in -----------------------------------------------------------------------------
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
        external: int = 0,
        lora: int = -1,
        sent: float | None = None,
    ) -> simpy.Event | None:
        """Submit a request now; with ``want_event``, returns an event that fires when it ends
        (finished, rejected or aborted), with its id as value. It reaches the engine once the
        front-end has taken it in (``simulator.engine.frontend``; at once without one). ``external``:
        prompt tokens whose KV comes with the request (a disaggregated decode), not computed here.
        ``lora``: the LoRA adapter it asks for (-1: the base model). ``sent``: when its client sent
        it, if earlier than now (its arrival; ``with_turnaround``)."""
        R, env = self.reqs, self.env
        rid = R.add(
            env.now if sent is None else sent,
            prompt_len,
            max_tokens,
            priority,
            group,
            group_len,
            content_key,
            client,
            client_class,
            external,
            lora,
        )
        if lora >= 0:
            self._new_adapter(lora)
        ev = simpy.Event(env) if want_event else None
        if ev is not None:
            self._events[rid] = ev
        first, rest = intake_passes(self._cpl, prompt_len)
        if first == rest == 0.0:  # no front-end (or no work for it)
            self._reach(rid, reaches_engine(self._cpl, env.now))
            return ev
        self._intake_queue.append((rid, first, rest))
        if not self._intake_waits:
            self._intake_next()
        return ev

    def take_in_at(self, client: int) -> float:
        """When the front-end takes in the next request of ``client`` (``frontend.turnaround``): -1
        for a client it has not served, or none (-1)."""
        previous = self._client_end.get(client) if client >= 0 else None
        return -1.0 if previous is None else turnaround(self._cpl, previous, self._open())

    # The front-end's intake (simulator.engine.frontend): one piece of work at a time, first come first
    # served, each started once the batch of outputs in progress is done.
    def _intake_next(self, _event=None) -> None:
        """Start the next piece of intake now, or wait for the work ahead of it (an event then)."""
        self._intake_waits = False
        queue = self._intake_queue
        if not queue:
            return
        env = self.env
        now = env.now
        start = intake_start(now, self._intake_end, self._fe_free, self._fe_batch)
        if start > now:
            self._intake_waits = True
            TimeoutAt(env, start).callbacks.append(self._intake_next)
            return
        rid, work, rest = queue.popleft()
        end = now + work
        self._intake_busy = end
        free, batch = after_intake(self._fe_free, self._fe_batch, now, work)
        if free != self._fe_free:
            self._fe_free, self._fe_batch = free, batch
        if rest == 0.0:  # its last pass: on to the engine when it ends
            self._reach(rid, reaches_engine(self._cpl, end))
            if queue:
                self._intake_waits = True
                TimeoutAt(env, end).callbacks.append(self._intake_next)
            return
        self._intake_waits = True
        self._intake_first = (rid, rest)
        TimeoutAt(env, end).callbacks.append(self._first_pass_done)

    def _first_pass_done(self, _event) -> None:
        rid, rest = self._intake_first
        self._intake_queue.append((rid, rest, 0.0))  # the second pass, behind what came meanwhile
        self._intake_next()

    def _reach(self, rid: int, at: float) -> None:
        """Request ``rid`` reaches the engine at ``at`` (now or later): at once, or by an event then."""
        if at == self.env.now:
            self._arrive(rid)
        else:
            TimeoutAt(self.env, at).callbacks.append(cast(_Callback, lambda _e, rid=rid: self._arrive(rid)))

    def _arrive(self, rid: int) -> None:
        """Request ``rid`` reaches the engine now: queued, or rejected if it can never fit."""
        self.num_arrived += 1
        if self._too_long(rid):
            self._reject(rid)
        else:
            self._accept(rid)

    def _too_long(self, rid: int) -> bool:
        return int(self.reqs.prompt_len[rid]) + int(self.reqs.max_tokens[rid]) > self._longest

    def _accept(self, rid: int) -> None:
        R = self.reqs
        self._rejected_now = (-1.0, 0)
        self._enqueue(rid, int(R.prompt_len[rid]) + int(R.max_tokens[rid]), int(R.group[rid]), int(R.content_key[rid]))
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _reject(self, rid: int) -> None:
        """Reject request ``rid`` now (it can never fit) and tell whoever waits for it."""
        R, env = self.reqs, self.env
        R.status[rid] = RequestStatus.REJECTED
        R.finish[rid] = env.now
        self.reject_reasons[rid] = reason = self._reject_reason(int(R.prompt_len[rid]), int(R.max_tokens[rid]))
        t, k = self._rejected_now
        k = k + 1 if t == env.now else 1
        self._rejected_now = (env.now, k)
        if k >= REJECT_LIVELOCK:
            raise SimulationStalled(
                f"{k:,} requests in a row rejected at t={env.now:.3f} s with none accepted and no time passing "
                f"(clients resubmit at once); the last: {reason}. Shorten the requests, raise engine.max_model_len "
                f"or the KV pool, or set workload.over_max_model_len: truncate"
            )
        ev = self._events.pop(rid, None)
        if ev is not None:
            ev.succeed(rid)
        self._count_done(1)

    @property
    def _fe_free(self) -> float:
        """When the front-end's outputs are done (held by the subclass's state)."""
        return self._frontend_free

    @_fe_free.setter
    def _fe_free(self, t: float) -> None:
        self._frontend_free = t

    @property
    def _fe_batch(self) -> float:
        """When the last batch of outputs queued starts (held by the subclass's state)."""
        return self._frontend_batch

    @_fe_batch.setter
    def _fe_batch(self, t: float) -> None:
        self._frontend_batch = t

    @property
    def _intake_busy(self) -> float:
        """When the piece of intake in progress ends (a step's outputs wait for it)."""
        return self._intake_end

    @_intake_busy.setter
    def _intake_busy(self, t: float) -> None:
        self._intake_end = t  # the compiled engine also keeps it where its step reads it

    def _enqueue(self, rid: int, total: int, group: int, content_key: int) -> None:
        """Queue an accepted request (``total``: its prompt + max_tokens; ``content_key``: as given to
        ``submit``, -1 for its own content)."""
        raise NotImplementedError

    def _reject_reason(self, prompt_len: int, max_tokens: int) -> str:
        total = prompt_len + max_tokens
        if total > self.max_model_len:
            return f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} > max_model_len ({self.max_model_len})"
        need = cdiv(total - 1, self.cfg.block_size)
        return f"needs {need} KV blocks, more than the whole pool ({self.num_blocks})"

    # ---- requests out ------------------------------------------------------------------------------
    def _count_done(self, k: int) -> None:
        self.num_done += k
        if self.expected is not None and self.num_done >= self.expected and not self.all_done.triggered:
            self.all_done.succeed()

    def _notify(self, rids) -> bool:
        """Requests that ended (finished or aborted): wake whoever waits for them, count them, each
        at its finish time (when its last token reaches the client: later than now behind a busy
        front-end). Returns whether anybody was woken now."""
        events, env, finish, client = self._events, self.env, self.reqs.finish, self.reqs.client
        woke = False
        now_done = 0
        later: dict[float, list] = {}
        for rid in rids:
            t = float(finish[rid])
            if t > env.now:  # a step's finished requests share their delivery time: one event for them
                later.setdefault(t, []).append(rid)
                continue
            ev = events.pop(rid, None)
            if ev is not None:
                ev.succeed(rid)
                woke = True
            c = int(client[rid])
            if c >= 0:
                self._client_end[c] = t
            now_done += 1
        for t, group in later.items():
            TimeoutAt(env, t).callbacks.append(cast(_Callback, lambda _e, group=group: self._notify(group)))
        self._count_done(now_done)
        return woke

    def _count_done_at(self, k: int, t: float) -> None:
        """Count ``k`` ended requests at time ``t`` (now or later). Only a run that stops after a
        number of requests needs the count at its time; otherwise it is counted at once."""
        if t > self.env.now and self.expected is not None:
            TimeoutAt(self.env, t).callbacks.append(lambda _e: self._count_done(k))
        else:
            self._count_done(k)

    # ---- the step ------------------------------------------------------------------------------------
    def _loop(self):
        raise NotImplementedError
        yield

    def finish_run(self) -> None:
        """Called when the run stops: bring any state held outside the request records into them.
        Requests the engine finished whose last tokens had not reached their clients when the run
        stopped (behind a busy front-end) are still in flight: running, finish unset."""
        R, now = self.reqs, self.env.now
        n = R.n
        late = (R.status[:n] == RequestStatus.FINISHED) & (R.finish[:n] > now)
        if late.any():
            R.status[:n][late] = RequestStatus.RUNNING
            R.finish[:n][late] = np.nan

    def trace_events(self) -> np.ndarray:
        """The request events recorded so far (``simulator.engine.events``): rows of (time, kind, request, value)."""
        raise NotImplementedError

    def max_steps_reached(self) -> SimulationStalled:
        return SimulationStalled(f"run.max_steps ({self.max_steps}) reached at t={self.env.now:.3f} s")

    def queues(self) -> tuple[int, int, int, int]:
        """(running, waiting, swapped, free blocks) now."""
        raise NotImplementedError

    def _open(self) -> int:
        """The requests in flight now (submitted, not ended): the streams the API servers serve."""
        return self.reqs.n - self.num_done

    def _new_adapter(self, adapter: int) -> None:
        """Room for requests that ask for LoRA adapter ``adapter``."""
        raise NotImplementedError

    def lora_counts(self) -> list[int]:
        """Adapters put into GPU slots, and read from storage into host memory, so far."""
        raise NotImplementedError

    def host_counts(self) -> list[int]:
        """KV offloading: blocks loaded from the host tier into the GPU, and written to it, so far."""
        raise NotImplementedError

    def spec_counts(self) -> list[int]:
        """vLLM's speculative-decoding counters so far: verifications with drafts, drafts verified,
        drafts accepted, then those accepted at each draft position."""
        raise NotImplementedError

    def diagnose(self) -> str:
        running, waiting, swapped, free = self.queues()
        cfg = self.cfg
        return (
            f"no progress for {self.stall_steps} steps (no new token computed) at t={self.env.now:.3f} s: "
            f"running={running} waiting={waiting} swapped={swapped} "
            f"free_blocks={free}/{self.num_blocks} budget={cfg.max_num_batched_tokens} "
            f"max_num_seqs={cfg.max_num_seqs}"
        )

    def count(self, status: int) -> int:
        return int(np.count_nonzero(self.reqs.status[: self.reqs.n] == status))

    @property
    def num_gpu_blocks(self) -> int:
        """KV blocks of the pool as vLLM counts them (the null block included)."""
        return self.num_blocks + 1

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens the KV pool holds (its usable blocks)."""
        return self.num_blocks * self.cfg.block_size

    @property
    def num_finished(self) -> int:
        return self.count(RequestStatus.FINISHED)

    @property
    def num_aborted(self) -> int:
        return self.count(RequestStatus.ABORTED)
