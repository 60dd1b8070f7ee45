"""The default mode, step latencies of ``--model`` over a grid of batch shapes, and ``--streaming``,
how fast the GPU streams weights through matrix-vector products (and the per-kernel floor), with
no model. Their CSV headers are the ones :mod:`simulator.validation.calibrate` reads."""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from simulator.validation.calibrate import PROFILE_COLUMNS, STREAMING_COLUMNS
from tools.profiler.common import (
    capture,
    csv_out,
    free_memory,
    nvidia_smi,
    replay_ms,
    sdpa_backends,
    time_graph,
    warm_up,
)
from tools.profiler.model import Arch, Model

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


def measure_point(
    torch,
    model: Model,
    batch: int,
    new_tokens: int,
    context: int,
    warmup: int,
    min_reps: int,
    max_reps: int,
    budget_s: float,
    use_graph: bool = True,
):
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

            warm_up(torch, fwd)
            if use_graph:
                torch.cuda.empty_cache()
                graph = capture(torch, fwd)
                step = graph.replay
            else:
                step = fwd

            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            # Warm-up replays; the first one also sizes the repetition count.
            first_ms: float | None = None
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
            assert first_ms is not None  # at least one warm-up replay ran
            reps = int(budget_s * 1000.0 / max(first_ms, 1e-3))
            reps = max(min_reps, min(max_reps, reps))
            times = replay_ms(torch, step, reps)
    finally:
        del step, fwd, graph, cache, tokens  # free the KV cache before the next point
        free_memory(torch)
    return float(np.median(times)), float(times.min()), float(times.max()), reps


def attention_self_test(torch, device) -> dict:
    """Check the attention paths against an explicit float32 reference and
    report which SDPA backend each one can run on."""
    F = torch.nn.functional
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    res: dict[str, Any] = {}
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
        "any": [
            SDPBackend.FLASH_ATTENTION,
            SDPBackend.CUDNN_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION,
            SDPBackend.MATH,
        ],
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
                            q, k, v, attn_mask=causal_lower_right(t, ctx + t), enable_gqa=True
                        )
                err = float((o.float() - r).norm() / r.norm())
                res[cname][bname] = {"ok": err < 2e-2, "rel_err": round(err, 6)}
            except Exception as exc:  # backend refused the inputs
                res[cname][bname] = {"ok": False, "error": str(exc).splitlines()[0][:160]}
    return res


# Weight shapes (out_features, in_features) of the linear layers of the measured presets, plus
# small and very large ones so the bytes axis spans 2 MB to 1 GB.
STREAMING_SHAPES = (
    (1024, 1024),
    (2048, 2048),
    (4096, 4096),
    (6144, 4096),
    (4096, 14336),
    (28672, 4096),
    (5120, 8192),
    (10240, 5120),
    (5120, 25600),
    (51200, 5120),
    (128256, 4096),
)
STREAMING_POOL_BYTES = 3 * 2**30  # copies per shape: at least this much (60x the H100's L2)


