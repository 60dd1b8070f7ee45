"""How many KV blocks fit, as vLLM (V1) sizes its KV cache at start-up.

vLLM asks for ``gpu_memory_utilization`` x the GPU's total memory, loads the weights, runs one
profiling forward pass at the full token budget (``max_num_batched_tokens`` tokens spread over
``min(max_num_batched_tokens, max_num_seqs)`` requests) plus a sampler pass, and gives the KV cache
what is left after the weights, the activation peak of that pass and the memory that appeared
outside PyTorch (NCCL, cuBLAS workspaces); from vLLM 0.21 it also sets aside its estimate of the
CUDA graphs' memory (before, graphs were captured later, in the headroom above the utilisation).
Blocks are ``floor(available / block bytes)``, the same on every tensor-parallel GPU.

The activation peak, the non-PyTorch memory and the CUDA-graph memory are estimated by formulas
whose constants were fitted on start-up logs: vLLM 0.19's V1 model runner (H100 80GB) and vLLM 0.26's
V2 model runner (H200, recorded with tools/e2e). Which runner serves a model depends on the release
(``versions.VllmVersion.runner``): V2's profiling pass samples with its Gumbel kernels from one copy
of the logits in the model's dtype, where V1 keeps several float32 copies. ``servesim validate
--kv`` checks the result against the logs (simulator/data/validation/kv_cache_lines.yaml), part of
them held out of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.scenario.hardware import GPU
from simulator.scenario.models import ModelArch, quant_scope, weight_format_bytes

GIB = float(1 << 30)

# Fitted on the calibration half of kv_cache_lines.yaml (tools/validation/fit_memory.py):
SAMPLER_COPIES = 3.223  # fp32 [requests x vocab] tensors alive at the sampler's peak
SAMPLER_BASE_BYTES = 0.346 * GIB
FORWARD_HIDDEN_COPIES = 4  # [tokens x hidden] activations alive at the forward pass's peak (residual, norms)
# Memory that appears outside PyTorch during profiling (NCCL and custom all-reduce buffers), tp == 1
# and tp >= 2, per model runner: V1 fitted as above (vLLM 0.19); V2 as vLLM 0.26 logged it (0.22-0.23
# GiB at TP1 for Llama-3.1-8B and Qwen3-32B, 0.07 GiB at TP2 for Qwen3-32B). From release line 0.26
# the all-reduce buffers are allocated before the profile whatever the runner (``early_allreduce``),
# so at tp >= 2 the V1 runner leaves the V2 runner's 0.07 GiB too (the V1 gpt-oss-120b TP2 server,
# held out, logged 0.13).
NON_TORCH_BYTES = {"v1": {1: 0.25 * GIB, 2: 2.085 * GIB}, "v2": {1: 0.23 * GIB, 2: 0.07 * GIB}}
GRAPH_BASE_BYTES, GRAPH_PER_LAYER_BYTES = 0.364 * GIB, 0.0164 * GIB  # CUDA graphs of the default capture sizes
# The V2 runner's sampler peak beyond one copy of the logits: Llama-3.1-8B with 4,096 sequences
# logged a 1.11 GiB peak against 0.98 GiB of bf16 logits (data/e2e/h200_2026-11-27/llama8b_fixed).
SAMPLER_V2_BASE_BYTES = 0.13 * GIB


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget of one replica (bytes)."""

    hbm_bytes: float
    usable_bytes: float  # gpu_memory_utilization x hbm_bytes
    weight_bytes: float
    activation_bytes: float  # peak of the profiling pass
    non_torch_bytes: float
    graph_bytes: float  # CUDA-graph memory counted inside the budget (vLLM >= 0.21)
    kv_bytes: float
    kv_bytes_per_token: float  # per GPU (after the tensor-parallel split of KV heads)
    block_bytes: float
    num_gpu_blocks: int  # including vLLM's null block
    # A hybrid model's sliding-window layers: the blocks every request the engine may run holds for its
    # window, set aside from the pool (the pool's blocks serve the full-attention layers).
    window_bytes: float = 0.0

    @property
    def reserve_bytes(self) -> float:
        """Everything but weights and KV inside the budget."""
        return self.activation_bytes + self.non_torch_bytes + self.graph_bytes

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def describe(self) -> str:
        g = GIB
        if not self.reserve_bytes:  # SGLang's: a static fraction for weights and KV
            return (
                f"{self.usable_bytes / g:.1f} GiB static = weights {self.weight_bytes / g:.2f} GiB"
                f" + KV {self.kv_bytes / g:.2f} GiB ({self.num_usable_blocks:,} pages of"
                f" {round(self.block_bytes / self.kv_bytes_per_token)} tokens, {self.block_bytes / 1024:.0f} KiB)"
            )
        graphs = f" + CUDA graphs {self.graph_bytes / g:.2f}" if self.graph_bytes else ""
        return (
            f"{self.usable_bytes / g:.1f} GiB usable = weights {self.weight_bytes / g:.2f} GiB"
            f" + activations {self.activation_bytes / g:.2f} + non-torch {self.non_torch_bytes / g:.2f}{graphs}"
            f" + KV {self.kv_bytes / g:.2f} GiB ({self.num_usable_blocks:,} blocks of {self.block_bytes / 1024:.0f} KiB)"
            + (f" + sliding windows {self.window_bytes / g:.2f} GiB" if self.window_bytes else "")
        )


