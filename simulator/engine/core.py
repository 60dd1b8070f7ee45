"""The engine as SimPy sees it: one process per replica, requests in through ``submit``.

What is shared by both engine steps lives here: accepting or rejecting a submission, telling the
waiting clients when their requests end, counting what is done, the stall diagnostic. The step
itself is one of two subclasses, each a SimPy process that runs it:
``simulator.engine.reference.engine.ReferenceEngine`` (the readable reference: ``schedule()``, one
timeout for the step's cost, ``update()``) and ``simulator.engine.compiled.engine.CompiledEngine`` (the
compiled production step, many steps per call while nothing outside the engine can intervene).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
import simpy

from simulator.engine.cost import ConstantCost, CostModel
from simulator.engine.host import turnaround
from simulator.engine.requests import RequestTable
from simulator.engine.rules import RequestStatus, SchedulerConfig, cdiv
from simulator.engine.simtime import TimeoutAt
from simulator.engine.step_log import StepLog
from simulator.engine.submission import DrawAhead, RequestRow, Submission

# Closed-loop clients whose requests are all rejected resubmit at the same instant forever: after
# this many rejections in a row at one time, the run stops with a diagnostic.
REJECT_LIVELOCK = 100_000

_Callback = Callable[[Any], None]  # what an event calls with itself when it fires (its return value is ignored)


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
        # of its tokens but the last; SGLang admits one only if its tokens and a page fit with a token
        # to spare (rules.sgl_fits).
        spare = cfg.sgl_page + 1 if cfg.framework == "sglang" else -1
        self._longest = min(max_model_len, self.num_blocks * cfg.block_size - spare)
        self.max_steps = max_steps
        self.stall_steps = stall_steps
        self.log = log if log is not None else StepLog(self.num_blocks)
        self._events: dict[int, simpy.Event] = {}
        self._wake: simpy.Event | None = None
        self.num_steps = 0
        self.num_done = 0  # finished + rejected + aborted
        self.all_done: simpy.Event = env.event()
        self.expected: int | None = None  # when set, all_done fires once this many are done
        self._rejected_now = (-1.0, 0)  # (time, rejections in a row at that time)
        self._client_end: dict[int, float] = {}  # client -> when its last request ended (host.turnaround)
        # client -> what runs its next turn (and its fellow clients'), when its request ends (chain)
        self._turns: dict[int, Callable[[list[int]], None]] = {}
        self.process = env.process(self._loop())

    # ---- requests in -----------------------------------------------------------------------------
    def submit(self, s: Submission, want_event: bool = False, previous_end: float | None = None) -> simpy.Event | None:
        """A request its client sends now (``s.sent``: earlier, when a fleet hands it on); with
        ``want_event``, returns an event that fires when it ends (finished, rejected or aborted),
        with its id as value. It reaches the engine once the API server has taken it in
        (``simulator.engine.host``; at once without one); a closed-loop client's request is ready
        for the API server only ``host.turnaround`` after its previous one ended (``previous_end``:
        when, if not this engine's own record of the client)."""
        rid = self._add(
            self.env.now if s.sent is None else s.sent,
            s.prompt_len,
            s.max_tokens,
            s.priority,
            s.group,
            s.group_len,
            s.content_key,
            s.client,
            s.client_class,
            s.external,
            s.lora,
            previous_end,
        )
        ev = None
        if want_event:
            ev = self._events[rid] = simpy.Event(self.env)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return ev

    def submit_rows(self, rows: list[RequestRow], times: list[float] | None = None) -> None:
        """Requests in order, each as ``submit`` takes a submission of those fields
        (``submission.RequestRow``), without an event: sent now (closed-loop clients' turns, run
        by ``chain``), or each at its own time in ``times``, from now on (an open loop's arrivals
        handed over ahead: ``workloads.arrivals.hand_over_ahead``; the engine takes each in when
        its time comes, as if it had been sent then)."""
        now, add = self.env.now, self._add
        for k, (prompt_len, max_tokens, group, group_len, priority, key, client, client_class, lora) in enumerate(rows):
            sent = now if times is None else times[k]
            add(sent, prompt_len, max_tokens, priority, group, group_len, key, client, client_class, 0, lora, None)
        if rows and self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _add(
        self,
        sent: float,
        prompt_len: int,
        max_tokens: int,
        priority: int,
        group: int,
        group_len: int,
        content_key: int,
        client: int,
        client_class: int,
        external: int,
        lora: int,
        previous_end: float | None,
    ) -> int:
        """Record a request sent at ``sent`` and hand it to the API server's intake; its id."""
        if previous_end is None and client >= 0:
            previous_end = self._client_end.get(client)
        ready = sent if previous_end is None else max(sent, turnaround(self._cpl, previous_end, self._open()))
        rid = self.reqs.add(
            sent,
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
            ready,
        )
        if lora >= 0:
            self._new_adapter(lora)
        self._enqueue(rid, prompt_len + max_tokens, group, content_key)
        return rid

    def chain(self, client: int, turns: Callable[[list[int]], None]) -> None:
        """Call ``turns(clients)`` when requests of ``client`` end, once the client learns of it:
        where a completion event's callback would run (after the ended requests are counted),
        without an event per request (``workloads.arrivals.closed_loop``: clients that send again at
        once). The clients whose requests ended at one moment come in one call, in the order their
        requests ended (consecutive ones that share ``turns``)."""
        self._turns[client] = turns

    def run_turns(self, clients: range, source: DrawAhead) -> Callable[[list[int]], None] | None:
        """``submission.DirectTarget.run_turns``: only the compiled step runs turns itself."""
        return None

    def _rejects(self, total: int) -> bool:
        """Whether a request of ``total`` tokens (prompt + max_tokens) is rejected when it reaches the
        engine: it could never fit (the compiled step's LONGEST check is the same rule)."""
        return total > self._longest

    def _enqueue(self, rid: int, total: int, group: int, content_key: int) -> None:
        """Room for a request just sent (``total``: its prompt + max_tokens; ``content_key``: as given
        in its submission, -1 for its own content); it enters the API server's intake."""
        raise NotImplementedError

    @property
    def reject_reasons(self) -> dict[int, str]:
        """Why each rejected request was refused, by id (in id order)."""
        R = self.reqs
        rejected = np.flatnonzero(R.status[: R.n] == RequestStatus.REJECTED)
        return {int(r): self._reject_reason(int(R.prompt_len[r]), int(R.max_tokens[r])) for r in rejected}

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

    def _notify(self, rids, times: list[float] | None = None) -> bool:
        """Requests that ended (finished or aborted): wake whoever waits for them, count them, each
        at its finish time (when its last token reaches the client: later than now behind a busy
        front-end). Returns whether anybody was woken now. (``rids``: their ids, an array or a
        list; ``times``: their finish times, when already gathered: a group handed on to its
        delivery time.)"""
        events, env, R, turns = self._events, self.env, self.reqs, self._turns
        woke = False
        now_done = 0
        chained = []  # the chained clients whose requests ended now, in order
        later: dict[float, list] = {}
        now = env.now
        rejected = int(RequestStatus.REJECTED)
        # One gather per column for the whole group (the requests of a step end together).
        ids = rids if isinstance(rids, np.ndarray) else np.array(rids, np.int64)
        if times is None:
            times = R.finish[ids].tolist()
        if times and times[0] > now and times.count(times[0]) == len(times):  # the common case of the loop below
            ts = times
            TimeoutAt(env, times[0]).callbacks.append(cast(_Callback, lambda _e: self._notify(ids, ts)))
            self._count_done(0)
            return False
        clients, states = R.client[ids].tolist(), R.status[ids].tolist()
        for rid, t, c, state in zip(ids.tolist(), times, clients, states):
            if t > now:  # a step's finished requests share their delivery time: one event for them
                later.setdefault(t, []).append(rid)
                continue
            if state == rejected:
                self._check_livelock(rid, t)
            ev = events.pop(rid, None)
            if ev is not None:
                ev.succeed(rid)
                woke = True
            elif c in turns:
                chained.append(c)
                woke = True
            if c >= 0:
                self._client_end[c] = t
            now_done += 1
        for t, group in later.items():
            TimeoutAt(env, t).callbacks.append(cast(_Callback, lambda _e, group=group: self._notify(group)))
        self._count_done(now_done)
        i, n = 0, len(chained)
        while i < n:  # each run of clients that share their turns, in one call
            run = turns[chained[i]]
            j = i + 1
            while j < n and turns[chained[j]] is run:
                j += 1
            run(chained[i:j])
            i = j
        return woke

    def _check_livelock(self, rid: int, t: float) -> None:
        """A request rejected at ``t``: clients whose requests are all rejected resubmit at once,
        forever, without time passing; stop such a run with a diagnostic."""
        last, k = self._rejected_now
        k = k + 1 if last == t else 1
        self._rejected_now = (t, k)
        if k >= REJECT_LIVELOCK:
            raise self._livelock(k, rid, t)

    def _livelock(self, k: int, rid: int, t: float) -> SimulationStalled:
        """The diagnostic for ``k`` rejections in a row at ``t``, the last of request ``rid``."""
        R = self.reqs
        reason = self._reject_reason(int(R.prompt_len[rid]), int(R.max_tokens[rid]))
        return SimulationStalled(
            f"{k:,} requests in a row rejected at t={t:.3f} s with no time passing "
            f"(clients resubmit at once); the last: {reason}. Shorten the requests, raise engine.max_model_len "
            f"or the KV pool, or set workload.over_max_model_len: truncate"
        )

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

    def jit_counts(self) -> tuple[int, float]:
        """Steps that waited for the engine core to compile kernels they ran first
        (``cost.first_compile``) so far, and the seconds they waited."""
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
