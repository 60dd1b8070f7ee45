"""The engine: one SimPy process per replica, one timeout per engine step.

    plan = scheduler.schedule(now); yield env.timeout(cost.step_time(plan.work)); scheduler.update(plan)

Requests enter through ``submit``; the scheduler, block pool and cost model never see ``env``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
            self._gaps[self._ng : self._ng + take * n] = values[i : i + take].repeat(n)
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

    def window(self, t0: float, t1: float) -> WindowTotals:
        """Totals over the steps that start at or after ``t0``, and KV usage over [t0, t1]
        (weighted by the time each step's value held, clipped to the window)."""
        log = self.columns()
        inside = log["start"] >= t0
        mean, peak = time_weighted_usage(log["start"], log["duration"], log["kv_usage"], t0, t1)
        return WindowTotals(
            num_generated=int(log["num_generated"][inside].sum()),
            num_preemptions=int(log["num_preemptions"][inside].sum()),
            recomputed_tokens=int(log["recomputed_tokens"][inside].sum()),
            kv_usage_mean=mean,
            kv_usage_max=peak,
        )


@dataclass(frozen=True)
class WindowTotals:
    num_generated: int
    num_preemptions: int
    recomputed_tokens: int
    kv_usage_mean: float
    kv_usage_max: float


def time_weighted_usage(starts: np.ndarray, durations: np.ndarray, usage: np.ndarray, t0: float, t1: float) -> tuple[float, float]:
    """Mean (weighted by the time each value held) and max of KV usage over [t0, t1]."""
    ends = starts + durations
    lo = np.maximum(starts, t0)
    hi = np.minimum(ends, t1)
    w = np.clip(hi - lo, 0, None)
    if w.sum() <= 0:
        return 0.0, 0.0
    inside = w > 0
    return float(np.dot(w, usage) / w.sum()), float(usage[inside].max())


# Binned log: per bin, sums over the steps that start in it (the token and event counts, and the
# time-weighted state), the number of steps, their busy time and the highest KV usage.
_BIN_SUMS = ("prefill_tokens", "decode_tokens", "recomputed_tokens", "num_preemptions", "num_generated", "num_finished",
             "num_seqs")
_BIN_MEANS = ("num_running", "num_waiting", "num_swapped", "kv_usage")  # weighted by step duration
BIN_COLUMNS = ("start", "duration", "num_steps", "busy_s", "num_running", "num_waiting", "num_swapped", "kv_usage",
               "kv_usage_max", "num_seqs", *_BIN_SUMS[:-1])


class BinnedStepLog(StepLog):
    """The step log folded into fixed-width time bins as it is written: memory grows with
    simulated time / ``bin_s`` instead of with the number of steps.

    A step belongs to the bin in which it starts. Each bin keeps the step count, the busy time,
    the sums of the per-step counts (tokens, preemptions, finishes, sequences scheduled), the
    duration-weighted means of the running/waiting/swapped counts and of KV usage, and the highest
    KV usage. ``columns()`` returns one row per bin that has steps, with ``start`` the bin's start
    and ``duration`` its width, so plots and throughput series read it as they read steps.
    The summary's window totals are accumulated exactly as the steps pass (``window_start``: the
    warm-up), so the summary does not depend on the bin width.
    """

    def __init__(self, num_blocks: int, bin_s: float, window_start: float = 0.0) -> None:
        super().__init__(num_blocks)
        self.bin_s = float(bin_s)
        self.t0 = float(window_start)
        self._bins: dict[str, np.ndarray] = {}
        self._nbins = 0
        self._w = {"gen": 0, "pre": 0, "rec": 0, "wsum": 0.0, "wdot": 0.0, "max": 0.0}

    def _grow(self, nbins: int) -> None:
        cap = max(nbins, 2 * len(self._bins.get("num_steps", ())), 1024)
        names = ("num_steps", "busy_s", "kv_usage_max", *_BIN_SUMS, *_BIN_MEANS)
        for c in names:
            old = self._bins.get(c)
            grown = np.zeros(cap, np.int64 if c in _BIN_SUMS or c == "num_steps" else np.float64)
            if old is not None:
                grown[: len(old)] = old
            self._bins[c] = grown

    def _unstage(self) -> None:
        ns = self._ns
        if not ns:
            return
        st = self._stage[:, :ns]
        row = {c: st[j] for j, c in enumerate(_STORED)}
        start, dur = row["start"], row["duration"]
        usage = 1.0 - row["num_free_blocks"].astype(np.int32) / self.num_blocks
        # Window totals, as StepLog.window computes them from all the steps.
        inside = start >= self.t0
        w = self._w
        w["gen"] += int(row["num_generated"][inside].sum())
        w["pre"] += int(row["num_preemptions"][inside].sum())
        w["rec"] += int(row["recomputed_tokens"][inside].sum())
        wt = np.clip(start + dur - np.maximum(start, self.t0), 0, None)
        w["wsum"] += float(wt.sum())
        w["wdot"] += float(np.dot(wt, usage))
        if (wt > 0).any():
            w["max"] = max(w["max"], float(usage[wt > 0].max()))
        # Fold into bins (starts are non-decreasing, so the chunk's bins are one contiguous range).
        b = np.floor(start / self.bin_s).astype(np.int64)
        lo, hi = int(b[0]), int(b[-1]) + 1
        if hi > len(self._bins.get("num_steps", ())):
            self._grow(hi)
        rel = b - lo
        m = hi - lo
        B = self._bins
        B["num_steps"][lo:hi] += np.bincount(rel, minlength=m)
        B["busy_s"][lo:hi] += np.bincount(rel, dur, minlength=m)
        for c in _BIN_SUMS:
            B[c][lo:hi] += np.bincount(rel, row[c], minlength=m).astype(np.int64)
        for c in _BIN_MEANS:
            v = usage if c == "kv_usage" else row[c]
            B[c][lo:hi] += np.bincount(rel, v * dur, minlength=m)  # weighted sums, divided in columns()
        first = np.flatnonzero(np.diff(rel, prepend=-1))
        np.maximum.at(B["kv_usage_max"], lo + rel[first], np.maximum.reduceat(usage, first))
        self._nbins = max(self._nbins, hi)
        self._ns = 0

    def columns(self) -> dict[str, np.ndarray]:
        """One row per bin with at least one step (see the class docstring)."""
        self._unstage()
        if not self._bins:
            return {c: np.empty(0) for c in BIN_COLUMNS}
        B = {c: a[: self._nbins] for c, a in self._bins.items()}
        keep = np.flatnonzero(B["num_steps"])
        busy = B["busy_s"][keep]
        cols = {
            "start": keep * self.bin_s,
            "duration": np.full(len(keep), self.bin_s),
            "num_steps": B["num_steps"][keep],
            "busy_s": busy,
            "kv_usage_max": B["kv_usage_max"][keep],
        }
        for c in _BIN_SUMS:
            cols[c] = B[c][keep]
        for c in _BIN_MEANS:
            # Duration-weighted means (a bin whose steps all took no time would report zero).
            cols[c] = np.divide(B[c][keep], busy, out=np.zeros(len(keep)), where=busy > 0)
        return {c: cols[c] for c in BIN_COLUMNS}

    def window(self, t0: float, t1: float) -> WindowTotals:
        # No clipping at t1 is needed: a step is logged once it has ended (a macro-step's earlier
        # steps end before the next SimPy event), so no logged step ends after the run does.
        if t0 != self.t0:
            raise ValueError(f"binned step log: window totals are kept from {self.t0} s, not {t0} s")
        self._unstage()
        w = self._w
        return WindowTotals(
            num_generated=w["gen"],
            num_preemptions=w["pre"],
            recomputed_tokens=w["rec"],
            kv_usage_mean=w["wdot"] / w["wsum"] if w["wsum"] > 0 else 0.0,
            kv_usage_max=w["max"] if w["wsum"] > 0 else 0.0,
        )


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
        log: StepLog | None = None,
    ) -> None:
        self.env = env
        self.sched = scheduler
        self.cost = cost
        self.reqs = reqs
        self.max_model_len = max_model_len
        self.max_blocks = max_blocks_per_request
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
