"""Step-for-step parity with traces of the real vLLM engine (simulator/data/parity, see tools/parity/README.md),
through both engine steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.engine.reference.block_pool import BlockPool
from simulator.engine.reference.kv_cache import KVCacheManager
from simulator.validation import parity
from simulator.validation.parity import FIXTURES as FIXTURE_DIR
from simulator.validation.parity import KNOWN_DIVERGENT, check, engines_for, load_fixture, main_parity

FIXTURES = sorted(FIXTURE_DIR.glob("*.csv"))


def _param(p: Path, engine: str):
    reason = KNOWN_DIVERGENT.get(p.stem)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(p, engine, id=f"{p.stem}-{engine}", marks=marks)


@pytest.mark.parametrize(("trace", "engine"), [_param(p, e) for p in FIXTURES for e in engines_for(load_fixture(p)[0])])
def test_fixture_matches_exactly(trace: Path, engine: str):
    r = check(trace, engine)
    assert r.exact, f"{r.name} ({engine}): {r.matching_steps}/{r.steps_expected} leading steps match\n{r.detail}"


# `servesim parity` over every fixture runs in tests/test_first_hour.py (from outside the checkout);
# every fixture's exactness on every path is test_fixture_matches_exactly's. The report is read here
# on a few: an FCFS one, a LoRA one (no servesim run path), a priority one with preemption, a draft model.
REPORTED = ["fits_pc_on", "lora_max_loras_1_batch", "priority_batch_overload", "spec_draft3_batch_fits"]


def test_match_rate(capsys):
    """``servesim parity``'s report: a line per fixture and path, the known divergences apart with
    their reason and first divergent step, the match rate of the others, exit code 0 while those
    all match."""
    assert FIXTURES, "no parity fixtures found"
    assert set(KNOWN_DIVERGENT) <= {p.stem for p in FIXTURES}
    rc = main_parity([str(FIXTURE_DIR / f"{name}.csv") for name in REPORTED])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "fits_pc_on " in out and "reference exact" in out and "run exact" in out
    assert (
        "lora_max_loras_1_batch " in out and out.split("lora_max_loras_1_batch ")[1].split("\n")[0].count("exact") == 2
    )
    assert (
        "priority_batch_overload " in out
        and out.split("priority_batch_overload ")[1].split("\n")[0].count("exact") == 3
    )
    assert (
        "spec_draft3_batch_fits " in out and out.split("spec_draft3_batch_fits ")[1].split("\n")[0].count("exact") == 3
    )
    assert out.strip().splitlines()[-1].startswith("parity: 11/11 replays exact (100.0%; 4 fixtures")


def test_a_known_divergence_is_reported_apart(tmp_path, monkeypatch, capsys):
    """A fixture that diverges shows its first divergent step and both states, and fails the check;
    listed in KNOWN_DIVERGENT with its rule, it is reported apart with that rule and not counted."""
    spec = json.loads((FIXTURE_DIR / "fits_pc_on.json").read_text())
    spec["name"] = "altered"
    (tmp_path / "altered.json").write_text(json.dumps(spec))
    rows = (FIXTURE_DIR / "fits_pc_on.csv").read_text().splitlines()
    cells = rows[3].split(",")  # step 2
    cells[10] = str(int(cells[10]) + 1)  # one free block more than servesim's
    rows[3] = ",".join(cells)
    (tmp_path / "altered.csv").write_text("\n".join(rows) + "\n")
    trace = str(tmp_path / "altered.csv")
    assert main_parity([trace]) == 1
    out = capsys.readouterr().out
    assert "altered (reference):" in out and "reference diverges at step 2" in out
    monkeypatch.setitem(parity.KNOWN_DIVERGENT, "altered", "a rule servesim does not follow")
    assert main_parity([trace]) == 0
    out = capsys.readouterr().out
    assert "  altered: diverges at step 2; a rule servesim does not follow" in out
    assert out.strip().splitlines()[-1].startswith("parity: 0/0 replays exact")


def test_fixtures_cover_the_scheduler_features():
    """The recorded traces cover vLLM's priority policy and multi-LoRA besides FCFS (with and without
    prefix caching, the admission gate, the long-prefill cap, preemption, closed loops)."""
    specs = [load_fixture(p)[0] for p in FIXTURES]
    assert any(s["engine"].get("scheduling_policy") == "priority" for s in specs)
    lora = [s for s in specs if s["engine"].get("enable_lora")]
    assert lora and all(any(r.get("lora") for r in s["requests"]) for s in lora)
    assert {s["engine"]["max_loras"] for s in lora} >= {1, 2}


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
    kv.free(0, 12, 12, 0, 8, 0, cache_own=False)
    pool.allocate(pool.num_free)  # evicts everything free, request 0's copies included
    assert kv.lookup(20, 0, 8, key=7) == [3, 4]  # request 1's copies still serve the hit
