"""Multi-LoRA (simulator/engine/lora.py and the rules both engine steps share): the per-step adapter limit
computed by hand, adapter loads and their cost, the slots' memory against vLLM's own start-up logs,
the workload's adapter draws, and the checks."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine import rules
from simulator.engine.lora import slot_bytes
from simulator.engine.submission import Submission
from simulator.errors import ConfigError
from simulator.metrics import summarize
from simulator.resolve import load_arch, memory_plan
from simulator.run import simulate
from simulator.scenario.config import load_scenario
from simulator.scenario.hardware import load_gpu
from simulator.scenario.memory import GIB
from simulator.scenario.models import load_model
from tests.conftest import Sim


def lora_sim(requests, adapters, engine, max_loras=1, max_cpu_loras=None, **kw):
    """A ``Sim`` whose request ``i`` asks for adapter ``adapters[i]`` (-1: the base model)."""
    sim = Sim([], engine=engine, max_loras=max_loras, max_cpu_loras=max_cpu_loras or max_loras, **kw)
    env, eng = sim.env, sim.engine

    def arrivals():
        for (t, p, o), a in zip(requests, adapters):
            if t > env.now:
                yield env.timeout(t - env.now)
            eng.submit(Submission(p, o, lora=a))

    env.process(arrivals())
    return sim


def test_a_request_for_another_adapter_waits_while_those_behind_it_run(engine):
    """max_loras 1: A (adapter 0) runs; B (adapter 1) is passed over, and C (adapter 0, behind B)
    and D (base model) are admitted in the same step; B runs once A's adapter has no request left."""
    reqs = [(0.0, 2, 3), (0.5, 2, 3), (0.5, 2, 3), (0.5, 2, 3)]
    sim = lora_sim(reqs, [0, 1, 0, -1], engine, max_num_batched_tokens=16).run()
    fs = sim.reqs.first_scheduled[:4].tolist()
    assert fs[0] == 0.0 and fs[2] == fs[3] == 1.0  # C and D go ahead of B
    assert fs[1] == 4.0  # A finishes at 3, C at 4: B's adapter gets the slot then
    assert sim.steps[1].new == (2, 3)


def test_a_request_passed_over_keeps_its_place_in_the_queue(engine):
    """Two requests for adapter 1 behind a running adapter-0 request stay first, in their order:
    when adapter 0 is free they are admitted before a later adapter-0 request."""
    reqs = [(0.0, 2, 2), (0.5, 2, 2), (0.5, 2, 2), (1.5, 2, 2)]
    sim = lora_sim(reqs, [0, 1, 1, 0], engine, max_num_batched_tokens=16).run()
    fs = sim.reqs.first_scheduled[:4].tolist()
    assert fs[1] == fs[2] == 2.0 and fs[3] == 4.0


def test_adapters_are_loaded_into_slots_and_from_storage_least_recently_used_first():
    """Two GPU slots and three host places: 0, 1 load into both; 2 (with 0 no longer running)
    takes 0's slot; 0 again takes 1's, and is still in host memory (no read from storage)."""
    gpu = np.full((2, 2), -1, np.int64)
    cpu = np.full((2, 3), -1, np.int64)
    running = np.zeros(3, np.int64)
    loads = []
    for step, a in enumerate([0, 1, 2, 0]):
        disk = rules.lora_cache_use(cpu, a, step, running)
        slot = rules.lora_cache_use(gpu, a, step, running)
        loads.append((disk, slot))
    assert loads == [(1, 1), (1, 1), (1, 1), (0, 1)]
    assert sorted(gpu[0].tolist()) == [0, 2]
    running[2] = 1  # adapter 2 in use: a new adapter takes the other slot
    assert rules.lora_cache_use(gpu, 1, 9, running) == 1 and sorted(gpu[0].tolist()) == [1, 2]


