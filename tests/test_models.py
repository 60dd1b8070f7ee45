"""Model presets and the roofline: parameter counts, KV sizes and step costs checked by hand."""

from __future__ import annotations

import pytest

from simulator.config import load_scenario
from simulator.cost import CostModel, Efficiency, decode_work
from simulator.hardware import builtin_gpus, load_gpu
from simulator.models import builtin_models, load_model
from simulator.run import build


@pytest.mark.parametrize("name", builtin_models())
def test_parameter_count_within_one_percent_of_published(name):
    """Every preset's derived parameter count is within 1% of the published one."""
    m = load_model(name)
    assert m.published_params > 0, f"{name}: no _published_params"
    assert abs(m.total_params / m.published_params - 1) < 0.01


def test_kv_heads_are_replicated_once_tp_exceeds_them():
    """vLLM keeps max(1, kv_heads // tp) KV heads per GPU: qwen3-30b-a3b (4 KV heads) at TP8 keeps one
    head per GPU, as at TP4, not half a head; MLA keeps its whole latent on every GPU."""
    m = load_model("qwen3-30b-a3b")
    assert m.num_kv_heads == 4
    per_head = 2 * m.num_layers * m.head_dim * 2
    assert [m.kv_bytes_per_token(tp=t) for t in (1, 2, 4, 8)] == [4 * per_head, 2 * per_head, per_head, per_head]
    ds = load_model("deepseek-v3")
    assert ds.kv_bytes_per_token(tp=8) == ds.kv_bytes_per_token() == 61 * (512 + 64) * 2


def test_kv_bytes_per_token_by_hand():
    """2 x layers x kv_heads x head_dim x 2 bytes (GQA); MLA caches the latent plus the rope key."""
    assert load_model("llama-3.1-8b").kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2
    assert load_model("qwen3-32b").kv_bytes_per_token() == 2 * 64 * 8 * 128 * 2  # 256 KiB, as the article says
    assert load_model("deepseek-v3").kv_bytes_per_token() == 61 * (512 + 64) * 2


def test_moe_active_parameters_are_a_fraction():
    """Qwen3-30B-A3B activates about 3.3B of its 30.5B parameters per token."""
    m = load_model("qwen3-30b-a3b")
    assert abs(m.active_params / 3.3e9 - 1) < 0.02


def test_decode_step_at_batch_one_is_the_weight_read():
    """With unit efficiencies and no overheads, a batch-1 decode step costs (weights + KV) / bandwidth."""
    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    eff = Efficiency(matmul_compute=1, matmul_memory=1, attn_compute=1, attn_memory=1, step_overhead_s=0,
                     per_seq_overhead_s=0, per_layer_overhead_s=0)
    cm = CostModel(m, g, 1, eff)
    ops = {o.name: o for o in cm.ops(decode_work(1, 0))}
    lin_weights = (m.total_params - m.embedding_params - m.lm_head_params - (m.num_layers * 2 + 1) * m.hidden_size) * 2
    assert abs(ops["linear"].bytes - lin_weights) / lin_weights < 0.01
    assert ops["linear"].bound == "memory" and ops["lm_head"].bound == "memory"
    # A long prefill is compute-bound: 2 x params x tokens FLOPs.
    big = {o.name: o for o in cm.ops(decode_work(1, 0, 8192))}
    assert big["linear"].bound == "compute"


def test_tensor_parallel_splits_weights_and_adds_allreduce():
    """TP=2 halves the per-GPU weight bytes and adds the all-reduce over the link."""
    m, g = load_model("llama-3.1-70b"), load_gpu("h100-sxm")
    one, two = CostModel(m, g, 1), CostModel(m, g, 2)
    w = decode_work(64, 512)
    b1 = {o.name: o for o in one.ops(w)}
    b2 = {o.name: o for o in two.ops(w)}
    assert abs(b2["linear"].bytes * 2 - b1["linear"].bytes) / b1["linear"].bytes < 0.05
    assert "allreduce" in b2 and "allreduce" not in b1


def test_quantization_changes_weights_peak_and_capacity():
    """fp8 weights halve the weight bytes (more KV blocks) and use the fp8 tensor-core rate."""
    sc16, _ = load_scenario(None, [])
    sc8, _ = load_scenario(None, ["engine.quantization=fp8"])
    _, e16, p16 = build(sc16)
    _, e8, p8 = build(sc8)
    assert p8["memory"].weight_bytes == pytest.approx(p16["memory"].weight_bytes / 2)
    assert p8["memory"].num_gpu_blocks > p16["memory"].num_gpu_blocks
    assert p8["memory"].kv_bytes_per_token == p16["memory"].kv_bytes_per_token  # KV stays 16-bit
    assert e8.cost.step_time(decode_work(512, 0, 16)) < e16.cost.step_time(decode_work(512, 0, 16))


def test_catalogue_has_every_gpu_with_sources():
    """The issue's eight GPUs are built in."""
    for k in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "mi300x"):
        assert k in builtin_gpus()
        assert load_gpu(k).hbm_bandwidth > 0
