"""SGLang as the engine (``engine.framework: sglang``): its knobs, its start-up sizing, and its scheduler
on hand-computed timelines (block size 4, every step 1 s, on both engine steps: the ``engine``
fixture), after SGLang 0.5's source (data/sources/sglang/sglang_scheduler.md)."""

from __future__ import annotations

import pytest
from conftest import Sim

from simulator.engine.rules import SGL_UNCHUNKED, RequestStatus
from simulator.errors import ConfigError
from simulator.resolve import engine_defaults, load_arch, memory_plan, scheduler_config
from simulator.scenario import sglang
from simulator.scenario.config import scenario_from_dict
from simulator.scenario.hardware import load_gpu

MIB = float(1 << 20)
SGL = {"framework": "sglang", "block_size": 4, "max_num_seqs": 8, "max_num_batched_tokens": 100}


def _sgl(**over):
    return {**SGL, **over}


# ---- knobs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (
            {"framework": "sglang", "max_num_seqs": 64},
            "engine.max_num_seqs: only for framework 'vllm' (got framework 'sglang'); with framework 'sglang' set engine.max_running_requests",
        ),
        (
            {"framework": "sglang", "gpu_memory_utilization": 0.9},
            "engine.gpu_memory_utilization: only for framework 'vllm' (got framework 'sglang'); with framework 'sglang' set engine.mem_fraction_static",
        ),
        (
            {"mem_fraction_static": 0.8},
            "engine.mem_fraction_static: only for framework 'sglang' (got framework 'vllm'); with framework 'vllm' set engine.gpu_memory_utilization",
        ),
        (
            {"chunked_prefill_size": 4096},
            "engine.chunked_prefill_size: only for framework 'sglang' (got framework 'vllm'); with framework 'vllm' set engine.max_num_batched_tokens",
        ),
        (
            {"framework": "sglang", "sglang_version": "0.4.9"},
            "engine.sglang_version must be a release of the modelled line 0.5 (0.5, 0.5.x or 0.5.x.postN) (got '0.4.9')",
        ),
        (
            {"framework": "sglang", "chunked_prefill_size": 0},
            "engine.chunked_prefill_size must be -1 (no chunking) or >= 1, as SGLang requires (got 0)",
        ),
    ],
)
def test_a_knob_of_the_other_framework_names_its_counterpart(engine, message):
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"engine": engine})
    assert str(e.value) == message


def test_releases_of_the_line_are_accepted():
    for v in ("0.5", "0.5.6.post2", "v0.5.17", 0.5):
        assert scenario_from_dict({"engine": {"framework": "sglang", "sglang_version": v}}).engine.sglang_version


# ---- start-up sizing -----------------------------------------------------------------------------
def test_default_mem_fraction_static_as_sglang_computes_it():
    """server_args.py's worked examples: H200 (143,771 MiB) TP8 with MLA reserves 16,384 MiB -> 0.886;
    an 80 GB H100 (81,559 MiB) at TP8 reserves max(14,848, 10,240) MiB -> 0.818."""
    chunk, graph_bs = sglang.memory_defaults(143_771 * MIB, 8)
    assert (chunk, graph_bs) == (8192, 512)
    assert sglang.mem_fraction_static(143_771 * MIB, 8, chunk, graph_bs, mla=True) == 0.886
    assert sglang.mem_fraction_static(81_559 * MIB, 8, 8192, 512, mla=False) == 0.818
    assert sglang.memory_defaults(192 * 1024 * MIB, 8) == (16384, 512)  # B200, MI300X


def test_new_token_ratio_constants():
    init, floor, decay = sglang.new_token_ratio(1.0)
    assert (init, round(floor, 6), round(decay, 9)) == (0.7, 0.098, round(0.602 / 600, 9))
    assert sglang.new_token_ratio(0.3)[0] == pytest.approx(0.21)


def test_max_running_requests_default_and_cap():
    assert sglang.max_running_requests(1_000_000, 131_072, None) == 3906  # 512 per context of tokens
    assert sglang.max_running_requests(100_000, 131_072, None) == 2048  # clamped up to 2,048
    assert sglang.max_running_requests(3_000, 4_096, None) == 1500  # at most half the pool's tokens
    assert sglang.max_running_requests(1_000_000, 131_072, 64) == 64


