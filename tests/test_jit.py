"""Kernels compiled on a step shape's first use (vLLM's MXFP4 MoE path on Hopper: gpt-oss): the
compile key, who pays it, how much, and what a scenario tells about the server's state."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.engine import rules
from simulator.engine.cost import (
    JIT_SHAPE_PER_EXPERT_S,
    JIT_SHAPE_S,
    StepWork,
    jit_shape_s,
    new_shapes,
    shape_key,
    token_key,
    work_time,
)
from simulator.engine.params import P
from simulator.metrics import summarize
from simulator.outputs.notes import run_notes
from simulator.run import build, simulate
from simulator.scenario.config import ConfigError, scenario_from_dict
from simulator.scenario.hardware import load_gpu
from simulator.scenario.hosts import load_host
from simulator.scenario.models import load_model


def test_token_key_is_the_32_token_bucket_and_divisibility_by_16():
    # 1,056 = 33 x 32, divisible by 16; 1,057 falls in the next bucket; 1,041 shares 1,040's bucket
    # (ceil(1041/32) = 33) but not its divisibility.
    assert token_key(1056) == 2 * 33 + 1
    assert token_key(1057) == 2 * 34
    assert token_key(1040) == 2 * 33 + 1
    assert token_key(1041) == 2 * 33
    assert token_key(1041) != token_key(1040) and token_key(1025) == token_key(1041)


def _cp(jit=1.5, graph_max=512.0):
    cp = np.zeros(len(P))
    cp[P.JIT_SHAPE_S], cp[P.GRAPH_MAX], cp[P.PREFILL_GRAPH_MAX] = jit, graph_max, graph_max
    return cp


def test_only_steps_without_graphs_have_a_compile_key():
    cp = _cp()
    assert shape_key(cp, 512, 512) == -1  # a decode of 512 replays a captured graph
    assert shape_key(cp, 600, 600) == token_key(600)  # above the largest graph: run eagerly
    assert shape_key(cp, 3, 1500) == token_key(1500)  # a prefill above the piecewise graphs
    assert shape_key(cp, 3, 400) == -1
    assert shape_key(_cp(jit=0.0), 600, 600) == -1  # an engine without such kernels


def test_per_key_cost_is_fixed_plus_per_expert_on_the_reference_host():
    h200 = load_gpu("h200")
    big, small = load_model("gpt-oss-120b"), load_model("gpt-oss-20b")
    assert jit_shape_s(big, h200, "mxfp4", "vllm") == pytest.approx(JIT_SHAPE_S + 128 * JIT_SHAPE_PER_EXPERT_S)
    assert jit_shape_s(small, h200, "mxfp4", "vllm") == pytest.approx(JIT_SHAPE_S + 32 * JIT_SHAPE_PER_EXPERT_S)
    assert jit_shape_s(big, h200, "mxfp4", "sglang") == 0.0
    assert jit_shape_s(load_model("llama-3.1-8b"), h200, "bf16", "vllm") == 0.0


def test_start_up_shape_and_told_sizes_are_compiled_already():
    cfg = rules.SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, jit_seen_tokens=(1100,))
    seen = new_shapes(_cp(), cfg)
    assert seen[token_key(8192)] == 1 and seen[token_key(1100)] == 1
    assert seen[token_key(1200)] == 0
    assert seen.sum() == 2
    assert len(seen) > token_key(8192 + 256)  # every step the engine can schedule has a slot
    warm = new_shapes(_cp(), rules.SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, jit_warm=True))
    assert warm.all()
    assert len(new_shapes(_cp(jit=0.0), rules.SchedulerConfig(max_num_batched_tokens=2**36))) == 1  # no such kernels


def test_a_step_that_compiles_waits_the_per_key_seconds_once():
    cp = build(_gptoss())[1].cost.params
    w = StepWork(num_seqs=600, num_tokens=600, num_decode_tokens=600, context_tokens=600_000, num_sampled=600)
    assert cp[P.JIT_SHAPE_S] > 0
    assert work_time(cp, replace(w, jit_shapes=1)) == pytest.approx(work_time(cp, w) + cp[P.JIT_SHAPE_S])


def _gptoss(over: dict | None = None, kernel: str = "auto"):
    d = {
        "name": "jit",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200"},
        "engine": {"max_num_seqs": 2048, **(over or {})},
        "workload": {
            "arrival": {"type": "closed_loop", "concurrency": 1100},
            "prompt_tokens": {"dist": "fixed", "value": 64},
            "output_tokens": {"dist": "fixed", "value": 32},
        },
        "run": {"seed": 0, "num_requests": 1100, "kernel": kernel},
    }
    return scenario_from_dict(d)


@pytest.mark.parametrize("kernel", ["reference", "compiled"])
def test_a_cold_server_pays_each_new_shape_once_and_a_warm_one_none(kernel):
    res = simulate(_gptoss(kernel=kernel))
    cold = summarize(res)
    note = [n for n in run_notes(cold, res) if "engine.jit_cache" in n]
    assert len(note) == 1 and f"{cold['jit_compiles']['steps']:,} steps" in note[0] and "just started" in note[0]
    warm = summarize(simulate(_gptoss({"jit_cache": "warm"}, kernel=kernel)))
    told = summarize(simulate(_gptoss({"jit_cache": [1100]}, kernel=kernel)))
    jit = cold["jit_compiles"]
    # 1,100 clients each decode past gpt-oss's 1,024-token graph: the distinct token counts of the
    # steps above 1,024 (1,100 decodes, fewer as requests end in waves) each compile once.
    assert 1 <= jit["steps"] <= 2 * (1100 // 32 + 2)
    assert "jit_compiles" not in warm
    per_key = jit_shape_s(load_model("gpt-oss-20b"), load_gpu("h200"), "mxfp4", "vllm") * load_host(None).scale
    assert jit["seconds"] == pytest.approx(jit["steps"] * per_key)
    # the first decode of 1,100 was run before
    assert told.get("jit_compiles", {"steps": 0})["steps"] == jit["steps"] - 1
    assert cold["simulated_time_s"] > warm["simulated_time_s"]


def test_bad_jit_cache_is_a_one_line_error():
    with pytest.raises(ConfigError) as e:
        _gptoss({"jit_cache": "hot"})
    assert "engine.jit_cache" in str(e.value) and "'hot'" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        _gptoss({"jit_cache": [1024, -3]})
    assert "engine.jit_cache" in str(e.value)
