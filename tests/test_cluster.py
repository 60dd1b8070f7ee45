"""Fleets of replicas behind a router, and prefill/decode disaggregation (simulator.fleet.cluster,
simulator.fleet.router): against queueing theory, by hand, and invariants."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.engine.rules import RequestStatus
from simulator.fleet.cluster import transfer_s
from simulator.metrics import summarize
from simulator.run import simulate
from simulator.scenario.config import blank_scenario

BASE = ["model=llama-3.1-8b", "hardware.gpu=h100-sxm", "run.warmup_s=0"]
CHAT = [
    "workload.prompt_tokens={dist: lognormal, mean: 300, sigma: 1.0, max: 8000}",
    "workload.output_tokens={dist: lognormal, mean: 200, sigma: 1.0, max: 4000}",
]


def run(*over: str):
    return simulate(blank_scenario([*BASE, *over]))


def test_one_replica_behind_a_router_is_the_single_engine():
    """A cluster of one replica serves every request exactly as the engine alone does."""
    common = ["workload.arrival={type: poisson, rate: 20}", *CHAT, "run.duration_s=60"]
    alone = run(*common).reqs.columns()
    fleet = run(*common, "cluster.replicas=1").reqs.columns()
    assert (fleet["replica"] == 0).all()
    for c in ("arrival", "first_token", "finish", "num_out", "status", "cached_tokens"):
        np.testing.assert_array_equal(alone[c], fleet[c], err_msg=c)


def test_one_replica_serves_a_closed_loop_as_the_engine_alone_turnaround_included():
    """The same with closed-loop clients, whose next requests wait for the API server's turnaround
    (simulator.engine.host.turnaround): the fleet's bookkeeping follows each request to its replica
    record although the record is made only when the request is taken in."""
    common = ["workload.arrival={type: closed_loop, concurrency: 64}", *CHAT, "run.duration_s=60"]
    alone = run(*common).reqs.columns()
    fleet = run(*common, "cluster.replicas=1").reqs.columns()
    assert len(alone["arrival"]) > 500
    for c in ("arrival", "first_token", "finish", "num_out", "status", "prompt_len"):
        np.testing.assert_array_equal(alone[c], fleet[c], err_msg=c)
    waited = alone["first_scheduled"] - alone["arrival"]
    assert np.nanmedian(waited) > 0.005  # the turnaround counts in the requests' TTFT


def test_random_routing_splits_poisson_arrivals_into_poisson_streams():
    """Each replica of a randomly routed Poisson stream of rate L sees a Poisson stream of rate L/N
    (exponential gaps: mean N/L, coefficient of variation 1), and serves what one replica alone
    serves at rate L/N, within sampling error."""
    lam, n, T = 40.0, 4, 400.0
    res = run(
        f"workload.arrival={{type: poisson, rate: {lam}}}",
        *CHAT,
        f"run.duration_s={T}",
        f"cluster.replicas={n}",
        "cluster.router=random",
    )
    c = res.reqs.columns()
    s = summarize(res)
    for i in range(n):
        gaps = np.diff(np.sort(c["arrival"][c["replica"] == i]))
        k = len(gaps)
        # Mean gap within 4 standard errors (std of an exponential = its mean); CV near 1.
        assert abs(gaps.mean() - n / lam) < 4 * (n / lam) / np.sqrt(k), (i, gaps.mean())
        assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1
    alone = summarize(
        run(f"workload.arrival={{type: poisson, rate: {lam / n}}}", *CHAT, f"run.duration_s={T}", "run.seed=11")
    )
    per = [r["request_throughput"] for r in s["replicas"]]
    # Throughput of a lightly loaded replica is its arrival rate: Poisson counts, std sqrt(rate T)/T.
    se = np.sqrt(lam / n / T)
    for x in per + [alone["request_throughput"]]:
        assert abs(x - lam / n) < 4 * se, (per, alone["request_throughput"])
    assert sum(per) == pytest.approx(s["request_throughput"])


def test_join_the_shortest_queue_waits_less_than_round_robin():
    """With service times that vary by orders of magnitude, sending each request to the replica
    with the fewest outstanding requests beats taking turns (and random) on waiting time, the
    classic multi-server result; all three see the same arrivals. The rate keeps the replicas busy
    (16 req/s over four: at 12 the queues are short enough that the routers nearly tie)."""
    common = [
        "workload.arrival={type: poisson, rate: 16}",
        "run.duration_s=200",
        "workload.prompt_tokens={dist: lognormal, mean: 2000, sigma: 1.5, max: 60000}",
        "workload.output_tokens={dist: lognormal, mean: 300, sigma: 1.2, max: 6000}",
        "cluster.replicas=4",
        "engine.max_num_seqs=16",
        "engine.max_num_batched_tokens=2048",
    ]
    ttft = {}
    for router in ("least_requests", "round_robin", "random"):
        c = run(*common, f"cluster.router={router}").reqs.columns()
        ok = c["status"] == RequestStatus.FINISHED
        ttft[router] = float(np.mean((c["first_token"] - c["arrival"])[ok]))
    assert ttft["least_requests"] < 0.8 * ttft["round_robin"] < ttft["random"], ttft


def test_requests_and_blocks_are_conserved_across_replicas():
    """Every client request is served by exactly one replica (one record there, none lost or
    doubled), and when all have ended every replica's KV pool has every block back."""
    res = run(
        "workload.arrival={type: poisson, rate: 30}",
        *CHAT,
        "run.num_requests=600",
        "run.duration_s=null",
        "cluster.replicas=3",
        "cluster.router=power_of_two",
    )
    cl = res.engine
    c = res.reqs.columns()
    assert len(c["status"]) == 600 and (c["status"] == RequestStatus.FINISHED).all()
    assert sum(r.engine.reqs.n for r in cl.replicas) == 600
    for i, r in enumerate(cl.replicas):
        assert r.engine.reqs.n == int((c["replica"] == i).sum())
        running, waiting, swapped, free = r.engine.queues()
        assert (running, waiting, swapped) == (0, 0, 0) and free == r.engine.num_blocks
        assert r.in_flight == 0


