"""Model presets and the roofline: parameter counts, KV sizes and step costs checked by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from simulator.engine.cost import CostModel, Efficiency, decode_work
from simulator.engine.params import P
from simulator.errors import ConfigError
from simulator.run import build
from simulator.scenario.config import load_scenario
from simulator.scenario.hardware import builtin_gpus, load_gpu
from simulator.scenario.models import builtin_models, load_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", builtin_models())
def test_parameter_count_within_one_percent_of_published(name):
    """Every preset's derived parameter count is within 1% of the published one."""
    m = load_model(name)
    assert m.published_params > 0, f"{name}: no _published_params"
    assert abs(m.total_params / m.published_params - 1) < 0.01


# "Model loading took X GiB" (per GPU) in vLLM 0.19.0 start-up logs on an H100 80GB: the llm-d-planner accuracy
# sweep (https://github.com/llm-d-incubation/llm-d-planner/pull/205), unquantized runs of built-in models, as
# collected in the KV-sizing research lines (each row's log is cited). Pipeline-parallel runs are left out.
LOGS = (
    "https://github.com/jgchn/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b"
    "/accuracy/results/v0.19.0/logs/"
)
VLLM_MODEL_LOADING_LINES = [  # (model, tensor_parallel_size, dtype, GiB printed, log)
    ("codellama-7b", 1, "bfloat16", 12.56, LOGS + "codellama-codellama-7b-h--h100-80gb--tp1pp1dp1--8192.log"),
    ("deepseek-v2-lite", 1, "bfloat16", 29.43, LOGS + "deepseek-ai-deepseek-v2---h100-80gb--tp1pp1dp1--8192.log"),
    ("granite-3.1-8b", 1, "bfloat16", 15.25, LOGS + "granite-3-1-8b--h100-80gb--tp1pp1dp1--8192.log"),
    ("llama-3.1-8b", 1, "bfloat16", 14.99, LOGS + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log"),
    ("llama-3.1-8b", 1, "float16", 14.99, LOGS + "meta-llama-llama-3--h100-80gb--tp1pp1dp1--8192-dtf16.log"),
    ("llama-3.1-8b", 1, "float32", 29.98, LOGS + "meta-llama-llama-3--h100-80gb--tp1pp1dp1--8192-dtf32.log"),
    ("llama-3.1-8b", 2, "bfloat16", 7.51, LOGS + "meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192.log"),
    ("llama-3.1-8b", 4, "bfloat16", 3.77, LOGS + "meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192.log"),
    ("phi-4", 1, "bfloat16", 27.39, LOGS + "microsoft-phi-4--h100-80gb--tp1pp1dp1--8192.log"),
    ("mistral-small-3.1-24b", 1, "bfloat16", 44.76, LOGS + "mistralai-mistral-small---h100-80gb--tp1pp1dp1--8192.log"),
    ("mixtral-8x7b", 2, "bfloat16", 43.51, LOGS + "mistralai-mixtral-8x7b-i--h100-80gb--tp2pp1dp1--8192.log"),
    ("qwen1.5-moe-a2.7b", 1, "bfloat16", 26.67, LOGS + "qwen-qwen1-5-moe-a2-7b--h100-80gb--tp1pp1dp1--8192.log"),
    ("qwen2.5-7b", 1, "bfloat16", 14.25, LOGS + "qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192.log"),
    ("qwen2.5-7b", 2, "bfloat16", 7.12, LOGS + "qwen-qwen2-5-7b-instruct--h100-80gb--tp2pp1dp1--8192.log"),
    ("qwen2.5-7b", 4, "bfloat16", 3.55, LOGS + "qwen-qwen2-5-7b-instruct--h100-80gb--tp4pp1dp1--8192.log"),
    ("qwen2.5-72b", 2, "bfloat16", 67.8, LOGS + "qwen-qwen2-5-72b-instruc--h100-80gb--tp2pp1dp1--8192.log"),
    ("qwen3-30b-a3b", 1, "bfloat16", 56.88, LOGS + "qwen-qwen3-30b-a3b--h100-80gb--tp1pp1dp1--8192.log"),
    ("qwen3-8b", 1, "bfloat16", 15.27, LOGS + "qwen-qwen3-8b--h100-80gb--tp1pp1dp1--8192.log"),
]
# The same sweep's tensor-parallel runs whose logs were not kept: weight_memory_gib of the run records.
RUNS = (
    "https://github.com/llm-d-incubation/llm-d-planner/blob/cb666596283a96db2b66e72c79f773add871020f"
    "/accuracy/results/v0.19.0/runs/"
)
# The CUDA caching allocator hands a weight tensor of 10 MiB or more a block rounded up to 2 MiB and keeps the
# remainder in it when that is 1 MiB or less; weight_bytes_per_gpu does not model that slack, which these
# runs' shapes make largest (1 MiB per layer on granite-3.1-8b at TP4, 3 MiB per layer on phi-4 at TP2).
ALLOCATOR_SLACK = pytest.mark.xfail(strict=True, reason="CUDA caching-allocator rounding of the weight tensors")
VLLM_MODEL_LOADING_RUNS = [
    ("deepseek-v2-lite", 2, "bfloat16", 14.83, RUNS + "deepseek-ai-deepseek-v2---h100-80gb--tp2pp1dp1--8192.json"),
    ("deepseek-v2-lite", 4, "bfloat16", 7.51, RUNS + "deepseek-ai-deepseek-v2---h100-80gb--tp4pp1dp1--8192.json"),
    pytest.param(
        "granite-3.1-8b",
        4,
        "bfloat16",
        3.87,
        RUNS + "ibm-granite-granite-3-1---h100-80gb--tp4pp1dp1--8192.json",
        marks=ALLOCATOR_SLACK,
    ),
    pytest.param(
        "phi-4", 2, "bfloat16", 13.77, RUNS + "microsoft-phi-4--h100-80gb--tp2pp1dp1--8192.json", marks=ALLOCATOR_SLACK
    ),
    ("mistral-small-3.1-24b", 2, "bfloat16", 22.8, RUNS + "mistralai-mistral-small---h100-80gb--tp2pp1dp1--8192.json"),
    ("mistral-small-3.1-24b", 4, "bfloat16", 11.86, RUNS + "mistralai-mistral-small---h100-80gb--tp4pp1dp1--8192.json"),
    ("mixtral-8x7b", 4, "bfloat16", 21.76, RUNS + "mistralai-mixtral-8x7b-i--h100-80gb--tp4pp1dp1--8192.json"),
    ("qwen2.5-72b", 4, "bfloat16", 33.98, RUNS + "qwen-qwen2-5-72b-instruc--h100-80gb--tp4pp1dp1--8192.json"),
    ("qwen3-30b-a3b", 4, "bfloat16", 14.25, RUNS + "qwen-qwen3-30b-a3b--h100-80gb--tp4pp1dp1--8192.json"),
    ("qwen3-8b", 4, "bfloat16", 3.82, RUNS + "qwen-qwen3-8b--h100-80gb--tp4pp1dp1--8192.json"),
]


def _weight_case_id(case) -> str:
    values = case.values if hasattr(case, "values") else case
    return f"{values[0]}-tp{values[1]}-{values[2]}"


@pytest.mark.parametrize(
    ("name", "tp", "dtype", "printed_gib", "source"),
    VLLM_MODEL_LOADING_LINES + VLLM_MODEL_LOADING_RUNS,
    ids=[_weight_case_id(c) for c in VLLM_MODEL_LOADING_LINES + VLLM_MODEL_LOADING_RUNS],
)
def test_weight_memory_per_gpu_matches_vllm_model_loading(name, tp, dtype, printed_gib, source):
    """The weights one GPU holds are within 0.5% of what vLLM 0.19.0 printed as "Model loading took X GiB"
    (padded vocabulary, q/k/v biases, replicated norms, routers, MLA down-projections and vision encoder,
    the rotary cache, and MLA's backend workspace included)."""
    m = replace(load_model(name), dtype=dtype)
    computed = m.weight_bytes_per_gpu(tp) / 2**30
    assert abs(computed / printed_gib - 1) < 0.005, f"{computed:.3f} GiB vs {printed_gib} GiB printed in {source}"


def test_parameters_vllm_allocates_by_hand():
    """Vocabulary padding, biases, shared-expert gates and the Pixtral encoder, counted by hand."""
    assert load_model("codellama-7b").padded_vocab_size == 32064  # 32016 padded to a multiple of 64
    granite = load_model("granite-3.1-8b")
    assert (granite.padded_vocab_size, granite.lm_head_params) == (49216, 0)  # tied LM head
    assert load_model("qwen2.5-7b").attn_bias_params_per_layer == (28 + 2 * 4) * 128
    qmoe = load_model("qwen1.5-moe-a2.7b")  # shared expert of 5632 = 4 experts of 1408, gated
    assert (qmoe.num_shared_experts, qmoe.router_params_per_moe_layer) == (4, 2048 * (60 + 1))
    vision = 3 * 14 * 14 * 1024 + 1024 + 24 * (4 * 1024**2 + 3 * 1024 * 4096 + 2 * 1024)
    vision += 1024 + 4 * 1024**2 + 1024 * 5120 + 5120**2  # projector: norm, patch merger, two-layer adapter
    mistral = load_model("mistral-small-3.1-24b")
    assert mistral.vision_params == vision == 438_958_080
    assert mistral.active_params == mistral.total_params - vision
    assert load_model("glm-4.5-air").rope_cache_bytes == 131072 * 64 * 2  # RoPE on half of each 128-dim head


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
    eff = Efficiency(
        matmul_compute=1,
        matmul_memory=1,
        attn_compute=1,
        attn_memory=1,
        step_overhead_s=0,
        per_seq_overhead_s=0,
        per_layer_overhead_s=0,
    )
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
    """fp8 weights halve the linear layers' bytes, not the embeddings' and LM head's (more KV
    blocks), and use the fp8 tensor-core rate."""
    sc16, _ = load_scenario(None, [])
    sc8, _ = load_scenario(None, ["engine.quantization=fp8"])
    _, e16, p16 = build(sc16)
    _, e8, p8 = build(sc8)
    m = p16["model"]
    linear = (m.total_params - m.embedding_params - m.lm_head_params) * 2
    assert p8["memory"].weight_bytes == pytest.approx(p16["memory"].weight_bytes - linear / 2)
    assert p8["memory"].num_gpu_blocks > p16["memory"].num_gpu_blocks
    assert p8["memory"].kv_bytes_per_token == p16["memory"].kv_bytes_per_token  # KV stays 16-bit
    assert e8.cost.step_time(decode_work(512, 0, 16)) < e16.cost.step_time(decode_work(512, 0, 16))


def test_catalogue_has_every_gpu_with_sources():
    """The issue's eight GPUs are built in."""
    for k in ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "mi300x"):
        assert k in builtin_gpus()
        assert load_gpu(k).hbm_bandwidth > 0


