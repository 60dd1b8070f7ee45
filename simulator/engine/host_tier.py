"""The host tier of the prefix cache: vLLM's KV offloading to CPU memory (``--kv-offloading-size``,
the native ``OffloadingConnector`` with its LRU policy), written once on arrays and called by both
engine steps.

What vLLM does, and what is kept of it:
- A request's blocks are written to host memory as they are computed (write-through, not on GPU
  eviction); every write refreshes the recency of all the request's blocks on the host, its
  leading blocks the most recent (vLLM's LRU touches a request's blocks in reverse order). Here a
  request writes its full blocks after each prefill chunk and when it releases its blocks
  (finished or preempted); the blocks its decode fills are written at that release. vLLM writes
  them block by block as decode fills them, which ends in the same host contents and order when the
  request releases them.
- A waiting request's lookup finds its leading blocks cached on the GPU first, then continues on
  the host from the first GPU miss; the host blocks found are loaded into newly allocated GPU blocks
  (their transfer is the step's host-link traffic) and count as computed. The lookup refreshes the
  recency of the request's blocks on the host, found or not.
- The host holds ``capacity`` blocks; a write that needs room evicts the least recently used.

Blocks are held per content key (a shared-prefix group's leading blocks, or a request's own content:
its id, or its session's), and a key's blocks on the host are always one run of block indices
[lo, hi): every touch refreshes all of a key's blocks at once and eviction takes a key's highest
block first, so the least recently used block is always the highest block of the least recently
used key. The keys form one recency list, least recent first; key ``e`` is own content ``e`` when
``e >= 0`` and shared-prefix group ``-2 - e`` when ``e <= -2`` (-1: none).

Deviations from vLLM, for simplicity: a write that makes room never evicts the writing request's
own blocks (vLLM's LRU could, if they were the least recent); a write of more blocks than the tier
holds is skipped (vLLM skips any write it cannot make room for); the last prompt token is never
loaded (the GPU lookup's limit, ``rules.hit_limit``; vLLM loads the block and recomputes that
token); loads are priced in the step that admits the request (vLLM loads asynchronously while other
steps run, and schedules the request once its blocks have arrived).
"""

from __future__ import annotations

COLD = ("lookup", "store")  # not inlined into the compiled step's many call sites (see compiled/build.py)

# Columns of the per-key arrays (``own``: one row per own-content key; ``grp``: one per group).
H_LO, H_HI, H_PREV, H_NEXT, N_H = range(5)
# Slots of ``hc``: blocks the tier holds at most, holds now, the least and most recently used key,
# blocks loaded into the GPU and written to the host over the run.
HC_CAP, HC_USED, HC_LRU, HC_MRU, HC_LOADED, HC_STORED, N_HC = range(7)


def _get(own, grp, e, f):
    return own[e, f] if e >= 0 else grp[-2 - e, f]


def _set(own, grp, e, f, v):
    if e >= 0:
        own[e, f] = v
    else:
        grp[-2 - e, f] = v


def held(own, grp, e):
    """Blocks of key ``e`` on the host (0 for none, or no key)."""
    if e == -1:
        return 0
    n = _get(own, grp, e, H_HI) - _get(own, grp, e, H_LO)
    return n if n > 0 else 0


def _unlink(own, grp, hc, e):
    p, n = _get(own, grp, e, H_PREV), _get(own, grp, e, H_NEXT)
    if p != -1:
        _set(own, grp, p, H_NEXT, n)
    else:
        hc[HC_LRU] = n
    if n != -1:
        _set(own, grp, n, H_PREV, p)
    else:
        hc[HC_MRU] = p


def _push_recent(own, grp, hc, e):
    t = hc[HC_MRU]
    _set(own, grp, e, H_PREV, t)
    _set(own, grp, e, H_NEXT, -1)
    if t != -1:
        _set(own, grp, t, H_NEXT, e)
    else:
        hc[HC_LRU] = e
    hc[HC_MRU] = e


def _drop(own, grp, hc, e):
    """Key ``e`` leaves the host (its blocks no longer counted)."""
    hc[HC_USED] -= held(own, grp, e)
    _unlink(own, grp, hc, e)
    _set(own, grp, e, H_LO, -1)
    _set(own, grp, e, H_HI, -1)


def touch(own, grp, hc, own_key, group_key):
    """A request's blocks on the host become the most recent, its leading (shared-prefix) ones last."""
    for e in (own_key, group_key):
        if held(own, grp, e) > 0:
            _unlink(own, grp, hc, e)
            _push_recent(own, grp, hc, e)


def _run_end(own, grp, e, k, upto):
    """Where a lookup at block ``k`` stops on key ``e``'s run: its end (at most ``upto``) if it holds
    block ``k``, else ``k``."""
    if held(own, grp, e) == 0:
        return k
    hi = _get(own, grp, e, H_HI)
    if _get(own, grp, e, H_LO) <= k < hi:
        return hi if hi < upto else upto
    return k


def lookup(own, grp, hc, own_key, group_key, gpu_hits, group_blocks, limit):
    """Leading blocks of a request found on the host after its ``gpu_hits`` GPU hits (blocks
    ``gpu_hits`` on, consecutive, fewer than ``limit`` in all); its blocks there are refreshed."""
    k = gpu_hits
    if k < group_blocks:
        k = _run_end(own, grp, group_key, k, group_blocks if group_blocks < limit else limit)
    if group_blocks <= k < limit:
        k = _run_end(own, grp, own_key, k, limit)
    touch(own, grp, hc, own_key, group_key)
    return k - gpu_hits


def store(own, grp, hc, own_key, group_key, group_blocks, full_blocks):
    """Write a request's first ``full_blocks`` blocks to the host (those of its shared prefix under
    ``group_key``, the rest under ``own_key`` from block ``group_blocks`` on): nothing if all are
    there already or they are more than the tier holds; else the least recently used blocks of other
    keys make room and the request's blocks become the most recent."""
    g_have, o_have = held(own, grp, group_key), held(own, grp, own_key)
    g_want = full_blocks if full_blocks < group_blocks else group_blocks
    if group_key == -1:
        g_want = 0
    o_want = full_blocks - group_blocks if full_blocks > group_blocks else 0
    g_new = g_want if g_want > g_have else g_have
    o_new = o_want if o_want > o_have else o_have
    added = g_new - g_have + o_new - o_have
    if added <= 0 or g_new + o_new > hc[HC_CAP]:
        return
    for e in (own_key, group_key):
        if held(own, grp, e) > 0:
            _drop(own, grp, hc, e)
    need = hc[HC_USED] + g_new + o_new - hc[HC_CAP]
    while need > 0:
        e = hc[HC_LRU]
        take = held(own, grp, e)
        if take > need:
            take = need
        _set(own, grp, e, H_HI, _get(own, grp, e, H_HI) - take)
        hc[HC_USED] -= take
        need -= take
        if held(own, grp, e) == 0:
            _drop(own, grp, hc, e)
    for e, lo, n in ((own_key, group_blocks, o_new), (group_key, 0, g_new)):
        if n > 0:
            _set(own, grp, e, H_LO, lo)
            _set(own, grp, e, H_HI, lo + n)
            _push_recent(own, grp, hc, e)
            hc[HC_USED] += n
    hc[HC_STORED] += added
