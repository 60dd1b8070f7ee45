"""Hand-computed timelines: block size 4, a step costs exactly 1 s (swap traffic at 1000 B/s), on both
engine steps (the ``engine`` fixture runs each test on the reference and on the compiled step)."""

from __future__ import annotations

from conftest import Sim

from simulator.engine.rules import RequestStatus


def test_two_requests_chunked_prefill_exact_timeline(engine):
    """Budget 8: R0's 6-token prompt and 2 of R1's 5 share step 0; R1 finishes its prompt in step 1."""
    sim = Sim([(0.0, 6, 3), (0.0, 5, 2)], num_gpu_blocks=11, engine=engine).run()
    steps = sim.steps
    assert [s.scheduled for s in steps] == [{0: 6, 1: 2}, {0: 1, 1: 3}, {0: 1, 1: 1}]
    assert [s.num_free_blocks for s in steps] == [7, 6, 6]
    assert [round(s.kv_usage, 6) for s in steps] == [0.3, 0.4, 0.4]
    R = sim.reqs
    assert list(R.first_token[:2]) == [1.0, 2.0]
    assert list(R.finish[:2]) == [3.0, 3.0]
    assert list(R.num_out[:2]) == [3, 2]
    assert sim.free_blocks() == 10
    assert steps[0].new == (0, 1)
    assert [s.finished for s in steps] == [(), (), (0, 1)]


def _preemption_case(engine, **overrides):
    # 4 usable blocks; both requests grow to 9 tokens; at step 5 R0 needs a third block.
    return Sim(
        [(0.0, 4, 6), (0.0, 4, 6)], num_gpu_blocks=5, max_num_batched_tokens=100, engine=engine, **overrides
    ).run()


def test_recompute_preemption_victim_and_recomputed_tokens(engine):
    """The tail (R1) is preempted at step 5, re-hits its first block from the prefix cache, recomputes 4 tokens."""
    sim = _preemption_case(engine)
    steps = sim.steps
    assert len(steps) == 7
    assert [s.preempted for s in steps] == [(), (), (), (), (), (1,), ()]
    assert steps[5].scheduled == {0: 1}
    # R1 comes back with 4 cached tokens (block 0 survived; block 1 was handed to R0) and prefills 5.
    assert steps[6].resumed == (1,)
    assert steps[6].prefix_hits == ((1, 4),)
    assert steps[6].scheduled == {1: 5}
    assert steps[6].recomputed_tokens == 4
    R = sim.reqs
    assert list(R.preemptions[:2]) == [0, 1]
    assert list(R.recomputed[:2]) == [0, 4]
    assert list(R.finish[:2]) == [6.0, 7.0]
    assert list(R.num_out[:2]) == [6, 6]


def test_recompute_without_prefix_caching_recomputes_everything(engine):
    """Without prefix caching the victim re-prefills all 8 tokens it had computed (plus the pending one)."""
    sim = _preemption_case(engine, enable_prefix_caching=False)
    assert sim.steps[6].scheduled == {1: 9}
    assert sim.steps[6].recomputed_tokens == 8


def test_swap_preemption_bytes_and_time(engine):
    """Swap: R1's 2 blocks (1000 B each) go out at step 5 and come back at step 6; each copy costs 2 s."""
    sim = _preemption_case(engine, preemption_mode="swap", swap_space_blocks=10, block_bytes=1000.0)
    steps = sim.steps
    assert len(steps) == 7
    assert steps[5].preempted == steps[5].swapped_out == (1,)
    assert steps[5].num_swapped == 1
    assert steps[6].resumed == (1,) and steps[6].prefix_hits == ((1, 8),)  # its 8 computed tokens come back
    assert steps[6].scheduled == {1: 1}
    assert [s.duration for s in steps] == [1.0] * 5 + [3.0, 3.0]
    R = sim.reqs
    assert R.swapped_bytes[1] == 4000.0
    assert R.recomputed[1] == 0
    # steps 0-4 take 1 s, steps 5 and 6 take 1 + 2 s.
    assert list(R.finish[:2]) == [8.0, 11.0]


def test_swap_space_full_falls_back_to_recompute_or_aborts(engine):
    """No host space: the victim is recomputed (default) or aborted (V0 behaviour)."""
    sim = _preemption_case(engine, preemption_mode="swap", swap_space_blocks=1, block_bytes=1000.0)
    assert sim.reqs.recomputed[1] > 0 and sim.reqs.swapped_bytes[1] == 0
    assert sim.steps[5].preempted == (1,) and sim.steps[5].swapped_out == ()
    sim = _preemption_case(
        engine, preemption_mode="swap", swap_space_blocks=1, block_bytes=1000.0, on_swap_full="abort"
    )
    assert sim.steps[5].aborted == (1,)
    assert sim.reqs.status[1] == RequestStatus.ABORTED and sim.reqs.finish[1] == 5.0
    assert sim.engine.num_done == 2


