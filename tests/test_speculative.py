"""Speculative decoding (simulator/engine/speculative.py and the rules both engine steps share): timelines
computed by hand, the budget and length cutting drafts, lookahead blocks, the acceptance draws
(deterministic, with the rates asked for), the memory and cost a drafter adds, and its checks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import rules, speculative
from simulator.errors import ConfigError
from simulator.metrics import summarize
from simulator.resolve import load_arch, memory_plan
from simulator.run import simulate
from simulator.scenario.config import SpeculativeConfig, load_scenario
from tests.conftest import Sim


def spec(k: int, *rates: float, lookahead: int = 0, seed: int = 0) -> dict:
    """Scheduler settings for ``k`` drafts a step accepted with conditional ``rates`` (the last repeated)."""
    at_least, p = [], 1.0
    for i in range(k):
        p *= rates[min(i, len(rates) - 1)]
        at_least.append(p)
    return {"spec_tokens": k, "spec_lookahead": lookahead, "spec_seed": seed, "spec_accept_at_least": tuple(at_least)}


def test_every_draft_accepted_outputs_k_plus_one_tokens_a_step(engine):
    """Prompt 4, 9 tokens out, 3 drafts always accepted, steps of 1 s: the prefill samples token 1
    (and gets drafts), then each step verifies 3 drafts and outputs 4 tokens: 1 + 4 + 4 = 9 in 3 steps."""
    sim = Sim([(0.0, 4, 9)], engine=engine, max_num_batched_tokens=16, **spec(3, 1.0)).run()
    r = sim.reqs
    assert (int(r.num_out[0]), float(r.first_token[0]), float(r.finish[0])) == (9, 1.0, 3.0)
    assert [tuple(s.scheduled.values()) for s in sim.steps] == [(4,), (4,), (4,)]
    assert sim.engine.spec_counts() == [2, 6, 6, 2, 2, 2]  # 2 verifications, 6 drafts, all accepted


def test_no_draft_accepted_outputs_one_token_a_step_for_k_plus_one_computed(engine):
    """The same request with every draft rejected: one token a step (9 steps), each decode step
    computing its token and 3 drafts; the rejected drafts' KV is dropped, so nothing is recomputed."""
    sim = Sim([(0.0, 4, 9)], engine=engine, max_num_batched_tokens=16, **spec(3, 0.0)).run()
    assert float(sim.reqs.finish[0]) == 9.0
    assert [tuple(s.scheduled.values()) for s in sim.steps] == [(4,)] + [(4,)] * 8
    assert sim.engine.spec_counts() == [8, 24, 0, 0, 0, 0]
    assert int(sim.reqs.recomputed[0]) == 0
    assert int(sim.reqs.num_computed[0]) == 12  # prompt 4 + the 8 tokens fed back (the 9th never is)


def test_a_finished_request_outputs_no_token_past_its_length(engine):
    """6 tokens out with 3 drafts always accepted: 1, then 4, then only the 1 left (not 4)."""
    sim = Sim([(0.0, 4, 6)], engine=engine, max_num_batched_tokens=16, **spec(3, 1.0)).run()
    assert int(sim.reqs.num_out[0]) == 6
    assert float(sim.reqs.finish[0]) == 3.0


def test_the_token_budget_cuts_drafts_first(engine):
    """Two decoding requests with 3 drafts each and a budget of 6: the first gets its token and 3
    drafts, the second its token and 1 draft (vLLM trims the drafts that do not fit)."""
    sim = Sim([(0.0, 2, 20), (0.0, 2, 20)], engine=engine, max_num_batched_tokens=6, **spec(3, 1.0)).run(until=2.5)
    assert tuple(sim.steps[1].scheduled.values()) == (4, 2)


def test_lookahead_slots_are_allocated_ahead_of_the_tokens(engine):
    """Prompt 7 in blocks of 4, 2 drafts, 10 usable blocks: admitted, the request holds its 7 tokens
    (2 blocks), or with 2 lookahead slots (an EAGLE head, a draft model) ceil(9 / 4) = 3, as vLLM 0.32
    allocates them from the first step (the recorded spec_draft3_batch_fits); in its first decode
    step it computes 8 + 2 = 10 tokens (3 blocks), 12 with the slots (still 3)."""
    req = [(0.0, 7, 20)]
    ahead = Sim(req, engine=engine, max_num_batched_tokens=16, **spec(2, 1.0, lookahead=2))
    plain = Sim(req, engine=engine, max_num_batched_tokens=16, **spec(2, 1.0))
    assert [ahead.run(until=0.5).free_blocks(), plain.run(until=0.5).free_blocks()] == [7, 8]
    assert [ahead.run(until=1.5).free_blocks(), plain.run(until=1.5).free_blocks()] == [7, 7]


