"""The tensor-parallel layout of ``--mode tp``, as Megatron and vLLM split a dense model: the
dimensions and weights one GPU holds, the step of one rank with its collectives
(:class:`TPForward`), and a check of that step against the whole model on one device."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tools.profiler.common import first_line
from tools.profiler.model import Arch, Model
from tools.profiler.pieces import Pieces, step_pieces


def tp_arch(arch: Arch, tp: int) -> Arch:
    """The dimensions one GPU of a ``tp``-way tensor-parallel replica holds, as vLLM splits them:
    query heads, the MLP intermediate size and the vocabulary divided by ``tp``; KV heads divided too,
    ``max(1, kv_heads // tp)``, so each is replicated once ``tp`` exceeds the KV-head count. The hidden
    size is whole on every GPU."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1 (got {tp})")
    for what, n in (
        ("attention heads", arch.heads),
        ("intermediate size", arch.intermediate),
        ("vocabulary", arch.vocab),
    ):
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
            "wgu": torch.cat((w["wgu"][i_rows], w["wgu"][inter + i_rows.start : inter + i_rows.stop]), 0).contiguous(),
            "wd": w["wd"][:, i_rows].contiguous(),
        }
        for k in ("qn", "kn"):
            if k in w:
                s[k] = w[k].clone()
        layers.append(s)
    return layers, full.final_norm.clone(), full.lm_head[rank * vl : (rank + 1) * vl].contiguous()


class TPForward(Pieces):
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

    # the pieces, set by ``_compile``
    pre: Callable[..., Any]
    mlp: Callable[..., Any]
    final: Callable[..., Any]

    def __init__(self, torch, dist, model: Model, rank: int, tp: int, compiled: bool):
        self.torch, self.dist = torch, dist
        self.model, self.rank, self.tp, self.compiled = model, rank, tp, compiled
        self.vocab_start = rank * model.arch.vocab
        _rms, pre, mlp, final = step_pieces(torch, model, compiled)
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
            kc[:, context : context + t] = k.view(b, t, a.kv_heads, a.head_dim)
            vc[:, context : context + t] = v.view(b, t, a.kv_heads, a.head_dim)
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


def tp_inputs(torch, model: Model, vocab: int, b: int, n: int, c: int, seed: int):
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
    cfg = {
        "model_type": arch.model_type,
        "hidden_size": 256,
        "intermediate_size": 128 * tp,
        "num_hidden_layers": 2,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "head_dim": 16,
        "vocab_size": 512 * tp,
        "rms_norm_eps": arch.eps,
        "rope_theta": arch.rope_theta,
    }
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
    res: dict[str, dict[str, object]] = {}
    for label, (b, n, c) in {
        "decode_b4_ctx64": (4, 1, 64),
        "prefill_b1_n48": (1, 48, 0),
        "chunk_b2_n16_ctx32": (2, 16, 32),
    }.items():
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
            cache_loc = cache_full[:, :, :, :, kv0 : kv0 + kvl].contiguous()
            try:
                out = tpf.forward(tokens, cache_loc, c, positions).float()
                err = float((out - ref).norm() / ref.norm())
                res[label] = {"rel_err": round(err, 7), "ok": bool(err < 2e-2)}
            except Exception as exc:
                res[label] = {"ok": False, "error": first_line(exc)}
    return res
