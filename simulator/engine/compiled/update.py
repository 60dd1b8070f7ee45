"""The end of a step in the compiled step (reference: ``Scheduler.update``), and the call that runs
steps while nothing outside the engine can intervene.

One ``advance`` call finishes the step in flight (if any), then runs steps until something outside
the engine could observe or change the state: the next SimPy event (an arrival, a client waking),
a request someone waits for ending, a full step-log stage. It returns a code saying why (the
``STEPPED``... constants of ``layout.py``) and the time it refers to in ``fctl[T_RET]``.
"""

from __future__ import annotations

from simulator.engine.compiled.clients import first_told, pend, tell
from simulator.engine.compiled.intake import intake_run, intake_submit, next_intake_event, reached_by, take_reached
from simulator.engine.compiled.layout import (
    AB_N,
    ARRIVED,
    BS,
    C_AT_LEAST,
    CACHING,
    CLOOP,
    END,
    F_FIN,
    F_FTOK,
    FE_BATCH,
    FE_FREE,
    FE_INTAKE,
    FIN_N,
    I_MAXT,
    I_PROMPT,
    IDLE,
    IDLE_NOW,
    IN_END,
    IN_NEXT,
    ITL_N,
    L_FINISHED,
    L_GENERATED,
    L_SPEC_ACC,
    L_SPEC_DRAFTS,
    L_SPEC_N,
    LAZY,
    LIVELOCK,
    LONGEST,
    MAX_SEQS,
    MAX_STEPS,
    MAX_STEPS_HIT,
    N_RUN,
    N_SAMPLED,
    NOTIFY,
    OUTPUTS_LATE,
    PACED,
    PD_N,
    PD_SEQ,
    PENDING,
    REFILL,
    REQ_CAP,
    REQ_N,
    ROWS,
    S_A,
    S_HASHABLE,
    S_MAXT,
    S_NBLK,
    S_NCOMP,
    S_NOUT,
    S_NTOK,
    S_RID,
    S_ROW,
    S_SPEC,
    SGL_FULL,
    SGL_R0,
    SGL_RATIO,
    SGLANG,
    SH_END,
    SH_NEXT,
    SPEC_ACC,
    SPEC_DRAFTS,
    SPEC_K,
    SPEC_N,
    SPEC_POS,
    SPEC_SEED,
    STAGE_CAP,
    STAGE_N,
    STALL,
    STALL_STEPS,
    STALLED,
    STEPPED,
    STEPS,
    STOP_AFTER,
    SW_LEN,
    T_LAST,
    T_NOW,
    T_PEEK,
    T_RET,
    T_WAKE,
    TRACE,
    TRACE_N,
    UNSTAGE,
    UNTRACE,
    WAITERS,
    WQ_LEN,
)
from simulator.engine.compiled.lazy import close_up, lazify, next_marked, unmark, write_back
from simulator.engine.compiled.queues import wq_push
from simulator.engine.compiled.schedule import apply_step, free_ended, free_finished, hold_ended, schedule
from simulator.engine.compiled.sglang import schedule_sglang
from simulator.engine.compiled.trace import record
from simulator.engine.events import EventKind
from simulator.engine.host import delivered, step_start
from simulator.engine.params import P
from simulator.engine.rules import (
    RequestStatus,
    drafts_scheduled,
    finishes,
    hashed_blocks,
    itl_bin,
    samples,
    spec_accepted,
    spec_emitted,
    spec_uniform,
)


def _ended(st, rid, t):
    """A request ended, reported at ``t``: for notification if anybody listens (or for its
    closed-loop client, told here: clients.py), and counted."""
    if st.cfg[WAITERS] != 0:
        st.fin[st.ctl[FIN_N]] = rid
    elif st.cfg[CLOOP] != 0:
        pend(st, rid, t)
    st.ctl[FIN_N] += 1


def _submitted(st, end):
    """The intake of the requests sent since it last started (ids up to ``end``) starts, in order."""
    for rid in range(st.ctl[IN_NEXT], end):
        intake_submit(st, rid)
    st.ctl[IN_NEXT] = end
    st.ctl[IN_END] = end


def _clients_due(st, t):
    """Whether closed-loop clients run here are to be told by ``t`` (clients.py)."""
    return st.cfg[CLOOP] != 0 and st.ctl[PD_N] > 0 and first_told(st) <= t


