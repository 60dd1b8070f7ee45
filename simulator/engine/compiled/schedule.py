"""One step's scheduling in the compiled step (reference: ``reference/scheduler.py``, whose
docstring states the rules; the arithmetic of each is in ``simulator/engine/rules.py``).

``schedule`` gives each running slot its tokens for the step (``S_A``; a lazy slot takes one),
preempting as the rules say, brings swapped requests back and admits waiting ones into new slots,
applies the tokens, writes the step's log row and returns the step's duration from
``simulator.engine.cost.step_time``.
"""

from __future__ import annotations

from simulator.engine.compiled.adapters import lora_stop, lora_users
from simulator.engine.compiled.layout import (
    AB_N,
    ABORT_ON_FULL,
    BS,
    BUDGET,
    C_BLOCK_BYTES,
    CACHE_FINISHED,
    CACHING,
    E_NBLK,
    E_NFULL,
    E_RID,
    E_ROW,
    END,
    ENDED_N,
    F_ARR,
    F_FIN,
    F_FSCHED,
    F_SWAPPED,
    FREE,
    FULL_PROMPT,
    I32_PREEMPT,
    I32_PRIO,
    I_CACHED,
    I_EXTERNAL,
    I_GLEN,
    I_GROUP,
    I_HOST_CACHED,
    I_LORA,
    I_NCOMP,
    I_NTOK,
    I_RECOMP,
    JIT_N,
    JIT_S,
    L_DECODE,
    L_DURATION,
    L_FREE,
    L_PREEMPTIONS,
    L_PREFILL,
    L_RECOMPUTED,
    L_RUNNING,
    L_SEQS,
    L_START,
    L_SWAPPED,
    L_WAITING,
    LAZY,
    LAZY_SUM,
    LORA_ACTIVE,
    LORA_STEP_DISK,
    LORA_STEP_LOADS,
    MAX_LORAS,
    MAX_SEQS,
    N_RUN,
    N_SAMPLED,
    PENDING,
    PREEMPTED,
    PRIORITY,
    ROWS,
    S_A,
    S_EVT,
    S_HASHABLE,
    S_HWM,
    S_NBLK,
    S_NCOMP,
    S_NTOK,
    S_RID,
    S_ROW,
    S_SPEC,
    SGLANG,
    SPEC_LOOK,
    SPEC_SLOTS,
    STAGE_N,
    STALLED,
    STEPS,
    SW_LEN,
    SWAP,
    SWAP_BYTES,
    SWAP_SPACE,
    SWAP_USED,
    THR,
    TRACE,
    WQ_LEN,
    X_SWAPPED,
)
from simulator.engine.compiled.lazy import (
    bucket,
    grow_lazy,
    hash_as_scheduled,
    materialize,
    next_marked,
    start_slot,
    tail,
    unmark,
    write_back,
)
from simulator.engine.compiled.pool import (
    cache_group_blocks,
    cache_own_blocks,
    host_loaded,
    host_lookup,
    host_write,
    lookup,
    release_table,
    take_blocks,
    take_row,
    touch,
    unreferenced_hits,
)
from simulator.engine.compiled.queues import (
    sw_peek,
    sw_pop,
    sw_push,
    wq_peek,
    wq_pop,
    wq_push,
    wq_restore,
    wq_set_aside,
)
from simulator.engine.compiled.trace import record
from simulator.engine.cost import first_compile, step_time
from simulator.engine.events import EventKind, PreemptionKind
from simulator.engine.rules import (
    W_CONTEXT,
    W_DECODE,
    W_DRAFTS,
    W_SAMPLED,
    W_SEQS,
    W_SINGLE,
    W_TOKENS,
    W_TXC,
    W_TXT1,
    RequestStatus,
    add_decodes,
    add_request,
    admission_blocks,
    admits,
    admitted_computed,
    attn_pairs,
    chunk,
    drafts_scheduled,
    fills_group_blocks,
    hashed_blocks,
    host_loads,
    later_victim,
    long_prefill_cap,
    lora_skipped,
    made_progress,
    new_blocks,
    preemption_kind,
    recomputed,
    room,
    schedules_again,
    seats_taken,
    spent,
    writes_chunk,
)

