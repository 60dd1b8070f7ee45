"""The engine: one SimPy process per replica, one timeout per engine step.

    plan = scheduler.schedule(now); yield env.timeout(cost.step_time(plan.work)); scheduler.update(plan)

Requests enter through ``submit``; the scheduler, block pool and cost model never see ``env``.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from simulator.cost import CostModel
from simulator.requests import ABORTED, FINISHED, REJECTED, RequestTable
from simulator.scheduler import Scheduler, StepOutput, StepPlan

STEP_COLUMNS = (
    "start",
    "duration",
    "num_running",
    "num_waiting",
    "num_swapped",
    "kv_usage",
    "num_free_blocks",
    "num_seqs",
    "prefill_tokens",
    "decode_tokens",
    "recomputed_tokens",
    "num_preemptions",
    "num_generated",
    "num_finished",
)

# ITL histogram: log-spaced bins from 1 us to ~1e4 s, 200 per decade (0.5% wide).
_ITL_LO, _ITL_PER_DECADE, _ITL_DECADES = -6.0, 200, 10
_ITL_BINS = _ITL_PER_DECADE * _ITL_DECADES


# Stored per step: times as float64, counts as int32 (kv_usage is derived from num_free_blocks).
_STORED = tuple(c for c in STEP_COLUMNS if c != "kv_usage")
_FLOAT_STORED = ("start", "duration")


class StepLog:
    """One row per engine step (O(steps) memory, no Python objects).

    Rows are staged in a small float64 buffer and moved, every ``_STAGE`` steps, into one array
    per column in its final dtype (60 bytes a step). The columns grow in place (``ndarray.resize``
    reallocates, which for large arrays remaps pages instead of copying them), so the old and new
    copies of the log are never both resident; ``columns()`` returns views, and the next growth
    after it copies instead, leaving those views valid.
    Inter-token gaps are buffered and folded into a log-spaced histogram in bulk, so memory does
    not grow with the number of tokens and the per-step cost is one slice copy.
    """

    _GAP_BUFFER = 1 << 16
    _STAGE = 4096

    def __init__(self, num_blocks: int = 1) -> None:
        self.n = 0
        self.num_blocks = num_blocks
        self._stage = np.zeros((len(_STORED), self._STAGE))
        self._ns = 0
        self._moved = 0  # rows moved out of the stage into the columns
        self._cap = 0
        self._cols = {c: np.empty(0, np.float64 if c in _FLOAT_STORED else np.int32) for c in _STORED}
        self._shared = False  # columns() handed out views: do not resize in place
        self.itl_hist = np.zeros(_ITL_BINS + 2, np.int64)
        self.itl_sum = 0.0
        self.itl_count = 0
        self._gaps = np.empty(self._GAP_BUFFER)
        self._ng = 0

    def add(self, start: float, duration: float, plan: StepPlan, out: StepOutput) -> None:
        if self._ns == self._STAGE:
            self._unstage()
        w = plan.work
        self._stage[:, self._ns] = (
            start, duration, plan.num_running, plan.num_waiting, plan.num_swapped,
            plan.num_free_blocks, w.num_seqs, w.num_prefill_tokens, w.num_decode_tokens,
            plan.recomputed_tokens, len(plan.preempted), out.num_generated, len(out.finished),
        )
        self._ns += 1
        self.n += 1
        self._push_gaps(out.itl_gaps)

    def add_rows(self, rows: dict[str, np.ndarray | float]) -> None:
        """Append several steps at once: each column an array (one value per step) or a constant."""
        k = len(rows["start"])
        i = 0
        while i < k:
            if self._ns == self._STAGE:
                self._unstage()
            take = min(k - i, self._STAGE - self._ns)
            for j, c in enumerate(_STORED):
                v = rows[c]
                self._stage[j, self._ns : self._ns + take] = v[i : i + take] if isinstance(v, np.ndarray) else v
            self._ns += take
            i += take
        self.n += k

    def _unstage(self) -> None:
        ns = self._ns
        at = self._moved
        if at + ns > self._cap:
            cap = max(at + ns, self._cap + self._cap // 2, 4 * self._STAGE)
            for c, a in self._cols.items():
                if self._shared:
                    grown = np.empty(cap, a.dtype)
                    grown[:at] = a[:at]
                    self._cols[c] = grown
                else:
                    a.resize(cap, refcheck=False)
            self._shared = False
            self._cap = cap
        for j, c in enumerate(_STORED):
            self._cols[c][at : at + ns] = self._stage[j, :ns]
        self._moved += ns
        self._ns = 0

    def _push_gaps(self, gaps: np.ndarray) -> None:
        """One step's gaps into the buffer (flushed when the step would overflow it)."""
        k = len(gaps)
        if k:
            if self._ng + k > self._GAP_BUFFER:
                self._flush()
            if k > self._GAP_BUFFER:
                self._bin(gaps)
            else:
                self._gaps[self._ng : self._ng + k] = gaps
                self._ng += k

    def add_gap_runs(self, values: np.ndarray, n: int) -> None:
        """Steps that each add ``n`` equal gaps ``values[j]``: the same buffer contents and flush
        points (hence the same histogram and the same float sums) as one ``_push_gaps`` per step."""
        B = self._GAP_BUFFER
        if n > B:
            for v in values.tolist():
                self._push_gaps(np.full(n, v))
            return
        i, k = 0, len(values)
        while i < k:
            fit = (B - self._ng) // n
            if fit == 0:
                self._flush()
                continue
            take = min(fit, k - i)
            self._gaps[self._ng : self._ng + take * n] = np.repeat(values[i : i + take], n)
            self._ng += take * n
            i += take

    def _flush(self) -> None:
        if self._ng:
            self._bin(self._gaps[: self._ng])
            self._ng = 0

    def _bin(self, gaps: np.ndarray) -> None:
        self.itl_sum += float(gaps.sum())
        self.itl_count += len(gaps)
        b = (np.log10(np.maximum(gaps, 1e-12)) - _ITL_LO) * _ITL_PER_DECADE
        idx = np.clip(np.floor(b).astype(np.int64) + 1, 0, _ITL_BINS + 1)
        self.itl_hist += np.bincount(idx, minlength=_ITL_BINS + 2)

    def add_itl(self, gaps: np.ndarray) -> None:
        self._bin(np.asarray(gaps, float))

    def itl_quantile(self, q: float) -> float:
        """Quantile of inter-token latency in seconds (bin-centre accuracy: 0.5%)."""
        self._flush()
        if self.itl_count == 0:
            return float("nan")
        target = q * self.itl_count
        k = int(np.searchsorted(np.cumsum(self.itl_hist), target, side="left"))
        return float(10 ** (_ITL_LO + (k - 0.5) / _ITL_PER_DECADE))

    def itl_mean(self) -> float:
        self._flush()
        return self.itl_sum / self.itl_count if self.itl_count else float("nan")

    def columns(self) -> dict[str, np.ndarray]:
        """Each column as one array (counts int32, times float64; kv_usage computed as the pool does)."""
        if self._ns:
            self._unstage()
        self._shared = True
        cols = {c: a[: self.n] for c, a in self._cols.items()}
        cols["kv_usage"] = 1.0 - cols["num_free_blocks"] / self.num_blocks
        return {c: cols[c] for c in STEP_COLUMNS}