def weight_bytes(model: ModelArch, quantization: str = "none", tp: int = 1, gpu: GPU | None = None) -> float:
    """Bytes of weights on one GPU of a ``tp``-way replica, as vLLM reports loading them
    (``ModelArch.weight_bytes_per_gpu``): a quantized format stores the weights it covers
    (``models.quant_scope``: every layer's, or a checkpoint's MLP and expert matrices only) in its
    width (``models.WEIGHT_BITS``, scales included) and keeps the rest (embeddings, LM head, and what
    the checkpoint leaves unquantized) in the model's dtype. MXFP4 experts on ``gpu`` are stored as
    the MoE kernel vLLM picks there lays them out (``mxfp4_expert_bytes``)."""
    per_gpu = model.weight_bytes_per_gpu(tp)
    if quantization == "none":
        return per_gpu
    fmt = weight_format_bytes(quantization, model.dtype_bytes)
    quantized = model.quantized_params(quant_scope(model, quantization)) / tp
    out = per_gpu - quantized * (model.dtype_bytes - fmt)
    if quantization == "mxfp4" and model.is_moe and gpu is not None:
        routed = model.num_moe_layers * model.num_experts
        plain = routed * (model.expert_params * fmt + model.expert_bias_params * model.dtype_bytes) / tp
        out += mxfp4_expert_bytes(model, tp, gpu) - plain
    return out


# ---- MXFP4 experts as vLLM 0.26's MoE kernels store them -----------------------------------------------
# (hidden, intermediate per GPU) multiples the kernel pads the expert matrices to
# (fused_moe/oracle/mxfp4.py, mxfp4_round_up_hidden_size_and_intermediate_size), by the kernel vLLM
# picks for gpt-oss: OpenAI's Triton kernels on Hopper (SM90), FlashInfer's TRT-LLM kernel on
# Blackwell (SM100), AITER on AMD Instinct, Marlin on older NVIDIA GPUs. Applied on every release
# line: GPUStack's A100 runs of gpt-oss-120b on vLLM 0.11 (Marlin, held out) fit it.
MXFP4_PAD = {"triton": (1, 64), "trtllm": (256, 256), "aiter": (256, 256), "marlin": (256, 128)}
MXFP4_BLOCK = 32  # values per E8M0 scale