COLD = ("_unschedule_after", "_victim", "_preempt", "_swap_in")  # not inlined (see build.py)


def schedule(st, t):
    """Schedule the step starting at ``t`` (``apply_step`` then applies it)."""
    ctl = st.ctl
    while True:  # (one call site: the build inlines each in full)
        _schedule_pass(st, t)
        if not schedules_again(ctl[N_RUN], ctl[ENDED_N], ctl[PREEMPTED]):
            return
        free_ended(st)  # (then none ended: the loop runs twice at most)


def _schedule_pass(st, t):
    """One scheduling of the running, swapped and waiting requests."""
    ctl, cfg = st.ctl, st.cfg
    budget = cfg[BUDGET]
    cap = long_prefill_cap(cfg[THR], seats_taken(ctl[N_RUN], ctl[ENDED_N]) + ctl[WQ_LEN] + ctl[SW_LEN])
    begin_step(st)
    _explicit_if_budget_binds(st, cap, budget)
    budget = _schedule_running(st, t, cap, budget)
    budget -= ctl[LAZY]  # the lazy slots' one token each
    if ctl[PREEMPTED] == 0:
        budget = _swap_in(st, t, cap, budget)
        if ctl[SW_LEN] == 0:
            _admit(st, t, cap, budget)


def free_finished(st, rid, row, nblk, nfull):
    """A finished request releases its block table (``row``: ``nblk`` blocks, the first ``nfull``
    hashed; its own content kept findable where the workload returns to it) and its adapter."""
    if st.cfg[CACHE_FINISHED] != 0:
        cache_own_blocks(st, rid, row, nfull)
    release_table(st, rid, row, nblk, nfull)
    lora_stop(st, rid)


def hold_ended(st, rid, row, nblk, nfull):
    """A request that ended keeps its place and blocks until ``free_ended`` (``rules.seats_taken``)."""
    e = st.ended[st.ctl[ENDED_N]]
    e[E_RID], e[E_ROW], e[E_NBLK], e[E_NFULL] = rid, row, nblk, nfull
    st.ctl[ENDED_N] += 1


def free_ended(st):
    """The requests held by ``hold_ended`` are freed, in the order they ended."""
    ended = st.ended
    for i in range(st.ctl[ENDED_N]):
        free_finished(st, ended[i, E_RID], ended[i, E_ROW], ended[i, E_NBLK], ended[i, E_NFULL])
    st.ctl[ENDED_N] = 0


def begin_step(st):
    """The counters of the step being scheduled, at zero."""
    ctl = st.ctl
    ctl[PREEMPTED] = 0
    ctl[LORA_STEP_LOADS] = 0
    ctl[LORA_STEP_DISK] = 0
    st.fctl[SWAP_BYTES] = 0.0


def _explicit_if_budget_binds(st, cap, budget):
    """If the running requests may want more than the budget, it is shared out in running order one
    request at a time: make every slot explicit for that."""
    ctl, slots, bits = st.ctl, st.slots, st.bits
    want = ctl[LAZY]
    for w in range(bits.shape[1]):
        x = bits[0, w]
        while x != 0:
            s, x = next_marked(w, x)
            want += chunk(slots[s, S_NTOK] + slots[s, S_SPEC], slots[s, S_NCOMP], cap, budget)
    if want > budget:
        for s in range(ctl[END]):
            if slots[s, S_RID] >= 0 and slots[s, S_EVT] >= 0:
                materialize(st, s)


