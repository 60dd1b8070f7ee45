"""Step latency from a roofline over the operators of one engine step.

Each operator class costs the longer of its compute and its memory traffic, max(FLOPs / (peak x
efficiency), bytes / (bandwidth x efficiency)) (``roofline``), except the experts of a mixture-of-
experts layer: vLLM's fused-MoE kernel is bound by neither alone, so its two times blend as
(tc^p + tm^p)^(1/p) (``moe_s``, ``MOE_BLEND``). The GPU's part of a step costs the sum plus a fixed
time (the small kernels of every layer) and a small per-sequence time. Weights are read once per step whatever the batch; attention reads each
scheduled request's KV cache once. The scheduler hands over a ``StepWork`` summary, so a step
costs O(1) here whatever the batch size.

How vLLM runs the step changes it (``Execution``): the step's token count is padded up to the next
CUDA-graph capture size; a step with no graph (above the largest capture size, or
``enforce_eager``) cannot be faster than launching every layer's kernels from the CPU, and a
piecewise-graph step (mixed prefill and decode, or vLLM 0.10) than launching each layer's
attention between the graphed pieces. The engine core's own CPU work per step adds to the GPU
time, or overlaps it with async scheduling: ``simulator.engine.host`` owns that side.

The formula is written once, as the module-level functions below over a flat parameter vector
(``CostModel.params``, slots ``simulator.engine.params.P``): ``step_time`` is what both engine steps price a step with
(the compiled step compiles these very functions), and ``CostModel.ops`` lists the same terms one
by one for ``servesim step-time --json``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from simulator.engine import rules
from simulator.engine.host import HostModel, engine_cpu_s, step_wall_s
from simulator.engine.params import DRAFT, PARAMS, P
from simulator.scenario.hardware import GPU
from simulator.scenario.memory import mxfp4_bytes_per_weight
from simulator.scenario.models import PLAIN_LAYER_SMALL_KERNELS, ModelArch, quant_scope, weight_format_bytes


@dataclass(frozen=True)
class StepWork:
    """What one engine step asks of the GPU, summed over its scheduled requests."""

    num_seqs: int = 0
    num_tokens: int = 0
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    context_tokens: int = 0  # sum over requests of tokens already in the KV cache (read by attention)
    attn_pairs: float = 0.0  # sum over requests of query-key pairs (causal within the chunk)
    num_sampled: int = 0  # requests that produce a token (run the LM head)
    swap_bytes: float = 0.0  # KV bytes copied between GPU and host memory in this step
    # sum over the requests that compute one token (a decode) of the tokens already in their KV
    # cache: what a mixed step's flash attention pays extra for (Execution.mixed_decode_rows)
    single_row_context: int = 0
    num_draft_tokens: int = 0  # speculative tokens verified (each runs the LM head too)
    num_loras: int = 0  # LoRA adapters the running requests use
    lora_loads: int = 0  # adapters loaded into a GPU slot before the step
    lora_disk_loads: int = 0  # of them, read from storage first (not in host memory)
    jit_s: float = 0.0  # seconds the engine core compiles kernels this step runs first (first_compile)

    @classmethod
    def of(
        cls, w, swap_bytes: float = 0.0, num_loras: int = 0, lora_loads: int = 0, lora_disk_loads: int = 0
    ) -> StepWork:
        """The work summed in a ``rules`` accumulator (``rules.add_request``, ``rules.add_decodes``)."""
        tokens, decode = int(w[rules.W_TOKENS]), int(w[rules.W_DECODE])
        return cls(
            num_seqs=int(w[rules.W_SEQS]),
            num_tokens=tokens,
            num_prefill_tokens=tokens - decode,
            num_decode_tokens=decode,
            context_tokens=int(w[rules.W_CONTEXT]),
            attn_pairs=rules.attn_pairs(w[rules.W_TXC], w[rules.W_TXT1]),
            num_sampled=int(w[rules.W_SAMPLED]),
            swap_bytes=swap_bytes,
            single_row_context=int(w[rules.W_SINGLE]),
            num_draft_tokens=int(w[rules.W_DRAFTS]),
            num_loras=num_loras,
            lora_loads=lora_loads,
            lora_disk_loads=lora_disk_loads,
        )


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak reached per operator class, and fixed overheads. Fitted by calibration."""

    # Defaults: round numbers read off H100 measurements of two dense models (see
    # benchmarks/RESULTS.md); a GPU with its own calibration file uses that instead.
    matmul_compute: float = 0.60
    matmul_memory: float = 0.85
    # vLLM's fused-MoE kernel (Triton; grouped GEMMs over the experts a step's tokens are routed
    # to), as fractions of the same peaks, combined by moe_s: fitted on that kernel run as vLLM
    # runs it on an H100 (data/profiles/moe/vllm_moe_h100-sxm.csv: the routed experts of
    # Qwen3-235B-A22B at TP8, GLM-4.5-Air at TP4, Qwen3-30B-A3B, a TP8 slice of DeepSeek-V3, 64 to
    # 8,192 tokens replayed from a CUDA graph; mean error 5.6% from 64 tokens up and 5.9% from 8,
    # against 14.7% and 14.0% for the max of the two at the rates once taken from PyTorch's grouped
    # GEMMs, 0.30 / 0.70; at 1-4 tokens the five kernels' own latency adds ~20 us, not modelled).
    moe_compute: float = 0.33
    moe_memory: float = 0.81
    attn_compute: float = 0.30
    attn_memory: float = 0.80
    step_overhead_s: float = 0.0
    per_seq_overhead_s: float = 7.0e-6
    # Small kernels (norms, rotary, cache write, attention launch, activation) per layer per step,
    # for a layer with vLLM's six such kernels; a layer with more (Qwen3's q/k norms) scales it.
    per_layer_overhead_s: float = 3.5e-5
    per_token_overhead_s: float = 0.0  # unfused elementwise work per token (not fitted by default)
    # How an operator's compute and memory times combine (roofline): 0, the longer of the two; p > 0,
    # their p-norm. A calibration of one's own may choose it (`servesim calibrate --roofline-blend
    # auto`: the exponent with the least error on the profiles); the built-in H200 file takes 3, every
    # other built-in file the max (docs/cost-model.md, "Near the ridge").
    roofline_blend: float = 0.0
    allreduce_latency_s: float = 1.0e-5
    # Share of the datasheet link bandwidth an all-reduce reaches: 302 of 450 GB/s on two NVLink-4
    # GPUs at 256 MiB (NCCL in a CUDA graph, data/profiles/allreduce/h200-x2.csv, whose 16 KiB
    # all-reduce takes 13 us; vLLM's own all-reduce for small messages is faster, hence 10 us above).
    allreduce_bandwidth: float = 0.67
    # An all-reduce's latency grows with the GPUs it joins (a ring has one more hop each): per GPU
    # beyond two, from NCCL in a CUDA graph on one 4-GPU NVLink-4 host (data/profiles/allreduce/
    # h200-x4.csv and h200-x2_4gpu-host.csv): 16-256 KiB take 10.9-13.9 us on 2 GPUs and
    # 16.4-18.8 us on 4, (16.5 - 11.0) / 2 = 2.75 us a GPU.
    allreduce_hop_s: float = 2.75e-6
    # A step without CUDA graphs is no faster than launching its kernels one by one from the host:
    # 20 us a kernel (median of the eager steps at batch <= 32 in data/profiles/compiled/, H100
    # host). A piecewise-graph step (attention launched between graphed pieces) adds 13.5 us a
    # layer over a full graph (graph_pieces against graph there, all batch sizes).
    eager_launch_s: float = 20e-6
    piecewise_layer_s: float = 13.5e-6
    # With enforce_eager vLLM neither compiles nor graphs: every kernel is launched through its
    # Python modules, slower than the plain PyTorch ops measured above. vLLM PR #10058 (V1, Llama-3.1-8B,
    # batch 8, 32 tokens in, 128 out; `benchmark_latency.py`) took 1.26 s a batch without graphs and
    # compilation against 1.04 s with them: 9.8 ms a step against 8.1, on a GPU that streams the
    # 16 GB of weights in under 8 ms (an H100: faster than an A100 can), where the GPU's own step is
    # ~6.5 ms. The eager step is the host's: 9.8 ms over 32 layers x 10 kernels, 30 us a kernel.
    vllm_eager_launch_s: float = 30e-6
    # SGLang runs a step with a prefill through its own model code, uncompiled and, before 0.5.10 (and
    # on AMD GPUs, with DP attention, for MLA models from 0.5.15), without graphs: kernel by kernel,
    # each launched through its Python modules (simulator.scenario.sglang.prefill_graph_max), counted
    # as the launch floors count them (small kernels and four GEMMs a layer, and the MoE path's
    # extra ones). On one GPU: fitted on a recorded pair of SGLang 0.5.16 servers on an H200, the
    # same requests with and without prefill graphs (data/e2e/h200_sgprefill_2026-12-01, Llama-3.1-8B:
    # 128-token prompts one at a time reached their first token 7.1 ms later without them; servesim
    # 7.0 ms at 38 us). Held out, Qwen3-32B's pair: 11.1 ms measured, 10.2 servesim; an MoE model's
    # eager layers launch far more than counted (Qwen3-30B-A3B: 42% early; docs/sglang.md).
    sglang_eager_launch_s: float = 38e-6
    # With tensor parallelism every layer's all-reduces wait for the slowest rank's launches: the time
    # a kernel grows by this share per doubling of the ranks. Fitted on the p50 TTFT of the SGLang
    # cookbook's 1k/8k runs at TP 8 (8 x B200, DeepSeek-R1 and Qwen3-235B-A22B; 8 x MI300X,
    # DeepSeek-V3.1: 1k-token prompts at one request in flight took 126-156 ms to a first token where
    # the GPU's work is 30-90 ms), the base above held; their other runs held out
    # (`python tools/validation/fit_gpu_family.py --eager` fits both).
    sglang_eager_tp_growth: float = 0.4
    # An MoE layer run without graphs also goes through its routing and experts' Python code (the
    # router's GEMM, top-k, the tokens' sort by expert, two Triton launches and the reduction, each a
    # call through torch's dispatcher): host time a layer beyond the kernels counted above, whoever
    # launches it (vLLM's and SGLang's fused-MoE paths are the same design). Fitted on a recorded pair
    # of SGLang 0.5.16 servers on one H200 (data/e2e/h200_sgprefill3_2026-12-01: Qwen3-30B-A3B, 48 MoE
    # layers, 128- and 1,024-token prompts one at a time reached their first token 36.9 and 34.5 ms
    # later without prefill graphs, where dense models' pairs show 7-11 ms; `python
    # tools/validation/fit_gpu_family.py --eager`). The stack sampler on vLLM 0.26's offline engine
    # (data/profiles/moe_steps/) puts half of such a step's host time in the MoE path. Priced where it
    # was measured, one Hopper GPU (fused_moe_eager_layers).
    moe_eager_layer_s: float = 800e-6
    # The same in vLLM's steps above their largest graph, whose launches now cost a part a request and
    # layer too (simulator.scenario.hosts.HostCosts.engine_eager_seq_layer_s): fitted on the recorded
    # Qwen3-30B-A3B server's decode-heavy run (h200_moe_2026-11-30, 671-768 running; 0, 100 and 200 us
    # give +5.6%, -1.9% and -8.5% in throughput), which became a calibration run. DeepSeek-V2-Lite's
    # (h200_mla_2026-11-30, held out) stays 44% high, as before: its MoE layers take about twice the
    # host time (data/profiles/README-measurements.md, "What a step without graphs waits on").
    vllm_moe_eager_layer_s: float = 100e-6
    # DeepSeek-V3-architecture MoE layers (MLA, FP8 block-scaled experts: the activations' per-group
    # quantization and the scales' handling around each expert matmul) take more time a layer still,
    # whatever the batch, in small-kernel equivalents a layer. The default is fitted on the one public
    # vLLM run of DeepSeek-R1 at a few requests in flight on a Hopper GPU (GPUStack, 8 x H200, ShareGPT
    # at 4 in flight, runs.yaml: its TPOT was 40% above servesim's, where the weights, all-reduces and
    # small kernels give 10.7 ms a step); the other DeepSeek-R1 runs, vLLM's and SGLang's, are held out
    # (closer with it: vLLM's 2K-token burst from 27% to 23% fast in throughput, SGLang's runs from a
    # median of 177% to 114%). A GPU whose fit runs separate it from the per-layer time (two models,
    # one of them such: the B200's SGLang cookbook runs) has its own (tools/validation/fit_gpu_family.py).
    fp8_mla_moe_kernels: float = 20.0