def test_a_checkpoints_quantization_config_sizes_its_weights(tmp_path):
    """An FP8 checkpoint (its config.json's quantization_config, as vLLM detects it) loads FP8
    weights without engine.quantization; AWQ reads as int4, compressed-tensors by its weight bits;
    an explicit engine.quantization wins; an unknown method is a one-line error; the folder holding
    the config.json names the model."""
    import json

    from simulator.scenario.models import checkpoint_quantization

    cfg = json.loads((ROOT / "simulator" / "data" / "models" / "qwen3-32b.json").read_text())
    folder = tmp_path / "Qwen3-32B-FP8"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                **cfg,
                "quantization_config": {
                    "quant_method": "fp8",
                    "activation_scheme": "dynamic",
                    "weight_block_size": [128, 128],
                },
            }
        )
    )
    assert load_model(str(folder)).quantization == "fp8" and load_model(str(folder)).name == "Qwen3-32B-FP8"
    bf16, _ = load_scenario(None, ["model=qwen3-32b"])
    fp8, _ = load_scenario(None, [f"model={folder}"])
    forced, _ = load_scenario(None, [f"model={folder}", "engine.quantization=none"])
    w16, w8, wf = (build(s)[2]["memory"].weight_bytes for s in (bf16, fp8, forced))
    assert w8 < 0.55 * w16 and wf == w16
    assert checkpoint_quantization({"quantization_config": {"quant_method": "awq", "bits": 4}}, "m") == "int4"
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}
    assert checkpoint_quantization({"quantization_config": ct}, "m") == "fp8"
    with pytest.raises(ConfigError, match=r"quant_method 'mystery' is not one servesim sizes"):
        checkpoint_quantization({"quantization_config": {"quant_method": "mystery"}}, "m")


