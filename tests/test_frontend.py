"""The API server in front of the engine (simulator.engine.host, its reference form
simulator.engine.reference.api_server), by hand and through whole runs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.cost import (
    ConstantCost,
)
from simulator.engine.host import (
    ApiServer as ApiServerCosts,
)
from simulator.engine.host import (
    HostModel,
    after_intake,
    delivered,
    intake_passes,
    intake_start,
    reaches_engine,
    step_start,
    tokens_streamed_s,
    turnaround,
)
from simulator.engine.params import P
from simulator.engine.reference.api_server import ApiServer
from simulator.run import simulate
from simulator.scenario.config import blank_scenario

BASE = ["model=llama-3.1-8b", "hardware.gpu=h100-sxm", "run.warmup_s=0", "run.duration_s=null"]


def frontend_params(request=0.01, prompt_token=1e-5, step=0.002, token=0.001, latency=0.05, finish=0.003):
    cp = ConstantCost(1.0).params.copy()
    cp[[P.FE_REQUEST_S, P.FE_PROMPT_TOKEN_S, P.FE_STEP_S, P.FE_TOKEN_S, P.FE_LATENCY_S, P.FE_FINISH_S]] = [
        request,
        prompt_token,
        step,
        token,
        latency,
        finish,
    ]

    cp[P.FE_ON] = 1.0
    return cp


def test_intake_and_delivery_by_hand():
    """Three requests at once, each a first pass (half its work) ready when sent and a second pass
    ready when the first ends, behind what became ready meanwhile: the first passes take 5.5 + 6 +
    6.5 ms, then the second passes in order; a step's tokens wait for the outputs before them and
    the piece of intake in progress; an idle API server delivers at once plus its own work."""
    cp = frontend_params()
    cp[P.FE_FIRST_PASS] = 0.5
    passes = [intake_passes(cp, prompt) for prompt in (100, 200, 300)]
    assert passes == [pytest.approx((0.0055, 0.0055)), pytest.approx((0.006, 0.006)), pytest.approx((0.0065, 0.0065))]
    api = ApiServer(cp.tolist())
    for rid, prompt in enumerate((100, 200, 300)):
        api.send(rid, 0.0, prompt)
    assert api.next_event() == 0.0  # the first piece starts at once
    api.run_until(0.02)  # the three first passes (to 0.018), then the first one's second pass
    assert api.intake_busy == pytest.approx(0.0235)
    assert api.reached(0.07) == []  # ... it ends at 0.0235 and reaches the engine 50 ms later
    api.run_until(1.0)
    assert api.intake_busy == pytest.approx(0.036)  # the whole work, 36 ms, as one pass would
    assert api.next_event() == pytest.approx(0.0735)
    assert api.reached(0.0736) == [0] and api.reached(0.0866) == [1, 2]
    assert reaches_engine(cp, 0.0235) == pytest.approx(0.0735)
    # A step ending at 0.02, during the second pass that ends at 0.0235, delivers its 5 tokens
    # after that pass and ahead of the intake still queued; one after outputs busy until 0.03, after those.
    assert delivered(cp, 0.0, 0.0235, 0.02, 5, 0) == pytest.approx((0.0235, 0.0235 + 0.002 + 0.005))
    assert delivered(cp, 0.03, 0.0235, 0.02, 5, 0) == pytest.approx((0.03, 0.03 + 0.002 + 0.005))
    # Later, with the API server idle, right away plus its own work (two of the five end: 3 ms
    # each); a step without tokens at once.
    assert api.stream(1.0, 5, 0) == pytest.approx(1.007) and api.batch_start == 1.0
    assert api.stream(2.0, 5, 2) == pytest.approx(2.013)
    assert api.stream(3.0, 0, 0) == 3.0 and api.outputs_free == pytest.approx(2.013)
    assert intake_passes(ConstantCost(1.0).params, 1000) == (0.0, 0.0)  # no API server


def test_intake_waits_for_one_batch_of_outputs_not_a_backlog():
    """A piece of intake starts once the piece of intake in progress is done, then after the
    outputs queued if they are one batch at most; with a backlog of more, at once, ahead of the
    batches not started (which it then pushes back by its work); with nothing queued, at once."""
    assert intake_start(1.0, 0.5, 0.8, 0.7) == 1.0  # outputs done before now
    assert intake_start(1.0, 0.5, 1.2, 0.9) == 1.2  # the last batch runs 0.9-1.2: wait for it
    assert intake_start(1.0, 0.5, 1.2, 1.0) == 1.2  # one batch queued, starting now: it goes first
    assert intake_start(1.0, 1.1, 1.3, 1.1) == 1.3  # queued behind the intake piece in progress: still first
    assert intake_start(1.0, 0.5, 2.0, 1.8) == 1.0  # batches queued until 2.0: ahead of them
    assert intake_start(1.0, 1.3, 2.0, 1.8) == 1.3  # the intake piece in progress ends later
    assert after_intake(2.0, 1.8, 1.2, 0.01) == pytest.approx((2.01, 1.81))  # the backlog waits for it
    assert after_intake(1.0, 0.9, 1.2, 0.01) == (1.0, 0.9)  # no output queued after it: nothing moves


def test_step_start_by_hand():
    """A paced engine starts its next step when the front-end starts on the last step's outputs, and
    at once if it already has; without pacing, or without a front-end, at once."""
    cp = frontend_params()
    cp[P.FE_PACE] = 1.0
    assert step_start(cp, 1.0, 1.25) == 1.25
    assert step_start(cp, 1.0, 0.5) == 1.0
    cp[P.FE_PACE] = 0.0
    assert step_start(cp, 1.0, 1.25) == 1.0


def test_turnaround_by_hand():
    """A closed-loop client's next request is taken in ``rounds`` rounds of the API server's streams
    after its last one ended: each round one step's outputs (2 ms, plus 1 ms per running request);
    with no rounds, at once."""
    cp = frontend_params()
    cp[P.FE_ROUNDS] = 10.0
    assert turnaround(cp, 1.0, 0) == pytest.approx(1.02)
    assert turnaround(cp, 1.0, 100) == pytest.approx(1.0 + 10 * (0.002 + 0.1))
    cp[P.FE_ROUNDS] = 0.0
    assert turnaround(cp, 1.0, 100) == 1.0


def test_a_streamed_tokens_cost_grows_with_the_streams_of_its_batch_by_hand():
    """``stream_doubling`` N: a token of a batch of n costs token_s (1 + n / N), so 1 ms a token at
    N = 1,000 is 1.1 ms in a batch of 100 (110 ms for the batch, plus its 2 ms) and 2 ms in a batch
    of 1,000; two API servers each stream half the batch (N per server: the growth per token of the
    whole batch halves, and so does the base cost); none (0) keeps the cost flat, byte for byte."""
    cp = frontend_params()
    assert tokens_streamed_s(cp, 100) == 0.1  # flat: exactly the old cost
    growth = HostModel(api_server=ApiServerCosts(token_s=0.001, step_s=0.002, stream_doubling=1000.0)).params()
    cp[P.FE_TOKEN_GROWTH] = growth["fe_token_growth"]
    assert tokens_streamed_s(cp, 100) == pytest.approx(0.11)
    assert tokens_streamed_s(cp, 1000) == pytest.approx(2.0)
    assert delivered(cp, 0.0, 0.0, 1.0, 100, 0) == pytest.approx((1.0, 1.0 + 0.002 + 0.11))
    assert turnaround(cp, 0.0, 100) == 0.0  # no rounds
    two = HostModel(api_server=ApiServerCosts(token_s=0.001, servers=2, stream_doubling=1000.0)).params()
    assert (two["fe_token_s"], two["fe_token_growth"]) == (0.0005, 0.0005)  # 1,000 tokens: 500 x 1.5 ms a server
    assert HostModel(api_server=ApiServerCosts(token_s=0.001)).params()["fe_token_growth"] == 0.0


def test_sglang_streams_past_a_few_hundred_clients_more_slowly_per_token():
    """SGLang's fitted host set makes a token of a batch of 750 cost more than one of 256 (the
    recorded servers: about 145 and 90 us); vLLM's sets keep a flat cost."""
    from simulator.scenario import hosts

    sgl = hosts.load_host_costs("sglang")
    assert sgl.stream_doubling > 0
    per_token = [sgl.token_s * (1 + n / sgl.stream_doubling) for n in (256, 750)]
    assert per_token[1] > 1.15 * per_token[0]
    assert hosts.load_host_costs("recorded").stream_doubling == 0.0 == hosts.load_host_costs("public").stream_doubling


