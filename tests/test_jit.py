"""Kernels compiled on a step shape's first use (vLLM's MXFP4 MoE path on Hopper: gpt-oss): the
compile key, who pays it, how much, and what a scenario tells about the server's state."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simulator.engine import rules
from simulator.engine.cost import (
    JIT_SHAPE_PER_EXPERT_S,
    JIT_SHAPE_S,
    MATMUL_VARIANTS,
    StepWork,
    first_compile,
    jit_shape_s,
    jit_variant_s,
    key_slot,
    matmul_variant,
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
    keys = seen[MATMUL_VARIANTS:]
    assert seen[key_slot(seen, token_key(8192))] == 1 and seen[key_slot(seen, token_key(1100))] == 1
    assert seen[key_slot(seen, token_key(1200))] == 0
    assert keys.sum() == 2
    assert len(keys) > token_key(8192 + 256)  # every step the engine can schedule has a slot
    warm = new_shapes(_cp(), rules.SchedulerConfig(max_num_seqs=256, max_num_batched_tokens=8192, jit_warm=True))
    assert warm.all()
    assert len(new_shapes(_cp(jit=0.0), rules.SchedulerConfig(max_num_batched_tokens=2**36))) == 1  # no such kernels


def test_a_step_that_compiles_waits_the_per_key_seconds_once():
    cp = build(_gptoss())[1].cost.params
    w = StepWork(num_seqs=600, num_tokens=600, num_decode_tokens=600, context_tokens=600_000, num_sampled=600)
    assert cp[P.JIT_SHAPE_S] > 0
    assert work_time(cp, replace(w, jit_s=2.5)) == pytest.approx(work_time(cp, w) + 2.5)


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
    model, h200, scale = load_model("gpt-oss-20b"), load_gpu("h200"), load_host(None).scale
    per_key = jit_shape_s(model, h200, "mxfp4", "vllm") * scale
    per_variant = jit_variant_s(model, h200, "mxfp4", "vllm") * scale
    # the seconds are new keys and new matmul variants, each at its price, at least one a step
    paid = [
        (k, v)
        for k in range(jit["steps"] + 1)
        for v in range(MATMUL_VARIANTS + 1)
        if abs(k * per_key + v * per_variant - jit["seconds"]) < 1e-6
    ]
    assert len(paid) == 1 and sum(paid[0]) >= jit["steps"] and paid[0][0] >= 1 and paid[0][1] >= 1
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


def test_matmul_variant_by_hand():
    # gpt-oss-120b (128 experts, 4 a token), 1,100 tokens: 4,400 rows, 34 an expert -> row block 64
    # (index 2); the grid's row blocks (4,400 - 128 + 1) / 64 rounded up, + 127 = 194 (not divisible
    # by 16); the first kernel's rows 1,100 are not, the second's 4,400 are.
    assert matmul_variant(0, 1100, 128, 4) == (0 * 4 + 2) * 4 + 0
    assert matmul_variant(1, 1100, 128, 4) == (1 * 4 + 2) * 4 + 2
    # 2,096 tokens: 8,384 rows, 65 an expert -> block 128 (index 3); grid 65 + 127 = 192 = 12 x 16
    assert matmul_variant(0, 2096, 128, 4) == (0 * 4 + 3) * 4 + 2 + 1
    # a few rows, no more than the experts: one block a row; 20b's 32 experts at 4 tokens: 16 rows
    assert matmul_variant(1, 4, 32, 4) == (1 * 4 + 0) * 4 + 2 + 1
    assert all(
        0 <= matmul_variant(k, n, e, 4) < MATMUL_VARIANTS for k in (0, 1) for n in (1, 77, 8192) for e in (32, 128)
    )


PROBES = Path(__file__).resolve().parents[1] / "data" / "profiles" / "jit_probe"


@pytest.mark.parametrize("name", ["gptoss20b_steps", "gptoss120b_steps", "gptoss120b_random_steps"])
def test_every_matmul_variant_an_engine_compiled_is_the_one_the_rule_names(name):
    # vLLM 0.26 offline on an H200 (tools/e2e/jit_probe.py): one step at a time, the Triton kernels
    # each compiled. The rule, started from what the start-up compiled (new_shapes: the profile step,
    # the graph captures), names per step without graphs the new expert-matmul variants: exactly those
    # whose kernels appeared, by kernel and row block (their names say both).
    probe = json.loads((PROBES / f"{name}.json").read_text())
    sc = scenario_from_dict(
        {
            "name": "probe",
            "model": probe["model"],
            "hardware": {"gpu": "h200"},
            "engine": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192},
            "run": {"num_requests": 1},
        }
    )
    engine = build(sc)[1]
    cp = engine.cost.params.copy()
    assert cp[P.GRAPH_MAX] == probe["capture"] and cp[P.JIT_SHAPE_S] > 0
    cp[P.JIT_SHAPE_S], cp[P.JIT_VARIANT_S] = 1000.0, 1.0  # a step's seconds count its keys and variants apart
    shapes = new_shapes(cp, rules.SchedulerConfig(max_num_seqs=1024, max_num_batched_tokens=8192))
    blocks = (16, 32, 64, 128)
    checked = 0
    for row in probe["rows"]:
        before = shapes.copy()
        paid = first_compile(cp, shapes, row["tokens"], row["tokens"])
        new = [v for v in range(MATMUL_VARIANTS) if shapes[v] and not before[v]]
        named = sorted((v // 16, blocks[(v // 4) % 4]) for v in new)
        got = sorted(
            (
                0 if k["name"].endswith("_swiglu") else 1,
                int(k["name"].removesuffix("_swiglu").rsplit("_", 1)[1].split("x")[0]),
            )
            for k in row["compiled"]
            if k["name"].startswith("_matmul_ogs")
        )
        assert named == got, row["tokens"]
        assert round(paid % 1000.0) == len(new)
        checked += len(got)
    assert checked >= 2  # each probe compiled variants past the start-up's


def test_both_engine_steps_wait_for_the_same_compiles():
    # One rule for both (cost.first_compile): a cold gpt-oss server past its graphs, step by step.
    ref = simulate(_gptoss(kernel="reference"))
    comp = simulate(_gptoss(kernel="compiled"))
    assert ref.engine.jit_counts() == comp.engine.jit_counts()
    assert ref.engine.jit_counts()[0] >= 1
    a, b = summarize(ref), summarize(comp)
    assert a["simulated_time_s"] == b["simulated_time_s"] and a["output_throughput"] == b["output_throughput"]
