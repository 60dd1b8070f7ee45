"""How many KV blocks fit: GPU memory x utilisation, minus weights, minus activations and runtime."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.hardware import GPU
from simulator.models import ModelArch

GIB = float(1 << 30)
RUNTIME_OVERHEAD_BYTES = 1.0 * GIB  # CUDA context leftovers, CUDA graphs, NCCL buffers, allocator slack


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget of one replica (bytes)."""

    hbm_bytes: float
    usable_bytes: float
    weight_bytes: float
    reserve_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float  # per GPU (after the tensor-parallel split of KV heads)
    block_bytes: float
    num_gpu_blocks: int  # including vLLM's null block

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def describe(self) -> str:
        g = GIB
        return (
            f"{self.usable_bytes / g:.1f} GiB usable = weights {self.weight_bytes / g:.1f} GiB"
            f" + reserve {self.reserve_bytes / g:.1f} GiB + KV {self.kv_bytes / g:.1f} GiB"
            f" ({self.num_usable_blocks} blocks of {self.block_bytes / 1024:.0f} KiB)"
        )


def activation_reserve(model: ModelArch, tp: int, max_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of a profiling step at the full token budget, plus sampler logits."""
    m = model
    per_token = (2 * m.intermediate_size / tp + (m.num_heads + 2 * m.num_kv_heads) * m.head_dim / tp + 2 * m.hidden_size)
    acts = max_batched_tokens * per_token * m.dtype_bytes
    logits = max_num_seqs * m.vocab_size / tp * 4.0  # fp32 logits of one sampling pass
    return acts + logits + RUNTIME_OVERHEAD_BYTES


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
    reserve_bytes: float | None = None,
    num_gpu_blocks_override: int | None = None,
) -> MemoryPlan:
    kv_tok = model.kv_bytes_per_token(kv_dtype_bytes, tp)
    block_bytes = kv_tok * block_size
    usable = gpu_memory_utilization * gpu.hbm_bytes
    weights = model.weight_bytes / tp
    reserve = activation_reserve(model, tp, max_batched_tokens, max_num_seqs) if reserve_bytes is None else reserve_bytes
    kv = usable - weights - reserve
    if num_gpu_blocks_override is not None:
        n = int(num_gpu_blocks_override)
        return MemoryPlan(gpu.hbm_bytes, usable, weights, reserve, n * block_bytes, kv_tok, block_bytes, n)
    if kv <= 0:
        hint = "raise hardware.tensor_parallel_size, engine.gpu_memory_utilization, or use a larger GPU"
        raise ConfigError(
            f"model {model.name} does not fit on {gpu.key} with tensor_parallel_size={tp}: weights "
            f"{weights / GIB:.1f} GiB + reserve {reserve / GIB:.1f} GiB > {usable / GIB:.1f} GiB usable "
            f"({gpu_memory_utilization} x {gpu.hbm_bytes / GIB:.1f} GiB), short by {-kv / GIB:.1f} GiB; {hint}"
        )
    n = int(kv // block_bytes)
    if n < 2:
        raise ConfigError(
            f"engine: no KV blocks left on {gpu.key}: {kv / GIB:.3f} GiB after weights and reserve holds "
            f"{n} block(s) of {block_bytes / 1024:.0f} KiB; raise engine.gpu_memory_utilization or hardware.tensor_parallel_size"
        )
    return MemoryPlan(gpu.hbm_bytes, usable, weights, reserve, n * block_bytes, kv_tok, block_bytes, n)
