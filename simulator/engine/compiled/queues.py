"""The waiting queue and the swapped queue of the compiled step.

Waiting: a binary heap of requests (``st.wq``) keyed by (priority, arrival, insertion) as vLLM's
priority queue is (SGLang's longest-output-first: -max_tokens, 0, insertion); under FCFS the first two are 0 and insertion counts up for requests joining the
back and down for requests put back at the front (a preempted request), which orders the heap
exactly as the reference's deque. Swapped: a ring in the order requests went out.
"""

from __future__ import annotations

from simulator.engine.compiled.layout import (
    F_ARR,
    I32_PRIO,
    I_MAXT,
    PRIORITY,
    SEQ_BACK,
    SEQ_FRONT,
    SW_HEAD,
    SW_LEN,
    WQ_LEN,
)
from simulator.engine.rules import queued_before

COLD = ()  # not inlined (see build.py)


def _before(st, i, j):
    """Whether heap entry ``i`` comes before entry ``j``."""
    wk, wa = st.wk, st.wa
    return queued_before(wk[i, 0], wa[i], wk[i, 1], wk[j, 0], wa[j], wk[j, 1])


def _put(st, dst, src):
    st.wq[dst] = st.wq[src]
    st.wk[dst, 0] = st.wk[src, 0]
    st.wk[dst, 1] = st.wk[src, 1]
    st.wa[dst] = st.wa[src]


def wq_push(st, rid, front):
    """Queue ``rid``: at its place by priority, or (FCFS) at the back or, if ``front``, the front."""
    ctl = st.ctl
    if st.cfg[PRIORITY] == 1:  # a request goes back to its own place (rules.queued_before)
        prio, arrival, seq = st.req_i32[rid, I32_PRIO], st.req_f64[rid, F_ARR], rid
    elif st.cfg[PRIORITY] == 2:  # longest output first, then insertion (SGLang's lof)
        prio, arrival = -st.req_i64[rid, I_MAXT], 0.0
        ctl[SEQ_BACK] += 1
        seq = ctl[SEQ_BACK]
    else:
        prio, arrival = 0, 0.0
        if front:
            ctl[SEQ_FRONT] += 1
            seq = -ctl[SEQ_FRONT]
        else:
            ctl[SEQ_BACK] += 1
            seq = ctl[SEQ_BACK]
    wq_insert(st, rid, prio, seq, arrival)


def wq_insert(st, rid, prio, seq, arrival):
    """Put ``rid`` into the heap with its key (priority, insertion, arrival)."""
    ctl = st.ctl
    # Sift up from a new last entry (the free slot at ``n`` holds the new key for comparisons).
    n = ctl[WQ_LEN]
    ctl[WQ_LEN] = n + 1
    st.wq[n] = rid
    st.wk[n, 0] = prio
    st.wk[n, 1] = seq
    st.wa[n] = arrival
    i = n
    while i > 0:
        p = (i - 1) // 2
        if not _before(st, i, p):
            break
        _swap(st, i, p)
        i = p


def _swap(st, i, j):
    wq, wk, wa = st.wq, st.wk, st.wa
    wq[i], wq[j] = wq[j], wq[i]
    a0, a1 = wk[i, 0], wk[i, 1]
    wk[i, 0] = wk[j, 0]
    wk[i, 1] = wk[j, 1]
    wk[j, 0] = a0
    wk[j, 1] = a1
    wa[i], wa[j] = wa[j], wa[i]


def wq_peek(st):
    return st.wq[0]


def wq_pop(st):
    """Take the first waiting request off the heap."""
    ctl = st.ctl
    rid = st.wq[0]
    n = ctl[WQ_LEN] - 1
    ctl[WQ_LEN] = n
    if n > 0:
        _put(st, 0, n)
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and _before(st, c + 1, c):
                c += 1
            if not _before(st, c, i):
                break
            _swap(st, i, c)
            i = c
    return rid


def wq_set_aside(st, k):
    """Take the first waiting request off the heap and keep it, with its key, as the ``k``-th set
    aside in this step: at the far end of the heap's arrays, which the heap (only shrinking while
    requests are admitted, and holding with them no more than the arrays hold) does not reach."""
    wq, wk, wa = st.wq, st.wk, st.wa
    rid, prio, seq, arrival = wq[0], wk[0, 0], wk[0, 1], wa[0]
    wq_pop(st)
    top = wq.shape[0] - 1 - k
    wq[top] = rid
    wk[top, 0] = prio
    wk[top, 1] = seq
    wa[top] = arrival


def wq_restore(st, n):
    """Put the ``n`` requests set aside back into the heap with their keys (their places). The last
    set aside first: the heap grows towards them from below, and reaches only those already back."""
    for k in range(n - 1, -1, -1):
        top = st.wq.shape[0] - 1 - k
        wq_insert(st, st.wq[top], st.wk[top, 0], st.wk[top, 1], st.wa[top])


def sw_push(st, rid):
    cap = st.swq.shape[0]
    st.swq[(st.ctl[SW_HEAD] + st.ctl[SW_LEN]) % cap] = rid
    st.ctl[SW_LEN] += 1


def sw_peek(st):
    return st.swq[st.ctl[SW_HEAD]]


def sw_pop(st):
    rid = st.swq[st.ctl[SW_HEAD]]
    st.ctl[SW_HEAD] = (st.ctl[SW_HEAD] + 1) % st.swq.shape[0]
    st.ctl[SW_LEN] -= 1
    return rid