def test_pool_is_the_static_fraction_less_the_weights():
    """Llama-3.1-8B on an H100: KV = 0.8 x (80 GiB - 1 GiB context) - weights, in pages of 16 tokens of
    128 KiB per token-page... (32 layers x 8 KV heads x 128 x 2 x 2 B = 128 KiB per token)."""
    sc = scenario_from_dict(
        {
            "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100-sxm"},
            "engine": {"framework": "sglang", "mem_fraction_static": 0.8},
        }
    )
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    mem = memory_plan(sc, model, gpu, *engine_defaults(gpu, sc))
    kv = 0.8 * (gpu.hbm_bytes - sglang.CONTEXT_BYTES) - mem.weight_bytes
    assert mem.kv_bytes_per_token == 131072
    assert mem.num_usable_blocks == int(kv // (131072 * 16))
    cfg = scheduler_config(sc, *engine_defaults(gpu, sc), mem.block_bytes)
    assert (cfg.framework, cfg.block_size, cfg.sgl_page, cfg.max_num_batched_tokens) == ("sglang", 16, 1, 8192)
    pool_tokens = int(mem.kv_bytes // mem.kv_bytes_per_token)
    assert cfg.max_num_seqs == sglang.max_running_requests(pool_tokens, model.max_position_embeddings, None)


# ---- the scheduler, hand-computed ----------------------------------------------------------------
def test_prefill_pauses_decoding(engine):
    """R1 arrives while R0 decodes: the next step prefills R1 alone (R0 makes no progress in it)."""
    sim = Sim([(0.0, 8, 5), (2.5, 8, 5)], num_gpu_blocks=101, engine=engine, **SGL).run()
    assert [s.scheduled for s in sim.steps[:5]] == [{0: 8}, {0: 1}, {0: 1}, {1: 8}, {0: 1, 1: 1}]
    assert list(sim.reqs.finish[:2]) == [6.0, 8.0]


def test_chunked_prompt_runs_first_then_others_share_its_last_chunk(engine):
    """Chunks of 8: R0's 20-token prompt takes steps 0-2; R1 is admitted beside its last 4 tokens."""
    sim = Sim([(0.0, 20, 3), (0.0, 4, 3)], num_gpu_blocks=101, engine=engine, **_sgl(max_num_batched_tokens=8)).run()
    assert [s.scheduled for s in sim.steps[:4]] == [{0: 8}, {0: 8}, {0: 4, 1: 4}, {0: 1, 1: 1}]


def test_without_chunking_max_prefill_tokens_stops_the_second_request(engine):
    """Chunked prefill off, 10 prompt tokens a prefill step: R0's 8 are admitted (the first always is),
    R1's 8 reach the 2 left and wait for the next prefill step; R2's 12, alone, exceed the budget but
    are admitted as the first of theirs."""
    over = _sgl(max_num_batched_tokens=SGL_UNCHUNKED, sgl_prefill_tokens=10)
    sim = Sim([(0.0, 8, 2), (0.0, 8, 2), (0.0, 12, 2)], num_gpu_blocks=101, engine=engine, **over).run()
    assert [s.scheduled for s in sim.steps[:3]] == [{0: 8}, {1: 8}, {2: 12}]


def test_admission_keeps_room_for_output_and_waits_for_a_finish(engine):
    """100 tokens of KV; each request needs its 8-token prompt, its 20 output tokens and a page: three
    fit (3 x 29 = 87; the fourth needs 29 of the 13 left), the batch is full, and the fourth waits for a
    request to finish although the running ones, 0.7 x their remaining output reserved, would leave room
    for it at the next step."""
    sim = Sim([(0.0, 8, 20)] * 4, num_gpu_blocks=26, engine=engine, **SGL).run()
    steps = sim.steps
    assert steps[0].scheduled == {0: 8, 1: 8, 2: 8}
    assert all(s.scheduled == {0: 1, 1: 1, 2: 1} for s in steps[1:20])
    assert steps[20].scheduled == {3: 8}
    assert list(sim.reqs.finish[:4]) == [20.0, 20.0, 20.0, 40.0]


def test_retraction_takes_the_fewest_outputs_and_keeps_the_prompt_cached(engine):
    """6 blocks of 4 tokens, no output reserved (ratio 0). R1 joins R0 at step 2; at step 10 R0 needs a
    block and none is free: R1 (8 outputs against R0's 9) is retracted to the back of the queue, its
    prompt's block left cached. Re-admitted at step 11 it hits that block and computes its 8 other
    tokens again (7 of them computed before)."""
    sim = Sim([(0.0, 4, 10), (1.5, 4, 10)], num_gpu_blocks=7, engine=engine, **_sgl(sgl_ratio=(0.0, 0.0, 0.0))).run()
    steps = sim.steps
    assert [s.scheduled for s in steps[:3]] == [{0: 4}, {0: 1}, {1: 4}]
    assert [s.preempted for s in steps].count((1,)) == 1
    assert steps[10].preempted == (1,)
    assert steps[10].scheduled == {0: 1}
    assert steps[11].resumed == (1,)
    assert steps[11].prefix_hits == ((1, 4),)
    assert steps[11].scheduled == {1: 8}
    assert steps[11].recomputed_tokens == 7
    R = sim.reqs
    assert list(R.preemptions[:2]) == [0, 1]
    assert list(R.finish[:2]) == [11.0, 13.0]
    assert list(R.num_out[:2]) == [10, 10]


def test_a_request_that_cannot_fit_with_its_page_is_rejected_not_stalled(engine):
    """SGLang admits a request only with a page and a token to spare: 24 tokens of KV hold a
    request of 22 tokens (prompt 4 + 18) but not one of 23."""
    sim = Sim([(0.0, 4, 18), (0.0, 4, 19)], num_gpu_blocks=7, engine=engine, **SGL).run()
    assert list(sim.reqs.num_out[:2]) == [18, 0]
    assert sim.engine.reject_reasons.keys() == {1}
    assert sim.reqs.status[1] == RequestStatus.REJECTED


# ---- the cache-aware schedule policies, hand-computed ---------------------------------------------
UNCHUNKED = {**SGL, "max_num_batched_tokens": SGL_UNCHUNKED, "sgl_prefill_tokens": 80}


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight"])
def test_a_request_beside_another_of_its_group_computes_the_prefix_again_unless_lpm_defers_it(engine, policy):
    """Three 36-token prompts at once, the first two behind one 32-token prefix, 80 prompt tokens a
    prefill step (chunking off): two fit a step. In queue order (fcfs; dfs-weight, which finds nothing
    cached and leaves the root's requests in order) R0 and R1 share a step and both compute the prefix:
    SGLang puts a prefill's tokens into its radix tree after the prefill has run. lpm's in-queue check
    sends R1 behind R2 (it shares 32 tokens with R0 ahead of it, and finds no more than 32 cached), so
    R1 runs a step later and finds the prefix cached: 4 tokens to compute instead of 36."""
    sim = Sim(
        [(0.0, 36, 3, 0, 32), (0.0, 36, 3, 0, 32), (0.0, 36, 3, 1, 32)],
        num_gpu_blocks=101,
        engine=engine,
        policy=policy,
        **UNCHUNKED,
    ).run()
    first, second = sim.steps[0], sim.steps[1]
    if policy == "lpm":
        assert (first.scheduled, second.scheduled) == ({0: 36, 2: 36}, {1: 4})
        assert second.prefix_hits == ((1, 32),)
    else:
        assert (first.scheduled, second.scheduled) == ({0: 36, 1: 36}, {2: 36})
        assert first.prefix_hits == ((0, 0), (1, 0))


@pytest.mark.parametrize("policy", ["fcfs", "lpm", "dfs-weight"])
def test_the_cache_aware_policies_take_the_request_whose_prefix_is_cached_first(engine, policy):
    """One request runs at a time. R0 (group 0, an 8-token prefix) runs at 0 and caches the prefix; R1
    (group 1) and R2 (group 0) arrive while it runs. When R0 finishes, fcfs takes R1; lpm and dfs-weight
    take R2, which finds 8 of its 12 tokens cached."""
    reqs = [(0.0, 12, 2, 0, 8), (0.5, 12, 2, 1, 8), (0.6, 12, 2, 0, 8)]
    sim = Sim(reqs, num_gpu_blocks=101, engine=engine, policy=policy, **_sgl(max_num_seqs=1)).run()
    assert [s.scheduled for s in sim.steps[:2]] == [{0: 12}, {0: 1}]
    if policy == "fcfs":
        assert sim.steps[2].scheduled == {1: 12}
    else:
        assert (sim.steps[2].scheduled, sim.steps[2].prefix_hits) == ({2: 4}, ((2, 8),))


def _order(policy, rows):
    """``rules.sgl_waiting_order`` of a queue given as (hit blocks, group blocks, group, shared tokens)."""
    import numpy as np

    from simulator.engine import rules

    w = np.zeros((rules.N_WO, len(rows)), np.int64)
    for i, row in enumerate(rows):
        w[[rules.WO_HITS, rules.WO_NGROUP, rules.WO_GROUP, rules.WO_SHARED], i] = row
    rules.sgl_waiting_order(rules.SGL_ORDER_CODES[policy], w, len(rows), 16)
    return list(w[rules.WO_ORDER, : len(rows)])


def test_lpm_order_by_hand():
    """Blocks of 16 tokens. Most cached tokens first (R3: 48, R2: 32); R0 finds nothing and enters its
    group 5 in the in-queue tree; R1 of the same group, sharing 64 tokens with it, is deferred to the
    end; R4 (group 6, 20 tokens shared: under the threshold of 32) and R5 (no group) keep their order."""
    rows = [(0, 4, 5, 64), (0, 4, 5, 64), (2, 4, 7, 64), (3, 4, 5, 64), (0, 1, 6, 20), (0, 0, -1, 0)]
    assert _order("lpm", rows) == [3, 2, 0, 4, 5, 1]


def test_dfs_weight_order_by_hand():
    """The radix tree's branches heaviest first, each node's requests after its children's, nothing
    cached last: group 7's branch holds three waiting requests (R1 below its prefix, in its own tokens;
    R4 at the prefix's end; R2 halfway), group 5's one (R3), R5's own cached tokens one; R0 and R6
    find nothing. Group 7 first (R1, then R4, then R2: deepest first), then the branches of weight one
    in the order of their first request (R3, R5), then the root's (R0, R6)."""
    rows = [(0, 4, 7, 64), (5, 4, 7, 64), (2, 4, 7, 64), (4, 4, 5, 64), (4, 4, 7, 64), (1, 0, -1, 0), (0, 0, -1, 0)]
    assert _order("dfs-weight", rows) == [1, 4, 2, 3, 5, 0, 6]


def test_lpm_orders_a_queue_of_at_most_128_and_dfs_weight_any():
    """``get_new_batch_prefill``: no re-ordering where no request can join (batch full, or the running
    cap reached) unless a prompt is being chunked; lpm leaves a queue over 128 in its order."""
    from simulator.engine.rules import SGL_ORDER_CODES, sgl_orders

    lpm, dfs = SGL_ORDER_CODES["lpm"], SGL_ORDER_CODES["dfs-weight"]
    assert sgl_orders(lpm, 128, False, False, 10, 64) and not sgl_orders(lpm, 129, False, False, 10, 64)
    assert sgl_orders(dfs, 5000, False, False, 10, 64)
    assert not sgl_orders(lpm, 5, True, False, 10, 64) and sgl_orders(lpm, 5, True, True, 10, 64)
    assert not sgl_orders(dfs, 5, False, False, 64, 64) and not sgl_orders(0, 5, False, False, 10, 64)


def test_a_cache_aware_policy_without_the_radix_cache_is_fcfs():
    """``_validate_and_adjust_policy``: lpm and dfs-weight need the tree; without it SGLang runs fcfs."""
    sc = scenario_from_dict({"engine": {"framework": "sglang", "schedule_policy": "lpm", "disable_radix_cache": True}})
    gpu = load_gpu(sc.hardware.gpu)
    assert scheduler_config(sc, *engine_defaults(gpu, sc), 1.0).policy == "fcfs"
    sc = scenario_from_dict({"engine": {"framework": "sglang", "schedule_policy": "dfs-weight"}})
    assert scheduler_config(sc, *engine_defaults(gpu, sc), 1.0).policy == "dfs-weight"


def test_recorded_schedule_policies_over_shared_prefixes_come_out_as_the_server_served_them():
    """data/e2e/h200_sglpm_2026-12-02: one SGLang 0.5.16 server per policy over the same requests (64
    prefixes of 2,048 tokens, a pool of about 100k tokens), recorded after the policies were modelled,
    nothing fitted. At 128 clients the server served lpm 48% and dfs-weight 37% more than fcfs; at 384,
    where lpm leaves the queue in its order, lpm as fcfs and dfs-weight 79% more. servesim ranks them
    the same way, each run within 10% of the server's throughput and within 4 points of its prefix-cache
    hit rate."""
    from simulator.validation import validate

    runs = [r for r in validate.load(validate.E2E_SGLANG_FILE)["runs"] if r["recording"] == "h200_sglpm_2026-12-02"]
    assert len(runs) == 6 and all(r["split"] == "heldout" for r in runs)
    got = {}
    for r in runs:
        res = validate.simulate_e2e(r)
        assert not res.error
        sim, real = res.simulated["output_throughput"], res.measured["output_throughput"]
        assert abs(sim / real - 1) < 0.10, r["id"]
        assert abs(res.detail["prefix_cache_hit_rate"] - res.detail["servesim_prefix_cache_hit_rate"]) < 0.04, r["id"]
        got[(r["engine"]["schedule_policy"], r["run"])] = sim
    assert (
        got[("lpm", "c128")] > 1.2 * got[("fcfs", "c128")] and got[("dfs-weight", "c128")] > 1.1 * got[("fcfs", "c128")]
    )
    assert abs(got[("lpm", "c384")] / got[("fcfs", "c384")] - 1) < 0.05
    assert got[("dfs-weight", "c384")] > 1.4 * got[("fcfs", "c384")]


# ---- outputs -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sglang_run():
    from simulator.run import simulate

    sc = scenario_from_dict(
        {
            "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100-sxm"},
            "engine": {"framework": "sglang", "mem_fraction_static": 0.22},
            "workload": {
                "arrival": {"type": "closed_loop", "concurrency": 200},
                "prompt_tokens": {"dist": "fixed", "value": 500},
                "output_tokens": {"dist": "uniform", "min": 100, "max": 900},
            },
            "run": {"seed": 3, "duration_s": 40, "warmup_s": 5, "host_band": False},
        }
    )
    return simulate(sc)


def test_summary_and_check_speak_sglang(sglang_run):
    from simulator.commands.check import _limits
    from simulator.metrics import summarize

    s = summarize(sglang_run)
    assert s["framework"] == "sglang"
    assert "max_num_seqs" not in s
    cap, chunk = s["max_running_requests"], s["chunked_prefill_size"]
    assert chunk == 8192
    assert (
        _limits(sglang_run.sched_cfg)
        == f"max_running_requests={cap}, chunked_prefill_size=8192, max_prefill_tokens=16384"
    )


def test_openmetrics_under_sglang_names(sglang_run):
    from simulator.outputs.export import openmetrics_text

    text = openmetrics_text(sglang_run, interval_s=5.0).decode()
    types = {line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE")}
    assert types["sglang:num_running_reqs"] == "gauge"
    assert types["sglang:token_usage"] == "gauge"
    assert types["sglang:num_retracted_requests"] == "counter"
    assert types["sglang:time_to_first_token_seconds"] == "histogram"
    assert not any(name.startswith("vllm:") for name in types)
    # the running requests' gauge is what the step log says at the last scrape
    last = [ln for ln in text.splitlines() if ln.startswith("sglang:num_running_reqs{")][-1]
    assert float(last.split()[1]) == sglang_run.engine.log.columns()["num_running"][-1]


def test_retraction_happens_under_a_small_pool_and_no_step_mixes_prefill_with_decode(sglang_run):
    """A pool of ~10k tokens under 200 clients of 500-token prompts: SGLang retracts, and every step
    computes prompt tokens or decode tokens, never both."""
    cols = sglang_run.engine.log.columns()
    assert cols["num_preemptions"].sum() > 0
    mixed = (cols["prefill_tokens"] > 0) & (cols["decode_tokens"] > 0)
    assert not mixed.any()


# ---- validation ----------------------------------------------------------------------------------
def test_public_sglang_runs_replay_as_sglang_with_their_split():
    from simulator.validation import validate

    runs = validate.load(validate.SGLANG_FILE)["runs"]
    assert sum(r["split"] == "calibrate" for r in runs) == 15 and len(runs) == 68
    # five fit SGLang's host costs, nine (the cookbook's 1k/8k runs) the B200's and MI300X's kernels, one
    # (the MI300X's 8k/1k at one in flight) the rate of SGLang's MoE kernels there
    assert sum(r.get("fits") == "host" for r in runs) == 5 and sum(r.get("fits") == "gpu" for r in runs) == 9
    assert [r["id"] for r in runs if r.get("fits") == "prefill"] == [
        "mi300x_deepseek-r1_cookbook-dsv31-mi300x-8000-1000-c1"
    ]
    for r in runs:
        sc = validate.run_scenario(r)
        # replayed on its own release (0.5.3-0.5.7: prefills without graphs); 0.4.x on the line's newest
        own = str(r["sglang_version"]) if str(r["sglang_version"]).startswith("0.5") else "0.5"
        assert (sc.engine.framework, sc.engine.sglang_version) == ("sglang", own), r["id"]
        assert r["url"].startswith("https://")
    dp = next(r for r in runs if r["id"].endswith("dstack-dsr1-h200-random-3200-800-c4"))
    assert validate.run_scenario(dp).engine.dp_attention == 8  # 0.4.x's --enable-dp-attention: DP over TP8
    one = next(r for r in runs if r["id"].endswith("dstack-dsr1-mi300x-random-3200-800-c8"))
    res = validate.simulate_run(one)
    assert not res.error
    assert set(res.simulated) == set(validate.SGLANG_METRICS)
    assert res.measured["output_throughput"] == 190.11
    # The cookbook's sweeps drew their lengths uniformly (no --random-range-ratio): replayed so, from 1
    # token to the flag's length, and their printed totals agree with such draws (about half the flag).
    cb = next(r for r in runs if r["id"].endswith("cookbook-dsr1-b200-1000-1000-c100"))
    assert cb["bench"]["uniform_lengths"] == {"prompt": [1, 1000], "output": [1, 1000]}
    sc = validate.run_scenario(cb)
    pt = sc.workload.prompt_tokens
    assert (pt.dist, pt.min, pt.max) == ("uniform", 1, 1000)
    assert 450 < cb["bench"]["mean_prompt_tokens"] < 550 and 450 < cb["bench"]["mean_output_tokens"] < 550


def test_a_vllm_scenario_switched_to_sglang_names_every_knob_to_change():
    """The default scenario (vLLM knobs, some at their defaults) switched to SGLang by --set: the knobs
    left at vLLM's defaults pass, the others are named in one line with the --set that leaves them out
    and their counterparts."""
    from simulator.scenario.config import load_scenario

    with pytest.raises(ConfigError) as e:
        load_scenario(None, ["engine.framework=sglang"])
    assert str(e.value) == (
        "--set engine.framework=sglang: the scenario sets engine.max_num_seqs (2048), engine.max_num_batched_tokens "
        "(8192), engine.gpu_memory_utilization (0.9), which sglang does not have; leave them out with --set "
        "engine.max_num_seqs=null --set engine.max_num_batched_tokens=null --set engine.gpu_memory_utilization=null, "
        "and give sglang's engine.max_running_requests, engine.chunked_prefill_size, engine.mem_fraction_static if "
        "you want them"
    )
    nulls = ["engine.max_num_seqs=null", "engine.max_num_batched_tokens=null", "engine.gpu_memory_utilization=null"]
    sc, _ = load_scenario(None, ["engine.framework=sglang", *nulls])
    assert sc.engine.framework == "sglang" and sc.engine.block_size == 16  # given, at vLLM's default


# ---- DP attention --------------------------------------------------------------------------------
def _dsr1(**engine):
    return scenario_from_dict(
        {
            "model": "deepseek-r1",
            "hardware": {"gpu": "h200", "tensor_parallel_size": 8},
            "engine": {"framework": "sglang", **engine},
        }
    )


def test_dp_attention_pools_ranks_and_prices_one_rank():
    """DeepSeek-R1 on 8 x H200 with DP attention over 8 ranks: every GPU holds the attention weights
    whole (7/8 more of them), the pool is the eight ranks' together, admission is 0.3 x as
    conservative, and a GPU reads only its rank's KV: slower than plain TP8 at 4 requests (the weights),
    faster at 512 (the KV)."""
    from simulator.engine.cost import decode_work
    from simulator.resolve import cost_model
    from simulator.scenario.memory import weight_bytes

    gpu = load_gpu("h200")
    plain, dp = _dsr1(), _dsr1(enable_dp_attention=True, dp_size=8)
    model = load_arch(plain)
    (s0, t0), (s1, t1) = engine_defaults(gpu, plain), engine_defaults(gpu, dp)
    m0, m1 = memory_plan(plain, model, gpu, s0, t0), memory_plan(dp, model, gpu, s1, t1)
    per_weight = weight_bytes(model, "fp8", 1) / model.total_params  # FP8 weights and bf16 rest, on average
    extra = model.num_layers * model.attn_params_per_layer * (1 - 1 / 8) * per_weight
    assert m1.weight_bytes == pytest.approx(m0.weight_bytes + extra, rel=1e-3)
    assert m1.kv_bytes_per_token == m0.kv_bytes_per_token == 70272  # MLA's latent, bf16, on every rank
    assert m1.num_usable_blocks == 8 * int(m1.kv_bytes // m1.block_bytes)
    c0, c1 = scheduler_config(plain, s0, t0, m0.block_bytes), scheduler_config(dp, s1, t1, m1.block_bytes)
    assert (c0.sgl_ratio[0], c1.sgl_ratio[0]) == (0.7, pytest.approx(0.21))
    assert s1 % 8 == 0 and t1 == t0 == 8192
    k0, k1 = cost_model(plain, model, gpu, s0, t0), cost_model(dp, model, gpu, s1, t1)
    small, large = decode_work(4, 3000), decode_work(512, 3000)
    assert k1.step_time(small) > k0.step_time(small)
    assert k1.step_time(large) < k0.step_time(large)


def test_dp_attention_settings_checked():
    with pytest.raises(ConfigError) as e:
        _dsr1(dp_size=4)
    assert str(e.value).startswith("engine.dp_size: data parallelism without DP attention is a fleet of replicas here")
    with pytest.raises(ConfigError) as e:
        _dsr1(enable_dp_attention=True, dp_size=3)
    assert str(e.value) == (
        "engine.dp_size must divide hardware.tensor_parallel_size (8), as SGLang's DP attention requires (got 3)"
    )
    assert _dsr1(enable_dp_attention=True).engine.dp_attention == 1  # no --dp: SGLang 0.5 turns it off


@pytest.mark.parametrize("gpu", ["h200", "b200", "mi300x", "mi325x", "mi355x"])
def test_deepseek_r1_on_sglang_runs_at_every_load_and_shape_the_public_benchmarks_use(gpu):
    """DeepSeek-R1 (FP8) on SGLang at TP8, 4 and 64 requests in flight, 1k/1k, 1k/8k and 8k/1k: every
    point runs to its last request, with a throughput that grows with the load."""
    from conftest import shape_grid_throughputs

    vllm_only = ["engine.max_num_seqs=null", "engine.max_num_batched_tokens=null", "engine.gpu_memory_utilization=null"]
    over = ["model=deepseek-r1", "engine.framework=sglang", *vllm_only, f"hardware.gpu={gpu}"]
    grid = shape_grid_throughputs(
        [*over, "hardware.tensor_parallel_size=8"], ((1024, 1024), (1024, 8192), (8192, 1024)), (4, 64)
    )
    for shape, (low, high) in grid.items():
        assert high > 3 * low, (gpu, shape, low, high)


def test_recorded_sglang_servers_replay_on_sglangs_engine_with_the_servers_pool():
    """The SGLang 0.5.16 servers recorded with tools/e2e (data/e2e/h200_sglang_2026-11-30, and the MoE
    models of h200_moe_2026-11-30 and h200_mla_2026-11-30, recorded after the fit and all held out):
    every run passed its check, the first recording's split alternates in the order they ran, they
    replay on SGLang's engine with the knobs they were given, and servesim sizes the pool SGLang
    logged within 1%: Llama's, Qwen3-MoE's, and DeepSeek-V2-Lite's (MLA) at a memory share of 0.4."""
    from simulator.validation import validate

    runs = validate.load(validate.E2E_SGLANG_FILE)["runs"]
    assert len(runs) == 46 and all(r["framework"] == "sglang" and r["check"]["ok"] for r in runs)
    # Qwen3-0.6B at 1 and 4 in flight (h200_sgfloor_2026-12-01), recorded to read the scheduler's cost
    # a step off steps the GPU makes short: split as they ran, the first calibrates
    floor = {r["run"]: r["split"] for r in runs if r["recording"] == "h200_sgfloor_2026-12-01"}
    assert floor == {"c1": "calibrate", "c4": "heldout"}
    later = [r for r in runs if r["recording"] in ("h200_moe_2026-11-30", "h200_mla_2026-11-30")]
    assert len(later) == 11 and all(r["split"] == "heldout" for r in later)
    # the pair with and without prefill graphs: Llama-3.1-8B's calibrate, Qwen3-32B's held out
    pair = [r for r in runs if r["recording"] == "h200_sgprefill_2026-12-01"]
    assert {(r["model"], r["split"]) for r in pair} == {("llama-3.1-8b", "calibrate"), ("qwen3-32b", "heldout")}
    assert sum(r["engine"].get("disable_prefill_cuda_graph", False) for r in pair) == 6
    skip = ("h200_sgprefill_2026-12-01", "h200_sglpm_2026-12-02")  # their run names repeat by lane
    by = {r["id"].rsplit("sglang_", 1)[1]: r for r in runs if r["recording"] not in skip}
    assert [by[k]["split"] for k in ("llama8b_c1", "llama8b_c64", "llama8b_c256", "llama8b_kv")] == [
        "calibrate",
        "heldout",
        "calibrate",
        "heldout",
    ]
    kv = by["llama8b_kv"]
    assert kv["server"]["num_preemptions"] > 0 and kv["check"]["server_retracted"] > 0  # retraction's own hits allowed
    sc = validate.e2e_scenario(kv)
    assert (sc.engine.framework, sc.engine.sglang_version) == ("sglang", "0.5.16")
    assert validate.e2e_scenario(by["llama8b_r128_kv"]).engine.max_running_requests == 128
    res = validate.simulate_e2e(by["llama8b_c1"])
    assert not res.error and set(res.simulated) == set(validate.E2E_METRICS)
    pool, server = res.detail["kv_cache_tokens"], res.detail["server_kv_cache_tokens"]
    assert server == 905_795 and abs(pool / server - 1) < 0.01
    moe = validate.simulate_e2e(by["qwen30b_c1"])
    pool, server = moe.detail["kv_cache_tokens"], moe.detail["server_kv_cache_tokens"]
    assert not moe.error and server == 750_170 and abs(pool / server - 1) < 0.01
    mla = validate.simulate_e2e(by["dsv2lite_c1"])
    assert validate.e2e_scenario(by["dsv2lite_c1"]).engine.mem_fraction_static == 0.4
    pool, server = mla.detail["kv_cache_tokens"], mla.detail["server_kv_cache_tokens"]
    assert not mla.error and server == 901_313 and abs(pool / server - 1) < 0.01


def test_sglangs_own_decode_steps_give_its_scheduler_costs_at_steady_state():
    """`fit_host.py --source sglang --scheduler` reads the recorded SGLang lane's own log at the steady
    state of its calibration runs (1 and 256 clients: as many running as clients, none queued, a CUDA
    graph replayed) and finds the scheduler costs with which servesim's decode step (the longer of the
    GPU's time and that CPU work) reproduces each logged step within 5% (6% at 256); the 64-client run, held out,
    gives none of its rows."""
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario import hosts
    from simulator.scenario.hardware import load_gpu
    from simulator.validation import validate
    from tools.validation import fit_host

    runs = [r for r in validate.load(validate.E2E_SGLANG_FILE)["runs"] if r["split"] == "calibrate"]
    lane = [r for r in runs if r["lane"] == "sglang_llama8b"]
    rows = fit_host.scheduler_rows(lane[0], {1, 256})
    assert {b for b, _, _ in rows} == {1, 256} and len(rows) > 100
    # the fit asks only for its calibration runs' levels: the held-out 64-client run's rows stay out
    assert {r["arrival"]["max_concurrency"] for r in lane} == {1, 256, 768} and fit_host.scheduler_rows(lane[0], {64})
    # fitted on that lane alone: since the H200's calibration took vLLM's served steps (docs/cost-model.md,
    # "Near the ridge") the GPU's step covers these logged steps, any smaller scheduler cost fits as
    # well, and the fit takes the largest within its tie (0.1% of the least error)
    costs = hosts.load_host_costs("sglang")
    fitted, _ = fit_host.fit_scheduler(costs, lane)
    assert 1e-3 <= fitted.engine_step_s <= 6e-3 and 10e-6 < fitted.engine_per_seq_s_019 <= 80e-6
    sc = validate.e2e_scenario(lane[0])
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    cm = cost_model(sc, model, gpu, *engine_defaults(gpu, sc))
    scale = validate.recorded_scale(lane[0])
    for level in (1, 256):
        logged = sorted(ms for b, _, ms in rows if b == level)
        ctx = sorted(x for b, x, _ in rows if b == level)
        args = (fitted.engine_step_s, fitted.engine_per_seq_s_019, level, ctx[len(ctx) // 2])
        model_ms = fit_host.scheduler_step_ms(cm, scale, *args)
        # at 256 running the GPU's step sets it: 5.2% short (SGLang's kernels, priced with the H200's
        # calibration on vLLM's steps), within 5% before that calibration
        within = 0.05 if level == 1 else 0.06
        assert abs(model_ms / logged[len(logged) // 2] - 1) < within, (level, model_ms, logged[len(logged) // 2])


def test_a_small_models_short_steps_bound_sglangs_scheduler_cost_a_step():
    """Qwen3-0.6B's decode steps (h200_sgfloor_2026-12-01: SGLang 0.5.16 on an H200, 1 and 4 in flight)
    took 1.7-2.0 ms where the GPU needs about 1.8 by servesim's cost model: its scheduler's CPU work a
    step, overlapped, can be no longer. Fitted on the calibration run's logged steps, the cost a step
    is at most that step over the host's factor, and servesim then gives the held-out run at 4 in
    flight within 10% in p50 TPOT (with the 3.9 ms a step read off Llama-3.1-8B's steps it was 2.4x)."""
    from simulator.scenario import hosts
    from simulator.validation import validate
    from tools.validation import fit_host

    runs = [r for r in validate.load(validate.E2E_SGLANG_FILE)["runs"] if r["recording"] == "h200_sgfloor_2026-12-01"]
    calib = [r for r in runs if r["split"] == "calibrate"]
    rows = fit_host.scheduler_rows(calib[0], {1})
    logged = sorted(ms for _, _, ms in rows)[len(rows) // 2]
    fitted, _ = fit_host.fit_scheduler(hosts.load_host_costs("sglang"), calib)
    scale = validate.recorded_scale(calib[0])
    assert 0.5e-3 <= fitted.engine_step_s <= logged / 1e3 / scale
    assert fitted.engine_step_s == hosts.load_host_costs("sglang").engine_step_s  # the set's
    (c4,) = [r for r in runs if r["split"] == "heldout"]
    res = validate.simulate_e2e(c4)
    assert abs(res.simulated["median_tpot_ms"] / res.measured["median_tpot_ms"] - 1) < 0.10


# ---- prefills with and without graphs --------------------------------------------------------------
def test_which_sglang_releases_replay_prefills_from_graphs():
    pg = sglang.prefill_graph_max
    # up to 0.5.9 a prefill always ran eagerly (enable_piecewise_cuda_graph off by default)
    assert [pg(v, False, False, 1, 8192) for v in ("0.5.0", "0.5.6.post1", "0.5.9")] == [0, 0, 0]
    # from 0.5.10 captured up to chunked_prefill_size, an MLA model's up to 2,048 tokens, until 0.5.15
    assert [pg(v, False, False, 1, 8192) for v in ("0.5.10", "0.5.14", "0.5.16", "0.5")] == [8192] * 4
    assert [pg(v, False, True, 1, 8192) for v in ("0.5.10", "0.5.14.post1", "0.5.15", "0.5")] == [2048, 2048, 0, 0]
    # never on an AMD GPU, nor with DP attention
    assert pg("0.5.16", True, False, 1, 8192) == 0 and pg("0.5.16", False, False, 8, 8192) == 0
    assert sglang.release_key("0.5") == sglang.NEWEST == (0, 5, 17)


def test_an_eager_sglang_prefill_is_no_faster_than_launching_its_kernels():
    from simulator.engine.cost import CostModel, Efficiency, Execution, StepWork
    from simulator.engine.params import P
    from simulator.scenario.models import load_model

    m, g = load_model("llama-3.1-8b"), load_gpu("h200")
    eager = CostModel(m, g, 1, execution=Execution(max_capture_size=256, prefill_capture_size=0, framework="sglang"))
    graphed = CostModel(
        m, g, 1, execution=Execution(max_capture_size=256, prefill_capture_size=8192, framework="sglang")
    )
    alone = CostModel(m, g, 1)  # every shape graphed (a prefill piecewise, as vLLM's)
    prefill = StepWork(num_seqs=1, num_tokens=64, attn_pairs=64 * 65 / 2, num_sampled=1)
    # 32 layers x (6 small kernels + 4 GEMMs) launched one by one at 38 us: 12.2 ms, above the GPU's ~5 ms
    floor = 38e-6 * 32 * (6 + 4)
    assert alone.step_time(prefill) < floor / 2
    assert eager.step_time(prefill) == pytest.approx(floor, rel=1e-12)
    # captured piecewise (0.5.10 on): the GPU's time and 13.5 us a layer around the attention launched
    # between the pieces, as vLLM's piecewise graphs
    assert graphed.step_time(prefill) == alone.step_time(prefill)
    no_pieces = CostModel(m, g, 1, eff=Efficiency(piecewise_layer_s=0.0))
    assert alone.step_time(prefill) - no_pieces.step_time(prefill) == pytest.approx(32 * 13.5e-6, rel=1e-9)
    # at TP 8 each kernel takes 40% longer per doubling of the ranks: 38 us x (1 + 0.4 x 3)
    tp8 = CostModel(m, g, 8, execution=Execution(max_capture_size=256, prefill_capture_size=0, framework="sglang"))
    assert tp8.params[P.EAGER_FLOOR_S] == pytest.approx(38e-6 * 2.2 * 32 * (6 + 4), rel=1e-12)
    # decodes replay their full graph either way
    dec = StepWork(num_seqs=64, num_tokens=64, context_tokens=64 * 512, attn_pairs=64 * 513.0, num_sampled=64)
    assert eager.step_time(dec) == graphed.step_time(dec) == alone.step_time(dec)
    # enforce_eager (SGLang's --disable-cuda-graph): no graphs at all, the decodes launched one by one too
    from simulator.resolve import execution
    from simulator.scenario.config import scenario_from_dict

    sc = scenario_from_dict({"engine": {"framework": "sglang", "sglang_version": "0.5.16", "enforce_eager": True}})
    x = execution(sc, g, m, 256, 8192)
    assert (x.max_capture_size, x.prefill_capture_size, x.pad) == (0, 0, False)
    assert CostModel(m, g, 1, execution=x).step_time(dec) == pytest.approx(floor, rel=1e-12)


def test_an_moe_layer_without_graphs_adds_its_python_path_on_one_hopper_gpu():
    """800 us an MoE layer (Efficiency.moe_eager_layer_s), fitted on the recorded SGLang pair of
    Qwen3-30B-A3B, added to the launch floor of a step without graphs (vLLM's: 100 us); not with
    MXFP4 experts, nor beyond one GPU, nor off Hopper, where nothing measured it."""
    from simulator.engine.cost import CostModel, Execution, small_kernels_per_layer
    from simulator.engine.params import P
    from simulator.scenario.models import load_model

    sg = Execution(max_capture_size=256, prefill_capture_size=0, framework="sglang")
    m, h200 = load_model("qwen3-30b-a3b"), load_gpu("h200")
    # 48 layers x (6 small kernels + 2 q/k norms + 1 for the router, + 4 GEMMs) at 38 us, and 48 x 800 us
    assert small_kernels_per_layer(m) == 9
    assert CostModel(m, h200, 1, execution=sg).params[P.EAGER_FLOOR_S] == pytest.approx(
        38e-6 * 48 * 13 + 800e-6 * 48, rel=1e-12
    )
    # vLLM's compiled model above its largest graph: 20 us a kernel, and its MoE path refitted at
    # 100 us a layer once its launches cost a part a request (Efficiency.vllm_moe_eager_layer_s)
    vllm = Execution(max_capture_size=512)
    assert CostModel(m, h200, 1, execution=vllm).params[P.EAGER_FLOOR_S] == pytest.approx(
        20e-6 * 48 * 13 + 100e-6 * 48, rel=1e-12
    )
    # TP 2 (the kernels' launches grow with the ranks), a B200, MXFP4 experts: the kernels alone
    assert CostModel(m, h200, 2, execution=sg).params[P.EAGER_FLOOR_S] == pytest.approx(
        38e-6 * 1.4 * 48 * 13, rel=1e-12
    )
    assert CostModel(m, load_gpu("b200"), 1, execution=sg).params[P.EAGER_FLOOR_S] == pytest.approx(
        38e-6 * 48 * 13, rel=1e-12
    )
    oss = load_model("gpt-oss-20b")
    floor = CostModel(oss, h200, 1, quantization="mxfp4", execution=sg).params[P.EAGER_FLOOR_S]
    assert floor < 38e-6 * 24 * 20  # 24 layers: their kernels and the MXFP4 path's, no MoE Python path


def test_the_eager_fits_pairs_are_calibration_runs_that_show_the_launches():
    """fit_gpu_family.py --eager fits the launch times on recorded pairs (the same requests without and
    with prefill graphs): each run is a calibration run of the index, passed its check, and the run
    without graphs reached its first token later; the shipped values lie on the tool's grids, inside."""
    import importlib.util
    from pathlib import Path

    from simulator.engine.cost import Efficiency
    from simulator.validation import validate

    path = Path(__file__).resolve().parents[1] / "tools" / "validation" / "fit_gpu_family.py"
    spec = importlib.util.spec_from_file_location("fit_gpu_family", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    runs = {r["id"]: r for r in validate.load(validate.E2E_SGLANG_FILE)["runs"]}
    for eager, graphs in (*mod.EAGER_PAIRS, *mod.EAGER_MOE_PAIRS):
        e, g = runs[eager], runs[graphs]
        assert e["split"] == g["split"] == "calibrate" and e["check"]["ok"] and g["check"]["ok"]
        assert e["measured"]["median_ttft_ms"] > g["measured"]["median_ttft_ms"] + 5.0
    # the MoE pairs fit the MoE layer's time alone, not the host costs (fit_host.py skips them)
    assert all(runs[i].get("fits") == "eager" for pair in mod.EAGER_MOE_PAIRS for i in pair)
    e = Efficiency()
    assert e.sglang_eager_launch_s * 1e6 in mod.EAGER_US[1:-1]
    assert e.moe_eager_layer_s * 1e6 in mod.EAGER_MOE_US[1:-1]
    assert e.sglang_eager_tp_growth in mod.EAGER_TP_GROWTH[:-1]


def test_the_mi300x_prefill_rate_fitted_on_one_run_brings_its_held_out_long_prompts_closer():
    """The cookbook's DeepSeek-V3.1 8k/1k runs on 8 x MI300X: the rate of SGLang's MoE kernels fitted on
    the one at one request in flight (its p50 TTFT within 5%) takes the two held out at 16 and 64 in
    flight within 20% in throughput and 10% in p50 TPOT, where the GPU's derived rate left them 26-38%
    fast and 21-24% short."""
    from simulator.validation import validate

    runs = [r for r in validate.load(validate.SGLANG_FILE)["runs"] if "cookbook-dsv31-mi300x-8000-1000" in r["id"]]
    res = {r.id.rsplit("-", 1)[1]: r for r in validate.run_all(runs, jobs=1)}
    assert sorted(res) == ["c1", "c16", "c64"] and not any(r.error for r in res.values())
    assert abs(res["c1"].rel_error("median_ttft_ms")) < 0.05
    for c in ("c16", "c64"):
        assert abs(res[c].rel_error("output_throughput")) < 0.20, (c, res[c].rel_error("output_throughput"))
        assert abs(res[c].rel_error("median_tpot_ms")) < 0.10, (c, res[c].rel_error("median_tpot_ms"))
    from simulator.engine.cost import Efficiency
    from tools.validation.fit_gpu_family import replay

    derived = replay(runs, "mi300x", {"moe_compute": Efficiency().moe_compute}, jobs=1)  # the GPU's own rate
    assert all(r.rel_error("output_throughput") > 0.25 for r in derived if not r.id.endswith("-c1"))
