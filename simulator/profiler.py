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

    python -m simulator.profiler --model simulator/data/models/llama-3.1-8b.json \\
        --gpu-name h100-sxm --out data/profiles/h100-sxm_llama-3.1-8b.csv [--quick]

Output: a CSV with columns ``gpu,model,batch,new_tokens,context,ms`` and a
sidecar ``<out>.meta.json`` (software versions, device, grid, skipped points,
per-point spread).

``--streaming`` measures instead how fast the GPU streams weights through a
matrix-vector product (the work of a decode step's linear layers), with no model:

    python -m simulator.profiler --streaming --gpu-name h100-sxm \
        --out data/profiles/streaming/h100-sxm.csv

For each weight shape it captures, in one CUDA graph, a chain of ``F.linear``
calls on distinct copies of the matrix (together larger than any cache, so every
call reads its weights from HBM) and reports the time per call; a chain of tiny
elementwise kernels gives the per-kernel floor. Columns:
``gpu,op,out_features,in_features,batch,bytes,copies,ms``. The slope of time
over bytes is the achievable weight-streaming bandwidth, which pins the cost
model's ``matmul_memory`` efficiency during calibration (``calibrate.py``).

This module deliberately depends on nothing but torch, numpy and the standard
library (torch is imported inside :func:`main`), so it can be copied to a GPU
machine and run on its own.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import gc
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

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
STREAMING_COLUMNS = ("gpu", "op", "out_features", "in_features", "batch", "bytes", "copies", "ms")
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
    with out_path.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(STREAMING_COLUMNS)
        wr.writerows(rows)
    return rows


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m simulator.profiler", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="config.json-style model preset (required unless --streaming)")
    p.add_argument("--streaming", action="store_true",
                   help="measure weight-streaming GEMV bandwidth and the kernel floor instead of a model")
    p.add_argument("--gpu-name", required=True, help="catalogue key written to the 'gpu' column, e.g. h100-sxm")
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
    p.add_argument("--num-layers", type=int, default=None,
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

    if args.streaming:
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
    with out_path.open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["gpu", "model", "batch", "new_tokens", "context", "ms"])
        fh.flush()
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
