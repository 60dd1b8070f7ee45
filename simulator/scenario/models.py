"""Model architectures: read a Hugging Face ``config.json`` and derive what serving cost depends on.

Everything the cost model and the KV-cache sizing need comes from here: parameter counts (total and
active), weight bytes, KV bytes per token, and the per-layer shapes of the matmuls.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from simulator.errors import ConfigError
from simulator.scenario.textfile import read_text

MODELS_DIR = Path(__file__).resolve().parents[1] / "data" / "models"

DTYPE_BYTES = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


# Bits one stored weight takes in each weight format, its scales included: fp8 and int8 one byte (the
# per-tensor or per-channel scales, and fp8's one fp32 scale per 128x128 block in block-scaled
# checkpoints, add under 0.03% and are left out); int4 half a byte (group scales left out, as
# before); MXFP4 (OCP microscaling) 4-bit e2m1 values with one 8-bit E8M0 scale per 32 values; NVFP4
# 4-bit e2m1 values with one FP8 (E4M3) scale per 16 values (plus two fp32 scales per tensor, left out).
WEIGHT_BITS = {"fp8": 8.0, "int8": 8.0, "int4": 4.0, "mxfp4": 4.0 + 8.0 / 32, "nvfp4": 4.0 + 8.0 / 16}

# Which weights a checkpoint's format covers: "all" every parameter but the embeddings and the LM
# head (how online quantization and most checkpoints store them); "mlp" only the MLP's weight
# matrices, dense and expert (attention, routers, norms, biases, embeddings and LM head keep the
# model's dtype: gpt-oss's modules_to_not_convert, ModelOpt NVFP4's excluded self_attn).
QUANT_SCOPES = ("all", "mlp")


def weight_format_bytes(quantization: str, dtype_bytes: float) -> float:
    """Bytes per weight of one weight format ("none": the model's dtype)."""
    return dtype_bytes if quantization == "none" else WEIGHT_BITS[quantization] / 8.0


# Small (non-matmul) kernels vLLM runs in a Llama-style layer; see ModelArch.small_kernels_per_layer.
PLAIN_LAYER_SMALL_KERNELS = 6

# vLLM pads the vocabulary of the embedding and of the LM head to a multiple of this before splitting
# it across tensor-parallel GPUs (VocabParallelEmbedding, DEFAULT_VOCAB_PADDING_SIZE); the padding rows
# are allocated like the others.
VOCAB_PADDING = 64

# vLLM (0.19, CUDA) imports every candidate MLA attention backend while it builds an MLA model; the
# FlashInfer-MLA module allocates a 128 MiB workspace on the GPU at import
# (v1/attention/backends/mla/flashinfer_mla.py), inside the "Model loading took" measurement, on every GPU.
MLA_LOAD_WORKSPACE_BYTES = 128 * 2**20


@dataclass(frozen=True)
class ModelArch:
    """The architecture fields of one model, plus derived sizes. Immutable."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    dtype: str
    max_position_embeddings: int
    # Mixture of experts (0 experts means dense).
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    first_dense_layers: int = 0
    # Multi-head latent attention (kv_lora_rank > 0 means MLA).
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    # Layers that attend over the last ``sliding_window`` tokens only, where the others attend over the
    # whole context (config.json's layer_types; gpt-oss alternates them). 0: every layer is alike.
    num_sliding_layers: int = 0
    qk_norm: bool = False  # RMSNorm on each query and key head (Qwen3)
    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2, Qwen2-MoE, GLM-4.5)
    shared_expert_gate: bool = False  # sigmoid gate (hidden -> 1) on the shared expert (Qwen2-MoE)
    o_bias: bool = False  # a bias on the attention output projection too (gpt-oss)
    attention_sinks: bool = False  # a learned sink logit per query head and layer (gpt-oss)
    expert_bias: bool = False  # biases on each expert's gate/up and down projections (gpt-oss)
    # Its chat messages are rendered in OpenAI's Harmony format (gpt-oss: vLLM renders them with the
    # openai-harmony library, where other models' chat template is a Jinja template run in Python).
    harmony_chat: bool = False
    # The router adds a learned per-expert bias to its scores before choosing the top k (gpt-oss's
    # router bias; DeepSeek-V3's e_score_correction_bias, topk_method noaux_tc; GLM-4.5's). Under
    # random weights of vLLM's size (--load-format dummy: every float uniform in +-1e-3) the bias
    # outweighs the scores by ~50x, so every token goes to the same k experts in each layer.
    router_bias: bool = False
    partial_rotary_factor: float = 1.0  # share of each head's dimensions that RoPE rotates (GLM-4.5: 0.5)
    rope_positions: int = 0  # rows of vLLM's rotary cos/sin cache (0: max_position_embeddings)
    vision_params: int = 0  # vision encoder and projector loaded with the language model (Pixtral)
    published_params: float = 0.0
    # The checkpoint's weight format, from its config.json's quantization_config (as vLLM detects it):
    # "none", "fp8", "int8", "int4", "mxfp4" or "nvfp4"; quant_scope: which weights it covers (QUANT_SCOPES).
    quantization: str = "none"
    quant_scope: str = "all"
    architectures: tuple[str, ...] = ()  # config.json's class names (which model runner vLLM gives it)

    # ---- per-layer shapes -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def attn_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk_head
            else:
                q = h * self.num_heads * qk_head
            kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_up = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.num_heads * self.v_head_dim * h
            return q + kv_down + kv_up + o
        q = h * self.num_heads * self.head_dim
        kv = 2 * h * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * h
        return q + kv + o

    @property
    def attn_bias_params_per_layer(self) -> int:
        """q, k and v projection biases (``qkv_bias``); the output projection's (``o_bias``) and the
        attention sinks (one logit per query head, ``attention_sinks``) where the model has them."""
        qkv = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.qkv_bias else 0
        return qkv + (self.hidden_size if self.o_bias else 0) + (self.num_heads if self.attention_sinks else 0)

    @property
    def norm_params_per_layer(self) -> int:
        """RMSNorm weights of one layer: the two around attention and MLP, Qwen3's per-head query and
        key norms, and MLA's norms on the compressed query and KV latents."""
        mla = (self.q_lora_rank + self.kv_lora_rank) if self.is_mla else 0
        return 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0) + mla

    @property
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def expert_bias_params(self) -> int:
        """One expert's biases (``expert_bias``): gate and up (2 x intermediate), down (hidden)."""
        return 2 * self.moe_intermediate_size + self.hidden_size if self.expert_bias else 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def router_params_per_moe_layer(self) -> int:
        """The router (hidden -> experts) and Qwen2-MoE's shared-expert gate (hidden -> 1)."""
        return self.hidden_size * (self.num_experts + (1 if self.shared_expert_gate else 0))

    @property
    def padded_vocab_size(self) -> int:
        """Embedding and LM-head rows as vLLM allocates them (vocabulary padded to VOCAB_PADDING)."""
        return -(-self.vocab_size // VOCAB_PADDING) * VOCAB_PADDING

    @property
    def embedding_params(self) -> int:
        return self.padded_vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.padded_vocab_size * self.hidden_size

    @property
    def small_kernels_per_layer(self) -> int:
        """GPU kernels per layer besides the matrix products, as vLLM runs a dense layer: two fused
        residual-add RMSNorms, rotary embedding, KV-cache write, attention, SiLU-and-mul; Qwen3's
        query and key RMSNorms add two. The cost model scales its per-layer overhead by this."""
        return PLAIN_LAYER_SMALL_KERNELS + (2 if self.qk_norm else 0)

    @property
    def total_params(self) -> int:
        """Parameters of the whole model as vLLM holds them: norm weights, attention biases, routers,
        the padded vocabulary and a vision encoder included."""
        dense_layers = self.num_layers - self.num_moe_layers
        mlp = dense_layers * self.dense_mlp_params
        if self.is_moe:
            experts = (self.num_experts + self.num_shared_experts) * (self.expert_params + self.expert_bias_params)
            mlp += self.num_moe_layers * (experts + self.router_params_per_moe_layer)
        norms = self.num_layers * self.norm_params_per_layer + self.hidden_size
        attn = self.num_layers * (self.attn_params_per_layer + self.attn_bias_params_per_layer)
        return attn + mlp + norms + self.embedding_params + self.lm_head_params + self.vision_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (only routed experts it is sent to count; a vision encoder
        does not run for text)."""
        unused = self.num_experts - self.experts_per_token if self.is_moe else 0
        per_expert = self.expert_params + self.expert_bias_params
        return self.total_params - self.vision_params - self.num_moe_layers * unused * per_expert

    @property
    def replicated_params(self) -> int:
        """Parameters every tensor-parallel GPU holds whole: norms, routers, MLA's down-projections
        to the query and KV latents (replicated linears in vLLM) and the vision encoder (vLLM loads
        Mistral-format Pixtral checkpoints with plain, unsplit linears)."""
        mla_down = self.q_lora_rank + self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla else 0
        routers = self.num_moe_layers * self.router_params_per_moe_layer
        norms = self.num_layers * self.norm_params_per_layer + self.hidden_size
        return norms + routers + self.num_layers * self.hidden_size * mla_down + self.vision_params

    def kv_proj_params_per_gpu(self, tp: int = 1) -> int:
        """K and V projection weights and biases one GPU holds (all layers): the KV heads are split,
        and replicated once ``tp`` exceeds them (see kv_heads_per_gpu); MLA has none (its KV
        up-projection splits by query head)."""
        if self.is_mla:
            return 0
        per_head = 2 * (self.hidden_size + (1 if self.qkv_bias else 0)) * self.head_dim
        return self.num_layers * per_head * self.kv_heads_per_gpu(tp)

    @property
    def rope_cache_bytes(self) -> float:
        """vLLM's rotary cos/sin cache: one [positions x rotary dims] tensor in the model dtype,
        shared by all layers and held whole on every GPU (positions: max_position_embeddings, or
        original x factor for YaRN scaling)."""
        rot = self.qk_rope_head_dim if self.is_mla else int(self.head_dim * self.partial_rotary_factor)
        return (self.rope_positions or self.max_position_embeddings) * rot * self.dtype_bytes

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        """Bytes of all parameters (the whole replica)."""
        return self.total_params * self.dtype_bytes

    def weight_bytes_per_gpu(self, tp: int = 1) -> float:
        """What vLLM reports as "Model loading took X GiB" on each GPU of a ``tp``-way replica: its
        share of the split parameters plus the replicated ones, the rotary cache, and for MLA the
        backend workspace allocated during loading. Not modelled: the CUDA caching allocator rounds
        some weight tensors up to 2 MiB blocks (up to 1 MiB each; 0.1 GiB on phi-4 at TP2)."""
        kv_total = self.kv_proj_params_per_gpu(1)
        split = self.total_params - self.replicated_params - kv_total
        params = split / tp + self.replicated_params + self.kv_proj_params_per_gpu(tp)
        workspace = MLA_LOAD_WORKSPACE_BYTES if self.is_mla else 0
        return params * self.dtype_bytes + self.rope_cache_bytes + workspace

    def kv_bytes_per_token(self, kv_dtype_bytes: float | None = None, tp: int = 1, layers: int | None = None) -> float:
        """KV-cache bytes one token occupies on one GPU of a ``tp``-way tensor-parallel replica, all
        layers or the first ``layers`` of them (MHA/GQA: K and V of the GPU's KV heads; MLA: the
        latent, kept whole on every GPU).

        As vLLM splits them: each GPU keeps ``max(1, num_kv_heads // tp)`` KV heads, so once ``tp``
        exceeds the KV-head count the heads are replicated (every GPU holds at least one)."""
        b = self.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        n = self.num_layers if layers is None else layers
        if self.is_mla:
            return n * (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return 2 * n * self.kv_heads_per_gpu(tp) * self.head_dim * b

    # ---- sliding-window layers beside full-attention ones (vLLM's hybrid KV-cache manager) ----------
    @property
    def is_hybrid(self) -> bool:
        """Some layers attend over a sliding window and the others over the whole context."""
        return self.sliding_window > 0 and 0 < self.num_sliding_layers < self.num_layers

    @property
    def kv_cache_groups(self) -> int:
        """The KV-cache groups vLLM's manager keeps a request's blocks in, each with its own block
        table: two for a hybrid model (sliding-window and full-attention layers), else one."""
        return 2 if self.is_hybrid else 1

    def paged_kv_bytes_per_token(self, kv_dtype_bytes: float | None = None, tp: int = 1) -> float:
        """KV bytes per token of the layers whose cache grows with the context: all of them, or in a
        hybrid model the full-attention ones (the sliding-window layers keep at most a window)."""
        if not self.is_hybrid:
            return self.kv_bytes_per_token(kv_dtype_bytes, tp)
        return self.kv_bytes_per_token(kv_dtype_bytes, tp, self.num_layers - self.num_sliding_layers)

    def window_kv_bytes_per_token(self, kv_dtype_bytes: float | None = None, tp: int = 1) -> float:
        """KV bytes per token of a hybrid model's sliding-window layers (0 for other models)."""
        return self.kv_bytes_per_token(kv_dtype_bytes, tp, self.num_sliding_layers) if self.is_hybrid else 0.0

    def window_blocks_per_request(self, block_size: int) -> int:
        """KV blocks a request holds in a hybrid model's sliding-window layers once its context is
        longer than the window: the window's tokens rounded up to blocks, plus the block the window's
        start falls in (as vLLM's sliding-window manager frees only blocks wholly out of the window)."""
        return -(-self.sliding_window // block_size) + 1 if self.is_hybrid else 0

    def quantized_params(self, scope: str | None = None) -> int:
        """Parameters a weight format covers (whole replica): ``scope`` as in QUANT_SCOPES (None: the
        checkpoint's own ``quant_scope``)."""
        if (scope or self.quant_scope) == "all":
            return self.total_params - self.embedding_params - self.lm_head_params
        experts = self.num_moe_layers * (self.num_experts + self.num_shared_experts) * self.expert_params
        return (self.num_layers - self.num_moe_layers) * self.dense_mlp_params + experts

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        return 1 if self.is_mla else max(1, self.num_kv_heads // tp)


def _get(cfg: dict, *names: str, default=None):
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def _pixtral_vision_params(cfg: dict, text_hidden: int) -> int:
    """Parameters of a Pixtral vision encoder and its projector (Mistral3 / Pixtral checkpoints): a
    patch convolution, an RMSNorm, ``num_hidden_layers`` blocks of q/k/v/o and a gated MLP without
    biases plus two norms, then the projector's norm, the patch merger (spatial_merge_size^2 patches
    -> one) and a two-layer adapter to the language model's hidden size."""
    v = cfg["vision_config"]
    h, inter, layers = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["num_hidden_layers"])
    patch = int(v.get("num_channels", 3)) * int(v["patch_size"]) ** 2 * h + h
    block = 4 * h * h + 3 * h * inter + 2 * h
    merge = int(cfg.get("spatial_merge_size", 1)) ** 2 * h * h
    bias = 2 * text_hidden if cfg.get("multimodal_projector_bias") else 0
    adapter = h + merge + h * text_hidden + text_hidden * text_hidden + bias
    return patch + layers * block + adapter


def checkpoint_quantization(cfg: dict, name: str) -> str:
    """The weight format a config.json's ``quantization_config`` declares, as servesim names it: FP8
    checkpoints (``quant_method: fp8``, ModelOpt FP8, or compressed-tensors with 8-bit float weights),
    8-bit integer ones (compressed-tensors, bitsandbytes 8-bit), 4-bit integer ones (AWQ, GPTQ,
    compressed-tensors, bitsandbytes 4-bit), MXFP4 (``quant_method: mxfp4``, or Quark with fp4
    weights) and NVFP4 (ModelOpt's NVFP4, or compressed-tensors with 4-bit float weights in groups of
    16); "none" without one. An unknown method is an error rather than a silent bf16."""
    q = cfg.get("quantization_config")
    if not q:
        return "none"
    if not isinstance(q, dict):
        raise ConfigError(f"model {name}: quantization_config must be a mapping (got {q!r})")
    method = str(q.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8", "ptpc_fp8"):
        return "fp8"
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(q.get("quant_algo", "NVFP4" if method == "modelopt_fp4" else "FP8")).upper()
        if algo not in ("FP8", "NVFP4"):
            raise ConfigError(
                f"model {name}: quantization_config.quant_algo must be FP8 or NVFP4 for quant_method {method} (got {algo})"
            )
        return "fp8" if algo == "FP8" else "nvfp4"
    if method == "mxfp4":
        return "mxfp4"
    if method == "quark":
        weight = ((q.get("global_quant_config") or {}).get("weight")) or {}
        dtype = str(weight.get("dtype", "")).lower()
        if dtype == "fp4":
            return "mxfp4"
        if dtype.startswith("fp8"):
            return "fp8"
        raise ConfigError(
            f"model {name}: quantization_config.global_quant_config.weight.dtype must be fp4 or fp8_e4m3 for quant_method quark (got {dtype or None!r})"
        )
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = int(cast(Any, q.get("bits", q.get("w_bit", 4))))  # a JSON number (mypy reads dict.get here as "| None")
        return "int4" if bits == 4 else "int8"
    if method == "bitsandbytes":
        return "int4" if q.get("load_in_4bit") else "int8"
    if method == "compressed-tensors":
        for group in (q.get("config_groups") or {}).values():
            w = (group or {}).get("weights") or {}
            bits, kind = int(w.get("num_bits", 16)), str(w.get("type", "int"))
            if bits == 8:
                return "fp8" if kind == "float" else "int8"
            if bits == 4:
                return "nvfp4" if kind == "float" else "int4"
        return "none"
    raise ConfigError(
        f"model {name}: quantization_config.quant_method {method!r} is not one servesim sizes "
        f"(fp8, modelopt, mxfp4, quark, awq, gptq, bitsandbytes, compressed-tensors); set engine.quantization to say how its "
        f"weights are stored"
    )


# Names under which a checkpoint lists the modules it leaves unquantized.
_UNQUANTIZED_LISTS = ("modules_to_not_convert", "ignore", "exclude", "exclude_modules", "ignored_layers")


def checkpoint_quant_scope(cfg: dict) -> str:
    """Which weights the checkpoint's format covers (QUANT_SCOPES): "mlp" where its list of modules
    left unquantized names the attention (``self_attn``), else "all"."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return "all"
    kept = [str(m) for key in _UNQUANTIZED_LISTS for m in (q.get(key) or [])]
    return "mlp" if any("self_attn" in m or "attention" in m for m in kept) else "all"


def quant_scope(model: ModelArch, quantization: str) -> str:
    """The weights ``quantization`` covers on ``model``: the checkpoint's own scope when it is the
    checkpoint's format, else every linear layer (online quantization)."""
    return model.quant_scope if quantization == model.quantization else "all"


def layer_kinds(cfg: dict, name: str, num_layers: int) -> int:
    """How many layers attend over a sliding window, from config.json's ``layer_types``
    (``sliding_attention`` or ``full_attention`` per layer); 0 without the field."""
    kinds = cfg.get("layer_types")
    if kinds is None:
        return 0
    if not isinstance(kinds, list) or len(kinds) != num_layers:
        raise ConfigError(
            f"model {name}: layer_types must list one entry per layer ({num_layers}, num_hidden_layers) "
            f"(got {len(kinds) if isinstance(kinds, list) else kinds!r})"
        )
    unknown = sorted({str(k) for k in kinds} - {"sliding_attention", "full_attention"})
    if unknown:
        raise ConfigError(
            f"model {name}: layer_types entries must be sliding_attention or full_attention (got {unknown[0]!r})"
        )
    return sum(1 for k in kinds if k == "sliding_attention")


# Architectures whose layers are state-space (Mamba-like) rather than attention with a paged KV cache.
SSM_MARKERS = ("mamba", "jamba", "zamba", "falconh1", "nemotronh", "granitemoehybrid", "rwkv", "ssm")


def from_hf_config(cfg: dict, name: str) -> ModelArch:
    """Build a ModelArch from the fields of a Hugging Face config.json."""
    names = [str(cfg.get("model_type") or "")] + [str(a) for a in cfg.get("architectures") or []]
    ssm = next((n for n in names if any(k in n.lower().replace("_", "").replace("-", "") for k in SSM_MARKERS)), None)
    if ssm is not None:
        raise ConfigError(
            f"model {name}: architecture {ssm!r} (config.json) is not supported: servesim models "
            "attention layers and their paged KV cache, not Mamba or other state-space layers"
        )
    for required in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if required not in cfg:
            raise ConfigError(f"model {name}: config.json has no field '{required}'")
    h = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    dtype = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"model {name}: torch_dtype must be one of {sorted(DTYPE_BYTES)} (got {dtype})")
    num_experts = int(_get(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=0))
    moe_inter = int(_get(cfg, "moe_intermediate_size", "intermediate_size", default=0)) if num_experts else 0
    model_type = cfg.get("model_type")
    # Qwen2-MoE gives its shared expert as an intermediate size; count it in experts of moe_intermediate_size.
    shared_inter = int(_get(cfg, "shared_expert_intermediate_size", default=0)) if num_experts else 0
    if shared_inter and shared_inter % moe_inter:
        raise ConfigError(
            f"model {name}: shared_expert_intermediate_size ({shared_inter}) must be a multiple of "
            f"moe_intermediate_size ({moe_inter})"
        )
    num_shared = int(_get(cfg, "n_shared_experts", "num_shared_experts", default=0))
    if shared_inter:
        num_shared = shared_inter // moe_inter
    rope = _get(cfg, "rope_scaling", "rope_parameters", default={})
    rope = rope if isinstance(rope, dict) else {}
    rope_type = rope.get("rope_type", rope.get("type"))
    yarn = rope_type in ("yarn", "deepseek_yarn") and "original_max_position_embeddings" in rope and "factor" in rope
    vision = cfg.get("vision_config") or {}
    return ModelArch(
        name=name,
        hidden_size=h,
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(_get(cfg, "num_key_value_heads", default=heads)),
        head_dim=int(_get(cfg, "head_dim", default=h // heads)),
        intermediate_size=int(_get(cfg, "intermediate_size", default=4 * h)),
        vocab_size=int(cfg["vocab_size"]),
        tie_word_embeddings=bool(_get(cfg, "tie_word_embeddings", default=False)),
        dtype=dtype,
        max_position_embeddings=int(_get(cfg, "max_position_embeddings", default=4096)),
        num_experts=num_experts,
        experts_per_token=int(_get(cfg, "num_experts_per_tok", default=0)),
        moe_intermediate_size=moe_inter,
        num_shared_experts=num_shared,
        first_dense_layers=int(_get(cfg, "first_k_dense_replace", default=0)),
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", default=0)),
        q_lora_rank=int(_get(cfg, "q_lora_rank", default=0)),
        qk_rope_head_dim=int(_get(cfg, "qk_rope_head_dim", default=0)),
        qk_nope_head_dim=int(_get(cfg, "qk_nope_head_dim", default=0)),
        v_head_dim=int(_get(cfg, "v_head_dim", default=0)),
        # Qwen configs give a window they do not use (use_sliding_window: false).
        sliding_window=int(_get(cfg, "sliding_window", default=0) or 0) if cfg.get("use_sliding_window", True) else 0,
        num_sliding_layers=layer_kinds(cfg, name, int(cfg["num_hidden_layers"])),
        qk_norm=bool(_get(cfg, "qk_norm", "use_qk_norm", default=model_type in ("qwen3", "qwen3_moe"))),
        qkv_bias=bool(_get(cfg, "attention_bias", "qkv_bias", default=model_type in ("qwen2", "qwen2_moe"))),
        shared_expert_gate=shared_inter > 0,
        o_bias=model_type == "gpt_oss",
        attention_sinks=model_type == "gpt_oss",
        expert_bias=model_type == "gpt_oss",
        harmony_chat=model_type == "gpt_oss",
        router_bias=num_experts > 0 and (model_type in ("gpt_oss", "glm4_moe") or cfg.get("topk_method") == "noaux_tc"),
        partial_rotary_factor=float(_get(cfg, "partial_rotary_factor", default=rope.get("partial_rotary_factor", 1.0))),
        rope_positions=int(rope["original_max_position_embeddings"] * rope["factor"]) if yarn else 0,
        vision_params=_pixtral_vision_params(cfg, h) if vision.get("model_type") == "pixtral" else 0,
        published_params=float(_get(cfg, "_published_params", default=0.0)),
        quantization=checkpoint_quantization(cfg, name),
        quant_scope=checkpoint_quant_scope(cfg),
        architectures=tuple(str(a) for a in cfg.get("architectures") or []),
    )


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


# A tuned or dated version's suffix on a Hugging Face repository's name: it shares its base model's
# config.json architecture (Llama-3.1-8B and Llama-3.1-8B-Instruct, Qwen3-235B-A22B and its
# Instruct-2507, DeepSeek-R1 and DeepSeek-R1-0528).
TUNED_SUFFIX = re.compile(r"(-(instruct|chat|hf|base|it))?(-\d{4})?$")


def _untuned(repo: str) -> str:
    return TUNED_SUFFIX.sub("", repo.lower())


@functools.cache
def hf_repos() -> dict[str, str]:
    """The built-in models by the Hugging Face repository their config.json was copied from (the first
    word of its ``_source``), lower case, and by that name less a tuned version's suffix."""
    out: dict[str, str] = {}
    for name in builtin_models():
        src = str(json.loads(read_text(MODELS_DIR / f"{name}.json")).get("_source", "")).split()
        if src and src[0].count("/") == 1:
            out.setdefault(src[0].lower(), name)
            out.setdefault(_untuned(src[0]), name)
    return out


def builtin_for_repo(spec: str) -> str | None:
    """The built-in model a Hugging Face repository id (``meta-llama/Llama-3.1-8B-Instruct``) names, or
    None; a path on disk is never one."""
    if spec.count("/") != 1 or Path(spec).exists():
        return None
    repos = hf_repos()
    return repos.get(spec.lower()) or repos.get(_untuned(spec))


def load_model(spec: str) -> ModelArch:
    """A built-in model name (``llama-3.1-8b``), the Hugging Face repository id of one
    (``meta-llama/Llama-3.1-8B-Instruct``: ``builtin_for_repo``), or a path to a config.json."""
    path = Path(spec)
    if path.is_dir() and (path / "config.json").is_file():  # a Hugging Face model folder
        path = path / "config.json"
        spec = str(path)
    if spec.endswith(".json") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"model: file not found (got {spec})")
        name = path.parent.name if path.name == "config.json" else path.stem
    else:
        name = builtin_for_repo(spec) or spec
        path = MODELS_DIR / f"{name}.json"
        if not path.is_file():
            if spec.count("/") == 1 and not Path(spec).parent.is_dir():  # a repository id, not a folder here
                raise ConfigError(
                    f"model: '{spec}' is not a built-in model and no folder here; save its config.json "
                    f"(https://huggingface.co/{spec}/blob/main/config.json) and give that file's path"
                )
            raise ConfigError(
                f"model: unknown model '{spec}'; built-in models are {', '.join(builtin_models())}"
                " (or give a path to a Hugging Face config.json)"
            )
    try:
        cfg = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise ConfigError(f"model: {path} is not valid JSON (line {e.lineno}, column {e.colno})") from None
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = {**cfg, **cfg["text_config"]}
    return from_hf_config(cfg, name)