@dataclass(frozen=True)
class Execution:
    """How the engine runs a step on the GPU: CUDA graphs (the largest captured step in tokens, 0
    for none; capture sizes go 1, 2, 4, then by 8, and by 16 from ``capture_by16_from``, or one by
    one up to ``capture_each`` first (vLLM's --performance-mode interactivity); full graphs
    for pure-decode steps or piecewise graphs only). The default is the GPU alone, as the profiles
    measure it: every shape graphed, nothing padded."""

    max_capture_size: int = 1 << 30
    capture_by16_from: int = 1 << 30
    capture_each: int = 0
    full_decode_graphs: bool = True
    pad: bool = False
    enforce_eager: bool = False  # no graphs and no compilation: kernels launched at vllm_eager_launch_s
    # The largest step with a prefill replayed from piecewise graphs (None: max_capture_size, as vLLM
    # captures them; SGLang: simulator.scenario.sglang.prefill_graph_max, 0 for none).
    prefill_capture_size: int | None = None
    # Whose eager kernels a step without graphs launches: vLLM's compiled model (eager_launch_s a
    # kernel) or SGLang's uncompiled one (sglang_eager_launch_s).
    framework: str = "vllm"
    # In a step that also carries a prefill chunk, the extra query rows each one-token request's
    # attention costs (FA2_MIXED_DECODE_ROWS where vLLM runs FlashAttention-2; 0: none).
    mixed_decode_rows: float = 0.0


# A tensor-parallel group larger than the GPUs the fast interconnect joins (GPU.link_group) all-reduces
# over PCIe with NCCL: vLLM disables its custom all-reduce on more than two GPUs without NVLink
# (custom_all_reduce.py, "not supported on more than two PCIe-only GPUs"; vllm-project/vllm#56128),
# and NCCL's all-reduce of 4-32 KB inside a CUDA graph takes 19-24 us on four PCIe-switched GPUs
# (github.com/haohervchb/sglang-V100 pull 2, measured table).
PCIE_ALLREDUCE_LATENCY_S = 20e-6


# FlashAttention-2's variable-length kernel, given one-token requests and a prefill chunk in one
# call (vLLM's mixed step), computes each one-token request's query row as part of a whole tile of
# rows: measured on an H100 with PyTorch's FlashAttention-2 (data/profiles/attention/
# h100-sxm_mixed.csv, 15 calls, heads 40/8, 32/8 and 24/2), the extra over the decodes and the chunk
# run apart is what 106 more query rows per decode cost at the attention rate (least squares, MAPE
# 13%). A step of decodes alone packs a KV group's query heads into the tile instead. FA2's tile is
# 128 rows on Ampere and Hopper alike; vLLM runs FA2 on compute capability 8.x and FlashAttention-3
# (which packs the query heads of a KV group into the tile in mixed calls too) on Hopper.
FA2_MIXED_DECODE_ROWS = 106.0
# vLLM's FlashAttention-3 (Hopper), called as vLLM calls it (paged KV of 16-token blocks), on an
# H100 (data/profiles/attention/vllm_attention_h100-sxm.csv, `python -m tools.profiler --mode vllm_attention`):
# decodes read the KV cache at 2.91 TB/s (median of 15 calls of 0.36-0.38 ms, 0.87 of the
# datasheet), prefill chunks reach 626 TFLOP/s (median of 9 calls, 0.63 of peak), and decodes
# batched with a chunk cost no more than apart (mixed / apart 0.95-1.07, median 0.98, over the 15
# calls of 0.4 ms or more): FA3 packs a KV group's query heads into the tile in mixed calls too. The step profiles' attention is
# PyTorch's FlashAttention-2 (0.32 / 0.75 in the H100 calibration); where vLLM runs FA3, these
# rates replace it.
FA3_ATTN_COMPUTE = 0.63
FA3_ATTN_MEMORY = 0.87
# FlashAttention-2 on the GPUs it was written for (compute capability 8.x): its paper (Dao 2023,
# arXiv 2307.08691) reports 50-73% of the A100's peak in the forward pass; 0.60, the middle. No
# 8.x GPU was at hand to measure on; the H100 measurements above run FA2 on a GPU it was not tuned
# for (0.32).
FA2_ATTN_COMPUTE = 0.60
# vLLM's Triton unified attention (TRITON_ATTN), which vLLM runs where FlashAttention cannot take a
# model's attention sinks (gpt-oss on Ampere and Ada: ``versions.attention_kernel``), prefills far
# below FlashAttention's rate. Measured on an H200 with vLLM 0.26.0 run on that backend, gpt-oss-20b's
# prefills of 16k and 32k tokens in chunks of 8,192 took 426 and 1,931 ms more than its 8k one, where
# FlashAttention-3 took 139 and 491 (data/profiles/served_steps/gptoss20b_prefill_*.json): 6.3% of the
# bf16 peak against FA3's 63% (which prices the FA3 prefills within 2-7%). On the A100, the GPU vLLM
# runs it on for gpt-oss, it reaches a larger share of a smaller peak: 0.11, fitted on one public run
# (GPUStack's gpt-oss-120b burst of 32k-token prompts, output throughput and mean TTFT, which the
# FA2 rate had 79% fast and 43% early); held out, the other three such bursts (docs/validation.md).
TRITON_ATTN_COMPUTE = 0.11