def mxfp4_kernel(gpu: GPU) -> str:
    """The MoE kernel vLLM 0.26 serves gpt-oss's MXFP4 experts with on ``gpu`` (the first its
    priority list supports there: TRT-LLM's on SM100 only, the Triton kernels on SM90-SM100, Marlin
    elsewhere; a GPU that gives no compute capability is taken for Hopper)."""
    if gpu.gfx:
        return "aiter"
    major = int(float(gpu.compute_capability or "9.0"))
    return "trtllm" if major == 10 else "triton" if major == 9 else "marlin"


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def mxfp4_expert_bytes(model: ModelArch, tp: int, gpu: GPU, biases: bool = True) -> float:
    """Bytes of the routed experts (values, E8M0 scales and biases) on one GPU of a ``tp``-way
    replica, as vLLM stores them for its MXFP4 kernel on ``gpu``: hidden and intermediate sizes
    padded to the kernel's multiples (``MXFP4_PAD``), each GPU holding every expert's 1/tp slice of
    the intermediate size. On Hopper the Triton kernel's swizzled scale layout also pads each scale
    matrix to a multiple of 4 scale groups along the reduction and 256 rows along the outputs
    (triton_kernels' HopperMXScaleLayout with 8 warps, after vLLM's own pad to 4 groups); its value
    layout pads the bytes of a row to 32 and the rows to 16, and it keeps the biases in float32."""
    kernel = mxfp4_kernel(gpu)
    h_pad, i_pad = MXFP4_PAD[kernel]
    h = _round_up(model.hidden_size, h_pad)
    i = _round_up(-(-model.moe_intermediate_size // tp), i_pad)

    def matrix(rows: int, k: int) -> float:  # one expert's [rows x k] weight, values and scales
        groups = -(-k // MXFP4_BLOCK)
        if kernel != "triton":
            return rows * k / 2 + rows * groups
        values = _round_up(rows, 16) * _round_up(k // 2, 32)
        return values + _round_up(rows, 256) * _round_up(groups, 4)

    bias_bytes = 4.0 if kernel == "triton" else model.dtype_bytes
    bias = (2 * i + h) * bias_bytes if model.expert_bias and biases else 0.0
    return model.num_moe_layers * model.num_experts * (matrix(2 * i, h) + matrix(h, i) + bias)


def mxfp4_bytes_per_weight(model: ModelArch, tp: int, gpu: GPU) -> float:
    """Bytes an MXFP4 expert's weight takes on ``gpu`` as its kernel stores (and so reads) them, its
    padding and scales spread over the checkpoint's weights (4.25 bits unpadded)."""
    plain = model.num_moe_layers * model.num_experts * model.expert_params / tp
    return mxfp4_expert_bytes(model, tp, gpu, biases=False) / plain


def activation_peak(
    model: ModelArch,
    tp: int,
    max_batched_tokens: int,
    max_num_seqs: int,
    runner: str = "v1",
    quantization: str = "none",
) -> float:
    """Peak PyTorch memory of vLLM's profiling pass: the larger of the forward pass's (gate/up and
    down-projection inputs of the dense MLP, hidden-sized buffers) and the sampler's (for
    ``min(tokens, seqs)`` requests over the whole vocabulary on every GPU: V1, fp32 logits and their
    derivatives; V2, the logits in the model's dtype); MoE layers add the fused-MoE kernel's
    intermediate buffers, but MXFP4 experts, which run through another kernel, add none: the
    recorded gpt-oss-20b and gpt-oss-120b servers (vLLM 0.26, H200) each printed 2.87 GiB, the
    sampler's 2.82 alone (the buffers would add 0.53), where Qwen3-30B-A3B's 2.68 is its sampler's
    2.21 and the buffers' 0.44 (data/e2e/, h200_gptoss_kv_2026-12-01, whose pool of 11 GiB showed it)."""
    m, T = model, max_batched_tokens
    forward = T * m.dtype_bytes * (3 * m.intermediate_size / tp + FORWARD_HIDDEN_COPIES * m.hidden_size)
    if m.is_moe and m.num_layers == m.num_moe_layers:
        forward = T * m.dtype_bytes * FORWARD_HIDDEN_COPIES * m.hidden_size
    rows = min(T, max_num_seqs)
    if runner == "v2":
        sampler = SAMPLER_V2_BASE_BYTES + rows * m.vocab_size * m.dtype_bytes
    else:
        sampler = SAMPLER_BASE_BYTES + SAMPLER_COPIES * rows * m.vocab_size * 4.0
    peak = max(forward, sampler)
    if m.is_moe and quantization != "mxfp4":
        peak += T * m.experts_per_token * (2 * m.moe_intermediate_size / tp + m.hidden_size) * m.dtype_bytes
    return peak


def non_torch_bytes(tp: int, runner: str = "v1", early_allreduce: bool = False) -> float:
    if tp > 1 and early_allreduce:
        return NON_TORCH_BYTES["v2"][2]
    return NON_TORCH_BYTES[runner][1 if tp == 1 else 2]


def graph_bytes(model: ModelArch) -> float:
    """vLLM's estimate of the CUDA graphs' memory (default capture sizes)."""
    return GRAPH_BASE_BYTES + GRAPH_PER_LAYER_BYTES * model.num_layers


def window_reserve_bytes(
    model: ModelArch, block_size: int, max_num_seqs: int, kv_dtype_bytes: float | None = None, tp: int = 1
) -> float:
    """Bytes per GPU a hybrid model's sliding-window layers hold when ``max_num_seqs`` requests each
    keep their window in them (0 for other models)."""
    blocks = model.window_blocks_per_request(block_size)
    return max_num_seqs * blocks * block_size * model.window_kv_bytes_per_token(kv_dtype_bytes, tp) if blocks else 0.0


def plan_memory(
    model: ModelArch,
    gpu: GPU,
    *,
    tp: int,
    gpu_memory_utilization: float,
    block_size: int,
    max_batched_tokens: int,
    max_num_seqs: int,
    kv_dtype_bytes: float | None = None,
    quantization: str = "none",
    graphs_in_budget: bool = False,
    reserve_bytes: float | None = None,
    num_gpu_blocks_override: int | None = None,
    runner: str = "v1",
    early_allreduce: bool = False,
    extra_weight_bytes: float = 0.0,
    extra_kv_bytes_per_token: float = 0.0,
    window_requests: int | None = None,
) -> MemoryPlan:
    """The KV pool of one GPU (``graphs_in_budget``: CUDA graphs captured and their estimate taken
    from the budget; ``reserve_bytes``: a given total for activations, non-PyTorch memory and graphs;
    ``runner``: the model runner, "v1" or "v2", whose profiling pass sets the activation peak;
    ``early_allreduce``: the release allocates the all-reduce buffers before the profile;
    ``extra_weight_bytes``, ``extra_kv_bytes_per_token``: per GPU, what a draft model adds).

    A hybrid model (sliding-window layers beside full-attention ones, ``ModelArch.is_hybrid``): vLLM's
    hybrid KV-cache manager gives each request the whole context in the full-attention layers and
    only its window (``window_blocks_per_request``) in the sliding-window ones, both from one pool.
    Here the pool's blocks hold the full-attention layers (``paged_kv_bytes_per_token``), and the
    windows of the most requests that can run at once (``window_requests``: max_num_seqs, or fewer
    when the workload never has more in flight, ``workloads.config.most_in_flight``) are set aside
    before it is cut into blocks (``window_bytes``), but never more than the sliding-window layers'
    share of the memory were they to hold every token (a request's window blocks never outnumber its
    other blocks): exact when that many requests run past the window, or requests within it; a
    smaller pool than vLLM's when fewer run, each past the window (their windows then take less)."""
    kv_tok = model.paged_kv_bytes_per_token(kv_dtype_bytes, tp) + extra_kv_bytes_per_token
    block_bytes = kv_tok * block_size
    usable = gpu_memory_utilization * gpu.hbm_bytes
    weights = weight_bytes(model, quantization, tp, gpu) + extra_weight_bytes
    requests = max_num_seqs if window_requests is None else min(window_requests, max_num_seqs)
    window = window_reserve_bytes(model, block_size, requests, kv_dtype_bytes, tp)
    if reserve_bytes is None:
        act = activation_peak(model, tp, max_batched_tokens, max_num_seqs, runner, quantization)
        other = non_torch_bytes(tp, runner, early_allreduce)
        graphs = graph_bytes(model) if graphs_in_budget else 0.0
    else:
        act, other, graphs = reserve_bytes, 0.0, 0.0
    reserve = act + other + graphs
    if window:
        # A request never holds more blocks in the sliding-window layers than in the others (its
        # window's blocks are some of the same positions): their share of the KV memory is at most
        # what they would take holding every token.
        paged, windowed = (
            model.paged_kv_bytes_per_token(kv_dtype_bytes, tp),
            model.window_kv_bytes_per_token(kv_dtype_bytes, tp),
        )
        window = min(window, max(usable - weights - reserve, 0.0) * windowed / (paged + windowed))
    kv = usable - weights - reserve - window
    plan = dict(
        hbm_bytes=gpu.hbm_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=act,
        non_torch_bytes=other,
        graph_bytes=graphs,
        kv_bytes_per_token=kv_tok,
        block_bytes=block_bytes,
    )
    if window:
        plan["window_bytes"] = window
    if num_gpu_blocks_override is not None:
        n = int(num_gpu_blocks_override)
        return MemoryPlan(kv_bytes=n * block_bytes, num_gpu_blocks=n, **plan)
    if kv <= 0:
        hint = "raise hardware.tensor_parallel_size, engine.gpu_memory_utilization, or use a larger GPU"
        if reserve_bytes is not None:
            hint = f"lower engine.runtime_reserve_gb (got {reserve_bytes / GIB:g}), or {hint}"
        raise ConfigError(
            f"model {model.name} does not fit on {gpu.key} with tensor_parallel_size={tp}: weights "
            f"{weights / GIB:.1f} GiB + activations and runtime {reserve / GIB:.1f} GiB"
            + (f" + sliding windows of {requests} requests {window / GIB:.1f} GiB" if window else "")
            + f" > {usable / GIB:.1f} GiB usable "
            f"({gpu_memory_utilization} x {gpu.hbm_bytes / GIB:.1f} GiB), short by {-kv / GIB:.1f} GiB; {hint}"
        )
    n = int(kv // block_bytes)
    if n < 2:
        raise ConfigError(
            f"engine: no KV blocks left on {gpu.key}: {kv / GIB:.3f} GiB after weights and runtime holds "
            f"{n} block(s) of {block_bytes / 1024:.0f} KiB; raise engine.gpu_memory_utilization or hardware.tensor_parallel_size"
        )
    return MemoryPlan(kv_bytes=n * block_bytes, num_gpu_blocks=n, **plan)


def plan_memory_sglang(
    model: ModelArch,
    gpu: GPU,
    *,
    tp: int,
    mem_fraction_static: float,
    page_tokens: int,
    kv_dtype_bytes: float | None = None,
    quantization: str = "none",
    dp_attention: int = 1,
) -> MemoryPlan:
    """The KV pool of one GPU as SGLang sizes it (``simulator.scenario.sglang.kv_pool_bytes``): the
    static fraction of the memory free before the weights load, less the weights, in pages of
    ``page_tokens`` tokens. A hybrid model's sliding-window layers are given every token here
    (SGLang's separate sliding-window pool is not modelled), which understates its pool.

    DP attention over ``dp_attention`` ranks: each GPU holds the attention weights split over its
    rank's tensor_parallel_size / dp_attention GPUs, and its rank's KV at that split; the pool returned
    is the ranks' pools together (one scheduler over them, ``simulator.scenario.sglang``)."""
    from simulator.scenario import sglang

    attn_tp = tp // dp_attention
    kv_tok = model.kv_bytes_per_token(kv_dtype_bytes, attn_tp)
    block_bytes = kv_tok * page_tokens
    weights = weight_bytes(model, quantization, tp)
    if attn_tp != tp:  # the attention weights split fewer ways, at the model's mean bytes per weight
        per_weight = weight_bytes(model, quantization, 1) / model.total_params
        weights += model.num_layers * model.attn_params_per_layer * (1 / attn_tp - 1 / tp) * per_weight
    usable = mem_fraction_static * (gpu.hbm_bytes - sglang.CONTEXT_BYTES)
    kv = sglang.kv_pool_bytes(gpu.hbm_bytes, mem_fraction_static, weights)
    if kv <= 0:
        raise ConfigError(
            f"model {model.name} does not fit on {gpu.key} with tensor_parallel_size={tp} under SGLang: weights "
            f"{weights / GIB:.1f} GiB > {usable / GIB:.1f} GiB static memory ({mem_fraction_static} x "
            f"{(gpu.hbm_bytes - sglang.CONTEXT_BYTES) / GIB:.1f} GiB free before the weights), short by {-kv / GIB:.1f} GiB; "
            "raise hardware.tensor_parallel_size or engine.mem_fraction_static, or use a larger GPU"
        )
    n = int(kv // block_bytes)
    if n < 2:
        raise ConfigError(
            f"engine: no KV pages left on {gpu.key} under SGLang: {kv / GIB:.3f} GiB after the weights; "
            "raise engine.mem_fraction_static or hardware.tensor_parallel_size"
        )
    return MemoryPlan(
        hbm_bytes=gpu.hbm_bytes,
        usable_bytes=usable,
        weight_bytes=weights,
        activation_bytes=0.0,
        non_torch_bytes=0.0,
        graph_bytes=0.0,
        kv_bytes=n * block_bytes,
        kv_bytes_per_token=kv_tok,
        block_bytes=block_bytes,
        num_gpu_blocks=dp_attention * n + 1,  # the ranks' pools (one block is the null block, never used)
    )
