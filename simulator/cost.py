"""Step latency from a roofline over the operators of one engine step.

Each operator class costs max(FLOPs / (peak x efficiency), bytes / (bandwidth x efficiency)); the
step costs the sum plus a fixed per-step overhead (scheduling, launches, sampling) and a small
per-sequence overhead. Weights are read once per step whatever the batch; attention reads each
scheduled request's KV cache once. The scheduler hands over a ``StepWork`` summary, so a step
costs O(1) here whatever the batch size.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from simulator.hardware import GPU
from simulator.models import PLAIN_LAYER_SMALL_KERNELS, ModelArch


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


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak reached per operator class, and fixed overheads. Fitted by calibration."""

    # Defaults: round numbers read off H100 measurements of two dense models (see
    # benchmarks/RESULTS.md); a GPU with its own calibration file uses that instead.
    matmul_compute: float = 0.60
    matmul_memory: float = 0.85
    attn_compute: float = 0.30
    attn_memory: float = 0.80
    step_overhead_s: float = 0.0020
    per_seq_overhead_s: float = 5.0e-6
    # Small kernels (norms, rotary, cache write, attention launch, activation) per layer per step,
    # for a layer with vLLM's six such kernels; a layer with more (Qwen3's q/k norms) scales it.
    per_layer_overhead_s: float = 4.0e-5
    per_token_overhead_s: float = 0.0  # unfused elementwise work per token (not fitted by default)
    allreduce_latency_s: float = 1.0e-5


@dataclass(frozen=True)
class OpCost:
    name: str
    flops: float
    bytes: float
    seconds: float
    bound: str