def test_a_draft_model_keeps_a_token_of_the_budget_per_scheduled_request(engine):
    """A draft model (2 drafts, 2 lookahead slots, 1 budget token per scheduled request for its
    inputs), budget 16, two prompts of 20: step 0 gives R0 16 - 1 = 15 tokens (17 slots: 5 blocks)
    and nothing is left for R1; step 1 gives R0 its last 5 (1 + 5 taken) and R1 16 - 6 - 1 = 9."""
    sim = Sim(
        [(0.0, 20, 4), (0.0, 20, 4)],
        engine=engine,
        max_num_batched_tokens=16,
        spec_draft_slots=1,
        **spec(2, 1.0, lookahead=2),
    )
    assert sim.run(until=0.5).free_blocks() == 5
    sim.run(until=2.5)
    assert [s.scheduled for s in sim.steps[:2]] == [{0: 15}, {0: 5, 1: 9}]


def test_requests_preempted_while_speculating_finish_with_exactly_their_tokens(engine):
    """A pool too small for two speculating requests: one is preempted (its drafts and KV dropped),
    comes back, and both end with exactly their 12 tokens; the reference's drafts go with the victim."""
    sim = Sim([(0.0, 8, 12), (0.0, 8, 12)], num_gpu_blocks=7, engine=engine, max_num_batched_tokens=32, **spec(2, 1.0))
    sim.run()
    assert int(sim.reqs.preemptions.sum()) >= 1
    assert list(sim.reqs.num_out[:2]) == [12, 12]
    assert list(sim.reqs.status[:2]) == [rules.RequestStatus.FINISHED, rules.RequestStatus.FINISHED]
    if engine == "reference":
        assert sim.engine.sched.drafts == {}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**40), rid=st.integers(0, 10**7), out=st.integers(0, 10**5))
def test_the_acceptance_draw_is_in_0_1_and_fixed_by_seed_request_and_position(seed, rid, out):
    """Both engine steps draw the same number for the same verification, whatever else happened."""
    u = rules.spec_uniform(seed, rid, out)
    assert 0.0 <= u < 1.0
    assert u == rules.spec_uniform(seed, rid, out)


def test_accepted_drafts_follow_the_rates_asked_for():
    """Over 200,000 verifications of 3 drafts at conditional rates 0.8, 0.5, 0.25, the shares accepted
    at each position are 0.8, 0.4, 0.1 within 0.5 points, and the mean acceptance length 2.3."""
    cfg = SpeculativeConfig(method="eagle3", num_speculative_tokens=3, acceptance_rate=[0.8, 0.5, 0.25])
    at_least = speculative.accept_at_least(cfg)
    n = 200_000
    counts = [0, 0, 0]
    total = 0
    for i in range(n):
        a = rules.spec_accepted(rules.spec_uniform(7, i, i % 50), 3, at_least)
        total += a
        for p in range(a):
            counts[p] += 1
    assert [c / n for c in counts] == pytest.approx([0.8, 0.4, 0.1], abs=0.005)
    assert 1 + total / n == pytest.approx(speculative.mean_acceptance_length(cfg), abs=0.01)
    assert speculative.mean_acceptance_length(cfg) == pytest.approx(2.3)


def test_a_run_with_drafts_is_deterministic_and_its_counters_add_up():
    """The same scenario twice gives the same summary; the summary's counters agree with each other
    (accepted per position sums to the accepted, the rate is accepted over drafts)."""
    over = [
        "run.duration_s=20",
        "run.warmup_s=2",
        "workload.arrival.concurrency=32",
        "engine.speculative_config={method: eagle3, num_speculative_tokens: 4}",
    ]
    a = summarize(simulate(load_scenario(None, over)[0]))
    b = summarize(simulate(load_scenario(None, over)[0]))
    assert a == b
    s = a["spec_decode"]
    per = s["acceptance_rate_per_position"]
    assert sum(p * s["num_drafts"] for p in per) == pytest.approx(s["num_accepted_tokens"])
    assert s["draft_acceptance_rate"] == pytest.approx(s["num_accepted_tokens"] / s["num_draft_tokens"])
    assert per == sorted(per, reverse=True)  # a later draft is accepted only after the earlier ones


