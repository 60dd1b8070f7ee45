"""The compiled engine (simulator/compiled.py) gives byte-identical results to the Python engine.

Each case runs both (``run.kernel: python`` and ``compiled``) and compares requests.csv and
steps.csv as ``servesim run`` writes them (every float to 17 significant digits), the summary, the
inter-token-latency statistics and the step count; on named scenarios and on random ones
(Hypothesis) sized to preempt, evict cached blocks, chunk prefills and hit every stopping rule of
the kernel (a finish someone waits for, the next arrival, a full log stage or gap buffer).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config import load_scenario, scenario_from_dict
from simulator.engine import Engine, SimulationStalled
from simulator.errors import ConfigError
from simulator.metrics import request_frame, step_frame, summarize
from simulator.run import build, simulate

pytest.importorskip("numba")
from simulator.fast_engine import CompiledEngine


def _csv(df) -> str:
    return df.to_csv(index=False, float_format="%.17g", lineterminator="\n")


def _outputs(sc) -> dict:
    try:
        res = simulate(sc)
    except SimulationStalled as e:
        return {"stalled": str(e)}
    s = summarize(res)
    for k in ("wall_time_s", "speedup_vs_real_time"):
        s.pop(k)
    log = res.engine.log
    return {
        "engine": type(res.engine).__name__,
        "requests": _csv(request_frame(res)),
        "steps": _csv(step_frame(res)),
        "summary": json.dumps(s, sort_keys=True),
        "itl": json.dumps([log.itl_quantile(0.5), log.itl_count, log.itl_hist.tolist()]),
        "num_steps": res.engine.num_steps,
        "end": res.end_time,
    }


def _both(make) -> tuple[dict, dict]:
    py, cc = _outputs(make("python")), _outputs(make("compiled"))
    if "engine" in py:
        assert (py.pop("engine"), cc.pop("engine")) == ("Engine", "CompiledEngine")
    return py, cc


def _assert_same(py: dict, cc: dict) -> None:
    for key in py:
        assert py[key] == cc[key], key


CASES = {
    # Closed loop, cache pinned full: preemptions every step, finishes someone waits for, full gap buffers.
    "collapse": ("scenarios/collapse_c1200.yaml", ["run.duration_s=40", "run.warmup_s=10"]),
    "collapse_small_pool": ("scenarios/collapse_c1200.yaml", ["run.duration_s=30", "run.warmup_s=5",
                                                              "engine.num_gpu_blocks_override=4000"]),
    "no_prefix_caching": ("scenarios/collapse_c1200.yaml", ["run.duration_s=30", "run.warmup_s=5",
                                                            "engine.num_gpu_blocks_override=4000",
                                                            "engine.enable_prefix_caching=false"]),
    "first_chunk_threshold": ("scenarios/collapse_c1200.yaml", [
        "run.duration_s=30", "run.warmup_s=5", "engine.num_gpu_blocks_override=4000", "engine.admission=first_chunk",
        "engine.long_prefill_token_threshold=64", "engine.max_num_batched_tokens=512"]),
    "seat_limited": ("scenarios/collapse_c1200.yaml", ["run.duration_s=30", "run.warmup_s=5", "engine.max_num_seqs=300"]),
    "binned_log": ("scenarios/collapse_c512.yaml", ["run.duration_s=30", "run.warmup_s=5", "run.step_log_bin_s=2"]),
    # Open loop: many steps per call, runs cut at arrivals, more than one log stage.
    "poisson": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", ["run.num_requests=600"]),
    "poisson_queueing": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", [
        "run.num_requests=500", "engine.max_num_seqs=5", "workload.arrival.rate=30"]),
    "diurnal": ("scenarios/workload_diurnal_ramp.yaml", ["run.duration_s=60"]),
    # Cost-model terms the dense single-GPU cases do not reach: MoE experts and tensor parallelism.
    "moe_tp2": ("benchmarks/scenarios/poisson_short.yaml", ["model=mixtral-8x7b", "hardware.tensor_parallel_size=2",
                                                            "run.num_requests=800"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_engine_is_byte_identical(case):
    path, over = CASES[case]
    py, cc = _both(lambda k: load_scenario(path, over + [f"run.kernel={k}"])[0])
    _assert_same(py, cc)
    assert py["num_steps"] > 100


def test_trace_replay_is_byte_identical(tmp_path):
    """Trace arrivals (each lands on its exact time) with bursts that queue, on both engines; a
    long request late in the trace widens the compiled engine's block tables while others run."""
    rng = np.random.default_rng(7)
    t = rng.exponential(0.02, 3000).cumsum()
    t[500:800] = t[500]  # a burst of simultaneous arrivals
    prompt, out = rng.integers(1, 900, 3000), rng.integers(1, 300, 3000)
    prompt[2500], out[2500] = 6000, 400
    rows = "".join(f"{a:.6f},{p},{o}\n" for a, p, o in zip(t, prompt, out))
    (tmp_path / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n" + rows)
    over = [f"workload.trace={tmp_path / 't.csv'}", "run.duration_s=null", "run.num_requests=3000",
            "engine.num_gpu_blocks_override=3000", "engine.max_num_seqs=128"]
    py, cc = _both(lambda k: load_scenario("benchmarks/scenarios/poisson_short.yaml", over + [f"run.kernel={k}"])[0])
    _assert_same(py, cc)
    summary = json.loads(py["summary"])
    assert summary["num_completed"] == 3000 and summary["num_preemptions"] > 0  # the burst overflows the pool


def _random_scenario(d: dict, kernel: str):
    if d["arrival"] == "closed_loop":  # think time and ramp-up: client events between steps
        arrival = {"type": "closed_loop", "concurrency": d["load"], "think_time_s": d["think"],
                   "think_time_dist": "exponential", "ramp_up_s": d["think"]}
    else:
        arrival = {"type": d["arrival"], "rate": float(d["load"]), "cv": 3.0}
    return scenario_from_dict({
        "model": "llama-3.1-8b",
        "hardware": {"gpu": "h100-sxm"},
        "engine": {
            "num_gpu_blocks_override": d["blocks"], "block_size": d["block_size"], "max_num_seqs": d["seqs"],
            "max_num_batched_tokens": d["budget"], "enable_prefix_caching": d["caching"], "admission": d["admission"],
            "long_prefill_token_threshold": d["thr"], "max_model_len": 4096,
        },
        "workload": {
            "arrival": arrival,
            "prompt_tokens": {"dist": "uniform", "min": 1, "max": d["prompt"]},
            "output_tokens": {"dist": "uniform", "min": 1, "max": d["output"]},
        },
        "run": {"seed": d["seed"], "duration_s": d["duration"], "warmup_s": 0.0, "kernel": kernel,
                "max_steps": d["max_steps"]},
    })


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({
    "arrival": st.sampled_from(["closed_loop", "poisson", "gamma"]),
    "think": st.sampled_from([0.0, 0.05, 1.0]),
    "load": st.integers(1, 120),
    "blocks": st.integers(8, 600),
    "block_size": st.sampled_from([1, 4, 16, 128]),
    "seqs": st.integers(1, 96),
    "budget": st.sampled_from([16, 64, 512, 4096]),
    "caching": st.booleans(),
    "admission": st.sampled_from(["first_chunk", "full_prompt"]),
    "thr": st.sampled_from([0, 8, 100]),
    "prompt": st.integers(1, 600),
    "output": st.integers(1, 200),
    "seed": st.integers(0, 1000),
    "duration": st.sampled_from([2.0, 8.0]),
    "max_steps": st.sampled_from([50_000_000, 300]),
}))
def test_random_scenarios_are_byte_identical(d):
    _assert_same(*_both(lambda k: _random_scenario(d, k)))


