"""The compiled engine: the SimPy process that calls the compiled step (``simulator/engine/compiled``).

One call of ``advance`` finishes the step in flight and runs steps until something outside the
engine could intervene; the process then yields until the time the call returns (a step's end, an
arrival) and notifies the clients whose requests ended. The state is a ``layout.State`` of numpy
arrays that this class builds and grows (more requests, longer requests, more prefix groups).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from simulator.engine import compiled, host_tier
from simulator.engine.compiled import layout as L
from simulator.engine.compiled.state import new_state
from simulator.engine.core import REJECT_LIVELOCK, Engine, SimulationStalled
from simulator.engine.requests import RequestTable
from simulator.engine.rules import SchedulerConfig, cdiv
from simulator.engine.simtime import StepEnd, TimeoutAt, horizon
from simulator.engine.submission import DrawAhead

# Shapes drawn ahead at a time for a closed loop run by the step (at least two for each client).
_AHEAD = 1024


class CompiledEngine(Engine):
    def __init__(
        self,
        env: simpy.Environment,
        cfg: SchedulerConfig,
        num_gpu_blocks: int,
        cost,
        reqs: RequestTable,
        trace: int = 0,
        **kw,
    ) -> None:
        self.fns = compiled.load()
        super().__init__(env, cfg, num_gpu_blocks, cost, reqs, **kw)
        self.st = new_state(
            cfg, self.num_blocks, cost.params, reqs, self.log, self.max_steps, self.stall_steps, trace, self._longest
        )
        self._trace: list[np.ndarray] = []
        self._cap = reqs._cap
        self._keys: dict[int, int] = {}  # session content key -> its first request (the key's id)
        self._widest = self.st.tables.shape[1] * cfg.block_size + 1  # the longest prompt + max_tokens rows hold
        self._source: DrawAhead | None = None  # the closed loop whose turns the step runs (run_turns)
        self._clients = 0
        self._next_call = 0.0  # when the step is next called (at the latest)
        self._tells: set[float] = set()  # when callbacks of that loop are due between calls (_tell)

    # ---- submissions --------------------------------------------------------------------------
    def _enqueue(self, rid: int, total: int, group: int, content_key: int) -> None:
        # The compiled step starts the intake of the requests sent since its last call itself (ids
        # from ctl IN_NEXT on); here only the state grows where a request needs it.
        self._room_for(total, group)
        if content_key >= 0:  # a session's turn: its own content is the session's
            key = self._keys.setdefault(content_key, rid)
            if key != rid:
                self._grow_requests(rid + 1)
                self.st.req_extra[rid, L.X_KEY] = key

    def _room_for(self, total: int, group: int) -> None:
        """Grow the state for a request of ``total`` tokens (prompt + max_tokens) in prefix group
        ``group``. A request longer than the engine takes is rejected when it reaches it (update.py,
        LONGEST): no block-table row for it."""
        accepted = not self._rejects(total)
        total += self.cfg.spec_tokens + self.cfg.spec_lookahead  # a verifying request's drafts and lookahead
        if accepted and total > self._widest:
            self._widen(total)
        if group >= len(self.st.groups):
            n = max(2 * len(self.st.groups), group + 1)
            self.st = self.st._replace(groups=_grown(self.st.groups, n), host_grp=_grown(self.st.host_grp, n))

    # ---- closed-loop clients whose turns the step runs (compiled/clients.py) ----------------------------
    def run_turns(self, clients: range, source: DrawAhead) -> Callable[[list[int]], None] | None:
        if self._source is not None or self._events or self.reqs.n:  # one loop, the only source, from the start
            return None
        self._source, self._clients = source, len(clients)
        cfg = self.st.cfg
        cfg[L.CLOOP], cfg[L.CL_BASE], cfg[L.CL_N], cfg[L.LIVELOCK_AT] = 1, clients.start, len(clients), REJECT_LIVELOCK
        # An ended request waits to be told until its client learns of it: one a client at most.
        self.st = self.st._replace(pd=np.zeros(len(clients) + 1), pdr=np.zeros((len(clients) + 1, 2), np.int64))
        return self._send_first

    def _send_first(self, clients: list[int]) -> None:
        """The clients' first requests, sent now (their next ones the step sends itself)."""
        self._draw(len(clients))
        ctl, shp = self.st.ctl, self.st.shp
        k = int(ctl[L.SH_NEXT])
        ctl[L.SH_NEXT] = k + len(clients)
        rows = shp[k : k + len(clients), : L.SH_TRUNC].tolist()
        self.submit_rows(
            [(p, o, g, glen, prio, -1, c, cls, lora) for c, (p, o, g, glen, prio, cls, lora) in zip(clients, rows)]
        )

    def _draw(self, need: int) -> None:
        """At least ``need`` shapes drawn ahead and not yet used (their room in the state made)."""
        ctl, shp = self.st.ctl, self.st.shp
        start, end = int(ctl[L.SH_NEXT]), int(ctl[L.SH_END])
        if end - start >= need:
            return
        assert self._source is not None  # only a loop run here draws
        k = max(need, 2 * self._clients, _AHEAD) - (end - start)
        drawn = np.array(self._source.rows_ahead(k), np.int64).reshape(k, L.N_SH)
        out = shp if len(shp) >= end - start + k else np.zeros((end - start + k, L.N_SH), np.int64)
        out[: end - start] = shp[start:end]
        out[end - start : end - start + k] = drawn
        ctl[L.SH_NEXT], ctl[L.SH_END] = 0, end - start + k
        self.st = self.st._replace(shp=out)
        tokens = drawn[:, L.SH_PROMPT] + drawn[:, L.SH_MAXT]
        taken = tokens[tokens <= self._longest]
        self._room_for(int(taken.max()) if len(taken) else 0, int(drawn[:, L.SH_GROUP].max()))
        for adapter in np.unique(drawn[:, L.SH_LORA]).tolist():
            if adapter >= 0:
                self._new_adapter(adapter)

    def _ready_turns(self) -> None:
        """Before a call: shapes and request rows for what the clients may send in it (the step
        returns REFILL for more), and room in the queues for every client's request."""
        self._draw(self._clients)
        ctl, reqs = self.st.ctl, self.reqs
        left = int(ctl[L.SH_END] - ctl[L.SH_NEXT])
        reqs.reserve(reqs.n + left)
        self._grow_requests(reqs.n + left)
        self._make_room(int(ctl[L.IN_NEXT]) + self._clients)
        ctl[L.REQ_N] = reqs.n
        ctl[L.REQ_CAP] = min(reqs._cap, len(self.st.req_extra), len(self.st.host_own))

    def _tell_later(self) -> None:
        """The loop's clients whose requests reach them before the step's next call are told at
        their time (``_tell``), in their place among the run's other events."""
        st = self.st
        n = int(st.ctl[L.PD_N])
        if n:
            first = float(st.pd[:n].min())
            if first <= self._next_call and first not in self._tells:
                self._tells.add(first)
                TimeoutAt(self.env, first).callbacks.append(self._tell)

    def _tell(self, _event) -> None:
        """The completion callbacks due now, run between two of the step's calls (compiled/clients.py)."""
        if self.env.now not in self._tells:  # the run has stopped with a diagnostic
            return
        self._tells.discard(self.env.now)
        self._ready_turns()
        self._sync_tables()
        st = self.st
        if self.fns.tell(st, self.env.now) != 0:
            raise self._livelock(int(st.ctl[L.REJ_K]), int(st.ctl[L.REJ_RID]), float(st.fctl[L.REJ_T]))
        self.reqs.n = int(st.ctl[L.REQ_N])
        if self._wake is not None and not self._wake.triggered:  # an idle engine looks at what they sent
            self._wake.succeed()
        self._tell_later()

    def _widen(self, total: int) -> None:
        """Widen the block-table rows for a request of ``total`` tokens (its blocks hold all but its last)."""
        bs, old = self.cfg.block_size, self.st.tables
        width = max(cdiv(total - 1, bs), 2 * old.shape[1])
        tables = np.zeros((old.shape[0], width), np.int32)
        tables[:, : old.shape[1]] = old
        self.st = self.st._replace(tables=tables)
        self._widest = width * bs + 1

    def _grow_requests(self, n: int) -> None:
        """Per-request rows for ``n`` requests (as many as the request tables hold)."""
        req_extra = self.st.req_extra
        if n > len(req_extra):
            rows = max(len(self.reqs.status), n)
            grown = _grown(req_extra, rows)
            grown[len(req_extra) :, L.X_SWAPPED] = 0
            self.st = self.st._replace(req_extra=grown, host_own=_grown(self.st.host_own, rows))

    def _make_room(self, n: int) -> None:
        """Room for the ``n`` requests sent so far, before the compiled step takes the new ones in:
        each is in the API server's intake, on its way to the engine, or in the engine's queues."""
        self._grow_requests(n)
        st = self.st
        ctl = st.ctl
        new = n - int(ctl[L.IN_NEXT])
        in_intake = int(ctl[L.IQ_N]) + new
        on_way = int(ctl[L.RQ_LEN]) + in_intake
        need = int(ctl[L.WQ_LEN]) + on_way + self.cfg.max_num_seqs + 1  # all running may come back
        if need > len(st.wq):
            k = max(2 * len(st.wq), need)
            wq, wk, wa = np.zeros(k, np.int64), np.zeros((k, 2), np.int64), np.zeros(k)
            wq[: len(st.wq)], wk[: len(st.wq)], wa[: len(st.wq)] = st.wq, st.wk, st.wa
            st = self.st = st._replace(wq=wq, wk=wk, wa=wa)
            if st.wo.shape[1] > 1:  # a cache-aware policy's scratch: a column per waiting request
                st = self.st = st._replace(wo=np.zeros((st.wo.shape[0], k), np.int64))
        if in_intake > len(st.iqr):
            k = max(2 * len(st.iqr), in_intake)
            iq, iqr = np.zeros((k, 3)), np.zeros(k, np.int64)
            iq[: len(st.iqr)], iqr[: len(st.iqr)] = st.iq, st.iqr
            st = self.st = st._replace(iq=iq, iqr=iqr)
        fin = 2 * (self.cfg.max_num_seqs + 1) + on_way  # two steps' ends, and every request on its way rejected
        if fin > len(st.fin):
            st = self.st = st._replace(fin=np.zeros(max(2 * len(st.fin), fin), np.int64))
        if on_way > len(st.rqr):  # the ring, unrolled from its head
            k, old = max(2 * len(st.rqr), on_way), len(st.rqr)
            order = (int(ctl[L.RQ_HEAD]) + np.arange(int(ctl[L.RQ_LEN]))) % old
            rq, rqr = np.zeros(k), np.zeros(k, np.int64)
            rq[: len(order)], rqr[: len(order)] = st.rq[order], st.rqr[order]
            ctl[L.RQ_HEAD] = 0
            self.st = st._replace(rq=rq, rqr=rqr)

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self):
        env, log, reqs = self.env, self.log, self.reqs
        advance = self.fns.advance
        while True:
            now = env.now
            st = self.st
            ctl, fctl = st.ctl, st.fctl
            n = reqs.n
            if n > ctl[L.IN_NEXT]:
                self._make_room(n)
                self.st.ctl[L.IN_END] = n
            if self._source is not None:
                self._ready_turns()
            self._sync_tables()
            st = self.st
            ctl, fctl = st.ctl, st.fctl
            fctl[L.T_NOW] = now
            # Until something outside may act on the engine: the next event, or in a fleet whose
            # arrivals are independent of earlier ends, the next event that is not another replica's.
            fctl[L.T_PEEK] = horizon(env, self) if self.independent else env.peek()
            # Ended requests are reported at their time when someone waits for them, or when they
            # end the run (it stops once the expected number have ended); otherwise only counted.
            st.cfg[L.WAITERS] = 1 if self._events or (self._turns and self._source is None) else 0
            ctl[L.STOP_AFTER] = -1 if self.expected is None else self.expected - self.num_done
            if self._source is not None and (self._events or self.expected is not None):
                raise RuntimeError("a closed loop run by the step must be the only source of requests")
            code = advance(st)
            if code == L.LIVELOCK:
                self._tells.clear()  # (callbacks already scheduled find nothing to do)
                raise self._livelock(int(ctl[L.REJ_K]), int(ctl[L.REJ_RID]), float(fctl[L.REJ_T]))
            t = float(fctl[L.T_RET])
            if self._source is not None:
                reqs.n = int(ctl[L.REQ_N])
                self._next_call = float(fctl[L.T_WAKE]) if code == L.IDLE_NOW else t
                self._tell_later()
            if self.progress is not None:
                self.progress(t, self.num_done)
            c = ctl.tolist()
            # The log and the step count as they stand once the steps applied so far have ended
            # (if the run stops during the step in flight, that step is not counted).
            self.num_steps = log.n = c[L.ROWS]
            log._ns, log.itl_count = c[L.STAGE_N], c[L.ITL_N]
            if code == L.IDLE_NOW:  # until a request is sent, or the API server's intake moves on
                if c[L.FIN_N]:
                    self._ended(c[L.FIN_N])
                if t != now:
                    yield StepEnd(env, t, self)
                self._wake = env.event()
                wake = float(fctl[L.T_WAKE])
                if wake < float("inf"):
                    TimeoutAt(env, wake).callbacks.append(self._wake_up)
                yield self._wake
                self._wake = None
                continue
            if code == L.NOTIFY:
                if t != now:
                    yield StepEnd(env, t, self)
                if self._ended(c[L.FIN_N]) and self.clients_same_step:
                    yield env.timeout(0)
                continue
            if c[L.FIN_N]:
                self._ended(c[L.FIN_N])
            if code == L.STEPPED or t != now:
                yield StepEnd(env, t, self)
            if code == L.UNSTAGE:
                log._unstage()
                ctl[L.STAGE_N] = log._ns
            elif code == L.UNTRACE:
                self._drain_trace()
            elif code == L.MAX_STEPS_HIT:
                raise self.max_steps_reached()
            elif code == L.STALL:
                raise SimulationStalled(self.diagnose())

    def _wake_up(self, _event) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _drain_trace(self) -> None:
        n = int(self.st.ctl[L.TRACE_N])
        if n:
            self._trace.append(self.st.trace[:n].copy())
            self.st.ctl[L.TRACE_N] = 0

    def trace_events(self) -> np.ndarray:
        """The request events recorded so far: rows of (time, kind, request, value) (``layout.TR_*``)."""
        self._drain_trace()
        return np.concatenate(self._trace) if self._trace else np.zeros((0, 4))

    def _ended(self, k: int) -> bool:
        """Report ``k`` ended requests; whether anybody waiting for them was woken."""
        if self.st.cfg[L.WAITERS]:
            return self._notify(self.st.fin[:k].copy())
        self._count_done_at(k, float(self.st.fctl[L.T_LAST]))
        return False

    def _sync_tables(self) -> None:
        """Point the state at the request tables, if they were re-allocated (they grow by doubling)."""
        R = self.reqs
        if R._cap != self._cap:
            self._cap, T = R._cap, R.tables
            self.st = self.st._replace(req_i64=T[np.int64], req_f64=T[np.float64], req_i32=T[np.int32], status=R.status)

    def finish_run(self) -> None:
        """Write the running requests' live values (kept in the compiled step's slots) into their records."""
        self._sync_tables()
        self.fns.write_back_all(self.st)
        if self._source is not None:  # what was drawn ahead and never sent
            ctl = self.st.ctl
            unsent = self.st.shp[ctl[L.SH_NEXT] : ctl[L.SH_END]]
            self._source.unsent(int(unsent[:, L.SH_TRUNC].sum()), int(unsent[:, L.SH_RESAMPLED].sum()))
            ctl[L.SH_END] = ctl[L.SH_NEXT]
        super().finish_run()

    def _new_adapter(self, adapter: int) -> None:
        run = self.st.lora_running
        if adapter >= len(run):
            grown = np.zeros(max(2 * len(run), adapter + 1), np.int64)
            grown[: len(run)] = run
            self.st = self.st._replace(lora_running=grown)

    def lora_counts(self) -> list[int]:
        return [int(self.st.ctl[L.LORA_LOADS]), int(self.st.ctl[L.LORA_DISK_LOADS])]

    def jit_counts(self) -> tuple[int, float]:
        return int(self.st.ctl[L.JIT_N]), float(self.st.fctl[L.JIT_S])

    def host_counts(self) -> list[int]:
        hc = self.st.host_ctl
        return [int(hc[host_tier.HC_LOADED]), int(hc[host_tier.HC_STORED])]

    def spec_counts(self) -> list[int]:
        ctl = self.st.ctl
        return [int(v) for v in ctl[[L.SPEC_N, L.SPEC_DRAFTS, L.SPEC_ACC]]] + [
            int(v) for v in ctl[L.SPEC_POS : L.SPEC_POS + self.cfg.spec_tokens]
        ]

    def queues(self) -> tuple[int, int, int, int]:
        ctl = self.st.ctl
        return int(ctl[L.N_RUN]), int(ctl[L.WQ_LEN]), int(ctl[L.SW_LEN]), int(ctl[L.FREE])


def _grown(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` (int64, -1 for nothing) with ``rows`` rows, the new ones -1."""
    out = np.full((rows, a.shape[1]), -1, np.int64)
    out[: len(a)] = a
    return out