def test_disaggregated_requests_are_conserved_through_the_transfer():
    """With prefill and decode pools, each request has one prefill record and one decode record,
    its output counted once (on the decode side), and every pool empties at the end."""
    res = run(
        "workload.arrival={type: poisson, rate: 10}",
        *CHAT,
        "run.num_requests=300",
        "run.duration_s=null",
        "disaggregation={prefill: {count: 2}, decode: {count: 2}}",
    )
    cl = res.engine
    c = res.reqs.columns()
    assert (c["status"] == RequestStatus.FINISHED).all()
    assert set(c["prefill_replica"].tolist()) <= {0, 1} and set(c["decode_replica"].tolist()) <= {2, 3}
    pre = sum(r.engine.reqs.n for r in cl.replicas if r.role == "prefill")
    dec = sum(r.engine.reqs.n for r in cl.replicas if r.role == "decode")
    assert pre == dec == 300
    for r in cl.replicas:
        assert r.engine.queues()[3] == r.engine.num_blocks and r.in_flight == 0
    # Output tokens: the decode side's, counted once; the step log's total matches the records.
    total = sum(r.engine.log.window(0, res.end_time).num_generated for r in cl.replicas if r.role == "decode")
    assert int(c["num_out"].sum()) == total
    assert (c["transfer_start"] <= c["transfer_end"]).all() and (c["transfer_end"] < c["first_token"]).all()


def test_kv_transfer_by_hand():
    """One request: its KV (2 x layers x KV heads x head dim x 2 bytes per token for Llama-3.1-8B in
    BF16 = 128 KiB) crosses a 10 Gbit/s link with 5 ms latency after its prefill, and its first
    token comes from the decode replica after that."""
    prompt = 4000
    res = run(
        "workload.arrival={type: poisson, rate: 1}",
        "run.num_requests=1",
        "run.duration_s=null",
        f"workload.prompt_tokens={{dist: fixed, value: {prompt}}}",
        "workload.output_tokens={dist: fixed, value: 8}",
        "disaggregation={prefill: {count: 1}, decode: {count: 1}, kv_transfer: {bandwidth_gbps: 10, latency_ms: 5}}",
    )
    c = res.reqs.columns()
    per_token = 2 * 32 * 8 * 128 * 2
    assert per_token == 131072
    expected = 0.005 + prompt * per_token / (10e9 / 8)
    assert expected == pytest.approx(transfer_s(per_token, prompt, 10, 5))
    assert c["transfer_end"][0] - c["transfer_start"][0] == pytest.approx(expected, rel=1e-12)
    pre = res.engine.replicas[0].engine.reqs.columns()
    # The transfer starts when the prefill replica has delivered its token, and TTFT counts it.
    assert c["transfer_start"][0] == pytest.approx(pre["finish"][0])
    assert c["first_token"][0] > c["transfer_end"][0]
    assert c["num_out"][0] == 8 and c["status"][0] == RequestStatus.FINISHED
    # The decode replica computed only the last prompt token: its KV came with the request.
    dec = res.engine.replicas[1].engine.reqs.columns()
    assert dec["recomputed"][0] == 0 and dec["num_out"][0] == 8