def test_tensor_parallel_beyond_the_nvlink_group_all_reduces_over_pcie():
    """PCIe H100s are NVLink-bridged in pairs: TP 2 all-reduces at the bridge's rate, TP 4 over PCIe
    with NCCL's latency; an L40S (no NVLink) all-reduces over PCIe from TP 2; an SXM board's eight GPUs
    are all NVLink-joined; a custom GPU without link_group gets 8 when its interconnect beats its
    host link and 1 otherwise."""
    from simulator.engine.cost import PCIE_ALLREDUCE_LATENCY_S
    from simulator.scenario.hardware import gpu_from_dict

    m = load_model("llama-3.1-70b")
    pcie, sxm, l40s = load_gpu("h100-pcie"), load_gpu("h100-sxm"), load_gpu("l40s")
    eff = Efficiency()
    assert (pcie.link_group, sxm.link_group, l40s.link_group) == (2, 8, 1)
    tp2, tp4 = CostModel(m, pcie, 2).params, CostModel(m, pcie, 4).params
    assert tp2[P.INTERCONNECT_BW] == pytest.approx(pcie.interconnect_bandwidth * eff.allreduce_bandwidth)
    assert tp4[P.INTERCONNECT_BW] == pytest.approx(pcie.host_link_bandwidth * eff.allreduce_bandwidth)
    assert (
        tp4[P.ALLREDUCE_LATENCY_S] == PCIE_ALLREDUCE_LATENCY_S and tp2[P.ALLREDUCE_LATENCY_S] == eff.allreduce_latency_s
    )
    assert CostModel(m, sxm, 4).params[P.INTERCONNECT_BW] == pytest.approx(
        sxm.interconnect_bandwidth * eff.allreduce_bandwidth
    )
    w = decode_work(64, 1024)
    assert CostModel(m, pcie, 4).step_time(w) > CostModel(m, sxm, 4).step_time(w)
    assert CostModel(m, l40s, 2).params[P.INTERCONNECT_BW] == pytest.approx(
        l40s.host_link_bandwidth * eff.allreduce_bandwidth
    )
    base = {"hbm_bytes": 8e10, "hbm_bandwidth": 3e12, "peak_flops": {"bf16": 1e15}, "host_link_bandwidth": 6.4e10}
    assert gpu_from_dict("x", {**base, "interconnect_bandwidth": 4.5e11}).link_group == 8
    assert gpu_from_dict("y", {**base, "interconnect_bandwidth": 3.2e10}).link_group == 1


