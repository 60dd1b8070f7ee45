"""The engine step compiled with numba: the same scheduler, block pool, prefix cache and cost model
as the Python modules, for the configurations they share with it, many steps per call.

``simulator/scheduler.py``, ``kv_cache.py``, ``block_pool.py`` and ``cost.py`` are the reference:
this module reproduces what they compute, float for float (tests/test_compiled.py compares every
output column byte for byte on random scenarios). It covers FCFS scheduling with recompute
preemption and requests without shared prefixes or sessions, where a cached block is only ever
re-used by the request that computed it. That makes every block held by at most one request: a
running request's block table is a row of ``tables`` (rows are handed out at admission and taken
back when it stops running), and its indexed ("own") blocks are a linked list threaded through
the blocks, in insertion order, from which the pool unlinks a block the moment it hands it out
again (its content is evicted then), so the list only holds live copies.

State lives in numpy arrays owned by ``simulator/fast_engine.py``; scalars in ``ctl`` (int64) at
the slots below. One call of ``advance`` finishes the step in flight (if any) and runs steps until
something outside the engine could observe or change the state (the next SimPy event, a finished
request someone waits for, a full step-log stage), then returns a code telling the caller why.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic

# ---- ctl slots (int64 scalars shared with the Python side) ------------------------------------
N_RUN = 0  # running requests (the live slots among the first END)
Q_HEAD = 1  # waiting queue: a ring in ``fifo``, head index and length
Q_LEN = 2
FREE = 3  # free blocks
P_HEAD = 4  # free queue: valid entries between P_HEAD and P_TAIL of ``queue``
P_TAIL = 5
STAMP = 6  # serial of the latest release
STEPS = 7  # engine steps scheduled
IDLE = 8  # steps in a row without a token computed for the first time
PENDING = 9  # 1: the last scheduled step's outcome is not applied yet
STAGE_N = 10  # rows in the step-log stage
ROWS = 11  # step-log rows completed
ITL_N = 12  # inter-token gaps counted into the log's histogram
FIN_NOW = 13  # finished at the call's start (outcome of the step in flight)
FIN_LATER = 14  # finished by steps completed inside the call
STALLED = 15  # 1: the step in flight computes no new token
ROWS_FREE = 16  # block-table rows not in use: the first ROWS_FREE entries of ``rows``
END = 17  # slots in use: the running requests, in order, and holes left by finished ones
LAZY = 18  # lazy running slots (see "decode slots kept lazily")
LAZY_SUM = 19  # their tokens computed at S_G0, minus S_G0, summed
IN_NEXT = 20  # requests from IN_NEXT to IN_END (set by the caller) are new: queue those still waiting
IN_END = 21
N_CTL = 22

# ---- cfg slots --------------------------------------------------------------------------------
MAX_SEQS, BUDGET, BS, CACHING, THR, FULL_PROMPT, STAGE_CAP, WAITERS, MAX_STEPS, STALL_STEPS, ITL_BINS = range(11)
N_CFG = 11

# ---- per-block columns ---------------------------------------------------------------------------
# A block is in the free queue exactly when no request holds it (ref 0), at the entry whose serial
# is its own; int32 throughout.
B_REF, B_SERIAL, B_OWN, B_ONEXT, B_OPREV, B_OCOL = range(6)
N_BCOLS = 6

# ---- per-request columns (besides the RequestTable's) ------------------------------------------
X_OHEAD, X_OTAIL = range(2)  # its indexed blocks' first and last
N_XCOLS = 2

# ---- running slots: the running list, in order, with the fields every step reads and writes ------
# S_A: tokens this step; S_G0, S_EVT: a lazy slot's update and due step (-1: explicit); S_ROW: its
# block table's row in ``tables``. A finished request's slot is a hole (S_RID -1) until the slots
# close up.
S_RID, S_NTOK, S_NCOMP, S_NOUT, S_MAXT, S_NBLK, S_HWM, S_A, S_G0, S_EVT, S_ROW = range(11)
N_SCOLS = 11

# ---- the RequestTable's int64 and float64 tables: leading columns (requests.ROW_LAYOUT) ---------
INT_LEAD = ("num_tokens", "num_computed", "num_out", "max_tokens", "computed_hwm", "num_blocks", "cached_tokens",
            "recomputed")
I_NTOK, I_NCOMP, I_NOUT, I_MAXT, I_HWM, I_NBLK, I_CACHED, I_RECOMP = range(8)
FLOAT_LEAD = ("first_scheduled", "first_token", "last_token", "finish")
F_FSCHED, F_FTOK, F_LTOK, F_FIN = range(4)

# ---- cost parameters (CostModel's attributes, in this order) ----------------------------------
COST_FIELDS = (
    "_fixed_s", "per_seq_overhead_s", "per_token_overhead_s", "_lin_params", "_c_mm", "_wbytes",
    "_act_bytes_per_token", "_m_mm", "_attn_flops_per_pair", "_c_at", "_kv_bytes", "_m_at", "_lm_flops",
    "_lm_bytes", "_moe_layers", "_ar_count", "experts_per_token", "num_experts", "_expert_params",
    "_shared_params", "_ar_bytes_per_token", "interconnect_bandwidth", "allreduce_latency_s",
)
(C_FIXED, C_PSO, C_PTO, C_LIN, C_CMM, C_WB, C_ACT, C_MMM, C_AFP, C_CAT, C_KVB, C_MAT, C_LMF, C_LMB,
 C_MOE, C_ARC, C_K, C_E, C_EXP, C_SHR, C_ARB, C_ICB, C_ARL) = range(len(COST_FIELDS))
# Then the ITL histogram's scale (step_log: log10 of the lowest bin edge, bins per decade).
C_ITL_LO, C_ITL_PER_DECADE = len(COST_FIELDS), len(COST_FIELDS) + 1

# ---- what ``advance`` returns -----------------------------------------------------------------
STEPPED = 0  # a step is under way until ``t``: yield until then, call again
IDLE_NOW = 1  # nothing to run at ``t``: wait for a submission
NOTIFY = 2  # requests someone waits for finished at ``t``: notify them, call again
UNSTAGE = 3  # the step-log stage is full: move it out, call again
MAX_STEPS_HIT = 4
STALL = 5

# RequestTable status codes (simulator/requests.py)
_WAITING, _RUNNING, _FINISHED = 0, 1, 3


@njit(cache=True)
def step_time(cp, num_seqs, T, context_tokens, attn_pairs, num_sampled):
    """``CostModel.step_time`` (swap-free steps), the same float operations in the same order."""
    t = cp[C_FIXED] + cp[C_PSO] * num_seqs + cp[C_PTO] * T
    if T:
        t += max(2.0 * T * cp[C_LIN] / cp[C_CMM], (cp[C_LIN] * cp[C_WB] + T * cp[C_ACT]) / cp[C_MMM])
        t += max(attn_pairs * cp[C_AFP] / cp[C_CAT], (context_tokens + T) * cp[C_KVB] / cp[C_MAT])
        if cp[C_MOE] != 0.0 or cp[C_ARC] != 0.0:
            s = 0.0
            if cp[C_MOE] != 0.0:
                flops = 2.0 * T * cp[C_MOE] * (cp[C_K] * cp[C_EXP] + cp[C_SHR])
                p_miss = (1.0 - cp[C_K] / cp[C_E]) ** float(T)
                touched = cp[C_E] * (1.0 - p_miss)
                nbytes = cp[C_MOE] * (touched * cp[C_EXP] + cp[C_SHR]) * cp[C_WB]
                s += max(flops / cp[C_CMM], nbytes / cp[C_MMM])
            if cp[C_ARC] != 0.0:
                s += T * cp[C_ARB] / cp[C_ICB] + cp[C_ARC] * cp[C_ARL]
            t += s
    if num_sampled:
        t += max(num_sampled * cp[C_LMF] / cp[C_CMM], cp[C_LMB] / cp[C_MMM])
    return t


# ---- block pool -------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _unlink_own(B, X, b):
    """Drop block ``b`` from its owner's list of indexed blocks (its content is evicted)."""
    r, p, n = B[b, B_OWN], B[b, B_OPREV], B[b, B_ONEXT]
    if p >= 0:
        B[p, B_ONEXT] = n
    else:
        X[r, X_OHEAD] = n
    if n >= 0:
        B[n, B_OPREV] = p
    else:
        X[r, X_OTAIL] = p
    B[b, B_OWN] = -1


