"""Measure real forward-step latencies of a dense decoder model on one GPU.

The simulator's step-latency model is a roofline cost function; this module
produces the measurements it is calibrated against.  It builds a random-weight
model of a dense Llama/Qwen3-style architecture straight from a Hugging Face
style ``config.json`` (the presets in ``simulator/data/models``), puts it on
the GPU in bf16 and times one forward step over a grid of batch shapes:

* decode: ``new_tokens = 1`` for every sequence, ``context`` tokens already in
  the KV cache;
* prefill / chunked prefill: ``new_tokens`` per sequence on top of
  ``context`` cached tokens (``context = 0`` is a plain prefill).

One step is: token embedding, for every layer RMSNorm, fused QKV projection,
(per-head q/k RMSNorm for Qwen3), rotary embedding, write of the new keys and
values into a per-layer KV cache, attention of the new tokens over
``context + new_tokens`` keys (grouped-query, causal among the new tokens,
through ``torch.nn.functional.scaled_dot_product_attention``), output
projection, RMSNorm, fused gate/up projection, SwiGLU, down projection; then
the final norm and the LM head on the last token of each sequence.

Every step is captured once in a CUDA graph and replayed, as serving engines
do for decode; the latency of a point is the median over replays timed with
CUDA events.  Points whose KV cache and activations would not fit in the GPU
memory left after the weights are skipped (and listed in the sidecar).

Usage::

    python -m tools.profiler --model simulator/data/models/llama-3.1-8b.json \\
        --gpu-name h100-sxm --out data/profiles/h100-sxm_llama-3.1-8b.csv [--quick]

Output: a CSV with columns ``gpu,model,batch,new_tokens,context,ms`` and a
sidecar ``<out>.meta.json`` (software versions, device, grid, skipped points,
per-point spread).

``--streaming`` measures instead how fast the GPU streams weights through a
matrix-vector product (the work of a decode step's linear layers), with no model:

    python -m tools.profiler --streaming --gpu-name h100-sxm \
        --out data/profiles/streaming/h100-sxm.csv

For each weight shape it captures, in one CUDA graph, a chain of ``F.linear``
calls on distinct copies of the matrix (together larger than any cache, so every
call reads its weights from HBM) and reports the time per call; a chain of tiny
elementwise kernels gives the per-kernel floor. Columns:
``gpu,op,out_features,in_features,batch,bytes,copies,ms``. The slope of time
over bytes is the achievable weight-streaming bandwidth, which pins the cost
model's ``matmul_memory`` efficiency during calibration (``calibrate.py``).

``--mode`` adds seven measurements of what vLLM-style serving adds on top (each writes a CSV
and a ``<out>.meta.json`` with versions, device, method and per-point spread; see
``data/profiles/README-measurements.md`` for the results and the exact commands):

* ``compare`` (with ``--model``): the same step as the default mode, timed as ``compiled_graph``
  (:class:`PiecewiseForward`: tokens on one axis, residual add fused into the next RMSNorm, pieces
  between attentions compiled once by ``torch.compile``/Inductor with a dynamic token axis, whole
  step captured in a CUDA graph per shape), ``graph`` (the default mode's step in a CUDA graph),
  ``eager`` (the default mode's step launched from Python) and, via ``--modes``, ``compiled`` and
  ``graph_pieces``; decode batches 1..512 at contexts 512 and 2048, the same at half the layers
  for four batches (per-layer slope and per-step intercept), batch-1 prefills of 512..8192 tokens.
  Columns ``gpu,model,mode,layers,batch,new_tokens,context,ms,ms_sync,host_ms``; the meta also
  holds kernels per step and per layer of each way of running the step.
* ``moe``: the routed-expert FFN of one MoE layer (``--moe-models PRESET.json[:TP]``) as
  ``torch._grouped_mm`` and as a loop of per-expert matmuls, with uniform random top-k routing,
  for 1..4096 tokens.
* ``fp8``: ``torch._scaled_mm`` (tensor-wise, row-wise) and ``F.scaled_mm`` (1x128 x 128x128
  blocks) against bf16 ``F.linear``, M = 1..8192.
* ``allreduce``: NCCL all-reduce of bf16 buffers of 2 KiB..256 MiB over the host's GPUs
  (one process per GPU, ``torch.multiprocessing.spawn``), eager and in a CUDA graph.
* ``tp`` (with ``--model``, ``--tp N``, default 2): tensor-parallel steps, one process per GPU
  (``torch.multiprocessing.spawn``), NCCL, the Megatron/vLLM layout (:class:`TPForward`): column-parallel
  fused QKV and gate/up, row-parallel output and down projections each followed by an all-reduce of the
  hidden states, KV heads split (``max(1, kv_heads // tp)`` per GPU, replicated past the KV-head
  count), vocabulary-parallel embedding and LM head. The pieces of ``compare``'s compiled step are
  compiled per rank and the whole step, collectives included, is captured in one CUDA graph per shape
  (falling back to the uncompiled pieces, then to eager, if that fails); decode batches 1..256 at
  contexts 512 and 2048 and batch-1 prefills of 512..8192 tokens, timed with CUDA events on rank 0
  after a barrier. ``--layers L`` builds the first L layers only (a model too large for the GPUs);
  ``--gpu-name auto`` labels the rows from the device name. Columns
  ``gpu,model,tp,layers,batch,new_tokens,context,ms``.
* ``sustained``: minutes of the same work back to back (``--budget-s`` seconds of a 40-layer
  Qwen3-14B step's linear layers at 8,192 tokens, then 40 s of the same at 64 tokens over distinct
  weight copies), a row per ~1 s window with nvidia-smi's SM clock, power, temperature and
  throttle reasons: whether power and heat pull the rate down over a long burst. Columns
  ``gpu,workload,t_s,replays,ms_per_replay,tflops,gbps,sm_clock_mhz,power_w,temp_c,throttle_reasons``.
* ``mixed_attention``: one variable-length flash-attention call over N one-token requests and a
  prefill chunk (a mixed step, as vLLM's FlashAttention backend batches it) against each part
  alone, for three head layouts. Columns ``gpu,case,decodes,decode_context,prefill_tokens,heads,
  kv_heads,head_dim,ms,ms_decodes_alone,ms_prefill_alone``.

::

    python -m tools.profiler --mode compare --model simulator/data/models/llama-3.1-8b.json \
        --gpu-name h100-sxm --out data/profiles/compiled/h100-sxm_llama-3.1-8b.csv

Run it from the repository root. Beyond torch it needs numpy and the package's own
:mod:`simulator.calibrate` (for the CSV header that calibration reads); torch is imported
inside :func:`main`, so ``--help`` works without it.
"""

from __future__ import annotations

import argparse
import copy
import csv
import datetime as _dt
import gc
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from simulator.calibrate import STREAMING_COLUMNS

# --------------------------------------------------------------------------
# Grids
# --------------------------------------------------------------------------

DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
DECODE_CONTEXTS = [128, 512, 1024, 2048, 4096, 8192]
PREFILL_BATCHES = [1, 2, 4, 8]
PREFILL_NEW_TOKENS = [16, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
PREFILL_CONTEXTS = [0, 1024, 4096]
MAX_PREFILL_TOKENS = 16384  # batch * new_tokens cap for prefill points

QUICK_DECODE_BATCHES = [1, 8, 64, 256]
QUICK_DECODE_CONTEXTS = [128, 2048]
QUICK_PREFILL_BATCHES = [1, 4]
QUICK_PREFILL_NEW_TOKENS = [16, 512, 4096]
QUICK_PREFILL_CONTEXTS = [0, 1024]

# Memory kept free beyond the per-point estimate (cuBLAS workspaces, graph
# pools, allocator rounding, the CUDA context's own growth).
DEFAULT_MARGIN_BYTES = 2 * 1024**3

MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank")


# --------------------------------------------------------------------------
# Architecture description (pure Python, no torch)
# --------------------------------------------------------------------------


class Arch:
    """The dense-decoder dimensions the profiler needs, read from a config."""

    def __init__(self, cfg: dict, name: str):
        for key in MOE_KEYS + MLA_KEYS:
            if cfg.get(key):
                raise ValueError(
                    f"{name}: '{key}' is set; the profiler builds dense "
                    "Llama/Qwen3-style models only (no MoE, no MLA)"
                )
        self.name = name
        self.model_type = cfg.get("model_type", "llama")
        self.hidden = int(cfg["hidden_size"])
        self.layers = int(cfg["num_hidden_layers"])
        self.heads = int(cfg["num_attention_heads"])
        self.kv_heads = int(cfg.get("num_key_value_heads") or self.heads)
        self.head_dim = int(cfg.get("head_dim") or self.hidden // self.heads)
        self.intermediate = int(cfg["intermediate_size"])
        self.vocab = int(cfg["vocab_size"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-5))
        self.rope_theta = float(cfg.get("rope_theta", 10000.0))
        self.tied = bool(cfg.get("tie_word_embeddings", False))
        # Qwen3 normalises each query and key head before the rotary embedding.
        self.qk_norm = self.model_type in ("qwen3",)
        if self.heads % self.kv_heads:
            raise ValueError(f"{name}: heads {self.heads} not a multiple of kv heads {self.kv_heads}")

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_params(self) -> int:
        h, i = self.hidden, self.intermediate
        attn = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        mlp = 3 * h * i
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attn + mlp + norms

    def total_params(self) -> int:
        emb = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params() + emb + self.hidden

    def allocated_params(self) -> int:
        """Parameters the profiler allocates: the input embedding shares the
        LM-head matrix (a gather costs the same from either), saving memory
        for KV cache."""
        return self.layers * self.layer_params() + self.vocab * self.hidden + self.hidden

    def kv_bytes_per_token(self, elem_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_dim * elem_bytes

    def activation_bytes(self, batch: int, new_tokens: int, elem_bytes: int = 2) -> int:
        """A generous upper bound of the transient memory of one step."""
        n = batch * new_tokens
        qkv = self.q_dim + 2 * self.kv_dim
        per_token = 3 * self.hidden + max(
            2 * qkv + 2 * self.q_dim,  # attention phase: qkv, rotary copies, output
            3 * self.intermediate + self.hidden,  # MLP phase: gate/up, SwiGLU product
        )
        act = n * per_token * elem_bytes
        # float32 temporaries of the norms where they are not fused
        act += n * self.hidden * 4 * 2
        # attention log-sum-exp and logits of the last tokens
        act += batch * self.heads * new_tokens * 4 + batch * self.vocab * 4
        return int(act)


# --------------------------------------------------------------------------
# Grid construction
# --------------------------------------------------------------------------


def build_grid(quick: bool, max_prefill_tokens: int = MAX_PREFILL_TOKENS):
    """Return the list of (batch, new_tokens, context) points, decode first."""
    if quick:
        db, dc = QUICK_DECODE_BATCHES, QUICK_DECODE_CONTEXTS
        pb, pn, pc = QUICK_PREFILL_BATCHES, QUICK_PREFILL_NEW_TOKENS, QUICK_PREFILL_CONTEXTS
    else:
        db, dc = DECODE_BATCHES, DECODE_CONTEXTS
        pb, pn, pc = PREFILL_BATCHES, PREFILL_NEW_TOKENS, PREFILL_CONTEXTS
    points = []
    for c in dc:
        for b in db:
            points.append((b, 1, c))
    for c in pc:
        for b in pb:
            for n in pn:
                if b * n > max_prefill_tokens:
                    continue
                points.append((b, n, c))
    grid = {
        "decode": {"batch": db, "context": dc, "new_tokens": [1]},
        "prefill": {
            "batch": pb,
            "new_tokens": pn,
            "context": pc,
            "max_batch_x_new_tokens": max_prefill_tokens,
        },
    }
    return points, grid


# --------------------------------------------------------------------------
# The model (torch is passed in so that it is imported only by main())
# --------------------------------------------------------------------------


class Model:
    """Random-weight dense decoder held as plain tensors."""

    def __init__(self, torch, arch: Arch, device, dtype, num_layers=None, seed=0):
        self.torch = torch
        self.F = torch.nn.functional
        self.arch = arch
        self.device = device
        self.dtype = dtype
        self.num_layers = num_layers or arch.layers
        a = arch
        g = torch.Generator(device=device)
        g.manual_seed(seed)

        def rand(*shape, fan_in):
            t = torch.empty(*shape, device=device, dtype=dtype)
            t.normal_(0.0, 1.0 / math.sqrt(fan_in), generator=g)
            return t

        def norm_w(n):
            t = torch.empty(n, device=device, dtype=dtype)
            t.uniform_(0.9, 1.1, generator=g)
            return t

        self.layers = []
        for _ in range(self.num_layers):
            w = {
                "ln1": norm_w(a.hidden),
                "wqkv": rand(a.q_dim + 2 * a.kv_dim, a.hidden, fan_in=a.hidden),
                "wo": rand(a.hidden, a.q_dim, fan_in=a.q_dim),
                "ln2": norm_w(a.hidden),
                "wgu": rand(2 * a.intermediate, a.hidden, fan_in=a.hidden),
                "wd": rand(a.hidden, a.intermediate, fan_in=a.intermediate),
            }
            if a.qk_norm:
                w["qn"] = norm_w(a.head_dim)
                w["kn"] = norm_w(a.head_dim)
            self.layers.append(w)
        self.final_norm = norm_w(a.hidden)
        # One vocab x hidden matrix serves as LM head and as embedding table.
        self.lm_head = rand(a.vocab, a.hidden, fan_in=a.hidden)
        self._rope_len = 0
        self.cos = self.sin = None
        self.has_fused_rms = hasattr(self.F, "rms_norm")

    # -- pieces ------------------------------------------------------------

    def ensure_rope(self, length: int):
        torch = self.torch
        if length <= self._rope_len:
            return
        hd = self.arch.head_dim
        inv = 1.0 / (
            self.arch.rope_theta
            ** (torch.arange(0, hd, 2, device=self.device, dtype=torch.float32) / hd)
        )
        pos = torch.arange(length, device=self.device, dtype=torch.float32)
        freqs = torch.outer(pos, inv)
        self.cos = torch.cat((freqs.cos(), freqs.cos()), dim=-1).to(self.dtype)
        # sin with the sign of rotate_half folded in: rotate_half(x) * sin
        # == cat(x2, x1) * cat(-sin, sin)
        self.sin = torch.cat((-freqs.sin(), freqs.sin()), dim=-1).to(self.dtype)
        self._rope_len = length

    def rms_norm(self, x, w):
        if self.has_fused_rms:
            return self.F.rms_norm(x, (x.shape[-1],), w, self.arch.eps)
        xf = x.float()
        xf = xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.arch.eps)
        return xf.to(x.dtype) * w

    def rope(self, x, cos, sin):
        """Rotary embedding (rotate-half form) in three kernels.

        x: [B, T, heads, hd]; cos/sin: [T, hd] (sin sign-folded), broadcast
        over batch and heads."""
        half = x.shape[-1] // 2
        rot = self.torch.cat((x[..., half:], x[..., :half]), dim=-1)
        out = x * cos[None, :, None, :]
        return out.addcmul_(rot, sin[None, :, None, :])

    def new_cache(self, batch: int, length: int):
        """Per-layer K and V caches, layout [batch, length, kv_heads, head_dim]."""
        a = self.arch
        shape = (self.num_layers, 2, batch, length, a.kv_heads, a.head_dim)
        cache = self.torch.empty(shape, device=self.device, dtype=self.dtype)
        # Fill the already-cached part with random data (never time on zeros).
        cache.normal_(0.0, 1.0)
        return cache

    def attention(self, q, k_all, v_all, context: int, new_tokens: int):
        """q: [B, T, H, hd]; k_all/v_all: [B, S, Hkv, hd] with S = context + T.

        Returns [B, T, H * hd].
        """
        F = self.F
        a = self.arch
        b, t = q.shape[0], q.shape[1]
        group = a.heads // a.kv_heads
        k = k_all.transpose(1, 2)  # [B, Hkv, S, hd] (view)
        v = v_all.transpose(1, 2)
        if t == 1:
            # Decode: the one new token sees every key, so no mask.  The query
            # heads that share a KV head are laid out as the query "sequence"
            # of that KV head: exact, and plain multi-head attention for the
            # kernel (what flash-decoding kernels do for GQA).
            qg = q.reshape(b, a.kv_heads, group, a.head_dim)
            o = F.scaled_dot_product_attention(qg, k, v)
            return o.reshape(b, 1, a.q_dim)
        qt = q.transpose(1, 2)  # [B, H, T, hd]
        if context == 0:
            o = F.scaled_dot_product_attention(qt, k, v, is_causal=True, enable_gqa=group > 1)
        else:
            # New token i (absolute position context + i) sees keys 0..context+i:
            # causal mask aligned to the lower right corner.
            from torch.nn.attention.bias import causal_lower_right

            mask = causal_lower_right(t, context + t)
            o = F.scaled_dot_product_attention(qt, k, v, attn_mask=mask, enable_gqa=group > 1)
        return o.transpose(1, 2).reshape(b, t, a.q_dim)

    def forward(self, tokens, cache, context: int):
        """One step: tokens [B, T] new tokens, cache from new_cache(B, context+T).

        Returns the logits of the last token of every sequence, [B, vocab].
        """
        F = self.F
        a = self.arch
        b, t = tokens.shape
        cos = self.cos[context : context + t]
        sin = self.sin[context : context + t]
        x = F.embedding(tokens, self.lm_head)  # [B, T, hidden]
        for li, w in enumerate(self.layers):
            h = self.rms_norm(x, w["ln1"])
            qkv = F.linear(h, w["wqkv"])
            del h
            nq = a.heads + a.kv_heads
            if a.qk_norm:
                q = qkv[..., : a.q_dim].view(b, t, a.heads, a.head_dim)
                k = qkv[..., a.q_dim : a.q_dim + a.kv_dim].view(b, t, a.kv_heads, a.head_dim)
                qk = self.torch.cat((self.rms_norm(q, w["qn"]), self.rms_norm(k, w["kn"])), dim=2)
                del q, k
            else:
                qk = qkv[..., : a.q_dim + a.kv_dim].view(b, t, nq, a.head_dim)
            # Queries and keys share one rotary pass.
            qk = self.rope(qk, cos, sin)
            q = qk[:, :, : a.heads]
            v = qkv[..., a.q_dim + a.kv_dim :].view(b, t, a.kv_heads, a.head_dim)
            kc = cache[li, 0]
            vc = cache[li, 1]
            kc[:, context : context + t] = qk[:, :, a.heads :]
            vc[:, context : context + t] = v
            del qkv, qk, v
            o = self.attention(q, kc, vc, context, t)
            del q
            x = x + F.linear(o, w["wo"])
            del o
            h = self.rms_norm(x, w["ln2"])
            gu = F.linear(h, w["wgu"])
            del h
            g, u = gu.chunk(2, dim=-1)
            act = F.silu(g)
            act.mul_(u)
            del g, u, gu
            x = x + F.linear(act, w["wd"])
            del act
        last = self.rms_norm(x[:, -1], self.final_norm)
        return F.linear(last, self.lm_head)


# --------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------


def _free_memory(torch) -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def measure_point(torch, model: Model, batch: int, new_tokens: int, context: int,
                  warmup: int, min_reps: int, max_reps: int, budget_s: float,
                  use_graph: bool = True):
    """Time one forward step; returns (median_ms, min_ms, max_ms, reps)."""
    dev = model.device
    cache = model.new_cache(batch, context + new_tokens)
    tokens = torch.randint(0, model.arch.vocab, (batch, new_tokens), device=dev)
    graph = None
    step = fwd = None
    try:
        with torch.inference_mode():
            def fwd(tokens=tokens, cache=cache):
                return model.forward(tokens, cache, context)

            _warm_up(torch, fwd)
            if use_graph:
                torch.cuda.empty_cache()
                graph = _capture(torch, fwd)
                step = graph.replay
            else:
                step = fwd

            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            # Warm-up replays; the first one also sizes the repetition count.
            first_ms = None
            warm_ms = 0.0
            for _i in range(max(1, warmup)):
                start.record()
                step()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
                warm_ms += ms
                if first_ms is None:
                    first_ms = ms
                if warm_ms > 500.0:  # long steps: one warm-up replay is enough
                    break
            reps = int(budget_s * 1000.0 / max(first_ms, 1e-3))
            reps = max(min_reps, min(max_reps, reps))
            times = _replay_ms(torch, step, reps)
    finally:
        del step, fwd, graph, cache, tokens  # free the KV cache before the next point
        _free_memory(torch)
    return float(np.median(times)), float(times.min()), float(times.max()), reps


def attention_self_test(torch, device) -> dict:
    """Check the attention paths against an explicit float32 reference and
    report which SDPA backend each one can run on."""
    F = torch.nn.functional
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    res = {}
    g = torch.Generator(device=device)
    g.manual_seed(1)
    b, h, hkv, hd = 2, 8, 2, 128
    group = h // hkv

    def ref(q, k, v, ctx):
        # q [B,H,T,hd], k/v [B,Hkv,S,hd]
        k = k.repeat_interleave(group, dim=1).float()
        v = v.repeat_interleave(group, dim=1).float()
        s = q.float() @ k.transpose(-1, -2) / math.sqrt(hd)
        t, sl = q.shape[2], k.shape[2]
        i = torch.arange(t, device=device)[:, None]
        j = torch.arange(sl, device=device)[None, :]
        s = s.masked_fill(j > i + ctx, float("-inf"))
        return torch.softmax(s, -1) @ v

    cases = {"decode": (1, 300), "prefill": (64, 0), "chunked_prefill": (48, 200)}
    backends = {
        "flash": [SDPBackend.FLASH_ATTENTION],
        "efficient": [SDPBackend.EFFICIENT_ATTENTION],
        "cudnn": [SDPBackend.CUDNN_ATTENTION],
        "any": [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    }
    for cname, (t, ctx) in cases.items():
        q = torch.randn(b, h, t, hd, device=device, dtype=torch.bfloat16, generator=g)
        k = torch.randn(b, hkv, ctx + t, hd, device=device, dtype=torch.bfloat16, generator=g)
        v = torch.randn(b, hkv, ctx + t, hd, device=device, dtype=torch.bfloat16, generator=g)
        r = ref(q, k, v, ctx)
        res[cname] = {}
        for bname, bl in backends.items():
            try:
                with sdpa_kernel(bl), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if t == 1:
                        qg = q.transpose(1, 2).reshape(b, hkv, group, hd)
                        o = F.scaled_dot_product_attention(qg, k, v)
                        o = o.reshape(b, 1, h, hd).transpose(1, 2)
                    elif ctx == 0:
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                    else:
                        o = F.scaled_dot_product_attention(
                            q, k, v, attn_mask=causal_lower_right(t, ctx + t), enable_gqa=True)
                err = float((o.float() - r).norm() / r.norm())
                res[cname][bname] = {"ok": err < 2e-2, "rel_err": round(err, 6)}
            except Exception as exc:  # backend refused the inputs
                res[cname][bname] = {"ok": False, "error": str(exc).splitlines()[0][:160]}
    return res


def _nvidia_smi() -> dict:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
             "clocks.max.mem,power.limit", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        return {"query": out.stdout.strip()}
    except Exception as exc:  # not fatal: the sidecar just lacks it
        return {"error": str(exc)}


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


# Weight shapes (out_features, in_features) of the linear layers of the measured presets, plus
# small and very large ones so the bytes axis spans 2 MB to 1 GB.
STREAMING_SHAPES = (
    (1024, 1024), (2048, 2048), (4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096),
    (5120, 8192), (10240, 5120), (5120, 25600), (51200, 5120), (128256, 4096),
)
STREAMING_POOL_BYTES = 3 * 2**30  # copies per shape: at least this much (60x the H100's L2)


def _warm_up(torch, fn) -> None:
    """One eager run on a side stream: lazy initialisation (cuBLAS handles and workspaces,
    attention kernels) stays out of a later capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def _capture(torch, fn):
    """``fn`` captured in a CUDA graph (call ``_warm_up`` first)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _replay_ms(torch, step, reps: int) -> np.ndarray:
    """CUDA-event milliseconds of ``reps`` back-to-back calls of ``step``."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize()
    return np.array([a.elapsed_time(b) for a, b in zip(starts, ends)], dtype=np.float64)


def _time_graph(torch, fn, reps: int) -> float:
    """Median milliseconds of ``reps`` replays of ``fn`` captured in one CUDA graph."""
    _warm_up(torch, fn)
    graph = _capture(torch, fn)
    graph.replay()  # first replay not timed
    torch.cuda.synchronize()
    ms = float(np.median(_replay_ms(torch, graph.replay, reps)))
    del graph
    _free_memory(torch)
    return ms


def measure_streaming(torch, gpu_name: str, out_path: Path, reps: int = 20) -> list[list]:
    """Weight-streaming GEMV timings and the per-kernel floor (see the module docstring)."""
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    rows = []
    with torch.inference_mode():
        for n_out, n_in in STREAMING_SHAPES:
            nbytes = 2 * n_out * n_in
            copies = max(4, -(-STREAMING_POOL_BYTES // nbytes))
            ws = [torch.empty(n_out, n_in, device=dev, dtype=torch.bfloat16).normal_(0, 0.02)
                  for _ in range(copies)]
            for batch in (1, 16):
                x = torch.randn(batch, n_in, device=dev, dtype=torch.bfloat16)

                def chain(x=x, ws=ws):
                    for w in ws:
                        F.linear(x, w)

                ms = _time_graph(torch, chain, reps) / copies
                rows.append([gpu_name, "gemv", n_out, n_in, batch, nbytes, copies, f"{ms:.5f}"])
                print(f"gemv   {n_out:6d} x {n_in:6d} batch {batch:3d}: {ms*1e3:8.2f} us "
                      f"({nbytes / ms / 1e6:7.1f} GB/s over {copies} copies)", flush=True)
            del ws
            _free_memory(torch)
        v = torch.zeros(4096, device=dev, dtype=torch.bfloat16)
        n = 2000

        def tiny(v=v):
            for _ in range(n):
                v.add_(1)

        ms = _time_graph(torch, tiny, reps) / n
        rows.append([gpu_name, "elementwise", 1, 4096, 1, 2 * 4096, n, f"{ms:.5f}"])
        print(f"kernel floor (tiny elementwise kernel in a graph): {ms*1e3:.2f} us", flush=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fh, wr = _csv_out(out_path, STREAMING_COLUMNS)
    with fh:
        wr.writerows(rows)
    return rows


# --------------------------------------------------------------------------
# Added modes: compare (compiled + CUDA graph vs graph vs eager), moe, fp8, allreduce
# --------------------------------------------------------------------------


def _dev(torch):
    """The device the added modes measure on (a seam for CPU dry runs of the code paths)."""
    return torch.device("cuda", 0)


def _software(torch) -> dict:
    sw = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
    }
    try:
        sw["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # not fatal
        sw["cudnn"] = None
    try:
        import triton

        sw["triton"] = triton.__version__
    except Exception:
        sw["triton"] = None
    try:
        v = torch.cuda.nccl.version()
        sw["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        sw["nccl"] = None
    return sw


def _device_meta(torch, index: int = 0) -> dict:
    props = torch.cuda.get_device_properties(index)
    return {
        "name": props.name,
        "total_memory_bytes": int(props.total_memory),
        "multiprocessors": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "nvidia_smi": _nvidia_smi(),
    }


def _write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)


def _run_meta(torch, args, kind: str, **rest) -> dict:
    """The sidecar's header for a ``--mode`` run: what, when, with which software on which device,
    by which command; then ``rest``."""
    return {"kind": kind, "gpu": args.gpu_name,
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "software": _software(torch), "device": _device_meta(torch), "command": " ".join(sys.argv), **rest}


def _csv_out(path: Path, columns):
    """A CSV file opened for writing with its header row already on disk (a run stopped early
    leaves a valid file): the open file and its writer."""
    fh = path.open("w", newline="")
    wr = csv.writer(fh)
    wr.writerow(columns)
    fh.flush()
    return fh, wr


def _first_line(exc: BaseException, n: int = 200) -> str:
    s = str(exc)
    return (s.splitlines()[0] if s else type(exc).__name__)[:n]


def _time_graph_or_eager(torch, fn, reps: int) -> tuple[float, str]:
    """Median ms of ``fn`` replayed from a CUDA graph; if capture fails, of back-to-back eager calls."""
    try:
        return _time_graph(torch, fn, reps), "graph"
    except Exception as exc:  # not capturable: time it eagerly instead
        _free_memory(torch)
        print(f"  (capture failed: {_first_line(exc, 120)}; timing eager launches)", flush=True)
        _warm_up(torch, fn)
        ms = float(np.median(_replay_ms(torch, fn, reps)))
        _free_memory(torch)
        return ms, "eager"


# -- sustained ----------------------------------------------------------------

SUSTAINED_COLUMNS = ("gpu", "workload", "t_s", "replays", "ms_per_replay", "tflops", "gbps",
                     "sm_clock_mhz", "power_w", "temp_c", "throttle_reasons")
# The linear layers of one Qwen3-14B layer (out, in): fused QKV, output, fused gate/up, down.
SUSTAINED_LAYER = ((7168, 5120), (5120, 5120), (34816, 5120), (5120, 17408))
SUSTAINED_LAYERS = 40


def _smi_sampler(path: Path):
    """nvidia-smi sampling the SM clock, power, temperature and throttle reasons every 500 ms
    into ``path`` (the process; stop it with ``terminate``)."""
    fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    fh = path.open("w")
    return subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                             "-lms", "500", "-i", "0"], stdout=fh, stderr=subprocess.DEVNULL)


def _smi_samples(path: Path) -> list[tuple[float, str, str, str, str]]:
    """(epoch seconds, SM MHz, W, deg C, throttle mask) rows of a ``_smi_sampler`` file."""
    rows = []
    for line in path.read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            t = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue
        rows.append((t, *parts[1:]))
    return rows


def run_sustained(torch, args) -> int:
    """The same work replayed back to back for minutes, as a long burst keeps a serving GPU busy:
    does the rate hold, or do power and heat pull the clocks down? Two workloads, each a CUDA
    graph: ``prefill`` (the linear layers of a 40-layer Qwen3-14B step of 8,192 tokens,
    compute-bound) and ``decode`` (the same layers at 64 tokens over distinct weight copies,
    bandwidth-bound). A row per window of replays, with nvidia-smi's readings of the moment."""
    import torch.nn.functional as F

    dev = _dev(torch)
    torch.cuda.set_device(dev)
    seconds = {"prefill": 20.0 if args.quick else float(args.budget_s or 150.0),
               "decode": 10.0 if args.quick else 40.0}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    smi_path = out_path.with_name(out_path.name + ".smi.tmp")
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = _run_meta(
        torch, args, "sustained",
        method="prefill: x[8192, in] W[out, in]^T for the four linear layers of Qwen3-14B, 40 "
                      "layers (one set of weights, random N(0, 0.02) bf16; x random), one CUDA graph "
                      "per step; decode: the same at 64 tokens over 40 distinct weight copies (HBM-bound). "
                      "Replayed back to back; a row per window of replays timed with CUDA events "
                      "(window about 1 s); nvidia-smi sampled every 500 ms, the sample nearest the "
                      "window's end joined.",
        seconds=seconds, columns=list(SUSTAINED_COLUMNS))
    _write_json(meta_path, meta)
    smi = _smi_sampler(smi_path)
    rows = []
    try:
        with torch.inference_mode():
            for workload in ("prefill", "decode"):
                tokens, copies = (8192, 1) if workload == "prefill" else (64, SUSTAINED_LAYERS)
                ws = [[torch.empty(o, i, device=dev, dtype=torch.bfloat16).normal_(0, 0.02)
                       for o, i in SUSTAINED_LAYER] for _ in range(copies)]
                xs = {i: torch.randn(tokens, i, device=dev, dtype=torch.bfloat16) for _, i in SUSTAINED_LAYER}
                flops = 2.0 * tokens * sum(o * i for o, i in SUSTAINED_LAYER) * SUSTAINED_LAYERS
                wbytes = 2.0 * sum(o * i for o, i in SUSTAINED_LAYER) * SUSTAINED_LAYERS

                def step(ws=ws, xs=xs):
                    for layer in range(SUSTAINED_LAYERS):
                        for w in ws[layer % len(ws)]:
                            F.linear(xs[w.shape[1]], w)

                _warm_up(torch, step)
                graph = _capture(torch, step)
                graph.replay()
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                graph.replay()
                b.record()
                b.synchronize()
                per_window = max(1, int(1000.0 / max(a.elapsed_time(b), 1e-3)))
                t0 = time.time()
                while time.time() - t0 < seconds[workload]:
                    a.record()
                    for _ in range(per_window):
                        graph.replay()
                    b.record()
                    b.synchronize()
                    ms = a.elapsed_time(b) / per_window
                    rows.append([args.gpu_name, workload, round(time.time() - t0, 3), per_window,
                                 f"{ms:.4f}", f"{flops / ms / 1e9:.1f}", f"{wbytes / ms / 1e6:.1f}",
                                 time.time()])
                mine = [r for r in rows if r[1] == workload]
                print(f"{workload}: {len(mine)} windows, first {mine[0][4]} ms, last {mine[-1][4]} ms", flush=True)
                del graph, ws, xs
                _free_memory(torch)
                time.sleep(5.0)  # let the clocks recover between workloads
    finally:
        smi.terminate()
        smi.wait()
    samples = _smi_samples(smi_path)
    fh, wr = _csv_out(out_path, SUSTAINED_COLUMNS)
    with fh:
        for r in rows:
            t_end = r.pop()
            near = min(samples, key=lambda s: abs(s[0] - t_end)) if samples else ("", "", "", "", "")
            wr.writerow([*r, *near[1:]])
    meta["smi_samples"] = len(samples)
    _write_json(meta_path, meta)
    smi_path.unlink(missing_ok=True)
    print(f"wrote {len(rows)} rows to {out_path}", flush=True)
    return 0


# -- mixed_attention --------------------------------------------------------------

MIXED_ATTN_COLUMNS = ("gpu", "case", "decodes", "decode_context", "prefill_tokens", "heads", "kv_heads", "head_dim",
                      "ms", "ms_decodes_alone", "ms_prefill_alone")
# (query heads, KV heads) of Qwen3-14B / Llama-3.1-8B (40/8, 32/8) and GLM-4.5-Air at TP4 (24/2)
MIXED_ATTN_HEADS = ((40, 8), (32, 8), (24, 2))


def run_mixed_attention(torch, args) -> int:
    """Decode requests and a prefill chunk in one variable-length flash-attention call, as vLLM's
    FlashAttention backend runs a mixed step, against each part alone: what the decodes cost
    when the batch's longest query is a chunk (their one query row computed as a whole tile)."""
    dev = _dev(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    fa = torch.ops.aten._flash_attention_forward
    meta = _run_meta(
        torch, args, "mixed_attention",
        method="torch.ops.aten._flash_attention_forward (FlashAttention-2, variable length, causal, bf16, "
                      "head_dim 128): N decode sequences (1 query, C keys each) and one prefill chunk (P queries over "
                      "P keys) in one call, against the N decodes alone and the chunk alone; median of "
                      f"{reps} calls timed with CUDA events",
        columns=list(MIXED_ATTN_COLUMNS), errors={})
    _write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = _csv_out(out_path, MIXED_ATTN_COLUMNS)

    def call(q_lens, k_lens, h, hk):
        cq = torch.tensor([0, *np.cumsum(q_lens)], device=dev, dtype=torch.int32)
        ck = torch.tensor([0, *np.cumsum(k_lens)], device=dev, dtype=torch.int32)
        q = torch.randn(int(sum(q_lens)), h, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(int(sum(k_lens)), hk, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)

        def f():
            fa(q, k, v, cq, ck, max(q_lens), max(k_lens), 0.0, True, False, scale=128 ** -0.5)

        f()
        torch.cuda.synchronize()
        return float(np.median(_replay_ms(torch, f, reps)))

    with torch.inference_mode(), fh:
        for h, hk in MIXED_ATTN_HEADS:
            for n, c, p in ((16, 4096, 2048), (64, 4096, 2048), (256, 2048, 2048), (64, 4096, 8192), (256, 512, 2048)):
                try:
                    dec = call([1] * n, [c] * n, h, hk)
                    pre = call([p], [p], h, hk)
                    mix = call([1] * n + [p], [c] * n + [p], h, hk)
                except Exception as exc:  # record and go on
                    meta["errors"][f"{h}/{hk} {n}x{c}+{p}"] = _first_line(exc)
                    continue
                wr.writerow([args.gpu_name, "mixed", n, c, p, h, hk, 128, f"{mix:.4f}", f"{dec:.4f}", f"{pre:.4f}"])
                fh.flush()
                print(f"heads {h}/{hk}: {n} decodes x {c} + prefill {p}: mixed {mix:.3f} ms, "
                      f"decodes alone {dec:.3f} + prefill alone {pre:.3f} = {dec + pre:.3f} ms", flush=True)
                _free_memory(torch)
    _write_json(meta_path, meta)
    return 0


# -- vllm_attention ---------------------------------------------------------------

VLLM_ATTN_COLUMNS = ("gpu", "kernel", "case", "decodes", "decode_context", "prefill_tokens", "prefill_context", "heads",
                     "kv_heads", "head_dim", "ms", "ms_decodes_alone", "ms_prefill_alone", "kv_gbps", "tflops")
VLLM_ATTN_BLOCK = 16  # vLLM's default KV block size
# decodes alone: (requests, tokens each) from long contexts with few requests to short ones with many
VLLM_ATTN_DECODES = ((1, 4096), (8, 32768), (16, 16384), (32, 8192), (64, 4096), (128, 2048), (256, 1024),
                     (512, 512), (8, 2048), (32, 2048))
# decodes batched with a prefill chunk: (decodes, their context, chunk tokens, chunk's cached context)
VLLM_ATTN_MIXED = ((16, 4096, 2048, 0), (64, 4096, 2048, 0), (128, 2048, 2048, 0), (256, 2048, 2048, 0),
                   (64, 4096, 8192, 0), (130, 2048, 8192, 0), (8, 32768, 8192, 16384), (256, 512, 2048, 0))
VLLM_ATTN_PREFILL = ((2048, 0), (8192, 0), (2048, 16384), (8192, 24576))


def _load_vllm_fa(fa_dir: str):
    """vLLM's flash-attention interface (``vllm/vllm_flash_attn``: flash_attn_interface.py and the
    _vllm_fa2_C / _vllm_fa3_C extensions copied from a vLLM wheel) as a package of its own."""
    import importlib
    import sys
    import types

    pkg = types.ModuleType("vllm_fa")
    pkg.__path__ = [str(Path(fa_dir).resolve())]
    sys.modules["vllm_fa"] = pkg
    return importlib.import_module("vllm_fa.flash_attn_interface")


def run_vllm_attention(torch, args) -> int:
    """vLLM's own flash-attention kernels (FlashAttention-2 and -3 from a vLLM wheel, ``--fa-dir``)
    called as vLLM's FlashAttention backend calls them: queries of the step's requests concatenated,
    keys and values read through a block table from a paged cache of 16-token blocks. Decodes
    alone (KV read rate), prefill chunks alone (FLOP rate), and decodes batched with a chunk
    against each part alone (what a mixed step's decodes cost)."""
    dev = _dev(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    fa = _load_vllm_fa(args.fa_dir)
    kernels = []
    for ver, ok in ((2, fa.FA2_AVAILABLE), (3, fa.FA3_AVAILABLE)):
        if ok:
            kernels.append(ver)
    meta = _run_meta(
        torch, args, "vllm_attention",
        method="vllm_flash_attn.flash_attn_varlen_func (the wheel's _vllm_fa2_C / _vllm_fa3_C), bf16, head_dim 128, "
               f"causal, paged KV cache of {VLLM_ATTN_BLOCK}-token blocks in a shuffled block table, num_splits 0 "
               f"(the kernel's own choice); median of {reps} calls timed with CUDA events",
        columns=list(VLLM_ATTN_COLUMNS), errors={})
    meta["fa_dir"] = str(args.fa_dir)
    meta["fa_files"] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                        for f in sorted(Path(args.fa_dir).iterdir()) if f.suffix in (".so", ".py")}
    meta["fa_available"] = {"fa2": bool(fa.FA2_AVAILABLE), "fa3": bool(fa.FA3_AVAILABLE),
                            "fa2_reason": fa.FA2_UNAVAILABLE_REASON, "fa3_reason": fa.FA3_UNAVAILABLE_REASON}
    _write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = _csv_out(out_path, VLLM_ATTN_COLUMNS)
    g = torch.Generator(device=dev)
    g.manual_seed(0)

    def timed(ver, q_lens, k_lens, h, hk):
        """Milliseconds of one call over requests with q_lens new and k_lens total tokens."""
        bs = VLLM_ATTN_BLOCK
        blocks = [-(-k // bs) for k in k_lens]
        nblk = int(sum(blocks))
        kc = torch.randn(nblk, bs, hk, 128, device=dev, dtype=torch.bfloat16, generator=g)
        vc = torch.randn_like(kc)
        perm = torch.randperm(nblk, device=dev, generator=g).to(torch.int32)
        table = torch.zeros(len(k_lens), max(blocks), device=dev, dtype=torch.int32)
        at = 0
        for i, b in enumerate(blocks):
            table[i, :b] = perm[at:at + b]
            at += b
        cq = torch.tensor([0, *np.cumsum(q_lens)], device=dev, dtype=torch.int32)
        used = torch.tensor(k_lens, device=dev, dtype=torch.int32)
        q = torch.randn(int(sum(q_lens)), h, 128, device=dev, dtype=torch.bfloat16, generator=g)
        out = torch.empty_like(q)

        def f():
            fa.flash_attn_varlen_func(q, kc, vc, max(q_lens), cq, max(k_lens), seqused_k=used, causal=True,
                                      block_table=table, out=out, fa_version=ver)

        f()
        torch.cuda.synchronize()
        return float(np.median(_replay_ms(torch, f, reps)))

    def pairs(q_lens, k_lens):
        return float(sum(qn * (k - qn) + qn * (qn + 1) / 2 for qn, k in zip(q_lens, k_lens)))

    with torch.inference_mode(), fh:
        for ver in kernels:
            kname = f"vllm_fa{ver}"
            for h, hk in MIXED_ATTN_HEADS:
                for n, c in VLLM_ATTN_DECODES:
                    _free_memory(torch)
                    try:
                        ms = timed(ver, [1] * n, [c] * n, h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} decode {n}x{c}"] = _first_line(exc)
                        continue
                    gbps = n * c * hk * 128 * 2 * 2 / (ms * 1e-3) / 1e9
                    wr.writerow([args.gpu_name, kname, "decode", n, c, 0, 0, h, hk, 128, f"{ms:.4f}", "", "",
                                 f"{gbps:.1f}", ""])
                    fh.flush()
                    print(f"{kname} {h}/{hk}: {n} decodes x {c}: {ms:.3f} ms, KV {gbps:.0f} GB/s", flush=True)
                for p, pc in VLLM_ATTN_PREFILL:
                    try:
                        ms = timed(ver, [p], [pc + p], h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} prefill {p}+{pc}"] = _first_line(exc)
                        continue
                    tf = 4 * 128 * h * pairs([p], [pc + p]) / (ms * 1e-3) / 1e12
                    wr.writerow([args.gpu_name, kname, "prefill", 0, 0, p, pc, h, hk, 128, f"{ms:.4f}", "", "", "",
                                 f"{tf:.1f}"])
                    fh.flush()
                    print(f"{kname} {h}/{hk}: prefill {p} over {pc}: {ms:.3f} ms, {tf:.0f} TFLOP/s", flush=True)
                for n, c, p, pc in VLLM_ATTN_MIXED:
                    try:
                        dec = timed(ver, [1] * n, [c] * n, h, hk)
                        pre = timed(ver, [p], [pc + p], h, hk)
                        mix = timed(ver, [1] * n + [p], [c] * n + [pc + p], h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} mixed {n}x{c}+{p}"] = _first_line(exc)
                        continue
                    wr.writerow([args.gpu_name, kname, "mixed", n, c, p, pc, h, hk, 128, f"{mix:.4f}", f"{dec:.4f}",
                                 f"{pre:.4f}", "", ""])
                    fh.flush()
                    print(f"{kname} {h}/{hk}: {n} decodes x {c} + prefill {p} over {pc}: mixed {mix:.3f} ms, "
                          f"apart {dec:.3f} + {pre:.3f} = {dec + pre:.3f} ms", flush=True)
    _write_json(meta_path, meta)
    return 0


# -- vllm_moe -------------------------------------------------------------------

VLLM_MOE_COLUMNS = ("gpu", "case", "experts", "top_k", "hidden", "intermediate", "tokens", "config", "ms",
                    "ms_gate_up", "ms_down", "ms_graph", "touched_experts", "tflops", "weight_gbps")
# (name, experts, hidden, intermediate per GPU, top-k): the routed experts of one layer on one GPU
VLLM_MOE_CASES = (("qwen3-235b-a22b tp8", 128, 4096, 192, 8), ("glm-4.5-air tp4", 128, 4096, 352, 8),
                  ("qwen3-30b-a3b tp1", 128, 2048, 768, 8), ("deepseek-v3 tp8 (bf16)", 256, 7168, 256, 8))
VLLM_MOE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 2048, 4096, 8192)


def _load_vllm_moe(src: Path):
    """vLLM's Triton fused-MoE kernel and its default tile choice, taken from a vLLM wheel's
    ``fused_moe.py`` (``--moe-src``): the @triton.jit functions are written to a module of their own
    (Triton reads a kernel's source from its file), the default-config function is run with vLLM's
    settings for a CUDA GPU (not batch-invariant, not ROCm)."""
    import ast
    import importlib.util
    import tempfile
    import types

    text = src.read_text()
    tree = ast.parse(text)
    funcs = {n.name: ast.get_source_segment(text, n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    decorated = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list}
    kernels = [name for name in ("write_zeros_to_output", "fused_moe_kernel") if name in decorated]
    body = "import triton\nimport triton.language as tl\n\n" + "\n\n".join(
        "@triton.jit\n" + funcs[name] for name in kernels)
    path = Path(tempfile.mkdtemp()) / "vllm_moe_kernels.py"
    path.write_text(body)
    spec = importlib.util.spec_from_file_location("vllm_moe_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ns = {"envs": types.SimpleNamespace(VLLM_BATCH_INVARIANT=False),
          "current_platform": types.SimpleNamespace(is_rocm=lambda: False),
          "next_power_of_2": lambda n: 1 << (max(int(n), 1) - 1).bit_length(),
          "should_moe_wna16_use_cuda": lambda *a, **k: False}
    exec("from __future__ import annotations\n" + funcs["get_default_config"], ns)
    return mod.fused_moe_kernel, ns["get_default_config"]


def run_vllm_moe(torch, args) -> int:
    """vLLM's Triton fused-MoE kernel (from a vLLM wheel, ``--moe-src``; its tuned configurations for
    the GPU from ``--moe-configs`` where vLLM ships one, else its default tiles) run as vLLM runs the
    routed experts of a layer: tokens sorted by expert in blocks of BLOCK_SIZE_M, the gate/up GEMM,
    SiLU x up, the down GEMM with the routing weights, the sum over the top-k. bf16, uniform random
    routing (k distinct experts per token)."""
    import json as _json

    import triton
    import triton.language as tl

    dev = _dev(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    kernel, default_config = _load_vllm_moe(Path(args.moe_src))
    cfg_dir = Path(args.moe_configs) if args.moe_configs else None
    device_file = torch.cuda.get_device_name(dev).replace(" ", "_")
    meta = _run_meta(
        torch, args, "vllm_moe",
        method="vLLM's fused_moe_kernel (Triton) from the wheel's fused_moe.py, bf16, tuned config where the wheel "
               "ships one for this GPU, else vLLM's default tiles; gate/up GEMM + SiLU x up + down GEMM (routing "
               f"weights applied) + sum over top-k, median of {reps} calls timed with CUDA events (ms: launched "
               "one by one; ms_graph: the same five kernels replayed from a CUDA graph, as vLLM's decode steps run; "
               "the sort of tokens by expert is outside both)",
        columns=list(VLLM_MOE_COLUMNS), errors={})
    meta["moe_src_sha256"] = hashlib.sha256(Path(args.moe_src).read_bytes()).hexdigest()
    _write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = _csv_out(out_path, VLLM_MOE_COLUMNS)
    g = torch.Generator(device=dev)
    g.manual_seed(0)

    def launch(a, b, c, weights, sorted_ids, expert_ids, ntpp, mul, top_k, cfg):
        cfg = dict(cfg)
        bk = cfg.pop("BLOCK_SIZE_K")
        cfg["SPLIT_K"] = 1
        em = sorted_ids.size(0)
        grid = (triton.cdiv(em, cfg["BLOCK_SIZE_M"]) * triton.cdiv(b.size(1), cfg["BLOCK_SIZE_N"]),)
        kernel[grid](a, b, c, None, None, None, weights, sorted_ids, expert_ids, ntpp,
                     b.size(1), b.size(2), em, a.size(0) * top_k,
                     a.stride(0), a.stride(1), b.stride(0), b.stride(2), b.stride(1), c.stride(1), c.stride(2),
                     0, 0, 0, 0, 0, 0, 0, 0, 0,
                     MUL_ROUTED_WEIGHT=mul, top_k=top_k, compute_type=tl.bfloat16, use_fp8_w8a8=False,
                     use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                     naive_block_assignment=False, HAS_BIAS=False, BLOCK_SIZE_K=bk, SWAP_AB=False, **cfg)

    def align(topk_ids, n_experts, block_m):
        """Token slots sorted by expert, each expert's run padded to a multiple of block_m."""
        flat = topk_ids.flatten()
        counts = torch.bincount(flat, minlength=n_experts)
        padded = (counts + block_m - 1) // block_m * block_m
        total = int(padded.sum())
        order = torch.argsort(flat, stable=True).to(torch.int32)
        starts = torch.cumsum(padded, 0) - padded
        first = torch.cumsum(counts, 0) - counts
        e_sorted = flat[order.long()]
        rank = torch.arange(flat.numel(), device=dev) - first[e_sorted]
        sorted_ids = torch.full((total,), flat.numel(), device=dev, dtype=torch.int32)
        sorted_ids[(starts[e_sorted] + rank).long()] = order
        expert_ids = torch.repeat_interleave(torch.arange(n_experts, device=dev, dtype=torch.int32),
                                             (padded // block_m).long())
        return sorted_ids, expert_ids, torch.tensor([total], device=dev, dtype=torch.int32)

    def point(name, w13, w2, m, top_k, cfg):
        """Milliseconds of the whole routed-expert layer, the gate/up GEMM and the down GEMM at m
        tokens; checks the layer against a float32 reference at m = 16."""
        n_exp, inter2, hidden = w13.shape
        inter = inter2 // 2
        x = torch.randn(m, hidden, device=dev, dtype=torch.bfloat16, generator=g)
        scores = torch.rand(m, n_exp, device=dev, generator=g)
        topk_w, topk_ids = torch.topk(scores, top_k, dim=1)
        topk_w = torch.softmax(topk_w, dim=1).float().contiguous()
        sorted_ids, expert_ids, ntpp = align(topk_ids, n_exp, cfg["BLOCK_SIZE_M"])
        c1 = torch.empty(m, top_k, 2 * inter, device=dev, dtype=torch.bfloat16)
        c2 = torch.empty(m * top_k, inter, device=dev, dtype=torch.bfloat16)
        c3 = torch.empty(m, top_k, hidden, device=dev, dtype=torch.bfloat16)
        out = torch.empty(m, hidden, device=dev, dtype=torch.bfloat16)

        def gate_up():
            launch(x, w13, c1, None, sorted_ids, expert_ids, ntpp, False, top_k, cfg)

        def down():
            launch(c2, w2, c3, topk_w, sorted_ids, expert_ids, ntpp, True, 1, cfg)

        def layer():
            gate_up()
            h = c1.view(m * top_k, 2 * inter)
            torch.mul(torch.nn.functional.silu(h[:, :inter]), h[:, inter:], out=c2)
            down()
            torch.sum(c3, dim=1, out=out)

        layer()
        torch.cuda.synchronize()
        if m == 16:  # against a float32 reference, once per case
            ref = torch.zeros(m, hidden, device=dev)
            for j in range(top_k):
                e = topk_ids[:, j]
                hh = torch.einsum("mk,mnk->mn", x.float(), w13[e].float())
                a = torch.nn.functional.silu(hh[:, :inter]) * hh[:, inter:]
                ref += topk_w[:, j:j + 1] * torch.einsum("mi,mki->mk", a, w2[e].float())
            err = float((out.float() - ref).norm() / ref.norm())
            meta.setdefault("checks", {})[name] = {"rel_err": round(err, 5), "ok": err < 2e-2}
        return (float(np.median(_replay_ms(torch, layer, reps))), float(np.median(_replay_ms(torch, gate_up, reps))),
                float(np.median(_replay_ms(torch, down, reps))), _time_graph(torch, layer, reps), topk_ids)

    with torch.inference_mode(), fh:
        for name, n_exp, hidden, inter, top_k in VLLM_MOE_CASES:
            w13 = torch.randn(n_exp, 2 * inter, hidden, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            w2 = torch.randn(n_exp, hidden, inter, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            tuned = {}
            if cfg_dir is not None:
                f = cfg_dir / f"E={n_exp},N={inter},device_name={device_file}.json"
                if f.is_file():
                    tuned = {int(k): v for k, v in _json.loads(f.read_text()).items()}
            for m in VLLM_MOE_TOKENS:
                try:
                    cfg = tuned[min(tuned, key=lambda x: abs(x - m))] if tuned else default_config(
                        m, n_exp, inter, hidden, top_k, None, None)
                    ms, ms1, ms2, ms_graph, topk_ids = point(name, w13, w2, m, top_k, cfg)
                except Exception as exc:  # record and go on
                    meta["errors"][f"{name} M={m}"] = _first_line(exc)
                    continue
                touched = int(torch.unique(topk_ids).numel())
                flops = 2.0 * m * top_k * 3 * inter * hidden
                wbytes = touched * 3 * inter * hidden * 2
                wr.writerow([args.gpu_name, name, n_exp, top_k, hidden, inter, m, _json.dumps(cfg, sort_keys=True),
                             f"{ms:.4f}", f"{ms1:.4f}", f"{ms2:.4f}", f"{ms_graph:.4f}", touched,
                             f"{flops / (ms * 1e-3) / 1e12:.1f}", f"{wbytes / (ms * 1e-3) / 1e9:.1f}"])
                fh.flush()
                print(f"{name} M={m}: {ms:.3f} ms, in a CUDA graph {ms_graph:.3f} (gate/up {ms1:.3f}, down {ms2:.3f}), "
                      f"{touched} experts, "
                      f"{flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s, {wbytes / (ms * 1e-3) / 1e9:.0f} GB/s "
                      f"[{'tuned' if tuned else 'default'} {cfg}]", flush=True)
            del w13, w2
            _free_memory(torch)
    _write_json(meta_path, meta)
    return 0


# -- compare ----------------------------------------------------------------

COMPARE_COLUMNS = ("gpu", "model", "mode", "layers", "batch", "new_tokens", "context",
                   "ms", "ms_sync", "host_ms")
COMPARE_MODES = ("compiled_graph", "graph", "eager")
COMPARE_ALL_MODES = ("compiled_graph", "graph", "eager", "compiled", "graph_pieces")
COMPARE_GRAPH_MODES = ("compiled_graph", "graph", "graph_pieces")
COMPARE_DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
COMPARE_DECODE_CONTEXTS = [512, 2048]
COMPARE_PREFILL_NEW_TOKENS = [512, 2048, 8192]
COMPARE_HALF_LAYER_BATCHES = [1, 16, 64, 256]


def build_compare_grid(quick: bool, n_layers: int):
    """(layers, batch, new_tokens, context) in measuring order: decode at the first context, the
    same model cut to half its layers at a few batches (slope per layer, intercept per step),
    decode at the other contexts, then batch-1 prefills at context 0."""
    if quick:
        db, dcs, pn, hb = [1, 8, 64], [512], [512], [1, 64]
    else:
        db, dcs, pn, hb = (COMPARE_DECODE_BATCHES, COMPARE_DECODE_CONTEXTS,
                           COMPARE_PREFILL_NEW_TOKENS, COMPARE_HALF_LAYER_BATCHES)
    pts = [(n_layers, b, 1, dcs[0]) for b in db]
    if n_layers >= 2:
        pts += [(n_layers // 2, b, 1, dcs[0]) for b in hb]
    for c in dcs[1:]:
        pts += [(n_layers, b, 1, c) for b in db]
    pts += [(n_layers, 1, n, 0) for n in pn]
    grid = {"decode": {"batch": db, "context": dcs}, "half_layers": {"batch": hb, "context": dcs[0]},
            "prefill": {"batch": [1], "new_tokens": pn, "context": [0]}}
    return pts, grid


class _FirstLayers:
    """Context manager: the model runs only its first ``n`` layers."""

    def __init__(self, model: Model, n: int):
        self.model, self.n = model, n

    def __enter__(self):
        self.saved = (self.model.layers, self.model.num_layers)
        self.model.layers = self.saved[0][: self.n]
        self.model.num_layers = self.n
        return self.model

    def __exit__(self, *exc):
        self.model.layers, self.model.num_layers = self.saved
        return False


def _step_pieces(torch, model: Model, compiled: bool):
    """The pieces of one step of ``model`` as :class:`PiecewiseForward` cuts it, as plain functions
    (``rms``, ``pre``, ``mlp``, ``final``), shared with :class:`TPForward` (which runs them on one
    rank's shard): ``pre`` = add + RMSNorm, QKV projection, q/k norm, rotary; ``mlp`` = add +
    RMSNorm, gate/up projection, SiLU * up, down projection; ``final`` = add, norm, LM head.
    Compiled pieces write RMSNorm as vLLM's ``forward_native`` (so that Inductor fuses it);
    uncompiled ones use ``Model.rms_norm``."""
    a = model.arch
    F = torch.nn.functional
    H, hd, hkv = a.heads, a.head_dim, a.kv_heads
    qd, kvd, eps, qk_norm, half = a.q_dim, a.kv_dim, a.eps, a.qk_norm, a.head_dim // 2

    if compiled:
        def rms(x, w):
            xf = x.float()
            xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            return xf.to(x.dtype) * w
    else:
        rms = model.rms_norm

    def rope(x, cos, sin):  # x [N, heads, hd]; cos, sin [N, hd] (sin sign-folded)
        rot = torch.cat((x[..., half:], x[..., :half]), dim=-1)
        return x * cos[:, None, :] + rot * sin[:, None, :]

    def pre(x, delta, ln, wqkv, qn, kn, cos_t, sin_t, positions):
        x = x + delta
        h = rms(x, ln)
        qkv = F.linear(h, wqkv)
        n = qkv.shape[0]
        q = qkv[:, :qd].view(n, H, hd)
        k = qkv[:, qd: qd + kvd].view(n, hkv, hd)
        v = qkv[:, qd + kvd:].view(n, hkv, hd)
        if qk_norm:
            q = rms(q, qn)
            k = rms(k, kn)
        cos = cos_t[positions]
        sin = sin_t[positions]
        return x, rope(q, cos, sin), rope(k, cos, sin), v

    def mlp(x, y, ln2, wgu, wd):
        x = x + y
        h = rms(x, ln2)
        gu = F.linear(h, wgu)
        g, u = gu.chunk(2, dim=-1)
        return x, F.linear(F.silu(g) * u, wd)

    def final(x, d, fnorm, lm_head):
        return F.linear(rms(x + d, fnorm), lm_head)

    return rms, pre, mlp, final


class _Pieces:
    """A step cut into pieces: compiled once each with ``torch.compile`` (full graph) when asked,
    with the token axis of their inputs marked dynamic (``maybe_mark_dynamic``)."""

    def _compile(self, torch, compiled: bool, **pieces) -> None:
        for name, fn in pieces.items():
            setattr(self, name, torch.compile(fn, fullgraph=True) if compiled else fn)
        if compiled:
            dyn = torch._dynamo
            self._mark_fn = getattr(dyn, "maybe_mark_dynamic", None) or dyn.mark_dynamic
        else:
            self._mark_fn = None

    def _mark(self, *ts):
        if self._mark_fn is None:
            return
        for t in ts:
            if t.shape[0] >= 2:
                self._mark_fn(t, 0)


class PiecewiseForward(_Pieces):
    """The step of :class:`Model` laid out as vLLM runs it: tokens flattened to one axis of
    ``N = batch * new_tokens``, positions as a tensor (rotary tables gathered per token), the
    residual add of the previous block fused with the next RMSNorm, and the model cut at attention
    into pieces: ``pre`` (add + RMSNorm, QKV projection, q/k norm, rotary), attention with the KV
    write (always eager, as vLLM keeps it outside the compiled graph), ``post`` (output projection,
    add + RMSNorm, gate/up projection, SiLU * up, down projection), and ``final`` (add, norm, LM head).

    ``compiled=True`` compiles each piece once with ``torch.compile`` (Inductor, default mode, no
    Inductor CUDA graphs) with the token axis dynamic (``maybe_mark_dynamic``), and RMSNorm written
    as vLLM's ``forward_native`` so that Inductor fuses it; the caller captures whole steps in CUDA
    graphs, as vLLM's full-graph decode capture does. ``compiled=False`` runs the same pieces
    uncompiled (RMSNorm through ``Model.rms_norm``)."""

    def __init__(self, torch, model: Model, compiled: bool):
        self.torch = torch
        self.model = model
        self.compiled = compiled
        F = torch.nn.functional
        _rms, pre, mlp, final = _step_pieces(torch, model, compiled)

        def post(o, x, wo, ln2, wgu, wd):  # the output projection inside the piece
            return mlp(x, F.linear(o, wo), ln2, wgu, wd)

        self._compile(torch, compiled, pre=pre, post=post, final=final)

    def forward(self, tokens, cache, context: int, positions):
        """tokens [B, T]; cache from ``Model.new_cache(B, context + T)``; positions [B * T]."""
        m = self.model
        a = m.arch
        F = self.torch.nn.functional
        b, t = tokens.shape
        n = b * t
        x = F.embedding(tokens.reshape(n), m.lm_head)
        d = self.torch.zeros_like(x)
        self._mark(positions)
        for li, w in enumerate(m.layers):
            self._mark(x, d)
            x, q, k, v = self.pre(x, d, w["ln1"], w["wqkv"], w.get("qn"), w.get("kn"),
                                  m.cos, m.sin, positions)
            kc = cache[li, 0]
            vc = cache[li, 1]
            kc[:, context: context + t] = k.view(b, t, a.kv_heads, a.head_dim)
            vc[:, context: context + t] = v.view(b, t, a.kv_heads, a.head_dim)
            o = m.attention(q.view(b, t, a.heads, a.head_dim), kc, vc, context, t).reshape(n, a.q_dim)
            self._mark(o, x)
            x, d = self.post(o, x, w["wo"], w["ln2"], w["wgu"], w["wd"])
        if t > 1:  # last token of each sequence, gathered (fresh strides: final()'s decode graphs serve)
            last = self.torch.arange(1, b + 1, device=x.device) * t - 1
            x = x.index_select(0, last)
            d = d.index_select(0, last)
        self._mark(x, d)
        return self.final(x, d, m.final_norm, m.lm_head)


def _compare_inputs(torch, model: Model, b: int, n: int, c: int):
    """KV cache, tokens and positions of one step, all made in inference mode (as every call of the
    compiled pieces is: Dynamo guards on it)."""
    dev = model.device
    with torch.inference_mode():
        cache = model.new_cache(b, c + n)
        tokens = torch.randint(0, model.arch.vocab, (b, n), device=dev)
        positions = torch.arange(c, c + n, device=dev).repeat(b)
    return cache, tokens, positions


def _compare_fn(model, pieces: dict, mode: str, tokens, cache, c: int, positions):
    if mode in ("graph", "eager"):
        return lambda: model.forward(tokens, cache, c)
    pf = pieces["compiled"] if mode in ("compiled_graph", "compiled") else pieces["plain"]
    return lambda: pf.forward(tokens, cache, c, positions)


def _time_step(torch, step, budget_s: float, min_reps: int, max_reps: int) -> dict:
    """Back-to-back median (``ms``, the statistic of the other modes), median of steps each
    started on an idle GPU after a host sync (``ms_sync``: what an engine that waits for its
    sampled tokens sees), and the host time to issue one step (``host_ms``)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    step()
    end.record()
    end.synchronize()
    first = start.elapsed_time(end)
    reps = max(min_reps, min(max_reps, int(budget_s * 1000.0 / max(first, 1e-3))))
    sync_ms, host_ms = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        start.record()
        h0 = time.perf_counter()
        step()
        h1 = time.perf_counter()
        end.record()
        end.synchronize()
        sync_ms.append(start.elapsed_time(end))
        host_ms.append((h1 - h0) * 1e3)
    b2b = _replay_ms(torch, step, reps)
    return {"ms": float(np.median(b2b)), "ms_min": float(b2b.min()), "ms_max": float(b2b.max()),
            "ms_sync": float(np.median(sync_ms)), "host_ms": float(np.median(host_ms)), "reps": reps}


def measure_compare_point(torch, model, pieces, mode, b, n, c, budget_s, min_reps, max_reps) -> dict:
    cache, tokens, positions = _compare_inputs(torch, model, b, n, c)
    graph = step = fwd = None
    try:
        with torch.inference_mode():
            fwd = _compare_fn(model, pieces, mode, tokens, cache, c, positions)
            _warm_up(torch, fwd)
            if mode in COMPARE_GRAPH_MODES:
                torch.cuda.empty_cache()
                graph = _capture(torch, fwd)
                step = graph.replay
            else:
                step = fwd
            step()
            torch.cuda.synchronize()
            return _time_step(torch, step, budget_s, min_reps, max_reps)
    finally:
        del step, fwd, graph, cache, tokens, positions
        _free_memory(torch)


def _count_kernels(torch, fn) -> dict:
    """Device activities (kernels, and separately memcpy/memset) of one call of ``fn``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if getattr(e, "device_type", None) == DeviceType.CUDA]
    mem = [x for x in names if x.lower().startswith(("memcpy", "memset"))]
    return {"kernels": len(names) - len(mem), "memcpy_memset": len(mem)}


def compare_checks(torch, model, pieces: dict) -> dict:
    """Logits of the piecewise step (plain and compiled) against ``Model.forward`` on the same
    cache contents, for a decode batch and a prefill."""
    res = {}
    for label, (b, n, c) in {"decode_b4_ctx64": (4, 1, 64), "prefill_b1_n48": (1, 48, 0),
                             "chunk_b2_n16_ctx32": (2, 16, 32)}.items():
        cache, tokens, positions = _compare_inputs(torch, model, b, n, c)
        with torch.inference_mode():
            ref = model.forward(tokens, cache.clone(), c).float()
            res[label] = {}
            for name, pf in pieces.items():
                try:
                    out = pf.forward(tokens, cache.clone(), c, positions).float()
                    err = float((out - ref).norm() / ref.norm())
                    res[label][name] = {"rel_err": round(err, 6), "ok": bool(err < 5e-2)}
                except Exception as exc:
                    res[label][name] = {"ok": False, "error": _first_line(exc)}
        del cache, tokens, positions
        _free_memory(torch)
    return res


def _dynamo_graphs(torch) -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def run_compare(torch, args) -> int:
    t_start = time.time()
    model_path = Path(args.model)
    cfg = json.loads(model_path.read_text())
    model_name = model_path.stem
    arch = Arch(cfg, model_name)
    device = _dev(torch)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = True
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        if m not in COMPARE_ALL_MODES:
            print(f"error: unknown mode {m!r} (choose from {', '.join(COMPARE_ALL_MODES)})", file=sys.stderr)
            return 2
    quick = args.quick
    min_reps = args.min_reps if args.min_reps is not None else 3
    max_reps = args.max_reps if args.max_reps is not None else (5 if quick else 20)
    budget_s = args.budget_s if args.budget_s is not None else (0.05 if quick else 0.15)

    dyn_cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 64)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 512)

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = out_path.with_name(out_path.name + ".meta.json")

    t0 = time.time()
    model = Model(torch, arch, device, torch.bfloat16, num_layers=args.num_layers)
    n_layers = model.num_layers
    points, grid = build_compare_grid(quick, n_layers)
    model.ensure_rope(max([c + n for _, _, n, c in points] + [args.compile_tokens]) + 64)
    torch.cuda.synchronize()
    weights_bytes = torch.cuda.memory_allocated(device)
    free_b, _total_b = torch.cuda.mem_get_info(device)
    margin = int(args.margin_gib * 1024**3)
    budget_bytes = free_b - margin
    print(f"{model_name}: {n_layers} layers, weights {weights_bytes/2**30:.1f} GiB in "
          f"{time.time()-t0:.1f} s; free {free_b/2**30:.1f} GiB; modes {','.join(modes)}", flush=True)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend_names = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                     "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    backends = [backend_names[x.strip()] for x in args.sdpa_backends.split(",") if x.strip()]

    meta = {
        "kind": "compare",
        "gpu": args.gpu_name,
        "model": model_name,
        "model_config": str(model_path),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": _software(torch),
        "device": _device_meta(torch) if device.type == "cuda" else {"name": str(device)},
        "command": " ".join(sys.argv),
        "modes": {
            "compiled_graph": "PiecewiseForward compiled by torch.compile (Inductor, default mode, "
                              "fullgraph pieces, token axis dynamic), whole step captured in one CUDA "
                              "graph per shape, replayed",
            "graph": "Model.forward (the profiler's default step) captured in a CUDA graph, replayed "
                     "(what the default mode measures)",
            "eager": "Model.forward launched op by op from Python, no graph",
            "compiled": "the compiled pieces launched from Python, no graph (guards and launches per call)",
            "graph_pieces": "PiecewiseForward uncompiled, captured in a CUDA graph (layout effect alone)",
        },
        "columns": {
            "ms": "median CUDA-event time of back-to-back steps (the statistic of the default mode)",
            "ms_sync": "median CUDA-event time of steps each issued after a host synchronize (idle GPU "
                       "at the start: includes the host's issue time where it exceeds the GPU's)",
            "host_ms": "median host wall time to issue one step (graph modes: one replay call)",
            "layers": "layers run; rows with half the model's layers give per-layer slopes",
        },
        "model_build": {"dtype": "bfloat16", "layers_built": n_layers, "weights_bytes_on_gpu": int(weights_bytes),
                        "qk_norm": arch.qk_norm,
                        "notes": "random weights, as the default mode builds them (see its meta)"},
        "method": {"sdpa_backends": args.sdpa_backends, "warmup": "one eager run on a side stream "
                   "(compiles when needed), capture, one untimed replay",
                   "reps": {"min": min_reps, "max": max_reps, "timed_seconds_per_point": budget_s},
                   "memory_free_after_weights_bytes": int(free_b), "memory_margin_bytes": margin,
                   "quick": quick},
        "grid": grid,
        "points_columns": ["mode", "layers", "batch", "new_tokens", "context", "ms", "ms_min",
                           "ms_max", "ms_sync", "host_ms", "reps"],
        "points": [],
        "skipped": [],
    }
    _write_json(meta_path, meta)

    pieces = {"plain": PiecewiseForward(torch, model, compiled=False)}
    compiled_ok = any(m in ("compiled_graph", "compiled") for m in modes)
    if compiled_ok:
        pieces["compiled"] = PiecewiseForward(torch, model, compiled=True)
        t1 = time.time()
        try:
            with sdpa_kernel(backends), torch.inference_mode():
                # As vLLM's first (profiling) run: the dynamic token axis is first compiled and its
                # Triton kernels autotuned at a large N (Inductor keeps the configs picked then for
                # every N); then the N=1 specialisation and the dynamic batch axis of final().
                for (b, n, c) in ((1, args.compile_tokens, 0), (1, 1, 16), (3, 1, 16)):
                    cache, tokens, positions = _compare_inputs(torch, model, b, n, c)
                    pieces["compiled"].forward(tokens, cache, c, positions)
                    del cache, tokens, positions
            torch.cuda.synchronize()
            meta["compile"] = {"seconds": round(time.time() - t1, 1), "dynamo_graphs": _dynamo_graphs(torch),
                               "first_call_tokens": args.compile_tokens,
                               "inductor": "default mode (no Inductor CUDA graphs, no max-autotune); "
                                           "pieces pre/post/final compiled with fullgraph=True; token "
                                           "axis marked dynamic (maybe_mark_dynamic) when >= 2"}
            print(f"compiled pieces in {time.time()-t1:.1f} s ({_dynamo_graphs(torch)} graphs)", flush=True)
        except Exception as exc:
            compiled_ok = False
            meta["compile"] = {"error": _first_line(exc, 400)}
            print(f"compile failed: {_first_line(exc, 400)}", flush=True)
            pieces.pop("compiled")
        _free_memory(torch)
    try:
        with sdpa_kernel(backends):
            meta["checks"] = compare_checks(torch, model, pieces)
        print("checks:", json.dumps(meta["checks"]), flush=True)
    except Exception as exc:
        meta["checks"] = {"error": _first_line(exc, 400)}
    _write_json(meta_path, meta)

    # kernels per step (and per layer) of each way of running the step, at batch 8, context 512
    kc = {}
    try:
        with sdpa_kernel(backends), torch.inference_mode():
            for layers in sorted({n_layers, max(1, n_layers // 2)}):
                with _FirstLayers(model, layers):
                    cache, tokens, positions = _compare_inputs(torch, model, 8, 1, 512)
                    for name, mode in (("model_forward", "eager"), ("pieces_plain", "graph_pieces"),
                                       ("pieces_compiled", "compiled")):
                        if name == "pieces_compiled" and not compiled_ok:
                            continue
                        fn = _compare_fn(model, pieces, mode, tokens, cache, 512, positions)
                        fn()
                        kc.setdefault(name, {})[str(layers)] = _count_kernels(torch, fn)
                    del cache, tokens, positions
                    _free_memory(torch)
        if n_layers >= 2:
            for d in kc.values():
                lo, hi = d[str(n_layers // 2)]["kernels"], d[str(n_layers)]["kernels"]
                d["per_layer"] = round((hi - lo) / (n_layers - n_layers // 2), 2)
                d["outside_layers"] = round(hi - d["per_layer"] * n_layers, 2)
    except Exception as exc:
        kc["error"] = _first_line(exc, 400)
    meta["kernel_counts_b8_ctx512"] = kc
    print("kernel counts:", json.dumps(kc), flush=True)
    _write_json(meta_path, meta)

    graphs_before = _dynamo_graphs(torch)
    stopped = False
    n_rows = 0
    fh, wr = _csv_out(out_path, COMPARE_COLUMNS)
    with fh:
        for (layers, b, n, c) in points:
            kv_per_token = 2 * layers * arch.kv_dim * 2
            need = kv_per_token * b * (c + n) + arch.activation_bytes(b, n)
            for mode in modes:
                pt = {"mode": mode, "layers": layers, "batch": b, "new_tokens": n, "context": c}
                if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                    meta["skipped"].append({**pt, "reason": "time limit"})
                    stopped = True
                    continue
                if mode in ("compiled_graph", "compiled") and not compiled_ok:
                    meta["skipped"].append({**pt, "reason": "compile failed"})
                    continue
                if need > budget_bytes:
                    meta["skipped"].append({**pt, "reason": f"needs ~{need/2**30:.1f} GiB, "
                                                            f"{budget_bytes/2**30:.1f} GiB available"})
                    continue
                try:
                    with sdpa_kernel(backends), _FirstLayers(model, layers):
                        r = measure_compare_point(torch, model, pieces, mode, b, n, c, budget_s,
                                                  min_reps, max_reps)
                except Exception as exc:  # out of memory or a capture error: keep going
                    _free_memory(torch)
                    meta["skipped"].append({**pt, "reason": "error: " + _first_line(exc)})
                    print(f"error  {mode:14s} L={layers} b={b} n={n} c={c}: {_first_line(exc)}", flush=True)
                    continue
                wr.writerow([args.gpu_name, model_name, mode, layers, b, n, c, f"{r['ms']:.4f}",
                             f"{r['ms_sync']:.4f}", f"{r['host_ms']:.4f}"])
                fh.flush()
                n_rows += 1
                meta["points"].append([mode, layers, b, n, c, round(r["ms"], 4), round(r["ms_min"], 4),
                                       round(r["ms_max"], 4), round(r["ms_sync"], 4), round(r["host_ms"], 4),
                                       r["reps"]])
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                _write_json(meta_path, meta)
                print(f"{mode:14s} L={layers:2d} b={b:4d} n={n:5d} c={c:5d}: {r['ms']:8.3f} ms "
                      f"(sync {r['ms_sync']:8.3f}, host {r['host_ms']:7.3f}, reps {r['reps']})", flush=True)
    meta["dynamo_graphs_after_grid"] = _dynamo_graphs(torch)
    meta["recompiled_during_grid"] = (None if graphs_before is None or meta["dynamo_graphs_after_grid"] is None
                                      else meta["dynamo_graphs_after_grid"] - graphs_before)
    meta["stopped_early_by_time_limit"] = stopped
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    _write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time()-t_start:.0f} s", flush=True)
    return 0


# -- moe --------------------------------------------------------------------

MOE_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]
QUICK_MOE_TOKENS = [1, 16, 256]
MOE_DEFAULT_MODELS = ("simulator/data/models/qwen3-30b-a3b.json:1,"
                      "simulator/data/models/deepseek-v3.json:8")
MOE_POOL_BYTES = 4 * 2**30  # weight copies per model: at least this much (80x the H100's L2)
MOE_COLUMNS = ("gpu", "model", "tp", "impl", "tokens", "experts", "top_k", "hidden", "intermediate",
               "experts_touched", "touched_weight_bytes", "copies", "ms_layer", "ms_gemm",
               "gbps_gemm", "tflops_gemm", "gbps_layer", "tflops_layer")


def _moe_spec(path: str, tp: int) -> dict:
    cfg = json.loads(Path(path).read_text())
    experts = next(int(cfg[k]) for k in MOE_KEYS if cfg.get(k))
    inter = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
    if inter % tp:
        raise ValueError(f"{path}: moe intermediate {inter} not divisible by tp {tp}")
    return {"model": Path(path).stem, "config": path, "tp": tp, "experts": experts,
            "top_k": int(cfg["num_experts_per_tok"]), "hidden": int(cfg["hidden_size"]),
            "intermediate": inter // tp, "intermediate_full": inter}


def _moe_routes(torch, x, spec, gen):
    """Uniform random top-k routing of the tokens of ``x`` (k distinct experts per token) with
    random normalised gate weights; the sorted-by-expert layout a grouped GEMM needs."""
    dev = x.device
    t = x.shape[0]
    e, k = spec["experts"], spec["top_k"]
    ids = torch.rand(t, e, device=dev, generator=gen).topk(k, dim=1).indices
    wts = torch.softmax(torch.randn(t, k, device=dev, generator=gen), dim=-1).to(x.dtype)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=e)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x.index_select(0, order // k)
    return {"ids": ids, "flat": flat, "wts": wts, "order": order, "offs": offs, "xs": xs,
            "counts": [int(v) for v in counts.tolist()]}


def _moe_experts(torch, impl, xs, offs, counts, w13, w2, inter):
    """Routed-expert FFN on expert-sorted rows: gate/up GEMM, SiLU * up, down GEMM."""
    F = torch.nn.functional
    if impl == "grouped_mm":
        h = torch._grouped_mm(xs, w13.transpose(1, 2), offs=offs)
        g, u = h.chunk(2, dim=-1)
        return torch._grouped_mm(F.silu(g) * u, w2.transpose(1, 2), offs=offs)
    rows = xs.shape[0]
    h = torch.empty(rows, 2 * inter, device=xs.device, dtype=xs.dtype)
    y = torch.empty(rows, w2.shape[1], device=xs.device, dtype=xs.dtype)
    s = 0
    for e, cnt in enumerate(counts):
        if cnt:
            torch.mm(xs[s: s + cnt], w13[e].t(), out=h[s: s + cnt])
        s += cnt
    act = F.silu(h[:, :inter]) * h[:, inter:]
    s = 0
    for e, cnt in enumerate(counts):
        if cnt:
            torch.mm(act[s: s + cnt], w2[e].t(), out=y[s: s + cnt])
        s += cnt
    return y


def _moe_layer(torch, impl, x, r, w13, w2, spec):
    """The whole routed-expert part of a layer from fixed routing: sort the (token, slot) pairs
    by expert, gather rows, expert FFN, scale by gate weights, scatter-add back to the tokens."""
    e, k = spec["experts"], spec["top_k"]
    flat = r["flat"]
    order = torch.argsort(flat, stable=True)
    src = torch.div(order, k, rounding_mode="floor")
    xs = x.index_select(0, src)
    counts = torch.zeros(e, device=x.device, dtype=torch.int32)
    counts.scatter_add_(0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    y = _moe_experts(torch, impl, xs, offs, r["counts"], w13, w2, spec["intermediate"])
    y = y * r["wts"].reshape(-1)[order].unsqueeze(1)
    out = torch.zeros_like(x)
    out.index_add_(0, src, y)
    return out


def _moe_reference(torch, x, r, w13, w2, inter, tokens: int):
    """float32 per-token reference of the first ``tokens`` tokens."""
    F = torch.nn.functional
    out = []
    for t in range(tokens):
        acc = torch.zeros(x.shape[1], device=x.device, dtype=torch.float32)
        for j in range(r["ids"].shape[1]):
            e = int(r["ids"][t, j])
            h = x[t].float() @ w13[e].float().t()
            a = F.silu(h[:inter]) * h[inter:]
            acc += float(r["wts"][t, j]) * (a @ w2[e].float().t())
        out.append(acc)
    return torch.stack(out)


def run_moe(torch, args) -> int:
    t_start = time.time()
    dev = _dev(torch)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    specs = []
    for item in args.moe_models.split(","):
        path, _, tp = item.strip().partition(":")
        specs.append(_moe_spec(path, int(tp or 1)))
    tokens_list = QUICK_MOE_TOKENS if args.quick else MOE_TOKENS
    reps = args.max_reps or (5 if args.quick else 20)
    have_grouped = hasattr(torch, "_grouped_mm")
    impls = (["grouped_mm"] if have_grouped else []) + ["loop"]
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = {
        "kind": "moe",
        "gpu": args.gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": _software(torch),
        "device": _device_meta(torch) if dev.type == "cuda" else {"name": str(dev)},
        "command": " ".join(sys.argv),
        "specs": specs,
        "impls": {
            "grouped_mm": "torch._grouped_mm (bf16; one grouped GEMM for gate/up over all experts, "
                          "one for down; experts with no tokens are empty groups)",
            "loop": "one torch.mm per active expert for gate/up and for down (host-known counts), "
                    "captured in the same CUDA graph",
        },
        "grouped_mm_available": have_grouped,
        "method": "per point: uniform random top-k routing (distinct experts per token, fixed per "
                  "point), weights N(0, 1/fan_in) bf16; `copies` distinct weight sets per model "
                  f"(>= {MOE_POOL_BYTES/2**30:.0f} GiB together) chained in one CUDA graph, each with "
                  "its own routing, so weights are read from HBM; ms = median replay / copies "
                  f"({reps} replays). ms_gemm: gate/up GEMM + SiLU*up + down GEMM on pre-sorted rows. "
                  "ms_layer: the same plus argsort by expert, row gather, per-expert counts and "
                  "offsets, gate-weight scaling and index_add back to tokens (no router GEMM/top-k). "
                  "touched_weight_bytes: bf16 bytes of the experts that got at least one token "
                  "(mean over copies); gbps = touched bytes / time; tflops = 2*tokens*top_k*3*hidden*"
                  "intermediate / time",
        "columns": list(MOE_COLUMNS),
        "checks": {},
        "rows": 0,
    }
    _write_json(meta_path, meta)
    n_rows = 0
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    fh, wr = _csv_out(out_path, MOE_COLUMNS)
    with fh:
        for spec in specs:
            e, k, hid, inter = spec["experts"], spec["top_k"], spec["hidden"], spec["intermediate"]
            expert_bytes = 3 * hid * inter * 2
            layer_bytes = e * expert_bytes
            copies = 2 if args.quick else max(2, -(-MOE_POOL_BYTES // layer_bytes))
            w13 = [torch.empty(e, 2 * inter, hid, device=dev, dtype=torch.bfloat16).normal_(
                0.0, 1.0 / math.sqrt(hid), generator=gen) for _ in range(copies)]
            w2 = [torch.empty(e, hid, inter, device=dev, dtype=torch.bfloat16).normal_(
                0.0, 1.0 / math.sqrt(inter), generator=gen) for _ in range(copies)]
            print(f"{spec['model']} tp{spec['tp']}: {e} experts top-{k}, hidden {hid}, "
                  f"intermediate {inter}; {copies} copies of {layer_bytes/2**30:.2f} GiB", flush=True)
            for tokens in tokens_list:
                if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                    meta.setdefault("skipped", []).append({"model": spec["model"], "tokens": tokens,
                                                           "reason": "time limit"})
                    continue
                try:
                    x = torch.randn(tokens, hid, device=dev, dtype=torch.bfloat16, generator=gen)
                    routes = [_moe_routes(torch, x, spec, gen) for _ in range(copies)]
                    touched = float(np.mean([sum(1 for v in r["counts"] if v) for r in routes]))
                    tbytes = touched * expert_bytes
                    flops = 2.0 * tokens * k * 3 * hid * inter
                    if tokens == 16:
                        ck = {}
                        with torch.inference_mode():
                            nref = min(tokens, 4)
                            ref = _moe_reference(torch, x, routes[0], w13[0], w2[0], inter, nref)
                            for impl in impls:
                                got = _moe_layer(torch, impl, x, routes[0], w13[0], w2[0], spec)[:nref].float()
                                err = float((got - ref).norm() / ref.norm())
                                ck[impl] = {"rel_err_vs_fp32": round(err, 6), "ok": bool(err < 2e-2)}
                        meta["checks"][f"{spec['model']}_tp{spec['tp']}_T{tokens}"] = ck
                        print("  check:", json.dumps(ck), flush=True)
                    for impl in impls:
                        def gemm(impl=impl, routes=routes, w13=w13, w2=w2, inter=inter):
                            for r, a, b in zip(routes, w13, w2):
                                _moe_experts(torch, impl, r["xs"], r["offs"], r["counts"], a, b, inter)

                        def layer(impl=impl, x=x, routes=routes, w13=w13, w2=w2, spec=spec):
                            for r, a, b in zip(routes, w13, w2):
                                _moe_layer(torch, impl, x, r, a, b, spec)

                        with torch.inference_mode():
                            try:
                                ms_g, how_g = _time_graph_or_eager(torch, gemm, reps)
                                ms_g /= copies
                            except Exception as exc:
                                _free_memory(torch)
                                meta["checks"][f"{spec['model']}_T{tokens}_{impl}_error"] = _first_line(exc)
                                print(f"  {impl} failed: {_first_line(exc)}", flush=True)
                                continue
                            try:
                                ms_l, how_l = _time_graph_or_eager(torch, layer, reps)
                                ms_l /= copies
                            except Exception as exc:
                                _free_memory(torch)
                                ms_l, how_l = float("nan"), "error: " + _first_line(exc)
                        if how_g != "graph" or how_l != "graph":
                            meta.setdefault("not_graphed", []).append(
                                {"model": spec["model"], "tokens": tokens, "impl": impl,
                                 "gemm": how_g, "layer": how_l})
                        wr.writerow([args.gpu_name, spec["model"], spec["tp"], impl, tokens, e, k, hid, inter,
                                     f"{touched:.2f}", int(tbytes), copies, f"{ms_l:.5f}", f"{ms_g:.5f}",
                                     f"{tbytes/ms_g/1e6:.1f}", f"{flops/ms_g/1e9:.2f}",
                                     f"{tbytes/ms_l/1e6:.1f}", f"{flops/ms_l/1e9:.2f}"])
                        fh.flush()
                        n_rows += 1
                        print(f"  {impl:10s} T={tokens:5d}: touched {touched:6.1f} "
                              f"({tbytes/1e6:8.1f} MB)  layer {ms_l*1e3:8.1f} us  gemm {ms_g*1e3:8.1f} us "
                              f"({tbytes/ms_g/1e6:6.0f} GB/s, {flops/ms_g/1e9:6.1f} TFLOP/s)", flush=True)
                    del x, routes
                except Exception as exc:
                    meta.setdefault("skipped", []).append({"model": spec["model"], "tokens": tokens,
                                                           "reason": "error: " + _first_line(exc)})
                    print(f"  T={tokens} error: {_first_line(exc)}", flush=True)
                _free_memory(torch)
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                _write_json(meta_path, meta)
            del w13, w2
            _free_memory(torch)
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    _write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time()-t_start:.0f} s", flush=True)
    return 0


# -- fp8 --------------------------------------------------------------------

FP8_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (7168, 2048))  # (N, K): y[M,N] = x[M,K] W[N,K]^T
FP8_M = [2**i for i in range(14)]  # 1 .. 8192
QUICK_FP8_M = [1, 64, 1024]
FP8_POOL_BYTES = 2**29  # bf16 weight copies per shape: at least this much (10x the H100's L2)
FP8_VARIANTS = (("bf16", "none"), ("fp8_e4m3", "tensor"), ("fp8_e4m3", "row"), ("fp8_e4m3", "block128"))
FP8_COLUMNS = ("gpu", "dtype", "scaling", "m", "n", "k", "copies", "ms", "tflops", "gbps", "bytes")


def _fp8_ops(torch, m, n, k, a, w, a8, w8):
    """Callables and dequantised float32 references for each variant of y = a @ w^T."""
    F = torch.nn.functional
    dev = a.device
    f32 = torch.float32
    sa_row = torch.rand(m, 1, device=dev, dtype=f32).add_(0.5)
    sb_row = torch.rand(1, n, device=dev, dtype=f32).add_(0.5)
    one = torch.tensor(1.0, device=dev, dtype=f32)
    # DeepSeek-V3 style: activations 1x128 blocks, weights 128x128 blocks; cuBLAS layouts
    # (scale_a [M, K/128] M-major; scale_b [K/128, N/128] K-major).
    sa_blk = torch.rand(k // 128, m, device=dev, dtype=f32).add_(0.5).t()
    sb_blk = torch.rand(n // 128, k // 128, device=dev, dtype=f32).add_(0.5).t()

    def call(variant, wmat, wmat8):
        dt, sc = variant
        if dt == "bf16":
            return F.linear(a, wmat)
        if sc == "tensor":
            return torch._scaled_mm(a8, wmat8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                    use_fast_accum=True)
        if sc == "row":
            return torch._scaled_mm(a8, wmat8.t(), scale_a=sa_row, scale_b=sb_row,
                                    out_dtype=torch.bfloat16, use_fast_accum=True)
        from torch.nn.functional import ScalingType

        return F.scaled_mm(a8, wmat8.t(), sa_blk, ScalingType.BlockWise1x128, sb_blk,
                           ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)

    def reference(variant):
        dt, sc = variant
        if dt == "bf16":
            return a.float() @ w.float().t()
        af, wf = a8.float(), w8.float()
        if sc == "row":
            af, wf = af * sa_row, wf * sb_row.t()
        elif sc == "block128":
            af = af * sa_blk.repeat_interleave(128, dim=1)
            wf = wf * sb_blk.t().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
        return af @ wf.t()

    return call, reference


def run_fp8(torch, args) -> int:
    t_start = time.time()
    dev = _dev(torch)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    ms_list = QUICK_FP8_M if args.quick else FP8_M
    reps = args.max_reps or (5 if args.quick else 10)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = {
        "kind": "fp8",
        "gpu": args.gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": _software(torch),
        "device": _device_meta(torch) if dev.type == "cuda" else {"name": str(dev)},
        "command": " ".join(sys.argv),
        "variants": {
            "bf16/none": "F.linear(x, W) in bf16 (cuBLAS)",
            "fp8_e4m3/tensor": "torch._scaled_mm, one fp32 scale per tensor, use_fast_accum=True",
            "fp8_e4m3/row": "torch._scaled_mm, fp32 scale per row of x and per output channel of W, "
                            "use_fast_accum=True",
            "fp8_e4m3/block128": "F.scaled_mm, BlockWise1x128 (x) x BlockWise128x128 (W) fp32 scales "
                                 "(DeepSeek-V3's weight_block_size)",
        },
        "method": "y[M,N] = x[M,K] W[N,K]^T, bf16 output; inputs random (fp8 = bf16 N(0,1) cast), "
                  "quantisation of x NOT timed (operands pre-quantised); `copies` distinct weight "
                  f"matrices (>= {FP8_POOL_BYTES/2**20:.0f} MiB of bf16 per shape, same count in fp8) "
                  f"chained in one CUDA graph; ms = median of {reps} replays / copies; "
                  "bytes = x + W + y once each (fp8: 1 byte/element for x and W); tflops = 2MNK / time",
        "columns": list(FP8_COLUMNS),
        "checks": {},
        "errors": {},
        "rows": 0,
    }
    _write_json(meta_path, meta)
    n_rows = 0
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    fh, wr = _csv_out(out_path, FP8_COLUMNS)
    with fh:
        for (n, k) in FP8_SHAPES:
            copies = 2 if args.quick else max(2, -(-FP8_POOL_BYTES // (2 * n * k)))
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
            w8s = [w.to(torch.float8_e4m3fn) for w in ws]
            print(f"N={n} K={k}: {copies} copies", flush=True)
            for m in ms_list:
                if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                    meta.setdefault("skipped", []).append({"m": m, "n": n, "k": k, "reason": "time limit"})
                    continue
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
                a8 = a.to(torch.float8_e4m3fn)
                call, reference = _fp8_ops(torch, m, n, k, a, ws[0], a8, w8s[0])
                line = []
                for variant in FP8_VARIANTS:
                    key = f"{variant[0]}/{variant[1]}"
                    try:
                        with torch.inference_mode():
                            if m == 64:
                                ref = reference(variant)
                                got = call(variant, ws[0], w8s[0]).float()
                                err = float((got - ref).norm() / ref.norm())
                                meta["checks"][f"{key}_M{m}_N{n}_K{k}"] = {"rel_err": round(err, 6),
                                                                          "ok": bool(err < 2e-2)}

                            def chain(variant=variant, call=call, ws=ws, w8s=w8s):
                                for w, w8 in zip(ws, w8s):
                                    call(variant, w, w8)

                            ms = _time_graph(torch, chain, reps) / copies
                    except Exception as exc:
                        _free_memory(torch)
                        meta["errors"].setdefault(key, _first_line(exc, 300))
                        line.append(f"{key}: error")
                        continue
                    eb = 2 if variant[0] == "bf16" else 1
                    nbytes = eb * (m * k + n * k) + 2 * m * n
                    flops = 2.0 * m * n * k
                    wr.writerow([args.gpu_name, variant[0], variant[1], m, n, k, copies, f"{ms:.5f}",
                                 f"{flops/ms/1e9:.2f}", f"{nbytes/ms/1e6:.1f}", nbytes])
                    fh.flush()
                    n_rows += 1
                    line.append(f"{key} {ms*1e3:8.1f} us {flops/ms/1e9:6.1f} TF {nbytes/ms/1e6:6.0f} GB/s")
                print(f"  M={m:5d}: " + " | ".join(line), flush=True)
                del a, a8, call, reference
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                _write_json(meta_path, meta)
            del ws, w8s
            _free_memory(torch)
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    _write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time()-t_start:.0f} s", flush=True)
    return 0


# -- allreduce --------------------------------------------------------------

ALLREDUCE_SIZES = [2**i for i in range(11, 29)]  # 2 KiB .. 256 MiB
QUICK_ALLREDUCE_SIZES = [2**11, 2**20, 2**24]
ALLREDUCE_COLUMNS = ("gpu", "world_size", "dtype", "bytes", "mode", "iters", "ms", "ms_min", "ms_max",
                     "algbw_gbps", "busbw_gbps")
# Keep NVLink multicast (NVLS) off: it can take a shared host's GPUs out of service.
_NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                     "NVSHMEM_DISABLE_NVLS": "1"}


def _allreduce_iters(nbytes: int) -> int:
    if nbytes <= 2**20:
        return 50
    if nbytes <= 2**25:
        return 20
    return 10


def _allreduce_worker(rank: int, world: int, port: int, out: str, gpu_name: str, quick: bool,
                      reps: int, argv: list) -> None:
    os.environ.update(_NO_MULTICAST_ENV)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=_dt.timedelta(seconds=120))
    sizes = QUICK_ALLREDUCE_SIZES if quick else ALLREDUCE_SIZES
    out_path = Path(out)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    t_start = time.time()
    big = torch.empty(max(sizes) // 2, device=dev, dtype=torch.bfloat16)
    meta = None
    if rank == 0:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
        meta = {
            "kind": "allreduce",
            "gpu": gpu_name,
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "software": _software(torch),
            "device": _device_meta(torch, 0),
            "devices": [torch.cuda.get_device_properties(i).name for i in range(torch.cuda.device_count())],
            "nvidia_smi_topo": topo.stdout.strip(),
            "command": " ".join(argv),
            "env": {k: os.environ.get(k) for k in sorted(set(_NO_MULTICAST_ENV) | {
                "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_DEBUG", "NCCL_CUMEM_ENABLE"})},
            "method": "torch.distributed all_reduce (SUM, bf16, NCCL), one process per GPU "
                      "(torch.multiprocessing.spawn); per size: 5 warm-up calls, then `reps` batches "
                      "of `iters` back-to-back calls on one buffer (refilled with random numbers and "
                      "all ranks barriered before each batch), timed with CUDA events; ms = per-call "
                      "time, median over batches, max over ranks. mode graph: the `iters` calls "
                      "captured in one CUDA graph, replayed. algbw = bytes / time; busbw = algbw * "
                      "2 (world-1) / world (nccl-tests convention)",
            "columns": list(ALLREDUCE_COLUMNS),
            "reps": reps,
            "rows": 0,
            "errors": {},
        }
        _write_json(meta_path, meta)
        fh, wr = _csv_out(out_path, ALLREDUCE_COLUMNS)
    n_rows = 0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for mode in ("eager", "graph"):
        for nbytes in sizes:
            buf = big[: nbytes // 2]
            iters = _allreduce_iters(nbytes)
            err = None
            times = []
            graph = None
            try:
                buf.normal_()
                for _ in range(5):
                    dist.all_reduce(buf)
                torch.cuda.synchronize()
                if mode == "graph":
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        dist.all_reduce(buf)
                    torch.cuda.current_stream().wait_stream(side)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    # thread_local: the NCCL watchdog thread's event queries may not void the capture
                    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                        for _ in range(iters):
                            dist.all_reduce(buf)
                    graph.replay()
                    torch.cuda.synchronize()
                for _ in range(reps):
                    buf.normal_()
                    torch.cuda.synchronize()
                    dist.barrier(device_ids=[rank])
                    start.record()
                    if graph is not None:
                        graph.replay()
                    else:
                        for _ in range(iters):
                            dist.all_reduce(buf)
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end) / iters)
            except Exception as exc:
                err = _first_line(exc, 300)
            del graph
            ok = torch.tensor([0.0 if err else 1.0], device=dev)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            if ok.item() < 1.0:
                if rank == 0:
                    meta["errors"][f"{mode}_{nbytes}"] = err or "failed on another rank"
                    _write_json(meta_path, meta)
                if mode == "graph":
                    break  # a broken capture is not retried at larger sizes
                continue
            stats = torch.tensor([float(np.median(times)), float(np.min(times)), float(np.max(times))],
                                 device=dev, dtype=torch.float64)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)
            med, lo, hi = stats.tolist()
            if rank == 0:
                algbw = nbytes / med / 1e6
                busbw = algbw * 2 * (world - 1) / world
                wr.writerow([gpu_name, world, "bfloat16", nbytes, mode, iters, f"{med:.5f}", f"{lo:.5f}",
                             f"{hi:.5f}", f"{algbw:.2f}", f"{busbw:.2f}"])
                fh.flush()
                n_rows += 1
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                _write_json(meta_path, meta)
                print(f"{mode:5s} {nbytes:>10d} B: {med*1e3:9.2f} us  algbw {algbw:7.1f} GB/s  "
                      f"busbw {busbw:7.1f} GB/s", flush=True)
    if rank == 0:
        fh.close()
    dist.barrier(device_ids=[rank])
    dist.destroy_process_group()


def run_allreduce(torch, args) -> int:
    import socket

    import torch.multiprocessing as mp

    os.environ.update(_NO_MULTICAST_ENV)
    world = args.world_size or torch.cuda.device_count()
    if world < 2:
        print(f"error: all-reduce needs at least 2 GPUs, found {world}", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reps = args.max_reps or (5 if args.quick else 20)
    t0 = time.time()
    mp.spawn(_allreduce_worker, args=(world, port, args.out, args.gpu_name, args.quick, reps, list(sys.argv)),
             nprocs=world, join=True)
    print(f"all-reduce done in {time.time()-t0:.0f} s", flush=True)
    return 0


# -- tp ---------------------------------------------------------------------

TP_COLUMNS = ("gpu", "model", "tp", "layers", "batch", "new_tokens", "context", "ms")
TP_DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
TP_DECODE_CONTEXTS = [512, 2048]
TP_PREFILL_NEW_TOKENS = [512, 2048, 8192]
TP_STEP_MODES = ("compiled_graph", "graph", "eager")  # tried in this order on the first point
TP_DEFAULT_MARGIN_BYTES = 4 * 1024**3


def build_tp_grid(quick: bool):
    """(batch, new_tokens, context) in measuring order: decode at the first context, batch-1
    prefills at context 0, decode at the other contexts."""
    if quick:
        db, dcs, pn = [1, 8, 64], [512], [512]
    else:
        db, dcs, pn = TP_DECODE_BATCHES, TP_DECODE_CONTEXTS, TP_PREFILL_NEW_TOKENS
    pts = [(b, 1, dcs[0]) for b in db] + [(1, n, 0) for n in pn]
    for c in dcs[1:]:
        pts += [(b, 1, c) for b in db]
    grid = {"decode": {"batch": db, "context": dcs}, "prefill": {"batch": [1], "new_tokens": pn, "context": [0]}}
    return pts, grid


def tp_arch(arch: Arch, tp: int) -> Arch:
    """The dimensions one GPU of a ``tp``-way tensor-parallel replica holds, as vLLM splits them:
    query heads, the MLP intermediate size and the vocabulary divided by ``tp``; KV heads divided too,
    ``max(1, kv_heads // tp)``, so each is replicated once ``tp`` exceeds the KV-head count. The hidden
    size is whole on every GPU."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1 (got {tp})")
    for what, n in (("attention heads", arch.heads), ("intermediate size", arch.intermediate),
                    ("vocabulary", arch.vocab)):
        if n % tp:
            raise ValueError(f"{arch.name}: {what} {n} not divisible by tp {tp}")
    if (arch.kv_heads >= tp and arch.kv_heads % tp) or (arch.kv_heads < tp and tp % arch.kv_heads):
        raise ValueError(f"{arch.name}: kv heads {arch.kv_heads} and tp {tp}: one must divide the other")
    loc = copy.copy(arch)
    loc.heads = arch.heads // tp
    loc.kv_heads = max(1, arch.kv_heads // tp)
    loc.intermediate = arch.intermediate // tp
    loc.vocab = arch.vocab // tp
    if loc.heads % loc.kv_heads:
        raise ValueError(f"{arch.name}: {loc.heads} query heads per GPU not a multiple of {loc.kv_heads} kv heads")
    return loc


def tp_shard_weights(torch, full: Model, arch: Arch, rank: int, tp: int):
    """One rank's shard of a whole :class:`Model`'s weights (layer dicts, final norm, LM head): the
    Megatron/vLLM layout. Column-parallel QKV (this rank's query heads, its KV heads: KV head
    ``rank * kv_heads // tp``, replicated past the KV-head count) and gate/up (its slice of each);
    row-parallel output and down projections (the matching input columns); vocabulary-parallel
    LM head / embedding (its rows). Norm weights are whole on every rank."""
    hd = arch.head_dim
    hl = arch.heads // tp
    kvl = max(1, arch.kv_heads // tp)
    kv0 = rank * arch.kv_heads // tp
    il = arch.intermediate // tp
    vl = arch.vocab // tp
    qd, kvd, inter = arch.q_dim, arch.kv_dim, arch.intermediate
    q_rows = slice(rank * hl * hd, (rank + 1) * hl * hd)
    k_rows = slice(qd + kv0 * hd, qd + (kv0 + kvl) * hd)
    v_rows = slice(qd + kvd + kv0 * hd, qd + kvd + (kv0 + kvl) * hd)
    i_rows = slice(rank * il, (rank + 1) * il)
    layers = []
    for w in full.layers:
        s = {
            "ln1": w["ln1"].clone(),
            "wqkv": torch.cat((w["wqkv"][q_rows], w["wqkv"][k_rows], w["wqkv"][v_rows]), 0).contiguous(),
            "wo": w["wo"][:, q_rows].contiguous(),
            "ln2": w["ln2"].clone(),
            "wgu": torch.cat((w["wgu"][i_rows], w["wgu"][inter + i_rows.start: inter + i_rows.stop]), 0).contiguous(),
            "wd": w["wd"][:, i_rows].contiguous(),
        }
        for k in ("qn", "kn"):
            if k in w:
                s[k] = w[k].clone()
        layers.append(s)
    return layers, full.final_norm.clone(), full.lm_head[rank * vl: (rank + 1) * vl].contiguous()


class TPForward(_Pieces):
    """One rank's step of a ``tp``-way tensor-parallel model, laid out as :class:`PiecewiseForward`
    (tokens on one axis, residual add fused into the next RMSNorm, pieces compiled once by
    ``torch.compile`` with a dynamic token axis when ``compiled``) plus the collectives of the
    Megatron/vLLM layout, which stay outside the compiled pieces (eager calls, captured with the
    rest of the step in one CUDA graph):

    * vocabulary-parallel embedding: tokens outside this rank's rows gather zeros, then an
      all-reduce of the hidden states;
    * per layer ``pre`` (add + RMSNorm, column-parallel QKV, q/k norm, rotary), attention over this
      rank's heads and KV cache (eager), the row-parallel output projection, **all-reduce**, ``mlp``
      (add + RMSNorm, column-parallel gate/up, SiLU * up, row-parallel down), **all-reduce**;
    * ``final`` (add, norm, this rank's vocabulary slice of the LM head) and an all-gather of the
      logits (vLLM's ``tensor_model_parallel_all_gather``).

    ``model`` holds this rank's shard (a :class:`Model` built on :func:`tp_arch`'s dimensions).
    With ``tp == 1`` no collective runs."""

    def __init__(self, torch, dist, model: Model, rank: int, tp: int, compiled: bool):
        self.torch, self.dist = torch, dist
        self.model, self.rank, self.tp, self.compiled = model, rank, tp, compiled
        self.vocab_start = rank * model.arch.vocab
        _rms, pre, mlp, final = _step_pieces(torch, model, compiled)
        self._compile(torch, compiled, pre=pre, mlp=mlp, final=final)

    def _all_reduce(self, t):
        if self.tp > 1:
            self.dist.all_reduce(t)
        return t

    def forward(self, tokens, cache, context: int, positions):
        """tokens [B, T] (ids of the whole vocabulary, the same on every rank); cache from
        ``Model.new_cache(B, context + T)`` (this rank's KV heads); positions [B * T].
        Returns the logits of the last token of each sequence over the whole vocabulary, [B, V]."""
        torch = self.torch
        m = self.model
        a = m.arch
        F = torch.nn.functional
        b, t = tokens.shape
        n = b * t
        ids = tokens.reshape(n) - self.vocab_start
        outside = (ids < 0) | (ids >= a.vocab)
        x = F.embedding(ids.masked_fill(outside, 0), m.lm_head)
        x = self._all_reduce(x.masked_fill(outside[:, None], 0.0))
        d = torch.zeros_like(x)
        self._mark(positions)
        for li, w in enumerate(m.layers):
            self._mark(x, d)
            x, q, k, v = self.pre(x, d, w["ln1"], w["wqkv"], w.get("qn"), w.get("kn"), m.cos, m.sin, positions)
            kc = cache[li, 0]
            vc = cache[li, 1]
            kc[:, context: context + t] = k.view(b, t, a.kv_heads, a.head_dim)
            vc[:, context: context + t] = v.view(b, t, a.kv_heads, a.head_dim)
            o = m.attention(q.view(b, t, a.heads, a.head_dim), kc, vc, context, t).reshape(n, a.q_dim)
            y = self._all_reduce(F.linear(o, w["wo"]))
            self._mark(x, y)
            x, d = self.mlp(x, y, w["ln2"], w["wgu"], w["wd"])
            self._all_reduce(d)
        if t > 1:
            last = torch.arange(1, b + 1, device=x.device) * t - 1
            x = x.index_select(0, last)
            d = d.index_select(0, last)
        self._mark(x, d)
        logits = self.final(x, d, m.final_norm, m.lm_head)
        if self.tp == 1:
            return logits
        out = torch.empty((self.tp * b, a.vocab), device=logits.device, dtype=logits.dtype)
        self.dist.all_gather_into_tensor(out, logits.contiguous())
        return out.view(self.tp, b, a.vocab).permute(1, 0, 2).reshape(b, self.tp * a.vocab)


def _tp_inputs(torch, model: Model, vocab: int, b: int, n: int, c: int, seed: int):
    """KV cache (this rank's heads), tokens (the same on every rank) and positions of one step."""
    dev = model.device
    with torch.inference_mode():
        cache = model.new_cache(b, c + n)
        g = torch.Generator(device=dev)
        g.manual_seed(seed)
        tokens = torch.randint(0, vocab, (b, n), device=dev, generator=g)
        positions = torch.arange(c, c + n, device=dev).repeat(b)
    return cache, tokens, positions


def tp_layout_check(torch, dist, arch: Arch, rank: int, tp: int, device, dtype, compiled: bool = False) -> dict:
    """The tensor-parallel step against the whole model on one device, with the same weights: a small
    model of ``arch``'s kind (its head counts, q/k norm and rotary; small hidden, intermediate,
    head and vocabulary sizes, 2 layers) is built whole on every rank from one seed, each rank takes
    its shard (:func:`tp_shard_weights`), and the gathered logits of :class:`TPForward` are compared
    with ``Model.forward`` of the whole model (decode, prefill and chunked prefill)."""
    cfg = {"model_type": arch.model_type, "hidden_size": 256, "intermediate_size": 128 * tp,
           "num_hidden_layers": 2, "num_attention_heads": arch.heads, "num_key_value_heads": arch.kv_heads,
           "head_dim": 16, "vocab_size": 512 * tp, "rms_norm_eps": arch.eps, "rope_theta": arch.rope_theta}
    small = Arch(cfg, arch.name + "-small")
    full = Model(torch, small, device, dtype, seed=7)
    loc = tp_arch(small, tp)
    shard = Model.__new__(Model)
    shard.__dict__.update(full.__dict__)
    shard.arch = loc
    shard.layers, shard.final_norm, shard.lm_head = tp_shard_weights(torch, full, small, rank, tp)
    full.ensure_rope(256)
    shard.ensure_rope(256)
    tpf = TPForward(torch, dist, shard, rank, tp, compiled=compiled)
    res = {}
    for label, (b, n, c) in {"decode_b4_ctx64": (4, 1, 64), "prefill_b1_n48": (1, 48, 0),
                             "chunk_b2_n16_ctx32": (2, 16, 32)}.items():
        with torch.inference_mode():
            g = torch.Generator(device=device)
            g.manual_seed(11)
            tokens = torch.randint(0, small.vocab, (b, n), device=device, generator=g)
            positions = torch.arange(c, c + n, device=device).repeat(b)
            cache_full = torch.empty((2, 2, b, c + n, small.kv_heads, small.head_dim), device=device, dtype=dtype)
            cache_full.normal_(0.0, 1.0, generator=g)
            ref = full.forward(tokens, cache_full.clone(), c).float()
            kvl = loc.kv_heads
            kv0 = rank * small.kv_heads // tp
            cache_loc = cache_full[:, :, :, :, kv0: kv0 + kvl].contiguous()
            try:
                out = tpf.forward(tokens, cache_loc, c, positions).float()
                err = float((out - ref).norm() / ref.norm())
                res[label] = {"rel_err": round(err, 7), "ok": bool(err < 2e-2)}
            except Exception as exc:
                res[label] = {"ok": False, "error": _first_line(exc)}
    return res


def _gpu_label(name: str) -> str:
    """Catalogue key for a device name as the driver reports it (``--gpu-name auto``)."""
    u = name.upper()
    if "H200" in u:
        return "h200"
    if "H100" in u:
        return "h100-pcie" if "PCIE" in u else "h100-sxm"
    if "A100" in u:
        return "a100-80gb" if "80GB" in u else "a100-40gb"
    return "".join(ch if ch.isalnum() else "-" for ch in name.lower()).strip("-")


def _tp_time(torch, dist, step, budget_s: float, min_reps: int, max_reps: int, rank: int, dev) -> dict:
    """Back-to-back replays timed with CUDA events on every rank after a barrier; the repetition count
    is agreed (from the slowest rank's first step). Returns this rank's median, min and max (ms)."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    dist.barrier(device_ids=[rank])
    torch.cuda.synchronize()
    start.record()
    step()
    end.record()
    end.synchronize()
    first = torch.tensor([start.elapsed_time(end)], device=dev, dtype=torch.float64)
    dist.all_reduce(first, op=dist.ReduceOp.MAX)
    reps = max(min_reps, min(max_reps, int(budget_s * 1000.0 / max(float(first.item()), 1e-3))))
    torch.cuda.synchronize()
    dist.barrier(device_ids=[rank])
    torch.cuda.synchronize()
    times = _replay_ms(torch, step, reps)
    return {"ms": float(np.median(times)), "ms_min": float(times.min()), "ms_max": float(times.max()), "reps": reps}


def _tp_point(torch, dist, model, fwd, vocab, mode, b, n, c, budget_s, min_reps, max_reps, rank, dev) -> dict:
    """One step shape on every rank: warm-up (compiles when needed), capture of the whole step,
    collectives included, in one CUDA graph (``mode`` != eager), one untimed replay, timing."""
    cache, tokens, positions = _tp_inputs(torch, model, vocab, b, n, c, seed=1 + b + 7 * n + 13 * c)
    graph = step = fn = None
    try:
        with torch.inference_mode():
            def fn(tokens=tokens, cache=cache, positions=positions):
                return fwd.forward(tokens, cache, c, positions)

            _warm_up(torch, fn)
            if mode != "eager":
                torch.cuda.empty_cache()
                graph = torch.cuda.CUDAGraph()
                # thread_local: the NCCL watchdog thread's event queries may not void the capture
                with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                    fn()
                step = graph.replay
            else:
                step = fn
            step()
            torch.cuda.synchronize()
            return _tp_time(torch, dist, step, budget_s, min_reps, max_reps, rank, dev)
    finally:
        del step, fn, graph, cache, tokens, positions
        _free_memory(torch)


def _all_ok(torch, dist, ok: bool, dev) -> bool:
    t = torch.tensor([1.0 if ok else 0.0], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item() >= 1.0)


def _run_text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:  # not fatal: the sidecar just lacks it
        return "error: " + _first_line(exc)


def _tp_worker(rank: int, world: int, port: int, args, argv: list) -> None:
    os.environ.update(_NO_MULTICAST_ENV)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=_dt.timedelta(seconds=args.tp_timeout_s))
    try:
        _tp_run(torch, dist, rank, world, dev, args, argv)
    finally:
        dist.destroy_process_group()


def _tp_run(torch, dist, rank: int, tp: int, dev, args, argv: list) -> None:
    t_start = time.time()
    model_path = Path(args.model)
    cfg = json.loads(model_path.read_text())
    model_name = model_path.stem
    arch = Arch(cfg, model_name)
    loc = tp_arch(arch, tp)
    torch.backends.cuda.matmul.allow_tf32 = True
    quick = args.quick
    min_reps = args.min_reps if args.min_reps is not None else 3
    max_reps = args.max_reps if args.max_reps is not None else (5 if quick else 20)
    budget_s = args.budget_s if args.budget_s is not None else (0.05 if quick else 0.15)
    dev_name = torch.cuda.get_device_name(dev)
    gpu = _gpu_label(dev_name) if args.gpu_name == "auto" else args.gpu_name
    dyn_cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 64)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 512)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend_names = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                     "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    backends = [backend_names[x.strip()] for x in args.sdpa_backends.split(",") if x.strip()]

    out_path = Path(args.out)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = None

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    def save() -> None:
        if rank == 0:
            meta["wall_seconds"] = round(time.time() - t_start, 1)
            _write_json(meta_path, meta)

    n_layers = args.num_layers or arch.layers
    points, grid = build_tp_grid(quick)
    if rank == 0:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "kind": "tp",
            "gpu": gpu,
            "gpu_label_from": "nvidia-smi device name (--gpu-name auto)" if args.gpu_name == "auto" else "--gpu-name",
            "model": model_name,
            "model_config": str(model_path),
            "tp": tp,
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "software": _software(torch),
            "device": _device_meta(torch, rank),
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
            "nvidia_smi_L": _run_text(["nvidia-smi", "-L"]),
            "nvidia_smi_topo": _run_text(["nvidia-smi", "topo", "-m"]),
            "command": " ".join(argv),
            "env": {k: os.environ.get(k) for k in sorted(set(_NO_MULTICAST_ENV) | {
                "NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_DEBUG", "NCCL_CUMEM_ENABLE"})},
            "layout": {
                "attention": f"column-parallel fused QKV: {loc.heads} of {arch.heads} query heads and "
                             f"{loc.kv_heads} of {arch.kv_heads} KV heads per GPU (vLLM: max(1, kv_heads // tp)); "
                             "row-parallel output projection, then an all-reduce of the hidden states",
                "mlp": f"column-parallel fused gate/up ({loc.intermediate} of {arch.intermediate} per GPU), "
                       "row-parallel down projection, then an all-reduce of the hidden states",
                "embedding_lm_head": f"vocabulary-parallel ({loc.vocab} of {arch.vocab} rows per GPU): "
                                     "embedding by masked gather + all-reduce; LM head on the last token "
                                     "of each sequence, logits all-gathered",
                "collectives_per_step": {"all_reduce": 2 * n_layers + 1, "all_gather": 1} if tp > 1 else {},
            },
            "model_build": {"dtype": "bfloat16", "layers_built": n_layers, "layers_in_config": arch.layers,
                            "qk_norm": arch.qk_norm,
                            "notes": "random weights (per-rank seed), one shard per GPU built directly in the "
                                     "shapes of the layout above; the per-layer cost is the model's, the "
                                     "layer count is --layers when given"},
            "method": {
                "step": "TPForward: the step of --mode compare's PiecewiseForward with the collectives of "
                        "the layout; pieces pre/mlp/final compiled by torch.compile (Inductor default mode, "
                        "fullgraph, token axis dynamic) per rank; collectives (torch.distributed, NCCL) "
                        "and attention (SDPA) eager between them; the whole step, collectives included, "
                        "captured in one CUDA graph per shape on every rank and replayed",
                "processes": "one per GPU (torch.multiprocessing.spawn), NCCL, NVLink multicast off",
                "timing": "per point: every rank warms up, captures, replays once untimed; barrier; first "
                          "replay timed, repetition count agreed from the slowest rank; barrier; `reps` "
                          "back-to-back replays, each between CUDA events; ms = median on rank 0 "
                          "(points also give every rank's median)",
                "sdpa_backends": args.sdpa_backends,
                "reps": {"min": min_reps, "max": max_reps, "timed_seconds_per_point": budget_s},
                "quick": quick,
            },
            "grid": grid,
            "columns": list(TP_COLUMNS),
            "points_columns": ["step_mode", "batch", "new_tokens", "context", "ms_rank0", "ms_min_rank0",
                               "ms_max_rank0", "ms_median_per_rank", "reps"],
            "points": [],
            "skipped": [],
            "rows": 0,
        }
        save()
    log(f"{model_name}: tp {tp} on {dev_name} ({gpu}); {n_layers} layers; per GPU {loc.heads} q heads, "
        f"{loc.kv_heads} kv heads, intermediate {loc.intermediate}, vocab {loc.vocab}")

    # 1. the layout against the whole model (small, float32)
    try:
        chk = tp_layout_check(torch, dist, arch, rank, tp, dev, torch.float32)
    except Exception as exc:
        chk = {"error": _first_line(exc, 300)}
    if rank == 0:
        meta["layout_check_fp32"] = chk
        save()
    log(f"layout check (fp32, small model, TP logits vs whole model): {json.dumps(chk)}")
    _free_memory(torch)

    # 2. this rank's shard of the model
    t0 = time.time()
    model = Model(torch, loc, dev, torch.bfloat16, num_layers=n_layers, seed=1000 + rank)
    model.ensure_rope(max([c + n for _, n, c in points] + [args.compile_tokens]) + 64)
    torch.cuda.synchronize()
    weights_bytes = torch.cuda.memory_allocated(dev)
    free_b = torch.tensor([float(torch.cuda.mem_get_info(dev)[0])], device=dev, dtype=torch.float64)
    dist.all_reduce(free_b, op=dist.ReduceOp.MIN)
    free_b = int(free_b.item())
    margin = max(int(args.margin_gib * 1024**3), TP_DEFAULT_MARGIN_BYTES)
    budget_bytes = free_b - margin
    log(f"weights {weights_bytes / 2**30:.1f} GiB per GPU in {time.time() - t0:.1f} s; "
        f"free {free_b / 2**30:.1f} GiB (least over ranks)")
    if rank == 0:
        meta["model_build"]["weights_bytes_per_gpu"] = int(weights_bytes)
        meta["method"]["memory_free_after_weights_bytes"] = free_b
        meta["method"]["memory_margin_bytes"] = margin
        save()

    # 3. pieces: plain, and compiled per rank
    fwds = {"graph": TPForward(torch, dist, model, rank, tp, compiled=False)}
    fwds["eager"] = fwds["graph"]
    modes = list(TP_STEP_MODES)
    if args.tp_no_compile:
        modes.remove("compiled_graph")
    else:
        fwds["compiled_graph"] = TPForward(torch, dist, model, rank, tp, compiled=True)
        t1 = time.time()
        err = None
        try:
            with sdpa_kernel(backends), torch.inference_mode():
                for (b, n, c) in ((1, args.compile_tokens, 0), (1, 1, 16), (3, 1, 16)):
                    cache, tokens, positions = _tp_inputs(torch, model, arch.vocab, b, n, c, seed=3)
                    fwds["compiled_graph"].forward(tokens, cache, c, positions)
                    del cache, tokens, positions
            torch.cuda.synchronize()
        except Exception as exc:
            err = _first_line(exc, 400)
        ok = _all_ok(torch, dist, err is None, dev)
        if rank == 0:
            meta["compile"] = ({"seconds": round(time.time() - t1, 1), "dynamo_graphs": _dynamo_graphs(torch),
                                "first_call_tokens": args.compile_tokens} if ok else
                               {"error": err or "failed on another rank"})
            save()
        log(f"compiled pieces in {time.time() - t1:.1f} s" if ok else f"compile failed: {err}")
        if not ok:
            modes.remove("compiled_graph")
            fwds.pop("compiled_graph")
        _free_memory(torch)
        if ok:  # compiled against plain pieces on the real shard (bf16)
            res = {}
            with sdpa_kernel(backends), torch.inference_mode():
                cache, tokens, positions = _tp_inputs(torch, model, arch.vocab, 4, 1, 64, seed=5)
                try:
                    ref = fwds["graph"].forward(tokens, cache.clone(), 64, positions).float()
                    got = fwds["compiled_graph"].forward(tokens, cache.clone(), 64, positions).float()
                    res = {"decode_b4_ctx64_rel_err": round(float((got - ref).norm() / ref.norm()), 6)}
                except Exception as exc:
                    res = {"error": _first_line(exc)}
                del cache, tokens, positions
            _free_memory(torch)
            if rank == 0:
                meta["compiled_vs_plain_bf16"] = res
                save()
            log(f"compiled vs plain pieces (bf16 logits): {json.dumps(res)}")

    # 4. the grid
    kv_per_token = 2 * n_layers * loc.kv_dim * 2
    step_mode = None
    stopped = False
    n_rows = 0
    fh = wr = None
    if rank == 0:
        fh, wr = _csv_out(out_path, TP_COLUMNS)
    for (b, n, c) in points:
        pt = {"batch": b, "new_tokens": n, "context": c}
        # every rank decides alike: the time limit from rank 0's clock
        go = torch.tensor([0.0 if (args.time_limit_s and time.time() - t_start > args.time_limit_s) else 1.0],
                          device=dev)
        dist.broadcast(go, 0)
        if go.item() < 1.0:
            stopped = True
            if rank == 0:
                meta["skipped"].append({**pt, "reason": "time limit"})
            continue
        need = kv_per_token * b * (c + n) + loc.activation_bytes(b, n) + 2 * b * arch.vocab * 4
        if need > budget_bytes:
            if rank == 0:
                meta["skipped"].append({**pt, "reason": f"needs ~{need / 2**30:.1f} GiB per GPU, "
                                                        f"{budget_bytes / 2**30:.1f} GiB available"})
            log(f"skip   b={b:4d} n={n:5d} c={c:5d}: needs ~{need / 2**30:.1f} GiB per GPU")
            continue
        tries = [step_mode] if step_mode else modes
        r = None
        for mode in tries:
            err = None
            try:
                with sdpa_kernel(backends):
                    r = _tp_point(torch, dist, model, fwds[mode], arch.vocab, mode, b, n, c, budget_s,
                                  min_reps, max_reps, rank, dev)
            except Exception as exc:  # out of memory or a capture error
                _free_memory(torch)
                err = _first_line(exc)
                r = None
            if not _all_ok(torch, dist, err is None, dev):
                if rank == 0:
                    meta.setdefault("errors", []).append({**pt, "step_mode": mode,
                                                          "error": err or "failed on another rank"})
                    save()
                log(f"error  {mode} b={b} n={n} c={c}: {err or 'failed on another rank'}")
                r = None
                continue
            if step_mode is None:
                step_mode = mode
                if rank == 0:
                    meta["step_mode"] = mode
                    if mode != TP_STEP_MODES[0]:
                        meta["step_mode_note"] = (f"fell back to {mode}: " + "; ".join(
                            e["error"] for e in meta.get("errors", [])))
                log(f"step mode: {mode}")
            break
        if r is None:
            if rank == 0:
                meta["skipped"].append({**pt, "reason": "error (see errors)"})
                save()
            continue
        meds = torch.zeros(tp, device=dev, dtype=torch.float64)
        meds[rank] = r["ms"]
        dist.all_reduce(meds)
        if rank == 0:
            wr.writerow([gpu, model_name, tp, n_layers, b, n, c, f"{r['ms']:.4f}"])
            fh.flush()
            n_rows += 1
            meta["points"].append([step_mode, b, n, c, round(r["ms"], 4), round(r["ms_min"], 4),
                                   round(r["ms_max"], 4), [round(v, 4) for v in meds.tolist()], r["reps"]])
            meta["rows"] = n_rows
            save()
        log(f"point  b={b:4d} n={n:5d} c={c:5d}: {r['ms']:9.3f} ms (ranks {', '.join(f'{v:.3f}' for v in meds.tolist())}; "
            f"min {r['ms_min']:.3f}, max {r['ms_max']:.3f}, reps {r['reps']})")
    if rank == 0:
        fh.close()
        meta["stopped_early_by_time_limit"] = stopped
        meta["dynamo_graphs_after_grid"] = _dynamo_graphs(torch)
        meta["rows"] = n_rows
        save()
    log(f"wrote {n_rows} rows to {out_path} in {time.time() - t_start:.0f} s")
    dist.barrier(device_ids=[rank])


def run_tp(torch, args) -> int:
    import socket

    import torch.multiprocessing as mp

    os.environ.update(_NO_MULTICAST_ENV)
    tp = args.tp
    have = torch.cuda.device_count()
    if tp > have:
        print(f"error: --tp {tp} needs {tp} GPUs, found {have}", file=sys.stderr)
        return 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    mp.spawn(_tp_worker, args=(tp, port, args, list(sys.argv)), nprocs=tp, join=True)
    print(f"tp {tp} done in {time.time() - t0:.0f} s", flush=True)
    return 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.profiler", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="config.json-style model preset (required unless --streaming)")
    p.add_argument("--streaming", action="store_true",
                   help="measure weight-streaming GEMV bandwidth and the kernel floor instead of a model")
    p.add_argument("--mode", default="model",
                   choices=("model", "streaming", "compare", "moe", "fp8", "allreduce", "tp", "sustained", "mixed_attention",
                            "vllm_attention", "vllm_moe"),
                   help="model: step latencies of --model (default); streaming: as --streaming; "
                        "compare: compiled+CUDA-graph vs graph vs eager steps of --model; moe: routed-"
                        "expert FFN of MoE layers; fp8: FP8 vs bf16 GEMM rates; allreduce: NCCL "
                        "all-reduce over the GPUs of this host; tp: tensor-parallel steps of --model "
                        "over --tp GPUs (one process each, NCCL); sustained: minutes of back-to-back "
                        "prefill and decode GEMMs with the clocks, power and temperature; mixed_attention: "
                        "decodes and a prefill chunk in one flash-attention call against each alone")
    p.add_argument("--modes", default=",".join(COMPARE_MODES),
                   help="compare: comma list of " + ", ".join(COMPARE_ALL_MODES))
    p.add_argument("--moe-models", default=MOE_DEFAULT_MODELS,
                   help="moe: comma list of PRESET.json[:TP] (TP slices the expert intermediate size)")
    p.add_argument("--world-size", type=int, default=None, help="allreduce: GPUs (default: all)")
    p.add_argument("--tp", type=int, default=2, help="tp: tensor-parallel degree (GPUs, one process each)")
    p.add_argument("--tp-no-compile", action="store_true",
                   help="tp: capture the uncompiled pieces only (skip torch.compile)")
    p.add_argument("--tp-timeout-s", type=int, default=180,
                   help="tp: NCCL collective timeout (a rank stuck this long aborts the run)")
    p.add_argument("--compile-tokens", type=int, default=2048,
                   help="compare: tokens of the first compiled call (dynamic shapes traced and Triton "
                        "configs autotuned at this size, as vLLM's profiling run does)")
    p.add_argument("--moe-src", default=None, help="vllm_moe: a vLLM wheel's model_executor/layers/fused_moe/fused_moe.py")
    p.add_argument("--moe-configs", default=None, help="vllm_moe: that wheel's fused_moe/configs folder")
    p.add_argument("--fa-dir", default=None,
                   help="vllm_attention: a copy of a vLLM wheel's vllm/vllm_flash_attn folder (with its .so files)")
    p.add_argument("--gpu-name", required=True, help="catalogue key written to the 'gpu' column, e.g. h100-sxm "
                   "(tp: 'auto' derives it from the device name the driver reports)")
    p.add_argument("--out", required=True, help="CSV output path (the sidecar is <out>.meta.json)")
    p.add_argument("--quick", action="store_true", help="small grid and few repetitions (smoke test)")
    p.add_argument("--phases", default="decode,prefill", help="comma list of decode,prefill")
    p.add_argument("--warmup", type=int, default=None, help="warm-up replays per point")
    p.add_argument("--min-reps", type=int, default=None)
    p.add_argument("--max-reps", type=int, default=None)
    p.add_argument("--budget-s", type=float, default=None,
                   help="timed seconds aimed at per point (sets the repetitions between min and max)")
    p.add_argument("--margin-gib", type=float, default=DEFAULT_MARGIN_BYTES / 1024**3,
                   help="GPU memory kept free beyond each point's estimate")
    p.add_argument("--num-layers", "--layers", type=int, default=None,
                   help="build only this many layers (testing; the timings are then not the model's)")
    p.add_argument("--eager", action="store_true", help="time eager launches instead of CUDA-graph replays")
    p.add_argument("--sdpa-backends", default="flash",
                   help="comma list of SDPA backends allowed (flash, cudnn, efficient, math)")
    p.add_argument("--self-test", action="store_true", help="check attention paths first and record the result")
    p.add_argument("--time-limit-s", type=float, default=None,
                   help="stop starting new points after this many seconds (the CSV stays valid)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.mode in ("compare", "moe", "fp8", "allreduce", "tp", "sustained", "mixed_attention", "vllm_attention",
                     "vllm_moe"):
        if not torch.cuda.is_available():
            print("error: no CUDA device", file=sys.stderr)
            return 2
        if args.mode in ("compare", "tp"):
            if not args.model:
                print(f"error: --mode {args.mode} needs --model", file=sys.stderr)
                return 2
            return run_compare(torch, args) if args.mode == "compare" else run_tp(torch, args)
        return {"moe": run_moe, "fp8": run_fp8, "allreduce": run_allreduce,
                "sustained": run_sustained, "mixed_attention": run_mixed_attention,
                "vllm_attention": run_vllm_attention, "vllm_moe": run_vllm_moe}[args.mode](torch, args)
    if args.streaming or args.mode == "streaming":
        if not torch.cuda.is_available():
            print("error: no CUDA device", file=sys.stderr)
            return 2
        rows = measure_streaming(torch, args.gpu_name, Path(args.out))
        print(f"wrote {len(rows)} rows to {args.out}", flush=True)
        return 0
    if not args.model:
        print("error: --model is required (or pass --streaming)", file=sys.stderr)
        return 2
    t_start = time.time()
    model_path = Path(args.model)
    cfg = json.loads(model_path.read_text())
    model_name = model_path.stem
    arch = Arch(cfg, model_name)

    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    props = torch.cuda.get_device_properties(device)
    torch.backends.cuda.matmul.allow_tf32 = True

    quick = args.quick
    warmup = args.warmup if args.warmup is not None else 2
    min_reps = args.min_reps if args.min_reps is not None else 3
    max_reps = args.max_reps if args.max_reps is not None else (5 if quick else 30)
    budget_s = args.budget_s if args.budget_s is not None else (0.1 if quick else 0.3)

    points, grid = build_grid(quick)
    phases = set(args.phases.split(","))
    points = [p for p in points if ("decode" if p[1] == 1 else "prefill") in phases]

    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = out_path.with_name(out_path.name + ".meta.json")

    self_test = attention_self_test(torch, device) if args.self_test else None
    if self_test is not None:
        print("attention self-test:", json.dumps(self_test), flush=True)

    t0 = time.time()
    model = Model(torch, arch, device, torch.bfloat16, num_layers=args.num_layers)
    max_len = max(c + n for _, n, c in points) if points else 1
    model.ensure_rope(max_len)
    torch.cuda.synchronize()
    weights_bytes = torch.cuda.memory_allocated(device)
    free_b, total_b = torch.cuda.mem_get_info(device)
    margin = int(args.margin_gib * 1024**3)
    budget_bytes = free_b - margin
    print(f"{model_name}: {arch.allocated_params()/1e9:.2f}e9 parameters allocated "
          f"({weights_bytes/2**30:.1f} GiB) in {time.time()-t0:.1f} s; "
          f"free {free_b/2**30:.1f} of {total_b/2**30:.1f} GiB; "
          f"per-point budget {budget_bytes/2**30:.1f} GiB", flush=True)

    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend_names = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
                     "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    backends = [backend_names[x.strip()] for x in args.sdpa_backends.split(",") if x.strip()]

    rows, details, skipped = [], [], []
    n_layers = model.num_layers
    kv_per_token = 2 * n_layers * arch.kv_dim * 2
    stopped_early = False
    fh, wr = _csv_out(out_path, ["gpu", "model", "batch", "new_tokens", "context", "ms"])
    with fh:
        for (b, n, c) in points:
            if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                skipped.append({"batch": b, "new_tokens": n, "context": c, "reason": "time limit"})
                stopped_early = True
                continue
            need = kv_per_token * b * (c + n) + arch.activation_bytes(b, n)
            if need > budget_bytes:
                skipped.append({"batch": b, "new_tokens": n, "context": c,
                                "reason": f"needs ~{need/2**30:.1f} GiB, {budget_bytes/2**30:.1f} GiB available"})
                print(f"skip   b={b:5d} n={n:5d} c={c:5d}: needs ~{need/2**30:.1f} GiB", flush=True)
                continue
            try:
                with sdpa_kernel(backends):
                    med, lo, hi, reps = measure_point(
                        torch, model, b, n, c, warmup, min_reps, max_reps, budget_s,
                        use_graph=not args.eager)
            except torch.cuda.OutOfMemoryError as exc:
                _free_memory(torch)
                skipped.append({"batch": b, "new_tokens": n, "context": c,
                                "reason": "out of memory: " + str(exc).splitlines()[0][:120]})
                print(f"oom    b={b:5d} n={n:5d} c={c:5d}", flush=True)
                continue
            except RuntimeError as exc:
                _free_memory(torch)
                msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                skipped.append({"batch": b, "new_tokens": n, "context": c, "reason": "error: " + msg})
                print(f"error  b={b:5d} n={n:5d} c={c:5d}: {msg}", flush=True)
                continue
            wr.writerow([args.gpu_name, model_name, b, n, c, f"{med:.4f}"])
            fh.flush()
            rows.append((b, n, c, med))
            details.append([b, n, c, round(med, 4), round(lo, 4), round(hi, 4), reps])
            toks = b * n
            print(f"point  b={b:5d} n={n:5d} c={c:5d}: {med:9.3f} ms "
                  f"(min {lo:.3f}, max {hi:.3f}, reps {reps}; {toks/med*1e3:,.0f} new tok/s)", flush=True)

    meta = {
        "gpu": args.gpu_name,
        "model": model_name,
        "model_config": str(model_path),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "numpy": np.__version__,
        },
        "device": {
            "name": props.name,
            "total_memory_bytes": int(props.total_memory),
            "multiprocessors": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}",
            "nvidia_smi": _nvidia_smi(),
        },
        "model_build": {
            "dtype": "bfloat16",
            "layers_built": n_layers,
            "parameters_allocated": arch.allocated_params() if args.num_layers is None else None,
            "weights_bytes_on_gpu": int(weights_bytes),
            "notes": "random weights; fused QKV and gate/up projections; embedding gathers from the "
                     "LM-head matrix; LM head on the last token of each sequence; no sampling; "
                     "KV cache [batch, context+new_tokens, kv_heads, head_dim] per layer, contiguous, "
                     "uniform context per point; attention via scaled_dot_product_attention "
                     "(decode: query heads of a KV group as the query axis, no mask; prefill: "
                     "causal, lower-right aligned when context > 0, enable_gqa)",
            "qk_norm": arch.qk_norm,
        },
        "method": {
            "cuda_graphs": not args.eager,
            "sdpa_backends": args.sdpa_backends,
            "warmup_replays": warmup,
            "reps": {"min": min_reps, "max": max_reps, "timed_seconds_per_point": budget_s},
            "statistic": "median of per-replay CUDA-event times (ms)",
            "memory_free_after_weights_bytes": int(free_b),
            "memory_margin_bytes": margin,
            "quick": quick,
            "stopped_early_by_time_limit": stopped_early,
        },
        "grid": grid,
        "phases": sorted(phases),
        "rows": len(rows),
        "points_columns": ["batch", "new_tokens", "context", "median_ms", "min_ms", "max_ms", "reps"],
        "points": details,
        "skipped": skipped,
        "attention_self_test": self_test,
        "wall_seconds": round(time.time() - t_start, 1),
    }
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {len(rows)} rows to {out_path} ({len(skipped)} skipped) in "
          f"{time.time()-t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
