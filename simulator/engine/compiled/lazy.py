"""Running slots, and decode slots kept lazily.

The running list is a dense array of slots (``st.slots``, ``st.slot_time``: the fields every step touches,
side by side) in admission order; a request that stops running leaves a hole (``S_RID`` -1) until
the slots close up. The request's record is brought up to date when it stops running and at the end
of the run (``write_back``).

A running request that decodes (one token a step, none to recompute, a token sampled every step)
changes the same way every step until it needs a block or finishes. Its slot is then "lazy": its
fields stay as they were after the update ``S_G0`` that made it so, the steps since then are implied
(``ctl[ROWS] - S_G0`` of them; it sampled last at the latest update, whose time is ``fctl[T_LAST]``),
and each step counts the lazy slots' work as one sum (``LAZY``, ``LAZY_SUM``). The schedule of step
``S_EVT`` visits a lazy slot: if it needs a block then, it gets it and stays lazy; if it finishes in
that step it is brought up to date ("materialized") and made explicit, as it is when preempted or
when the budget could cut a step short. ``st.bits`` marks slots by step: row 0 the explicit
running slots, row 1 + e % W (W = rows - 1 > block size + 1) the lazy slots due at step e.
"""

from __future__ import annotations

import numpy as np

from simulator.engine.compiled.adapters import lora_start
from simulator.engine.compiled.layout import (
    BS,
    END,
    F_LTOK,
    FREE,
    I_HWM,
    I_MAXT,
    I_NBLK,
    I_NCOMP,
    I_NOUT,
    I_NTOK,
    LAZY,
    LAZY_SUM,
    N_RUN,
    N_S,
    OUTPUTS_LATE,
    PENDING,
    ROWS,
    S_A,
    S_EVT,
    S_G0,
    S_HASHABLE,
    S_HWM,
    S_MAXT,
    S_NBLK,
    S_NCOMP,
    S_NOUT,
    S_NTOK,
    S_RID,
    S_ROW,
    S_SPEC,
    S_THEN,
    SPEC_K,
    T_LAST,
)
from simulator.engine.compiled.pool import take_blocks
from simulator.engine.rules import cacheable, known_tokens

COLD = ("close_up", "write_back_all")  # not inlined (see build.py)

_ONE = np.uint64(1)


def lowest_bit(x):
    """Index of the lowest set bit of a nonzero uint64."""
    n = 0
    if (x & np.uint64(0xFFFFFFFF)) == 0:
        n += 32
        x >>= np.uint64(32)
    if (x & np.uint64(0xFFFF)) == 0:
        n += 16
        x >>= np.uint64(16)
    if (x & np.uint64(0xFF)) == 0:
        n += 8
        x >>= np.uint64(8)
    if (x & np.uint64(0xF)) == 0:
        n += 4
        x >>= np.uint64(4)
    if (x & np.uint64(0x3)) == 0:
        n += 2
        x >>= np.uint64(2)
    if (x & _ONE) == 0:
        n += 1
    return n


def next_marked(w, x):
    """The lowest slot marked in word ``w`` of a bitmap row, whose remaining bits are ``x`` (nonzero),
    and the bits left after it."""
    return w * 64 + lowest_bit(x), x & (x - _ONE)


def mark(bits, r, s):
    bits[r, s >> 6] |= _ONE << np.uint64(s & 63)


def unmark(bits, r, s):
    bits[r, s >> 6] &= ~(_ONE << np.uint64(s & 63))


def bucket(st, step):
    """The bitmap row of the lazy slots due at ``step``."""
    return 1 + step % (st.bits.shape[0] - 1)


def materialize(st, s):
    """Bring lazy slot ``s`` up to date (as of the latest update) and make it explicit."""
    slots, ctl = st.slots, st.ctl
    g0 = slots[s, S_G0]
    k = ctl[ROWS] - g0
    unmark(st.bits, bucket(st, slots[s, S_EVT]), s)
    mark(st.bits, 0, s)
    ctl[LAZY] -= 1
    ctl[LAZY_SUM] -= slots[s, S_NCOMP] - g0
    slots[s, S_NCOMP] += k
    slots[s, S_NTOK] += k
    slots[s, S_NOUT] += k
    slots[s, S_HWM] = slots[s, S_NCOMP]
    slots[s, S_EVT] = -1
    st.slot_time[s] = st.fctl[T_LAST]
    if k > 0:  # hashed as in its last implied step, one token on the one sampled in the step before
        ntok = slots[s, S_NTOK] - 1
        slots[s, S_THEN] = ntok - 1
        hash_as_scheduled(st, s, slots[s, S_NCOMP] - 1, ntok, 1)


def hash_as_scheduled(st, s, nc, ntok, a):
    """Slot ``s``, with ``nc`` of its ``ntok`` tokens computed, is scheduled ``a`` more: its blocks are
    hashed as far as its tokens are known (``rules.cacheable``, ``rules.known_tokens``; ``S_A``: the
    tokens it ran in the step before, kept by a lazy slot from the step that made it lazy)."""
    slots = st.slots
    known = known_tokens(ntok, slots[s, S_THEN], slots[s, S_A] > 0, st.cfg[OUTPUTS_LATE] != 0)
    slots[s, S_HASHABLE] = cacheable(nc + a, known)
    slots[s, S_THEN] = ntok


