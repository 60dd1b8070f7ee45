"""SGLang's scheduling in the compiled step (``cfg[SGLANG]``; reference:
``simulator/engine/reference/sglang.py``, whose docstring states the rules; their arithmetic is in
``simulator/engine/rules.py``, the ``sgl_`` rules).

Every running slot is explicit (SGLang's steps pause decoding for prefill, so a decode slot does not
change the same way every step: no slot turns lazy). ``schedule_sglang`` schedules a prefill step if
it can, else a decode step, then applies the tokens as the vLLM step does (``schedule.apply_step``).
"""

from __future__ import annotations

from simulator.engine.compiled.layout import (
    BS,
    BUDGET,
    CACHING,
    END,
    FREE,
    I_GLEN,
    I_GROUP,
    I_MAXT,
    I_NOUT,
    I_NTOK,
    MAX_SEQS,
    N_RUN,
    S_A,
    S_HASHABLE,
    S_MAXT,
    S_NBLK,
    S_NCOMP,
    S_NOUT,
    S_NTOK,
    S_RID,
    S_ROW,
    SEQ_BACK,
    SGL_CHUNKED,
    SGL_FULL,
    SGL_ORDER,
    SGL_PAGE,
    SGL_PREFILL,
    SGL_RATIO,
    SGL_RDECAY,
    SGL_RMIN,
    WO_RID,
    WQ_LEN,
)
from simulator.engine.compiled.pool import lookup, unreferenced_hits
from simulator.engine.compiled.queues import wq_insert, wq_peek, wq_pop
from simulator.engine.compiled.schedule import (
    abort_slot,
    admit_request,
    begin_step,
    cache_filled,
    count_preemption,
    leave_slot,
    requeue_slot,
    run_slot,
)
from simulator.engine.rules import (
    WO_GROUP,
    WO_HITS,
    WO_NGROUP,
    WO_ORDER,
    WO_SHARED,
    group_blocks,
    hashed_blocks,
    new_blocks,
    sgl_admission_tokens,
    sgl_fits,
    sgl_orders,
    sgl_over_prefill_budget,
    sgl_prompt_cacheable,
    sgl_ratio_after_retract,
    sgl_ratio_decayed,
    sgl_retract_first,
    sgl_running_reserve,
    sgl_shared_tokens,
    sgl_truncated,
    sgl_waiting_order,
)

COLD = ("schedule_sglang", "_retract", "_abort_last", "_order_waiting")  # not inlined (see build.py)


def schedule_sglang(st, t):
    """Schedule the step starting at ``t`` as SGLang does (``schedule.apply_step`` then applies it)."""
    ctl, slots = st.ctl, st.slots
    begin_step(st)
    for s in range(ctl[END]):
        slots[s, S_A] = 0
    if not _prefill(st, t) and ctl[N_RUN] > 0:
        _decode(st, t)
    for s in range(ctl[END]):  # a prefill's tokens reach the radix tree once it has run (after every admission)
        if slots[s, S_RID] >= 0 and slots[s, S_A] > 0:
            cache_filled(st, slots[s, S_RID], slots[s, S_ROW], slots[s, S_NCOMP], slots[s, S_NCOMP] + slots[s, S_A])


