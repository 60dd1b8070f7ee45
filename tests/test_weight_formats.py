"""Checkpoint weight formats (FP8, MXFP4, NVFP4, and which layers each covers) and hybrid
sliding-window models (gpt-oss), sized and priced by hand."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.engine.cost import (
    HOPPER_FP8_GEMM_SHARE,
    MXFP4_WEIGHT_ONLY_MOE_COMPUTE,
    CostModel,
    Efficiency,
    Execution,
    attention_work,
    decode_work,
)
from simulator.engine.params import PARAMS, P
from simulator.errors import ConfigError
from simulator.metrics import summarize
from simulator.run import build, simulate
from simulator.scenario.config import load_scenario
from simulator.scenario.hardware import load_gpu
from simulator.scenario.memory import plan_memory, weight_bytes
from simulator.scenario.models import (
    WEIGHT_BITS,
    checkpoint_quant_scope,
    checkpoint_quantization,
    from_hf_config,
    load_model,
)

GIB = 2.0**30


def test_bits_per_weight_with_their_scales():
    """MXFP4: 4 bits + an 8-bit scale per 32 values; NVFP4: 4 bits + an 8-bit (FP8) scale per 16."""
    assert WEIGHT_BITS["mxfp4"] == 4 + 8 / 32 == 4.25
    assert WEIGHT_BITS["nvfp4"] == 4 + 8 / 16 == 4.5
    assert WEIGHT_BITS["fp8"] == 8.0 and WEIGHT_BITS["int4"] == 4.0


def test_gpt_oss_120b_weights_by_hand():
    """gpt-oss-120b: 36 layers of 128 experts (3 x 2880 x 2880 weights each) in MXFP4, everything
    else bf16; 116.83B parameters and about 60.8 GiB as its checkpoint."""
    m = load_model("gpt-oss-120b")
    h, layers, experts = 2880, 36, 128
    attn = h * 4096 + 2 * h * 512 + 4096 * h  # q, k, v, o
    attn_extra = (64 + 2 * 8) * 64 + h + 64  # q/k/v biases, o bias, sinks
    norms = 2 * h
    expert = 3 * h * h
    expert_bias = 2 * h + h
    router = h * experts
    per_layer = attn + attn_extra + norms + experts * (expert + expert_bias) + router
    vocab = 201088  # a multiple of 64 already
    total = layers * per_layer + h + 2 * vocab * h
    assert total == m.total_params == 116_829_152_064
    # 4 of 128 experts a token: 5.13B active, the embedding table left out as the model card counts.
    assert (m.active_params - m.embedding_params) / 1e9 == pytest.approx(5.13, abs=0.005)
    quantized = layers * experts * expert
    rope = 4096 * 32 * 64 * 2  # YaRN: original 4096 positions x factor 32, 64 rotary dims, bf16
    expected = quantized * 4.25 / 8 + (total - quantized) * 2 + rope
    assert expected == 65_265_583_744
    assert weight_bytes(m, "mxfp4") == expected
    assert expected / GIB == pytest.approx(60.8, rel=0.005)
    # Without its format, the same model would be about 4x larger.
    assert weight_bytes(m, "none") / GIB > 200


def test_gpt_oss_20b_weights_by_hand():
    """gpt-oss-20b: 24 layers of 32 experts; 20.91B parameters, about 12.8 GiB as its checkpoint."""
    m = load_model("gpt-oss-20b")
    quantized = 24 * 32 * 3 * 2880 * 2880
    assert m.total_params == 20_914_756_416
    assert weight_bytes(m, "mxfp4") == quantized * 4.25 / 8 + (m.total_params - quantized) * 2 + 4096 * 32 * 64 * 2
    assert weight_bytes(m, "mxfp4") / GIB == pytest.approx(12.8, rel=0.01)


@pytest.mark.parametrize(
    "gpu, tp, hidden, inter, scale_rows",
    [
        # Hopper, OpenAI's Triton kernel: intermediate to 64 per GPU; its swizzled scales padded to 4
        # groups along the reduction (90 -> 92; 46 -> 48 at TP2's 1,472) and to 256 rows
        ("h200", 1, 2880, 2880, (5888, 92, 3072, 92)),
        ("h200", 2, 2880, 1472, (3072, 92, 3072, 48)),
        # Blackwell, FlashInfer's TRT-LLM kernel: both to 256; A100, Marlin: hidden 256, inter 128
        ("b200", 1, 3072, 3072, None),
        ("a100-80gb", 1, 3072, 2944, None),
        ("mi355x", 1, 3072, 3072, None),
    ],
)
def test_mxfp4_experts_as_each_gpus_kernel_stores_them_by_hand(gpu, tp, hidden, inter, scale_rows):
    """gpt-oss-120b's experts as vLLM 0.26 allocates them for the MXFP4 kernel it picks on each GPU
    (fused_moe/oracle/mxfp4.py): padded sizes, 4-bit values, one byte of scale per 32 values, and
    biases (bf16, float32 for the Triton kernel); the rest of the model as its checkpoint."""
    m, g = load_model("gpt-oss-120b"), load_gpu(gpu)
    per_layer = 36 * 128
    values = (2 * inter * hidden + hidden * inter) // 2
    if scale_rows is None:
        scales = 2 * inter * (hidden // 32) + hidden * (inter // 32)
    else:
        r13, k13, r2, k2 = scale_rows
        scales = r13 * k13 + r2 * k2
    bias = (2 * inter + hidden) * (4 if gpu == "h200" else 2)  # the Triton kernel's in float32
    experts = per_layer * (values + scales + bias)
    plain = per_layer * (3 * 2880 * 2880 * 4.25 / 8 + 3 * 2880 * 2) / tp
    assert weight_bytes(m, "mxfp4", tp, g) == pytest.approx(weight_bytes(m, "mxfp4", tp) - plain + experts, rel=1e-12)


def test_the_mxfp4_kernel_vllm_picks_by_gpu():
    """TRT-LLM's kernel on SM100 only (B200, B300), OpenAI's Triton kernels on Hopper, Marlin on an
    A100 or a consumer Blackwell (SM120), AITER on AMD Instinct."""
    from simulator.scenario.memory import mxfp4_kernel

    h200 = load_gpu("h200")
    assert [mxfp4_kernel(load_gpu(g)) for g in ("b200", "b300", "h100-sxm", "a100-80gb", "mi300x")] == [
        "trtllm",
        "trtllm",
        "triton",
        "marlin",
        "aiter",
    ]
    assert mxfp4_kernel(replace(h200, compute_capability="12.0")) == "marlin"


def test_from_026_the_all_reduce_buffers_leave_the_budget_alone_whatever_the_runner():
    """vLLM 0.26 allocates its all-reduce buffers before the memory profile: a V1-runner MoE model at
    TP2 (gpt-oss-120b) leaves 0.07 GiB outside PyTorch there, as the V2 runner does, where vLLM
    0.19's V1 runner left 2.085 GiB; at TP1 nothing changes. Through a scenario: the release line
    carries it."""
    from simulator.scenario import versions
    from simulator.scenario.memory import non_torch_bytes

    assert non_torch_bytes(2, "v1", early_allreduce=True) == non_torch_bytes(2, "v2") == 0.07 * GIB
    assert non_torch_bytes(2, "v1") == 2.085 * GIB
    assert non_torch_bytes(1, "v1", early_allreduce=True) == non_torch_bytes(1, "v1") == 0.25 * GIB
    assert versions.version("0.26").early_allreduce and versions.version("0.32").early_allreduce
    assert not versions.version("0.19").early_allreduce
    m, g = load_model("gpt-oss-120b"), load_gpu("h200")
    kw = dict(tp=2, gpu_memory_utilization=0.92, block_size=16, max_batched_tokens=8192, max_num_seqs=1024)
    early = plan_memory(m, g, quantization="mxfp4", early_allreduce=True, **kw)
    late = plan_memory(m, g, quantization="mxfp4", **kw)
    assert early.non_torch_bytes == 0.07 * GIB and late.non_torch_bytes == 2.085 * GIB
    assert early.kv_bytes > late.kv_bytes


def test_mxfp4_padding_matches_what_the_servers_loaded():
    """The recorded H200 servers' "Model loading took" (vLLM 0.26, gpt-oss on the Triton kernel):
    20b 13.03 GiB, 120b 61.43 (TP1) and 31.43 (TP2). The padded layouts take servesim from 12.83,
    60.78 and 30.41 to within 0.4 GiB of each (0.37 GiB of the 120b's is not accounted for)."""
    g = load_gpu("h200")
    for name, tp, logged in (("gpt-oss-20b", 1, 13.03), ("gpt-oss-120b", 1, 61.43), ("gpt-oss-120b", 2, 31.43)):
        m = load_model(name)
        before, after = weight_bytes(m, "mxfp4", tp) / GIB, weight_bytes(m, "mxfp4", tp, g) / GIB
        assert before < after < logged and logged - after < 0.4, (name, tp, before, after)


def test_nvfp4_fp8_and_scopes_of_the_new_presets():
    """NVFP4 DeepSeek-R1 keeps attention and routers bf16 (ModelOpt's exclude list) and stores dense
    MLPs and experts at 4.5 bits; Llama-3.3-70B NVFP4 stores every linear layer at 4.5 bits; the
    FP8 presets as FP8 checkpoints always were."""
    r1 = load_model("deepseek-r1-fp4")
    assert (r1.quantization, r1.quant_scope) == ("nvfp4", "mlp")
    mlp = 3 * 3 * 7168 * 18432 + 58 * 257 * 3 * 7168 * 2048  # 3 dense layers; 256 routed + 1 shared expert
    assert r1.quantized_params() == mlp
    assert weight_bytes(r1, "nvfp4") == pytest.approx(r1.weight_bytes_per_gpu(1) - mlp * (2 - 4.5 / 8))
    llama = load_model("llama-3.3-70b-fp4")
    assert (llama.quantization, llama.quant_scope) == ("nvfp4", "all")
    linear = llama.total_params - 2 * llama.embedding_params
    assert weight_bytes(llama, "nvfp4") == pytest.approx(llama.weight_bytes_per_gpu(1) - linear * (2 - 0.5625))
    assert load_model("deepseek-r1-mxfp4").quantization == "mxfp4"
    for name in ("deepseek-r1", "llama-3.3-70b-fp8", "qwen3-235b-a22b-fp8"):
        assert (load_model(name).quantization, load_model(name).quant_scope) == ("fp8", "all")
    # DeepSeek-R1 is DeepSeek-V3's architecture: the same sizes.
    v3 = load_model("deepseek-v3")
    assert load_model("deepseek-r1").total_params == v3.total_params
    assert weight_bytes(load_model("deepseek-r1"), "fp8", 8) == weight_bytes(v3, "fp8", 8)


def test_quantization_configs_read_as_vllm_detects_them():
    """mxfp4, ModelOpt NVFP4 (quant_algo, or quant_method modelopt_fp4), Quark with fp4 weights,
    compressed-tensors with 4-bit floats; a bad quant_algo or Quark dtype, and an unknown method, are
    one-line errors naming the field."""

    def q(cfg):
        return checkpoint_quantization({"quantization_config": cfg}, "m")

    assert q({"quant_method": "mxfp4"}) == "mxfp4"
    assert q({"quant_method": "modelopt", "quant_algo": "NVFP4"}) == "nvfp4"
    assert q({"quant_method": "modelopt", "quant_algo": "FP8"}) == "fp8"
    assert q({"quant_method": "modelopt"}) == "fp8"
    assert q({"quant_method": "modelopt_fp4"}) == "nvfp4"
    assert q({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp4"}}}) == "mxfp4"
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "float"}}}}
    assert q(ct) == "nvfp4"
    with pytest.raises(ConfigError, match=r"quantization_config.quant_algo must be FP8 or NVFP4 .*\(got W4A8_AWQ\)"):
        q({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"})
    with pytest.raises(ConfigError, match=r"global_quant_config.weight.dtype must be fp4 or fp8_e4m3 .*\(got 'int8'\)"):
        q({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "int8"}}})
    with pytest.raises(ConfigError, match=r"quant_method 'mystery' is not one servesim sizes"):
        q({"quant_method": "mystery"})
    scope = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}
    assert checkpoint_quant_scope({"quantization_config": scope}) == "mlp"
    assert checkpoint_quant_scope({"quantization_config": {"quant_method": "fp8", "ignore": ["lm_head"]}}) == "all"


