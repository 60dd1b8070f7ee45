"""Hand-computed timelines: block size 4, a step costs exactly 1 s (swap traffic at 1000 B/s)."""

from __future__ import annotations

import numpy as np
from conftest import Sim


def sched_tokens(plan):
    return {int(r): int(a) for r, a in zip(plan.rids, plan.num_new)}


def test_two_requests_chunked_prefill_exact_timeline():
    """Budget 8: R0's 6-token prompt and 2 of R1's 5 share step 0; R1 finishes its prompt in step 1."""
    sim = Sim([(0.0, 6, 3), (0.0, 5, 2)], num_gpu_blocks=11).run()
    plans = sim.plans
    assert [sched_tokens(p) for p in plans] == [{0: 6, 1: 2}, {0: 1, 1: 3}, {0: 1, 1: 1}]
    assert [p.num_free_blocks for p in plans] == [7, 6, 6]
    assert [round(p.kv_usage, 6) for p in plans] == [0.3, 0.4, 0.4]
    R = sim.reqs
    assert list(R.first_token[:2]) == [1.0, 2.0]
    assert list(R.finish[:2]) == [3.0, 3.0]
    assert list(R.num_out[:2]) == [3, 2]
    assert sim.sched.pool.num_free == 10
    assert plans[0].new == (0, 1)


def _preemption_case(**overrides):
    # 4 usable blocks; both requests grow to 9 tokens; at step 5 R0 needs a third block.
    return Sim([(0.0, 4, 6), (0.0, 4, 6)], num_gpu_blocks=5, max_num_batched_tokens=100, **overrides).run()


def test_recompute_preemption_victim_and_recomputed_tokens():
    """The tail (R1) is preempted at step 5, re-hits its first block from the prefix cache, recomputes 4 tokens."""
    sim = _preemption_case()
    plans = sim.plans
    assert len(plans) == 7
    assert [p.preempted for p in plans] == [(), (), (), (), (), (1,), ()]
    assert sched_tokens(plans[5]) == {0: 1}
    # R1 comes back with 4 cached tokens (block 0 survived; block 1 was handed to R0) and prefills 5.
    assert plans[6].resumed == (1,)
    assert plans[6].prefix_hits == ((1, 4),)
    assert sched_tokens(plans[6]) == {1: 5}
    assert plans[6].recomputed_tokens == 4
    R = sim.reqs
    assert list(R.preemptions[:2]) == [0, 1]
    assert list(R.recomputed[:2]) == [0, 4]
    assert list(R.finish[:2]) == [6.0, 7.0]
    assert list(R.num_out[:2]) == [6, 6]


def test_recompute_without_prefix_caching_recomputes_everything():
    """Without prefix caching the victim re-prefills all 8 tokens it had computed (plus the pending one)."""
    sim = _preemption_case(enable_prefix_caching=False)
    assert sched_tokens(sim.plans[6]) == {1: 9}
    assert sim.plans[6].recomputed_tokens == 8


def test_swap_preemption_bytes_and_time():
    """Swap: R1's 2 blocks (1000 B each) go out at step 5 and come back at step 6; each copy costs 2 s."""
    sim = _preemption_case(preemption_mode="swap", swap_space_blocks=10, block_bytes=1000.0)
    plans = sim.plans
    assert len(plans) == 7
    assert plans[5].preempted == (1,)
    assert plans[5].work.swap_bytes == 2000.0
    assert plans[6].work.swap_bytes == 2000.0
    assert sched_tokens(plans[6]) == {1: 1}
    R = sim.reqs
    assert R.swapped_bytes[1] == 4000.0
    assert R.recomputed[1] == 0
    # steps 0-4 take 1 s, steps 5 and 6 take 1 + 2 s.
    assert list(R.finish[:2]) == [8.0, 11.0]


def test_swap_space_full_falls_back_to_recompute_or_aborts():
    """No host space: the victim is recomputed (default) or aborted (V0 behaviour)."""
    sim = _preemption_case(preemption_mode="swap", swap_space_blocks=1, block_bytes=1000.0)
    assert sim.reqs.recomputed[1] > 0 and sim.reqs.swapped_bytes[1] == 0
    sim = _preemption_case(preemption_mode="swap", swap_space_blocks=1, block_bytes=1000.0, on_swap_full="abort")
    assert sim.plans[5].aborted == (1,)
    assert sim.reqs.status[1] == 5  # ABORTED
    assert sim.engine.num_done == 2


def test_max_num_seqs_caps_running_not_scheduled():
    """With max_num_seqs=2 the third request waits until one of the first two finishes."""
    sim = Sim([(0.0, 2, 2), (0.0, 2, 5), (0.0, 2, 2)], num_gpu_blocks=20, max_num_seqs=2).run()
    p = sim.plans
    assert p[0].new == (0, 1) and p[0].num_running == 2 and p[0].num_waiting == 1
    # R0 finishes at the end of step 1; R2 is admitted in step 2.
    assert p[2].new == (2,)


def test_fcfs_head_of_line_blocks_admission():
    """A waiting request that does not fit stops admission: the small one behind it waits too."""
    # 7 usable blocks. After step 1, R0 holds 6 and one is free: R1 (2 blocks) cannot fit, R2 (1 block) could.
    sim = Sim([(0.0, 20, 3), (0.5, 8, 1), (0.5, 4, 1)], num_gpu_blocks=8, max_num_batched_tokens=100).run()
    assert sim.plans[1].num_free_blocks == 1 and sim.plans[1].num_waiting == 2
    assert sim.plans[2].num_free_blocks == 1 and sim.plans[2].num_waiting == 2
    assert list(sim.reqs.first_scheduled[1:3]) == [3.0, 3.0]
    assert sim.plans[3].new == (1, 2)


def test_shared_prefix_hits_blocks_of_a_running_request():
    """A second request of the same group re-uses the group's 2 full blocks while the first still runs."""
    sim = Sim([(0.0, 12, 4, 0, 8), (1.0, 12, 4, 0, 8)], num_gpu_blocks=20, max_num_batched_tokens=100).run()
    hits = dict(h for p in sim.plans for h in p.prefix_hits)
    assert hits == {0: 0, 1: 8}
    assert sim.reqs.cached_tokens[1] == 8


def test_request_larger_than_pool_is_rejected_not_looping():
    """A request that needs more blocks than the whole pool is rejected at arrival with a reason."""
    sim = Sim([(0.0, 40, 10), (0.0, 4, 2)], num_gpu_blocks=5).run()
    assert sim.reqs.status[0] == 4  # REJECTED
    assert "more than the whole pool" in sim.engine.reject_reasons[0]
    assert sim.reqs.status[1] == 3  # FINISHED


def test_null_block_is_not_usable():
    """vLLM keeps one block aside: 11 blocks give 10 usable ones."""
    sim = Sim([], num_gpu_blocks=11)
    assert sim.sched.pool.num_blocks == 10
    assert np.isclose(sim.sched.pool.usage, 0.0)
