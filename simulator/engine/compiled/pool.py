"""The block pool and prefix-cache index of the compiled step (reference: ``reference/block_pool.py``
and ``reference/kv_cache.py``, which state the rules; this is the same arithmetic on arrays).

Free queue: ``st.queue`` holds (block, serial) entries between ``Q_HEAD`` and ``Q_TAIL``, with slack
on both sides so released blocks can go in front of the head as well as behind the tail. An entry is
valid while its block is unheld (ref 0) and carries the serial of its latest release, so a block
taken out of the middle (a prefix hit on a free block) just leaves a stale entry behind, skipped
when it reaches the head.

Index: the copies of one content key (an own-content key, or a shared-prefix group) form a doubly
linked list through the blocks (``B_NEXT``/``B_PREV``), in the order they were cached; a lookup
takes, for each block index, the first copy in the list. Handing a block out again unlinks it, so
the lists hold live copies only.
"""

from __future__ import annotations

from simulator.engine.compiled.layout import (
    B_COL,
    B_KEY,
    B_NEXT,
    B_PREV,
    B_REF,
    B_SERIAL,
    BS,
    CACHING,
    FREE,
    I_GLEN,
    I_GROUP,
    Q_HEAD,
    Q_TAIL,
    ROWS_FREE,
    STAMP,
    X_KEY,
    X_OHEAD,
    X_OTAIL,
)
from simulator.engine.host_tier import HC_CAP, HC_LOADED
from simulator.engine.host_tier import lookup as host_tier_lookup
from simulator.engine.host_tier import store as host_tier_store
from simulator.engine.rules import group_blocks, group_blocks_below, hit_limit

COLD = ("_compact",)  # not inlined (see build.py)


# ---- the index ----------------------------------------------------------------------------------------
def _set_head(st, key, b):
    if key >= 0:
        st.req_extra[key, X_OHEAD] = b
    else:
        st.groups[-2 - key, 0] = b


def _set_tail(st, key, b):
    if key >= 0:
        st.req_extra[key, X_OTAIL] = b
    else:
        st.groups[-2 - key, 1] = b


def _head(st, key):
    return st.req_extra[key, X_OHEAD] if key >= 0 else st.groups[-2 - key, 0]


def unindex(st, b):
    """Drop block ``b`` from the copies cached under its content (the content is evicted)."""
    blocks = st.blocks
    key, p, n = blocks[b, B_KEY], blocks[b, B_PREV], blocks[b, B_NEXT]
    if p >= 0:
        blocks[p, B_NEXT] = n
    else:
        _set_head(st, key, n)
    if n >= 0:
        blocks[n, B_PREV] = p
    else:
        _set_tail(st, key, p)
    blocks[b, B_KEY] = -1


def index(st, b, key, col):
    """Cache block ``b`` as block ``col`` of ``key``'s content, after the copies already there
    (nothing to do if it is one of them)."""
    blocks = st.blocks
    if blocks[b, B_KEY] == key:
        return
    t = st.req_extra[key, X_OTAIL] if key >= 0 else st.groups[-2 - key, 1]
    blocks[b, B_KEY] = key
    blocks[b, B_COL] = col
    blocks[b, B_PREV] = t
    blocks[b, B_NEXT] = -1
    if t >= 0:
        blocks[t, B_NEXT] = b
    else:
        _set_head(st, key, b)
    _set_tail(st, key, b)


def own_key(st, rid):
    """The content key of a request's own tokens (its session's first request, or itself)."""
    k = st.req_extra[rid, X_KEY]
    return rid if k < 0 else k


def cache_group_blocks(st, rid, row, upto):
    """Index the request's full shared-prefix blocks below token ``upto`` (its table is ``row``)."""
    n = group_blocks_below(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], upto, st.cfg[BS])
    key = -2 - st.req_i64[rid, I_GROUP]
    for col in range(n):
        index(st, st.tables[row, col], key, col)


def cache_own_blocks(st, rid, row, nfull):
    """Index the request's own full blocks (those past its shared prefix, below block ``nfull``)."""
    key = own_key(st, rid)
    for col in range(group_blocks(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], st.cfg[BS]), nfull):
        index(st, st.tables[row, col], key, col)


def _fill(st, key, lo, hi):
    """Into ``st.hits``: the first copy of each of ``key``'s blocks ``lo..hi-1`` that has one."""
    blocks, hits = st.blocks, st.hits
    b = _head(st, key)
    while b >= 0:
        c = blocks[b, B_COL]
        if lo <= c < hi and hits[c] < 0:
            hits[c] = b
        b = blocks[b, B_NEXT]


def lookup(st, rid, num_tokens):
    """Cached leading blocks of a request about to be admitted, into ``st.hits``; how many."""
    bs = st.cfg[BS]
    limit = hit_limit(num_tokens, bs)
    if limit <= 0:
        return 0
    hits = st.hits
    for k in range(limit):
        hits[k] = -1
    group = st.req_i64[rid, I_GROUP]
    n_group = group_blocks(group, st.req_i64[rid, I_GLEN], bs)
    if n_group > limit:
        n_group = limit
    if n_group > 0:
        _fill(st, -2 - group, 0, n_group)
    nh = 0
    while nh < n_group and hits[nh] >= 0:
        nh += 1
    if nh < n_group or nh == limit:
        return nh
    _fill(st, own_key(st, rid), nh, limit)
    while nh < limit and hits[nh] >= 0:
        nh += 1
    return nh


