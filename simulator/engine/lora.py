"""Multi-LoRA serving: what ``engine.enable_lora`` makes of the engine.

vLLM V1's rules, as both engine steps follow them (``simulator.engine.rules``):
- a step serves at most ``max_loras`` adapters: a waiting request for another adapter is passed
  over (it goes back to the head of the queue, and requests behind it may be admitted), nothing is
  preempted for an adapter;
- an adapter not in a GPU slot is copied into one before the step (the slot of the least recently
  used adapter no running request uses), and read from storage first if it is not among the
  ``max_cpu_loras`` kept in host memory: the whole step waits for both;
- every LoRA-wrapped linear layer (q/k/v, output, gate/up, down projections) runs a shrink and an
  expand kernel over the step's tokens at ``max_lora_rank``, reading each adapter in use; a step
  with no adapter in use skips them;
- the GPU slots (``max_loras`` x ``max_lora_rank``) are allocated with the weights, so the KV pool
  shrinks by their size.

Here: the sizes and costs that follow from a model, a rank and a GPU.
"""

from __future__ import annotations

from simulator.engine.cost import LoraCost
from simulator.scenario.models import PLAIN_LAYER_SMALL_KERNELS, ModelArch

# A shrink and an expand kernel for each of the four LoRA-wrapped linear layers of a decoder layer.
LORA_KERNELS_PER_LAYER = 8
# Putting an adapter into a GPU slot, and reading one from storage into host memory (the page cache
# warm). vLLM 0.5.0's own timing log lines for Llama-2-7b adapters of rank 8-32 on an H100
# (data/lora/public.yaml, agullo-v0-adapter-load-latency): activating 8.3-9.3 ms whatever the rank;
# loading 0.04-0.11 s warm (0.10-0.51 s cold), the median of the warm loads 0.08 s.
LORA_LOAD_S = 9e-3
LORA_DISK_LOAD_S = 0.08


def elements_per_rank(m: ModelArch) -> int:
    """Elements of one decoder layer's LoRA matrices per unit of rank: an A (in x r) per output slice
    and a B (r x out) of every wrapped layer (q, k, v; output; gate, up; down). A mixture-of-experts
    layer's experts are not wrapped here (attention only)."""
    h, q, kv = m.hidden_size, m.num_heads * m.head_dim, m.num_kv_heads * m.head_dim
    attn = (3 * h + q + 2 * kv) + (q + h)
    if m.is_moe:
        return attn
    i = m.intermediate_size
    return attn + (2 * h + 2 * i) + (i + h)


def slot_bytes(m: ModelArch, rank: int, tp: int = 1) -> float:
    """GPU memory of one adapter slot on one GPU: every layer's matrices plus the embedding's and LM
    head's (vocabulary and hidden size each), at ``rank``, in the model's dtype."""
    per_rank = m.num_layers * elements_per_rank(m) + 2 * (m.padded_vocab_size + m.hidden_size)
    return rank * per_rank * m.dtype_bytes / tp


def lora_cost(m: ModelArch, rank: int, tp: int, per_layer_overhead_s: float) -> LoraCost:
    """The LoRA kernels of ``m`` at ``rank`` on one GPU of ``tp``: FLOPs (2 per multiply-add, shrink and
    expand) per token, bytes of one adapter, and the time of their launches priced as the layer's
    other small kernels are (``per_layer_overhead_s`` for a plain layer's)."""
    e = m.num_layers * elements_per_rank(m) * rank / tp
    fixed = per_layer_overhead_s * m.num_layers * LORA_KERNELS_PER_LAYER / PLAIN_LAYER_SMALL_KERNELS
    return LoraCost(fixed, 2.0 * e, e * m.dtype_bytes, LORA_LOAD_S, LORA_DISK_LOAD_S)
