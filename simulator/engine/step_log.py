"""The step log: one row per engine step (or per time bin), and the inter-token-latency histogram.

Kept as typed numpy columns (no Python objects per step); the summary's window totals
(``StepLog.window``) are defined here once for both forms.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from simulator.engine.rules import ITL_BINS, itl_bin, itl_bin_value, kv_usage

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
    # speculative decoding (vLLM's spec_decode counters, per step): verifications with drafts, the
    # drafts verified, and those accepted (steps.csv carries them only with drafts on)
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)
SPEC_STEP_COLUMNS = STEP_COLUMNS[-3:]

# Stored per step: times as float64, counts as int32 (kv_usage is derived from num_free_blocks). The
# stage's rows are these columns in this order (the compiled step writes them by these indices).
_STORED = STAGE_ROWS = tuple(c for c in STEP_COLUMNS if c != "kv_usage")
_FLOAT_STORED = ("start", "duration")


class StepLog:
    """One row per engine step (O(steps) memory, no Python objects).

    Rows are staged in a small float64 buffer and moved, every ``_STAGE`` steps, into one array
    per column in its final dtype (60 bytes a step). The columns grow in place (``ndarray.resize``
    reallocates, which for large arrays remaps pages instead of copying them), so the old and new
    copies of the log are never both resident; ``columns()`` returns views, and the next growth
    after it copies instead, leaving those views valid.
    Inter-token gaps are counted into a log-spaced histogram (``rules.itl_bin``) as they come, so
    memory does not grow with the number of tokens. The compiled step writes its rows into the
    stage and its gaps into the histogram itself.
    """

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
        self.itl_hist = np.zeros(ITL_BINS + 2, np.int64)
        self.itl_count = 0

    def add(self, start: float, duration: float, plan, out) -> None:
        """One step of the reference engine: its plan (``reference.scheduler.StepPlan``) and outcome."""
        if self._ns == self._STAGE:
            self._unstage()
        w = plan.work
        self._stage[:, self._ns] = (
            start,
            duration,
            plan.num_running,
            plan.num_waiting,
            plan.num_swapped,
            plan.num_free_blocks,
            w.num_seqs,
            w.num_prefill_tokens,
            w.num_decode_tokens,
            plan.recomputed_tokens,
            len(plan.preempted),
            out.num_generated,
            len(out.finished),
            *out.spec,
        )
        self._ns += 1
        self.n += 1
        hist = self.itl_hist
        for gap in out.itl_gaps:
            hist[itl_bin(gap)] += 1
        self.itl_count += len(out.itl_gaps)

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

    def itl_quantile(self, q: float) -> float:
        """Quantile of inter-token latency in seconds (bin-centre accuracy: 0.5%)."""
        if self.itl_count == 0:
            return float("nan")
        target = q * self.itl_count
        k = int(np.searchsorted(np.cumsum(self.itl_hist), target, side="left"))
        return float(itl_bin_value(k))

    def columns(self) -> dict[str, np.ndarray]:
        """Each column as one array (counts int32, times float64; kv_usage computed as the pool does)."""
        if self._ns:
            self._unstage()
        self._shared = True
        cols = {c: a[: self.n] for c, a in self._cols.items()}
        cols["kv_usage"] = kv_usage(cols["num_free_blocks"], self.num_blocks)
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


class _WindowSums(TypedDict):
    """The window totals a binned step log accumulates as the steps pass."""

    gen: int
    pre: int
    rec: int
    wsum: float
    wdot: float
    max: float


def _overlap(starts: np.ndarray, durations: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """How long each step lies inside [t0, t1] (its weight in the time-weighted KV usage)."""
    return np.clip(np.minimum(starts + durations, t1) - np.maximum(starts, t0), 0, None)


def time_weighted_usage(
    starts: np.ndarray, durations: np.ndarray, usage: np.ndarray, t0: float, t1: float
) -> tuple[float, float]:
    """Mean (weighted by the time each value held) and max of KV usage over [t0, t1]."""
    w = _overlap(starts, durations, t0, t1)
    if w.sum() <= 0:
        return 0.0, 0.0
    inside = w > 0
    return float(np.dot(w, usage) / w.sum()), float(usage[inside].max())


# Binned log: per bin, sums over the steps that start in it (the token and event counts, and the
# time-weighted state), the number of steps, their busy time and the highest KV usage.
_BIN_SUMS = (
    "prefill_tokens",
    "decode_tokens",
    "recomputed_tokens",
    "num_preemptions",
    "num_generated",
    "num_finished",
    *SPEC_STEP_COLUMNS,
    "num_seqs",
)
_BIN_MEANS = ("num_running", "num_waiting", "num_swapped", "kv_usage")  # weighted by step duration
BIN_COLUMNS = (
    "start",
    "duration",
    "num_steps",
    "busy_s",
    "num_running",
    "num_waiting",
    "num_swapped",
    "kv_usage",
    "kv_usage_max",
    "num_seqs",
    *_BIN_SUMS[:-1],
)


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
        self._w: _WindowSums = {"gen": 0, "pre": 0, "rec": 0, "wsum": 0.0, "wdot": 0.0, "max": 0.0}

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
        usage = kv_usage(row["num_free_blocks"].astype(np.int32), self.num_blocks)
        # Window totals, as StepLog.window computes them from all the steps.
        inside = start >= self.t0
        w = self._w
        w["gen"] += int(row["num_generated"][inside].sum())
        w["pre"] += int(row["num_preemptions"][inside].sum())
        w["rec"] += int(row["recomputed_tokens"][inside].sum())
        wt = _overlap(start, dur, self.t0, np.inf)  # logged steps end by the run's end (see window)
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