def _intake_wait_and_ttft(arrival, rounds, n=2000):
    """The medians of a run's requests after its first 200: (the wait from the client's send to the
    API server's taking it in, TTFT)."""
    sc = blank_scenario(
        [
            *BASE,
            f"workload.arrival={arrival}",
            f"run.num_requests={n}",
            "workload.prompt_tokens={dist: fixed, value: 128}",
            "workload.output_tokens={dist: lognormal, mean: 64, sigma: 0.5}",
            f"frontend.intake_rounds={rounds}",
            "frontend.output_token_us=50",
            "frontend.step_us=200",
            # the engine's own CPU costs pinned, so that its pace does not move with a refit
            "cost.engine_cpu_ms=4",
            "cost.engine_cpu_per_seq_us=38",
        ]
    )
    c = simulate(sc).reqs.columns()
    return tuple(float(np.median((c[end] - c["arrival"])[200:])) for end in ("ready", "first_token"))


def test_a_closed_loop_waits_rounds_of_streams_and_poisson_arrivals_do_not():
    """With 10 rounds and 200 clients (about 200 in flight), each request after a client's first waits
    about 10 x (0.2 ms + 50 us x 200) = 102 ms before the API server takes it in; its TTFT grows by
    less (some of it given back: it then finds the engine less busy than 200 sends at once would, by
    how much depends on the GPU's steps). Poisson arrivals (no client whose last request just ended)
    and clients who think longer than the rounds take wait nothing more."""
    loop = "{type: closed_loop, concurrency: 200}"
    (wait, ttft), (no_wait, ttft_0) = _intake_wait_and_ttft(loop, 10), _intake_wait_and_ttft(loop, 0)
    assert no_wait == 0.0 and wait == pytest.approx(10 * (0.2e-3 + 50e-6 * 200), rel=0.02)
    assert 0.0 < ttft - ttft_0 < wait
    poisson = "{type: poisson, rate: 50}"
    assert _intake_wait_and_ttft(poisson, 10) == _intake_wait_and_ttft(poisson, 0)
    thinking = "{type: closed_loop, concurrency: 200, think_time_s: 1.0}"
    assert _intake_wait_and_ttft(thinking, 10) == _intake_wait_and_ttft(thinking, 0)