def _all_told_later(st, t):
    """Whether every request reported ended (``fin``) reaches its client after ``t``."""
    for i in range(st.ctl[FIN_N]):  # noqa: SIM110 (a loop the step compiler takes)
        if not st.req_f64[st.fin[i], F_FIN] > t:
            return False
    return True


def _verified(st, s):
    """Slot ``s``'s drafts verified in the step in flight, and how many of them it accepts."""
    slots = st.slots
    d = drafts_scheduled(slots[s, S_NCOMP], slots[s, S_NTOK])
    if d == 0:
        return 0, 0
    u = spec_uniform(st.cfg[SPEC_SEED], slots[s, S_RID], slots[s, S_NOUT])
    return d, spec_accepted(u, d, st.cp[C_AT_LEAST:])


def _samples(st, s, d):
    """Whether slot ``s`` (verifying ``d`` drafts) samples at this update."""
    return st.slots[s, S_A] != 0 and samples(st.slots[s, S_NCOMP] - d, st.slots[s, S_NTOK])


def _finishing(st):
    """Requests that sample their last token at this update (explicit slots: a lazy one finishes
    only at an update that made it explicit)."""
    slots, bits = st.slots, st.bits
    n = 0
    for w in range(bits.shape[1]):
        x = bits[0, w]
        while x != 0:
            s, x = next_marked(w, x)
            d, acc = _verified(st, s)
            if _samples(st, s, d):
                o = slots[s, S_NOUT]
                if finishes(o + spec_emitted(acc, o, slots[s, S_MAXT]), slots[s, S_MAXT]):
                    n += 1
    return n


def _count_verification(ctl, d, acc):
    """vLLM's spec-decode counters: a verification, its drafts, those accepted, and at which positions."""
    ctl[SPEC_N] += 1
    ctl[SPEC_DRAFTS] += d
    ctl[SPEC_ACC] += acc
    for i in range(acc):
        ctl[SPEC_POS + i] += 1


