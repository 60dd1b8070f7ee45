"""The API server's intake in the compiled step (``simulator.engine.host``): the pieces of intake
waiting for the server, a heap ordered by (ready time, request), and the requests on their way to
the engine, a queue in the order their intake ended (so in time order).

The intake runs lazily: ``intake_run(st, until)`` starts, in order, every piece that can start by
``until``, with the output batches as they stand (a batch is queued only at a step's end, and the
step calls it up to each step's end before queueing one). A server that turned to a piece and chose
to wait for its outputs looks again only when that wait is over (``FE_TURN``), at the batches queued
by then, as an event loop would. So running the intake in larger or smaller strides gives the same
times, and ``advance`` may run it up to the next step or the next outside event, whichever comes
first, and never further.
"""

from __future__ import annotations

import math

from simulator.engine.compiled.layout import (
    F_READY,
    FE_BATCH,
    FE_FREE,
    FE_INTAKE,
    FE_TURN,
    I_PROMPT,
    IQ_N,
    RQ_HEAD,
    RQ_LEN,
)
from simulator.engine.host import after_intake, intake_passes, intake_start, reaches_engine
from simulator.engine.params import P

COLD = ()


def _before(st, i, j):
    """Whether heap entry ``i`` comes before ``j``: the earlier ready, then the lower request id."""
    a, b = st.iq[i, 0], st.iq[j, 0]
    return a < b or (a == b and st.iqr[i] < st.iqr[j])


def _swap(st, i, j):
    for c in range(3):
        st.iq[i, c], st.iq[j, c] = st.iq[j, c], st.iq[i, c]
    st.iqr[i], st.iqr[j] = st.iqr[j], st.iqr[i]


def _push(st, rid, ready, work, rest):
    """Queue a piece of ``work`` seconds of request ``rid``, ready at ``ready``, ``rest`` seconds
    of intake after it (0: its last)."""
    i = st.ctl[IQ_N]
    st.ctl[IQ_N] = i + 1
    st.iq[i, 0], st.iq[i, 1], st.iq[i, 2] = ready, work, rest
    st.iqr[i] = rid
    while i > 0:
        parent = (i - 1) // 2
        if not _before(st, i, parent):
            break
        _swap(st, i, parent)
        i = parent


def _pop(st):
    """Take the first piece off the heap (its fields are then at the old last index)."""
    n = st.ctl[IQ_N] - 1
    st.ctl[IQ_N] = n
    _swap(st, 0, n)
    i = 0
    while True:
        k = 2 * i + 1
        if k >= n:
            break
        if k + 1 < n and _before(st, k + 1, k):
            k += 1
        if not _before(st, k, i):
            break
        _swap(st, i, k)
        i = k
    return n


def _reach(st, rid, at):
    """Request ``rid`` reaches the engine at ``at`` (after those queued before it)."""
    cap = st.rq.shape[0]
    k = (st.ctl[RQ_HEAD] + st.ctl[RQ_LEN]) % cap
    st.rq[k] = at
    st.rqr[k] = rid
    st.ctl[RQ_LEN] += 1


def intake_submit(st, rid):
    """A request sent by its client: its first piece of intake queued at its ready time (straight on
    its way to the engine without an API server)."""
    ready = st.req_f64[rid, F_READY]
    first, rest = intake_passes(st.cp, st.req_i64[rid, I_PROMPT])
    if st.cp[P.FE_ON] == 0.0:
        _reach(st, rid, ready)
    else:
        _push(st, rid, ready, first, rest)


def _turn(st):
    """When the API server turns to the first queued piece: once it is ready, the piece before it
    is done, and any wait for the outputs it chose is over."""
    return max(st.iq[0, 0], st.fctl[FE_INTAKE], st.fctl[FE_TURN])


def _next_start(st):
    """When the first queued piece can start, with the outputs as they stand."""
    return intake_start(_turn(st), st.fctl[FE_INTAKE], st.fctl[FE_FREE], st.fctl[FE_BATCH])


def intake_run(st, until):
    """Start every piece of intake that can start by ``until``, in order; a request's last piece
    sends it on its way to the engine."""
    fctl = st.fctl
    while st.ctl[IQ_N] > 0:
        turn = _turn(st)
        start = intake_start(turn, fctl[FE_INTAKE], fctl[FE_FREE], fctl[FE_BATCH])
        if start > until:
            if turn <= until:  # it turned to it, and waits for its outputs: it
                fctl[FE_TURN] = start  # looks again then, at the outputs queued by then
            return
        k = _pop(st)
        rid, work, rest = st.iqr[k], st.iq[k, 1], st.iq[k, 2]
        end = start + work
        fctl[FE_FREE], fctl[FE_BATCH] = after_intake(fctl[FE_FREE], fctl[FE_BATCH], start, work)
        fctl[FE_INTAKE] = end
        if rest > 0.0:
            _push(st, rid, end, rest, 0.0)
        else:
            _reach(st, rid, reaches_engine(st.cp, end))


def next_intake_event(st):
    """When the intake next moves on its own: the first request on its way reaches the engine, or
    the first queued piece starts (infinity: nothing in the API server)."""
    t = math.inf
    if st.ctl[RQ_LEN] > 0:
        t = st.rq[st.ctl[RQ_HEAD]]
    if st.ctl[IQ_N] > 0:
        t = min(t, _next_start(st))
    return t


def reached_by(st, t):
    """Whether the first request on its way reaches the engine by ``t``."""
    return st.ctl[RQ_LEN] > 0 and st.rq[st.ctl[RQ_HEAD]] <= t


def take_reached(st):
    """The first request on its way (``reached_by`` said it has come): its id, and the time it came."""
    h = st.ctl[RQ_HEAD]
    rid, at = st.rqr[h], st.rq[h]
    st.ctl[RQ_HEAD] = (h + 1) % st.rq.shape[0]
    st.ctl[RQ_LEN] -= 1
    return rid, at