@njit(cache=True, inline="always")
def _own_append(B, X, rid, b):
    """Put block ``b`` at the end of ``rid``'s indexed blocks."""
    t = X[rid, X_OTAIL]
    B[b, B_OPREV] = t
    B[b, B_ONEXT] = -1
    if t >= 0:
        B[t, B_ONEXT] = b
    else:
        X[rid, X_OHEAD] = b
    X[rid, X_OTAIL] = b


@njit(cache=True, inline="always")
def _take_row(rows, ctl):
    """A block-table row for a request that starts running."""
    k = ctl[ROWS_FREE] - 1
    ctl[ROWS_FREE] = k
    return rows[k]


@njit(cache=True, inline="always")
def _allocate(B, X, tables, queue, ctl, row, have, m):
    """Take ``m`` blocks from the head of the free queue onto the end of the block table in ``row``,
    which holds ``have`` blocks."""
    h = ctl[P_HEAD]
    for k in range(m):
        while True:
            b = queue[0, h]
            s = queue[1, h]
            h += 1
            if B[b, B_REF] == 0 and B[b, B_SERIAL] == s:
                break
        B[b, B_REF] = 1
        if B[b, B_OWN] >= 0:
            _unlink_own(B, X, b)
        tables[row, have + k] = b
    ctl[P_HEAD] = h
    ctl[FREE] -= m