def overhead_s(cp, num_seqs, num_tokens):
    return cp[P.FIXED_S] + cp[P.PER_SEQ_S] * num_seqs + cp[P.PER_TOKEN_S] * num_tokens


def linear_work(cp, num_tokens):
    """FLOPs and bytes of the dense linear layers (weights once, activations per token)."""
    return 2.0 * num_tokens * cp[P.LIN_PARAMS], cp[P.LIN_PARAMS] * cp[P.WEIGHT_BYTES] + num_tokens * cp[
        P.ACT_BYTES_PER_TOKEN
    ]


def attention_work(cp, num_seqs, num_tokens, context_tokens, attn_pairs, single_row_context):
    """FLOPs (query-key pairs) and bytes (each scheduled request's KV once) of attention; in a step
    with a prefill chunk (more tokens than requests), each one-token request's keys are paired with
    ``mixed_rows`` more query rows (``FA2_MIXED_DECODE_ROWS``).

    A hybrid model's sliding-window layers (``WINDOW`` > 0) pair each query with at most the window's
    keys and read at most the window of each request's KV: bounded over the step as a whole (pairs
    by tokens x window, KV by requests x (window - 1) + new tokens), which is exact when every request's
    context is past the window or none is, and an overstatement between. Attention sinks (one logit
    per head added to the softmax) cost nothing here."""
    if num_tokens > num_seqs:
        attn_pairs += cp[P.MIXED_ROWS] * single_row_context
    flops = attn_pairs * cp[P.ATTN_FLOPS_PER_PAIR]
    nbytes = (context_tokens + num_tokens) * cp[P.KV_BYTES_PER_TOKEN]
    if cp[P.WINDOW] > 0.0:
        flops += min(attn_pairs, num_tokens * cp[P.WINDOW]) * cp[P.WINDOW_FLOPS_PER_PAIR]
        window_kv = min(context_tokens + num_tokens, num_seqs * (cp[P.WINDOW] - 1.0) + num_tokens)
        nbytes += window_kv * cp[P.WINDOW_KV_BYTES_PER_TOKEN]
    return flops, nbytes


def moe_work(cp, num_tokens):
    """FLOPs and bytes of the routed and shared experts on the busiest GPU: the bytes of the distinct
    experts the step's tokens touch (expected number under uniform routing; a dummy-weight server
    whose router has a bias sends every token to the same experts: ``NUM_EXPERTS`` is then
    ``EXPERTS_PER_TOKEN``).

    Split by tensor parallelism every GPU holds a slice of every expert and does an equal share. With
    expert parallelism over R ranks (``EXPERT_RANKS``) each rank holds whole experts, E / R of them (a
    slice of each within the rank): the step waits for the rank whose experts the tokens touch most.
    Its experts touched and the routed tokens it computes are each taken as their mean over the ranks
    plus ``EXPERT_RANKS_MAX_Z`` standard deviations (binomial counts; the expected largest of R draws,
    in the normal approximation), at most all of them; 1 rank: the mean, exactly."""
    k, n = cp[P.EXPERTS_PER_TOKEN], cp[P.NUM_EXPERTS]
    routed = k  # experts a token computes on the busiest GPU
    q = 1.0 - (1.0 - k / n) ** float(num_tokens)  # one expert touched by the step
    touched = n * q
    ranks = cp[P.EXPERT_RANKS]
    if ranks > 1.0 and num_tokens > 0:
        z, pairs = cp[P.EXPERT_RANKS_MAX_Z], num_tokens * k
        busiest = pairs / ranks + z * math.sqrt(pairs * (1.0 / ranks) * (1.0 - 1.0 / ranks))
        routed = (busiest if busiest < pairs else pairs) / num_tokens
        held = n / ranks
        touched = held * q + z * math.sqrt(held * q * (1.0 - q))
        if touched > held:
            touched = held
    flops = 2.0 * num_tokens * cp[P.MOE_LAYERS] * (routed * cp[P.EXPERT_PARAMS] + cp[P.SHARED_PARAMS])
    nbytes = cp[P.MOE_LAYERS] * (touched * cp[P.EXPERT_PARAMS] + cp[P.SHARED_PARAMS]) * cp[P.EXPERT_WEIGHT_BYTES]
    return flops, nbytes


def expert_params(m: ModelArch, tp: int, expert_parallel: int, dummy_weights: bool) -> dict[str, float]:
    """The MoE layers' constants of the cost vector (``moe_work``'s), on ``tp`` GPUs whose experts are
    dealt to ``expert_parallel`` groups."""
    return {
        "moe_layers": m.num_moe_layers,
        "experts_per_token": m.experts_per_token,
        # A dummy-weight server whose router has a bias routes every token to the same experts
        # (ModelArch.router_bias): as if there were only experts_per_token of them.
        "num_experts": m.experts_per_token if dummy_weights and m.router_bias else m.num_experts,
        # Expert parallelism over R groups: each expert split over a group's tp / R GPUs alone.
        "expert_params": m.expert_params * expert_parallel / tp,
        "expert_ranks": expert_parallel,
        "expert_ranks_max_z": expected_largest_normal(expert_parallel),
        "shared_params": m.num_shared_experts * m.expert_params / tp,
    }


def expected_largest_normal(n: int) -> float:
    """The expected largest of ``n`` independent standard normal draws (0 for one; 1.424 for 8),
    integrated on a fixed grid."""
    if n <= 1:
        return 0.0
    x = np.linspace(-8.0, 8.0, 16001)
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = (np.cumsum(pdf) - 0.5 * pdf) * (x[1] - x[0])  # trapezoids
    return float(np.sum(x * n * pdf * cdf ** (n - 1)) * (x[1] - x[0]))


# How the fused-MoE kernel's compute and weight streaming combine: (tc^p + tm^p)^(1/p), between their
# sum (p = 1) and the roofline's max (p -> inf). Between a few hundred and a few thousand tokens the
# kernel is bound by neither alone (tiles padded per expert, weights re-read per tile); p = 1.5
# fits vLLM's kernel on an H100 best (p 1.5: 6.4% mean error; 2: 7.4%; 3: 9.5%; the max: 12.7% at
# its own best rates), each with its best pair of rates (see Efficiency.moe_compute).
MOE_BLEND = 1.5


def moe_s(cp, num_tokens):
    """Seconds of the routed and shared experts (moe_work at the fused-MoE rates, MOE_BLEND)."""
    flops, nbytes = moe_work(cp, num_tokens)
    tc, tm = flops / cp[P.MOE_FLOPS], nbytes / cp[P.MOE_BW]
    return (tc**MOE_BLEND + tm**MOE_BLEND) ** (1.0 / MOE_BLEND)


def allreduce_s(cp, num_tokens):
    """Tensor-parallel all-reduces: bytes over the interconnect plus a latency per all-reduce."""
    return (
        num_tokens * cp[P.ALLREDUCE_BYTES_PER_TOKEN] / cp[P.INTERCONNECT_BW]
        + cp[P.ALLREDUCE_COUNT] * cp[P.ALLREDUCE_LATENCY_S]
    )


def lm_head_work(cp, num_sampled):
    return num_sampled * cp[P.LM_FLOPS], cp[P.LM_BYTES]


def roofline(work, flops_per_s, bytes_per_s, blend):
    """Seconds of one operator class: the slower of its compute and its memory traffic (``blend``
    0), or their ``blend``-norm, (tc^p + tm^p)^(1/p), which the measured steps of a GPU may prefer:
    near the ridge, where the two are alike, a real kernel is bound by neither alone and takes
    longer than either (``Efficiency.roofline_blend``)."""
    tc, tm = work[0] / flops_per_s, work[1] / bytes_per_s
    if blend == 0.0:
        return max(tc, tm)
    return (tc**blend + tm**blend) ** (1.0 / blend)