def measure_streaming(torch, gpu_name: str, out_path: Path, reps: int = 20) -> list[list]:
    """Weight-streaming GEMV timings and the per-kernel floor (see the module docstring)."""
    import torch.nn.functional as F

    dev = torch.device("cuda", 0)
    rows = []
    with torch.inference_mode():
        for n_out, n_in in STREAMING_SHAPES:
            nbytes = 2 * n_out * n_in
            copies = max(4, -(-STREAMING_POOL_BYTES // nbytes))
            ws = [torch.empty(n_out, n_in, device=dev, dtype=torch.bfloat16).normal_(0, 0.02) for _ in range(copies)]
            for batch in (1, 16):
                x = torch.randn(batch, n_in, device=dev, dtype=torch.bfloat16)

                def chain(x=x, ws=ws):
                    for w in ws:
                        F.linear(x, w)

                ms = time_graph(torch, chain, reps) / copies
                rows.append([gpu_name, "gemv", n_out, n_in, batch, nbytes, copies, f"{ms:.5f}"])
                print(
                    f"gemv   {n_out:6d} x {n_in:6d} batch {batch:3d}: {ms * 1e3:8.2f} us "
                    f"({nbytes / ms / 1e6:7.1f} GB/s over {copies} copies)",
                    flush=True,
                )
            del ws
            free_memory(torch)
        v = torch.zeros(4096, device=dev, dtype=torch.bfloat16)
        n = 2000

        def tiny(v=v):
            for _ in range(n):
                v.add_(1)

        ms = time_graph(torch, tiny, reps) / n
        rows.append([gpu_name, "elementwise", 1, 4096, 1, 2 * 4096, n, f"{ms:.5f}"])
        print(f"kernel floor (tiny elementwise kernel in a graph): {ms * 1e3:.2f} us", flush=True)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fh, wr = csv_out(out_path, STREAMING_COLUMNS)
    with fh:
        wr.writerows(rows)
    return rows


def run_streaming(torch, args) -> int:
    """``--streaming``: :func:`measure_streaming` into ``--out``."""
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    rows = measure_streaming(torch, args.gpu_name, Path(args.out))
    print(f"wrote {len(rows)} rows to {args.out}", flush=True)
    return 0


def run_model(torch, args) -> int:
    """The default mode: every point of the grid that fits in the memory left after the weights, a
    CSV row each as it is measured, then the sidecar."""
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
    print(
        f"{model_name}: {arch.allocated_params() / 1e9:.2f}e9 parameters allocated "
        f"({weights_bytes / 2**30:.1f} GiB) in {time.time() - t0:.1f} s; "
        f"free {free_b / 2**30:.1f} of {total_b / 2**30:.1f} GiB; "
        f"per-point budget {budget_bytes / 2**30:.1f} GiB",
        flush=True,
    )

    backends = sdpa_backends(args.sdpa_backends)
    details, skipped, stopped_early = _measure_grid(
        torch,
        args,
        model,
        model_name,
        points,
        out_path,
        backends,
        budget_bytes,
        t_start,
        warmup,
        min_reps,
        max_reps,
        budget_s,
    )

    meta = _model_meta(
        torch,
        args,
        arch,
        model_path,
        props,
        n_layers=model.num_layers,
        weights_bytes=weights_bytes,
        warmup=warmup,
        min_reps=min_reps,
        max_reps=max_reps,
        budget_s=budget_s,
        free_b=free_b,
        margin=margin,
        stopped_early=stopped_early,
        grid=grid,
        phases=phases,
        details=details,
        skipped=skipped,
        self_test=self_test,
        t_start=t_start,
    )
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    print(
        f"wrote {len(details)} rows to {out_path} ({len(skipped)} skipped) in {time.time() - t_start:.0f} s", flush=True
    )
    return 0


def _measure_grid(
    torch,
    args,
    model: Model,
    model_name: str,
    points,
    out_path: Path,
    backends,
    budget_bytes: int,
    t_start: float,
    warmup: int,
    min_reps: int,
    max_reps: int,
    budget_s: float,
):
    """Each point in turn, a CSV row as soon as it is timed; a point that would not fit, or fails, is
    skipped with the reason. Returns the points' details, the skipped points and whether the time
    limit stopped the grid."""
    from torch.nn.attention import sdpa_kernel

    arch = model.arch
    details, skipped = [], []
    kv_per_token = 2 * model.num_layers * arch.kv_dim * 2
    stopped_early = False
    fh, wr = csv_out(out_path, PROFILE_COLUMNS)
    with fh:
        for b, n, c in points:
            if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                skipped.append({"batch": b, "new_tokens": n, "context": c, "reason": "time limit"})
                stopped_early = True
                continue
            need = kv_per_token * b * (c + n) + arch.activation_bytes(b, n)
            if need > budget_bytes:
                skipped.append(
                    {
                        "batch": b,
                        "new_tokens": n,
                        "context": c,
                        "reason": f"needs ~{need / 2**30:.1f} GiB, {budget_bytes / 2**30:.1f} GiB available",
                    }
                )
                print(f"skip   b={b:5d} n={n:5d} c={c:5d}: needs ~{need / 2**30:.1f} GiB", flush=True)
                continue
            try:
                with sdpa_kernel(backends):
                    med, lo, hi, reps = measure_point(
                        torch, model, b, n, c, warmup, min_reps, max_reps, budget_s, use_graph=not args.eager
                    )
            except torch.cuda.OutOfMemoryError as exc:
                free_memory(torch)
                skipped.append(
                    {
                        "batch": b,
                        "new_tokens": n,
                        "context": c,
                        "reason": "out of memory: " + str(exc).splitlines()[0][:120],
                    }
                )
                print(f"oom    b={b:5d} n={n:5d} c={c:5d}", flush=True)
                continue
            except RuntimeError as exc:
                free_memory(torch)
                msg = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                skipped.append({"batch": b, "new_tokens": n, "context": c, "reason": "error: " + msg})
                print(f"error  b={b:5d} n={n:5d} c={c:5d}: {msg}", flush=True)
                continue
            wr.writerow([args.gpu_name, model_name, b, n, c, f"{med:.4f}"])
            fh.flush()
            details.append([b, n, c, round(med, 4), round(lo, 4), round(hi, 4), reps])
            toks = b * n
            print(
                f"point  b={b:5d} n={n:5d} c={c:5d}: {med:9.3f} ms "
                f"(min {lo:.3f}, max {hi:.3f}, reps {reps}; {toks / med * 1e3:,.0f} new tok/s)",
                flush=True,
            )
    return details, skipped, stopped_early


def _model_meta(
    torch,
    args,
    arch: Arch,
    model_path: Path,
    props,
    *,
    n_layers,
    weights_bytes,
    warmup,
    min_reps,
    max_reps,
    budget_s,
    free_b,
    margin,
    stopped_early,
    grid,
    phases,
    details,
    skipped,
    self_test,
    t_start,
) -> dict:
    """The default mode's sidecar, written once the grid is done (its date is the run's end)."""
    return {
        "gpu": args.gpu_name,
        "model": arch.name,
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
            "nvidia_smi": nvidia_smi(),
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
            "quick": args.quick,
            "stopped_early_by_time_limit": stopped_early,
        },
        "grid": grid,
        "phases": sorted(phases),
        "rows": len(details),
        "points_columns": ["batch", "new_tokens", "context", "median_ms", "min_ms", "max_ms", "reps"],
        "points": details,
        "skipped": skipped,
        "attention_self_test": self_test,
        "wall_seconds": round(time.time() - t_start, 1),
    }
