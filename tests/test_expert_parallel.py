"""Expert parallelism (``hardware.expert_parallel_size``): an MoE model's experts dealt whole to groups
of the tensor-parallel GPUs, priced on the roofline (``cost.moe_work``): the step waits for the busiest
group. Hand-computed cases, the limits it must reach, and the settings refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.engine import cost
from simulator.engine.cost import Execution
from simulator.engine.params import N_COST, P
from simulator.errors import ConfigError
from simulator.resolve import cost_model, engine_defaults, load_arch
from simulator.scenario.config import scenario_from_dict
from simulator.scenario.hardware import load_gpu


def _cp(ranks: int, experts: int = 8, k: int = 2) -> np.ndarray:
    cp = np.zeros(N_COST)
    cp[P.MOE_LAYERS], cp[P.EXPERTS_PER_TOKEN], cp[P.NUM_EXPERTS] = 1.0, k, experts
    cp[P.EXPERT_PARAMS] = 1000.0 * ranks  # one expert's weights on a GPU: split over the group's GPUs alone
    cp[P.EXPERT_WEIGHT_BYTES], cp[P.EXPERT_RANKS] = 1.0, ranks
    cp[P.EXPERT_RANKS_MAX_Z] = cost.expected_largest_normal(ranks)
    return cp


def test_the_expected_largest_of_n_normals():
    assert cost.expected_largest_normal(1) == 0.0
    assert [round(cost.expected_largest_normal(n), 3) for n in (2, 4, 8)] == [0.564, 1.029, 1.424]
    assert cost.expected_largest_normal(2) == pytest.approx(1.0 / math.sqrt(math.pi), abs=1e-4)


def test_one_token_over_two_groups_by_hand():
    """8 experts, 2 a token, 2 groups of 4: one token touches an expert with probability 1/4, a group 1
    expert on average, 1 + 0.564 x sqrt(4 x 1/4 x 3/4) = 1.489 on the busier one, whose experts are
    twice as large on each GPU (split over half the GPUs): 2,977 bytes against 2,000 split by TP. Its 2
    token-expert pairs: 1 + 0.564 x sqrt(2 x 1/2 x 1/2) = 1.399 on the busier group."""
    z = cost.expected_largest_normal(2)
    flops, nbytes = cost.moe_work(_cp(2), 1)
    touched = 1.0 + z * math.sqrt(0.75)
    assert nbytes == pytest.approx(touched * 2000.0)
    assert flops == pytest.approx(2.0 * (1.0 + z * math.sqrt(0.5)) * 2000.0)
    tp_flops, tp_bytes = cost.moe_work(_cp(1), 1)
    assert (tp_flops, tp_bytes) == (2.0 * 2 * 1000.0, 2 * 1000.0)


def test_a_large_step_reads_every_expert_either_way_and_computes_about_the_same():
    """Thousands of tokens touch every expert: each GPU reads its share of all of them, dealt whole or
    split; the busiest group's token-expert pairs exceed the mean by a few standard deviations of a
    count in the thousands (under 5% here)."""
    flops, nbytes = cost.moe_work(_cp(8, experts=64, k=4), 4096)
    tp_flops, tp_bytes = cost.moe_work(_cp(1, experts=64, k=4), 4096)
    assert nbytes == pytest.approx(tp_bytes)
    assert 1.0 < flops / tp_flops < 1.05


def _cost(model: str, tp: int, ep: int, **engine):
    """``model``'s step cost on ``tp`` H200s, experts dealt to ``ep`` groups (the GPU's time alone)."""
    sc = scenario_from_dict(
        {
            "model": model,
            "hardware": {"gpu": "h200", "tensor_parallel_size": tp, "expert_parallel_size": ep},
            "engine": engine,
        }
    )
    arch, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    return cost_model(sc, arch, gpu, *engine_defaults(gpu, sc)).with_execution(Execution())


def _deepseek_step(ep: int, batch: int) -> float:
    return _cost("deepseek-r1", 8, ep, framework="sglang").step_time(cost.decode_work(batch, 1000))


def test_deepseek_r1_dealt_to_eight_gpus_is_slower_at_a_few_requests_and_alike_at_many():
    """At 4 requests in flight the 32 token-expert pairs touch about 30 of 256 experts: split by TP
    every GPU reads an eighth of each, dealt whole the busiest GPU reads its own, about twice the
    mean. At 512 every expert is touched and the two read alike."""
    small = _deepseek_step(8, 4) / _deepseek_step(1, 4)
    large = _deepseek_step(8, 512) / _deepseek_step(1, 512)
    assert small > 1.05 and abs(large - 1.0) < 0.01


@pytest.mark.parametrize(
    ("hardware", "engine", "message"),
    [
        (
            {"tensor_parallel_size": 4, "expert_parallel_size": 3},
            {"framework": "sglang"},
            "hardware.expert_parallel_size must divide hardware.tensor_parallel_size (4): the experts are dealt to groups of its GPUs (got 3)",
        ),
        (
            {"tensor_parallel_size": 4, "expert_parallel_size": 2},
            {},
            "hardware.expert_parallel_size: vLLM's --enable-expert-parallel deals the experts to every GPU, so 1 or hardware.tensor_parallel_size (4) (got 2; SGLang's --ep-size takes any divisor)",
        ),
    ],
)
def test_expert_parallel_settings_refused(hardware, engine, message):
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"model": "qwen3-30b-a3b", "hardware": {"gpu": "h200", **hardware}, "engine": engine})
    assert str(e.value) == message


def test_a_dense_model_has_no_experts_to_deal():
    with pytest.raises(ConfigError) as e:
        _cost("qwen3-32b", 2, 2, framework="sglang")
    assert str(e.value) == "hardware.expert_parallel_size: qwen3-32b has no experts to deal (got 2); leave it 1"
