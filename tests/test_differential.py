"""The compiled production step gives byte-identical results to the readable reference.

Each case runs a scenario on both (``run.kernel: reference`` and ``compiled``) and compares
requests.csv and steps.csv as ``servesim run`` writes them (every float to 17 significant digits),
the summary, the inter-token-latency statistics, the step count and the request events; on named
scenarios covering every scheduler feature the scenario schema offers, and on random ones
(Hypothesis) sized to preempt, swap, abort, evict cached blocks, chunk prefills and hit every
stopping rule of the compiled step (a request someone waits for ending, the next arrival, a full
log stage).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from simulator.engine.compiled.engine import CompiledEngine
from simulator.engine.core import SimulationStalled
from simulator.metrics import request_frame, step_frame, summarize
from simulator.run import build, simulate
from simulator.scenario.config import load_scenario, scenario_from_dict


def _csv(df) -> str:
    return df.to_csv(index=False, float_format="%.17g", lineterminator="\n")


def _outputs(sc, trace: int = 1) -> dict:
    try:
        res = simulate(sc, trace=trace)
    except SimulationStalled as e:
        return {"stalled": str(e)}
    s = summarize(res)
    log = res.engine.log
    return {
        "engine": type(res.engine).__name__,
        "requests": _csv(request_frame(res)),
        "steps": _csv(step_frame(res)),
        "summary": json.dumps(s, sort_keys=True),
        "itl": json.dumps([log.itl_quantile(0.5), log.itl_count, log.itl_hist.tolist()]),
        "num_steps": res.engine.num_steps,
        "end": res.end_time,
        "events": res.engine.trace_events().tolist(),
    }


def _both(make) -> tuple[dict, dict]:
    ref, comp = _outputs(make("reference")), _outputs(make("compiled"))
    if "engine" in ref:
        assert (ref.pop("engine"), comp.pop("engine")) == ("ReferenceEngine", "CompiledEngine")
    return ref, comp


def _assert_same(ref: dict, comp: dict) -> None:
    for key in ref:
        assert ref[key] == comp[key], key


C1200 = "scenarios/collapse_c1200.yaml"
SGL = "scenarios/sglang_collapse.yaml"
SHORT = ["run.duration_s=30", "run.warmup_s=5"]
# A pool of 4,000 blocks under 1,200 clients is full within seconds: 15 s give hundreds of
# preemptions (swaps, aborts, host-tier loads...) in every case that uses it.
SMALL = ["run.duration_s=15", "run.warmup_s=5", "engine.num_gpu_blocks_override=4000"]
CASES = {
    # Closed loop, cache pinned full: preemptions every step, finishes someone waits for.
    "collapse": (C1200, ["run.duration_s=40", "run.warmup_s=10"]),
    "collapse_small_pool": (C1200, SMALL),
    "no_prefix_caching": (C1200, [*SMALL, "engine.enable_prefix_caching=false"]),
    "first_chunk_threshold": (
        C1200,
        [
            *SMALL,
            "engine.admission=first_chunk",
            "engine.long_prefill_token_threshold=64",
            "engine.max_num_batched_tokens=512",
            "engine.max_num_seqs=512",
        ],
    ),
    "seat_limited": (C1200, [*SHORT, "engine.max_num_seqs=300"]),
    # Every preemption mode and policy under pressure.
    "swap": (C1200, [*SMALL, "engine.preemption_mode=swap", "engine.swap_space_gb=1"]),
    "swap_full_recompute": (C1200, [*SMALL, "engine.preemption_mode=swap", "engine.swap_space_gb=0.2"]),
    "swap_full_abort": (
        C1200,
        [*SMALL, "engine.preemption_mode=swap", "engine.swap_space_gb=0.2", "engine.on_swap_full=abort"],
    ),
    "priority": (C1200, [*SMALL, "engine.scheduling_policy=priority"]),
    # Blocks shared by several requests: shared prefixes, multi-turn sessions, both at once.
    "shared_prefix": (
        C1200,
        [
            *SHORT,
            "engine.num_gpu_blocks_override=8000",
            "workload.shared_prefix={num_groups: 4, tokens: 500, fraction: 0.7}",
        ],
    ),
    "sessions": ("scenarios/workload_chat_sessions.yaml", ["run.duration_s=60", "engine.num_gpu_blocks_override=3000"]),
    "classes_priority_sessions_prefixes": (
        "scenarios/workload_mixed_classes.yaml",
        [
            "run.duration_s=60",
            "engine.num_gpu_blocks_override=2500",
            "engine.admission=first_chunk",
            "engine.long_prefill_token_threshold=256",
        ],
    ),
    "classes_swap": (
        "scenarios/workload_mixed_classes.yaml",
        [
            "run.duration_s=60",
            "engine.num_gpu_blocks_override=2500",
            "engine.preemption_mode=swap",
            "engine.swap_space_gb=2",
        ],
    ),
    "binned_log": ("scenarios/collapse_c512.yaml", ["run.duration_s=15", "run.warmup_s=5", "run.step_log_bin_s=2"]),
    # Open loop: many steps per call, runs cut at arrivals, more than one log stage.
    "poisson": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", ["run.num_requests=600"]),
    "poisson_queueing": (
        "benchmarks/scenarios/poisson_10k_llama2_7b.yaml",
        ["run.num_requests=500", "engine.max_num_seqs=5", "workload.arrival.rate=30"],
    ),
    "diurnal": ("scenarios/workload_diurnal_ramp.yaml", ["run.duration_s=60"]),
    # Cost-model terms the dense single-GPU cases do not reach: MoE experts and tensor parallelism.
    "moe_tp2": (
        "benchmarks/scenarios/poisson_short.yaml",
        ["model=mixtral-8x7b", "hardware.tensor_parallel_size=2", "run.num_requests=800"],
    ),
    # A hybrid sliding-window MoE model with MXFP4 experts (gpt-oss): the window's attention terms and
    # the expert weights' own width, under a full pool.
    "hybrid_window_mxfp4": (C1200, [*SMALL, "model=gpt-oss-20b", "hardware.gpu=h200"]),
    # A GPU whose calibration blends compute and memory time (the H200's: a norm, not the max) on a
    # dense model, under a full pool.
    "roofline_blend_h200": (C1200, [*SMALL, "hardware.gpu=h200"]),
    # A FlashAttention-2 GPU: the decodes of a step that also carries a prefill chunk cost extra rows.
    "fa2_mixed_steps": (C1200, [*SMALL, "hardware.gpu=a100-80gb"]),
    # Speculative decoding under preemption (drafts lost, lookahead slots), and with a budget that
    # cuts drafts; MTP on an MoE model (its draft layer has experts).
    "spec_eagle3_collapse": (C1200, [*SMALL, "engine.speculative_config={method: eagle3, num_speculative_tokens: 4}"]),
    "spec_ngram_budget_cuts": (
        C1200,
        [
            *SMALL,
            "engine.speculative_config={method: ngram, num_speculative_tokens: 5, acceptance_rate: 0.6}",
            "engine.max_num_batched_tokens=700",
            "engine.max_num_seqs=512",
        ],
    ),
    # Multi-LoRA: requests passed over for their adapter (FCFS and priority order kept), adapters loaded
    # into slots and from storage, under preemption; sessions keep their adapter.
    "lora_collapse": (
        C1200,
        [
            *SMALL,
            "engine.enable_lora=true",
            "engine.max_loras=3",
            "engine.max_cpu_loras=5",
            "workload.lora={adapters: 12, dist: zipf, zipf_s: 1.1, fraction: 0.8}",
        ],
    ),
    "lora_priority_sessions": (
        "scenarios/workload_mixed_classes.yaml",
        [
            "run.duration_s=60",
            "engine.num_gpu_blocks_override=2500",
            "engine.enable_lora=true",
            "engine.max_loras=2",
            "workload.lora={adapters: 6}",
        ],
    ),
    # KV offloading: sessions whose histories overflow a small GPU pool into a host tier that
    # holds part of them (writes, evictions, loads), with a shared prefix and preemption.
    "offload_sessions": (
        "scenarios/workload_chat_sessions.yaml",
        [
            "run.duration_s=40",
            "engine.num_gpu_blocks_override=1500",
            "engine.kv_offloading_size=3",
            "workload.arrival.concurrency=48",
            "workload.arrival.schedule={20: 160}",
            "workload.session.think_time_s=1",
        ],
    ),
    "offload_priority_preemption": (
        C1200,
        [
            *SMALL,
            "engine.kv_offloading_size=0.5",
            "engine.scheduling_policy=priority",
            "workload.shared_prefix={num_groups: 2, tokens: 200}",
        ],
    ),
    "spec_mtp_moe_priority": (
        "benchmarks/scenarios/poisson_short.yaml",
        [
            "model=qwen3-30b-a3b",
            "run.num_requests=600",
            "engine.scheduling_policy=priority",
            "engine.speculative_config={method: mtp, num_speculative_tokens: 2, acceptance_rate: [0.9, 0.7]}",
        ],
    ),
    # SGLang's scheduler (engine.framework: sglang): retraction under a small pool, chunked prompts,
    # longest output first, shared prefixes in pages of 32, no radix cache and no chunking.
    "sglang_collapse": (SGL, ["run.duration_s=30", "run.warmup_s=5", "engine.mem_fraction_static=0.215"]),
    "sglang_lof_chunks_prefixes": (
        SGL,
        [
            *SHORT,
            "engine.mem_fraction_static=0.23",
            "engine.chunked_prefill_size=512",
            "engine.max_prefill_tokens=2000",
            "engine.schedule_policy=lof",
            "engine.page_size=32",
            "workload.prompt_tokens={dist: uniform, min: 100, max: 3000}",
            "workload.shared_prefix={num_groups: 4, tokens: 500, fraction: 0.7}",
        ],
    ),
    # The cache-aware policies: many groups' prefixes contending for a small pool, queues both under
    # and over lpm's 128, retraction bringing requests back with their own prompts cached.
    "sglang_lpm_prefixes": (
        SGL,
        [
            *SHORT,
            "engine.mem_fraction_static=0.215",
            "engine.chunked_prefill_size=1024",
            "engine.schedule_policy=lpm",
            "workload.prompt_tokens={dist: uniform, min: 100, max: 1500}",
            "workload.shared_prefix={num_groups: 40, tokens: 800, fraction: 0.9}",
        ],
    ),
    # gpt-oss on Hopper: steps above the graphs' largest size compile their shape's kernels first
    # (cost.shape_key); a list of sizes run before seeds some keys.
    "gptoss_jit_compiles": (
        C1200,
        [
            *SHORT,
            "model=gpt-oss-20b",
            "engine.max_num_seqs=1024",
            "engine.jit_cache=[1100, 2049]",
            "workload.prompt_tokens={dist: uniform, min: 100, max: 1500}",
        ],
    ),
    "sglang_dfs_weight_prefixes": (
        SGL,
        [
            *SHORT,
            "engine.mem_fraction_static=0.215",
            "engine.schedule_policy=dfs-weight",
            "workload.prompt_tokens={dist: uniform, min: 100, max: 1500}",
            "workload.shared_prefix={num_groups: 12, tokens: 600, fraction: 0.8}",
        ],
    ),
    "sglang_unchunked_no_radix": (
        SGL,
        [
            *SHORT,
            "engine.mem_fraction_static=0.22",
            "engine.chunked_prefill_size=-1",
            "engine.disable_radix_cache=true",
            "engine.max_running_requests=200",
            "engine.schedule_conservativeness=0.3",
            "workload.output_tokens={dist: uniform, min: 1, max: 2000}",
        ],
    ),
}


# Not traced for coverage (pytest-cov's no_cover): the reference step runs here on scenarios big enough
# to preempt, swap and abort, several times slower under the tracer; the tests that cover its lines
# are the small ones (tests/test_golden.py, test_invariants.py, the Sim factory on both steps).
@pytest.mark.no_cover
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_step_is_byte_identical(case):
    path, over = CASES[case]
    ref, comp = _both(lambda k: load_scenario(path, over + [f"run.kernel={k}"])[0])
    _assert_same(ref, comp)
    assert ref["num_steps"] > 100


@pytest.mark.no_cover  # as above
def test_trace_replay_is_byte_identical(tmp_path):
    """Trace arrivals (each lands on its exact time) with bursts that queue, on both engines; a
    long request late in the trace widens the compiled engine's block tables while others run."""
    rng = np.random.default_rng(7)
    t = rng.exponential(0.02, 1500).cumsum()
    t[500:800] = t[500]  # a burst of simultaneous arrivals
    prompt, out = rng.integers(1, 900, 1500), rng.integers(1, 300, 1500)
    prompt[1250], out[1250] = 6000, 400
    rows = "".join(f"{a:.6f},{p},{o}\n" for a, p, o in zip(t, prompt, out))
    (tmp_path / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n" + rows)
    over = [
        f"workload.trace={tmp_path / 't.csv'}",
        "run.duration_s=null",
        "run.num_requests=1500",
        "engine.num_gpu_blocks_override=3000",
        "engine.max_num_seqs=128",
    ]
    ref, comp = _both(lambda k: load_scenario("benchmarks/scenarios/poisson_short.yaml", over + [f"run.kernel={k}"])[0])
    _assert_same(ref, comp)
    summary = json.loads(ref["summary"])
    assert summary["num_completed"] == 1500 and summary["num_preemptions"] > 0  # the burst overflows the pool


def _random_scenario(d: dict, kernel: str):
    if d["arrival"] == "closed_loop":  # think time and ramp-up: client events between steps
        arrival = {
            "type": "closed_loop",
            "concurrency": d["load"],
            "think_time_s": d["think"],
            "think_time_dist": "exponential",
            "ramp_up_s": d["think"],
        }
    else:
        arrival = {"type": d["arrival"], "rate": float(d["load"]), **({"cv": 3.0} if d["arrival"] == "gamma" else {})}
    workload = {
        "arrival": arrival,
        "prompt_tokens": {"dist": "uniform", "min": 1, "max": d["prompt"]},
        "output_tokens": {"dist": "uniform", "min": 1, "max": d["output"]},
    }
    if d["groups"]:
        workload["shared_prefix"] = {"num_groups": d["groups"], "tokens": d["prefix"], "fraction": 0.7}
    if d["turns"] > 1:
        workload["session"] = {"turns": {"dist": "uniform", "min": 1, "max": d["turns"]}, "think_time_s": d["think"]}
    if d["lora"]:
        workload["lora"] = d["lora"]
    if d["classes"]:  # two priority classes sharing the arrival stream
        workload["classes"] = {"urgent": {"weight": 1, "priority": 0}, "batch": {"weight": 2, "priority": 3}}
    # LoRA's rule and KV offloading are V1's: recompute preemption with them
    mode = "recompute" if d["lora"] or d["offload_gb"] else d["preemption"]
    return scenario_from_dict(
        {
            "model": "llama-3.1-8b",
            "hardware": {"gpu": d["gpu"]},
            "engine": {
                "num_gpu_blocks_override": d["blocks"],
                "block_size": d["block_size"],
                "max_num_seqs": d["seqs"],
                "max_num_batched_tokens": max(d["budget"], d["seqs"]),  # vLLM refuses a budget below the seats
                "enable_prefix_caching": d["caching"],
                "admission": d["admission"],
                "long_prefill_token_threshold": d["thr"],
                "max_model_len": 4096,
                "scheduling_policy": d["policy"],
                "preemption_mode": mode,
                "swap_space_gb": d["swap_gb"],
                "on_swap_full": d["on_swap_full"],
                "vllm_version": d["version"],
                "async_scheduling": d["async"],
                "enforce_eager": d["eager"],
                "speculative_config": d["spec"],
                "enable_lora": d["lora"] is not None,
                "max_loras": d["max_loras"],
                "max_cpu_loras": d["max_loras"] + d["cpu_extra"],
                "kv_offloading_size": d["offload_gb"] if d["caching"] and mode == "recompute" else 0.0,
            },
            "frontend": {
                "enabled": d["api_servers"] > 0,
                "api_server_count": max(d["api_servers"], 1),
                "paces_engine": d["paces"],
                "endpoint": d["endpoint"],
            },
            "workload": workload,
            "run": {
                "seed": d["seed"],
                "duration_s": d["duration"],
                "warmup_s": 0.0,
                "kernel": kernel,
                "max_steps": d["max_steps"],
            },
        }
    )


@pytest.mark.no_cover  # as above
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {
            "arrival": st.sampled_from(["closed_loop", "poisson", "gamma"]),
            "gpu": st.sampled_from(["h100-sxm", "a100-80gb"]),
            "think": st.sampled_from([0.0, 0.05, 1.0]),
            "load": st.integers(1, 120),
            "blocks": st.integers(8, 600),
            "block_size": st.sampled_from([1, 8, 16, 128]),  # the sizes vLLM accepts
            "seqs": st.integers(1, 96),
            "budget": st.sampled_from([16, 64, 512, 4096]),
            "caching": st.booleans(),
            "admission": st.sampled_from(["first_chunk", "full_prompt"]),
            "thr": st.sampled_from([0, 8, 100]),
            "policy": st.sampled_from(["fcfs", "priority"]),
            "preemption": st.sampled_from(["recompute", "swap"]),
            "swap_gb": st.sampled_from([0.0, 0.05, 4.0]),
            "on_swap_full": st.sampled_from(["recompute", "abort"]),
            "groups": st.sampled_from([0, 0, 1, 3]),
            "prefix": st.integers(1, 300),
            "turns": st.sampled_from([1, 1, 3]),
            "classes": st.booleans(),
            "prompt": st.integers(1, 600),
            "output": st.integers(1, 200),
            "seed": st.integers(0, 1000),
            "duration": st.sampled_from([2.0, 8.0]),
            "max_steps": st.sampled_from([50_000_000, 300]),
            "version": st.sampled_from(["0.10", "0.19", "0.26", "0.32"]),
            "async": st.sampled_from([None, False, True]),
            "eager": st.booleans(),
            "api_servers": st.sampled_from([0, 1, 2]),  # 0: no front-end modelled
            "paces": st.sampled_from([None, True, False]),  # whether the API server paces the engine
            "endpoint": st.sampled_from(["completions", "chat"]),
            "lora": st.sampled_from(
                [None, None, {"adapters": 3}, {"adapters": 20, "dist": "zipf", "zipf_s": 1.2, "fraction": 0.7}]
            ),
            "max_loras": st.sampled_from([1, 2, 8]),
            "cpu_extra": st.sampled_from([0, 1, 30]),
            # KV offloading's host tier: none, a block or two (bs 16), tens to hundreds of blocks
            "offload_gb": st.sampled_from([0.0, 0.0, 0.003, 0.05, 1.0]),
            "spec": st.sampled_from(
                [
                    {},
                    {},
                    {"method": "eagle3", "num_speculative_tokens": 3},
                    {"method": "ngram", "num_speculative_tokens": 5, "acceptance_rate": 0.0},
                    {"method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 1.0},
                    {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": [0.5]},
                ]
            ),
        }
    )
)
@example(  # the token budget spent before a speculative request's lookahead blocks were asked for
    d={
        "arrival": "closed_loop", "gpu": "h100-sxm", "think": 0.0, "load": 6, "blocks": 39, "block_size": 1,
        "seqs": 17, "budget": 16, "caching": False, "admission": "first_chunk", "thr": 0, "policy": "fcfs",
        "preemption": "recompute", "swap_gb": 0.0, "on_swap_full": "recompute", "groups": 0, "prefix": 1,
        "turns": 1, "classes": False, "prompt": 1, "output": 2, "seed": 0, "duration": 2.0,
        "max_steps": 50_000_000, "version": "0.10", "async": None, "eager": False, "api_servers": 0,
        "paces": None, "endpoint": "completions", "lora": None, "max_loras": 1, "cpu_extra": 0,
        "offload_gb": 0.0, "spec": {"method": "eagle3", "num_speculative_tokens": 3},
    }
)  # fmt: skip
def test_random_scenarios_are_byte_identical(d):
    _assert_same(*_both(lambda k: _random_scenario(d, k)))


@pytest.mark.no_cover  # as above
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {
            "arrival": st.sampled_from(["closed_loop", "poisson"]),
            "load": st.integers(1, 200),
            "fraction": st.floats(0.205, 0.3),  # Llama-3.1-8B on an H100: from a few hundred tokens of KV up
            "chunk": st.sampled_from([-1, 16, 256, 8192]),
            "prefill": st.sampled_from([16, 700, 16384]),
            "page": st.sampled_from([1, 16, 64]),
            "policy": st.sampled_from(["fcfs", "lof", "lpm", "dfs-weight"]),
            "radix": st.booleans(),
            "running": st.sampled_from([None, 1, 7, 300]),
            "conservativeness": st.sampled_from([0.3, 1.0, 3.0]),
            "overlap": st.booleans(),
            "groups": st.sampled_from([0, 0, 3, 40]),
            "prompt": st.integers(1, 3000),
            "output": st.integers(1, 1500),
            "seed": st.integers(0, 1000),
        }
    )
)
def test_random_sglang_scenarios_are_byte_identical(d):
    def make(kernel):
        arrival = (
            {"type": "closed_loop", "concurrency": d["load"]}
            if d["arrival"] == "closed_loop"
            else {"type": "poisson", "rate": float(d["load"])}
        )
        workload = {
            "arrival": arrival,
            "prompt_tokens": {"dist": "uniform", "min": 1, "max": d["prompt"]},
            "output_tokens": {"dist": "uniform", "min": 1, "max": d["output"]},
        }
        if d["groups"]:
            workload["shared_prefix"] = {"num_groups": d["groups"], "tokens": 400, "fraction": 0.7}
        engine = {
            "framework": "sglang",
            "mem_fraction_static": d["fraction"],
            "chunked_prefill_size": d["chunk"],
            "max_prefill_tokens": d["prefill"],
            "page_size": d["page"],
            "schedule_policy": d["policy"],
            "disable_radix_cache": not d["radix"],
            "max_running_requests": d["running"],
            "schedule_conservativeness": d["conservativeness"],
            "disable_overlap_schedule": not d["overlap"],
            "max_model_len": 4096,
        }
        run = {"seed": d["seed"], "duration_s": 6.0, "warmup_s": 0.0, "kernel": kernel}
        return scenario_from_dict(
            {
                "model": "llama-3.1-8b",
                "hardware": {"gpu": "h100-sxm"},
                "engine": engine,
                "workload": workload,
                "run": run,
            }
        )

    _assert_same(*_both(make))