def _overloaded(paces):
    """Poisson arrivals past what a front-end streaming each token at 0.2 ms (5,000 tokens/s) can
    serve, on an engine that could generate several times that."""
    sc = blank_scenario(
        [
            *BASE,
            "workload.arrival={type: poisson, rate: 80}",
            "run.num_requests=1200",
            "workload.prompt_tokens={dist: fixed, value: 128}",
            "workload.output_tokens={dist: fixed, value: 200}",
            "frontend.output_token_us=200",
            "frontend.request_ms=1",
            f"frontend.paces_engine={str(paces).lower()}",
        ]
    )
    res = simulate(sc)
    steps, c = res.engine.log.columns(), res.reqs.columns()
    engine_rate = c["num_out"].sum() / float(steps["start"][-1] + steps["duration"][-1] - steps["start"][0])
    client_rate = c["num_out"].sum() / float(c["finish"].max() - c["arrival"].min())
    return engine_rate, client_rate


def test_a_paced_engine_generates_no_faster_than_its_front_end_streams():
    """Past the front-end's capacity, a paced engine (``frontend.paces_engine``, the default from vLLM
    0.26 on) steps at the front-end's pace: it generates tokens no faster than they are streamed,
    while an unpaced one runs ahead and leaves its outputs queued. The clients see the front-end's
    rate either way."""
    paced_engine, paced_clients = _overloaded(True)
    free_engine, free_clients = _overloaded(False)
    assert paced_engine <= 5000 * 1.02 and paced_clients <= 5000
    assert free_engine > 2 * 5000 and free_clients <= 5000


