"""A step cut into pieces at attention, the way vLLM compiles and runs it, shared by ``compare``
(:class:`PiecewiseForward`, one GPU) and ``tp`` (``TPForward``, one rank's shard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tools.profiler.model import Model


def step_pieces(torch, model: Model, compiled: bool):
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
        k = qkv[:, qd : qd + kvd].view(n, hkv, hd)
        v = qkv[:, qd + kvd :].view(n, hkv, hd)
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


class Pieces:
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


class PiecewiseForward(Pieces):
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

    # the pieces, set by ``_compile``
    pre: Callable[..., Any]
    post: Callable[..., Any]
    final: Callable[..., Any]

    def __init__(self, torch, model: Model, compiled: bool):
        self.torch = torch
        self.model = model
        self.compiled = compiled
        F = torch.nn.functional
        _rms, pre, mlp, final = step_pieces(torch, model, compiled)

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
            x, q, k, v = self.pre(x, d, w["ln1"], w["wqkv"], w.get("qn"), w.get("kn"), m.cos, m.sin, positions)
            kc = cache[li, 0]
            vc = cache[li, 1]
            kc[:, context : context + t] = k.view(b, t, a.kv_heads, a.head_dim)
            vc[:, context : context + t] = v.view(b, t, a.kv_heads, a.head_dim)
            o = m.attention(q.view(b, t, a.heads, a.head_dim), kc, vc, context, t).reshape(n, a.q_dim)
            self._mark(o, x)
            x, d = self.post(o, x, w["wo"], w["ln2"], w["wgu"], w["wd"])
        if t > 1:  # last token of each sequence, gathered (fresh strides: final()'s decode graphs serve)
            last = self.torch.arange(1, b + 1, device=x.device) * t - 1
            x = x.index_select(0, last)
            d = d.index_select(0, last)
        self._mark(x, d)
        return self.final(x, d, m.final_norm, m.lm_head)