def test_a_link_carries_one_transfer_at_a_time():
    """Two requests prefilled together on one prefill replica: the second transfer waits for the first."""
    res = run(
        "workload.arrival={type: closed_loop, concurrency: 2}",
        "run.num_requests=2",
        "run.duration_s=null",
        "workload.prompt_tokens={dist: fixed, value: 2000}",
        "workload.output_tokens={dist: fixed, value: 4}",
        "disaggregation={prefill: {count: 1}, decode: {count: 1}, kv_transfer: {bandwidth_gbps: 1, latency_ms: 0}}",
    )
    c = res.reqs.columns()
    order = np.argsort(c["transfer_start"])
    a, b = order
    one = transfer_s(131072, 2000, 1, 0)
    assert c["transfer_end"][a] - c["transfer_start"][a] == pytest.approx(one)
    assert c["transfer_start"][b] == pytest.approx(max(c["transfer_end"][a], c["transfer_start"][b]))
    assert c["transfer_start"][b] >= c["transfer_end"][a] - 1e-12


def test_decode_pool_capacity_limits_transferred_requests():
    """A prompt whose KV cannot fit the decode replica's pool is prefilled, then rejected by the
    decode replica (the client sees a rejection), while one that fits is served."""
    res = run(
        "workload.arrival={type: poisson, rate: 1}",
        "run.num_requests=20",
        "run.duration_s=null",
        "workload.prompt_tokens={dist: uniform, min: 1000, max: 3000}",
        "workload.output_tokens={dist: fixed, value: 4}",
        "disaggregation={prefill: {count: 1}, decode: {count: 1, engine: {num_gpu_blocks_override: 101}}}",
    )
    c = res.reqs.columns()
    fits = c["prompt_len"] + 4 <= 100 * 16
    assert fits.any() and (~fits).any()
    assert (c["status"][fits] == RequestStatus.FINISHED).all() and (c["status"][~fits] == RequestStatus.REJECTED).all()


def test_a_mixed_fleet_runs_each_group_on_its_own_hardware_and_engine():
    res = run(
        "workload.arrival={type: poisson, rate: 20}",
        *CHAT,
        "run.duration_s=60",
        "cluster.replicas=[{count: 2, hardware: {gpu: h100-sxm}}, {count: 1, hardware: {gpu: h200}, engine: {max_num_seqs: 64}}]",
    )
    s = summarize(res)
    reps = s["replicas"]
    assert [r["gpu"] for r in reps] == ["h100-sxm", "h100-sxm", "h200"]
    assert [r["max_num_seqs"] for r in reps][2] == 64
    assert reps[2]["num_gpu_blocks"] > reps[0]["num_gpu_blocks"]  # 141 GB against 80 GB
    assert s["num_gpu_blocks"] == sum(r["num_gpu_blocks"] for r in reps)
    assert s["num_submitted"] == sum(r["num_submitted"] for r in reps)


def test_a_router_that_never_refreshes_its_view_takes_turns():
    """Least-KV routing that last scraped the replicas before any request (staleness longer than
    the run) sees them all empty, so it falls back to taking turns: exactly round-robin."""
    common = ["workload.arrival={type: poisson, rate: 30}", *CHAT, "run.duration_s=60", "cluster.replicas=4"]
    stale = run(*common, "cluster.router=least_kv", "cluster.router_staleness_s=1000").reqs.columns()
    rr = run(*common, "cluster.router=round_robin").reqs.columns()
    np.testing.assert_array_equal(stale["replica"], rr["replica"])
    fresh = run(*common, "cluster.router=least_kv").reqs.columns()
    assert not np.array_equal(fresh["replica"], rr["replica"])


def test_prefix_affinity_keeps_a_group_on_one_replica_and_raises_hits():
    common = [
        "workload.arrival={type: poisson, rate: 20}",
        *CHAT,
        "run.duration_s=60",
        "cluster.replicas=4",
        "engine.enable_prefix_caching=true",
        "workload.shared_prefix={num_groups: 8, tokens: 2000}",
    ]
    aff = run(*common, "cluster.router=prefix_affinity")
    c = aff.reqs.columns()
    for g in range(8):
        assert len(set(c["replica"][c["group"] == g].tolist())) == 1
    rr = run(*common, "cluster.router=round_robin")
    assert summarize(aff)["prefix_cache_hit_rate"] > summarize(rr)["prefix_cache_hit_rate"]