# About 90 lines: PrefillAdder's budgets (chunk, prompt tokens, KV left) are running totals that the
# chunked request and every admission update in turn; split, they would be handed back and forth.
def _prefill(st, t):
    """The chunked request's next chunk, then waiting requests as SGLang's ``PrefillAdder`` admits
    them; returns whether anything was scheduled."""
    ctl, cfg, slots, fctl = st.ctl, st.cfg, st.slots, st.fctl
    bs, page = cfg[BS], cfg[SGL_PAGE]
    chunked = ctl[SGL_CHUNKED]
    if sgl_orders(cfg[SGL_ORDER], ctl[WQ_LEN], ctl[SGL_FULL] != 0, chunked >= 0, ctl[N_RUN], cfg[MAX_SEQS]):
        _order_waiting(st)
    rem_chunk, rem_input = cfg[BUDGET], cfg[SGL_PREFILL]
    free0 = ctl[FREE]
    offset = 0.0
    cs = -1
    for s in range(ctl[END]):
        r = slots[s, S_RID]
        if r < 0:
            continue
        if r == chunked:
            cs = s
            continue
        offset += sgl_running_reserve(slots[s, S_MAXT], slots[s, S_NOUT], fctl[SGL_RATIO])
    cur_offset = 0
    locked = 0
    scheduled = False
    if cs >= 0:
        nc, ntok = slots[cs, S_NCOMP], slots[cs, S_NTOK]
        rem = min(rem_chunk, int(free0 * bs - offset))
        a = min(ntok - nc, rem if rem > 0 else rem_chunk)
        a = min(a, (slots[cs, S_NBLK] + ctl[FREE]) * bs - nc)
        if a > 0:
            run_slot(st, cs, a, new_blocks(nc, a, slots[cs, S_NBLK], bs))
            scheduled = True
            last = nc + a == ntok
            offset += sgl_admission_tokens(a, slots[cs, S_MAXT], slots[cs, S_NOUT], page, last)
            cur_offset += a + page
            rem_chunk -= a
            rem_input -= a
            if last:
                ctl[SGL_CHUNKED] = -1
    if ctl[WQ_LEN] == 0 or (ctl[SGL_FULL] != 0 and ctl[SGL_CHUNKED] < 0 and chunked < 0):
        return scheduled
    req_i64 = st.req_i64
    admitted = 0
    while ctl[WQ_LEN] > 0 and rem_chunk > 0 and rem_input > 0 and ctl[SGL_CHUNKED] < 0:
        if ctl[N_RUN] >= cfg[MAX_SEQS]:
            ctl[SGL_FULL] = 1
            return scheduled
        rid = wq_peek(st)
        ntok, maxt, nout = req_i64[rid, I_NTOK], req_i64[rid, I_MAXT], req_i64[rid, I_NOUT]
        nh = lookup(st, rid, ntok) if cfg[CACHING] != 0 else 0
        evictable = unreferenced_hits(st, nh)  # locked by the hit
        nc = nh * bs
        extend = ntok - nc
        rem_total = (free0 - locked - evictable) * bs - offset
        if not sgl_fits(sgl_admission_tokens(extend, maxt, nout, page, True), rem_total):
            ctl[SGL_FULL] = 1
            return scheduled
        if sgl_over_prefill_budget(cfg[BUDGET], admitted, extend, rem_input):
            return scheduled
        a = extend if extend <= rem_chunk else sgl_truncated(rem_chunk, nc, page)
        if a <= 0:
            return scheduled
        m = new_blocks(nc, a, nh, bs)
        if m > ctl[FREE] - evictable:  # the pool cannot hold it: SGLang's allocation fails
            ctl[SGL_FULL] = 1
            return scheduled
        wq_pop(st)
        admit_request(st, t, rid, nh, nc, a, m, 0)
        admitted += 1
        scheduled = True
        locked += evictable
        last = a == extend
        if not last:
            ctl[SGL_CHUNKED] = rid
        offset += sgl_admission_tokens(a, maxt, nout, page, last)
        cur_offset += a + page
        rem_chunk -= a
        rem_input -= a
        if (free0 - locked) * bs - offset <= 0 or (free0 - locked) * bs - cur_offset <= 0:
            ctl[SGL_FULL] = 1
            return scheduled
    return scheduled