@njit(cache=True)
def _compact(B, queue, ctl, front, back):
    """Drop stale free-queue entries and re-centre the live ones, leaving room on both sides."""
    h, t = ctl[P_HEAD], ctl[P_TAIL]
    ids = np.empty(t - h, np.int64)
    ser = np.empty(t - h, np.int64)
    live = 0
    for i in range(h, t):
        b = queue[0, i]
        if B[b, B_REF] == 0 and B[b, B_SERIAL] == queue[1, i]:
            ids[live] = b
            ser[live] = queue[1, i]
            live += 1
    cap = queue.shape[1]
    nh = (cap - (live + front + back)) // 2 + front
    for i in range(live):
        queue[0, nh + i] = ids[i]
        queue[1, nh + i] = ser[i]
    ctl[P_HEAD] = nh
    ctl[P_TAIL] = nh + live


@njit(cache=True, inline="always")
def _free_table(B, tables, rows, queue, ctl, buf, row, nblocks, nfull, caching):
    """Release the ``nblocks`` blocks of the table in ``row``, tail first: blocks past its first
    ``nfull`` (no hash) to the head of the free queue, the first going first; hashed ones to the tail
    (``BlockPool.free``). The row goes back to the free rows."""
    nf = 0
    nb = 0
    for pos in range(nblocks - 1, -1, -1):
        b = tables[row, pos]
        B[b, B_REF] -= 1
        if B[b, B_REF] == 0:
            if caching and pos < nfull:
                buf[1, nb] = b
                nb += 1
            else:
                buf[0, nf] = b
                nf += 1
    rows[ctl[ROWS_FREE]] = row
    ctl[ROWS_FREE] += 1
    if nf + nb == 0:
        return
    ctl[STAMP] += 1
    st = ctl[STAMP]
    if ctl[P_HEAD] < nf or ctl[P_TAIL] + nb > queue.shape[1]:
        _compact(B, queue, ctl, nf, nb)
    h = ctl[P_HEAD] - nf
    for i in range(nf):
        b = buf[0, i]
        B[b, B_SERIAL] = st
        queue[0, h + i] = b
        queue[1, h + i] = st
    ctl[P_HEAD] = h
    t = ctl[P_TAIL]
    for i in range(nb):
        b = buf[1, i]
        B[b, B_SERIAL] = st
        queue[0, t + i] = b
        queue[1, t + i] = st
    ctl[P_TAIL] = t + nb
    ctl[FREE] += nf + nb


@njit(cache=True, inline="always")
def _index_own(B, X, tables, rid, row, nfull):
    """Index ``rid``'s first ``nfull`` blocks (its table is ``row``) under its own content (after the
    copies already there)."""
    for col in range(nfull):
        b = tables[row, col]
        if B[b, B_OWN] != rid:
            B[b, B_OWN] = rid
            B[b, B_OCOL] = col
            _own_append(B, X, rid, b)


@njit(cache=True, inline="always")
def _lookup(B, X, hits, rid, ntok, bs):
    """Cached leading blocks of ``rid`` (earliest indexed live copy of each), into ``hits``; how many."""
    limit = (ntok - 1) // bs
    b = X[rid, X_OHEAD]
    if limit <= 0 or b < 0:
        return 0
    for k in range(limit):
        hits[k] = -1
    while b >= 0:
        c = B[b, B_OCOL]
        if c < limit and hits[c] < 0:
            hits[c] = b
        b = B[b, B_ONEXT]
    nh = 0
    while nh < limit and hits[nh] >= 0:
        nh += 1
    return nh