def delay_to(now: float, t: float) -> float:
    """The delay d >= 0 with ``now + d == t`` in floats (SimPy schedules a timeout at ``now + delay``),
    so an event lands exactly on a time computed elsewhere (a run's step ends, a trace's arrivals)."""
    d = t - now
    while now + d < t:
        d = math.nextafter(d, math.inf)
    while now + d > t and d > 0:
        d = math.nextafter(d, -math.inf)
    return d


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
    ) -> None:
        self.env = env
        self.sched = scheduler
        self.cost = cost
        self.reqs = reqs
        self.max_model_len = max_model_len
        self.max_blocks = max_blocks_per_request
        self.max_steps = max_steps
        self.stall_steps = stall_steps
        self.log = StepLog(scheduler.pool.num_blocks)
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
        R = self.reqs
        rid = R.add(
            self.env.now,
            prompt_len,
            max_tokens,
            priority=priority,
            group=group,
            group_len=group_len,
            content_key=content_key,
            client=client,
            client_class=client_class,
        )
        ev = self.env.event() if want_event else None
        reason = self._reject_reason(prompt_len, max_tokens)
        if reason:
            R.status[rid] = REJECTED
            R.finish[rid] = self.env.now
            self.reject_reasons[rid] = reason
            if ev is not None:
                ev.succeed(rid)
            self._count_done(1)
            return ev
        if ev is not None:
            self._events[rid] = ev
        self.sched.add_request(rid)
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()
        return ev

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
                raise SimulationStalled(f"run.max_steps ({self.max_steps}) reached at t={env.now:.3f} s")
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
        times = np.cumsum(np.concatenate(([start], dts)))
        # Steps 1.. are scheduled at times[j]; an event at exactly times[j] would come first.
        k = 1 + int(np.searchsorted(times[1 : run.max_steps], env.peek(), side="left"))
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
            self.log.add_gap_runs(np.diff(times[1:k]), n)
            self.num_steps += k - 1
        yield env.timeout(delay_to(env.now, float(times[k])))
        return plan, float(times[k - 1]), float(dts[k - 1])

    def diagnose(self) -> str:
        s, p = self.sched, self.sched.pool
        return (
            f"no progress for {self.stall_steps} steps (no new token computed) at t={self.env.now:.3f} s: "
            f"running={s._n} waiting={s.num_waiting} swapped={len(s.swapped)} "
            f"free_blocks={p.num_free}/{p.num_blocks} budget={s.cfg.max_num_batched_tokens} "
            f"max_num_seqs={s.cfg.max_num_seqs}"
        )

    def count(self, status: int) -> int:
        return int(np.count_nonzero(self.reqs.status[: self.reqs.n] == status))

    @property
    def num_finished(self) -> int:
        return self.count(FINISHED)

    @property
    def num_aborted(self) -> int:
        return self.count(ABORTED)
