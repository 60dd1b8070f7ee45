"""Attention alone: ``--mode mixed_attention`` (decodes and a prefill chunk in one variable-length
flash-attention call against each part alone) and ``--mode vllm_attention`` (vLLM's own
flash-attention kernels over a paged KV cache, taken from a vLLM wheel)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from tools.profiler.common import csv_out, first_line, free_memory, measure_device, replay_ms, run_meta, write_json

MIXED_ATTN_COLUMNS = (
    "gpu",
    "case",
    "decodes",
    "decode_context",
    "prefill_tokens",
    "heads",
    "kv_heads",
    "head_dim",
    "ms",
    "ms_decodes_alone",
    "ms_prefill_alone",
)
# (query heads, KV heads) of Qwen3-14B / Llama-3.1-8B (40/8, 32/8) and GLM-4.5-Air at TP4 (24/2)
MIXED_ATTN_HEADS = ((40, 8), (32, 8), (24, 2))


def run_mixed_attention(torch, args) -> int:
    """Decode requests and a prefill chunk in one variable-length flash-attention call, as vLLM's
    FlashAttention backend runs a mixed step, against each part alone: what the decodes cost
    when the batch's longest query is a chunk (their one query row computed as a whole tile)."""
    dev = measure_device(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    fa = torch.ops.aten._flash_attention_forward
    meta = run_meta(
        torch,
        args,
        "mixed_attention",
        method="torch.ops.aten._flash_attention_forward (FlashAttention-2, variable length, causal, bf16, "
        "head_dim 128): N decode sequences (1 query, C keys each) and one prefill chunk (P queries over "
        "P keys) in one call, against the N decodes alone and the chunk alone; median of "
        f"{reps} calls timed with CUDA events",
        columns=list(MIXED_ATTN_COLUMNS),
        errors={},
    )
    write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = csv_out(out_path, MIXED_ATTN_COLUMNS)

    def call(q_lens, k_lens, h, hk):
        cq = torch.tensor([0, *np.cumsum(q_lens)], device=dev, dtype=torch.int32)
        ck = torch.tensor([0, *np.cumsum(k_lens)], device=dev, dtype=torch.int32)
        q = torch.randn(int(sum(q_lens)), h, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(int(sum(k_lens)), hk, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)

        def f():
            fa(q, k, v, cq, ck, max(q_lens), max(k_lens), 0.0, True, False, scale=128**-0.5)

        f()
        torch.cuda.synchronize()
        return float(np.median(replay_ms(torch, f, reps)))

    with torch.inference_mode(), fh:
        for h, hk in MIXED_ATTN_HEADS:
            for n, c, p in ((16, 4096, 2048), (64, 4096, 2048), (256, 2048, 2048), (64, 4096, 8192), (256, 512, 2048)):
                try:
                    dec = call([1] * n, [c] * n, h, hk)
                    pre = call([p], [p], h, hk)
                    mix = call([1] * n + [p], [c] * n + [p], h, hk)
                except Exception as exc:  # record and go on
                    meta["errors"][f"{h}/{hk} {n}x{c}+{p}"] = first_line(exc)
                    continue
                wr.writerow([args.gpu_name, "mixed", n, c, p, h, hk, 128, f"{mix:.4f}", f"{dec:.4f}", f"{pre:.4f}"])
                fh.flush()
                print(
                    f"heads {h}/{hk}: {n} decodes x {c} + prefill {p}: mixed {mix:.3f} ms, "
                    f"decodes alone {dec:.3f} + prefill alone {pre:.3f} = {dec + pre:.3f} ms",
                    flush=True,
                )
                free_memory(torch)
    write_json(meta_path, meta)
    return 0


VLLM_ATTN_COLUMNS = (
    "gpu",
    "kernel",
    "case",
    "decodes",
    "decode_context",
    "prefill_tokens",
    "prefill_context",
    "heads",
    "kv_heads",
    "head_dim",
    "ms",
    "ms_decodes_alone",
    "ms_prefill_alone",
    "kv_gbps",
    "tflops",
)
VLLM_ATTN_BLOCK = 16  # vLLM's default KV block size
# decodes alone: (requests, tokens each) from long contexts with few requests to short ones with many
VLLM_ATTN_DECODES = (
    (1, 4096),
    (8, 32768),
    (16, 16384),
    (32, 8192),
    (64, 4096),
    (128, 2048),
    (256, 1024),
    (512, 512),
    (8, 2048),
    (32, 2048),
)
# decodes batched with a prefill chunk: (decodes, their context, chunk tokens, chunk's cached context)
VLLM_ATTN_MIXED = (
    (16, 4096, 2048, 0),
    (64, 4096, 2048, 0),
    (128, 2048, 2048, 0),
    (256, 2048, 2048, 0),
    (64, 4096, 8192, 0),
    (130, 2048, 8192, 0),
    (8, 32768, 8192, 16384),
    (256, 512, 2048, 0),
)
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
    dev = measure_device(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    fa = _load_vllm_fa(args.fa_dir)
    kernels = []
    for ver, ok in ((2, fa.FA2_AVAILABLE), (3, fa.FA3_AVAILABLE)):
        if ok:
            kernels.append(ver)
    meta = run_meta(
        torch,
        args,
        "vllm_attention",
        method="vllm_flash_attn.flash_attn_varlen_func (the wheel's _vllm_fa2_C / _vllm_fa3_C), bf16, head_dim 128, "
        f"causal, paged KV cache of {VLLM_ATTN_BLOCK}-token blocks in a shuffled block table, num_splits 0 "
        f"(the kernel's own choice); median of {reps} calls timed with CUDA events",
        columns=list(VLLM_ATTN_COLUMNS),
        errors={},
    )
    meta["fa_dir"] = str(args.fa_dir)
    meta["fa_files"] = {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(Path(args.fa_dir).iterdir())
        if f.suffix in (".so", ".py")
    }
    meta["fa_available"] = {
        "fa2": bool(fa.FA2_AVAILABLE),
        "fa3": bool(fa.FA3_AVAILABLE),
        "fa2_reason": fa.FA2_UNAVAILABLE_REASON,
        "fa3_reason": fa.FA3_UNAVAILABLE_REASON,
    }
    write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = csv_out(out_path, VLLM_ATTN_COLUMNS)
    g = torch.Generator(device=dev)
    g.manual_seed(0)

    timed = functools.partial(_vllm_fa_ms, torch, fa, g, dev, reps)

    with torch.inference_mode(), fh:
        for ver in kernels:
            kname = f"vllm_fa{ver}"
            for h, hk in MIXED_ATTN_HEADS:
                for n, c in VLLM_ATTN_DECODES:
                    free_memory(torch)
                    try:
                        ms = timed(ver, [1] * n, [c] * n, h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} decode {n}x{c}"] = first_line(exc)
                        continue
                    gbps = n * c * hk * 128 * 2 * 2 / (ms * 1e-3) / 1e9
                    wr.writerow(
                        [args.gpu_name, kname, "decode", n, c, 0, 0, h, hk, 128, f"{ms:.4f}", "", "", f"{gbps:.1f}", ""]
                    )
                    fh.flush()
                    print(f"{kname} {h}/{hk}: {n} decodes x {c}: {ms:.3f} ms, KV {gbps:.0f} GB/s", flush=True)
                for p, pc in VLLM_ATTN_PREFILL:
                    try:
                        ms = timed(ver, [p], [pc + p], h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} prefill {p}+{pc}"] = first_line(exc)
                        continue
                    tf = 4 * 128 * h * _causal_pairs([p], [pc + p]) / (ms * 1e-3) / 1e12
                    wr.writerow(
                        [args.gpu_name, kname, "prefill", 0, 0, p, pc, h, hk, 128, f"{ms:.4f}", "", "", "", f"{tf:.1f}"]
                    )
                    fh.flush()
                    print(f"{kname} {h}/{hk}: prefill {p} over {pc}: {ms:.3f} ms, {tf:.0f} TFLOP/s", flush=True)
                for n, c, p, pc in VLLM_ATTN_MIXED:
                    try:
                        dec = timed(ver, [1] * n, [c] * n, h, hk)
                        pre = timed(ver, [p], [pc + p], h, hk)
                        mix = timed(ver, [1] * n + [p], [c] * n + [pc + p], h, hk)
                    except Exception as exc:
                        meta["errors"][f"{kname} {h}/{hk} mixed {n}x{c}+{p}"] = first_line(exc)
                        continue
                    wr.writerow(
                        [
                            args.gpu_name,
                            kname,
                            "mixed",
                            n,
                            c,
                            p,
                            pc,
                            h,
                            hk,
                            128,
                            f"{mix:.4f}",
                            f"{dec:.4f}",
                            f"{pre:.4f}",
                            "",
                            "",
                        ]
                    )
                    fh.flush()
                    print(
                        f"{kname} {h}/{hk}: {n} decodes x {c} + prefill {p} over {pc}: mixed {mix:.3f} ms, "
                        f"apart {dec:.3f} + {pre:.3f} = {dec + pre:.3f} ms",
                        flush=True,
                    )
    write_json(meta_path, meta)
    return 0


def _vllm_fa_ms(torch, fa, g, dev, reps: int, ver: int, q_lens, k_lens, h: int, hk: int) -> float:
    """Median milliseconds of one call of FlashAttention ``ver`` over requests with ``q_lens`` new and
    ``k_lens`` total tokens, their KV blocks shuffled in the paged cache (random data from ``g``)."""
    bs = VLLM_ATTN_BLOCK
    blocks = [-(-k // bs) for k in k_lens]
    nblk = int(sum(blocks))
    kc = torch.randn(nblk, bs, hk, 128, device=dev, dtype=torch.bfloat16, generator=g)
    vc = torch.randn_like(kc)
    perm = torch.randperm(nblk, device=dev, generator=g).to(torch.int32)
    table = torch.zeros(len(k_lens), max(blocks), device=dev, dtype=torch.int32)
    at = 0
    for i, b in enumerate(blocks):
        table[i, :b] = perm[at : at + b]
        at += b
    cq = torch.tensor([0, *np.cumsum(q_lens)], device=dev, dtype=torch.int32)
    used = torch.tensor(k_lens, device=dev, dtype=torch.int32)
    q = torch.randn(int(sum(q_lens)), h, 128, device=dev, dtype=torch.bfloat16, generator=g)
    out = torch.empty_like(q)

    def f():
        fa.flash_attn_varlen_func(
            q,
            kc,
            vc,
            max(q_lens),
            cq,
            max(k_lens),
            seqused_k=used,
            causal=True,
            block_table=table,
            out=out,
            fa_version=ver,
        )

    f()
    torch.cuda.synchronize()
    return float(np.median(replay_ms(torch, f, reps)))


def _causal_pairs(q_lens, k_lens) -> float:
    """Query-key pairs a causal attention computes over requests with ``q_lens`` new and ``k_lens``
    total tokens (what its FLOPs count)."""
    return float(sum(qn * (k - qn) + qn * (qn + 1) / 2 for qn, k in zip(q_lens, k_lens)))