def test_auto_picks_the_compiled_engine_only_where_it_applies():
    sc, _ = load_scenario("scenarios/collapse_c512.yaml", ["run.duration_s=5", "run.warmup_s=0"])
    assert isinstance(build(sc)[1], CompiledEngine)
    for over in (["engine.scheduling_policy=priority"], ["engine.preemption_mode=swap"], ["run.kernel=python"]):
        sc, _ = load_scenario("scenarios/collapse_c512.yaml", ["run.duration_s=5", "run.warmup_s=0", *over])
        assert type(build(sc)[1]) is Engine
    for path in ("scenarios/workload_chat_sessions.yaml", "scenarios/workload_mixed_classes.yaml"):
        assert type(build(load_scenario(path)[0])[1]) is Engine


def test_compiled_where_it_cannot_apply_is_a_one_line_error():
    sc, _ = load_scenario("scenarios/collapse_c512.yaml", ["run.kernel=compiled", "engine.preemption_mode=swap"])
    with pytest.raises(ConfigError, match=r"^run.kernel is compiled, but engine.preemption_mode is swap \(use auto or python\)$"):
        build(sc)


def test_compiled_watchdog_raises_the_diagnostic():
    """The kernel's stall counter reaches the engine's watchdog (forced here with a zero allowance)."""
    from simulator import compiled as K

    sc, _ = load_scenario("scenarios/collapse_c512.yaml", ["run.duration_s=5", "run.warmup_s=0"])
    env, engine, _ = build(sc)
    engine.stall_steps = 0
    engine._conf[K.STALL_STEPS] = 0
    with pytest.raises(SimulationStalled, match=r"^no progress for 0 steps .* running=\d+ waiting=\d+ swapped=0 free_blocks=\d+/\d+"):
        env.run(until=5)