# About 80 lines: one pass over the slots, whose steps (sample, count the gap, finish and release,
# or turn lazy) share the pass's running totals; split, they would hand a dozen of them back and forth.
def update(st, t):
    """``Scheduler.update`` at the end of the step in flight (time ``t``), and its log row: slots that
    computed their last pending token sample one (every lazy slot does); finished ones release their
    blocks (in running order; with ``cfg[OUTPUTS_LATE]`` after the next scheduling: ``hold_ended``) and
    leave a hole, the slots closing up once holes are a quarter of them; the others that decode turn
    lazy. Requests it aborted end with it, before those that finish.
    Token and finish times are when the tokens reach their clients (``host.delivered``)."""
    ctl, cfg, slots, slot_time, bits, hist = st.ctl, st.cfg, st.slots, st.slot_time, st.bits, st.hist
    bs = cfg[BS]
    d0, d = delivered(
        st.cp,
        st.fctl[FE_FREE],
        st.fctl[FE_INTAKE],
        t,
        ctl[N_SAMPLED],
        _finishing(st) if st.cp[P.FE_FINISH_S] != 0.0 else 0,
    )
    spec0, drafts0, acc0 = ctl[SPEC_N], ctl[SPEC_DRAFTS], ctl[SPEC_ACC]
    if ctl[N_SAMPLED] != 0:
        st.fctl[FE_FREE] = d
        st.fctl[FE_BATCH] = d0
    aborted = ctl[AB_N]
    for i in range(aborted):
        _ended(st, st.ab[i], t)
    ctl[AB_N] = 0
    nfinished = 0
    ngaps = 0
    ngen = 0  # tokens output (a verification outputs those it accepts and one more)
    run_gap = -1.0  # a step's gaps come in runs of equal values (requests that also ran the step before)
    run_n = 0
    g = ctl[ROWS] + 1  # this update's number
    lazy = ctl[LAZY]
    if lazy:
        hist[itl_bin(d - st.fctl[T_LAST])] += lazy
        ngaps += lazy
        ngen += lazy
    for w in range(bits.shape[1]):
        x = bits[0, w]
        while x != 0:
            s, x = next_marked(w, x)
            nd, acc = _verified(st, s)
            if not _samples(st, s, nd):
                continue
            o0 = slots[s, S_NOUT]
            e = spec_emitted(acc, o0, slots[s, S_MAXT])
            if nd:
                _count_verification(ctl, nd, acc)
                slots[s, S_NCOMP] = slots[s, S_NTOK] + acc  # the rejected drafts' KV is dropped
            ngen += e
            slots[s, S_NTOK] += e
            o = o0 + e
            slots[s, S_NOUT] = o
            if o0 > 0:
                gap = d - slot_time[s]
                ngaps += 1
                if gap == run_gap:
                    run_n += 1
                else:
                    if run_n:
                        hist[itl_bin(run_gap)] += run_n
                    run_gap = gap
                    run_n = 1
            else:
                st.req_f64[slots[s, S_RID], F_FTOK] = d
                record(st, t, EventKind.FIRST_TOKEN, slots[s, S_RID], 0)
            slot_time[s] = d
            if finishes(o, slots[s, S_MAXT]):
                rid = slots[s, S_RID]
                nfull = hashed_blocks(slots[s, S_NCOMP], slots[s, S_HASHABLE], bs, cfg[CACHING] != 0)
                if cfg[OUTPUTS_LATE] != 0:  # freed at the end of the next scheduling
                    hold_ended(st, rid, slots[s, S_ROW], slots[s, S_NBLK], nfull)
                else:
                    free_finished(st, rid, slots[s, S_ROW], slots[s, S_NBLK], nfull)
                slots[s, S_NBLK] = 0
                write_back(st, s)
                st.status[rid] = RequestStatus.FINISHED
                st.req_f64[rid, F_FIN] = d
                record(st, t, EventKind.FINISHED, rid, 0)
                _ended(st, rid, t)
                nfinished += 1
                slots[s, S_RID] = -1
                unmark(bits, 0, s)
                ctl[N_RUN] -= 1
                continue
            slots[s, S_SPEC] = cfg[SPEC_K]  # the drafter proposes for the next step
            if cfg[SGLANG] == 0:
                lazify(st, s, g)
    if run_n:
        hist[itl_bin(run_gap)] += run_n
    if (ctl[END] - ctl[N_RUN]) * 4 > ctl[END]:
        close_up(st)
    ctl[ITL_N] += ngaps
    row = ctl[STAGE_N]
    st.stage[L_GENERATED, row] = ngen
    st.stage[L_FINISHED, row] = nfinished
    st.stage[L_SPEC_N, row] = ctl[SPEC_N] - spec0
    st.stage[L_SPEC_DRAFTS, row] = ctl[SPEC_DRAFTS] - drafts0
    st.stage[L_SPEC_ACC, row] = ctl[SPEC_ACC] - acc0
    ctl[STAGE_N] = row + 1
    ctl[ROWS] = g
    if cfg[SGLANG] != 0:
        if nfinished + aborted > 0:
            ctl[SGL_FULL] = 0  # the running batch shrank
        if ctl[N_RUN] == 0 and ctl[WQ_LEN] == 0:
            st.fctl[SGL_RATIO] = st.fctl[SGL_R0]  # idle: the new-token ratio starts again
    ctl[IDLE] = ctl[IDLE] + 1 if ctl[STALLED] else 0
    ctl[PENDING] = 0
    st.fctl[T_LAST] = d


def _take_in(st, t):
    """The engine takes in, at ``t`` (between steps), the requests that reached it by then, in the
    order they came: queued, or, one that can never fit, rejected then (``fin`` has room for every
    request on its way besides a step's ends: ``CompiledEngine._make_room``)."""
    while reached_by(st, t):
        rid, _at = take_reached(st)
        st.ctl[ARRIVED] += 1
        if st.req_i64[rid, I_PROMPT] + st.req_i64[rid, I_MAXT] > st.cfg[LONGEST]:
            st.status[rid] = RequestStatus.REJECTED
            st.req_f64[rid, F_FIN] = t
            _ended(st, rid, t)
        else:
            wq_push(st, rid, False)