def test_a_saturated_front_end_caps_throughput_but_still_takes_requests_in():
    """400 clients whose tokens cost the front-end 0.2 ms each: the front-end streams at most 5,000
    tokens a second, and the clients, who send their next request only once the last one has reached
    them, keep the engine's batch to what it can stream; an engine that is not paced by its front-end
    then takes a request sent in within a few steps (the intake does not wait behind queued outputs;
    simulator.engine.host)."""
    sc = blank_scenario(
        [
            *BASE,
            "workload.arrival={type: closed_loop, concurrency: 400}",
            "run.num_requests=1600",
            "workload.prompt_tokens={dist: fixed, value: 128}",
            "workload.output_tokens={dist: lognormal, mean: 200, sigma: 0.5}",
            "frontend.output_token_us=200",
            "frontend.request_ms=1",
            "frontend.latency_ms=0",
            "frontend.paces_engine=false",
            "frontend.intake_rounds=0",  # the intake's own queue, not the turnaround of a kept-alive client
        ]
    )
    res = simulate(sc)
    steps = res.engine.log.columns()
    c = res.reqs.columns()
    busy = steps["num_running"] > 0
    step = float(np.median(steps["duration"][busy]))
    tokens_per_s = c["num_out"].sum() / (c["finish"].max() - c["arrival"].min())
    assert 0.85 * 5000 < tokens_per_s <= 5000
    assert float(np.median(c["first_scheduled"] - c["arrival"])) < 5 * step


def _burst(n, *over):
    sc = blank_scenario(
        [
            *BASE,
            f"workload.arrival={{type: closed_loop, concurrency: {n}}}",
            f"run.num_requests={n}",
            "workload.prompt_tokens={dist: fixed, value: 128}",
            "workload.output_tokens={dist: fixed, value: 4}",
            "frontend.request_ms=10",
            "frontend.prompt_token_us=0",
            "frontend.latency_ms=0",
            "frontend.finish_ms=0",
            "frontend.output_token_us=0",
            "frontend.step_us=0",
            *over,
        ]
    )
    return simulate(sc).reqs.columns()


@pytest.mark.parametrize("share", [0.25, 0.5, 1.0])
def test_a_burst_reaches_the_engine_from_its_first_passes_on(share):
    """1,000 requests at once with 10 ms of intake each (outputs cost nothing here): the first
    reaches the engine after all the first passes (share x 10 s) and its own second pass; then one
    every second pass; the last once all the work is done (10 s), whatever the share; the first
    tokens stream out meanwhile (ahead of the intake still queued)."""
    c = _burst(1000, f"frontend.first_pass={share}")
    reach = np.sort(c["first_scheduled"])  # scheduled on reaching an idle-enough engine
    # With one pass (share 1) nothing yields: the first is in after its own 10 ms.
    start = 0.010 if share == 1.0 else 1000 * share * 0.010 + (1 - share) * 0.010
    assert reach[0] == pytest.approx(start, abs=0.05)
    assert reach[-1] == pytest.approx(10.0, abs=0.2)
    ttft = c["first_token"] - c["arrival"]
    # TTFTs spread evenly from the first one in to the intake's end: the mean near the middle.
    assert float(np.mean(ttft)) == pytest.approx((start + 10.0) / 2, rel=0.1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.integers(1, 3000)), min_size=1, max_size=30), st.floats(0.0, 1.0))