def test_max_num_seqs_caps_running_not_scheduled(engine):
    """With max_num_seqs=2 the third request waits until one of the first two finishes."""
    sim = Sim([(0.0, 2, 2), (0.0, 2, 5), (0.0, 2, 2)], num_gpu_blocks=20, max_num_seqs=2, engine=engine).run()
    s = sim.steps
    assert s[0].new == (0, 1) and s[0].num_running == 2 and s[0].num_waiting == 1
    # R0 finishes at the end of step 1; R2 is admitted in step 2.
    assert s[1].finished == (0,)
    assert s[2].new == (2,)


def test_async_scheduling_frees_an_ended_requests_place_a_step_late(engine):
    """With async scheduling (``outputs_late``) vLLM schedules step 2 before step 1's outputs are in:
    R0, ended at step 1, still holds its place and its block through step 2's scheduling (not
    scheduled, counted running), so R2 starts in step 3, not 2 as without it."""
    cases = [(0.0, 2, 2), (0.0, 2, 5), (0.0, 2, 2)]
    sync = Sim(cases, num_gpu_blocks=20, max_num_seqs=2, engine=engine).run()
    late = Sim(cases, num_gpu_blocks=20, max_num_seqs=2, outputs_late=True, engine=engine).run()
    assert sync.steps[1].finished == late.steps[1].finished == (0,)
    assert sync.steps[2].scheduled == {1: 1, 2: 2} and sync.steps[2].new == (2,)
    assert late.steps[2].scheduled == {1: 1} and late.steps[2].num_running == 2
    assert late.steps[2].num_free_blocks == late.steps[1].num_free_blocks == 17  # R0's block held
    assert late.steps[3].new == (2,) and late.steps[3].scheduled == {1: 1, 2: 2}
    assert list(sync.reqs.first_scheduled[:3]) == [0.0, 0.0, 2.0]
    assert list(late.reqs.first_scheduled[:3]) == [0.0, 0.0, 3.0]
    assert list(late.reqs.finish[:3]) == [2.0, 5.0, 5.0]
    assert late.free_blocks() == sync.free_blocks() == late.engine.num_blocks


def test_async_scheduling_refills_a_wave_at_once(engine):
    """Every place held by requests that ended in one step: vLLM's empty scheduling costs no step, and
    the next one, after their outputs are in, admits the waiting requests: the same timeline as
    without async scheduling."""
    cases = [(0.0, 2, 2)] * 4
    sync = Sim(cases, num_gpu_blocks=20, max_num_seqs=2, engine=engine).run()
    late = Sim(cases, num_gpu_blocks=20, max_num_seqs=2, outputs_late=True, engine=engine).run()
    assert [s.scheduled for s in late.steps] == [{0: 2, 1: 2}, {0: 1, 1: 1}, {2: 2, 3: 2}, {2: 1, 3: 1}]
    assert late.steps == sync.steps
    assert list(late.reqs.finish[:4]) == [2.0, 2.0, 4.0, 4.0]


def test_async_scheduling_hashes_a_block_only_once_its_tokens_are_known(engine):
    """3 usable blocks. R1's step-1 decode fills its first block (token 3 is step 0's output), but
    with async scheduling step 1 was scheduled before step 0's outputs were in, so vLLM hashed none of
    the block then. At step 2 R0's two blocks are still held (it ended at step 1), R1 needs a second
    block and preempts itself, its full block unhashed: it comes back at step 3 with no prefix-cache
    hit and computes its 5 tokens again. Without async scheduling R0's blocks are free at step 2 and
    nobody is preempted."""
    cases = [(0.0, 4, 2), (0.0, 3, 6)]
    sync = Sim(cases, num_gpu_blocks=4, max_num_batched_tokens=100, engine=engine).run()
    late = Sim(cases, num_gpu_blocks=4, max_num_batched_tokens=100, outputs_late=True, engine=engine).run()
    assert [s.scheduled for s in late.steps[:2]] == [{0: 4, 1: 3}, {0: 1, 1: 1}] and late.steps[1].finished == (0,)
    assert late.steps[2].scheduled == {} and late.steps[2].preempted == (1,)
    assert late.steps[3].resumed == (1,) and late.steps[3].prefix_hits == ((1, 0),)
    assert late.steps[3].scheduled == {1: 5} and late.steps[3].recomputed_tokens == 4
    assert late.reqs.recomputed[1] == 4 and late.reqs.finish[1] == 7.0
    assert sum(len(s.preempted) for s in sync.steps) == 0 and sync.reqs.finish[1] == 6.0


