"""The compiled engine: the SimPy process that calls the compiled step (``simulator/engine/compiled``).

One call of ``advance`` finishes the step in flight and runs steps until something outside the
engine could intervene; the process then yields until the time the call returns (a step's end, an
arrival) and notifies the clients whose requests ended. The state is a ``layout.State`` of numpy
arrays that this class builds and grows (more requests, longer requests, more prefix groups).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import cast

import numpy as np
import simpy

from simulator.engine import compiled, host_tier
from simulator.engine.compiled import layout as L
from simulator.engine.compiled.state import new_state
from simulator.engine.core import Engine, SimulationStalled
from simulator.engine.requests import RequestTable
from simulator.engine.rules import RequestStatus, SchedulerConfig, cdiv
from simulator.engine.simtime import StepEnd, TimeoutAt, horizon


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
        self.st = new_state(cfg, self.num_blocks, cost.params, reqs, self.log, self.max_steps, self.stall_steps, trace)
        self._trace: list[np.ndarray] = []
        self._cap = reqs._cap
        self._keys: dict[int, int] = {}  # session content key -> its first request (the key's id)
        self._widest = self.st.tables.shape[1] * cfg.block_size + 1  # the longest prompt + max_tokens rows hold
        self._coming: deque[tuple[float, int]] = deque()  # (time, id) of requests on their way in

    # ---- arrivals through the front-end ---------------------------------------------------------
    # The front-end is first come first served: requests reach the engine in id order, so those on
    # their way in are a queue that the loop takes in when their time has come (instead of one SimPy
    # event each); the steps a call runs stop at the next one's time, as at any other event.
    def _reach(self, rid: int, at: float) -> None:
        coming = self._coming
        if at == self.env.now and not coming:
            self._arrive(rid)
            return
        if self._too_long(rid):  # its client learns of the rejection at its time: by an event
            TimeoutAt(self.env, at).callbacks.append(
                cast("Callable[[simpy.Event], None]", lambda _e, rid=rid: self._reject_due(rid))
            )
        coming.append((at, rid))
        if self._wake is not None and len(coming) == 1:  # idle: wake when it comes
            TimeoutAt(self.env, at).callbacks.append(self._wake_up)

    def _reject_due(self, rid: int) -> None:
        if self.reqs.status[rid] == RequestStatus.WAITING:
            self._reject(rid)

    def _wake_up(self, _event) -> None:
        if self._wake is not None and not self._wake.triggered:
            self._wake.succeed()

    def _take_arrivals(self, now: float) -> None:
        """Those on their way in whose time has come reach the engine, in order."""
        coming, status = self._coming, self.reqs.status
        while coming and coming[0][0] <= now:
            rid = coming.popleft()[1]
            self.num_arrived += 1
            if status[rid] == RequestStatus.WAITING:  # else rejected already, by its event
                if self._too_long(rid):
                    self._reject(rid)
                else:
                    self._accept(rid)

    # ---- submissions --------------------------------------------------------------------------
    def _enqueue(self, rid: int, total: int, group: int, content_key: int) -> None:
        # The compiled step queues the requests submitted since its last call itself (ids from ctl IN_NEXT
        # on, skipping rejected ones); here only the state grows where a request needs it.
        total += self.cfg.spec_tokens + self.cfg.spec_lookahead  # a verifying request's drafts and lookahead
        if total > self._widest:
            self._widen(total)
        if group >= len(self.st.groups):
            n = max(2 * len(self.st.groups), group + 1)
            self.st = self.st._replace(groups=_grown(self.st.groups, n), host_grp=_grown(self.st.host_grp, n))
        if content_key >= 0:  # a session's turn: its own content is the session's
            key = self._keys.setdefault(content_key, rid)
            if key != rid:
                self._grow_requests(rid + 1)
                self.st.req_extra[rid, L.X_KEY] = key

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
        """Room for the ``n`` requests submitted so far, before the compiled step queues the new ones."""
        self._grow_requests(n)
        st = self.st
        ctl = st.ctl
        need = int(ctl[L.WQ_LEN]) + n - int(ctl[L.IN_NEXT]) + self.cfg.max_num_seqs + 1  # all running may come back
        if need > len(st.wq):
            k = max(2 * len(st.wq), need)
            wq, wk, wa = np.zeros(k, np.int64), np.zeros((k, 2), np.int64), np.zeros(k)
            wq[: len(st.wq)], wk[: len(st.wq)], wa[: len(st.wq)] = st.wq, st.wk, st.wa
            self.st = st._replace(wq=wq, wk=wk, wa=wa)

    # ---- the loop -----------------------------------------------------------------------------
    def _loop(self):
        env, log = self.env, self.log
        advance = self.fns.advance
        coming = self._coming
        while True:
            now = env.now
            if coming:
                self._take_arrivals(now)
            st = self.st
            ctl, fctl = st.ctl, st.fctl
            n = self.num_arrived
            if n > ctl[L.IN_NEXT]:
                self._make_room(n)
                ctl[L.IN_END] = n
            elif not ctl[L.PENDING] and not ctl[L.N_RUN] and not ctl[L.WQ_LEN] and not ctl[L.SW_LEN]:
                self._wake = env.event()
                if coming:
                    TimeoutAt(env, coming[0][0]).callbacks.append(self._wake_up)
                yield self._wake
                self._wake = None
                continue
            self._sync_tables()
            st = self.st
            fctl[L.T_NOW] = now
            # Until something outside may act on the engine: the next event, or in a fleet whose
            # arrivals are independent of earlier ends, the next event that is not another replica's.
            peek = horizon(env, self) if self.independent else env.peek()
            fctl[L.T_PEEK] = min(peek, coming[0][0]) if coming else peek
            # Ended requests are reported at their time when someone waits for them, or when they
            # end the run (it stops once the expected number have ended); otherwise only counted.
            st.cfg[L.WAITERS] = 1 if self._events else 0
            ctl[L.STOP_AFTER] = -1 if self.expected is None else self.expected - self.num_done
            code = advance(st)
            t = float(fctl[L.T_RET])
            if self.progress is not None:
                self.progress(t, self.num_done)
            c = ctl.tolist()
            # The log and the step count as they stand once the steps applied so far have ended
            # (if the run stops during the step in flight, that step is not counted).
            self.num_steps = log.n = c[L.ROWS]
            log._ns, log.itl_count = c[L.STAGE_N], c[L.ITL_N]
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
        if self._events:
            return self._notify(self.st.fin[:k].tolist())
        self._count_done_at(k, float(self.st.fctl[L.T_LAST]))
        return False

    @property
    def _fe_free(self) -> float:
        return float(self.st.fctl[L.FE_FREE])

    @_fe_free.setter
    def _fe_free(self, t: float) -> None:
        self.st.fctl[L.FE_FREE] = t

    @property
    def _fe_batch(self) -> float:
        return float(self.st.fctl[L.FE_BATCH])

    @_fe_batch.setter
    def _fe_batch(self, t: float) -> None:
        self.st.fctl[L.FE_BATCH] = t

    @Engine._intake_busy.setter  # type: ignore[attr-defined]  # mypy: no .setter on an inherited property
    def _intake_busy(self, t: float) -> None:
        self._intake_end = self.st.fctl[L.FE_INTAKE] = t

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
        super().finish_run()

    def _new_adapter(self, adapter: int) -> None:
        run = self.st.lora_running
        if adapter >= len(run):
            grown = np.zeros(max(2 * len(run), adapter + 1), np.int64)
            grown[: len(run)] = run
            self.st = self.st._replace(lora_running=grown)

    def lora_counts(self) -> list[int]:
        return [int(self.st.ctl[L.LORA_LOADS]), int(self.st.ctl[L.LORA_DISK_LOADS])]

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
        new = self.reqs.status[int(ctl[L.IN_NEXT]) : self.num_arrived]  # not those still in the front-end
        waiting = int(ctl[L.WQ_LEN]) + int(np.count_nonzero(new == RequestStatus.WAITING))
        now = self.env.now
        for at, rid in self._coming:  # their time has come, the loop has not yet taken them in
            if at > now:
                break
            waiting += self.reqs.status[rid] == RequestStatus.WAITING and not self._too_long(rid)
        return int(ctl[L.N_RUN]), waiting, int(ctl[L.SW_LEN]), int(ctl[L.FREE])


def _grown(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` (int64, -1 for nothing) with ``rows`` rows, the new ones -1."""
    out = np.full((rows, a.shape[1]), -1, np.int64)
    out[: len(a)] = a
    return out