def padded_tokens(cp, num_tokens):
    """The step's token count as the GPU runs it: padded up to the next CUDA-graph capture size
    (1, 2, 4, then multiples of 8, and of 16 from ``graph_by16`` on; every size up to
    ``graph_each``), unless above the largest."""
    T = num_tokens
    if cp[P.PAD] == 0.0 or cp[P.GRAPH_MAX] < T or T <= 2 or cp[P.GRAPH_EACH] >= T:
        return T
    if T <= 4:
        return 4
    step = 16 if cp[P.GRAPH_BY16] < T else 8
    return min(((T + step - 1) // step) * step, int(cp[P.GRAPH_MAX]))


def uniform(cp, num_seqs, num_tokens):
    """Whether a step is decodes alone (with their drafts), the steps a full CUDA graph captures."""
    return num_tokens == num_seqs or num_tokens == num_seqs * (1.0 + cp[P.SPEC_TOKENS])


def eager(cp, num_seqs, num_tokens):
    """Whether a step runs without a CUDA graph: decodes (with their drafts) above the largest
    capture size, a step with a prefill above the largest piecewise one (every step when eager)."""
    return num_tokens > (cp[P.GRAPH_MAX] if uniform(cp, num_seqs, num_tokens) else cp[P.PREFILL_GRAPH_MAX])


# vLLM's MXFP4 mixture-of-experts path on Hopper (the Triton kernels it vendors under
# third_party/triton_kernels) routes a step's tokens with Triton kernels that take the routing
# bitmatrix's row stride, the step's token count rounded up to 32, as a compile-time constant
# (topk_details/_topk_forward.py, ``stride_rn``; reduce_bitmatrix.py, ``stride_bn``), and Triton
# compiles an integer argument apart when it is divisible by 16. A step replayed from a CUDA graph
# runs kernels compiled at capture; a step run without one whose token count falls in a 32-token
# bucket, divisible by 16 or not, that the server has not run before waits while the engine core
# compiles them (vLLM 0.26's JIT monitor names them: "_topk_forward", "_sum_bitmatrix_rows").
SHAPE_BUCKET = 32
SHAPE_DIVISOR = 16

# The experts' two matmuls on that path (matmul_ogs.py: the gate-and-up projection with its SwiGLU
# fused, then the down projection) are Triton kernels too, compiled apart for each row block
# (opt_flags.py: ``block_m``, the tokens per expert rounded up to a power of two, 16 to 128) and for
# each of two integer arguments divisible by 16 or not: the rows (the step's tokens for the first,
# tokens x experts per token for the second) and the grid's row blocks. The start-up's profile step
# and the CUDA-graph captures compile the variants of their sizes; a step run without graphs whose
# variant no step before it ran waits for it as well. Measured on an H200 (tools/e2e/jit_probe.py,
# data/profiles/jit_probe/): the rule named every variant 51 steps compiled, and no other.
MATMUL_KERNELS = 2  # the gate-and-up projection (0), the down projection (1)
MATMUL_BLOCKS = 4  # row blocks 16, 32, 64, 128
MATMUL_VARIANTS = MATMUL_KERNELS * MATMUL_BLOCKS * 4  # slots in front of the shape keys (new_shapes)


def token_key(num_tokens):
    """The kernels' compile key of a step of ``num_tokens`` tokens (``shape_key``)."""
    return 2 * ((num_tokens + SHAPE_BUCKET - 1) // SHAPE_BUCKET) + (1 if num_tokens % SHAPE_DIVISOR == 0 else 0)


def shape_key(cp, num_seqs, num_tokens):
    """The compile key of a step whose kernels the engine core compiles on first use (``token_key``),
    or -1: a step replayed from a CUDA graph, or an engine without such kernels (``JIT_SHAPE_S`` 0)."""
    if cp[P.JIT_SHAPE_S] == 0.0 or num_tokens == 0 or not eager(cp, num_seqs, num_tokens):
        return -1
    return token_key(num_tokens)


def matmul_variant(kernel, num_tokens, experts, per_token):
    """The slot (0 to ``MATMUL_VARIANTS`` - 1) of the compiled variant expert matmul ``kernel`` (0:
    gate-and-up, 1: down) runs for a step of ``num_tokens`` tokens, ``experts`` experts on the GPU and
    ``per_token`` of them per token: its row block (``block_m``: the rows per expert, rounded up to a
    power of two within 16-128), then whether its rows and its grid's row blocks divide by 16."""
    rows = per_token * num_tokens
    per_expert = max(1, rows // experts)
    block, b = 16, 0
    while block < per_expert and block < 128:
        block, b = 2 * block, b + 1
    grid = rows if rows <= experts else (rows - experts + block) // block + experts - 1
    kernel_rows = num_tokens if kernel == 0 else rows
    return (kernel * MATMUL_BLOCKS + b) * 4 + (2 if kernel_rows % 16 == 0 else 0) + (1 if grid % 16 == 0 else 0)


def key_slot(shapes, key):
    """The slot of compile key ``key`` (``token_key``) in ``shapes`` (``new_shapes``): after the matmul
    variants' slots, the last one standing for any key beyond."""
    return MATMUL_VARIANTS + min(key, len(shapes) - 1 - MATMUL_VARIANTS)


def mark_variants(cp, shapes, num_tokens):
    """Marks the expert matmuls' variants of a step of ``num_tokens`` tokens compiled in ``shapes``
    (``new_shapes``); the seconds the engine core waits for those it had not (``JIT_VARIANT_S`` each)."""
    experts = max(1, int(cp[P.NUM_EXPERTS] / max(cp[P.EXPERT_RANKS], 1.0)))
    per_token = int(cp[P.EXPERTS_PER_TOKEN])
    s = 0.0
    for kernel in range(MATMUL_KERNELS):
        v = matmul_variant(kernel, num_tokens, experts, per_token)
        if shapes[v] == 0:
            shapes[v] = 1
            s += cp[P.JIT_VARIANT_S]
    return s


def first_compile(cp, shapes, num_seqs, num_tokens):
    """Seconds a step waits while the engine core compiles the kernels it is the first to run: its
    compile key (``shape_key``: ``JIT_SHAPE_S``) and the expert matmuls' variants (``mark_variants``)
    new to the engine, marked in ``shapes`` (``new_shapes``) so that later steps find them; 0 for a
    step replayed from a CUDA graph or an engine without such kernels."""
    k = shape_key(cp, num_seqs, num_tokens)
    if k < 0:
        return 0.0
    k = key_slot(shapes, k)
    s = mark_variants(cp, shapes, num_tokens)
    if shapes[k] == 0:
        shapes[k] = 1
        s += cp[P.JIT_SHAPE_S]
    return s


def new_shapes(cp, cfg: rules.SchedulerConfig) -> np.ndarray:
    """What a new engine has compiled (1) or not (0): the expert matmuls' variants
    (``MATMUL_VARIANTS`` slots, ``matmul_variant``), then every compile key a step may have
    (``shape_key``). Compiled: those of its start-up's profile run (a step of the whole token budget,
    run without graphs), of its CUDA-graph captures (the variants of every captured size), of the
    token counts it is told it ran before (``jit_seen_tokens``), or all of them (``jit_warm``: a
    server that has run every shape, or whose Triton cache holds their kernels). One slot for an
    engine without such kernels (``shape_key`` is -1 throughout)."""
    if cp[P.JIT_SHAPE_S] == 0.0:
        return np.ones(1, np.int64)
    most = cfg.max_num_batched_tokens + cfg.max_num_seqs * (cfg.spec_tokens + 1)
    seen = np.full(MATMUL_VARIANTS + token_key(most) + 2, 1 if cfg.jit_warm else 0, np.int64)
    for t in (cfg.max_num_batched_tokens, *cfg.jit_seen_tokens):
        seen[key_slot(seen, token_key(t))] = 1
        mark_variants(cp, seen, t)
    for t in range(1, int(cp[P.GRAPH_MAX]) + 1):
        if padded_tokens(cp, t) == t:  # a captured size
            mark_variants(cp, seen, t)
    return seen


def launch_s(cp, num_seqs, num_tokens):
    """Seconds the host spends launching a step run without a graph (``eager``) layer by layer: its
    kernels one by one, and a part per request it runs; none for a step replayed from a graph."""
    if not eager(cp, num_seqs, num_tokens):
        return 0.0
    return cp[P.EAGER_FLOOR_S] + cp[P.EAGER_SEQ_S] * num_seqs


def graphed_s(cp, num_seqs, num_tokens, gpu):
    """The GPU's time ``gpu`` as the step is launched: without a graph (decodes above the largest
    capture size, a step with a prefill above the largest piecewise one, or eager), no less than
    launching every kernel from the host; with piecewise graphs (a step with a prefill, or decodes
    without full decode graphs), plus the gaps around each layer's eagerly launched attention; with
    a full graph, as is. vLLM captures both kinds up to one size; SGLang captures decodes alone, and
    prefills (from 0.5.10) up to a size of their own (``simulator.scenario.sglang.prefill_graph_max``)."""
    if eager(cp, num_seqs, num_tokens):
        return max(gpu, launch_s(cp, num_seqs, num_tokens))
    if cp[P.FULL_DECODE_GRAPHS] == 0.0 or not uniform(cp, num_seqs, num_tokens):
        return gpu + cp[P.PIECEWISE_FLOOR_S]
    return gpu


def lora_s(cp, num_tokens, num_loras):
    """Seconds of the LoRA kernels (a shrink and an expand per adapted linear layer, every token at
    max_lora_rank, each adapter in use read once), with adapters in use (none: the kernels are skipped)."""
    if num_loras == 0:
        return 0.0
    work = (num_tokens * cp[P.LORA_FLOPS_PER_TOKEN], num_loras * cp[P.LORA_BYTES_PER_ADAPTER])
    return cp[P.LORA_FIXED_S] + roofline(work, cp[P.MATMUL_FLOPS], cp[P.MATMUL_BW], cp[P.ROOFLINE_BLEND])


def gpu_s(
    cp,
    num_seqs,
    num_tokens,
    context_tokens,
    attn_pairs,
    num_sampled,
    swap_bytes,
    single_row_context,
    draft_tokens,
    num_loras,
):
    """Seconds the GPU works on one step (the sum of the terms above, in this order); the LM head
    runs for every sampled request and every draft token verified."""
    T = padded_tokens(cp, num_tokens)
    t = overhead_s(cp, num_seqs, T)
    if T:
        t += roofline(linear_work(cp, T), cp[P.MATMUL_FLOPS], cp[P.MATMUL_BW], cp[P.ROOFLINE_BLEND])
        if num_loras:
            t += lora_s(cp, T, num_loras)
        t += roofline(
            attention_work(cp, num_seqs, num_tokens, context_tokens, attn_pairs, single_row_context),
            cp[P.ATTN_FLOPS],
            cp[P.ATTN_BW],
            cp[P.ROOFLINE_BLEND],
        )
        if cp[P.MOE_LAYERS] != 0.0 or cp[P.ALLREDUCE_COUNT] != 0.0:
            s = 0.0
            if cp[P.MOE_LAYERS] != 0.0:
                s += moe_s(cp, num_tokens)
            if cp[P.ALLREDUCE_COUNT] != 0.0:
                s += allreduce_s(cp, T)
            t += s
    if num_sampled:
        t += roofline(
            lm_head_work(cp, num_sampled + draft_tokens), cp[P.MATMUL_FLOPS], cp[P.MATMUL_BW], cp[P.ROOFLINE_BLEND]
        )
    if swap_bytes:
        t += swap_bytes / cp[P.HOST_BW]
    return t


def step_time(
    cp,
    num_seqs,
    num_tokens,
    context_tokens,
    attn_pairs,
    num_sampled,
    swap_bytes,
    single_row_context,
    draft_tokens,
    num_loras,
    lora_loads,
    lora_disk_loads,
    jit_s,
):
    """Seconds one engine step takes: the GPU's time (with a piecewise graph's gaps) and, with
    speculative decoding, the drafter's, the launches of a step without a graph (``launch_s``) and
    the engine core's CPU work as they meet (``host.step_wall_s``); the step first waits for the
    LoRA adapters it loads, and for the kernels the engine core compiles for it first (``jit_s``
    seconds, ``first_compile``)."""
    g = gpu_s(
        cp,
        num_seqs,
        num_tokens,
        context_tokens,
        attn_pairs,
        num_sampled,
        swap_bytes,
        single_row_context,
        draft_tokens,
        num_loras,
    )
    launch = launch_s(cp, num_seqs, num_tokens)
    if launch == 0.0:
        g = graphed_s(cp, num_seqs, num_tokens, g)
    if cp[P.SPEC_TOKENS] != 0.0:
        g += draft_s(cp, num_seqs, num_tokens, context_tokens, attn_pairs, num_sampled, single_row_context)
    load = lora_loads * cp[P.LORA_LOAD_S] + lora_disk_loads * cp[P.LORA_DISK_LOAD_S] + jit_s
    return load + step_wall_s(cp, g, engine_cpu_s(cp, num_seqs, num_tokens), launch)


def draft_s(cp, num_seqs, num_tokens, context_tokens, attn_pairs, num_sampled, single_row_context):
    """Seconds the drafter takes to propose the next drafts of the ``num_sampled`` requests that
    sampled: an n-gram lookup costs host time per request; a draft model (an EAGLE head, an MTP
    layer, a small model) runs one pass over the step's tokens, then one pass of a token per
    request for each further draft, each launched as its own (graphed) forward, and each costing the
    host its own preparation and sampling. The further passes' context is the step's (an upper bound
    where prefill chunks are in it)."""
    if num_sampled == 0:
        return 0.0
    t = cp[P.SPEC_HOST_SEQ_S] * num_sampled
    if cp[P.DRAFT_MODEL] != 0.0:
        t += cp[P.SPEC_TOKENS] * cp[P.DRAFT_PASS_S]
        dp = cp[DRAFT:]
        first = gpu_s(dp, num_seqs, num_tokens, context_tokens, attn_pairs, num_sampled, 0.0, single_row_context, 0, 0)
        t += graphed_s(dp, num_seqs, num_tokens, first)
        n = num_sampled
        one = gpu_s(dp, n, n, context_tokens, float(context_tokens) + n, n, 0.0, context_tokens, 0, 0)
        t += (cp[P.SPEC_TOKENS] - 1.0) * graphed_s(dp, n, n, one)
    return t


# Small kernels a layer adds beyond a plain dense layer's (simulator.scenario.models.PLAIN_LAYER_SMALL_KERNELS):
# a mixture-of-experts layer's router, top-k, token sorting and expert-output reduction, less the
# dense MLP's activation it does without; multi-head latent attention's extra norms, rotary split
# and latent up-projections. The MoE count is fitted on the recorded vLLM 0.26 Qwen3-30B-A3B
# calibration runs at 1-80 requests in flight (data/e2e/, H200): with 4, their TPOT came out 11-24%
# slow; with 1, 2-5% (the held-out runs at 45-64 in flight: 4-8%).
MOE_LAYER_KERNELS = 1
MLA_LAYER_KERNELS = 4
# MXFP4 experts on a GPU without FP4 tensor cores (vLLM's weight-only Triton path on Hopper: the
# routing's top-k, bitmatrix and index kernels and the weights' upcast) take more time a layer than
# the small kernels above, in small-kernel equivalents, divided among the tensor-parallel GPUs; and
# the fraction of HBM bandwidth at which that path (vLLM 0.26's Triton matmul_ogs kernel) streams the
# experts' weights, in place of Efficiency.moe_memory (vLLM's bf16/fp8 fused-MoE kernel, fitted on an
# H100). Both fitted together on two decode steps of gpt-oss-120b on an H200 with its routing spread
# over the experts (router logits drawn at random, as a trained checkpoint's spread): one request at
# 8k of context (3.80 ms, data/e2e/h200_gptoss_noise2_2026-11-29) and 16 in flight at 1k/1k (12.82 ms,
# h200_gptoss_noise_2026-11-29). Held out, the same servers' steps at 1, 4, 16, 64 and 128 in flight
# and gpt-oss-20b's at 1, 4, 64 and 128: median error 6.2%, the worst -13.8% (20b at 128), where the
# earlier fit (9 kernels on dummy-weight routing, which reads a few experts whatever the batch, and
# 0.61 on the 16-in-flight step alone) was 24-28% slow at one request. The division by TP follows
# the public TP2 and TP8 runs (H100 TP2 at 4 in flight, H200 TP8 at 8, runs.yaml), whose layers are
# not slower than the weights and all-reduces alone explain, and a recorded TP2 server held out
# (gpt-oss-120b on 2 x H200, data/e2e/h200x2_gptoss_tp2_2026-11-29: decode steps at 4 to 128 in
# flight 4-8% longer than servesim's). Why the time divides so is not known. Fitted again (3.0 and
# 0.54 before) on the same two steps when the H200's calibration took vLLM's served steps
# (simulator/data/calibration/h200.yaml: the dense weights streamed slower, a GEMM near its ridge
# dearer): both within 0.4%.
MXFP4_WEIGHT_ONLY_KERNELS = 2.25
MXFP4_WEIGHT_ONLY_MOE_MEMORY = 0.54
# The fraction of the 16-bit peak at which that path multiplies the experts in a prefill, in place
# of Efficiency.moe_compute (vLLM's bf16/fp8 fused-MoE kernel, 0.33): fitted on one step, gpt-oss-120b's
# 8,180-token prefill chunk with the routing spread (178 ms: data/e2e/h200_gptoss_noise_2026-11-29,
# 0.33 gave 228). Held out: the same server's chunk with 63 requests decoding beside it (181.5 ms),
# gpt-oss-20b's chunk (109 ms: +6%), both models' steps of eight 1k prompts (162 and 95 ms: +2%, +12%;
# 0.33 gave +34% to +47%), and a blind recording made after the choice
# (data/e2e/h200_gptoss_blind_2026-12-01: 8k/1k at 4 and 16 in flight, p50 TTFT +15% and -2%, against
# +46% and +26% at 0.33). GPUStack's public H100 bursts of long prompts (vLLM 0.10.2/0.11, real
# weights) come out faster with it, 34-81% in throughput (14-54% at 0.33), as that machine's dense-model bursts do
# (docs/validation.md, "Bursts of long prompts on GPUStack's H100").
MXFP4_WEIGHT_ONLY_MOE_COMPUTE = 0.46
# An Ampere GPU runs MXFP4 experts through another kernel (Marlin), measured apart nowhere here: it
# keeps the GPU's moe_memory and the per-layer count fitted before the routing could be spread (on
# dummy-weight gpt-oss steps on an H200), with which its held-out public runs at 4 in flight came
# within 5-8% in throughput and TPOT (GPUStack's A100 runs, runs.yaml).
MXFP4_MARLIN_KERNELS = 9.0
# FP8 dense linear layers on Hopper (vLLM's CUTLASS scaled-mm: weights per tensor, activations
# quantized per token as they run) reach this share of the fraction of peak that bf16 GEMMs reach:
# an 8,192-token prefill of Llama-3.1-8B took 0.67 of its bf16 time on one H200 (145 against 217 ms
# a step, the means of 12 steps each, data/e2e/h200_fp8_2026-12-02, the two servers one after the
# other), where the FP8 tensor cores' twice the rate at the bf16 fraction gives 0.50; with attention
# in bf16 the linear layers' share that fits is 0.82. Held out: Qwen3-32B's FP8 prefill on the same
# machine (623 ms a step, the median of 12; 598 priced). The experts of an FP8 MoE model keep their
# fused kernel's rates, and an MLA model (DeepSeek's block-scaled FP8) its rates as they were, with
# its attention's (``attention_peak``).
HOPPER_FP8_GEMM_SHARE = 0.82
GEMMS_PER_LAYER = 4  # q/k/v, output, gate/up and down projections


def weight_pricing(
    m: ModelArch, gpu: GPU, quantization: str, tp: int = 1, framework: str = "vllm"
) -> tuple[float, float, float, float]:
    """How a weight format is read and multiplied: bytes per weight of the dense linear layers and of
    the experts, and the peak FLOP/s of each. The format covers every linear layer, or a checkpoint's
    MLP only (``models.quant_scope``: gpt-oss's MXFP4 experts, NVFP4 with bf16 attention), the rest
    keeping the model's dtype. fp8 and int8 multiply at their own tensor-core rate (on Hopper, FP8 dense
    layers other than an MLA model's at ``HOPPER_FP8_GEMM_SHARE`` of it); int4 is
    dequantized to 16 bits; MXFP4 and NVFP4 multiply at the GPU's fp4 rate where it has one
    (Blackwell), and elsewhere are read at their width and multiplied at 16 bits (vLLM's weight-only
    Marlin kernels on Hopper). Under vLLM, MXFP4 experts are read as its kernel stores them, padded
    (``memory.mxfp4_bytes_per_weight``); SGLang's layouts are not modelled (read unpadded)."""
    fmt_bytes = weight_format_bytes(quantization, m.dtype_bytes)
    dense_rate = {"none": m.dtype, "int4": m.dtype, "mxfp4": "fp4", "nvfp4": "fp4"}.get(quantization, quantization)
    peak = gpu.flops(dense_rate)
    if quant_scope(m, quantization) == "all":
        hopper_fp8 = quantization == "fp8" and gpu.compute_capability == "9.0" and not m.is_mla
        share = HOPPER_FP8_GEMM_SHARE if hopper_fp8 else 1.0
        return fmt_bytes, fmt_bytes, peak * share, peak
    expert_bytes = fmt_bytes
    if quantization == "mxfp4" and m.is_moe and framework == "vllm":
        expert_bytes = mxfp4_bytes_per_weight(m, tp, gpu)
    return m.dtype_bytes, expert_bytes, gpu.flops(m.dtype), peak


def attention_peak(m: ModelArch, gpu: GPU, weights_peak: float) -> float:
    """The peak FLOP/s attention multiplies at: the activations' dtype's, whatever format the weights
    are read in (FP8 weights on one H200, data/e2e/h200_fp8_2026-12-02: the prefills' time left
    after the linear layers is bf16 attention's). An MLA model keeps its weights' rate
    (``weights_peak``): its prefill's attention is priced in the absorbed, latent form, whose FLOPs
    exceed those of the form vLLM and SGLang prefill in, and the two stand together until measured."""
    return weights_peak if m.is_mla else gpu.flops(m.dtype)


def eager_floor_s(e: Efficiency, x: Execution, kernels: float, moe_layers: int, tp: int) -> float:
    """Seconds the host takes to launch a step run without graphs, ``kernels`` kernels and
    ``moe_layers`` MoE layers' Python paths (``moe_eager_layer_s`` each; ``fused_moe_eager_layers``):
    vLLM's compiled model (``eager_launch_s`` a kernel), vLLM with ``enforce_eager``
    (``vllm_eager_launch_s``), or SGLang's model, never compiled (``sglang_eager_launch_s``, longer
    by ``sglang_eager_tp_growth`` for each doubling of the tensor-parallel ranks; the MoE layers'
    time is priced on one GPU only)."""
    if x.framework == "sglang":
        per_kernel = e.sglang_eager_launch_s * (1.0 + e.sglang_eager_tp_growth * math.log2(tp))
        return per_kernel * kernels + e.moe_eager_layer_s * moe_layers
    per_kernel = e.vllm_eager_launch_s if x.enforce_eager else e.eager_launch_s
    return per_kernel * kernels + e.vllm_moe_eager_layer_s * moe_layers


def small_kernels_per_layer(m: ModelArch) -> float:
    """Small (non-matmul) kernels per layer, averaged over the layers."""
    k = float(m.small_kernels_per_layer)
    if m.is_moe:
        k += MOE_LAYER_KERNELS * m.num_moe_layers / m.num_layers
    if m.is_mla:
        k += MLA_LAYER_KERNELS
    return k


def triton_mxfp4(gpu: GPU) -> bool:
    """Whether vLLM runs MXFP4 experts on ``gpu`` through its weight-only Triton kernel (Hopper,
    compute capability 9.0), whose rates were measured; else Marlin (Ampere) or FP4 tensor cores."""
    return gpu.compute_capability == "9.0"


# The engine core's seconds per new compile key (``shape_key``) on the reference host: a fixed part and
# a part per expert the routing kernels span (their width, the experts rounded up to 32); and per new
# variant of an expert matmul (``matmul_variant``). Fitted on the recorded gpt-oss-120b and -20b servers
# of data/e2e/h200_gptoss_2026-11-29, every pause of a step with a new key over the host's factor
# (`python tools/validation/fit_jit.py`, which reports the other recorded gpt-oss servers held out
# against it, and the offline compiles of data/profiles/jit_probe/).
JIT_SHAPE_S = 1.198
JIT_SHAPE_PER_EXPERT_S = 0.00380
JIT_VARIANT_S = 1.133


def jit_shape_s(m: ModelArch, gpu: GPU, quantization: str, framework: str) -> float:
    """The engine core's seconds compiling the kernels of a new step shape (``shape_key``) on the
    reference host: vLLM's MXFP4 experts through its Triton kernels (``triton_mxfp4``); 0 elsewhere
    (kernels compiled ahead, or not measured)."""
    if not jit_kernels(m, gpu, quantization, framework):
        return 0.0
    width = rules.cdiv(m.num_experts, SHAPE_BUCKET) * SHAPE_BUCKET
    return JIT_SHAPE_S + JIT_SHAPE_PER_EXPERT_S * width


def jit_variant_s(m: ModelArch, gpu: GPU, quantization: str, framework: str) -> float:
    """The engine core's seconds compiling a new variant of an expert matmul (``matmul_variant``) on
    the reference host, where ``jit_shape_s`` prices compiles at all; 0 elsewhere."""
    return JIT_VARIANT_S if jit_kernels(m, gpu, quantization, framework) else 0.0


def jit_kernels(m: ModelArch, gpu: GPU, quantization: str, framework: str) -> bool:
    """Whether the engine compiles kernels at a step shape's first use: vLLM running MXFP4 experts
    through its Triton kernels (``triton_mxfp4``)."""
    return framework == "vllm" and m.is_moe and quantization == "mxfp4" and triton_mxfp4(gpu)


def moe_rates(e: Efficiency, m: ModelArch, gpu: GPU, quantization: str) -> tuple[float, float]:
    """The fractions of the experts' peak FLOP/s and of HBM bandwidth at which a step's MoE layers
    multiply and stream their weights: ``MXFP4_WEIGHT_ONLY_MOE_COMPUTE`` and ``_MEMORY`` where MXFP4
    experts run through vLLM's Triton kernel on Hopper (compute capability 9.0: no FP4 tensor cores),
    else the GPU's ``moe_compute`` and ``moe_memory`` (an Ampere GPU runs them through Marlin, which
    nothing here measured apart)."""
    if m.is_moe and quantization == "mxfp4" and triton_mxfp4(gpu):
        return MXFP4_WEIGHT_ONLY_MOE_COMPUTE, MXFP4_WEIGHT_ONLY_MOE_MEMORY
    return e.moe_compute, e.moe_memory


def fused_moe_eager_layers(m: ModelArch, gpu: GPU, quantization: str, tp: int) -> int:
    """The MoE layers whose Python path a step without graphs pays (``Efficiency.moe_eager_layer_s``),
    where it was measured: all of them on one Hopper GPU (compute capability 9.0), but with MXFP4
    experts (another kernel library, whose recorded prefills without graphs show no such time: gpt-oss
    on an H200, data/e2e/). None elsewhere: on other GPUs the fused-MoE kernels differ and nothing
    measured it (the SGLang cookbook's TP8 runs on B200 and MI300X fit worse with it), and the public
    TP8 runs on Hopper GPUs fit worse with it too (GPUStack's SGLang bursts on 8 x H100 and 8 x H200:
    docs/sglang.md), where ``sglang_eager_tp_growth`` may already stand for it."""
    if not m.is_moe or quantization == "mxfp4" or gpu.compute_capability != "9.0" or tp != 1:
        return 0
    return m.num_moe_layers


def moe_path_kernels(e: Efficiency, m: ModelArch, gpu: GPU, quantization: str, tp: int) -> float:
    """Small-kernel equivalents a step's MoE layers add, all layers together: MXFP4 experts on a GPU
    without FP4 tensor cores (``MXFP4_WEIGHT_ONLY_KERNELS`` on Hopper, ``MXFP4_MARLIN_KERNELS`` on
    Ampere) and FP8 block-scaled experts of an MLA model on any GPU (``Efficiency.fp8_mla_moe_kernels``);
    0 elsewhere."""
    if not m.is_moe:
        return 0.0
    if quantization == "fp8" and m.is_mla:
        return e.fp8_mla_moe_kernels * m.num_moe_layers
    if quantization == "mxfp4" and "fp4" not in gpu.peak_flops:
        k = MXFP4_WEIGHT_ONLY_KERNELS if triton_mxfp4(gpu) else MXFP4_MARLIN_KERNELS
        return k * m.num_moe_layers / tp
    return 0.0


@dataclass(frozen=True)
class SpecCost:
    """What speculative decoding adds to a step's cost (``simulator.engine.speculative`` derives it): the
    drafts proposed per request, the drafter's host time per request, the draft model whose passes
    it runs (None: no model, as the n-gram drafter) and the host's time per pass."""

    tokens: int
    host_seq_s: float = 0.0
    draft: CostModel | None = None
    pass_s: float = 0.0  # the host's time per drafter pass


@dataclass(frozen=True)
class LoraCost:
    """What multi-LoRA adds to a step's cost (``simulator.engine.lora`` derives it): the LoRA kernels'
    launch-bound time per step, their FLOPs per token and the bytes of one adapter in use, and the
    time to put an adapter into a GPU slot and to read one from storage."""

    fixed_s: float
    flops_per_token: float
    bytes_per_adapter: float
    load_s: float
    disk_load_s: float


@dataclass(frozen=True)
class OpCost:
    name: str
    flops: float
    bytes: float
    seconds: float
    bound: str


class CostModel:
    """Roofline step cost for one model on one GPU type with tensor parallelism ``tp``."""

    params: np.ndarray  # the constants step_time reads (PARAMS order; a draft model's from DRAFT on)

    def __init__(
        self,
        model: ModelArch,
        gpu: GPU,
        tp: int = 1,
        eff: Efficiency | None = None,
        kv_dtype_bytes: float | None = None,
        quantization: str = "none",
        execution: Execution | None = None,
        host: HostModel | None = None,
        spec: SpecCost | None = None,
        lora: LoraCost | None = None,
        dummy_weights: bool = False,
        dp_attention: int = 1,
        expert_parallel: int = 1,
    ) -> None:
        self.model, self.gpu, self.tp = model, gpu, tp
        self.dummy_weights, self.dp_attention, self.expert_parallel = dummy_weights, dp_attention, expert_parallel
        self.spec, self.lora = spec, lora
        self.kv_dtype_bytes, self.quantization = kv_dtype_bytes, quantization
        self.eff = e = eff or Efficiency()
        self.execution = x = execution or Execution()
        self.host = host
        m = model
        L = m.num_layers
        kernels = small_kernels_per_layer(m)
        extra_kernels = moe_path_kernels(e, m, gpu, quantization, tp)
        # Linear layers that every token passes through (per GPU after the TP split).
        dense_mlp_layers = L - m.num_moe_layers
        wbytes, expert_wbytes, peak, moe_peak = weight_pricing(m, gpu, quantization, tp, x.framework)
        moe_compute, moe_memory = moe_rates(e, m, gpu, quantization)
        lin_params = (L * m.attn_params_per_layer + dense_mlp_layers * m.dense_mlp_params) / tp
        # SGLang's DP attention over D ranks (dp_attention = D; the attention's own TP is tp / D): each
        # GPU runs its rank's tokens through attention weights split D times less, the same FLOPs a GPU
        # as plain TP but D times the attention weights read, and reads only its rank's requests' KV.
        attn_tp = tp // dp_attention
        if wbytes != expert_wbytes or attn_tp != tp:  # bytes per weight, over the FLOPs' parameters
            dense = dense_mlp_layers * m.dense_mlp_params / tp
            wbytes = (L * m.attn_params_per_layer / attn_tp * wbytes + dense * expert_wbytes) / lin_params
        inner = m.num_heads * m.head_dim + 2 * m.num_kv_heads * m.head_dim
        # Attention FLOPs per query-key pair over the layers that attend over the whole context (all
        # of them, or a hybrid model's full-attention layers), and over its sliding-window layers.
        full_layers = L - m.num_sliding_layers if m.is_hybrid else L
        if m.is_mla:
            qk = m.kv_lora_rank + m.qk_rope_head_dim  # absorbed MLA attends in the latent space
            attn_fpp = 2 * full_layers * m.num_heads / tp * (qk + m.kv_lora_rank)
        else:
            attn_fpp = 4 * full_layers * m.num_heads / tp * m.head_dim
        window_fpp = 4 * (L - full_layers) * m.num_heads / tp * m.head_dim
        p = {
            "fixed_s": e.step_overhead_s
            + e.per_layer_overhead_s * (L * kernels + extra_kernels) / PLAIN_LAYER_SMALL_KERNELS,
            "per_seq_s": e.per_seq_overhead_s,
            "per_token_s": e.per_token_overhead_s,
            "lin_params": lin_params,
            "matmul_flops": peak * e.matmul_compute,
            "weight_bytes": wbytes,
            # Activations read and written per token per layer (inputs/outputs of the matmuls).
            "act_bytes_per_token": L
            * m.dtype_bytes
            * (4 * m.hidden_size + 2 * inner / tp + 3 * m.intermediate_size / tp),
            "matmul_bw": gpu.hbm_bandwidth * e.matmul_memory,
            "attn_flops_per_pair": attn_fpp,
            "attn_flops": attention_peak(m, gpu, peak) * e.attn_compute,
            "kv_bytes_per_token": m.paged_kv_bytes_per_token(kv_dtype_bytes, attn_tp) / dp_attention,
            "attn_bw": gpu.hbm_bandwidth * e.attn_memory,
            "lm_flops": 2 * m.hidden_size * m.vocab_size / tp,
            "lm_bytes": m.hidden_size * m.vocab_size * m.dtype_bytes / tp,
            **expert_params(m, tp, expert_parallel, dummy_weights),
            # Tensor-parallel all-reduce: two per layer of T x hidden activations (ring algorithm).
            "allreduce_count": 2 * L if tp > 1 else 0,
            "allreduce_bytes_per_token": 2 * L * m.hidden_size * m.dtype_bytes * 2 * (tp - 1) / tp if tp > 1 else 0.0,
            "interconnect_bw": (gpu.interconnect_bandwidth if tp <= gpu.link_group else gpu.host_link_bandwidth)
            * e.allreduce_bandwidth,
            "allreduce_latency_s": (
                e.allreduce_latency_s + e.allreduce_hop_s * max(tp - 2, 0)
                if tp <= max(gpu.link_group, 2)
                else PCIE_ALLREDUCE_LATENCY_S
            ),
            "host_bw": gpu.host_link_bandwidth,
            "graph_max": x.max_capture_size,
            "graph_by16": x.capture_by16_from,
            "graph_each": x.capture_each,
            "full_decode_graphs": x.full_decode_graphs,
            "pad": x.pad,
            "prefill_graph_max": x.max_capture_size if x.prefill_capture_size is None else x.prefill_capture_size,
            "eager_floor_s": eager_floor_s(
                e,
                x,
                L * (kernels + GEMMS_PER_LAYER) + extra_kernels,
                fused_moe_eager_layers(m, gpu, quantization, tp),
                tp,
            ),
            "piecewise_floor_s": e.piecewise_layer_s * L,
            **(host or HostModel()).params(),
            "moe_flops": moe_peak * moe_compute,
            "moe_bw": gpu.hbm_bandwidth * moe_memory,
            "mixed_rows": x.mixed_decode_rows,
            "spec_tokens": spec.tokens if spec else 0,
            "spec_host_seq_s": spec.host_seq_s if spec else 0.0,
            "draft_model": 1.0 if spec and spec.draft else 0.0,
            "draft_pass_s": spec.pass_s if spec else 0.0,
            "lora_fixed_s": lora.fixed_s if lora else 0.0,
            "lora_flops_per_token": lora.flops_per_token if lora else 0.0,
            "lora_bytes_per_adapter": lora.bytes_per_adapter if lora else 0.0,
            "lora_load_s": lora.load_s if lora else 0.0,
            "lora_disk_load_s": lora.disk_load_s if lora else 0.0,
            "expert_weight_bytes": expert_wbytes,
            "window": m.sliding_window if m.is_hybrid else 0,
            "window_kv_bytes_per_token": m.window_kv_bytes_per_token(kv_dtype_bytes, tp),
            "window_flops_per_pair": window_fpp,
            "roofline_blend": e.roofline_blend,
        }
        own = np.array([float(p[name]) for name in PARAMS], np.float64)
        draft = spec.draft.params[:DRAFT] if spec and spec.draft else np.zeros(DRAFT)
        self.params = np.concatenate([own, draft])

    def step_time(self, w: StepWork) -> float:
        """Seconds one engine step takes."""
        return work_time(self.params, w)

    def with_execution(self, x: Execution, host: HostModel | None = None) -> CostModel:
        """The same model, GPU and factors, run as ``x`` says, on the GPU alone (no host) or with ``host``."""
        return CostModel(
            self.model,
            self.gpu,
            self.tp,
            self.eff,
            self.kv_dtype_bytes,
            self.quantization,
            x,
            host,
            spec=self.spec,
            lora=self.lora,
            dummy_weights=self.dummy_weights,
            dp_attention=self.dp_attention,
            expert_parallel=self.expert_parallel,
        )

    def ops(self, w: StepWork) -> list[OpCost]:
        """The terms of ``step_time`` one by one: FLOPs, bytes, seconds and bound of each operator class."""
        cp, T = self.params, w.num_tokens
        Tp = padded_tokens(cp, T)
        out: list[OpCost] = []

        def add(name: str, work: tuple[float, float], c: float, mb: float) -> None:
            tc, tm = work[0] / c, work[1] / mb
            out.append(
                OpCost(
                    name,
                    work[0],
                    work[1],
                    roofline(work, c, mb, cp[P.ROOFLINE_BLEND]),
                    "compute" if tc >= tm else "memory",
                )
            )

        if Tp:  # as gpu_s: a step with no tokens runs no layer
            add("linear", linear_work(cp, Tp), cp[P.MATMUL_FLOPS], cp[P.MATMUL_BW])
            if w.num_loras:
                lw = (Tp * cp[P.LORA_FLOPS_PER_TOKEN], w.num_loras * cp[P.LORA_BYTES_PER_ADAPTER])
                bound = "compute" if lw[0] / cp[P.MATMUL_FLOPS] >= lw[1] / cp[P.MATMUL_BW] else "memory"
                out.append(OpCost("lora", lw[0], lw[1], lora_s(cp, Tp, w.num_loras), bound))
            if cp[P.MOE_LAYERS]:
                mw = moe_work(cp, T)
                out.append(
                    OpCost(
                        "moe",
                        mw[0],
                        mw[1],
                        moe_s(cp, T),
                        "compute" if mw[0] / cp[P.MOE_FLOPS] >= mw[1] / cp[P.MOE_BW] else "memory",
                    )
                )
            add(
                "attention",
                attention_work(cp, w.num_seqs, T, w.context_tokens, w.attn_pairs, w.single_row_context),
                cp[P.ATTN_FLOPS],
                cp[P.ATTN_BW],
            )
        if w.num_sampled:
            add("lm_head", lm_head_work(cp, w.num_sampled + w.num_draft_tokens), cp[P.MATMUL_FLOPS], cp[P.MATMUL_BW])
        if cp[P.ALLREDUCE_COUNT] and Tp:
            out.append(OpCost("allreduce", 0.0, Tp * cp[P.ALLREDUCE_BYTES_PER_TOKEN], allreduce_s(cp, Tp), "link"))
        if w.swap_bytes:
            out.append(OpCost("swap", 0.0, w.swap_bytes, w.swap_bytes / cp[P.HOST_BW], "host-link"))
        out.append(OpCost("overhead", 0.0, 0.0, overhead_s(cp, w.num_seqs, Tp), "fixed"))
        gpu = sum(o.seconds for o in out)
        launch = launch_s(cp, w.num_seqs, T)
        g = gpu if launch else graphed_s(cp, w.num_seqs, T, gpu)  # a piecewise graph's gaps, if any
        if cp[P.SPEC_TOKENS]:
            d = draft_s(cp, w.num_seqs, T, w.context_tokens, w.attn_pairs, w.num_sampled, w.single_row_context)
            out.append(OpCost("drafter", 0.0, 0.0, d, "drafter"))
            g += d
        # what the step takes beyond the GPU's work (host.step_wall_s): the launches (or a piecewise
        # graph's gaps) first, then the engine core's CPU work not hidden behind the GPU's
        beyond = step_wall_s(cp, g, engine_cpu_s(cp, w.num_seqs, T), launch) - g
        launched = min(launch, beyond) if launch else g - gpu - (d if cp[P.SPEC_TOKENS] else 0.0)
        if launched > 0.0:
            out.append(OpCost("launch", 0.0, 0.0, launched, "cpu-launch"))
        if cp[P.ENGINE_STEP_S] or cp[P.ENGINE_PER_SEQ_S] or cp[P.ENGINE_PER_TOKEN_S]:
            cpu_part = beyond - (launched if launch else 0.0)
            out.append(OpCost("engine_cpu", 0.0, 0.0, cpu_part, "cpu-overlapped" if cp[P.ASYNC_SCHEDULING] else "cpu"))
        if w.lora_loads or w.lora_disk_loads:
            load = w.lora_loads * cp[P.LORA_LOAD_S] + w.lora_disk_loads * cp[P.LORA_DISK_LOAD_S]
            out.append(OpCost("lora_load", 0.0, 0.0, load, "host"))
        if w.jit_s:
            out.append(OpCost("jit_compile", 0.0, 0.0, w.jit_s, "cpu"))
        return out

    def breakdown(self, w: StepWork) -> dict:
        ops = self.ops(w)
        return {
            "step_ms": self.step_time(w) * 1e3,
            "work": asdict(w),
            "ops": [{**asdict(o), "ms": o.seconds * 1e3} for o in ops],
        }


class ConstantCost:
    """Every step costs ``step_s``, plus swap traffic at ``host_bw`` bytes/s: the same ``step_time``
    over parameters that zero every other term (hand-computed tests, step-by-step replays)."""

    def __init__(self, step_s: float = 1.0, host_bw: float = 1000.0) -> None:
        p = dict.fromkeys(PARAMS, 0.0)
        p.update(
            fixed_s=step_s,
            matmul_flops=1.0,
            matmul_bw=1.0,
            attn_flops=1.0,
            attn_bw=1.0,
            num_experts=1.0,
            interconnect_bw=1.0,
            host_bw=host_bw,
            moe_flops=1.0,
            moe_bw=1.0,
        )
        self.params = np.concatenate([np.array([p[name] for name in PARAMS], np.float64), np.zeros(DRAFT)])

    def step_time(self, w: StepWork) -> float:
        return work_time(self.params, w)


def work_time(cp, w: StepWork) -> float:
    """``step_time`` of the step ``w`` describes, with the constants ``cp``."""
    return step_time(
        cp,
        w.num_seqs,
        w.num_tokens,
        w.context_tokens,
        w.attn_pairs,
        w.num_sampled,
        w.swap_bytes,
        w.single_row_context,
        w.num_draft_tokens,
        w.num_loras,
        w.lora_loads,
        w.lora_disk_loads,
        w.jit_s,
    )


def decode_work(batch: int, context: int, new_tokens: int = 1) -> StepWork:
    """A uniform step: ``batch`` requests each computing ``new_tokens`` after ``context`` cached ones
    (and sampling one)."""
    w = np.zeros(rules.N_WORK, np.int64)
    rules.add_request(w, new_tokens, context, context + new_tokens, 0)
    return StepWork.of(w * batch)
