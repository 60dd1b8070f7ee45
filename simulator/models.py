"""Model architectures: read a Hugging Face ``config.json`` and derive what serving cost depends on.

Everything the cost model and the KV-cache sizing need comes from here: parameter counts (total and
active), weight bytes, KV bytes per token, and the per-layer shapes of the matmuls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError

MODELS_DIR = Path(__file__).parent / "data" / "models"

DTYPE_BYTES = {
    "float32": 4.0,
    "float16": 2.0,
    "bfloat16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


# Small (non-matmul) kernels vLLM runs in a Llama-style layer; see ModelArch.small_kernels_per_layer.
PLAIN_LAYER_SMALL_KERNELS = 6


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
    qk_norm: bool = False  # RMSNorm on each query and key head (Qwen3)
    published_params: float = 0.0

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
    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def small_kernels_per_layer(self) -> int:
        """GPU kernels per layer besides the matrix products, as vLLM runs a dense layer: two fused
        residual-add RMSNorms, rotary embedding, KV-cache write, attention, SiLU-and-mul; Qwen3's
        query and key RMSNorms add two. The cost model scales its per-layer overhead by this."""
        return PLAIN_LAYER_SMALL_KERNELS + (2 if self.qk_norm else 0)

    @property
    def total_params(self) -> int:
        """Parameters of the whole model (norm weights included)."""
        dense_layers = self.num_layers - self.num_moe_layers
        mlp = dense_layers * self.dense_mlp_params
        if self.is_moe:
            router = self.hidden_size * self.num_experts
            per_moe = (self.num_experts + self.num_shared_experts) * self.expert_params + router
            mlp += self.num_moe_layers * per_moe
        norms = self.num_layers * (2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)) + self.hidden_size
        attn = self.num_layers * self.attn_params_per_layer
        return attn + mlp + norms + self.embedding_params + self.lm_head_params

    @property
    def active_params(self) -> int:
        """Parameters one token touches (only routed experts it is sent to count)."""
        if not self.is_moe:
            return self.total_params
        unused = self.num_experts - self.experts_per_token
        return self.total_params - self.num_moe_layers * unused * self.expert_params

    @property
    def dtype_bytes(self) -> float:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.dtype_bytes

    def kv_bytes_per_token(self, kv_dtype_bytes: float | None = None, tp: int = 1) -> float:
        """KV-cache bytes one token occupies on one GPU of a ``tp``-way tensor-parallel replica, all
        layers (MHA/GQA: K and V of the GPU's KV heads; MLA: the latent, kept whole on every GPU).

        As vLLM splits them: each GPU keeps ``max(1, num_kv_heads // tp)`` KV heads, so once ``tp``
        exceeds the KV-head count the heads are replicated (every GPU holds at least one)."""
        b = self.dtype_bytes if kv_dtype_bytes is None else kv_dtype_bytes
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * b
        return 2 * self.num_layers * self.kv_heads_per_gpu(tp) * self.head_dim * b

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        return 1 if self.is_mla else max(1, self.num_kv_heads // tp)


def _get(cfg: dict, *names: str, default=None):
    for n in names:
        if n in cfg and cfg[n] is not None:
            return cfg[n]
    return default


def from_hf_config(cfg: dict, name: str) -> ModelArch:
    """Build a ModelArch from the fields of a Hugging Face config.json."""
    for required in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"):
        if required not in cfg:
            raise ConfigError(f"model {name}: config.json has no field '{required}'")
    h = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    dtype = str(_get(cfg, "torch_dtype", "dtype", default="bfloat16")).replace("torch.", "")
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"model {name}: torch_dtype must be one of {sorted(DTYPE_BYTES)} (got {dtype})")
    num_experts = int(_get(cfg, "num_local_experts", "num_experts", "n_routed_experts", default=0))
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
        moe_intermediate_size=int(
            _get(cfg, "moe_intermediate_size", default=_get(cfg, "intermediate_size", default=0))
        )
        if num_experts
        else 0,
        num_shared_experts=int(_get(cfg, "n_shared_experts", "num_shared_experts", default=0)),
        first_dense_layers=int(_get(cfg, "first_k_dense_replace", default=0)),
        kv_lora_rank=int(_get(cfg, "kv_lora_rank", default=0)),
        q_lora_rank=int(_get(cfg, "q_lora_rank", default=0)),
        qk_rope_head_dim=int(_get(cfg, "qk_rope_head_dim", default=0)),
        qk_nope_head_dim=int(_get(cfg, "qk_nope_head_dim", default=0)),
        v_head_dim=int(_get(cfg, "v_head_dim", default=0)),
        sliding_window=int(_get(cfg, "sliding_window", default=0) or 0),
        qk_norm=bool(_get(cfg, "qk_norm", default=cfg.get("model_type") in ("qwen3", "qwen3_moe"))),
        published_params=float(_get(cfg, "_published_params", default=0.0)),
    )


def builtin_models() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.json"))


def load_model(spec: str) -> ModelArch:
    """A built-in model name (``llama-3.1-8b``) or a path to a config.json."""
    path = Path(spec)
    if spec.endswith(".json") or path.is_file():
        if not path.is_file():
            raise ConfigError(f"model: file not found (got {spec})")
        name = path.parent.name if path.name == "config.json" else path.stem
    else:
        path = MODELS_DIR / f"{spec}.json"
        if not path.is_file():
            raise ConfigError(
                f"model: unknown model '{spec}'; built-in models are {', '.join(builtin_models())}"
                " (or give a path to a Hugging Face config.json)"
            )
        name = spec
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"model: {path} is not valid JSON (line {e.lineno}, column {e.colno})") from None
    if "text_config" in cfg and "hidden_size" not in cfg:
        cfg = {**cfg, **cfg["text_config"]}
    return from_hf_config(cfg, name)