# ---- decode slots kept lazily ---------------------------------------------------------------------
# A running request that decodes (one token a step, none to recompute, a token sampled every step)
# changes the same way every step until it needs a block or finishes. Its slot is then "lazy": its
# fields stay as they were after the update S_G0 that made it so, the steps since then are implied
# (ctl[ROWS] - S_G0 of them, and it sampled last at the latest update, whose time the caller keeps),
# and each step counts the lazy slots' work as one sum (ctl LAZY, LAZY_SUM). The schedule of step
# S_EVT visits a lazy slot: if it needs a block then, it gets it and stays lazy; if it finishes in
# that step's update, it is brought up to date ("materialized") and made explicit, as it is when
# preempted or when the budget could cut a step short. ``bits`` marks slots by step: row 0 the
# explicit (not lazy) running slots, row 1 + e % W (W = rows - 1 > block size + 1) the lazy slots
# due at step e.
@intrinsic
def _cttz(typingctx, x):
    """Trailing zero bits of a nonzero uint64."""
    if x != types.uint64:
        return None

    def codegen(context, builder, sig, args):
        return builder.cttz(args[0], cgutils.true_bit)

    return types.uint64(types.uint64), codegen


@njit(cache=True, inline="always")
def _next_marked(w, x):
    """The lowest slot marked in word ``w`` of a bitmap row, whose remaining bits are ``x`` (nonzero),
    and the bits left after it."""
    return w * 64 + np.int64(_cttz(x)), x & (x - np.uint64(1))


@njit(cache=True, inline="always")
def _mark(bits, r, s):
    bits[r, s >> 6] |= np.uint64(1) << np.uint64(s & 63)


@njit(cache=True, inline="always")
def _unmark(bits, r, s):
    bits[r, s >> 6] &= ~(np.uint64(1) << np.uint64(s & 63))


@njit(cache=True, inline="always")
def _materialize(SI, SF, ctl, bits, s, tlast):
    """Bring lazy slot ``s`` up to date (as of the latest update, at ``tlast``) and make it explicit."""
    g0 = SI[s, S_G0]
    k = ctl[ROWS] - g0
    _unmark(bits, 1 + SI[s, S_EVT] % (bits.shape[0] - 1), s)
    _mark(bits, 0, s)
    ctl[LAZY] -= 1
    ctl[LAZY_SUM] -= SI[s, S_NCOMP] - g0
    SI[s, S_NCOMP] += k
    SI[s, S_NTOK] += k
    SI[s, S_NOUT] += k
    SI[s, S_HWM] = SI[s, S_NCOMP]
    SI[s, S_EVT] = -1
    SF[s] = tlast


@njit(cache=True, inline="always")
def _lazify(SI, ctl, bits, bs, s, g):
    """Make explicit slot ``s``, which has just sampled at update ``g``, lazy if it decodes and nothing
    happens to it at the next step."""
    nc = SI[s, S_NCOMP]
    if SI[s, S_NTOK] - nc != 1 or SI[s, S_HWM] != nc:
        return
    evt = min(g + 1 + SI[s, S_NBLK] * bs - nc, g + SI[s, S_MAXT] - SI[s, S_NOUT])
    if evt <= g + 1:
        return
    SI[s, S_G0] = g
    SI[s, S_EVT] = evt
    _unmark(bits, 0, s)
    _mark(bits, 1 + evt % (bits.shape[0] - 1), s)
    ctl[LAZY] += 1
    ctl[LAZY_SUM] += nc - g


@njit(cache=True, inline="always")
def _grow_lazy(B, X, tables, queue, ctl, SI, bits, bs, s, step):
    """Lazy slot ``s`` is due at ``step``: if that is for a block (it does not finish in this step)
    and one is free, give it the block and keep it lazy, due again at its next block or its finish.
    Returns whether it did."""
    g0 = SI[s, S_G0]
    fin = g0 + SI[s, S_MAXT] - SI[s, S_NOUT]
    if fin <= step:
        return False
    nb = SI[s, S_NBLK]
    m = (SI[s, S_NCOMP] + ctl[ROWS] - g0 + bs) // bs - nb  # blocks for one more token
    if m > ctl[FREE]:
        return False
    _allocate(B, X, tables, queue, ctl, SI[s, S_ROW], nb, m)
    nb += m
    SI[s, S_NBLK] = nb
    evt = min(g0 + 1 + nb * bs - SI[s, S_NCOMP], fin)
    W = bits.shape[0] - 1
    _unmark(bits, 1 + SI[s, S_EVT] % W, s)
    _mark(bits, 1 + evt % W, s)
    SI[s, S_EVT] = evt
    return True