def _schedule_running(st, t, cap, budget):
    """The running requests in order (lazy ones take one token each and need nothing: only those due
    now are visited); one that cannot get its blocks preempts. Returns the budget left."""
    ctl, slots, bits = st.ctl, st.slots, st.bits
    bs = st.cfg[BS]
    d = st.cfg[SPEC_SLOTS]  # (speculative decoding keeps no slot lazy: the lazy ones take one token each)
    step = ctl[ROWS] + 1
    due = bucket(st, step)
    for w in range(bits.shape[1]):
        x = bits[0, w] | bits[due, w]
        while x != 0:
            j, x = next_marked(w, x)
            if j >= ctl[END]:
                return budget
            if slots[j, S_RID] < 0:  # preempted earlier in this step (priority scheduling)
                continue
            if slots[j, S_EVT] >= 0:
                if grow_lazy(st, j, step):
                    continue
                materialize(st, j)
            nc = slots[j, S_NCOMP]
            if room(budget, d) <= 0:  # the budget is spent: the running pass ends (nothing scheduled, no blocks asked)
                slots[j, S_A] = 0
                continue
            a = chunk(slots[j, S_NTOK] + slots[j, S_SPEC], nc, cap, room(budget, d))
            m = new_blocks(nc, a + st.cfg[SPEC_LOOK], slots[j, S_NBLK], bs)
            while m > ctl[FREE]:
                v = _victim(st)
                budget += _preempt(st, v, j, t)
                if v == j:
                    _unschedule_after(st, j)
                    return budget
            if a == 0:
                slots[j, S_A] = 0
                continue
            run_slot(st, j, a, m)
            budget -= spent(a, d)
    return budget


def run_slot(st, s, a, m):
    """Running slot ``s`` computes ``a`` tokens in this step, in ``m`` new blocks (a shared prefix's
    blocks it fills are cached)."""
    slots = st.slots
    nc = slots[s, S_NCOMP]
    if m > 0:
        take_blocks(st, slots[s, S_ROW], slots[s, S_NBLK], m)
        slots[s, S_NBLK] += m
    if st.cfg[SGLANG] == 0:  # SGLang's: after the step's scheduling (sglang.py)
        cache_filled(st, slots[s, S_RID], slots[s, S_ROW], nc, nc + a)
    hash_as_scheduled(st, s, nc, slots[s, S_NTOK], a)
    slots[s, S_A] = a


def cache_filled(st, rid, row, nc, upto):
    """The shared-prefix blocks ``rid`` (table ``row``; computed so far: ``nc``) fills up to token
    ``upto``, cached: findable by the requests admitted after this (the reference's ``_cache_filled``)."""
    if fills_group_blocks(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], nc):
        cache_group_blocks(st, rid, row, upto)


def _unschedule_after(st, j):
    """The running pass ends at slot ``j`` (it preempted itself): the slots after it run nothing this
    step. Under FCFS none is left (the victim was the tail); under priority scheduling the lazy ones
    among them, implied to take a token, are made explicit with none."""
    slots = st.slots
    for s in range(j + 1, st.ctl[END]):
        if slots[s, S_RID] >= 0:
            if slots[s, S_EVT] >= 0:
                materialize(st, s)
            slots[s, S_A] = 0


def _victim(st):
    """The running slot to preempt: the last admitted, or under priority scheduling the one
    ``rules.later_victim`` puts last."""
    ctl, slots = st.ctl, st.slots
    e = tail(st, ctl[END])
    if st.cfg[PRIORITY] == 0:
        return e
    req_i32, req_f64 = st.req_i32, st.req_f64
    best = e
    b = slots[e, S_RID]
    for s in range(ctl[END]):
        r = slots[s, S_RID]
        if (
            r >= 0
            and s != e
            and later_victim(req_i32[r, I32_PRIO], req_f64[r, F_ARR], r, req_i32[b, I32_PRIO], req_f64[b, F_ARR], b)
        ):
            best = s
            b = r
    return best