def lazify(st, s, g):
    """Make explicit slot ``s``, which has just sampled at update ``g``, lazy if it decodes and nothing
    happens to it at the next step."""
    slots, ctl = st.slots, st.ctl
    nc = slots[s, S_NCOMP]
    if slots[s, S_NTOK] - nc != 1 or slots[s, S_HWM] != nc or st.cfg[SPEC_K] != 0:
        return  # (with drafts to verify, a request's steps differ: each outputs what it accepts)
    bs = st.cfg[BS]
    evt = min(g + 1 + slots[s, S_NBLK] * bs - nc, g + slots[s, S_MAXT] - slots[s, S_NOUT])
    if evt <= g + 1:
        return
    slots[s, S_G0] = g
    slots[s, S_EVT] = evt
    unmark(st.bits, 0, s)
    mark(st.bits, bucket(st, evt), s)
    ctl[LAZY] += 1
    ctl[LAZY_SUM] += nc - g


def grow_lazy(st, s, step):
    """Lazy slot ``s`` is due at ``step``: if that is for a block (it does not finish in this step)
    and one is free, give it the block and keep it lazy, due again at its next block or its finish.
    Returns whether it did."""
    slots, ctl = st.slots, st.ctl
    g0 = slots[s, S_G0]
    fin = g0 + slots[s, S_MAXT] - slots[s, S_NOUT]
    if fin <= step:
        return False
    bs = st.cfg[BS]
    nb = slots[s, S_NBLK]
    m = (slots[s, S_NCOMP] + ctl[ROWS] - g0 + bs) // bs - nb  # blocks for one more token
    if m > ctl[FREE]:
        return False
    take_blocks(st, slots[s, S_ROW], nb, m)
    nb += m
    slots[s, S_NBLK] = nb
    evt = min(g0 + 1 + nb * bs - slots[s, S_NCOMP], fin)
    unmark(st.bits, bucket(st, slots[s, S_EVT]), s)
    mark(st.bits, bucket(st, evt), s)
    slots[s, S_EVT] = evt
    return True


def close_up(st):
    """Move the running slots down over the holes, in order; re-mark them."""
    slots, slot_time, bits, ctl = st.slots, st.slot_time, st.bits, st.ctl
    kept = 0
    bits[:, :] = 0
    for s in range(ctl[END]):
        if slots[s, S_RID] >= 0:
            if kept != s:
                for c in range(N_S):
                    slots[kept, c] = slots[s, c]
                slot_time[kept] = slot_time[s]
            e = slots[kept, S_EVT]
            mark(bits, 0 if e < 0 else bucket(st, e), kept)
            kept += 1
    ctl[END] = kept


def tail(st, end):
    """The last running slot before ``end``."""
    e = end - 1
    while st.slots[e, S_RID] < 0:
        e -= 1
    return e


def start_slot(st, rid, num_computed, num_blocks, tokens, row):
    """A slot at the end of the running list for ``rid``, which starts running with ``tokens`` this step."""
    ctl, slots, req_i64 = st.ctl, st.slots, st.req_i64
    if ctl[END] == slots.shape[0]:
        close_up(st)
    s = ctl[END]
    ctl[END] = s + 1
    ctl[N_RUN] += 1
    slots[s, S_RID] = rid
    slots[s, S_NTOK] = req_i64[rid, I_NTOK]
    slots[s, S_NCOMP] = num_computed
    slots[s, S_NOUT] = req_i64[rid, I_NOUT]
    slots[s, S_MAXT] = req_i64[rid, I_MAXT]
    slots[s, S_NBLK] = num_blocks
    slots[s, S_HWM] = req_i64[rid, I_HWM]
    slots[s, S_A] = tokens
    slots[s, S_G0] = -1
    slots[s, S_EVT] = -1
    slots[s, S_ROW] = row
    slots[s, S_SPEC] = 0  # drafts do not outlive a preemption
    slots[s, S_THEN] = slots[s, S_NTOK]
    slots[s, S_HASHABLE] = cacheable(num_computed + tokens, slots[s, S_NTOK])  # nothing of it in flight
    st.slot_time[s] = st.req_f64[rid, F_LTOK]
    mark(st.bits, 0, s)
    lora_start(st, rid)
    return s


def write_back(st, s):
    """Copy running slot ``s`` into its request's record (the record is stale while it runs)."""
    slots, req_i64 = st.slots, st.req_i64
    rid = slots[s, S_RID]
    req_i64[rid, I_NTOK] = slots[s, S_NTOK]
    req_i64[rid, I_NCOMP] = slots[s, S_NCOMP]
    req_i64[rid, I_NOUT] = slots[s, S_NOUT]
    req_i64[rid, I_HWM] = slots[s, S_HWM]
    req_i64[rid, I_NBLK] = slots[s, S_NBLK]
    st.req_f64[rid, F_LTOK] = st.slot_time[s]


def write_back_all(st):
    """Bring the records of the running requests up to date (their slots hold the live values; a
    lazy slot's token of a step still in flight counts as computed, as the scheduler counts it).
    Lazy slots become explicit ones, as if scheduled one by one, so stepping on stays exact."""
    slots, ctl = st.slots, st.ctl
    for s in range(ctl[END]):
        if slots[s, S_RID] < 0:
            continue
        if slots[s, S_EVT] >= 0:
            materialize(st, s)
            if ctl[PENDING]:
                hash_as_scheduled(st, s, slots[s, S_NCOMP], slots[s, S_NTOK], 1)
                slots[s, S_NCOMP] += 1
                slots[s, S_HWM] = slots[s, S_NCOMP]
                slots[s, S_A] = 1
        write_back(st, s)