@njit(cache=True)
def _close_up(SI, SF, ctl, bits):
    """Move the running slots down over the holes finished requests left, in order; re-mark them."""
    kept = 0
    W = bits.shape[0] - 1
    bits[:, :] = 0
    for s in range(ctl[END]):
        if SI[s, S_RID] >= 0:
            if kept != s:
                for c in range(N_SCOLS):
                    SI[kept, c] = SI[s, c]
                SF[kept] = SF[s]
            e = SI[kept, S_EVT]
            _mark(bits, 0 if e < 0 else 1 + e % W, kept)
            kept += 1
    ctl[END] = kept


@njit(cache=True, inline="always")
def _tail(SI, end):
    """The last running slot before ``end``."""
    e = end - 1
    while SI[e, S_RID] < 0:
        e -= 1
    return e


# ---- the scheduler ------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _write_back(RI, RF, SI, SF, s):
    """Copy running slot ``s`` back into its request's record (the record is stale while it runs)."""
    rid = SI[s, S_RID]
    RI[rid, I_NTOK] = SI[s, S_NTOK]
    RI[rid, I_NCOMP] = SI[s, S_NCOMP]
    RI[rid, I_NOUT] = SI[s, S_NOUT]
    RI[rid, I_HWM] = SI[s, S_HWM]
    RI[rid, I_NBLK] = SI[s, S_NBLK]
    RF[rid, F_LTOK] = SF[s]


@njit(cache=True, inline="always")
def _preempt(RI, RF, SI, SF, P32, S8, B, X, tables, rows, queue, ctl, cfg, buf, fifo, s):
    """Recompute preemption of (explicit) running slot ``s`` (``Scheduler._preempt``): index its full
    blocks, release its table, send it to the front of the waiting queue with nothing computed."""
    rid = SI[s, S_RID]
    P32[rid, 0] += 1
    nfull = SI[s, S_NCOMP] // cfg[BS]
    caching = cfg[CACHING] != 0
    if caching and nfull > 0:
        _index_own(B, X, tables, rid, SI[s, S_ROW], nfull)
    _free_table(B, tables, rows, queue, ctl, buf, SI[s, S_ROW], SI[s, S_NBLK], nfull, caching)
    SI[s, S_NBLK] = 0
    SI[s, S_NCOMP] = 0
    _write_back(RI, RF, SI, SF, s)
    S8[rid] = _WAITING
    cap = fifo.shape[0]
    h = (ctl[Q_HEAD] - 1 + cap) % cap
    fifo[h] = rid
    ctl[Q_HEAD] = h
    ctl[Q_LEN] += 1