def test_auto_runs_the_compiled_step_for_every_feature():
    """``run.kernel: auto`` (the default) runs the compiled step whatever the scheduler settings and workload."""
    for path, over in [
        ("scenarios/collapse_c512.yaml", []),
        ("scenarios/collapse_c512.yaml", ["engine.scheduling_policy=priority"]),
        ("scenarios/collapse_c512.yaml", ["engine.preemption_mode=swap"]),
        ("scenarios/workload_chat_sessions.yaml", []),
        ("scenarios/workload_mixed_classes.yaml", []),
    ]:
        sc, _ = load_scenario(path, ["run.duration_s=5", "run.warmup_s=0", *over])
        assert isinstance(build(sc)[1], CompiledEngine), over


def test_compiled_watchdog_raises_the_diagnostic():
    """The compiled step's stall counter reaches the engine's watchdog (forced here with a zero allowance)."""
    from simulator.engine.compiled import layout as L

    sc, _ = load_scenario("scenarios/collapse_c512.yaml", ["run.duration_s=5", "run.warmup_s=0"])
    env, engine, _ = build(sc)
    engine.stall_steps = 0
    engine.st.cfg[L.STALL_STEPS] = 0
    with pytest.raises(
        SimulationStalled, match=r"^no progress for 0 steps .* running=\d+ waiting=\d+ swapped=0 free_blocks=\d+/\d+"
    ):
        env.run(until=5)