def test_intake_keeps_arrival_order_and_never_gets_ahead_of_its_work(arrivals, share):
    """Whatever the share of the first pass, and whether the intake runs in one stride or event by
    event, requests reach the engine in the order they were sent, never before they were sent plus
    their own intake work, and the last when first come first served would have finished (the
    server never idles with work queued)."""
    arrivals = sorted(arrivals)
    cp = frontend_params(latency=0.0)
    cp[P.FE_FIRST_PASS] = share
    strides, events = ApiServer(cp.tolist()), ApiServer(cp.tolist())
    for rid, (t, prompt) in enumerate(arrivals):
        strides.send(rid, t, prompt)
        events.send(rid, t, prompt)
    strides.run_until(1e9)
    reach = []
    while (t := events.next_event()) < float("inf"):  # one move at a time, as an idle engine sees it
        events.run_until(t)
        reach += [(rid, t) for rid in events.reached(t)]
    assert [i for i, _ in reach] == list(range(len(arrivals)))
    assert strides.reached(1e9) == [i for i, _ in reach] and strides.intake_busy == events.intake_busy
    fifo = 0.0
    for (_, r), (a, prompt) in zip(reach, arrivals, strict=True):
        work = sum(intake_passes(cp, prompt))
        fifo = max(a, fifo) + work
        assert r >= a + work - 1e-9
    assert reach[-1][1] == pytest.approx(fifo)


def test_api_servers_share_the_work_and_a_disabled_frontend_adds_nothing():
    """Two API servers halve the burst's intake; without a front-end the first token comes one
    prefill step after arrival."""

    def run(*over):
        sc = blank_scenario(
            [
                *BASE,
                "workload.arrival={type: closed_loop, concurrency: 200}",
                "run.num_requests=200",
                "workload.prompt_tokens={dist: fixed, value: 64}",
                "workload.output_tokens={dist: fixed, value: 2}",
                "frontend.request_ms=20",
                "frontend.prompt_token_us=0",
                "frontend.latency_ms=0",
                *over,
            ]
        )
        res = simulate(sc)
        c = res.reqs.columns()
        return res, float(np.max(c["first_token"] - c["arrival"]))

    _, one = run()
    _, two = run("frontend.api_server_count=2")
    assert one >= 4.0 and 2.0 <= two < 0.6 * one
    _, off = run("frontend.enabled=false")
    assert off < 1.0


def _noted(overrides: list[str]) -> tuple[dict, list[str]]:
    """A run's summary and its notes."""
    from simulator.metrics import summarize
    from simulator.outputs.notes import run_notes

    res = simulate(blank_scenario(overrides))
    s = summarize(res)
    return s, run_notes(s, res)


def _poisson_overload(*over):
    return _noted(
        [
            *BASE,
            "workload.arrival={type: poisson, rate: 60}",
            "run.num_requests=1200",
            "workload.prompt_tokens={dist: fixed, value: 64}",
            "workload.output_tokens={dist: fixed, value: 256}",
            *over,
        ]
    )


def test_an_overload_held_in_the_api_server_says_tpot_is_a_floor_and_how_high_it_could_go():
    """Requests cost the API server 25 ms each, so it takes in 40 a second of the 60 that arrive: the
    backlog waits before the engine, whose running count the load does not fix. The note gives the
    count servesim's engine held and the token interval at max_num_seqs for this output rate (by
    hand: 1,000 * max_num_seqs / output tokens a second)."""
    s, notes = _poisson_overload("frontend.request_ms=25", "engine.max_num_seqs=512")
    assert any(": overloaded: " in n for n in notes)
    api = [n for n in notes if "backlog waits in the API server" in n]
    assert len(api) == 1 and "read TPOT as a floor" in api[0]
    assert f"every {1000.0 * 512 / s['output_throughput']:,.0f} ms" in api[0]
    running = int(api[0].split("drifts with the run: ")[1].split(" here")[0].replace(",", ""))
    assert 0 < running < 512


def test_the_api_server_note_takes_the_cap_the_engine_ran_with_when_the_scenario_leaves_it():
    """engine.max_num_seqs left null (the release line's default): the note gives the token interval
    at the cap the engine ran with, as a user's scenario without the knob, or a `servesim bench`
    replay, gets it (it raised a TypeError on None)."""
    s, notes = _poisson_overload("frontend.request_ms=25", "engine.max_num_seqs=null")
    api = [n for n in notes if "backlog waits in the API server" in n]
    most = s["max_num_seqs"]
    assert len(api) == 1 and most > 0 and f"were it max_num_seqs ({most:,})" in api[0]
    assert f"every {1000.0 * most / s['output_throughput']:,.0f} ms" in api[0]