@njit(cache=True)
def _schedule(RI, RF, SI, SF, P32, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, hits, bits, fifo, stage, t,
              tlast):
    """``Scheduler.schedule`` at time ``t``: sets each explicit running slot's tokens this step
    (``S_A``; a lazy slot's is one), admits waiting requests into new slots, and writes the step's
    log row; returns its duration. ``tlast``: the time of the latest update."""
    bs = cfg[BS]
    budget = cfg[BUDGET]
    thr = cfg[THR]
    if ctl[N_RUN] + ctl[Q_LEN] <= 1:
        thr = 0
    nw = bits.shape[1]
    step = ctl[ROWS] + 1
    due = 1 + step % (bits.shape[0] - 1)  # this step's bucket
    # If the budget may not cover every running request's tokens, it is shared out in running
    # order, one request at a time: every slot is made explicit for that.
    want = ctl[LAZY]
    for w in range(nw):
        x = bits[0, w]
        while x != 0:
            s, x = _next_marked(w, x)
            need = SI[s, S_NTOK] - SI[s, S_NCOMP]
            want += need if thr <= 0 or need <= thr else thr
    if want > budget:
        for s in range(ctl[END]):
            if SI[s, S_RID] >= 0 and SI[s, S_EVT] >= 0:
                _materialize(SI, SF, ctl, bits, s, tlast)
    # Running requests in order (the lazy ones take one token each and need nothing: only those due
    # now are visited); a request that cannot get its blocks preempts from the tail.
    npre = 0
    end = ctl[END]
    live = ctl[N_RUN]
    done = False
    for w in range(nw):
        x = bits[0, w] | bits[due, w]
        while x != 0:
            j, x = _next_marked(w, x)
            if j >= end:
                done = True
                break
            if SI[j, S_EVT] >= 0:
                if _grow_lazy(B, X, tables, queue, ctl, SI, bits, bs, j, step):
                    continue
                _materialize(SI, SF, ctl, bits, j, tlast)
            nc = SI[j, S_NCOMP]
            need = SI[j, S_NTOK] - nc
            if thr > 0 and need > thr:
                need = thr
            a = need if need < budget else budget
            # New blocks: ceil((nc + a) / bs) - blocks held, or none when they already cover nc + a.
            nb = SI[j, S_NBLK]
            m = 0 if nc + a <= nb * bs else (nc + a + bs - 1) // bs - nb
            while m > ctl[FREE] and end > j:
                e = _tail(SI, end)
                if SI[e, S_EVT] >= 0:
                    _materialize(SI, SF, ctl, bits, e, tlast)
                _preempt(RI, RF, SI, SF, P32, S8, B, X, tables, rows, queue, ctl, cfg, buf, fifo, e)
                _unmark(bits, 0, e)
                live -= 1
                npre += 1
                end = e
            if end == j:
                done = True
                break
            if m > 0:
                _allocate(B, X, tables, queue, ctl, SI[j, S_ROW], nb, m)
                SI[j, S_NBLK] = nb + m
            SI[j, S_A] = a
            budget -= a
        if done:
            break
    budget -= ctl[LAZY]
    ctl[N_RUN] = live
    ctl[END] = end
    # Waiting requests in queue order, only if nobody was preempted.
    if npre == 0:
        cap = fifo.shape[0]
        while budget > 0 and ctl[N_RUN] < cfg[MAX_SEQS] and ctl[Q_LEN] > 0:
            rid = fifo[ctl[Q_HEAD]]
            nt = RI[rid, I_NTOK]
            nh = _lookup(B, X, hits, rid, nt, bs) if cfg[CACHING] != 0 else 0
            nev = 0
            for k in range(nh):
                if B[hits[k], B_REF] == 0:
                    nev += 1
            need = nt - nh * bs
            if thr > 0 and need > thr:
                need = thr
            a = need if need < budget else budget
            m = (nh * bs + a + bs - 1) // bs - nh
            gate = (nt + bs - 1) // bs - nh if cfg[FULL_PROMPT] != 0 else m
            if gate + nev > ctl[FREE]:
                break
            ctl[Q_HEAD] = (ctl[Q_HEAD] + 1) % cap
            ctl[Q_LEN] -= 1
            row = _take_row(rows, ctl)
            for k in range(nh):
                b = hits[k]
                if B[b, B_REF] == 0:
                    ctl[FREE] -= 1
                B[b, B_REF] += 1
                tables[row, k] = b
            if m > 0:
                _allocate(B, X, tables, queue, ctl, row, nh, m)
            if RI[rid, I_CACHED] < 0:
                RI[rid, I_CACHED] = nh * bs
                RF[rid, F_FSCHED] = t
            S8[rid] = _RUNNING
            if ctl[END] == SI.shape[0]:
                _close_up(SI, SF, ctl, bits)
            s = ctl[END]
            ctl[END] = s + 1
            ctl[N_RUN] += 1
            SI[s, S_RID] = rid
            SI[s, S_NTOK] = nt
            SI[s, S_NCOMP] = nh * bs
            SI[s, S_NOUT] = RI[rid, I_NOUT]
            SI[s, S_MAXT] = RI[rid, I_MAXT]
            SI[s, S_NBLK] = nh + m
            SI[s, S_HWM] = RI[rid, I_HWM]
            SI[s, S_A] = a
            SI[s, S_EVT] = -1
            SI[s, S_ROW] = row
            SF[s] = RF[rid, F_LTOK]
            _mark(bits, 0, s)
            budget -= a
    # The step's work: the explicit slots one by one, in order; the lazy ones all decode one token.
    lazy = ctl[LAZY]
    lctx = ctl[LAZY_SUM] + lazy * ctl[ROWS]
    ns = lazy
    total = lazy
    decode = lazy
    ctx = lctx
    s1 = lctx
    s2 = 2 * lazy
    nsamp = lazy
    rec = 0
    for w in range(nw):
        x = bits[0, w]
        while x != 0:
            s, x = _next_marked(w, x)
            a = SI[s, S_A]
            if a == 0:
                continue
            ns += 1
            before = SI[s, S_NCOMP]
            after = before + a
            SI[s, S_NCOMP] = after
            h = SI[s, S_HWM]
            r = (after if after < h else h) - before
            if r > 0:
                RI[SI[s, S_RID], I_RECOMP] += r
                rec += r
            if after > h:
                SI[s, S_HWM] = after
            if after == SI[s, S_NTOK]:
                nsamp += 1
                if a == 1 and before > 0:
                    decode += 1
            total += a
            ctx += before
            s1 += a * before
            s2 += a * (a + 1)
    dt = step_time(cp, ns, total, ctx, float(s1) + 0.5 * float(s2), nsamp)
    row = ctl[STAGE_N]
    stage[0, row] = t
    stage[1, row] = dt
    stage[2, row] = ctl[N_RUN]
    stage[3, row] = ctl[Q_LEN]
    stage[4, row] = 0
    stage[5, row] = ctl[FREE]
    stage[6, row] = ns
    stage[7, row] = total - decode
    stage[8, row] = decode
    stage[9, row] = rec
    stage[10, row] = npre
    ctl[STALLED] = 1 if total - rec <= 0 else 0
    ctl[STEPS] += 1
    ctl[PENDING] = 1
    return dt


