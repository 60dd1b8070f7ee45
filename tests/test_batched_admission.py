"""Batched FCFS admission (``Scheduler._admit_plain``: a run of plain requests at the head of the
queue decided and allocated at once) changes nothing: with it switched off every request goes
through the one-at-a-time loop, and requests.csv, steps.csv and the summary must be identical."""

from __future__ import annotations

import hashlib

import pytest

from simulator.config import load_scenario
from simulator.metrics import request_frame, step_frame, summarize
from simulator.run import simulate
from simulator.scheduler import Scheduler

CASES = {
    # 1,200 clients at once: admission limited by the token budget, then by free blocks
    "budget_then_blocks": ("scenarios/collapse_c1200.yaml", ["run.duration_s=40", "run.warmup_s=0",
                                                             "engine.num_gpu_blocks_override=7000"]),
    # the first-chunk gate with capped prefill chunks, prefix caching off
    "first_chunk_threshold": ("scenarios/collapse_c1200.yaml", [
        "run.duration_s=30", "run.warmup_s=0", "engine.admission=first_chunk", "engine.long_prefill_token_threshold=48",
        "engine.enable_prefix_caching=false", "engine.num_gpu_blocks_override=5000"]),
    # max_num_seqs binding with a long queue: seats free up a few at a time
    "seats": ("scenarios/collapse_c1200.yaml", ["run.duration_s=30", "run.warmup_s=0", "engine.max_num_seqs=40"]),
    # prompts longer than the budget (chunked), max_num_seqs small
    "chunks": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", [
        "run.num_requests=400", "workload.arrival.rate=40", "engine.max_num_seqs=6", "engine.max_num_batched_tokens=300"]),
    # resumed (preempted) requests with cached blocks of their own mixed with fresh ones
    "resumed_with_hits": ("scenarios/collapse_c512.yaml", ["run.duration_s=40", "run.warmup_s=0",
                                                           "engine.num_gpu_blocks_override=2500"]),
}


def _digest(res) -> tuple[str, str, dict]:
    csv = lambda df: df.to_csv(index=False, float_format="%.9g", lineterminator="\n").encode()  # noqa: E731
    s = summarize(res)
    s.pop("wall_time_s")
    s.pop("speedup_vs_real_time")
    return hashlib.sha256(csv(request_frame(res))).hexdigest(), hashlib.sha256(csv(step_frame(res))).hexdigest(), s


@pytest.mark.parametrize("case", list(CASES))
def test_batched_admission_is_identical_to_one_at_a_time(case, monkeypatch):
    path, over = CASES[case]
    sc = load_scenario(path, over)[0]
    batched = simulate(sc)
    monkeypatch.setattr(Scheduler, "batch_admission", False)
    single = simulate(sc)
    assert _digest(batched) == _digest(single)
    assert batched.engine.num_steps > 50 and int(batched.reqs.n) > 100
