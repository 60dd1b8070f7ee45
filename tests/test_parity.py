"""Step-for-step parity with traces of the real vLLM engine (simulator/data/parity, see tools/parity/README.md),
through both engine steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.engine.reference.block_pool import BlockPool
from simulator.engine.reference.kv_cache import KVCacheManager
from simulator.validation.parity import ENGINES, check, main_parity
from simulator.validation.parity import FIXTURES as FIXTURE_DIR

FIXTURES = sorted(FIXTURE_DIR.glob("*.csv"))

# Fixtures servesim cannot match for a precisely known reason: name -> reason (xfail, strict).
# Keep in step with the list of unmodelled engine features in simulator/validation/parity.py. None at present.
KNOWN_DIVERGENT: dict[str, str] = {}


def _param(p: Path, engine: str):
    reason = KNOWN_DIVERGENT.get(p.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(p, engine, id=f"{p.stem}-{engine}", marks=marks)


@pytest.mark.parametrize(("trace", "engine"), [_param(p, e) for p in FIXTURES for e in ENGINES])
def test_fixture_matches_exactly(trace: Path, engine: str):
    r = check(trace, engine)
    assert r.exact, f"{r.name} ({engine}): {r.matching_steps}/{r.steps_expected} leading steps match\n{r.detail}"


def test_match_rate(capsys):
    """``servesim parity`` over every fixture: exit code 0 (all exact), and the report says so."""
    assert FIXTURES, "no parity fixtures found"
    rc = main_parity([str(p) for p in FIXTURES])
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out.strip().splitlines()[-1])
    assert rc == 0, out
    n = len(FIXTURES) * len(ENGINES)
    assert f"parity: {n}/{n} replays exact" in out


def test_free_queue_order_follows_vllm():
    """Freed blocks without a hash are reused first (LIFO), hashed ones are evicted last (LRU)."""
    pool = BlockPool(9)  # 8 usable blocks: 0..7
    a = pool.allocate(3)  # 0 1 2
    b = pool.allocate(2)  # 3 4
    # Free a tail first: its last block is partial (no hash), the first two are cached.
    pool.free(a[::-1], [False, True, True])
    assert pool.free_order() == [2, 5, 6, 7, 1, 0]
    pool.free(b[::-1], [False, False])  # caching off / unhashed: both to the front, tail block first
    assert pool.free_order() == [4, 3, 2, 5, 6, 7, 1, 0]
    got = pool.allocate(4)
    assert got == [4, 3, 2, 5]
    pool.touch([1])  # a prefix hit takes a cached block out of the queue
    assert pool.free_order() == [6, 7, 0]
    pool.check()


def test_second_copy_of_a_block_serves_hits_after_the_first_is_evicted():
    """vLLM keeps every copy cached under a hash; a lookup gets the earliest one still cached."""
    pool = BlockPool(9)
    kv = KVCacheManager(pool, block_size=4, enable_caching=True)
    for rid in (0, 1):  # two requests of group 0 compute the same 2 prefix blocks concurrently
        kv.admit(rid, [])
        kv.allocate(rid, 3)
        kv.cache_group_blocks(rid, 0, 8, 12)
    assert kv.lookup(20, 0, 8, key=7) == [0, 1]  # request 0's copies were cached first
    kv.free(0, 12, 0, 8, 0, cache_own=False)
    pool.allocate(pool.num_free)  # evicts everything free, request 0's copies included
    assert kv.lookup(20, 0, 8, key=7) == [3, 4]  # request 1's copies still serve the hit