def test_fcfs_head_of_line_blocks_admission(engine):
    """A waiting request that does not fit stops admission: the small one behind it waits too."""
    # 7 usable blocks. After step 1, R0 holds 6 and one is free: R1 (2 blocks) cannot fit, R2 (1 block) could.
    sim = Sim(
        [(0.0, 20, 3), (0.5, 8, 1), (0.5, 4, 1)], num_gpu_blocks=8, max_num_batched_tokens=100, engine=engine
    ).run()
    assert sim.steps[1].num_free_blocks == 1 and sim.steps[1].num_waiting == 2
    assert sim.steps[2].num_free_blocks == 1 and sim.steps[2].num_waiting == 2
    assert list(sim.reqs.first_scheduled[1:3]) == [3.0, 3.0]
    assert sim.steps[3].new == (1, 2)


def test_priority_preempts_the_least_urgent_even_ahead_of_the_scheduled(engine):
    """Priority scheduling: the victim is the least urgent request wherever it sits in the running list;
    when that is the request being scheduled, the running pass ends there, so the more urgent request
    behind it runs nothing in that step."""
    # R0 (priority 1) is admitted at step 0, R1 (priority 0) at step 1; 4 usable blocks. At step 5 R0
    # needs its third block, none is free, and R0 itself is the victim.
    sim = Sim(
        [(0.0, 4, 8, -1, 0, 1), (0.5, 4, 8, -1, 0, 0)],
        num_gpu_blocks=5,
        max_num_batched_tokens=100,
        policy="priority",
        engine=engine,
    ).run()
    s = sim.steps
    assert [x.new for x in s[:2]] == [(0,), (1,)]
    assert [x.num_free_blocks for x in s[:5]] == [3, 1, 0, 0, 0]
    assert s[5].preempted == (0,) and s[5].scheduled == {}
    assert s[6].scheduled == {1: 1}  # R0 waits: its 2 cached blocks + 1 new do not fit in the 2 free
    R = sim.reqs
    assert R.status[0] == R.status[1] == RequestStatus.FINISHED
    assert R.finish[1] < R.finish[0] and R.preemptions[0] == 1 and R.preemptions[1] == 0


def test_priority_puts_a_preempted_request_back_in_its_own_place(engine):
    """Three requests of equal priority submitted at one instant; max_num_seqs 2, 4 usable blocks. At
    step 5 R0 needs a third block and preempts R1 (the later submitted), which goes back ahead of R2,
    as vLLM's distinct arrival stamps put it: at step 6 R1 (its cached block and 2 new) does not fit
    the 1 free block and stops admission, so R2 waits too; both start at step 7, R1 first, finding
    its cached block. Had R1 gone back behind R2, R2 would have started at step 6 in that block."""
    sim = Sim(
        [(0.0, 4, 7, -1, 0, 0), (0.0, 4, 6, -1, 0, 0), (0.0, 4, 2, -1, 0, 0)],
        num_gpu_blocks=5,
        max_num_batched_tokens=100,
        max_num_seqs=2,
        policy="priority",
        engine=engine,
    ).run()
    s = sim.steps
    assert s[0].new == (0, 1) and s[5].preempted == (1,) and s[5].num_free_blocks == 1
    assert s[6].scheduled == {0: 1} and s[6].new == s[6].resumed == () and s[6].num_waiting == 2
    assert s[7].resumed == (1,) and s[7].new == (2,) and s[7].prefix_hits == ((1, 4), (2, 0))
    assert list(sim.reqs.first_scheduled[:3]) == [0.0, 0.0, 7.0]


def test_shared_prefix_hits_blocks_of_a_running_request(engine):
    """A second request of the same group re-uses the group's 2 full blocks while the first still runs."""
    sim = Sim(
        [(0.0, 12, 4, 0, 8), (1.0, 12, 4, 0, 8)], num_gpu_blocks=20, max_num_batched_tokens=100, engine=engine
    ).run()
    hits = dict(h for s in sim.steps for h in s.prefix_hits)
    assert hits == {0: 0, 1: 8}
    assert sim.reqs.cached_tokens[1] == 8


def test_request_larger_than_pool_is_rejected_not_looping(engine):
    """A request that needs more blocks than the whole pool is rejected at arrival with a reason."""
    sim = Sim([(0.0, 40, 10), (0.0, 4, 2)], num_gpu_blocks=5, engine=engine).run()
    assert sim.reqs.status[0] == RequestStatus.REJECTED
    assert "more than the whole pool" in sim.engine.reject_reasons[0]
    assert sim.reqs.status[1] == RequestStatus.FINISHED


def test_null_block_is_not_usable(engine):
    """vLLM keeps one block aside: 11 blocks give 10 usable ones."""
    sim = Sim([], num_gpu_blocks=11, engine=engine).run()
    assert sim.engine.num_blocks == 10 and sim.free_blocks() == 10
    sim = Sim([(0.0, 4, 1)], num_gpu_blocks=11, engine=engine).run()
    assert sim.steps[0].num_free_blocks == 9 and round(sim.steps[0].kv_usage, 12) == 0.1
