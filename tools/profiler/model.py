"""The model the profiler times: the dimensions of a dense Llama/Qwen3-style decoder read from a
Hugging Face style ``config.json`` (:class:`Arch`), and a random-weight model of them on the GPU held
as plain tensors (:class:`Model`), whose :meth:`Model.forward` is the step the default mode times.
torch is passed in, never imported here, so that the command line works without it."""

from __future__ import annotations

import math
from typing import Any

MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank")


class Arch:
    """The dense-decoder dimensions the profiler needs, read from a config."""

    def __init__(self, cfg: dict, name: str):
        for key in MOE_KEYS + MLA_KEYS:
            if cfg.get(key):
                raise ValueError(
                    f"{name}: '{key}' is set; the profiler builds dense Llama/Qwen3-style models only (no MoE, no MLA)"
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
        self.cos: Any = None  # torch tensors once ensure_rope has built them (torch is imported lazily)
        self.sin: Any = None
        self.has_fused_rms = hasattr(self.F, "rms_norm")

    # -- pieces ------------------------------------------------------------

    def ensure_rope(self, length: int):
        torch = self.torch
        if length <= self._rope_len:
            return
        hd = self.arch.head_dim
        inv = 1.0 / (self.arch.rope_theta ** (torch.arange(0, hd, 2, device=self.device, dtype=torch.float32) / hd))
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