def test_the_step_runs_as_plain_python_with_the_same_results(tmp_path):
    """With ``NUMBA_DISABLE_JIT=1`` the compiled step runs as plain Python (to step through it in a
    debugger) and gives the same results as the compiled module and the reference."""
    script = (
        "import json, sys\n"
        "from simulator.engine import compiled\n"
        "from simulator.scenario.config import load_scenario\n"
        "from simulator.metrics import request_frame, step_frame\n"
        "from simulator.run import simulate\n"
        "sc, _ = load_scenario('scenarios/workload_mixed_classes.yaml', ['run.duration_s=15', 'run.warmup_s=0',"
        " 'engine.num_gpu_blocks_override=600', 'engine.preemption_mode=swap', 'engine.swap_space_gb=0.1',"
        " 'run.kernel=' + sys.argv[1]])\n"
        "res = simulate(sc)\n"
        "print(json.dumps([compiled.load().kind if sys.argv[1] == 'compiled' else 'reference',"
        " request_frame(res).to_csv(float_format='%.17g'), step_frame(res).to_csv(float_format='%.17g')]))\n"
    )
    runs = {}
    for name, kern, env in [
        ("python", "compiled", {"NUMBA_DISABLE_JIT": "1"}),
        ("compiled", "compiled", {}),
        ("reference", "reference", {}),
    ]:
        out = subprocess.run(
            [sys.executable, "-c", script, kern], capture_output=True, text=True, check=True, env={**os.environ, **env}
        )
        runs[name] = json.loads(out.stdout)
    assert runs["python"][0] == "python" and runs["compiled"][0] in ("aot", "jit")
    assert runs["python"][1:] == runs["compiled"][1:] == runs["reference"][1:]
    assert "swapped" in runs["reference"][1] or runs["reference"][1].count(",finished,") > 10