def test_an_adapter_load_holds_up_the_step_that_needs_it():
    """The step that admits the first request for an adapter waits for it (read from storage and put
    into a slot: 0.08 + 0.009 s); the summary counts the loads."""
    base = [
        "run.duration_s=5",
        "run.warmup_s=0",
        "workload.arrival={type: closed_loop, concurrency: 1}",
        "engine.enable_lora=true",
    ]
    with_lora = summarize(simulate(load_scenario(None, [*base, "workload.lora={adapters: 1}"])[0]))
    without = summarize(simulate(load_scenario(None, base)[0]))
    assert with_lora["lora"] == {"adapter_loads": 1, "adapter_loads_from_storage": 1}
    assert without["lora"] == {"adapter_loads": 0, "adapter_loads_from_storage": 0}
    assert with_lora["mean_ttft_ms"] > without["mean_ttft_ms"]


def test_the_slots_take_their_size_from_the_kv_pool():
    """Each GPU slot of rank 16 for Llama-3.1-8B is about 94 MiB in vLLM's own start-up logs (the KV
    pool shrinks by 753 tokens of 128 KiB a slot, data/lora/public.yaml,
    agullo-v1-kv-capacity-vs-max-loras-llama31-8b); servesim's slot is within 10% of it, and the pool
    shrinks by exactly the slots' bytes."""
    m = load_model("llama-3.1-8b")
    assert slot_bytes(m, 16) / 2**20 == pytest.approx(94.1, rel=0.10)
    assert slot_bytes(m, 32) / slot_bytes(m, 16) == pytest.approx(2.0)
    sc0, _ = load_scenario(None, ["engine.enable_lora=true", "engine.max_loras=1"])
    sc1, _ = load_scenario(None, ["engine.enable_lora=true", "engine.max_loras=33"])
    gpu = load_gpu("h100-sxm")
    p0, p1 = (memory_plan(sc, load_arch(sc), gpu, 2048, 8192) for sc in (sc0, sc1))
    assert p1.weight_bytes - p0.weight_bytes == pytest.approx(32 * slot_bytes(m, 16))
    assert (p0.kv_bytes - p1.kv_bytes) / GIB == pytest.approx(32 * slot_bytes(m, 16) / GIB, abs=0.01)


def test_adapter_draws_follow_the_distribution_and_the_seed():
    """Zipf draws favour the first adapters; the same seed draws the same adapters; runs without
    adapters draw exactly as before (their requests ask for none)."""
    over = [
        "run.duration_s=30",
        "run.warmup_s=0",
        "workload.arrival.concurrency=16",
        "engine.enable_lora=true",
        "engine.max_loras=8",
        "workload.lora={adapters: 8, dist: zipf, zipf_s: 1.5, fraction: 0.5}",
    ]
    r1 = simulate(load_scenario(None, over)[0])
    r2 = simulate(load_scenario(None, over)[0])
    a = r1.reqs.lora[: r1.reqs.n]
    assert (a == r2.reqs.lora[: r2.reqs.n]).all()
    assert 0.4 < (a < 0).mean() < 0.6
    counts = np.bincount(a[a >= 0], minlength=8)
    assert counts[0] > counts[1] > counts[7]
    plain = simulate(load_scenario(None, ["run.duration_s=30", "run.warmup_s=0", "workload.arrival.concurrency=16"])[0])
    assert (plain.reqs.lora[: plain.reqs.n] == -1).all()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["workload.lora={adapters: 4}"], "set engine.enable_lora: true"),
        (["engine.enable_lora=true", "engine.max_loras=4", "engine.max_cpu_loras=2"], "max_cpu_loras must be >= "),
        (["engine.max_lora_rank=12"], "engine.max_lora_rank must be one of"),
        (["engine.enable_lora=true", "engine.preemption_mode=swap"], "preemption_mode: swap is vLLM V0's"),
        (["engine.enable_lora=true", "workload.lora={adapters: 0}"], "workload.lora.adapters must be >= 1"),
    ],
)
def test_bad_lora_settings_name_the_field_and_rule(override, message):
    with pytest.raises(ConfigError, match=message):
        load_scenario(None, override)
