"""The engine with its step compiled (``simulator/compiled.py``): the same interface and results as
``Engine``, one kernel call per stretch of steps nothing outside the engine can interrupt.

``simulate`` uses it when the scenario stays within what the kernel reproduces
(``run.compiled_unsupported``) and numba is installed; ``run.kernel: python`` keeps the reference.
"""

from __future__ import annotations

import os

import numpy as np
import simpy

from simulator import compiled as K
from simulator.cost import CostModel
from simulator.engine import Engine, SimulationStalled, TimeoutAt
from simulator.requests import ROW_LAYOUT, WAITING, RequestTable
from simulator.scheduler import Scheduler
from simulator.step_log import ITL_BINS, ITL_LO, ITL_PER_DECADE

# The kernel reads the request tables at fixed columns.
assert ROW_LAYOUT[np.int64][: len(K.INT_LEAD)] == K.INT_LEAD
assert ROW_LAYOUT[np.float64][: len(K.FLOAT_LEAD)] == K.FLOAT_LEAD
assert ROW_LAYOUT[np.int32][0] == "preemptions"


def first_compile_note() -> str:
    """A line to print before the first run after installing, which compiles the kernel (numba then
    caches it on disk); "" once it is cached (or when the cache cannot be inspected)."""
    try:
        cached = os.path.exists(K.advance._cache._cache_file._index_path)
    except AttributeError:
        return ""
    return "" if cached else "compiling the engine step (once after installing; about 25 s)..."


def cost_params(cost: CostModel) -> np.ndarray:
    """The cost model's constants in ``compiled.COST_FIELDS`` order."""
    out = []
    for name in K.COST_FIELDS:
        for owner in (cost, cost.eff, cost.model, cost.gpu):
            if hasattr(owner, name):
                out.append(float(getattr(owner, name)))
                break
        else:
            raise AttributeError(f"cost parameter {name} not found")
    return np.array(out, np.float64)


