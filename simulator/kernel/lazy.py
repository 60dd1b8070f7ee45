"""Running slots, and decode slots kept lazily.

The running list is a dense array of slots (``st.SI``, ``st.SF``: the fields every step touches,
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

from simulator.kernel.layout import (
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
    PENDING,
    ROWS,
    S_A,
    S_EVT,
    S_G0,
    S_HWM,
    S_MAXT,
    S_NBLK,
    S_NCOMP,
    S_NOUT,
    S_NTOK,
    S_RID,
    S_ROW,
    T_LAST,
)
from simulator.kernel.pool import take_blocks

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
    SI, ctl = st.SI, st.ctl
    g0 = SI[s, S_G0]
    k = ctl[ROWS] - g0
    unmark(st.bits, bucket(st, SI[s, S_EVT]), s)
    mark(st.bits, 0, s)
    ctl[LAZY] -= 1
    ctl[LAZY_SUM] -= SI[s, S_NCOMP] - g0
    SI[s, S_NCOMP] += k
    SI[s, S_NTOK] += k
    SI[s, S_NOUT] += k
    SI[s, S_HWM] = SI[s, S_NCOMP]
    SI[s, S_EVT] = -1
    st.SF[s] = st.fctl[T_LAST]


def lazify(st, s, g):
    """Make explicit slot ``s``, which has just sampled at update ``g``, lazy if it decodes and nothing
    happens to it at the next step."""
    SI, ctl = st.SI, st.ctl
    nc = SI[s, S_NCOMP]
    if SI[s, S_NTOK] - nc != 1 or SI[s, S_HWM] != nc:
        return
    bs = st.cfg[BS]
    evt = min(g + 1 + SI[s, S_NBLK] * bs - nc, g + SI[s, S_MAXT] - SI[s, S_NOUT])
    if evt <= g + 1:
        return
    SI[s, S_G0] = g
    SI[s, S_EVT] = evt
    unmark(st.bits, 0, s)
    mark(st.bits, bucket(st, evt), s)
    ctl[LAZY] += 1
    ctl[LAZY_SUM] += nc - g


def grow_lazy(st, s, step):
    """Lazy slot ``s`` is due at ``step``: if that is for a block (it does not finish in this step)
    and one is free, give it the block and keep it lazy, due again at its next block or its finish.
    Returns whether it did."""
    SI, ctl = st.SI, st.ctl
    g0 = SI[s, S_G0]
    fin = g0 + SI[s, S_MAXT] - SI[s, S_NOUT]
    if fin <= step:
        return False
    bs = st.cfg[BS]
    nb = SI[s, S_NBLK]
    m = (SI[s, S_NCOMP] + ctl[ROWS] - g0 + bs) // bs - nb  # blocks for one more token
    if m > ctl[FREE]:
        return False
    take_blocks(st, SI[s, S_ROW], nb, m)
    nb += m
    SI[s, S_NBLK] = nb
    evt = min(g0 + 1 + nb * bs - SI[s, S_NCOMP], fin)
    unmark(st.bits, bucket(st, SI[s, S_EVT]), s)
    mark(st.bits, bucket(st, evt), s)
    SI[s, S_EVT] = evt
    return True


def close_up(st):
    """Move the running slots down over the holes, in order; re-mark them."""
    SI, SF, bits, ctl = st.SI, st.SF, st.bits, st.ctl
    kept = 0
    bits[:, :] = 0
    for s in range(ctl[END]):
        if SI[s, S_RID] >= 0:
            if kept != s:
                for c in range(N_S):
                    SI[kept, c] = SI[s, c]
                SF[kept] = SF[s]
            e = SI[kept, S_EVT]
            mark(bits, 0 if e < 0 else bucket(st, e), kept)
            kept += 1
    ctl[END] = kept


def tail(st, end):
    """The last running slot before ``end``."""
    e = end - 1
    while st.SI[e, S_RID] < 0:
        e -= 1
    return e


def start_slot(st, rid, num_computed, num_blocks, tokens, row):
    """A slot at the end of the running list for ``rid``, which starts running with ``tokens`` this step."""
    ctl, SI, RI = st.ctl, st.SI, st.RI
    if ctl[END] == SI.shape[0]:
        close_up(st)
    s = ctl[END]
    ctl[END] = s + 1
    ctl[N_RUN] += 1
    SI[s, S_RID] = rid
    SI[s, S_NTOK] = RI[rid, I_NTOK]
    SI[s, S_NCOMP] = num_computed
    SI[s, S_NOUT] = RI[rid, I_NOUT]
    SI[s, S_MAXT] = RI[rid, I_MAXT]
    SI[s, S_NBLK] = num_blocks
    SI[s, S_HWM] = RI[rid, I_HWM]
    SI[s, S_A] = tokens
    SI[s, S_G0] = -1
    SI[s, S_EVT] = -1
    SI[s, S_ROW] = row
    st.SF[s] = st.RF[rid, F_LTOK]
    mark(st.bits, 0, s)
    return s


def write_back(st, s):
    """Copy running slot ``s`` into its request's record (the record is stale while it runs)."""
    SI, RI = st.SI, st.RI
    rid = SI[s, S_RID]
    RI[rid, I_NTOK] = SI[s, S_NTOK]
    RI[rid, I_NCOMP] = SI[s, S_NCOMP]
    RI[rid, I_NOUT] = SI[s, S_NOUT]
    RI[rid, I_HWM] = SI[s, S_HWM]
    RI[rid, I_NBLK] = SI[s, S_NBLK]
    st.RF[rid, F_LTOK] = st.SF[s]


def write_back_all(st):
    """Bring the records of the running requests up to date (their slots hold the live values; a
    lazy slot's token of a step still in flight counts as computed, as the scheduler counts it).
    Lazy slots become explicit ones, as if scheduled one by one, so stepping on stays exact."""
    SI, ctl = st.SI, st.ctl
    for s in range(ctl[END]):
        if SI[s, S_RID] < 0:
            continue
        if SI[s, S_EVT] >= 0:
            materialize(st, s)
            if ctl[PENDING]:
                SI[s, S_NCOMP] += 1
                SI[s, S_HWM] = SI[s, S_NCOMP]
                SI[s, S_A] = 1
        write_back(st, s)