def _preempt(st, v, j, t):
    """Preempt running slot ``v`` while slot ``j`` is being scheduled; returns the tokens it had been
    given earlier in this step, which go back to the budget (only under priority scheduling can the
    victim come before ``j``). Its slot becomes a hole."""
    ctl, cfg, slots = st.ctl, st.cfg, st.slots
    was_lazy = slots[v, S_EVT] >= 0
    if was_lazy:
        materialize(st, v)
    undone = 0  # tokens it was scheduled earlier in this step: their full blocks are cached
    given_back = 0
    if v < j:
        if was_lazy:
            undone = 1  # its implied token (dropping it from the lazy count gave it back)
            hash_as_scheduled(st, v, slots[v, S_NCOMP], slots[v, S_NTOK], 1)
        else:
            undone = slots[v, S_A]
            given_back = spent(undone, cfg[SPEC_SLOTS])
    rid = slots[v, S_RID]
    count_preemption(st, rid)
    lora_stop(st, rid)
    nblk = slots[v, S_NBLK]
    row = slots[v, S_ROW]
    nfull = hashed_blocks(slots[v, S_NCOMP] + undone, slots[v, S_HASHABLE], cfg[BS], cfg[CACHING] != 0)
    slots[v, S_NBLK] = 0
    kind = preemption_kind(cfg[SWAP] != 0, cfg[ABORT_ON_FULL] != 0, ctl[SWAP_USED], nblk, cfg[SWAP_SPACE])
    if kind == PreemptionKind.SWAPPED_OUT:
        release_table(st, rid, row, nblk, nfull)
        ctl[SWAP_USED] += nblk
        st.req_extra[rid, X_SWAPPED] = nblk
        _swap_traffic(st, rid, nblk)
        st.status[rid] = RequestStatus.SWAPPED
        sw_push(st, rid)
        record(st, t, EventKind.PREEMPTED, rid, PreemptionKind.SWAPPED_OUT)
    elif kind == PreemptionKind.ABORTED:
        abort_slot(st, v, nblk, nfull, t)
    else:
        requeue_slot(st, v, nblk, nfull, True, t)
    leave_slot(st, v)
    return given_back


def count_preemption(st, rid):
    st.req_i32[rid, I32_PREEMPT] += 1
    st.ctl[PREEMPTED] += 1


def abort_slot(st, v, nblk, nfull, t):
    """Running slot ``v``'s request, holding ``nblk`` blocks (``nfull`` of them hashed), is aborted now."""
    ctl, slots = st.ctl, st.slots
    rid = slots[v, S_RID]
    release_table(st, rid, slots[v, S_ROW], nblk, nfull)
    slots[v, S_NBLK] = 0
    st.status[rid] = RequestStatus.ABORTED
    st.req_f64[rid, F_FIN] = t
    st.ab[ctl[AB_N]] = rid
    ctl[AB_N] += 1
    record(st, t, EventKind.PREEMPTED, rid, PreemptionKind.ABORTED)


def requeue_slot(st, v, nblk, nfull, front, t):
    """Running slot ``v``'s request goes back to the waiting queue (its ``front`` or back) to compute
    everything again: its blocks released, the ``nfull`` first of them cached as its own content."""
    slots = st.slots
    rid, row = slots[v, S_RID], slots[v, S_ROW]
    cache_own_blocks(st, rid, row, nfull)
    release_table(st, rid, row, nblk, nfull)
    slots[v, S_NBLK] = 0
    slots[v, S_NCOMP] = 0
    st.status[rid] = RequestStatus.WAITING
    wq_push(st, rid, front)
    record(st, t, EventKind.PREEMPTED, rid, PreemptionKind.RECOMPUTED)


def leave_slot(st, v):
    """Slot ``v`` stops running (preempted, retracted, aborted): its record brought up to date, the
    slot a hole, the running list's end moved in past the holes at its tail."""
    ctl, slots = st.ctl, st.slots
    write_back(st, v)
    slots[v, S_RID] = -1
    unmark(st.bits, 0, v)
    ctl[N_RUN] -= 1
    while ctl[END] > 0 and slots[ctl[END] - 1, S_RID] < 0:
        ctl[END] -= 1


def _swap_traffic(st, rid, nblk):
    nbytes = nblk * st.cp[C_BLOCK_BYTES]
    st.fctl[SWAP_BYTES] += nbytes
    st.req_f64[rid, F_SWAPPED] += nbytes