def test_an_overload_held_in_the_engine_gives_no_api_server_note():
    """The same arrivals on an engine of 8 sequences at most, its API server nearly free: the backlog
    waits in the engine's own queue, and the note is not given."""
    _, notes = _poisson_overload("frontend.request_ms=0.1", "engine.max_num_seqs=8")
    assert any(": overloaded: " in n for n in notes)
    assert not any("backlog waits in the API server" in n for n in notes)


def _closed_loop(*over, clients: int = 640):
    return _noted(
        [
            *(b for b in BASE if not b.startswith("hardware.gpu=")),
            "hardware.gpu=h200",
            f"workload.arrival={{type: closed_loop, concurrency: {clients}}}",
            f"run.num_requests={2 * clients}",
            "workload.prompt_tokens={dist: fixed, value: 64}",
            "workload.output_tokens={dist: fixed, value: 512}",
            "engine.max_num_seqs=1024",
            *over,
        ]
    )


def test_a_closed_loop_paced_by_one_api_server_at_many_running_says_how_far_to_trust_it():
    """512 clients of short prompts and 512 output tokens, all of them running at once: streaming a
    token for each of them costs one API server more than the H200's step (graphed up to 512), so the
    engine waits for it most steps, and the note says to read the band there, with what recorded
    servers did; two API servers keep up (no note), and one with 256 clients has too few
    running for it. (At 640 the step runs without a graph and the engine core itself is the slower.)"""
    _, notes = _closed_loop(clients=512)
    paced = [n for n in notes if "one API server paced the engine" in n]
    assert len(paced) == 1 and "read the band" in paced[0] and "fourteen recorded runs on ten machines" in paced[0]
    share = int(paced[0].split("API server in ")[1].split("%")[0])
    running = int(paced[0].split("% of its steps, ")[1].split(" requests running")[0].replace(",", ""))
    assert 50 <= share <= 100 and 512 <= running <= 640
    _, notes = _closed_loop("frontend.api_server_count=2")
    assert not any("paced the engine" in n for n in notes)
    _, notes = _closed_loop(clients=256)
    assert not any("paced the engine" in n for n in notes)


def test_gpt_oss_chat_runs_no_template_so_a_request_costs_what_a_completion_does():
    """vLLM renders gpt-oss's chat in the Harmony format (``use_harmony``: model_type gpt_oss) instead of
    running a Jinja chat template: through /v1/chat/completions its requests are taken in and ended at
    the completions endpoint's costs, its tokens streamed at the chat endpoint's."""
    from simulator.resolve import host_model, load_arch, load_gpu
    from simulator.scenario.hosts import HostCosts

    h = HostCosts(request_s=0.004, finish_s=0.001, chat_request_s=0.011, chat_finish_s=0.008, chat_token_s=2e-5)
    assert h.api_costs(True, harmony=True) == {
        "request_s": 0.004,
        "token_s": 2e-5,
        "finish_s": 0.001,
        "first_pass": h.chat_first_pass,
        "latency_s": h.harmony_latency_s,
    }
    assert h.api_costs(True)["request_s"] == 0.011 and h.api_costs(False)["token_s"] == h.token_s
    # the fixed delay: a Harmony chat's own, a Jinja chat's and a completion's the same
    h = HostCosts(latency_s=0.04, harmony_latency_s=0.003)
    assert [h.api_costs(c, harmony=m)["latency_s"] for c, m in ((True, False), (True, True), (False, False))] == [
        0.04,
        0.003,
        0.04,
    ]

    def api(model):
        sc = blank_scenario([f"model={model}", "hardware.gpu=h100-sxm", "frontend.endpoint=chat", "hardware.host=null"])
        return host_model(sc, load_arch(sc), load_gpu(sc.hardware.gpu)).api_server

    oss, llama = api("gpt-oss-20b"), api("llama-3.1-8b")
    assert oss.request_s < llama.request_s and oss.finish_s < llama.finish_s and oss.token_s == llama.token_s