class CompiledEngine(Engine):
    def __init__(self, env: simpy.Environment, scheduler: Scheduler, cost: CostModel, reqs: RequestTable, **kw) -> None:
        super().__init__(env, scheduler, cost, reqs, **kw)
        self.macro_steps = False
        cfg, log = scheduler.cfg, self.log
        n = scheduler.pool.num_blocks
        seats = cfg.max_num_seqs + 1
        self._ctl = ctl = np.zeros(K.N_CTL, np.int64)
        B = np.full((n, K.N_BCOLS), -1, np.int32)
        B[:, K.B_REF] = 0
        B[:, K.B_SERIAL] = 0
        cap = max(4 * n, 64)
        queue = np.zeros((2, cap), np.int32)
        h = (cap - n) // 2
        queue[0, h : h + n] = np.arange(n)
        ctl[K.P_HEAD], ctl[K.P_TAIL], ctl[K.FREE] = h, h + n, n
        # Per request: its indexed blocks' first and last block (block ids).
        self._X = np.full((len(reqs.status), K.N_XCOLS), -1, np.int32)
        # Block tables: a row per running request, as wide as the most blocks a submitted request
        # can hold (it widens as longer requests come).
        self._tables = np.zeros((seats, 16), np.int32)
        self._rows = np.arange(seats, dtype=np.int32)
        ctl[K.ROWS_FREE] = seats
        self._fifo = np.zeros(max(64, 2 * seats), np.int64)
        conf = np.zeros(K.N_CFG, np.int64)
        conf[K.MAX_SEQS] = cfg.max_num_seqs
        conf[K.BUDGET] = cfg.max_num_batched_tokens
        conf[K.BS] = cfg.block_size
        conf[K.CACHING] = cfg.enable_prefix_caching
        conf[K.THR] = cfg.long_prefill_token_threshold
        conf[K.FULL_PROMPT] = cfg.admission == "full_prompt"
        conf[K.STAGE_CAP] = log._STAGE
        conf[K.ITL_BINS] = ITL_BINS
        conf[K.MAX_STEPS] = self.max_steps
        conf[K.STALL_STEPS] = self.stall_steps
        self._conf = conf
        self._fctl = np.zeros(4)  # now, the next SimPy event's time; the time the kernel returns; the last update's
        self._B, self._queue = B, queue
        self._cp = np.concatenate([cost_params(cost), [ITL_LO, ITL_PER_DECADE]])
        self._buf = np.zeros((2, n), np.int64)  # a released table's blocks, head- and tail-bound
        self._hits = np.zeros(n + 1, np.int64)  # a lookup's cached blocks
        # The running list as slots (compiled.S_*): the fields every step touches, side by side.
        # Twice the seats: finished requests leave holes until a quarter of the slots are holes.
        self._slots = (np.zeros((2 * seats, K.N_SCOLS), np.int64), np.zeros(2 * seats))
        # Slot marks, 64 to a word: explicit slots, then a bucket per step for the lazy ones.
        self._bits = np.zeros((1 + cfg.block_size + 2, (2 * seats + 63) // 64), np.uint64)
        self._fin = np.zeros(2 * seats, np.int64)  # finished requests to notify
        self._widest = self._tables.shape[1] * cfg.block_size + 1  # the longest prompt + max_tokens the rows hold

    # ---- submissions --------------------------------------------------------------------------
    def _enqueue(self, rid: int, total: int) -> None:
        # The kernel queues the requests submitted since its last call itself (ids from ctl IN_NEXT
        # up to the table's count, skipping rejected ones); here only the block tables may widen.
        if total > self._widest:
            self._widen(total)

    def _widen(self, total: int) -> None:
        """Widen the block-table rows for a request of ``total`` tokens (it holds blocks for all but
        its last token)."""
        bs, old = self.sched.cfg.block_size, self._tables
        width = max((total - 1 + bs - 1) // bs, 2 * old.shape[1])
        self._tables = np.zeros((old.shape[0], width), np.int32)
        self._tables[:, : old.shape[1]] = old
        self._widest = width * bs + 1

    def _make_room(self, n: int) -> None:
        """Grow the per-request rows and the waiting ring for ``n`` requests submitted (before the
        kernel queues those that are new)."""
        ctl = self._ctl
        if n > len(self._X):  # as many rows as the request tables have
            X = np.full((max(len(self.reqs.status), n), K.N_XCOLS), -1, np.int32)
            X[: len(self._X)] = self._X
            self._X = X
        q, cap = self._fifo, len(self._fifo)
        head, k = int(ctl[K.Q_HEAD]), int(ctl[K.Q_LEN])
        need = k + n - int(ctl[K.IN_NEXT]) + self.sched.cfg.max_num_seqs + 1  # every running request may come back
        if need > cap:
            grown = np.zeros(max(2 * cap, 2 * need), np.int64)
            grown[:k] = q[(head + np.arange(k)) % cap]
            self._fifo = grown
            ctl[K.Q_HEAD] = 0

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self):
        env, ctl, fctl, log, conf = self.env, self._ctl, self._fctl, self.log, self._conf
        B, queue, cp, buf, hits, fin, rows = self._B, self._queue, self._cp, self._buf, self._hits, self._fin, self._rows
        bits = self._bits
        SI, SF = self._slots
        stage, hist = log._stage, log.itl_hist
        R = self.reqs
        cap = -1
        while True:
            n = R.n
            if n > ctl[K.IN_NEXT]:
                self._make_room(n)
                ctl[K.IN_END] = n
            elif not ctl[K.PENDING] and not ctl[K.N_RUN] and not ctl[K.Q_LEN]:
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            if R._cap != cap:  # the request tables were re-allocated (they grow by doubling)
                cap, T = R._cap, R.tables
                RI, RF, P32, S8 = T[np.int64], T[np.float64], T[np.int32], R.status
            now = env.now
            fctl[0] = now
            fctl[1] = env.peek()
            conf[K.WAITERS] = 1 if self._events else 0
            code = K.advance(RI, RF, SI, SF, P32, S8, B, self._X, self._tables, rows, queue, ctl, conf, cp, buf,
                             hits, bits, self._fifo, stage, hist, fin, fctl)
            t = float(fctl[2])
            c = ctl.tolist()
            # The log and the step count as they stand once the steps applied so far have ended
            # (if the run stops during the step in flight, that step is not counted, as in Engine).
            self.num_steps = log.n = c[K.ROWS]
            log._ns, log.itl_count = c[K.STAGE_N], c[K.ITL_N]
            fin_now, fin_later = c[K.FIN_NOW], c[K.FIN_LATER]
            if code == K.STEPPED:
                # Finishes inside the call (only without waiters: counted, nobody to wake).
                fin_now += fin_later
                fin_later = 0
            if fin_now:
                self._finished(fin, 0, fin_now)
            if code == K.STEPPED or t != now:
                yield TimeoutAt(env, t)
            if fin_later:
                self._finished(fin, fin_now, fin_later)
            if code == K.UNSTAGE:
                log._unstage()
                ctl[K.STAGE_N] = log._ns
            elif code == K.MAX_STEPS_HIT:
                raise self.max_steps_reached()
            elif code == K.STALL:
                raise SimulationStalled(self.diagnose())

    def finish_run(self) -> None:
        """Write the running requests' live values (kept in the kernel's slots) into their records."""
        T = self.reqs.tables
        K.write_back_all(T[np.int64], T[np.float64], *self._slots, self._ctl, self._bits, self._fctl[3])

    def _finished(self, fin: np.ndarray, start: int, k: int) -> None:
        if self._events:
            self._notify(fin[start : start + k])
        else:
            self._count_done(k)

    def queues(self) -> tuple[int, int, int, int]:
        ctl = self._ctl
        new = self.reqs.status[int(ctl[K.IN_NEXT]) : self.reqs.n]
        return int(ctl[K.N_RUN]), int(ctl[K.Q_LEN]) + int(np.count_nonzero(new == WAITING)), 0, int(ctl[K.FREE])