def _swap_in(st, t, cap, budget):
    """Swapped requests back in, in the order they went out, while their blocks fit."""
    ctl, cfg = st.ctl, st.cfg
    d = cfg[SPEC_SLOTS]
    while ctl[SW_LEN] > 0 and room(budget, d) > 0 and seats_taken(ctl[N_RUN], ctl[ENDED_N]) < cfg[MAX_SEQS]:
        rid = sw_peek(st)
        nc = st.req_i64[rid, I_NCOMP]
        a = chunk(st.req_i64[rid, I_NTOK], nc, cap, room(budget, d))
        m = new_blocks(nc, a + cfg[SPEC_LOOK], 0, cfg[BS])
        if m > ctl[FREE]:
            break
        sw_pop(st)
        nblk = st.req_extra[rid, X_SWAPPED]
        ctl[SWAP_USED] -= nblk
        _swap_traffic(st, rid, nblk)
        row = take_row(st)
        take_blocks(st, row, 0, m)
        st.status[rid] = RequestStatus.RUNNING
        start_slot(st, rid, nc, m, a, row)
        record(st, t, EventKind.RESUMED, rid, nc)
        if fills_group_blocks(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], nc):
            cache_group_blocks(st, rid, row, nc + a)
        budget -= spent(a, d)
    return budget


def _admit(st, t, cap, budget):
    """Waiting requests in queue order; the first that cannot get its blocks stops admission."""
    ctl, cfg, req_i64 = st.ctl, st.cfg, st.req_i64
    bs = cfg[BS]
    d = cfg[SPEC_SLOTS]
    aside = 0  # passed over for their adapter (multi-LoRA), put back at their places after
    while ctl[WQ_LEN] > 0 and room(budget, d) > 0 and seats_taken(ctl[N_RUN], ctl[ENDED_N]) < cfg[MAX_SEQS]:
        rid = wq_peek(st)
        if cfg[MAX_LORAS] != 0 and lora_skipped(
            req_i64[rid, I_LORA], lora_users(st, rid), ctl[LORA_ACTIVE], cfg[MAX_LORAS]
        ):
            wq_set_aside(st, aside)
            aside += 1
            continue
        ntok = req_i64[rid, I_NTOK]
        nh = lookup(st, rid, ntok) if cfg[CACHING] != 0 else 0
        evictable = unreferenced_hits(st, nh)  # free now, taken by the hit
        nx = host_lookup(st, rid, ntok, nh)  # loaded into new blocks (KV offloading)
        nc = admitted_computed(nh + nx, bs, req_i64[rid, I_EXTERNAL], req_i64[rid, I_CACHED] < 0)
        nx = host_loads(nx, nh, nc, bs)
        a = chunk(ntok, nc, cap, room(budget, d))
        m = new_blocks(nc, a + cfg[SPEC_LOOK], nh, bs)
        if not admits(admission_blocks(ntok, nh, m, bs, cfg[FULL_PROMPT] != 0), evictable, ctl[FREE]):
            break
        wq_pop(st)
        admit_request(st, t, rid, nh, nc, a, m, nx)
        budget -= spent(a, d)
    wq_restore(st, aside)


def admit_request(st, t, rid, nh, nc, a, m, nx):
    """``rid``, just taken off the waiting queue, starts running in a new slot: it holds the ``nh``
    prefix-cache hits of the last lookup (``st.hits``), has computed ``nc`` tokens and runs ``a`` more
    in this step in ``m`` new blocks (``nx`` of them loaded from the host tier)."""
    req_i64 = st.req_i64
    row = take_row(st)
    for k in range(nh):
        touch(st, st.hits[k])
        st.tables[row, k] = st.hits[k]
    take_blocks(st, row, nh, m)
    if req_i64[rid, I_CACHED] < 0:  # first admission
        req_i64[rid, I_CACHED] = nc
        req_i64[rid, I_HOST_CACHED] = nx * st.cfg[BS]
        st.req_f64[rid, F_FSCHED] = t
        record(st, t, EventKind.NEW, rid, nc)
    else:
        record(st, t, EventKind.RESUMED, rid, nc)
    st.status[rid] = RequestStatus.RUNNING
    start_slot(st, rid, nc, nh + m, a, row)
    if st.cfg[SGLANG] == 0:  # SGLang's: after the step's scheduling (sglang.py)
        cache_filled(st, rid, row, nc, nc + a)
    if nx > 0:  # copied in over the host link in this step; its shared prefix's cached again
        st.fctl[SWAP_BYTES] += nx * st.cp[C_BLOCK_BYTES]
        host_loaded(st, nx)
        if req_i64[rid, I_GROUP] >= 0:
            cache_group_blocks(st, rid, row, nc)