def test_layer_types_must_match_the_layers():
    """layer_types lists one kind per layer, each sliding_attention or full_attention."""
    import json

    from simulator.scenario.models import MODELS_DIR

    cfg = json.loads((MODELS_DIR / "gpt-oss-20b.json").read_text())
    with pytest.raises(
        ConfigError, match=r"layer_types must list one entry per layer \(24, num_hidden_layers\) \(got 3\)"
    ):
        from_hf_config({**cfg, "layer_types": ["full_attention"] * 3}, "m")
    with pytest.raises(ConfigError, match=r"layer_types entries must be .* \(got 'chunked'\)"):
        from_hf_config({**cfg, "layer_types": ["chunked"] * 24}, "m")
    m = from_hf_config(cfg, "m")
    assert m.num_sliding_layers == 12 and m.sliding_window == 128 and m.is_hybrid


def test_kv_bytes_with_sliding_windows_by_hand():
    """gpt-oss-120b: 2 x 8 KV heads x 64 x 2 bytes = 2 KiB a layer a token. Its 18 full-attention
    layers hold the whole context; its 18 sliding-window layers 128 tokens rounded up to blocks plus
    one block (9 blocks of 16 = 144 tokens). A request at 8,192 tokens holds 8,192 x 36 KiB + 144 x
    36 KiB, about half of what full attention in every layer would take."""
    m = load_model("gpt-oss-120b")
    per_layer = 2 * 8 * 64 * 2
    assert m.kv_bytes_per_token() == 36 * per_layer
    assert m.paged_kv_bytes_per_token() == m.window_kv_bytes_per_token() == 18 * per_layer == 36_864
    assert m.window_blocks_per_request(16) == 9
    held = 8192 * 36_864 + 9 * 16 * 36_864
    assert held == 307_298_304 and held / (8192 * m.kv_bytes_per_token()) == pytest.approx(0.509, abs=0.001)
    assert m.paged_kv_bytes_per_token(tp=2) == 18 * per_layer / 2  # 4 KV heads a GPU
    # A model without sliding-window layers is unchanged.
    llama = load_model("llama-3.1-8b")
    assert llama.paged_kv_bytes_per_token() == llama.kv_bytes_per_token() and llama.window_kv_bytes_per_token() == 0