@njit(cache=True, inline="always")
def _itl_bin(gap, cp, nbins):
    """The histogram bin of one gap (``StepLog._bin``'s arithmetic, one value at a time)."""
    b = (np.log10(max(gap, 1e-12)) - cp[C_ITL_LO]) * cp[C_ITL_PER_DECADE]
    i = int(np.floor(b)) + 1
    return min(max(i, 0), nbins + 1)


@njit(cache=True)
def _update(RI, RF, SI, SF, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, bits, stage, hist, fin, t, tlast,
            later):
    """``Scheduler.update`` at the end of the step in flight (time ``t``; the update before it was at
    ``tlast``), and its log row: the slots that computed their last pending token sample one (every
    lazy slot does); finished ones release their blocks (in running order) and leave a hole in the
    running list, which closes up once holes are a quarter of it; the others that decode turn lazy."""
    k = 0
    nsamp = 0
    ndone = 0
    run_gap = -1.0  # the gaps of a step come in runs of equal values (requests that ran the step before)
    run_n = 0
    bs = cfg[BS]
    caching = cfg[CACHING] != 0
    nf = ctl[FIN_NOW] + ctl[FIN_LATER]
    g = ctl[ROWS] + 1  # this update's number
    lazy = ctl[LAZY]
    if lazy:
        hist[_itl_bin(t - tlast, cp, cfg[ITL_BINS])] += lazy
        k += lazy
        nsamp += lazy
    for w in range(bits.shape[1]):
        x = bits[0, w]
        while x != 0:
            s, x = _next_marked(w, x)
            if SI[s, S_A] > 0 and SI[s, S_NCOMP] == SI[s, S_NTOK]:
                nsamp += 1
                SI[s, S_NTOK] += 1
                o = SI[s, S_NOUT] + 1
                SI[s, S_NOUT] = o
                if o > 1:
                    gap = t - SF[s]
                    k += 1
                    if gap == run_gap:
                        run_n += 1
                    else:
                        if run_n:
                            hist[_itl_bin(run_gap, cp, cfg[ITL_BINS])] += run_n
                        run_gap = gap
                        run_n = 1
                else:
                    RF[SI[s, S_RID], F_FTOK] = t
                SF[s] = t
                if o >= SI[s, S_MAXT]:
                    rid = SI[s, S_RID]
                    _free_table(B, tables, rows, queue, ctl, buf, SI[s, S_ROW], SI[s, S_NBLK], SI[s, S_NCOMP] // bs,
                                caching)
                    SI[s, S_NBLK] = 0
                    _write_back(RI, RF, SI, SF, s)
                    S8[rid] = _FINISHED
                    RF[rid, F_FIN] = t
                    if cfg[WAITERS] != 0:
                        fin[nf + ndone] = rid
                    ndone += 1
                    SI[s, S_RID] = -1
                    _unmark(bits, 0, s)
                    ctl[N_RUN] -= 1
                    continue
                _lazify(SI, ctl, bits, bs, s, g)
    if (ctl[END] - ctl[N_RUN]) * 4 > ctl[END]:
        _close_up(SI, SF, ctl, bits)
    ctl[FIN_LATER if later else FIN_NOW] += ndone
    if run_n:
        hist[_itl_bin(run_gap, cp, cfg[ITL_BINS])] += run_n
    ctl[ITL_N] += k
    row = ctl[STAGE_N]
    stage[11, row] = nsamp
    stage[12, row] = ndone
    ctl[STAGE_N] = row + 1
    ctl[ROWS] = g
    if ctl[STALLED]:
        ctl[IDLE] += 1
    else:
        ctl[IDLE] = 0
    ctl[PENDING] = 0