# ---- the host tier (KV offloading: simulator.engine.host_tier) ---------------------------------------------
def _host_keys(st, rid):
    """The host tier's keys of a request's own content and of its group (-1: none)."""
    g = st.req_i64[rid, I_GROUP]
    return own_key(st, rid), (-2 - g if g >= 0 else -1)


def host_lookup(st, rid, num_tokens, gpu_hits):
    """Leading blocks of a waiting request found on the host tier after its ``gpu_hits`` GPU hits."""
    if st.host_ctl[HC_CAP] == 0:
        return 0
    own, grp = _host_keys(st, rid)
    bs = st.cfg[BS]
    n_group = group_blocks(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], bs)
    return host_tier_lookup(
        st.host_own, st.host_grp, st.host_ctl, own, grp, gpu_hits, n_group, hit_limit(num_tokens, bs)
    )


def host_loaded(st, blocks):
    st.host_ctl[HC_LOADED] += blocks


def host_write(st, rid, full_blocks):
    """Write a request's first ``full_blocks`` blocks to the host tier (if there is one)."""
    if st.host_ctl[HC_CAP] == 0:
        return
    own, grp = _host_keys(st, rid)
    n_group = group_blocks(st.req_i64[rid, I_GROUP], st.req_i64[rid, I_GLEN], st.cfg[BS])
    host_tier_store(st.host_own, st.host_grp, st.host_ctl, own, grp, n_group, full_blocks)


# ---- the free queue -----------------------------------------------------------------------------------
def take_row(st):
    """A block-table row for a request that starts running."""
    k = st.ctl[ROWS_FREE] - 1
    st.ctl[ROWS_FREE] = k
    return st.rows[k]


def touch(st, b):
    """One more request holds block ``b`` (a prefix hit): out of the free queue if it was there."""
    if st.blocks[b, B_REF] == 0:
        st.ctl[FREE] -= 1
    st.blocks[b, B_REF] += 1


def take_blocks(st, row, have, m):
    """Take ``m`` blocks from the head of the free queue (evicting their cached content) onto the
    end of the block table in ``row``, which holds ``have`` blocks."""
    blocks, queue, ctl = st.blocks, st.queue, st.ctl
    h = ctl[Q_HEAD]
    for k in range(m):
        while True:
            b = queue[0, h]
            s = queue[1, h]
            h += 1
            if blocks[b, B_REF] == 0 and blocks[b, B_SERIAL] == s:
                break
        blocks[b, B_REF] = 1
        if blocks[b, B_KEY] != -1:
            unindex(st, b)
        st.tables[row, have + k] = b
    ctl[Q_HEAD] = h
    ctl[FREE] -= m


def _compact(st, front, back):
    """Drop stale free-queue entries and re-centre the live ones, leaving room on both sides."""
    blocks, queue, ctl = st.blocks, st.queue, st.ctl
    h, t = ctl[Q_HEAD], ctl[Q_TAIL]
    live = 0
    for i in range(h, t):  # valid entries moved to the front, in order
        b = queue[0, i]
        if blocks[b, B_REF] == 0 and blocks[b, B_SERIAL] == queue[1, i]:
            queue[0, live] = b
            queue[1, live] = queue[1, i]
            live += 1
    nh = (queue.shape[1] - (live + front + back)) // 2 + front
    for i in range(live - 1, -1, -1):  # then to their centred place (nh >= 0: moved right, back to front)
        queue[0, nh + i] = queue[0, i]
        queue[1, nh + i] = queue[1, i]
    ctl[Q_HEAD] = nh
    ctl[Q_TAIL] = nh + live


def release_table(st, rid, row, nblocks, nfull):
    """Release request ``rid``'s ``nblocks`` blocks, of the table in ``row``, tail first: those nobody
    holds any more go to the head of the free queue (the first released first) unless they are full
    blocks with caching on (below ``nfull``: they carry a hash), which go to the tail. The row is
    freed. With KV offloading, its full blocks are written to the host tier."""
    host_write(st, rid, nfull)
    blocks, buf, queue, ctl = st.blocks, st.buf, st.queue, st.ctl
    caching = st.cfg[CACHING] != 0
    nf = 0
    nb = 0
    for pos in range(nblocks - 1, -1, -1):
        b = st.tables[row, pos]
        blocks[b, B_REF] -= 1
        if blocks[b, B_REF] == 0:
            if caching and pos < nfull:
                buf[1, nb] = b
                nb += 1
            else:
                buf[0, nf] = b
                nf += 1
    st.rows[ctl[ROWS_FREE]] = row
    ctl[ROWS_FREE] += 1
    if nf + nb == 0:
        return
    ctl[STAMP] += 1
    serial = ctl[STAMP]
    if ctl[Q_HEAD] < nf or ctl[Q_TAIL] + nb > queue.shape[1]:
        _compact(st, nf, nb)
    h = ctl[Q_HEAD] - nf
    for i in range(nf):
        b = buf[0, i]
        blocks[b, B_SERIAL] = serial
        queue[0, h + i] = b
        queue[1, h + i] = serial
    ctl[Q_HEAD] = h
    t = ctl[Q_TAIL]
    for i in range(nb):
        b = buf[1, i]
        blocks[b, B_SERIAL] = serial
        queue[0, t + i] = b
        queue[1, t + i] = serial
    ctl[Q_TAIL] = t + nb
    ctl[FREE] += nf + nb


def unreferenced_hits(st, nh):
    """How many of the last lookup's ``nh`` hits (``st.hits``) no running request holds: free (and
    evictable) now, taken out of the free blocks by admitting the request that hit them."""
    n = 0
    for k in range(nh):
        if st.blocks[st.hits[k], B_REF] == 0:
            n += 1
    return n
