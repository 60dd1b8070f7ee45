"""Closed-loop clients whose turns the compiled step runs itself (``CompiledEngine.run_turns``).

A closed loop of clients that send their next request as soon as they learn that their last one
ended (``workloads.arrivals.closed_loop`` without think time or client latency, the workload's only
source) needs nothing from outside the engine between two of its requests. So the step tells these
clients itself, at the times their completion callbacks would have run, and sends their next
requests, whose shapes the workload drew ahead in the order it would have drawn them (``shp``). The
call then runs on through the steps that end requests instead of returning at each one; the run is
the one the clients' own turns give, request for request (tests/test_workloads.py).

When a client learns of its request's end: at the request's finish time (``F_FIN``: behind a busy API
server, after its step's end), or when the end is reported if that is later (a request aborted when
its step was scheduled is reported at the step's end). The requests that one call of the engine
would have reported together (a batch: a step's ends and the rejections at the next step's start)
and that reach their clients at one time are one completion callback (``Engine._notify``): they are
counted, then their clients send, in the order the requests ended. Callbacks run in time order,
those of one time in the order of their batches, before the engine's next step starts or ends at
that time and before anything outside the engine happens at a later time: within a call
(``update.advance``), or, for those due before the engine's next call, at their own time between
calls (``CompiledEngine._tell``). A client's next request is ready for the API server a turnaround
after its last one ended (``host.turnaround``).
"""

from __future__ import annotations

import math

from simulator.engine.compiled.layout import (
    CL_BASE,
    CL_N,
    DONE_TOLD,
    F_ARR,
    F_FIN,
    F_READY,
    I32_PRIO,
    I_CKEY,
    I_CLASS,
    I_CLIENT,
    I_GLEN,
    I_GROUP,
    I_LORA,
    I_MAXT,
    I_NTOK,
    I_PROMPT,
    LIVELOCK,
    LIVELOCK_AT,
    PD_N,
    PD_SEQ,
    REJ_K,
    REJ_RID,
    REJ_T,
    REQ_N,
    SENT,
    SH_CLASS,
    SH_GLEN,
    SH_GROUP,
    SH_LORA,
    SH_MAXT,
    SH_NEXT,
    SH_PRIO,
    SH_PROMPT,
)
from simulator.engine.host import turnaround
from simulator.engine.rules import RequestStatus

COLD = ("tell",)  # not inlined (see build.py)


def pend(st, rid, t):
    """Request ``rid`` ended, reported at ``t``: its client is to be told at its finish time, or
    then if that is earlier (an aborted request ended when its step was scheduled), with this
    batch's others."""
    i = st.ctl[PD_N]
    st.pd[i] = max(st.req_f64[rid, F_FIN], t)
    st.pdr[i, 0] = rid
    st.pdr[i, 1] = st.ctl[PD_SEQ]
    st.ctl[PD_N] = i + 1


def first_told(st):
    """When the next client is told (infinity: none to tell)."""
    t = math.inf
    for i in range(st.ctl[PD_N]):
        t = min(t, st.pd[i])
    return t


def _in(st, i, d, seq):
    """Whether pending entry ``i`` belongs to the callback of time ``d`` and batch ``seq``."""
    return st.pd[i] == d and st.pdr[i, 1] == seq


def tell(st, limit):
    """Run the completion callbacks due by ``limit``, in order. Returns ``LIVELOCK`` when a run of
    rejections at one time has reached the limit (else 0). (Also called between the step's calls,
    by ``CompiledEngine``, for the callbacks due before its next call.)"""
    ctl = st.ctl
    while ctl[PD_N] > 0:
        n = ctl[PD_N]
        d, seq = math.inf, 0
        for i in range(n):  # the first callback: the earliest time, then the earliest batch
            if st.pd[i] < d or (st.pd[i] == d and st.pdr[i, 1] < seq):
                d, seq = st.pd[i], st.pdr[i, 1]
        if d > limit:
            return 0
        ended = 0
        for i in range(n):
            if _in(st, i, d, seq):
                ended += 1
                rid = st.pdr[i, 0]
                if st.status[rid] == RequestStatus.REJECTED:  # as Engine._check_livelock counts them
                    ctl[REJ_K] = ctl[REJ_K] + 1 if st.fctl[REJ_T] == d else 1
                    st.fctl[REJ_T] = d
                    if ctl[REJ_K] >= st.cfg[LIVELOCK_AT]:
                        ctl[REJ_RID] = rid
                        return LIVELOCK
        ctl[DONE_TOLD] += ended
        kept = 0
        for i in range(n):
            if _in(st, i, d, seq):
                rid = st.pdr[i, 0]
                client = st.req_i64[rid, I_CLIENT]
                if st.cfg[CL_BASE] <= client < st.cfg[CL_BASE] + st.cfg[CL_N]:
                    _send(st, client, d, st.req_f64[rid, F_FIN])
            else:
                st.pd[kept] = st.pd[i]
                st.pdr[kept, 0], st.pdr[kept, 1] = st.pdr[i, 0], st.pdr[i, 1]
                kept += 1
        ctl[PD_N] = kept
    return 0


def _send(st, client, sent, previous_end):
    """``client`` sends its next request at ``sent``, as ``Engine._add`` records one: ready for the
    API server a turnaround after its previous one ended, with the requests in flight now; its
    record the fields ``RequestTable.add`` writes (tests/test_workloads.py compares every column of
    a run whose turns the engine's callbacks run)."""
    ctl = st.ctl
    k = ctl[SH_NEXT]
    ctl[SH_NEXT] = k + 1
    rid = ctl[REQ_N]
    ready = max(sent, turnaround(st.cp, previous_end, rid - ctl[DONE_TOLD]))
    ctl[REQ_N] = rid + 1  # its intake starts as a submission's does (update.advance)
    ctl[SENT] += 1
    shape, f, i = st.shp, st.req_f64, st.req_i64
    f[rid, F_ARR] = sent
    f[rid, F_READY] = ready
    i[rid, I_PROMPT] = shape[k, SH_PROMPT]
    i[rid, I_NTOK] = shape[k, SH_PROMPT]
    i[rid, I_MAXT] = shape[k, SH_MAXT]
    i[rid, I_CKEY] = rid
    i[rid, I_GROUP] = shape[k, SH_GROUP]
    i[rid, I_GLEN] = shape[k, SH_GLEN]
    i[rid, I_CLIENT] = client
    i[rid, I_CLASS] = shape[k, SH_CLASS]
    i[rid, I_LORA] = shape[k, SH_LORA]
    st.req_i32[rid, I32_PRIO] = shape[k, SH_PRIO]