def apply_step(st, t):
    """Apply the step's tokens to the explicit slots one by one and add the lazy ones' (one token
    each) as a sum; write the step's log row; free the requests that ended at the last update if
    they were held (``hold_ended``); return the step's duration."""
    ctl, slots, bits = st.ctl, st.slots, st.bits
    work = st.work
    work[:] = 0
    lazy = ctl[LAZY]
    add_decodes(work, lazy, ctl[LAZY_SUM] + lazy * ctl[ROWS])  # the lazy requests compute one token each
    rec = 0
    for w in range(bits.shape[1]):
        x = bits[0, w]
        while x != 0:
            s, x = next_marked(w, x)
            a = slots[s, S_A]
            if a == 0:
                continue
            before = slots[s, S_NCOMP]
            after = before + a
            slots[s, S_NCOMP] = after
            d = drafts_scheduled(after, slots[s, S_NTOK])
            real = after - d  # drafts are not work done until accepted
            h = slots[s, S_HWM]
            r = recomputed(before, real, h)
            if r > 0:
                st.req_i64[slots[s, S_RID], I_RECOMP] += r
                rec += r
            if real > h:
                slots[s, S_HWM] = real
            add_request(work, a, before, slots[s, S_NTOK], d)
            if writes_chunk(before, slots[s, S_NTOK]):
                host_write(st, slots[s, S_RID], real // st.cfg[BS])
    if st.cfg[TRACE] >= 2:
        for s in range(ctl[END]):  # every scheduled request in order (a lazy one takes a token)
            if slots[s, S_RID] >= 0 and (slots[s, S_EVT] >= 0 or slots[s, S_A] > 0):
                record(st, t, EventKind.SCHEDULED, slots[s, S_RID], 1 if slots[s, S_EVT] >= 0 else slots[s, S_A])
    total, decode = work[W_TOKENS], work[W_DECODE]
    jit = first_compile(st.cp, st.shapes, work[W_SEQS], total)
    if jit > 0.0:
        ctl[JIT_N] += 1
        st.fctl[JIT_S] += jit
    dt = step_time(
        st.cp,
        work[W_SEQS],
        total,
        work[W_CONTEXT],
        attn_pairs(work[W_TXC], work[W_TXT1]),
        work[W_SAMPLED],
        st.fctl[SWAP_BYTES],
        work[W_SINGLE],
        work[W_DRAFTS],
        ctl[LORA_ACTIVE],
        ctl[LORA_STEP_LOADS],
        ctl[LORA_STEP_DISK],
        jit,
    )
    ctl[N_SAMPLED] = work[W_SAMPLED]
    stage, row = st.stage, ctl[STAGE_N]
    stage[L_START, row] = t
    stage[L_DURATION, row] = dt
    stage[L_RUNNING, row] = seats_taken(ctl[N_RUN], ctl[ENDED_N])
    stage[L_WAITING, row] = ctl[WQ_LEN]
    stage[L_SWAPPED, row] = ctl[SW_LEN]
    stage[L_FREE, row] = ctl[FREE]
    stage[L_SEQS, row] = work[W_SEQS]
    stage[L_PREFILL, row] = total - decode
    stage[L_DECODE, row] = decode
    stage[L_RECOMPUTED, row] = rec
    stage[L_PREEMPTIONS, row] = ctl[PREEMPTED]
    ctl[STALLED] = 0 if made_progress(total, rec) else 1
    ctl[STEPS] += 1
    ctl[PENDING] = 1
    free_ended(st)  # after the scheduling, whose figures (running, free blocks) count them still
    return dt