def advance(st):
    """Finish the step in flight at ``fctl[T_NOW]``, then run steps while nothing outside the engine
    can intervene: each later step must start before ``fctl[T_PEEK]`` (the next SimPy event), and
    with ``cfg[WAITERS]`` (or once ``ctl[STOP_AFTER]`` requests have ended) the call returns at the end
    of a step that ended requests, before the next step is scheduled (the caller reports them, then
    calls again), or, when their clients learn of it only later (behind an API server), once the
    next step is scheduled (STEPPED with ``ctl[FIN_N]`` of them in ``fin``). The API server's intake
    runs up to each step's start and end (``intake.intake_run``); an idle engine waits for the next
    request to reach it. With a closed loop run here (``cfg[CLOOP]``, clients.py), the call does not
    return for the requests that end: their clients are told at their time and send before the
    engine moves on; it returns REFILL when they need more shapes or request rows than it holds."""
    ctl, cfg, fctl = st.ctl, st.cfg, st.fctl
    t = fctl[T_NOW]
    peek = fctl[T_PEEK]
    ctl[FIN_N] = 0
    _submitted(st, ctl[IN_END])
    trace_room = 5 * (cfg[MAX_SEQS] + 1) + 8  # trace rows one step can add
    report = False  # ended requests to report once the next step is scheduled
    while True:
        # The step in flight ends at t. (One call site for each phase: the build inlines a call in full
        # at every site, so each further site lengthens the compile.)
        if cfg[CLOOP] != 0:  # closed-loop clients told by now send first (clients.py)
            ctl[PD_SEQ] += 1  # what ends from here on is reported apart from what ended before
            if ctl[PD_N] > min(ctl[SH_END] - ctl[SH_NEXT], ctl[REQ_CAP] - ctl[REQ_N]):
                fctl[T_RET] = t
                return REFILL
            if tell(st, t) != 0:
                fctl[T_RET] = t
                return LIVELOCK
            _submitted(st, ctl[REQ_N])
        if ctl[PENDING]:
            intake_run(st, t)  # the step's outputs wait for the piece of intake in progress
            update(st, t)
            if _clients_due(st, t):  # told at the step's end: they send before the next step
                continue
        fctl[T_RET] = t
        if ctl[IDLE] >= cfg[STALL_STEPS]:
            return STALL
        if ctl[FIN_N] > 0 and (cfg[WAITERS] != 0 or 0 <= ctl[STOP_AFTER] <= ctl[FIN_N]):
            # Their clients can react only when they are told: if that is after now (behind an API
            # server), nothing they do can reach this step, so it is scheduled first and they are
            # reported with it; else the caller reports them now and calls again.
            if 0 <= ctl[STOP_AFTER] <= ctl[FIN_N] or not _all_told_later(st, t):
                return NOTIFY
            report = True
        if ctl[STEPS] >= cfg[MAX_STEPS]:
            return MAX_STEPS_HIT
        if ctl[STAGE_N] == cfg[STAGE_CAP]:
            return UNSTAGE
        if cfg[TRACE] != 0 and ctl[TRACE_N] + trace_room > st.trace.shape[0]:
            return UNTRACE
        paced = False  # the engine waited for its API server past a time its clients are told
        while True:
            intake_run(st, t)
            t0 = step_start(st.cp, t, fctl[FE_BATCH])
            if t0 <= t:
                break
            # the API server has not yet taken the last step's outputs (pieces of intake may push
            if not t0 < peek:  # them back meanwhile: look again then)
                fctl[T_RET] = t0  # something outside may act first
                return PACED
            t = t0
            if _clients_due(st, t):
                paced = True
                break
        if paced:  # clients told meanwhile send before the engine looks again
            continue
        fctl[T_RET] = t
        rejected = ctl[FIN_N]
        _take_in(st, t)
        if ctl[FIN_N] > rejected and (cfg[WAITERS] != 0 or 0 <= ctl[STOP_AFTER] <= ctl[FIN_N]):
            return NOTIFY  # rejected requests' clients learn of it now
        if ctl[FIN_N] > rejected and _clients_due(st, t):  # (only rejections can be due now)
            continue
        if ctl[N_RUN] == 0 and ctl[WQ_LEN] == 0 and ctl[SW_LEN] == 0:
            free_ended(st)  # (an empty scheduling: those that ended last are freed now)
            t_next = next_intake_event(st)  # an idle engine waits for the next request to reach it
            if cfg[CLOOP] != 0 and ctl[PD_N] > 0:
                t_next = min(t_next, first_told(st))
            if t_next < peek and not report:  # (ended requests to report first: their clients may act)
                t = t_next
                continue
            fctl[T_WAKE] = t_next
            return IDLE_NOW
        if cfg[SGLANG] != 0:
            schedule_sglang(st, t)
        else:
            schedule(st, t)
        t_end = t + apply_step(st, t)
        if report or not t_end < peek:
            fctl[T_RET] = t_end
            return STEPPED
        t = t_end  # the loop's first lines end the step