def test_a_scenario_sets_the_all_reduce_latency_its_growth_and_bandwidth():
    """cost.allreduce_latency_us / _hop_us / _bandwidth replace the calibration's: at TP8 a decode
    step of gpt-oss-120b (36 layers, two all-reduces each) loses 72 x 6 hops x 2.75 us without the
    growth per GPU, and 72 x 5 us more with the latency at 15 us; the bandwidth halved doubles the
    bytes' time."""

    def ar(*over):
        sc, _ = load_scenario(
            None, ["model=gpt-oss-120b", "hardware.gpu=h200", "hardware.tensor_parallel_size=8", *over]
        )
        _, e, _ = build(sc)
        return {o.name: o for o in e.cost.ops(decode_work(8, 1024))}["allreduce"].seconds

    base = ar()
    assert base - ar("cost.allreduce_hop_us=0") == pytest.approx(72 * 6 * 2.75e-6)
    assert ar("cost.allreduce_latency_us=15") - base == pytest.approx(72 * 5e-6)
    fixed = 72 * (10e-6 + 6 * 2.75e-6)
    assert ar("cost.allreduce_bandwidth=0.335") - fixed == pytest.approx(2 * (base - fixed))
    with pytest.raises(ConfigError, match=r"cost\.allreduce_bandwidth"):
        load_scenario(None, ["cost.allreduce_bandwidth=0"])