def test_the_drafter_costs_memory_and_time():
    """An EAGLE-3 head takes weights and a layer's KV from the pool (fewer KV tokens); a drafts step
    costs more than a plain one, and at concurrency 1 the run still outputs faster (tokens per second)."""
    base = ["run.duration_s=30", "run.warmup_s=3", "workload.arrival.concurrency=1"]
    sc0, _ = load_scenario(None, base)
    sc1, _ = load_scenario(None, [*base, "engine.speculative_config={method: eagle3}"])
    m0, m1 = (memory_plan(sc, load_arch(sc), _gpu(sc), 1024, 8192) for sc in (sc0, sc1))
    assert m1.weight_bytes > m0.weight_bytes and m1.kv_bytes_per_token > m0.kv_bytes_per_token
    assert m1.num_gpu_blocks < m0.num_gpu_blocks
    s0, s1 = summarize(simulate(sc0)), summarize(simulate(sc1))
    assert s1["output_throughput"] > 1.3 * s0["output_throughput"]
    assert s1["median_itl_ms"] > s0["median_itl_ms"]  # a step with drafts takes longer...
    assert s1["median_tpot_ms"] < s0["median_tpot_ms"]  # ...and outputs more than one token


def _gpu(sc):
    from simulator.scenario.hardware import load_gpu

    return load_gpu(sc.hardware.gpu)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("engine.speculative_config.acceptance_rate=1.2", "acceptance_rate must be a number in [0, 1]"),
        ("engine.speculative_config={method: eagle, acceptance_rate: [0.5]}", "one rate per draft position, 3"),
        ("engine.speculative_config={method: draft_model}", "draft_model must name the draft model"),
        (
            "engine.speculative_config={method: draft_model, draft_model: qwen3-0.6b}",
            "acceptance_rate must be given for method draft_model",
        ),
        ("engine.speculative_config.num_speculative_tokens=17", "num_speculative_tokens must be <= 16"),
        ("engine.speculative_config.method=medusa", "engine.speculative_config.method"),
    ],
)
def test_bad_speculative_settings_name_the_field_and_rule(override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_scenario(None, [override])


def test_the_defaults_have_the_published_acceptance_lengths():
    """EAGLE-3's default gives vLLM's MT-Bench acceptance length for Llama-3.1-8B (2.60) at k = 3;
    EAGLE's the 2.29 of vLLM issue #20780."""
    length = speculative.mean_acceptance_length
    assert length(SpeculativeConfig(method="eagle3")) == pytest.approx(2.605, abs=0.001)
    assert length(SpeculativeConfig(method="eagle")) == pytest.approx(2.29, abs=0.005)
    assert math.isclose(length(SpeculativeConfig(method="mtp", num_speculative_tokens=1)), 1.81)


def test_openmetrics_and_steps_carry_vllms_spec_decode_counters():
    """vLLM's spec_decode counters over time: the OpenMetrics series end at the summary's totals, and
    steps.csv's per-step columns add up to them; a run without drafts has neither."""
    from simulator.metrics import step_columns
    from simulator.outputs.export import openmetrics_text

    def last_values(res) -> dict:
        out = {}
        for line in openmetrics_text(res, interval_s=5.0).decode().splitlines():
            if not line.startswith("#"):
                name, value, _t = line.rsplit(" ", 2)
                out[name.split("{")[0]] = float(value)
        return out

    sc, _ = load_scenario("scenarios/spec_decode_eagle3.yaml", ["run.duration_s=20", "run.warmup_s=0"])
    res = simulate(sc)
    spec = summarize(res)["spec_decode"]
    last, steps = last_values(res), step_columns(res)
    for series, col, key in (
        ("vllm:spec_decode_num_drafts_total", "spec_drafts", "num_drafts"),
        ("vllm:spec_decode_num_draft_tokens_total", "spec_draft_tokens", "num_draft_tokens"),
        ("vllm:spec_decode_num_accepted_tokens_total", "spec_accepted_tokens", "num_accepted_tokens"),
    ):
        assert last[series] == spec[key] == int(steps[col].sum()) > 0
    off = simulate(
        load_scenario(
            "scenarios/spec_decode_eagle3.yaml", ["run.duration_s=5", "run.warmup_s=0", "engine.speculative_config={}"]
        )[0]
    )
    assert "spec_drafts" not in step_columns(off)
    assert not any(k.startswith("vllm:spec_decode") for k in last_values(off))