def test_hybrid_pool_sets_the_windows_aside():
    """The KV pool of gpt-oss-120b on an H200: what is left after the weights, the runtime and the
    windows of max_num_seqs requests (256 x 144 tokens x 36 KiB), in blocks of 16 tokens of the
    full-attention layers."""
    m, g = load_model("gpt-oss-120b"), load_gpu("h200")
    kw = dict(tp=1, gpu_memory_utilization=0.9, block_size=16, max_batched_tokens=8192, max_num_seqs=256)
    plan = plan_memory(m, g, quantization="mxfp4", **kw)
    assert plan.window_bytes == 256 * 144 * 36_864
    assert plan.block_bytes == 16 * 36_864
    left = plan.usable_bytes - plan.weight_bytes - plan.reserve_bytes - plan.window_bytes
    assert plan.num_gpu_blocks == int(left // plan.block_bytes)
    assert "sliding windows 1.27 GiB" in plan.describe()
    # Every layer at full attention would give half the tokens.
    assert plan.num_gpu_blocks * 16 > 1.9 * left / m.kv_bytes_per_token()


def test_sliding_window_attention_reads_only_the_window():
    """Four requests decoding at 1,000 cached tokens: the full-attention layers read 4 x 1,001
    tokens of KV, the sliding-window ones 4 x 128 (each query's window, itself included); a prefill
    of 64 tokens from nothing is inside the window and reads all of it in both."""
    cp = np.zeros(len(PARAMS))
    cp[[P.KV_BYTES_PER_TOKEN, P.WINDOW_KV_BYTES_PER_TOKEN, P.ATTN_FLOPS_PER_PAIR, P.WINDOW_FLOPS_PER_PAIR]] = (
        10,
        1,
        100,
        3,
    )
    cp[P.WINDOW] = 128
    flops, nbytes = attention_work(cp, 4, 4, 4000, 4 * 1001, 0)
    assert nbytes == 4004 * 10 + 4 * 128 * 1
    assert flops == 4004 * 100 + 4 * 128 * 3
    pairs = 64 * 65 // 2
    flops, nbytes = attention_work(cp, 1, 64, 0, pairs, 0)
    assert nbytes == 64 * 10 + 64 * 1 and flops == pairs * 100 + pairs * 3


def test_fp4_math_rate_where_the_gpu_has_one():
    """gpt-oss on an H200 (no fp4 rate): experts read at 4.25 bits (and the Triton kernel's padded
    scales: 13,265,920 bytes for an expert's 24,883,200 weights), multiplied at the bf16 rate by
    vLLM's weight-only Triton path (its own measured share of the peak), attention bf16; on a GPU
    with an fp4 rate (Blackwell) the experts use it, at the fused-MoE kernel's share. NVFP4 Llama-3.3-70B: every linear
    at 4.5 bits, at fp4 where the GPU has it."""
    h200 = load_gpu("h200")
    fp4 = replace(h200, peak_flops={**h200.peak_flops, "fp4": 4 * h200.peak_flops["bf16"]}, compute_capability="10.0")
    e = Efficiency()
    m = load_model("gpt-oss-120b")
    hop, bw = CostModel(m, h200, 1, e, None, "mxfp4").params, CostModel(m, fp4, 1, e, None, "mxfp4").params
    assert hop[P.EXPERT_WEIGHT_BYTES] == pytest.approx(13_265_920 / 24_883_200) and hop[
        P.WEIGHT_BYTES
    ] == pytest.approx(2.0)
    # TRT-LLM's kernel on Blackwell pads both sizes to 3,072: 6,144 x 3,072 and 3,072 x 3,072 at 4.25 bits
    assert bw[P.EXPERT_WEIGHT_BYTES] == pytest.approx((6144 + 3072) * 3072 * 4.25 / 8 / 24_883_200)
    # vLLM's layouts only: under SGLang the experts are read as the checkpoint has them
    sg = CostModel(m, fp4, 1, e, None, "mxfp4", execution=Execution(framework="sglang")).params
    assert sg[P.EXPERT_WEIGHT_BYTES] == 4.25 / 8
    assert hop[P.MOE_FLOPS] == h200.flops("bf16") * MXFP4_WEIGHT_ONLY_MOE_COMPUTE
    assert bw[P.MOE_FLOPS] == 4 * h200.flops("bf16") * e.moe_compute
    assert bw[P.MATMUL_FLOPS] == hop[P.MATMUL_FLOPS] == h200.flops("bf16") * e.matmul_compute
    assert hop[P.WINDOW] == 128 and hop[P.KV_BYTES_PER_TOKEN] == hop[P.WINDOW_KV_BYTES_PER_TOKEN] == 36_864
    assert hop[P.ATTN_FLOPS_PER_PAIR] == hop[P.WINDOW_FLOPS_PER_PAIR] == 4 * 18 * 64 * 64
    llama = load_model("llama-3.3-70b-fp4")
    lh, lb = CostModel(llama, h200, 1, e, None, "nvfp4").params, CostModel(llama, fp4, 1, e, None, "nvfp4").params
    assert lh[P.WEIGHT_BYTES] == lh[P.EXPERT_WEIGHT_BYTES] == 0.5625
    assert lh[P.MATMUL_FLOPS] == h200.flops("bf16") * e.matmul_compute
    assert lb[P.MATMUL_FLOPS] == 4 * h200.flops("bf16") * e.matmul_compute
    # DeepSeek-R1 NVFP4: its three dense MLP layers at 4.5 bits beside bf16 attention, blended.
    r1 = load_model("deepseek-r1-fp4")
    rp = CostModel(r1, h200, 8, e, None, "nvfp4").params
    attn, dense = 61 * r1.attn_params_per_layer, 3 * r1.dense_mlp_params
    assert rp[P.WEIGHT_BYTES] == pytest.approx((attn * 2 + dense * 0.5625) / (attn + dense))


def test_fp8_weights_multiply_at_their_rate_and_attention_at_the_activations():
    """FP8 linear layers on Hopper at HOPPER_FP8_GEMM_SHARE of the FP8 peak's fitted fraction, on a
    Blackwell GPU at all of it; attention at the bf16 rate whatever the weights' format, NVFP4 too;
    an MLA model (DeepSeek-R1, block-scaled FP8) keeps the FP8 rate for both, as before the recording
    that set them (data/e2e/h200_fp8_2026-12-02)."""
    e = Efficiency()
    h200, b200 = load_gpu("h200"), load_gpu("b200")
    llama = load_model("llama-3.1-8b")
    bf16, fp8 = CostModel(llama, h200, 1, e).params, CostModel(llama, h200, 1, e, None, "fp8").params
    assert fp8[P.MATMUL_FLOPS] == pytest.approx(h200.flops("fp8") * HOPPER_FP8_GEMM_SHARE * e.matmul_compute)
    assert fp8[P.ATTN_FLOPS] == bf16[P.ATTN_FLOPS] == h200.flops("bf16") * e.attn_compute
    assert fp8[P.WEIGHT_BYTES] == 1.0 and bf16[P.WEIGHT_BYTES] == 2.0
    blackwell = CostModel(llama, b200, 1, e, None, "fp8").params
    assert blackwell[P.MATMUL_FLOPS] == pytest.approx(b200.flops("fp8") * e.matmul_compute)
    fp4 = CostModel(load_model("llama-3.3-70b-fp4"), b200, 1, e, None, "nvfp4").params
    assert fp4[P.ATTN_FLOPS] == b200.flops("bf16") * e.attn_compute
    r1 = CostModel(load_model("deepseek-r1"), h200, 8, e, None, "fp8").params
    assert r1[P.MATMUL_FLOPS] == pytest.approx(h200.flops("fp8") * e.matmul_compute)
    assert r1[P.ATTN_FLOPS] == pytest.approx(h200.flops("fp8") * e.attn_compute)
    # the bf16 prefill of 8,192 tokens against the FP8 one: 0.67 measured, priced within a point
    sc = {q: load_scenario(None, ["hardware.gpu=h200", f"engine.quantization={q}"])[0] for q in ("none", "fp8")}
    step = {q: build(s)[1].cost.step_time(decode_work(1, 0, 8192)) for q, s in sc.items()}
    assert step["fp8"] / step["none"] == pytest.approx(0.67, abs=0.01)


NEW_MODELS = [  # (model, tensor_parallel_size on H200s)
    ("gpt-oss-20b", 1),
    ("gpt-oss-120b", 1),
    ("gpt-oss-120b", 2),
    ("deepseek-r1", 8),
    ("deepseek-r1-fp4", 4),
    ("deepseek-r1-mxfp4", 4),
    ("llama-3.3-70b-fp8", 1),
    ("llama-3.3-70b-fp4", 1),
    ("qwen3-235b-a22b-fp8", 4),
]


@pytest.mark.parametrize(("name", "tp"), NEW_MODELS)
def test_new_models_run_the_default_scenario_on_h200(name, tp):
    """Each new preset runs the default scenario (shortened) on H200s, with its own weight format."""
    sc, _ = load_scenario(
        None,
        [
            f"model={name}",
            "hardware.gpu=h200",
            f"hardware.tensor_parallel_size={tp}",
            "run.duration_s=30",
            "run.warmup_s=5",
        ],
    )
    _, _, parts = build(sc)
    assert parts["memory"].num_gpu_blocks > 1000
    summary = summarize(simulate(sc))
    assert summary["output_throughput"] > 0


def test_a_config_json_path_works_as_the_preset(tmp_path):
    """gpt-oss-120b's config.json given as a path (a model folder) sizes and prices as the preset."""
    from simulator.scenario.models import MODELS_DIR

    folder = tmp_path / "gpt-oss-120b"
    folder.mkdir()
    (folder / "config.json").write_text((MODELS_DIR / "gpt-oss-120b.json").read_text())
    preset, path = load_model("gpt-oss-120b"), load_model(str(folder))
    assert path == preset
    a, _ = load_scenario(None, ["model=gpt-oss-120b", "hardware.gpu=h200"])
    b, _ = load_scenario(None, [f"model={folder}", "hardware.gpu=h200"])
    (_, ea, pa), (_, eb, pb) = build(a), build(b)
    assert pa["memory"] == pb["memory"]
    assert ea.cost.params.tolist() == eb.cost.params.tolist()


def test_the_windows_never_take_more_than_their_layers_share():
    """gpt-oss-120b on one H100 with 1,024 sequences: their windows (1,024 x 144 tokens x 36 KiB,
    5.06 GiB) would take most of the 6.9 GiB left for KV; a request's window blocks never outnumber
    its other blocks, so the sliding-window layers get at most half (18 of 36 layers): the pool is
    then what full attention in every layer would give, no less."""
    m, g = load_model("gpt-oss-120b"), load_gpu("h100-sxm")
    kw = dict(tp=1, gpu_memory_utilization=0.9, block_size=16, max_batched_tokens=8192, max_num_seqs=1024)
    plan = plan_memory(m, g, quantization="mxfp4", **kw)
    left = plan.usable_bytes - plan.weight_bytes - plan.reserve_bytes
    assert left / 2 < 1024 * 144 * 36_864
    assert plan.window_bytes == left / 2
    assert plan.num_gpu_blocks == int((left / 2) // (16 * 36_864))
    assert plan.num_gpu_blocks == int(left // (16 * m.kv_bytes_per_token()))


def test_a_hybrid_model_is_noted_with_its_pool():
    """servesim check and run say how a hybrid model's pool is sized; other models get no such note."""
    from simulator.outputs.notes import scenario_notes

    sc, _ = load_scenario(None, ["model=gpt-oss-120b", "hardware.gpu=h200"])
    (note,) = [n for n in scenario_notes(sc) if "sliding-window" in n]
    assert "gpt-oss-120b has 18 sliding-window layers (128 tokens) of 36" in note
    plain, _ = load_scenario(None, [])
    assert not [n for n in scenario_notes(plain) if "sliding-window" in n]


def test_dummy_weights_on_a_biased_router_are_noted_and_priced_on_its_few_experts():
    """Dummy weights on gpt-oss (a router with a bias) are noted, and its decode step reads the top-4
    experts' weights only, so it is shorter than the real checkpoint's; a model whose router has no
    bias (Qwen3-30B-A3B) and real weights get no such note."""
    from simulator.engine.cost import StepWork
    from simulator.outputs.notes import scenario_notes
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario.hardware import load_gpu

    def scenario(*over):
        return load_scenario(None, ["model=gpt-oss-120b", "hardware.gpu=h200", *over])[0]

    dummy = scenario("engine.load_format=dummy")
    (note,) = [n for n in scenario_notes(dummy) if "load_format 'dummy'" in n]
    assert "the same 4 of 128 experts" in note
    assert not [n for n in scenario_notes(scenario()) if "load_format 'dummy'" in n]
    qwen = load_scenario(None, ["model=qwen3-30b-a3b", "hardware.gpu=h200", "engine.load_format=dummy"])[0]
    assert not [n for n in scenario_notes(qwen) if "load_format 'dummy'" in n]
    work = StepWork(num_seqs=16, num_tokens=16, num_decode_tokens=16, context_tokens=16 * 4096, num_sampled=16)

    def step_s(sc):
        gpu = load_gpu(sc.hardware.gpu)
        return cost_model(sc, load_arch(sc), gpu, *engine_defaults(gpu, sc)).step_time(work)

    assert step_s(dummy) < 0.6 * step_s(scenario())


def test_the_windows_set_aside_are_those_of_the_requests_that_can_run_at_once():
    """A closed loop of 64 clients never has more than 64 requests running: their windows are set
    aside, not max_num_seqs'; an open loop has no such bound."""
    from simulator.resolve import engine_defaults, load_arch, memory_plan

    def plan(arrival):
        sc, _ = load_scenario(None, ["model=gpt-oss-120b", "hardware.gpu=h100-sxm", f"workload.arrival={arrival}"])
        gpu = load_gpu("h100-sxm")
        seqs, tokens = engine_defaults(gpu, sc)
        return memory_plan(sc, load_arch(sc), gpu, seqs, tokens), seqs

    closed, seqs = plan("{type: closed_loop, concurrency: 64}")
    assert seqs > 64 and closed.window_bytes == 64 * 144 * 36_864
    opened, _ = plan("{type: poisson, rate: 5}")
    assert opened.window_bytes > 8 * closed.window_bytes  # max_num_seqs' windows (capped at half the pool)
    # the same memory either way: what the windows do not take, the full-attention layers' blocks do
    both = (closed.kv_bytes + closed.window_bytes, opened.kv_bytes + opened.window_bytes)
    assert both[0] == pytest.approx(both[1], abs=closed.block_bytes)  # (the pool is whole blocks)
    assert closed.num_gpu_blocks > opened.num_gpu_blocks


@pytest.mark.parametrize(
    "workload, bound",
    [
        ({"arrival": {"type": "closed_loop", "concurrency": 32}}, 32),
        ({"arrival": {"type": "closed_loop", "concurrency": 32, "schedule": {0: 8, 60: 96}}}, 96),
        ({"arrival": {"type": "poisson", "rate": 3}}, None),
        (
            {
                "arrival": {"type": "closed_loop", "concurrency": 10},
                "classes": {"a": {"weight": 1}, "b": {"arrival": {"type": "closed_loop", "concurrency": 5}}},
            },
            15,
        ),
        (
            {
                "arrival": {"type": "closed_loop", "concurrency": 10},
                "classes": {"b": {"arrival": {"type": "poisson", "rate": 1}}},
            },
            None,
        ),
        (
            {
                "arrival": {"type": "closed_loop", "concurrency": 10},
                "classes": {"b": {"arrival": {"type": "closed_loop", "concurrency": 5}}},
            },
            5,
        ),
    ],
)
def test_most_requests_a_workload_can_have_in_flight(workload, bound):
    from simulator.scenario.config import scenario_from_dict
    from workloads.config import most_in_flight

    assert most_in_flight(scenario_from_dict({"workload": workload}).workload) == bound


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200", "b200"])
def test_gpt_oss_120b_runs_at_every_tp_load_and_shape_the_public_benchmarks_use(gpu):
    """gpt-oss-120b on H100, H200 and B200 at TP 1 to 8, 4 and 128 in flight, 1k/1k, 1k/8k and 8k/1k:
    every point runs to its last request, with a throughput that grows with the load (by half at
    least: on one H100 the KV pool holds about 29 of 128 requests of 8k/1k, so the load it can use
    grows only about sevenfold, not thirtyfold)."""
    from conftest import shape_grid_throughputs

    for tp in (1, 2, 4, 8):
        over = [
            "model=gpt-oss-120b",
            f"hardware.gpu={gpu}",
            f"hardware.tensor_parallel_size={tp}",
            "hardware.host=null",
        ]
        grid = shape_grid_throughputs(over, ((1024, 1024), (1024, 8192), (8192, 1024)), (4, 128))
        for shape, (low, high) in grid.items():
            assert high > 1.5 * low, (gpu, tp, shape, low, high)


def test_mxfp4_experts_add_no_fused_moe_buffers_to_the_activation_peak():
    """vLLM's profiling peak for an MoE model: the sampler's or the forward pass's, plus the fused-MoE
    kernel's intermediate buffers (tokens x experts a token x (2 x MoE width + hidden) x 2 bytes);
    MXFP4 experts run through another kernel and add none (every recorded gpt-oss server printed
    2.87 GiB, its sampler's peak alone)."""
    from simulator.scenario.memory import activation_peak

    m = load_model("gpt-oss-20b")
    as_mxfp4 = activation_peak(m, 1, 8192, 1024, "v1", "mxfp4")
    as_bf16 = activation_peak(m, 1, 8192, 1024, "v1", "none")
    assert as_bf16 - as_mxfp4 == 8192 * 4 * (2 * 2880 + 2880) * 2
    assert abs(as_mxfp4 / GIB - 2.87) < 0.06  # the printed peak, within 2%


def test_deepseeks_fp8_mla_moe_kernels_are_counted_per_gpu_family():
    """DeepSeek-R1's FP8 MoE layers (58 of 61) add ``fp8_mla_moe_kernels`` small kernels a layer on
    every GPU: Hopper's default 20, the B200 family's fitted 6, none on the MI355X (its file says why);
    a bf16 MoE model adds none."""
    from simulator.engine.calibration import builtin
    from simulator.engine.cost import moe_path_kernels

    dsr1, qwen = load_model("deepseek-r1"), load_model("qwen3-235b-a22b")
    assert dsr1.num_moe_layers == 58
    for gpu, count in (("h200", 20.0), ("b200", 6.0), ("gb200", 6.0), ("mi300x", 20.0), ("mi355x", 0.0)):
        e = builtin(gpu) or Efficiency()
        assert moe_path_kernels(e, dsr1, load_gpu(gpu), "fp8", 8) == count * 58, gpu
        assert moe_path_kernels(e, qwen, load_gpu(gpu), "none", 8) == 0.0, gpu


@pytest.mark.parametrize(
    "model, batch, tokens, measured_ms, tolerance",
    [
        ("gpt-oss-120b", 1, 8180, 178.0, 0.01),  # the step the rate is fitted on
        ("gpt-oss-20b", 1, 8180, 109.0, 0.10),  # held out
        ("gpt-oss-120b", 8, 1024, 162.0, 0.05),  # held out
        ("gpt-oss-20b", 8, 1024, 95.0, 0.15),  # held out
    ],
)
def test_mxfp4_prefill_on_hopper_at_its_measured_rate(model, batch, tokens, measured_ms, tolerance):
    """gpt-oss's prefill steps on an H200 as vLLM 0.26 ran them with the routing spread (the servers'
    iteration logs, data/e2e/README.md: h200_gptoss_noise_2026-11-29 and noise2), priced as `servesim
    step-time` prices them: MXFP4 experts through the weight-only Triton path at
    ``MXFP4_WEIGHT_ONLY_MOE_COMPUTE`` of the bf16 peak (at the fused-MoE kernel's 0.33 these came out
    27-49% long)."""
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario.config import load_scenario

    sc, _ = load_scenario(
        None, [f"model={model}", "hardware.gpu=h200", "engine.vllm_version=0.26", "engine.load_format=auto"]
    )
    m, gpu = load_arch(sc), load_gpu("h200")
    cm = cost_model(sc, m, gpu, *engine_defaults(gpu, sc))
    ms = cm.step_time(decode_work(batch, 0, tokens)) * 1e3
    assert abs(ms / measured_ms - 1) < tolerance, ms


def test_llama_70b_in_fp8_replays_its_recorded_server_collapse_included():
    """Llama-3.3-70B in FP8 on one H200 (data/e2e/h200_fp8_70b_2026-12-02, recorded blind, nothing
    fitted on it), replayed request for request on each lane's probe reading: every run within 10% in
    throughput and p50 TPOT but the 8k-token prompts at 4 clients with an FP8 KV cache, 10.4% short in
    throughput since the H200's GEMM rate became the H100's (its prefills priced 3% longer; 7.4% short
    before: data/profiles/README-measurements.md, "A dense prefill on an H100"), the KV pool within 2%;
    at 256 clients the cache fills and the server
    serves less than at 128, with preemptions within 1.5x of its 99; with an FP8 KV cache the pool
    doubles and the same 256 clients fit, with no preemption."""
    from simulator.validation import validate

    runs = {
        r["id"].removeprefix("h200_fp8_70b_2026-12-02_"): r
        for r in validate.load(validate.E2E_FILE)["runs"]
        if r["recording"] == "h200_fp8_70b_2026-12-02"
    }
    assert len(runs) == 11
    got = {k: validate.simulate_e2e(r) for k, r in runs.items()}
    for k, res in got.items():
        assert not res.error, k
        for m in ("output_throughput", "median_tpot_ms"):
            tolerance = 0.11 if (k, m) == ("llama70b_fp8kv_p8k_c4", "output_throughput") else 0.10
            assert res.simulated[m] == pytest.approx(res.measured[m], rel=tolerance), (k, m)
        server = runs[k]["server"]["kv_cache_tokens"]
        assert res.detail["kv_cache_tokens"] == pytest.approx(server, rel=0.02), k
    full, room = got["llama70b_fp8_c256"], got["llama70b_fp8_c128"]
    assert full.measured["output_throughput"] < room.measured["output_throughput"]  # the server's collapse
    assert full.simulated["output_throughput"] < room.simulated["output_throughput"]  # and servesim's
    preempted, server_preempted = full.detail["num_preemptions"], runs["llama70b_fp8_c256"]["server"]["num_preemptions"]
    assert server_preempted == 99 and server_preempted / 1.5 <= preempted <= server_preempted * 1.5
    fp8_kv = got["llama70b_fp8kv_c256"]
    assert fp8_kv.detail["num_preemptions"] == 0 == runs["llama70b_fp8kv_c256"]["server"]["num_preemptions"]
    assert fp8_kv.detail["kv_cache_tokens"] > 1.9 * full.detail["kv_cache_tokens"]