def test_cluster_runs_are_byte_identical(tmp_path):
    from simulator.cli import main

    sc = tmp_path / "fleet.yaml"
    sc.write_text(
        "model: llama-3.1-8b\nworkload: {arrival: {type: poisson, rate: 20}}\n"
        "cluster: {replicas: 3, router: power_of_two}\nrun: {duration_s: 30, warmup_s: 5}\n"
    )
    outs = []
    for k in range(2):
        assert main(["run", str(sc), "--out", str(tmp_path / f"r{k}")]) == 0
        outs.append([(tmp_path / f"r{k}" / f).read_bytes() for f in ("summary.json", "requests.csv", "steps.csv")])
    assert outs[0] == outs[1]
    s = json.loads(outs[0][0])
    assert s["num_replicas"] == 3 and len(s["replicas"]) == 3


def test_perfetto_trace_of_a_fleet_has_each_replica_and_the_transfers(tmp_path):
    """A P/D fleet's trace: a steps process and a requests process per replica, each request's
    spans under its replica, and one KV-transfer span per transferred request, from its start to
    its end."""
    import json

    from simulator.outputs.export import write_perfetto

    sc = blank_scenario(
        [
            *BASE,
            "workload.arrival={type: poisson, rate: 5}",
            *CHAT,
            "run.duration_s=10",
            "disaggregation={prefill: {count: 2}, decode: {count: 1}}",
        ]
    )
    res = simulate(sc, trace=1)
    ev = json.loads(write_perfetto(res, tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in ev if e.get("name") == "process_name"}
    assert {r.label for r in res.engine.replicas} <= names and "KV transfers" in names
    c = res.reqs.columns()
    moved = np.isfinite(c["transfer_end"])
    begins = [e for e in ev if e.get("cat") == "transfer" and e["ph"] == "b"]
    assert len(begins) == int(moved.sum()) > 0
    for e in begins:
        assert e["ts"] == pytest.approx(c["transfer_start"][e["args"]["request"]] * 1e6)
    steps = [e for e in ev if e.get("name") == "step"]
    assert len(steps) == sum(r.engine.num_steps for r in res.engine.replicas)
    ids = {e["id"] for e in ev if e.get("cat") == "request"}
    assert all(isinstance(i, str) and ":" in i for i in ids)  # replica-prefixed: no clash between replicas


@pytest.mark.parametrize(
    "over",
    [
        [
            "cluster.replicas=3",
            "cluster.router=score",
            "engine.enable_prefix_caching=true",
            "workload.shared_prefix={num_groups: 5, tokens: 1000}",
        ],
        ["cluster.replicas=3", "cluster.router=least_kv", "cluster.router_staleness_s=0.5"],
        ["disaggregation={prefill: {count: 2}, decode: {count: 1, engine: {num_gpu_blocks_override: 1500}}}"],
    ],
)
def test_fleets_are_identical_on_the_reference_and_the_compiled_step(over):
    """The router reads the replicas' queues and KV usage as each step leaves them (requests still
    in the front-end not yet waiting): the same decisions, hence the same run, on both steps."""
    common = ["workload.arrival={type: poisson, rate: 25}", *CHAT, "run.duration_s=20", *over]
    a = run(*common, "run.kernel=reference").reqs.columns()
    b = run(*common, "run.kernel=compiled").reqs.columns()
    for c in a:
        np.testing.assert_array_equal(a[c], b[c], err_msg=c)


def test_openmetrics_of_a_fleet_has_each_replicas_own_series():
    """Every replica is an engine of its own in the exported metrics (label engine), its gauge the
    value of its own step log at each scrape, as a fleet of vLLM servers reports them."""
    from simulator.outputs.export import _last_before, openmetrics_text

    res = run("workload.arrival={type: poisson, rate: 30}", *CHAT, "run.duration_s=20", "cluster.replicas=3")
    text = openmetrics_text(res, interval_s=1.0).decode()
    series: dict[str, list[float]] = {}
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            engine = line.split('engine="')[1].split('"')[0]
            series.setdefault(engine, []).append(float(line.split()[1]))
    assert sorted(series) == ["0", "1", "2"]
    at = np.arange(1, 21, dtype=float)
    for r in res.engine.replicas:
        cols = r.engine.log.columns()
        expect = _last_before(np.asarray(cols["start"], float), cols["num_running"], at)
        np.testing.assert_array_equal(series[str(r.index)][:20], expect)
