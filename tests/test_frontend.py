"""The API server in front of the engine (simulator.frontend), by hand and through whole runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import blank_scenario
from simulator.cost import (
    P_FE_FINISH,
    P_FE_LATENCY,
    P_FE_ON,
    P_FE_PROMPT_TOKEN,
    P_FE_REQUEST,
    P_FE_STEP,
    P_FE_TOKEN,
    ConstantCost,
)
from simulator.frontend import delivered, intake_end, reaches_engine
from simulator.run import simulate

BASE = ["model=llama-3.1-8b", "hardware.gpu=h100-sxm", "run.warmup_s=0", "run.duration_s=null"]


def frontend_params(request=0.01, prompt_token=1e-5, step=0.002, token=0.001, latency=0.05, finish=0.003):
    cp = ConstantCost(1.0).params.copy()
    cp[[P_FE_REQUEST, P_FE_PROMPT_TOKEN, P_FE_STEP, P_FE_TOKEN, P_FE_LATENCY, P_FE_FINISH]] = [
        request, prompt_token, step, token, latency, finish]

    cp[P_FE_ON] = 1.0
    return cp


def test_intake_and_delivery_by_hand():
    """A burst of three requests is taken in one after another; a step's tokens wait for the intake
    still queued ahead of them; an idle front-end delivers at once plus its own work."""
    cp = frontend_params()
    free = 0.0
    ends = []
    for prompt in (100, 200, 300):
        free = intake_end(cp, free, 0.0, prompt)
        ends.append(free)
    assert ends == pytest.approx([0.011, 0.011 + 0.012, 0.011 + 0.012 + 0.013])
    assert reaches_engine(cp, ends[0]) == pytest.approx(0.061)
    # A step ending at 0.02 (during the third intake) delivers its 5 tokens after it.
    assert delivered(cp, free, 0.02, 5, 0) == pytest.approx(0.036 + 0.002 + 0.005)
    # Later, with the front-end idle, right away plus its own work (two of the five end: 3 ms
    # each); a step without tokens at once.
    assert delivered(cp, free, 1.0, 5, 0) == pytest.approx(1.007)
    assert delivered(cp, free, 1.0, 5, 2) == pytest.approx(1.013)
    assert delivered(cp, free, 1.0, 0, 0) == 1.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 10), st.integers(1, 5000)), min_size=1, max_size=40))
def test_intake_is_first_come_first_served_and_never_early(arrivals):
    """Intake ends are nondecreasing in arrival order, never before arrival plus the request's own
    work, and the server is never idle while a request waits."""
    cp = frontend_params()
    arrivals = sorted(arrivals)
    free, prev = 0.0, 0.0
    for t, prompt in arrivals:
        end = intake_end(cp, free, t, prompt)
        own = cp[P_FE_REQUEST] + cp[P_FE_PROMPT_TOKEN] * prompt
        assert end >= t + own - 1e-12 and end >= prev
        assert end == pytest.approx(max(t, free) + own)
        free = prev = end


def test_a_burst_waits_for_the_whole_intake_before_its_first_tokens():
    """1,000 requests at once: every first token arrives after the last request was taken in (the
    front-end works first come first served, outputs queue behind the burst's intake), as the
    public bursts show (TTFT concentrated near the end of the intake)."""
    sc = blank_scenario([*BASE, "workload.arrival={type: closed_loop, concurrency: 1000}", "run.num_requests=1000",
                         "workload.prompt_tokens={dist: fixed, value: 128}", "workload.output_tokens={dist: fixed, value: 4}",
                         "frontend.request_ms=10", "frontend.prompt_token_us=0", "frontend.latency_ms=0",
                         "frontend.finish_ms=0"])
    res = simulate(sc)
    c = res.reqs.columns()
    intake_done = 1000 * 0.010
    assert (c["first_token"] > intake_done).all()
    ttft = c["first_token"] - c["arrival"]
    assert np.median(ttft) > 0.9 * intake_done


def test_api_servers_share_the_work_and_a_disabled_frontend_adds_nothing():
    """Two API servers halve the burst's intake; without a front-end the first token comes one
    prefill step after arrival."""
    def run(*over):
        sc = blank_scenario([*BASE, "workload.arrival={type: closed_loop, concurrency: 200}", "run.num_requests=200",
                             "workload.prompt_tokens={dist: fixed, value: 64}", "workload.output_tokens={dist: fixed, value: 2}",
                             "frontend.request_ms=20", "frontend.prompt_token_us=0", "frontend.latency_ms=0", *over])
        res = simulate(sc)
        c = res.reqs.columns()
        return res, float(np.max(c["first_token"] - c["arrival"]))

    _, one = run()
    _, two = run("frontend.api_server_count=2")
    assert one >= 4.0 and 2.0 <= two < 0.6 * one
    _, off = run("frontend.enabled=false")
    assert off < 1.0