def _order_waiting(st):
    """The waiting queue in the cache-aware policy's order (``calc_priority``): taken off the heap in
    its order into ``st.wo``, ordered there by ``rules.sgl_waiting_order``, put back in the new one."""
    ctl, cfg, req_i64, w = st.ctl, st.cfg, st.req_i64, st.wo
    bs = cfg[BS]
    n = ctl[WQ_LEN]
    for k in range(n):
        rid = wq_pop(st)
        w[WO_RID, k] = rid
        ntok, g, glen = req_i64[rid, I_NTOK], req_i64[rid, I_GROUP], req_i64[rid, I_GLEN]
        w[WO_HITS, k] = lookup(st, rid, ntok) if cfg[CACHING] != 0 else 0
        w[WO_NGROUP, k] = group_blocks(g, glen, bs)
        w[WO_GROUP, k] = g
        w[WO_SHARED, k] = sgl_shared_tokens(g, glen, ntok)
    sgl_waiting_order(cfg[SGL_ORDER], w, n, bs)
    ctl[SEQ_BACK] = 0  # the heap is empty: the queue's order starts again from its front
    for k in range(n):
        ctl[SEQ_BACK] += 1
        wq_insert(st, w[WO_RID, w[WO_ORDER, k]], 0, ctl[SEQ_BACK], 0.0)


def _decode(st, t):
    """One token for every running slot; if their KV does not fit, retract until it does."""
    ctl, slots, fctl = st.ctl, st.slots, st.fctl
    bs = st.cfg[BS]
    need = 0
    for s in range(ctl[END]):
        if slots[s, S_RID] >= 0:
            need += new_blocks(slots[s, S_NCOMP], 1, slots[s, S_NBLK], bs)
    retracted = False
    while need > ctl[FREE] and ctl[N_RUN] > 1:
        v = _victim(st)
        need -= new_blocks(slots[v, S_NCOMP], 1, slots[v, S_NBLK], bs)
        _retract(st, v, t)
        retracted = True
    if retracted:
        out = 0
        max_new = 0
        for s in range(ctl[END]):
            if slots[s, S_RID] >= 0:
                out += slots[s, S_NOUT]
                max_new += slots[s, S_MAXT]
        fctl[SGL_RATIO] = sgl_ratio_after_retract(out, ctl[N_RUN], max_new)
    else:
        fctl[SGL_RATIO] = sgl_ratio_decayed(fctl[SGL_RATIO], fctl[SGL_RMIN], fctl[SGL_RDECAY])
    if need > ctl[FREE]:  # the last request alone does not fit: SGLang aborts it
        _abort_last(st, t)
        return
    for s in range(ctl[END]):
        if slots[s, S_RID] >= 0:
            run_slot(st, s, 1, new_blocks(slots[s, S_NCOMP], 1, slots[s, S_NBLK], bs))


def _victim(st):
    """The running slot retracted next (``rules.sgl_retract_first``; the later one on a tie)."""
    slots = st.slots
    best = -1
    for s in range(st.ctl[END]):
        if slots[s, S_RID] < 0:
            continue
        if best < 0 or sgl_retract_first(
            slots[s, S_NOUT],
            slots[s, S_NTOK] - slots[s, S_NOUT],
            slots[best, S_NOUT],
            slots[best, S_NTOK] - slots[best, S_NOUT],
        ):
            best = s
    return best


def _retract(st, v, t):
    """Slot ``v``'s request back to the end of the waiting queue, its prompt's KV left in the prefix
    cache."""
    cfg, slots = st.cfg, st.slots
    count_preemption(st, slots[v, S_RID])
    keep = min(slots[v, S_NCOMP], sgl_prompt_cacheable(slots[v, S_NTOK], slots[v, S_NOUT]))
    requeue_slot(
        st, v, slots[v, S_NBLK], hashed_blocks(keep, slots[v, S_HASHABLE], cfg[BS], cfg[CACHING] != 0), False, t
    )
    leave_slot(st, v)
    st.ctl[SGL_FULL] = 0


def _abort_last(st, t):
    """The one running request cannot get its next token's KV: it is aborted."""
    v = _victim(st)
    count_preemption(st, st.slots[v, S_RID])
    abort_slot(st, v, st.slots[v, S_NBLK], 0, t)
    leave_slot(st, v)