class CostModel:
    """Roofline step cost for one model on one GPU type with tensor parallelism ``tp``."""

    def __init__(
        self,
        model: ModelArch,
        gpu: GPU,
        tp: int = 1,
        eff: Efficiency | None = None,
        kv_dtype_bytes: float | None = None,
    ) -> None:
        self.model, self.gpu, self.tp = model, gpu, tp
        self.eff = eff or Efficiency()
        m, e = model, self.eff
        self._peak = gpu.flops(m.dtype)
        self._bw = gpu.hbm_bandwidth
        wb = m.dtype_bytes
        L = m.num_layers
        # Linear layers that every token passes through (per GPU after the TP split).
        dense_mlp_layers = L - m.num_moe_layers
        self._lin_params = (L * m.attn_params_per_layer + dense_mlp_layers * m.dense_mlp_params) / tp
        self._moe_layers = m.num_moe_layers
        self._expert_params = m.expert_params / tp
        self._shared_params = m.num_shared_experts * m.expert_params / tp
        self._wbytes = wb
        # Activations read and written per token per layer (inputs/outputs of the matmuls).
        inner = m.num_heads * m.head_dim + 2 * m.num_kv_heads * m.head_dim
        self._act_bytes_per_token = L * wb * (4 * m.hidden_size + 2 * inner / tp + 3 * m.intermediate_size / tp)
        # Attention.
        if m.is_mla:
            qk = m.kv_lora_rank + m.qk_rope_head_dim  # absorbed MLA attends in the latent space
            self._attn_flops_per_pair = 2 * L * m.num_heads / tp * (qk + m.kv_lora_rank)
        else:
            self._attn_flops_per_pair = 4 * L * m.num_heads / tp * m.head_dim
        self._kv_bytes = m.kv_bytes_per_token(kv_dtype_bytes) / (1 if m.is_mla else tp)
        # LM head.
        self._lm_flops = 2 * m.hidden_size * m.vocab_size / tp
        self._lm_bytes = m.hidden_size * m.vocab_size * wb / tp
        # Tensor-parallel all-reduce: two per layer of T x hidden activations (ring algorithm).
        self._ar_bytes_per_token = 2 * L * m.hidden_size * wb * 2 * (tp - 1) / tp if tp > 1 else 0.0
        self._ar_count = 2 * L if tp > 1 else 0
        self._host_bw = gpu.host_link_bandwidth
        self._fixed_s = e.step_overhead_s + e.per_layer_overhead_s * L * m.small_kernels_per_layer / PLAIN_LAYER_SMALL_KERNELS
        self._c_mm = self._peak * e.matmul_compute
        self._m_mm = self._bw * e.matmul_memory
        self._c_at = self._peak * e.attn_compute
        self._m_at = self._bw * e.attn_memory

    def _moe_touched(self, tokens: int) -> float:
        """Expected number of distinct routed experts a step's tokens touch, per MoE layer."""
        m = self.model
        if tokens <= 0:
            return 0.0
        p_miss = (1.0 - m.experts_per_token / m.num_experts) ** tokens
        return m.num_experts * (1.0 - p_miss)

    def _moe_work(self, T: int) -> tuple[float, float]:
        """FLOPs and bytes of the routed (and shared) experts for ``T`` tokens."""
        k = self.model.experts_per_token
        flops = 2.0 * T * self._moe_layers * (k * self._expert_params + self._shared_params)
        nbytes = self._moe_layers * (self._moe_touched(T) * self._expert_params + self._shared_params) * self._wbytes
        return flops, nbytes

    def _allreduce_s(self, T: int) -> float:
        return T * self._ar_bytes_per_token / self.gpu.interconnect_bandwidth + self._ar_count * self.eff.allreduce_latency_s

    def _moe_allreduce_s(self, T: int) -> float:
        """Seconds of the MoE and all-reduce terms (0 for dense models without tensor parallelism)."""
        s = 0.0
        if self._moe_layers:
            flops, nbytes = self._moe_work(T)
            s += max(flops / self._c_mm, nbytes / self._m_mm)
        if self._ar_count:
            s += self._allreduce_s(T)
        return s

    def ops(self, w: StepWork) -> list[OpCost]:
        """Per-operator FLOPs, bytes, seconds and bound for one step."""
        T = w.num_tokens
        out: list[OpCost] = []

        def add(name: str, flops: float, nbytes: float, c: float, mb: float) -> None:
            tc, tm = flops / c, nbytes / mb
            out.append(OpCost(name, flops, nbytes, max(tc, tm), "compute" if tc >= tm else "memory"))

        lin_flops = 2.0 * T * self._lin_params
        lin_bytes = self._lin_params * self._wbytes + T * self._act_bytes_per_token
        add("linear", lin_flops, lin_bytes, self._c_mm, self._m_mm)
        if self._moe_layers:
            add("moe", *self._moe_work(T), self._c_mm, self._m_mm)
        attn_flops = w.attn_pairs * self._attn_flops_per_pair
        attn_bytes = (w.context_tokens + T) * self._kv_bytes
        add("attention", attn_flops, attn_bytes, self._c_at, self._m_at)
        if w.num_sampled:
            add("lm_head", w.num_sampled * self._lm_flops, self._lm_bytes, self._c_mm, self._m_mm)
        if self._ar_count and T:
            out.append(OpCost("allreduce", 0.0, T * self._ar_bytes_per_token, self._allreduce_s(T), "link"))
        if w.swap_bytes:
            out.append(OpCost("swap", 0.0, w.swap_bytes, w.swap_bytes / self._host_bw, "host-link"))
        over = self._fixed_s + self.eff.per_seq_overhead_s * w.num_seqs + self.eff.per_token_overhead_s * T
        out.append(OpCost("overhead", 0.0, 0.0, over, "fixed"))
        return out

    def step_time(self, w: StepWork) -> float:
        """Seconds one engine step takes. Hot path: plain float arithmetic only."""
        T = w.num_tokens
        e = self.eff
        t = self._fixed_s + e.per_seq_overhead_s * w.num_seqs + e.per_token_overhead_s * T
        if T:
            t += max(2.0 * T * self._lin_params / self._c_mm,
                     (self._lin_params * self._wbytes + T * self._act_bytes_per_token) / self._m_mm)
            t += max(w.attn_pairs * self._attn_flops_per_pair / self._c_at,
                     (w.context_tokens + T) * self._kv_bytes / self._m_at)
            if self._moe_layers or self._ar_count:
                t += self._moe_allreduce_s(T)
        if w.num_sampled:
            t += max(w.num_sampled * self._lm_flops / self._c_mm, self._lm_bytes / self._m_mm)
        if w.swap_bytes:
            t += w.swap_bytes / self._host_bw
        return t

    def step_times(
        self,
        num_seqs: int,
        num_tokens: int,
        context_tokens: np.ndarray,
        attn_pairs: np.ndarray,
        num_sampled: int,
    ) -> np.ndarray:
        """``step_time`` of many steps that differ only in their context (a run of decode steps).

        Bit for bit the floats ``step_time`` gives one step at a time: the same operations in the
        same order (elementwise IEEE float64 arithmetic is the same in numpy as in Python), so
        the engine can price a run of steps at once without changing any result. The terms that
        do not depend on the context (fixed overheads, linear layers, MoE, all-reduce, LM head)
        are computed once with the scalar code.
        """
        T = num_tokens
        e = self.eff
        base = self._fixed_s + e.per_seq_overhead_s * num_seqs + e.per_token_overhead_s * T
        ctx = np.asarray(context_tokens)
        if not T:
            t = np.full(ctx.shape, base)
        else:
            base += max(2.0 * T * self._lin_params / self._c_mm,
                        (self._lin_params * self._wbytes + T * self._act_bytes_per_token) / self._m_mm)
            t = base + np.maximum(np.asarray(attn_pairs, np.float64) * self._attn_flops_per_pair / self._c_at,
                                  (ctx + T) * self._kv_bytes / self._m_at)
            if self._moe_layers or self._ar_count:
                t += self._moe_allreduce_s(T)
        if num_sampled:
            t += max(num_sampled * self._lm_flops / self._c_mm, self._lm_bytes / self._m_mm)
        return t

    def breakdown(self, w: StepWork) -> dict:
        ops = self.ops(w)
        return {
            "step_ms": sum(o.seconds for o in ops) * 1e3,
            "work": asdict(w),
            "ops": [{**asdict(o), "ms": o.seconds * 1e3} for o in ops],
        }


def decode_work(batch: int, context: int, new_tokens: int = 1) -> StepWork:
    """A uniform step: ``batch`` requests each computing ``new_tokens`` after ``context`` cached ones."""
    T = batch * new_tokens
    pairs = batch * new_tokens * (context + (new_tokens + 1) / 2)
    return StepWork(
        num_seqs=batch,
        num_tokens=T,
        num_prefill_tokens=0 if new_tokens == 1 else T,
        num_decode_tokens=T if new_tokens == 1 else 0,
        context_tokens=batch * context,
        attn_pairs=pairs,
        num_sampled=batch,
    )