@njit(cache=True)
def write_back_all(RI, RF, SI, SF, ctl, bits, tlast):
    """Bring the records of the running requests up to date (their slots hold the live values; a
    lazy slot's token of a step still in flight counts as computed, as the scheduler counts it).
    Lazy slots become explicit ones, as if scheduled one by one, so stepping on stays exact."""
    for s in range(ctl[END]):
        if SI[s, S_RID] < 0:
            continue
        if SI[s, S_EVT] >= 0:
            _materialize(SI, SF, ctl, bits, s, tlast)
            if ctl[PENDING]:
                SI[s, S_NCOMP] += 1
                SI[s, S_HWM] = SI[s, S_NCOMP]
                SI[s, S_A] = 1
        _write_back(RI, RF, SI, SF, s)


@njit(cache=True)
def advance(RI, RF, SI, SF, P32, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, hits, bits, fifo, stage, hist, fin,
            fctl):
    """Finish the step in flight at ``fctl[0]`` (now), then run steps while nothing outside the
    engine can intervene: each later step must start before ``fctl[1]`` (the next SimPy event).
    Returns a code (see the module constants) and the time it refers to in ``fctl[2]``; ``fctl[3]``
    keeps the time of the latest update.

    ``RI``, ``RF``, ``P32``, ``S8``: the RequestTable's int64, float64, int32 tables and status column;
    ``SI``, ``SF``: the running slots (``write_back_all`` brings the records up to date);
    ``tables``: block-table rows, wide enough for any submitted request's blocks; ``bits``: the
    running slots marked by when they need attention (see "decode slots kept lazily").
    """
    t = fctl[0]
    peek = fctl[1]
    ctl[FIN_NOW] = 0
    ctl[FIN_LATER] = 0
    cap = fifo.shape[0]
    for rid in range(ctl[IN_NEXT], ctl[IN_END]):  # submitted since the last call, in order
        if S8[rid] == _WAITING:
            fifo[(ctl[Q_HEAD] + ctl[Q_LEN]) % cap] = rid
            ctl[Q_LEN] += 1
    ctl[IN_NEXT] = ctl[IN_END]
    single = False
    if ctl[PENDING]:
        _update(RI, RF, SI, SF, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, bits, stage, hist, fin, t, fctl[3],
                False)
        fctl[3] = t
        # Someone waits for a request that just finished: they act at this instant, after the
        # next step is scheduled and before it ends, so only one step can be scheduled now.
        single = cfg[WAITERS] != 0 and ctl[FIN_NOW] > 0
    first = True
    while True:
        fctl[2] = t
        if ctl[IDLE] >= cfg[STALL_STEPS]:
            return STALL
        if not first and cfg[WAITERS] != 0 and ctl[FIN_LATER] > 0:
            return NOTIFY
        if ctl[N_RUN] == 0 and ctl[Q_LEN] == 0:
            return IDLE_NOW
        if ctl[STEPS] >= cfg[MAX_STEPS]:
            return MAX_STEPS_HIT
        if ctl[STAGE_N] == cfg[STAGE_CAP]:
            return UNSTAGE
        dt = _schedule(RI, RF, SI, SF, P32, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, hits, bits, fifo, stage,
                       t, fctl[3])
        t_end = t + dt
        first = False
        if single or not t_end < peek:
            fctl[2] = t_end
            return STEPPED
        _update(RI, RF, SI, SF, S8, B, X, tables, rows, queue, ctl, cfg, cp, buf, bits, stage, hist, fin, t_end,
                fctl[3], True)
        fctl[3] = t_end
        t = t_end
