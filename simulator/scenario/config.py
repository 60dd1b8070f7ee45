"""Scenario configuration: typed, documented, checked once at load, immutable afterwards.

Every field carries its documentation, unit, bounds and (where it mirrors one) the vLLM knob it
corresponds to; ``servesim fields`` prints the reference from this file. Errors name the field
path, the rule and the value: ``engine.max_num_seqs must be >= 1 (got 0)``.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

import yaml

from simulator.errors import ConfigError
from simulator.scenario import fields, sglang, versions, yamlio
from simulator.scenario.fields import F, build
from simulator.scenario.limits import SPEC_MAX_TOKENS
from simulator.scenario.textfile import read_text
from workloads.config import SLOConfig, WorkloadConfig

LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed --max-lora-rank values


@dataclass(frozen=True)
class HardwareConfig:
    gpu: Union[str, dict] = F("h100-sxm", "built-in GPU name, a YAML file, or an inline mapping (see catalog.yaml)")
    tensor_parallel_size: int = F(
        1, "GPUs one replica's weights and heads are split over", vllm="--tensor-parallel-size", ge=1, le=64
    )
    expert_parallel_size: int = F(
        1,
        "an MoE model's experts dealt whole to this many groups of the tensor-parallel GPUs, instead of split across all of them (1: split; vLLM's --enable-expert-parallel is all of them, SGLang's --ep-size any divisor); priced on the roofline, no recorded run checks it",
        vllm="--enable-expert-parallel, sglang --ep-size",
        ge=1,
        le=64,
    )
    price_per_hour: Union[float, None] = F(
        None,
        "what one GPU costs per hour, for `servesim plan` (null: the catalogue's price for the GPU)",
        "USD",
        gt=0.0,
    )
    host: Union[str, dict, None] = F(
        None,
        "the machine's CPU, which paces the engine core and the API server: a host of the catalog "
        "(simulator/data/hosts.yaml), or {probe_us: X}, the reading of `servesim probe-host` on your server "
        "(null: the catalog's median host, and results carry the band between its slowest and fastest hosts; "
        "given, the band is servesim's own error around the run's figures)",
    )


SPEC_METHODS = ("none", "ngram", "eagle", "eagle3", "mtp", "draft_model")


@dataclass(frozen=True)
class SpeculativeConfig:
    method: Literal["none", "ngram", "eagle", "eagle3", "mtp", "draft_model"] = F(
        "none",
        "how drafts are proposed: ngram (prompt lookup on the host), eagle / eagle3 (a one-layer head on the target's hidden states), mtp (the model's own multi-token-prediction layer), draft_model (a smaller model); none: off",
        vllm="--speculative-config '{\"method\": ...}'",
    )
    num_speculative_tokens: int = F(
        3,
        "draft tokens proposed per request and step, verified by the target in its next step",
        "tokens",
        vllm="num_speculative_tokens",
        ge=1,
        le=SPEC_MAX_TOKENS,
    )
    acceptance_rate: Any = F(
        None,
        "probability that a draft token is accepted, given every draft before it was: one number, or a list with one per position (null: the method's default, simulator/engine/speculative.py says from which measurements)",
        shape="number in [0, 1] or list of them, one per draft position",
    )
    draft_model: Union[str, None] = F(
        None,
        "the draft model, built-in name or path to its config.json (method draft_model)",
        vllm="model",
    )

    def __post_init__(self) -> None:
        a, k = self.acceptance_rate, self.num_speculative_tokens
        where = "engine.speculative_config.acceptance_rate"
        rates = a if isinstance(a, (list, tuple)) else [] if a is None else [a]
        for r in rates:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
                raise ConfigError(f"{where} must be a number in [0, 1] or a list of them (got {a!r})")
        if isinstance(a, (list, tuple)) and len(a) != k:
            raise ConfigError(
                f"{where} must list one rate per draft position, {k} (num_speculative_tokens), (got {len(a)})"
            )
        if self.draft_model is not None and self.method != "draft_model":
            raise ConfigError(
                f"engine.speculative_config.draft_model: only for method 'draft_model' (got method {self.method!r})"
            )
        if self.method == "draft_model" and not self.draft_model:
            raise ConfigError("engine.speculative_config.draft_model must name the draft model for method draft_model")
        if self.method == "draft_model" and a is None:
            raise ConfigError(
                f"{where} must be given for method draft_model: it depends on the pair of models (got null)"
            )


def _count(x: Any) -> bool:
    """Whether ``x`` is a positive whole number (a step's token count)."""
    return not isinstance(x, bool) and isinstance(x, (int, float)) and x == int(x) and 1 <= x <= 2**31


# Host memory a field may give (swap space, an offloading tier): 1 PiB, beyond any server's.
HOST_GIB_MAX = 1_048_576.0


def _SGL(vllm_field: str | None) -> dict:
    """An SGLang knob: only with engine.framework sglang; with vllm, the error names ``vllm_field``."""
    return {"only": {"framework": ("sglang",)}, **({"instead": {"vllm": vllm_field}} if vllm_field else {})}


@dataclass(frozen=True)
class EngineConfig:
    framework: Literal["vllm", "sglang"] = F(
        "vllm",
        "the serving engine: vLLM, or SGLang (its scheduler, KV pool and defaults; its own knobs below, marked SGLang)",
    )
    vllm_version: Any = F(
        "0.32",
        "the vLLM release whose defaults and behaviour to follow where a field below is null: a release line (0.10, 0.11, 0.19, 0.26, 0.32; simulator/scenario/versions.py says what differs) or any release from 0.10.0 to 0.33.0, which runs as the line it shares its modelled behaviour with, with a note saying what differs (docs/vllm-releases.md)",
        shape="release as x.y or x.y.z, e.g. '0.32', '0.13', '0.15.1' (unquoted 0.13 reads as that release)",
        schema=versions.json_schema,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.sglang_version"},
    )
    max_num_seqs: Union[int, None] = F(
        None,
        "cap on the running list (null: as vllm serve, 1024 on GPUs with >= 70 GiB that are not A100s, else 256; twice that with performance_mode throughput)",
        vllm="--max-num-seqs",
        ge=1,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.max_running_requests"},
    )
    max_num_batched_tokens: Union[int, None] = F(
        None,
        "token budget of one step (null: as vllm serve, 8192 on GPUs with >= 70 GiB that are not A100s, else 2048; from vLLM 0.28, 16384 on GPUs with >= 160 GiB; twice that with performance_mode throughput)",
        "tokens",
        vllm="--max-num-batched-tokens",
        ge=1,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.chunked_prefill_size"},
    )
    block_size: int = F(
        16,
        "tokens per KV block (vLLM accepts 1, 8, 16, 32, 64, 128)",
        "tokens",
        vllm="--block-size",
        ge=1,
        among=(1, 8, 16, 32, 64, 128),
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.page_size"},
    )
    gpu_memory_utilization: Union[float, None] = F(
        None,
        "fraction of GPU memory the engine may use (null: the vLLM release's default, 0.9 up to 0.19, 0.92 from 0.22)",
        vllm="--gpu-memory-utilization",
        gt=0.0,
        le=1.0,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.mem_fraction_static"},
    )
    enable_prefix_caching: bool = F(
        True,
        "re-use cached full blocks with identical leading content",
        vllm="--enable-prefix-caching",
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.disable_radix_cache"},
    )
    preemption_mode: Literal["recompute", "swap"] = F(
        "recompute",
        "what preemption does with the victim's KV",
        vllm="preemption_mode (V0)",
        only={"framework": ("vllm",)},
    )
    swap_space_gb: float = F(
        4.0,
        "host memory for swapped-out KV, per GPU",
        "GiB",
        vllm="--swap-space",
        ge=0.0,
        le=HOST_GIB_MAX,
        only={"framework": ("vllm",)},
    )
    on_swap_full: Literal["recompute", "abort"] = F(
        "recompute",
        "swap mode, no host space left: recompute the victim instead, or abort it (V0 aborted)",
        only={"framework": ("vllm",)},
    )
    scheduling_policy: Literal["fcfs", "priority"] = F(
        "fcfs",
        "waiting-queue order and preemption victim choice",
        vllm="--scheduling-policy",
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.schedule_policy"},
    )
    admission: Union[Literal["first_chunk", "full_prompt"], None] = F(
        None,
        "admit a waiting request when the whole prompt's blocks fit or only its first chunk's (null: full_prompt from vLLM 0.19, first_chunk before)",
        vllm="--[no-]scheduler-reserve-full-isl",
        only={"framework": ("vllm",)},
    )
    async_scheduling: Union[bool, None] = F(
        None,
        "schedule each step while the one before runs: the engine's CPU work for a step overlaps the GPU's, and a request that ends keeps its place and KV blocks through the next step's scheduling (null: on from vLLM 0.14, off before)",
        vllm="--async-scheduling",
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.disable_overlap_schedule"},
    )
    performance_mode: Literal["balanced", "interactivity", "throughput"] = F(
        "balanced",
        "vLLM 0.28 and later: throughput doubles the default max_num_seqs and max_num_batched_tokens (those left null); interactivity captures a CUDA graph for every decode batch from 1 to 32 (no padding there)",
        vllm="--performance-mode",
        only={"framework": ("vllm",)},
    )
    load_format: Literal["auto", "dummy"] = F(
        "auto",
        "the weights served: auto (the checkpoint's) or dummy (random weights, as benchmarks without the checkpoint run them); the same cost but for a mixture-of-experts model whose router adds a bias to its scores (gpt-oss, DeepSeek-V3/R1, GLM-4.5): its dummy router sends every token to the same top-k experts, so a step reads only those experts' weights",
        vllm="--load-format",
    )
    enforce_eager: bool = F(
        False,
        "run every step without CUDA graphs (no padding; each step at least as long as launching all its kernels; with framework sglang, SGLang's --disable-cuda-graph)",
        vllm="--enforce-eager",
    )
    max_cudagraph_capture_size: Union[int, None] = F(
        None,
        "largest step (tokens) replayed from a CUDA graph; larger steps run eagerly (null: min(2 x max_num_seqs, 512), or 1024 for gpt-oss (992 in vLLM 0.11.0) as its model config sets; from vLLM 0.12 also <= max_num_batched_tokens)",
        "tokens",
        vllm="--max-cudagraph-capture-size",
        ge=1,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.cuda_graph_max_bs"},
    )
    jit_cache: Any = F(
        "cold",
        "kernels compiled on a step shape's first use, the step waiting meanwhile (vLLM's MXFP4 mixture-of-experts kernels on Hopper: gpt-oss; a step run without CUDA graphs compiles the routing kernels of its 32-token bucket and the expert matmuls' variants no step ran before): cold, a server just started (what its profile step and graph captures compiled); warm, one that has run every shape or whose Triton cache holds them; or a list of the step token counts it has run",
        shape="cold, warm, or a list of step token counts",
        only={"framework": ("vllm",)},
    )
    long_prefill_token_threshold: int = F(
        0,
        "cap on one request's prefill chunk per step (0: none)",
        "tokens",
        vllm="--long-prefill-token-threshold",
        ge=0,
        only={"framework": ("vllm",)},
    )
    max_model_len: Union[int, None] = F(
        None,
        "longest prompt + output accepted (null: the model's max_position_embeddings)",
        "tokens",
        vllm="--max-model-len",
        ge=1,
    )
    num_gpu_blocks_override: Union[int, None] = F(
        None,
        "KV blocks per GPU, overriding the memory-based size (one is the null block)",
        "blocks",
        vllm="--num-gpu-blocks-override",
        ge=2,
        only={"framework": ("vllm",)},
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = F(
        "auto", "the weights' and activations' type (auto: the model's torch_dtype)", vllm="--dtype"
    )
    quantization: Union[Literal["none", "fp8", "int8", "int4", "mxfp4", "nvfp4"], None] = F(
        None,
        "weight format: fp8/int8 use those tensor-core rates and halve weight bytes; int4 (W4A16) quarters them at 16-bit rates; mxfp4 (4.25 bits a weight) and nvfp4 (4.5) use the GPU's fp4 rate where it has one, else 16-bit rates (null: the checkpoint's, from its config.json's quantization_config, as vLLM detects it, with the layers it leaves unquantized)",
        vllm="--quantization",
    )
    kv_cache_dtype: Literal["auto", "fp8"] = F(
        "auto", "KV cache element type (auto: the model's dtype)", vllm="--kv-cache-dtype"
    )
    runtime_reserve_gb: Union[float, None] = F(
        None,
        "memory held back for activations, non-PyTorch buffers and CUDA graphs (null: estimated as vLLM measures it; see `servesim validate --kv`)",
        "GiB",
        ge=0.0,
        le=HOST_GIB_MAX,
        only={"framework": ("vllm",)},
        instead={"sglang": "engine.mem_fraction_static"},
    )
    speculative_config: SpeculativeConfig = F(
        SpeculativeConfig(),
        "speculative decoding (method none: off)",
        vllm="--speculative-config",
        only={"framework": ("vllm",)},
    )
    enable_lora: bool = F(
        False,
        "serve LoRA adapters (workload.lora says which requests ask for which)",
        vllm="--enable-lora",
        only={"framework": ("vllm",)},
    )
    max_loras: int = F(1, "adapters one step may serve (GPU slots)", vllm="--max-loras", ge=1)
    max_lora_rank: int = F(16, "the largest adapter rank (the slots' size)", vllm="--max-lora-rank", among=LORA_RANKS)
    max_cpu_loras: Union[int, None] = F(
        None, "adapters kept in host memory (null: max_loras)", vllm="--max-cpu-loras", ge=1, le=1_000_000
    )
    kv_offloading_size: float = F(
        0.0,
        "host memory holding offloaded KV blocks, all GPUs together: a second tier of the prefix cache, written as blocks are computed, read back over the host link on a hit (0: off)",
        "GiB",
        vllm="--kv-offloading-size",
        ge=0.0,
        le=HOST_GIB_MAX,
        only={"framework": ("vllm",)},
    )
    # SGLang's own knobs, with its names (engine.framework: sglang; simulator/scenario/sglang.py).
    sglang_version: Any = F(
        sglang.LINE,
        "the SGLang release whose defaults and behaviour to follow: the 0.5 line (0.5.x, 0.5.x.postN; 0.5 alone: its newest modelled release, 0.5.17), read in 0.5.6.post2 and 0.5.17 (data/sources/sglang/sglang_scheduler.md); the release decides whether prefills replay CUDA graphs (from 0.5.10, docs/sglang.md)",
        shape="release as 0.5, 0.5.x or 0.5.x.postN",
        **_SGL("engine.vllm_version"),
    )
    mem_fraction_static: Union[float, None] = F(
        None,
        "SGLang: fraction of the memory free before the weights load that weights and KV pool may take (null: SGLang's default, the GPU's memory less a reserve for activations and CUDA graphs, at least 10 GiB on GPUs over 60 GiB)",
        vllm="sglang --mem-fraction-static",
        gt=0.0,
        le=1.0,
        **_SGL("engine.gpu_memory_utilization"),
    )
    max_running_requests: Union[int, None] = F(
        None,
        "SGLang: cap on running requests, enforced at admission (null: 512 per context length of pool tokens, clamped to 2,048-4,096, at most half the pool's tokens)",
        vllm="sglang --max-running-requests",
        ge=1,
        **_SGL("engine.max_num_seqs"),
    )
    chunked_prefill_size: Union[int, None] = F(
        None,
        "SGLang: prompt tokens one prefill step computes at most; a longer prompt is split over steps (-1: no chunking; null: by GPU memory, 8192 on 80-160 GiB GPUs, 16384 above)",
        "tokens",
        vllm="sglang --chunked-prefill-size",
        ge=-1,
        **_SGL("engine.max_num_batched_tokens"),
    )
    max_prefill_tokens: int = F(
        sglang.MAX_PREFILL_TOKENS,
        "SGLang: prompt tokens one prefill step admits at most (its first request always fits)",
        "tokens",
        vllm="sglang --max-prefill-tokens",
        ge=1,
        **_SGL("engine.max_num_batched_tokens"),
    )
    disable_radix_cache: bool = F(
        False,
        "SGLang: no prefix cache (the radix tree)",
        vllm="sglang --disable-radix-cache",
        **_SGL("engine.enable_prefix_caching"),
    )
    schedule_policy: Literal["fcfs", "lof", "lpm", "dfs-weight"] = F(
        "fcfs",
        "SGLang: the waiting queue's order: fcfs (arrival; retracted requests go to the back), lof (longest output first), or the cache-aware lpm (most prompt tokens in the prefix cache first; a queue over 128 keeps its order) and dfs-weight (the radix tree walked depth first, its busiest branches first); both defer a request whose prefix another request ahead of it is about to cache; with the radix cache off they are fcfs, as in SGLang",
        vllm="sglang --schedule-policy",
        **_SGL("engine.scheduling_policy"),
    )
    schedule_conservativeness: float = F(
        1.0,
        "SGLang: scales the share of a running request's remaining output that admission keeps room for (the new-token ratio, 0.7 x this at start, decaying to 0.14 of it over 600 decode steps)",
        vllm="sglang --schedule-conservativeness",
        gt=0.0,
        le=100.0,
        **_SGL(None),
    )
    num_continuous_decode_steps: int = F(
        1,
        "SGLang: accepted for its command line; the 0.5 line reads it nowhere, so it changes nothing",
        vllm="sglang --num-continuous-decode-steps",
        ge=1,
        **_SGL(None),
    )
    stream_interval: int = F(
        1,
        "SGLang: output tokens per streamed chunk (only 1, the default, is modelled)",
        vllm="sglang --stream-interval",
        ge=1,
        **_SGL(None),
    )
    cuda_graph_max_bs: Union[int, None] = F(
        None,
        "SGLang: largest decode batch replayed from a CUDA graph; larger ones run eagerly (null: by GPU memory, 256 on 80-160 GiB GPUs below TP 4, 512 otherwise there and above)",
        vllm="sglang --cuda-graph-max-bs",
        ge=1,
        **_SGL("engine.max_cudagraph_capture_size"),
    )
    disable_prefill_cuda_graph: bool = F(
        False,
        "SGLang: run every prefill without CUDA graphs, launched kernel by kernel, as every release before 0.5.10 does (false: as the release does: captured from 0.5.10, except on AMD GPUs, with DP attention and, from 0.5.15, for MLA models)",
        vllm="sglang --disable-prefill-cuda-graph",
        **_SGL("engine.enforce_eager"),
    )
    page_size: Union[int, None] = F(
        None,
        "SGLang: tokens per KV page (null: 1; pages under 16 tokens are counted in pages of 16, simulator/scenario/sglang.py)",
        "tokens",
        vllm="sglang --page-size",
        ge=1,
        le=1024,
        **_SGL("engine.block_size"),
    )
    enable_dp_attention: bool = F(
        False,
        "SGLang: data-parallel attention: dp_size ranks, each with its own requests and KV pool (tensor_parallel_size / dp_size GPUs each) in the attention layers, all of them in the MLP and MoE layers; modelled as one scheduler over dp_size pools (simulator/scenario/sglang.py)",
        vllm="sglang --enable-dp-attention",
        **_SGL(None),
    )
    dp_size: int = F(
        1,
        "SGLang: data-parallel ranks; with enable_dp_attention, the attention's ranks (1: DP attention is off, as SGLang 0.5 turns it off)",
        vllm="sglang --dp-size",
        ge=1,
        le=64,
        **_SGL(None),
    )
    disable_overlap_schedule: bool = F(
        False,
        "SGLang: run the scheduler's CPU work between GPU steps instead of overlapping it with them",
        vllm="sglang --disable-overlap-schedule",
        **_SGL("engine.async_scheduling"),
    )

    @property
    def dp_attention(self) -> int:
        """SGLang's DP-attention ranks (1: off; SGLang 0.5 turns it off without dp_size > 1)."""
        return self.dp_size if self.framework == "sglang" and self.enable_dp_attention else 1

    @property
    def prefix_caching(self) -> bool:
        """Whether the engine caches prefixes: vLLM's enable_prefix_caching, SGLang's radix cache."""
        return not self.disable_radix_cache if self.framework == "sglang" else self.enable_prefix_caching

    def _sglang_checks(self) -> None:
        if self.chunked_prefill_size == 0:
            raise ConfigError(
                "engine.chunked_prefill_size must be -1 (no chunking) or >= 1, as SGLang requires (got 0)"
            )
        if self.dp_size > 1 and not self.enable_dp_attention:
            raise ConfigError(
                f"engine.dp_size: data parallelism without DP attention is a fleet of replicas here (cluster.replicas); "
                f"set engine.enable_dp_attention: true for DP attention (got dp_size {self.dp_size})"
            )
        if self.stream_interval != 1:
            raise ConfigError(
                f"engine.stream_interval: only 1 (a chunk per token, SGLang's default) is modelled (got {self.stream_interval})"
            )

    def __post_init__(self) -> None:
        j = self.jit_cache
        if not (j in ("cold", "warm") if isinstance(j, str) else isinstance(j, list) and all(_count(t) for t in j)):
            raise ConfigError(
                f"engine.jit_cache must be cold, warm, or a list of step token counts (positive integers) (got {j!r})"
            )
        if self.framework == "sglang":
            object.__setattr__(self, "sglang_version", sglang.release_name(self.sglang_version))
            self._sglang_checks()
        object.__setattr__(self, "vllm_version", versions.release_name(self.vllm_version))
        if self.performance_mode != "balanced" and not versions.version(self.vllm_version).has_performance_mode:
            raise ConfigError(
                f"engine.performance_mode: --performance-mode comes in vLLM 0.28; engine.vllm_version "
                f"{self.vllm_version!r} has only balanced (got {self.performance_mode})"
            )
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ConfigError(
                f"engine.max_cpu_loras must be >= engine.max_loras ({self.max_loras}), as vLLM requires (got {self.max_cpu_loras})"
            )
        if self.kv_offloading_size and not self.enable_prefix_caching:
            raise ConfigError(
                f"engine.kv_offloading_size: the host tier extends the prefix cache, so it needs engine.enable_prefix_caching (got {self.kv_offloading_size:g} GiB with caching off)"
            )
        if self.kv_offloading_size and self.preemption_mode == "swap":
            raise ConfigError(
                f"engine.preemption_mode: swap is vLLM V0's; KV offloading is V1's connector: use recompute with engine.kv_offloading_size (got swap with {self.kv_offloading_size:g} GiB)"
            )
        if self.enable_lora and self.preemption_mode == "swap":
            raise ConfigError(
                "engine.preemption_mode: swap is vLLM V0's; LoRA's per-step adapter limit is V1's scheduler: use recompute with engine.enable_lora (got swap)"
            )


@dataclass(frozen=True)
class FrontendConfig:
    enabled: bool = F(
        True,
        "model vLLM's API server: requests reach the engine once it has taken them in, tokens reach clients once it has streamed them (false: the engine alone, as `servesim parity` drives it)",
    )
    api_server_count: int = F(
        1, "API-server processes sharing the front-end's work", vllm="--api-server-count", ge=1, le=256
    )
    endpoint: Literal["completions", "chat"] = F(
        "completions",
        "what clients call: /v1/completions (`vllm bench serve`'s default backend) or /v1/chat/completions (renders the chat template, streams larger chunks; `--backend openai-chat`; gpt-oss's Harmony-format chat runs no template: taken in as a completion)",
    )
    request_ms: Union[float, None] = F(
        None,
        "CPU time per request taken in: HTTP, validation, chat template, hand-off to the engine (null: the vLLM version's fitted default)",
        "ms",
        ge=0.0,
    )
    prompt_token_us: Union[float, None] = F(
        None, "tokenization time per prompt token (null: the version's default)", "us", ge=0.0
    )
    step_us: Union[float, None] = F(
        None,
        "time per engine step with outputs, to receive and dispatch them (null: the version's default)",
        "us",
        ge=0.0,
    )
    output_token_us: Union[float, None] = F(
        None,
        "time per output token streamed: detokenize, build and write the chunk (null: the version's default)",
        "us",
        ge=0.0,
    )
    latency_ms: Union[float, None] = F(
        None,
        "fixed delay each request spends outside any queue: network round trip, process hops (null: the version's default; a chat rendered in the Harmony format, gpt-oss's, has its own on the 0.10-0.19 lines)",
        "ms",
        ge=0.0,
    )
    finish_ms: Union[float, None] = F(
        None,
        "time per request that ends: its last chunks, the end of the response, the client's bookkeeping (null: the version's default)",
        "ms",
        ge=0.0,
    )
    first_pass: Union[float, None] = F(
        None,
        "share of a request's intake done before it first yields the event loop (parsing, chat template); the rest is queued behind everything that came meanwhile, so a burst reaches the engine from about its first passes on (1: each request whole, first come first served; null: the version's default)",
        ge=0.0,
        le=1.0,
    )
    intake_rounds: Union[float, None] = F(
        None,
        "rounds of the API server's streams that a closed-loop client's next request waits, after its last one ended, before the API server takes it in (each round: one step's outputs for every request in flight); at 1,000 requests in flight behind one API server, 9 rounds are about half a second of TTFT; open-loop arrivals and clients that think longer wait nothing (null: the version's default: 9.17 from 0.26, measured on the recorded servers; 0 before)",
        ge=0.0,
    )
    stream_doubling: Union[float, None] = F(
        None,
        "streams in one step's batch of outputs at which a streamed token costs twice output_token_us: the per-token cost grows with the streams open (0: it does not; null: the version's default: fitted for SGLang, 0 for vLLM)",
        ge=0.0,
    )
    paces_engine: Union[bool, None] = F(
        None,
        "the engine starts no step while the outputs of the step before it still wait for the API server, so a busy API server slows the engine itself: a stand-in that fits the recorded vLLM 0.26 servers best with one set of host costs, though a profile shows their engine runs ahead (docs/validation.md) (false: the engine runs ahead and its outputs queue; null: the version's default, true from 0.26)",
    )


@dataclass(frozen=True)
class RunConfig:
    seed: int = F(0, "seed of every random draw in the run", ge=0)
    host_band: bool = F(
        True,
        "with no hardware.host: run the scenario on the slowest and the fastest catalog host too (two more runs, "
        "beside this one) and report the band, widened by servesim's own error (summary.json host_band); with one: "
        "report the run's figures widened by servesim's own error given the host (no run more); false: no band",
    )
    duration_s: Union[float, None] = F(
        None,
        "simulated time to run (null: until run.num_requests, or a trace's requests, are done; without either, 600 s)",
        "s",
        gt=0.0,
    )
    warmup_s: float = F(0.0, "metrics ignore requests that arrive before this time and steps before it", "s", ge=0.0)
    num_requests: Union[int, None] = F(
        None,
        "submit this many requests and run until they are done, as `vllm bench serve --num-prompts` (null: no limit); with duration_s too, whichever comes first",
        "requests",
        ge=1,
    )
    max_steps: int = F(50_000_000, "safety cap on engine steps", "steps", ge=1)
    kernel: Literal["auto", "compiled", "reference"] = F(
        "auto",
        "engine-step implementation: the compiled production step (auto, compiled) or the readable Python reference (for debugging; much slower); results are identical",
    )
    step_log_bin_s: Union[float, None] = F(
        None,
        "steps.csv rows: null keeps one per engine step; a width keeps one per time bin of that width (memory then grows with simulated time, not with steps)",
        "s",
        gt=0.0,
        le=1e6,  # (11.6 days: a bin wider than any run is one row, and its plot has no scale)
    )


# The least share of a GPU's peak a cost-model efficiency may give (measured ones are 0.05-0.9).
EFFICIENCY_MIN = 0.001


@dataclass(frozen=True)
class CostConfig:
    calibration: str = F(
        "auto",
        "efficiency factors: 'auto' (the GPU's built-in calibration if it has one), 'none' (generic defaults) or a file from `servesim calibrate`; attention keeps the rates of the kernel vLLM runs on the GPU (FlashAttention-3 on Hopper, -2 on 8.x)",
    )
    matmul_compute: Union[float, None] = F(
        None, "fraction of peak FLOP/s reached by matmuls (null: calibrated default)", ge=EFFICIENCY_MIN, le=1.0
    )
    matmul_memory: Union[float, None] = F(
        None, "fraction of HBM bandwidth reached streaming weights", ge=EFFICIENCY_MIN, le=1.0
    )
    attn_compute: Union[float, None] = F(
        None, "fraction of peak FLOP/s reached by attention", ge=EFFICIENCY_MIN, le=1.0
    )
    attn_memory: Union[float, None] = F(
        None, "fraction of HBM bandwidth reached reading the KV cache", ge=EFFICIENCY_MIN, le=1.0
    )
    step_overhead_ms: Union[float, None] = F(
        None, "fixed GPU time of one step, besides the per-layer small kernels", "ms", ge=0.0
    )
    per_seq_overhead_us: Union[float, None] = F(None, "extra GPU time per scheduled sequence", "us", ge=0.0)
    engine_cpu_ms: Union[float, None] = F(
        None,
        "the engine's fixed CPU work per step (scheduling, input preparation, output bookkeeping; null: the release "
        "line's, on 0.26 and 0.32 measured apart with async scheduling on and off)",
        "ms",
        ge=0.0,
    )
    engine_cpu_per_seq_us: Union[float, None] = F(
        None,
        "the engine's CPU work per scheduled sequence (per sequence and KV-cache group where the release line's "
        "costs are: 0.26 and 0.32, whose hybrid models' sequences pay it twice; null: as engine_cpu_ms)",
        "us",
        ge=0.0,
    )
    allreduce_latency_us: Union[float, None] = F(
        None,
        "one tensor-parallel all-reduce's latency on two GPUs of one NVLink/xGMI group, besides its bytes "
        "(null: the calibration's, 10 us on the built-in ones)",
        "us",
        ge=0.0,
    )
    allreduce_hop_us: Union[float, None] = F(
        None,
        "latency an all-reduce adds per GPU beyond two (a ring's hop; 0 for one whose latency does not grow "
        "with the GPUs; null: 2.75, NCCL's measured on H200s)",
        "us",
        ge=0.0,
    )
    allreduce_bandwidth: Union[float, None] = F(
        None,
        "share of the link's bandwidth an all-reduce's bytes reach (null: 0.67, NCCL's measured on H200s)",
        ge=EFFICIENCY_MIN,
        le=1.0,
    )


REPLICAS_SHAPE = "integer or list of groups"
ROUTERS = ("random", "round_robin", "least_requests", "least_kv", "prefix_affinity", "power_of_two", "score")


MAX_REPLICAS_PER_GROUP = 4096


@dataclass(frozen=True)
class ReplicaGroup:
    count: int = F(1, "replicas in this group", ge=1, le=MAX_REPLICAS_PER_GROUP)
    hardware: Union[dict, None] = F(None, "hardware fields that differ from the scenario's (e.g. {gpu: h200})")
    engine: Union[dict, None] = F(None, "engine fields that differ from the scenario's (e.g. {max_num_seqs: 512})")


# A replica's cold start when ``cluster.autoscaler.cold_start_s`` is null: the engine's own start plus
# reading the weights. ENGINE_START_S: vLLM 0.26 serving Llama-3.1-8B on an H200 (data/e2e/
# h200x2_2026-11-27/llama8b_api2/server.log): 52.8 s from the first log line to "Starting vLLM
# server", of which "init engine (profile, create kv cache, warmup model)" 19.9 s with a warm
# torch.compile cache; the same engine without that cache took 41-96 s to init in the other logs
# there. Those servers read dummy weights (1.7-2.5 s); real weights add their bytes over
# ``weight_load_gbps``.
ENGINE_START_S = 53.0


@dataclass(frozen=True)
class AutoscalerConfig:
    metric: Literal["num_requests_running", "num_requests_waiting", "kv_cache_usage", "request_rate"] = F(
        "num_requests_running",
        "what the autoscaler scales on, per serving replica: vLLM's gauges (kv_cache_usage a fraction 0-1) "
        "or arrivals per second",
    )
    target: Union[float, None] = F(None, "the metric's target value per replica (required)", gt=0.0)
    min_replicas: int = F(1, "fewest replicas (starting or serving)", ge=1)
    max_replicas: Union[int, None] = F(None, "most replicas (starting or serving; null: cluster.replicas)", ge=1)
    cold_start_s: Union[float, None] = F(
        None,
        "seconds from a scale-up until the new replica serves (null: engine start "
        f"{ENGINE_START_S:g} s, measured, plus the weights over weight_load_gbps)",
        "s",
        ge=0.0,
    )
    weight_load_gbps: float = F(
        2.0, "how fast a starting replica reads its weights (local NVMe ~2-7, network volumes less)", "GB/s", gt=0.0
    )
    scale_up_delay_s: float = F(
        0.0, "scale-up stabilisation window: the lowest recommendation over it is used (HPA default 0)", "s", ge=0.0
    )
    scale_down_delay_s: float = F(
        300.0,
        "scale-down stabilisation window: the highest recommendation over it is used (HPA default 300)",
        "s",
        ge=0.0,
    )
    interval_s: float = F(15.0, "how often the metric is read and the fleet resized (HPA's sync period)", "s", gt=0.0)
    tolerance: float = F(
        0.1, "no change while observed / target is within 1 +- this (HPA's default 0.1)", ge=0.0, lt=1.0
    )


@dataclass(frozen=True)
class ClusterConfig:
    replicas: Any = F(
        1,
        "how many copies of the scenario's model/hardware/engine, or a list of groups "
        "[{count, hardware, engine}] for a mixed fleet",
        shape=REPLICAS_SHAPE,
    )
    router: Literal[
        "random", "round_robin", "least_requests", "least_kv", "prefix_affinity", "power_of_two", "score"
    ] = F("round_robin", "how the router picks a replica for each request (README: Clusters)")
    router_staleness_s: float = F(
        0.0,
        "the router sees each replica's engine state (queues, KV usage) as scraped this long ago (0: live)",
        "s",
        ge=0.0,
    )
    score_prefix_weight: float = F(
        2.0, "score router: weight of the share of the prompt the replica already caches", ge=0.0
    )
    score_queue_weight: float = F(
        1.0, "score router: weight of the replica's free share of waiting + running requests", ge=0.0
    )
    score_kv_weight: float = F(1.0, "score router: weight of the replica's free share of KV cache", ge=0.0)
    autoscaler: Union[AutoscalerConfig, None] = F(
        None, "resize the fleet on a metric, as Kubernetes' HPA does on vLLM's (null: cluster.replicas, fixed)"
    )

    def groups(self, path: str = "cluster.replicas") -> tuple[ReplicaGroup, ...]:
        return replica_groups(self.replicas, path)

    def __post_init__(self) -> None:
        groups = self.groups()
        a = self.autoscaler
        if a is None:
            return
        if a.target is None:
            raise ConfigError(f"cluster.autoscaler.target: required, the {a.metric} wanted per replica (got null)")
        if len(groups) != 1:
            raise ConfigError(
                "cluster.autoscaler: needs one replica group (cluster.replicas a count or one group) "
                f"(got {len(groups)} groups)"
            )
        start, most = groups[0].count, self.max_replicas
        if most < a.min_replicas:
            raise ConfigError(
                f"cluster.autoscaler.max_replicas must be >= min_replicas ({a.min_replicas}) (got {most})"
            )
        if not a.min_replicas <= start <= most:
            raise ConfigError(
                f"cluster.replicas: the replicas serving at the start must be within cluster.autoscaler's "
                f"min_replicas..max_replicas = {a.min_replicas}..{most} (got {start})"
            )

    @property
    def max_replicas(self) -> int:
        """The most replicas the fleet may have at once."""
        a = self.autoscaler
        if a is None or a.max_replicas is None:
            return self.groups()[0].count if a is not None else sum(g.count for g in self.groups())
        return a.max_replicas


@dataclass(frozen=True)
class KVTransferConfig:
    bandwidth_gbps: float = F(
        100.0, "link bandwidth from each prefill GPU to the decode side (RDMA NIC, NVLink)", "Gbit/s", gt=0.0
    )
    latency_ms: float = F(0.5, "fixed time of one transfer (connection, metadata)", "ms", ge=0.0)


@dataclass(frozen=True)
class DisaggregationConfig:
    prefill: Any = F(1, "prefill replicas: a count, or groups [{count, hardware, engine}]", shape=REPLICAS_SHAPE)
    decode: Any = F(1, "decode replicas: a count, or groups [{count, hardware, engine}]", shape=REPLICAS_SHAPE)
    kv_transfer: KVTransferConfig = F(
        KVTransferConfig(), "how a request's KV cache moves from its prefill replica to its decode replica"
    )

    def __post_init__(self) -> None:
        replica_groups(self.prefill, "disaggregation.prefill")
        replica_groups(self.decode, "disaggregation.decode")


def replica_groups(raw: Any, path: str) -> tuple[ReplicaGroup, ...]:
    """A replica count or a list of groups, checked, as groups."""
    if isinstance(raw, bool) or raw is None:
        raise ConfigError(f"{path} must be a count or a list of groups [{{count, hardware, engine}}] (got {raw!r})")
    if isinstance(raw, (int, float)):
        if raw != raw or raw in (math.inf, -math.inf) or int(raw) != raw or raw < 1:
            raise ConfigError(f"{path} must be an integer >= 1 (got {raw!r})")
        most = MAX_REPLICAS_PER_GROUP
        if raw > most:  # as a group's count is bounded: a number must not be a way around it
            raise ConfigError(f"{path} must be <= {most} (got {int(raw)})")
        return (ReplicaGroup(count=int(raw)),)
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ConfigError(
            f"{path} must be a count or a non-empty list of groups [{{count, hardware, engine}}] (got {raw!r})"
        )
    out = []
    for i, g in enumerate(raw):
        where = f"{path}[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(f"{where} must be a mapping {{count, hardware, engine}} (got {g!r})")
        grp = build(ReplicaGroup, g, where)
        for sect, cls in (("hardware", HardwareConfig), ("engine", EngineConfig)):
            body = getattr(grp, sect)
            if body is not None:
                if not isinstance(body, dict):
                    raise ConfigError(f"{where}.{sect} must be a mapping (got {body!r})")
                build(cls, body, f"{where}.{sect}")  # checked here, merged onto the scenario's at run time
        out.append(grp)
    return tuple(out)


@dataclass(frozen=True)
class Scenario:
    name: str = F("scenario", "label used in plots and tables")
    model: str = F(
        "llama-3.1-8b",
        "built-in model name, the Hugging Face repository id of one (meta-llama/Llama-3.1-8B-Instruct), "
        "or path to a Hugging Face config.json",
    )
    hardware: HardwareConfig = F(HardwareConfig(), "GPU and parallelism")
    engine: EngineConfig = F(EngineConfig(), "serving-engine knobs")
    frontend: FrontendConfig = F(FrontendConfig(), "the API server in front of the engine")
    workload: WorkloadConfig = F(WorkloadConfig(), "request traffic")
    run: RunConfig = F(RunConfig(), "length of the run and seed")
    cost: CostConfig = F(CostConfig(), "step cost model overrides")
    slo: Union[SLOConfig, None] = F(
        None, "latency targets: adds goodput to the summary and an SLO-aware sweep recommendation"
    )
    cluster: Union[ClusterConfig, None] = F(None, "several replicas behind a router (null: one replica)")
    disaggregation: Union[DisaggregationConfig, None] = F(
        None, "prefill and decode on separate replica pools, the KV cache moved between them (null: co-located)"
    )
    sweep: dict = F({}, "`servesim sweep` grid: field path -> list of values, e.g. {engine.max_num_seqs: [256, 512]}")


def _set_path(data: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        nxt = node.get(k)
        if nxt is None:
            nxt = node[k] = {}
        if not isinstance(nxt, dict):
            raise ConfigError(f"--set {dotted}: {k} is not a mapping (got {nxt!r})")
        node = nxt
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """``engine.max_num_seqs=512`` -> ("engine.max_num_seqs", 512); values parse as YAML. An empty
    value is an error rather than null: ``=null`` says "the default" on purpose."""
    if "=" not in text:
        raise ConfigError(f"--set must look like section.key=value (got {text!r})")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not k.strip() for k in key.split(".")):
        raise ConfigError(f"--set must look like section.key=value (got {text!r})")
    if not raw.strip():
        raise ConfigError(f"--set {key}: no value after '='; write {key}=null for the default (got {text!r})")
    try:
        return key, yamlio.load(raw, f"--set {key}")
    except yaml.YAMLError:
        return key, raw


def load_yaml_text(text: str, source: str) -> dict:
    data = yamlio.parse(text, source)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a scenario must be a YAML mapping (got {type(data).__name__})")
    return data


def apply_overrides(data: dict, overrides: list[str] | None) -> dict:
    data = _deep_copy(data)
    seen: dict[str, str] = {}
    for text in overrides or []:
        key, value = parse_override(text)
        if key in seen:  # one would silently win: say so instead
            raise ConfigError(f"--set {key} given twice ({seen[key]!r}, then {text.split('=', 1)[1]!r}); give it once")
        seen[key] = text.split("=", 1)[1]
        _set_path(data, key, value)
    _drop_gated(data, seen)
    return data


def _drop_gated(data: dict, given: dict[str, str]) -> None:
    """A ``--set`` of a field others depend on (``workload.output_tokens.dist=fixed``) drops the
    scenario file's fields beside it that mean nothing for its new value (the lognormal's mean and
    sigma), as a user switching it means; fields the user also set are kept, and checked. The serving
    engine (``framework``) is the exception: the file's knobs of the other engine (those not at their
    defaults) are part of what the scenario means, so they are named in one error with the ``--set``
    that leaves them out and their counterparts, never dropped silently."""
    from simulator.scenario.fields import gated_fields

    for key in given:
        parent, _, leaf = key.rpartition(".")
        node: Any = data
        for k in parent.split(".") if parent else []:
            node = node.get(k) if isinstance(node, dict) else None
        if not isinstance(node, dict) or node.get(leaf) is None:
            continue
        gated = gated_fields(Scenario, key)
        stale = [
            name
            for name, (allowed, *_) in gated.items()
            if name in node and f"{parent}.{name}".lstrip(".") not in given and node[leaf] not in allowed
        ]
        if leaf == "framework":  # a knob at its default may stay (the check allows it); the others are named
            stale = [n for n in stale if node[n] != gated[n][1]]
        if leaf == "framework" and stale:
            paths = [f"{parent}.{n}".lstrip(".") for n in stale]
            twins = [t for t in (gated[n][2].get(node[leaf]) for n in stale) if t]
            raise ConfigError(
                f"--set {key}={node[leaf]}: the scenario sets {', '.join(f'{p} ({node[n]!r})' for p, n in zip(paths, stale))}, "
                f"which {node[leaf]} does not have; leave them out with {' '.join(f'--set {p}=null' for p in paths)}"
                + (f", and give {node[leaf]}'s {', '.join(twins)} if you want them" if twins else "")
            )
        for name in stale:
            del node[name]


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def scenario_from_dict(data: dict) -> Scenario:
    sc = build(Scenario, data)
    _cross_checks(sc)
    return sc


def _cross_checks(sc: Scenario) -> None:
    if not any(ch.isalnum() for ch in sc.name):  # it names the results folder
        raise ConfigError(f"name must contain a letter or digit: it names the results folder (got {sc.name!r})")
    if sc.disaggregation is not None and sc.cluster is not None and sc.cluster.replicas != 1:
        raise ConfigError(
            "cluster.replicas: with disaggregation the replicas are disaggregation.prefill and "
            f".decode; cluster sets only the router (got {sc.cluster.replicas!r})"
        )
    if sc.disaggregation is not None and sc.cluster is not None and sc.cluster.autoscaler is not None:
        raise ConfigError(
            "cluster.autoscaler: resizes co-located replicas; with disaggregation the pools are fixed "
            "(got an autoscaler and disaggregation)"
        )
    tp, ep = sc.hardware.tensor_parallel_size, sc.hardware.expert_parallel_size
    if tp % ep:
        raise ConfigError(
            f"hardware.expert_parallel_size must divide hardware.tensor_parallel_size ({tp}): the experts are "
            f"dealt to groups of its GPUs (got {ep})"
        )
    if sc.engine.framework == "vllm" and ep not in (1, tp):
        raise ConfigError(
            f"hardware.expert_parallel_size: vLLM's --enable-expert-parallel deals the experts to every GPU, so "
            f"1 or hardware.tensor_parallel_size ({tp}) (got {ep}; SGLang's --ep-size takes any divisor)"
        )
    if sc.engine.dp_attention > 1 and sc.hardware.tensor_parallel_size % sc.engine.dp_size:
        raise ConfigError(
            f"engine.dp_size must divide hardware.tensor_parallel_size ({sc.hardware.tensor_parallel_size}), "
            f"as SGLang's DP attention requires (got {sc.engine.dp_size})"
        )
    if sc.engine.framework == "sglang" and sc.disaggregation is not None:
        raise ConfigError(
            "disaggregation: prefill/decode disaggregation is modelled for vLLM only (got engine.framework 'sglang')"
        )
    w = sc.workload
    asks = w.lora is not None or any(getattr(c, "lora", None) is not None for c in w.class_list())
    if asks and sc.engine.framework == "sglang":
        raise ConfigError("workload.lora: LoRA adapters are modelled for vLLM only (got engine.framework 'sglang')")
    if asks and not sc.engine.enable_lora:
        raise ConfigError("workload.lora: requests ask for LoRA adapters; set engine.enable_lora: true (got false)")
    run = sc.run
    until = run_duration(sc)
    if until is not None and run.warmup_s >= until:
        what = (
            f"run.duration_s ({until:g} s)" if run.duration_s is not None else f"the run's default length ({until:g} s)"
        )
        raise ConfigError(f"run.warmup_s must be < {what} (got {run.warmup_s:g})")


def check_model(sc: Scenario, model) -> None:
    """What the scenario's model (a ``models.ModelArch``) asks for that servesim does not model, refused
    with the way around it: a sliding window shorter than the requests can be on every layer (each
    would be given full attention, so KV use and attention time would be overstated past the window);
    a hybrid model's sliding-window layers beside full-attention ones are modelled
    (``ModelArch.is_hybrid``)."""
    window = model.sliding_window
    longest = sc.engine.max_model_len or model.max_position_embeddings
    if 0 < window < longest and not model.is_hybrid:
        raise ConfigError(
            f"model {model.name}: sliding_window {window} (config.json) is not modelled: servesim gives "
            f"every layer full attention; set engine.max_model_len <= {window}, as vLLM's "
            f"--disable-sliding-window does (got max_model_len {longest})"
        )


DEFAULT_DURATION_S = 600.0


def run_duration(sc: Scenario) -> float | None:
    """How long the run may last in simulated seconds (None: until its requests are done):
    ``run.duration_s``; without it, until ``run.num_requests`` or a trace's requests are done; with
    neither, 600 s."""
    if sc.run.duration_s is not None:
        return sc.run.duration_s
    if sc.run.num_requests is not None or sc.workload.trace is not None:
        return None
    return DEFAULT_DURATION_S


def _is_path(key: str, value: Any) -> bool:
    """Whether a scenario value names a file: a trace, a lengths file, a model's config.json, a GPU's
    YAML file, a calibration file (built-in names have no folder and no file extension)."""
    if not isinstance(value, str):
        return False
    if key in ("trace", "file"):
        return True
    return key in ("model", "draft_model", "gpu", "calibration") and (
        "/" in value or value.endswith((".json", ".yaml", ".yml"))
    )


def resolve_paths(data: Any, folder: Path, key: str = "") -> Any:
    """Relative file names in a scenario file, made relative to the file's folder (where its author
    put them) rather than to wherever the command is run from."""
    if isinstance(data, dict):
        return {k: resolve_paths(v, folder, str(k)) for k, v in data.items()}
    if isinstance(data, list):
        return [resolve_paths(v, folder, key) for v in data]
    if _is_path(key, data) and not Path(data).expanduser().is_absolute():
        from simulator.scenario.models import builtin_for_repo

        if key in ("model", "draft_model") and not (folder / data).exists() and builtin_for_repo(data):
            return data  # a Hugging Face repository id naming a built-in model, no folder beside the file
        return os.path.normpath(folder / data)
    return data


def load_scenario(path: str | None, overrides: list[str] | None = None) -> tuple[Scenario, dict]:
    """Read a scenario file (or the built-in default), apply ``--set`` overrides, validate. Returns
    the scenario and its data (``load_scenario_data``)."""
    data = load_scenario_data(path, overrides)
    try:
        return scenario_from_dict(data), data
    except ConfigError as e:
        raise scenario_error(path, e, overrides) from None


def scenario_error(path: str | None, e: ConfigError, overrides: list[str] | None) -> ConfigError:
    """``e`` about the scenario ``path`` with ``overrides`` (``in_file``), said better where a ``--set``
    shortened the run below the scenario's own warm-up: that the warm-up is the scenario's, and how
    to set it too."""
    text, given = str(e), {o.split("=", 1)[0].strip() for o in overrides or []}
    shortened = "run.duration_s" in given and "run.warmup_s" not in given
    if text.startswith("run.warmup_s must be <") and shortened and text.endswith(")"):
        e = ConfigError(f"{text[:-1]}, the scenario's); --set run.warmup_s too (0: measure from the start)")
    return in_file(path, e)


def load_scenario_data(path: str | None, overrides: list[str] | None = None) -> dict:
    """The data of a scenario file (or the built-in default) with ``--set`` overrides applied, not yet
    validated: what every command reads a scenario through. File names in the scenario file are
    read relative to its folder; in ``--set`` overrides, relative to the current directory. Its
    name is the file's stem unless it has one."""
    if path is None:
        p = DEFAULT_SCENARIO
    else:
        p = Path(path)
        if p.is_dir():
            some = sorted(p.glob("*.yaml"))[:3]
            hint = f" such as {', '.join(str(x) for x in some)}" if some else ""
            raise ConfigError(f"scenario: {path} is a folder; give a scenario YAML file{hint}")
        if not p.is_file():
            p = builtin_scenario(path)
    if p.stat().st_size > yamlio.MAX_BYTES:  # refused before it is read
        raise ConfigError(
            f"{p}: {p.stat().st_size:,} bytes; servesim reads YAML files up to {yamlio.MAX_BYTES:,} bytes"
        )
    data = load_yaml_text(read_text(p), str(p))
    # Top-level keys starting with x- are the file's own (a home for YAML anchors, as in compose files).
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}
    data = resolve_paths(data, p.parent)
    data = apply_overrides(data, overrides)
    if "name" not in data:
        data["name"] = p.stem
    return data


BUILTIN_SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"  # a copy of the checkout's scenarios/


def builtin_scenarios() -> dict[str, Path]:
    """The scenarios servesim ships, by name (``servesim scenarios`` lists them)."""
    return {p.stem: p for p in sorted(BUILTIN_SCENARIOS.glob("*.yaml"))}


def builtin_scenario(name: str) -> Path:
    """The built-in scenario ``name`` (``collapse_c1200``, or with ``.yaml``), for a scenario given
    without a folder that is no file here; else one line saying the file was not found."""
    found = builtin_scenarios()
    bare = "/" not in name and "\\" not in name
    key = name[: -len(".yaml")] if name.endswith(".yaml") else name
    if bare and key in found:
        return found[key]
    hint = difflib.get_close_matches(key, list(found), n=1) if bare else []
    extra = f"; did you mean the built-in {hint[0]!r}?" if hint else "; `servesim scenarios` lists the built-in ones"
    raise ConfigError(f"{name}: no such scenario file{extra}")


def in_file(path: str | None, e: ConfigError) -> ConfigError:
    """``e`` naming the scenario file it is about (``path``; None: the built-in default, named by
    nobody), once."""
    text = str(e)
    return e if path is None or text.startswith(f"{path}") else ConfigError(f"{path}: {text}")


EXTENSION_PREFIX = "x-"
DEFAULT_SCENARIO = Path(__file__).resolve().parents[1] / "data" / "default_scenario.yaml"


def blank_scenario(overrides: list[str]) -> Scenario:
    """A scenario from the field defaults (`servesim fields`), not the built-in collapse case, with
    ``overrides`` applied."""
    return scenario_from_dict(apply_overrides({"name": "scenario"}, overrides))


def field_reference(cls: type | None = None, prefix: str = "") -> list[tuple[str, str, str, str, str, str]]:
    """(path, type, default, unit, vLLM knob, doc) for every scenario field, for docs and `servesim fields`."""
    return fields.field_reference(Scenario if cls is None else cls, prefix)
