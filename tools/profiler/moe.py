"""The routed experts of one MoE layer: ``--mode moe`` (``torch._grouped_mm`` against a loop of
per-expert matmuls) and ``--mode vllm_moe`` (vLLM's own Triton fused-MoE kernel, taken from a vLLM
wheel)."""

from __future__ import annotations

import datetime as _dt
import functools
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from tools.profiler.common import (
    csv_out,
    device_meta,
    first_line,
    free_memory,
    measure_device,
    replay_ms,
    run_meta,
    software_versions,
    time_graph,
    time_graph_or_eager,
    write_json,
)
from tools.profiler.model import MOE_KEYS

MOE_TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096]
QUICK_MOE_TOKENS = [1, 16, 256]
MOE_DEFAULT_MODELS = "simulator/data/models/qwen3-30b-a3b.json:1,simulator/data/models/deepseek-v3.json:8"
MOE_POOL_BYTES = 4 * 2**30  # weight copies per model: at least this much (80x the H100's L2)
MOE_COLUMNS = (
    "gpu",
    "model",
    "tp",
    "impl",
    "tokens",
    "experts",
    "top_k",
    "hidden",
    "intermediate",
    "experts_touched",
    "touched_weight_bytes",
    "copies",
    "ms_layer",
    "ms_gemm",
    "gbps_gemm",
    "tflops_gemm",
    "gbps_layer",
    "tflops_layer",
)


def _moe_spec(path: str, tp: int) -> dict:
    cfg = json.loads(Path(path).read_text())
    experts = next(int(cfg[k]) for k in MOE_KEYS if cfg.get(k))
    inter = int(cfg.get("moe_intermediate_size") or cfg["intermediate_size"])
    if inter % tp:
        raise ValueError(f"{path}: moe intermediate {inter} not divisible by tp {tp}")
    return {
        "model": Path(path).stem,
        "config": path,
        "tp": tp,
        "experts": experts,
        "top_k": int(cfg["num_experts_per_tok"]),
        "hidden": int(cfg["hidden_size"]),
        "intermediate": inter // tp,
        "intermediate_full": inter,
    }


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
    return {
        "ids": ids,
        "flat": flat,
        "wts": wts,
        "order": order,
        "offs": offs,
        "xs": xs,
        "counts": [int(v) for v in counts.tolist()],
    }


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
            torch.mm(xs[s : s + cnt], w13[e].t(), out=h[s : s + cnt])
        s += cnt
    act = F.silu(h[:, :inter]) * h[:, inter:]
    s = 0
    for e, cnt in enumerate(counts):
        if cnt:
            torch.mm(act[s : s + cnt], w2[e].t(), out=y[s : s + cnt])
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
    """The routed experts of one MoE layer of each ``--moe-models`` preset, for each token count, as
    ``torch._grouped_mm`` and as a loop of per-expert matmuls, over weight copies read from HBM."""
    t_start = time.time()
    dev = measure_device(torch)
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
    meta = _moe_meta(torch, args, dev, specs, reps, have_grouped)
    write_json(meta_path, meta)
    n_rows = 0
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    fh, wr = csv_out(out_path, MOE_COLUMNS)
    with fh:
        for spec in specs:
            e, k, hid, inter = spec["experts"], spec["top_k"], spec["hidden"], spec["intermediate"]
            expert_bytes = 3 * hid * inter * 2
            layer_bytes = e * expert_bytes
            copies = 2 if args.quick else max(2, -(-MOE_POOL_BYTES // layer_bytes))
            w13 = [
                torch.empty(e, 2 * inter, hid, device=dev, dtype=torch.bfloat16).normal_(
                    0.0, 1.0 / math.sqrt(hid), generator=gen
                )
                for _ in range(copies)
            ]
            w2 = [
                torch.empty(e, hid, inter, device=dev, dtype=torch.bfloat16).normal_(
                    0.0, 1.0 / math.sqrt(inter), generator=gen
                )
                for _ in range(copies)
            ]
            print(
                f"{spec['model']} tp{spec['tp']}: {e} experts top-{k}, hidden {hid}, "
                f"intermediate {inter}; {copies} copies of {layer_bytes / 2**30:.2f} GiB",
                flush=True,
            )
            for tokens in tokens_list:
                if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                    meta.setdefault("skipped", []).append(
                        {"model": spec["model"], "tokens": tokens, "reason": "time limit"}
                    )
                    continue
                n_rows += _moe_point(torch, args, dev, spec, tokens, w13, w2, impls, gen, reps, meta, fh, wr)
                free_memory(torch)
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                write_json(meta_path, meta)
            del w13, w2
            free_memory(torch)
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time() - t_start:.0f} s", flush=True)
    return 0


def _moe_meta(torch, args, dev, specs: list, reps: int, have_grouped: bool) -> dict:
    """The sidecar of ``--mode moe`` before any point: what, when, on which device, how."""
    return {
        "kind": "moe",
        "gpu": args.gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(torch),
        "device": device_meta(torch) if dev.type == "cuda" else {"name": str(dev)},
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
        f"(>= {MOE_POOL_BYTES / 2**30:.0f} GiB together) chained in one CUDA graph, each with "
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


def _moe_point(
    torch, args, dev, spec: dict, tokens: int, w13: list, w2: list, impls: list, gen, reps: int, meta: dict, fh, wr
) -> int:
    """One point of ``--mode moe``: ``tokens`` routed at random over each of the weight copies, checked
    against a float32 reference at 16 tokens, then a row per implementation. A failure skips the
    rest of the point and is recorded in ``meta``. Returns the rows written."""
    e, k, hid, inter = spec["experts"], spec["top_k"], spec["hidden"], spec["intermediate"]
    expert_bytes = 3 * hid * inter * 2
    copies = len(w13)
    n_rows = 0
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
                    ms_g, how_g = time_graph_or_eager(torch, gemm, reps)
                    ms_g /= copies
                except Exception as exc:
                    free_memory(torch)
                    meta["checks"][f"{spec['model']}_T{tokens}_{impl}_error"] = first_line(exc)
                    print(f"  {impl} failed: {first_line(exc)}", flush=True)
                    continue
                try:
                    ms_l, how_l = time_graph_or_eager(torch, layer, reps)
                    ms_l /= copies
                except Exception as exc:
                    free_memory(torch)
                    ms_l, how_l = float("nan"), "error: " + first_line(exc)
            if how_g != "graph" or how_l != "graph":
                meta.setdefault("not_graphed", []).append(
                    {"model": spec["model"], "tokens": tokens, "impl": impl, "gemm": how_g, "layer": how_l}
                )
            wr.writerow(
                [
                    args.gpu_name,
                    spec["model"],
                    spec["tp"],
                    impl,
                    tokens,
                    e,
                    k,
                    hid,
                    inter,
                    f"{touched:.2f}",
                    int(tbytes),
                    copies,
                    f"{ms_l:.5f}",
                    f"{ms_g:.5f}",
                    f"{tbytes / ms_g / 1e6:.1f}",
                    f"{flops / ms_g / 1e9:.2f}",
                    f"{tbytes / ms_l / 1e6:.1f}",
                    f"{flops / ms_l / 1e9:.2f}",
                ]
            )
            fh.flush()
            n_rows += 1
            print(
                f"  {impl:10s} T={tokens:5d}: touched {touched:6.1f} "
                f"({tbytes / 1e6:8.1f} MB)  layer {ms_l * 1e3:8.1f} us  gemm {ms_g * 1e3:8.1f} us "
                f"({tbytes / ms_g / 1e6:6.0f} GB/s, {flops / ms_g / 1e9:6.1f} TFLOP/s)",
                flush=True,
            )
        del x, routes
    except Exception as exc:
        meta.setdefault("skipped", []).append(
            {"model": spec["model"], "tokens": tokens, "reason": "error: " + first_line(exc)}
        )
        print(f"  T={tokens} error: {first_line(exc)}", flush=True)
    return n_rows


VLLM_MOE_COLUMNS = (
    "gpu",
    "case",
    "experts",
    "top_k",
    "hidden",
    "intermediate",
    "tokens",
    "config",
    "ms",
    "ms_gate_up",
    "ms_down",
    "ms_graph",
    "touched_experts",
    "tflops",
    "weight_gbps",
)
# (name, experts, hidden, intermediate per GPU, top-k): the routed experts of one layer on one GPU
VLLM_MOE_CASES = (
    ("qwen3-235b-a22b tp8", 128, 4096, 192, 8),
    ("glm-4.5-air tp4", 128, 4096, 352, 8),
    ("qwen3-30b-a3b tp1", 128, 2048, 768, 8),
    ("deepseek-v3 tp8 (bf16)", 256, 7168, 256, 8),
)
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
    funcs: dict[str, str] = {}
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            segment = ast.get_source_segment(text, n)
            assert segment is not None  # a node parsed from this text has its position
            funcs[n.name] = segment
    decorated = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list}
    kernels = [name for name in ("write_zeros_to_output", "fused_moe_kernel") if name in decorated]
    body = "import triton\nimport triton.language as tl\n\n" + "\n\n".join(
        "@triton.jit\n" + funcs[name] for name in kernels
    )
    path = Path(tempfile.mkdtemp()) / "vllm_moe_kernels.py"
    path.write_text(body)
    spec = importlib.util.spec_from_file_location("vllm_moe_kernels", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ns = {
        "envs": types.SimpleNamespace(VLLM_BATCH_INVARIANT=False),
        "current_platform": types.SimpleNamespace(is_rocm=lambda: False),
        "next_power_of_2": lambda n: 1 << (max(int(n), 1) - 1).bit_length(),
        "should_moe_wna16_use_cuda": lambda *a, **k: False,
    }
    exec("from __future__ import annotations\n" + funcs["get_default_config"], ns)
    return mod.fused_moe_kernel, ns["get_default_config"]


def run_vllm_moe(torch, args) -> int:
    """vLLM's Triton fused-MoE kernel (from a vLLM wheel, ``--moe-src``; its tuned configurations for
    the GPU from ``--moe-configs`` where vLLM ships one, else its default tiles) run as vLLM runs the
    routed experts of a layer: tokens sorted by expert in blocks of BLOCK_SIZE_M, the gate/up GEMM,
    SiLU x up, the down GEMM with the routing weights, the sum over the top-k. bf16, uniform random
    routing (k distinct experts per token)."""
    import triton
    import triton.language as tl

    dev = measure_device(torch)
    torch.cuda.set_device(dev)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    reps = args.max_reps or 20
    kernel, default_config = _load_vllm_moe(Path(args.moe_src))
    cfg_dir = Path(args.moe_configs) if args.moe_configs else None
    device_file = torch.cuda.get_device_name(dev).replace(" ", "_")
    meta = run_meta(
        torch,
        args,
        "vllm_moe",
        method="vLLM's fused_moe_kernel (Triton) from the wheel's fused_moe.py, bf16, tuned config where the wheel "
        "ships one for this GPU, else vLLM's default tiles; gate/up GEMM + SiLU x up + down GEMM (routing "
        f"weights applied) + sum over top-k, median of {reps} calls timed with CUDA events (ms: launched "
        "one by one; ms_graph: the same five kernels replayed from a CUDA graph, as vLLM's decode steps run; "
        "the sort of tokens by expert is outside both)",
        columns=list(VLLM_MOE_COLUMNS),
        errors={},
    )
    meta["moe_src_sha256"] = hashlib.sha256(Path(args.moe_src).read_bytes()).hexdigest()
    write_json(meta_path := out_path.with_name(out_path.name + ".meta.json"), meta)
    fh, wr = csv_out(out_path, VLLM_MOE_COLUMNS)
    g = torch.Generator(device=dev)
    g.manual_seed(0)

    launch = functools.partial(_vllm_moe_launch, triton, tl, kernel)
    point = functools.partial(_vllm_moe_point, torch, launch, g, dev, reps, meta)

    with torch.inference_mode(), fh:
        for name, n_exp, hidden, inter, top_k in VLLM_MOE_CASES:
            w13 = torch.randn(n_exp, 2 * inter, hidden, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            w2 = torch.randn(n_exp, hidden, inter, device=dev, dtype=torch.bfloat16, generator=g) * 0.02
            tuned = {}
            if cfg_dir is not None:
                f = cfg_dir / f"E={n_exp},N={inter},device_name={device_file}.json"
                if f.is_file():
                    tuned = {int(k): v for k, v in json.loads(f.read_text()).items()}
            for m in VLLM_MOE_TOKENS:
                try:
                    cfg = (
                        tuned[min(tuned, key=lambda x: abs(x - m))]
                        if tuned
                        else default_config(m, n_exp, inter, hidden, top_k, None, None)
                    )
                    ms, ms1, ms2, ms_graph, topk_ids = point(name, w13, w2, m, top_k, cfg)
                except Exception as exc:  # record and go on
                    meta["errors"][f"{name} M={m}"] = first_line(exc)
                    continue
                touched = int(torch.unique(topk_ids).numel())
                flops = 2.0 * m * top_k * 3 * inter * hidden
                wbytes = touched * 3 * inter * hidden * 2
                wr.writerow(
                    [
                        args.gpu_name,
                        name,
                        n_exp,
                        top_k,
                        hidden,
                        inter,
                        m,
                        json.dumps(cfg, sort_keys=True),
                        f"{ms:.4f}",
                        f"{ms1:.4f}",
                        f"{ms2:.4f}",
                        f"{ms_graph:.4f}",
                        touched,
                        f"{flops / (ms * 1e-3) / 1e12:.1f}",
                        f"{wbytes / (ms * 1e-3) / 1e9:.1f}",
                    ]
                )
                fh.flush()
                print(
                    f"{name} M={m}: {ms:.3f} ms, in a CUDA graph {ms_graph:.3f} (gate/up {ms1:.3f}, down {ms2:.3f}), "
                    f"{touched} experts, "
                    f"{flops / (ms * 1e-3) / 1e12:.0f} TFLOP/s, {wbytes / (ms * 1e-3) / 1e9:.0f} GB/s "
                    f"[{'tuned' if tuned else 'default'} {cfg}]",
                    flush=True,
                )
            del w13, w2
            free_memory(torch)
    write_json(meta_path, meta)
    return 0


def _vllm_moe_launch(triton, tl, kernel, a, b, c, weights, sorted_ids, expert_ids, ntpp, mul, top_k, cfg):
    """One launch of vLLM's fused-MoE ``kernel`` with the arguments vLLM passes for bf16 (no
    quantisation, no bias): the rows of ``a`` routed through the experts' ``b`` into ``c``, scaled by
    the routing ``weights`` when ``mul``; ``cfg`` is the tile configuration."""
    cfg = dict(cfg)
    bk = cfg.pop("BLOCK_SIZE_K")
    cfg["SPLIT_K"] = 1
    em = sorted_ids.size(0)
    grid = (triton.cdiv(em, cfg["BLOCK_SIZE_M"]) * triton.cdiv(b.size(1), cfg["BLOCK_SIZE_N"]),)
    kernel[grid](
        a,
        b,
        c,
        None,
        None,
        None,
        weights,
        sorted_ids,
        expert_ids,
        ntpp,
        b.size(1),
        b.size(2),
        em,
        a.size(0) * top_k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(2),
        b.stride(1),
        c.stride(1),
        c.stride(2),
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        MUL_ROUTED_WEIGHT=mul,
        top_k=top_k,
        compute_type=tl.bfloat16,
        use_fp8_w8a8=False,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        per_channel_quant=False,
        naive_block_assignment=False,
        HAS_BIAS=False,
        BLOCK_SIZE_K=bk,
        SWAP_AB=False,
        **cfg,
    )


def _align_by_expert(torch, dev, topk_ids, n_experts, block_m):
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
    expert_ids = torch.repeat_interleave(
        torch.arange(n_experts, device=dev, dtype=torch.int32), (padded // block_m).long()
    )
    return sorted_ids, expert_ids, torch.tensor([total], device=dev, dtype=torch.int32)


def _vllm_moe_point(torch, launch, g, dev, reps: int, meta: dict, name: str, w13, w2, m: int, top_k: int, cfg):
    """Milliseconds of the whole routed-expert layer, the gate/up GEMM and the down GEMM at m
    tokens; checks the layer against a float32 reference at m = 16."""
    n_exp, inter2, hidden = w13.shape
    inter = inter2 // 2
    x = torch.randn(m, hidden, device=dev, dtype=torch.bfloat16, generator=g)
    scores = torch.rand(m, n_exp, device=dev, generator=g)
    topk_w, topk_ids = torch.topk(scores, top_k, dim=1)
    topk_w = torch.softmax(topk_w, dim=1).float().contiguous()
    sorted_ids, expert_ids, ntpp = _align_by_expert(torch, dev, topk_ids, n_exp, cfg["BLOCK_SIZE_M"])
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
            ref += topk_w[:, j : j + 1] * torch.einsum("mi,mki->mk", a, w2[e].float())
        err = float((out.float() - ref).norm() / ref.norm())
        meta.setdefault("checks", {})[name] = {"rel_err": round(err, 5), "ok": err < 2e-2}
    return (
        float(np.median(replay_ms(torch, layer, reps))),
        float(np.median(replay_ms(torch, gate_up, reps))),
        float(np.median(replay_ms(torch, down, reps))),
        time_graph(torch, layer, reps),
        topk_ids,
    )
