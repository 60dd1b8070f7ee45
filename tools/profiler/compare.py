"""``--mode compare``: the default mode's step timed as vLLM runs it (compiled pieces, the whole step
in a CUDA graph) against the plain step in a CUDA graph and launched eagerly, with the kernels each
way launches per step and per layer."""

from __future__ import annotations

import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.profiler.common import (
    capture,
    csv_out,
    device_meta,
    dynamo_graphs,
    first_line,
    free_memory,
    measure_device,
    raise_dynamo_limits,
    replay_ms,
    sdpa_backends,
    software_versions,
    warm_up,
    write_json,
)
from tools.profiler.model import Arch, Model
from tools.profiler.pieces import PiecewiseForward

COMPARE_COLUMNS = ("gpu", "model", "mode", "layers", "batch", "new_tokens", "context", "ms", "ms_sync", "host_ms")
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
        db, dcs, pn, hb = (
            COMPARE_DECODE_BATCHES,
            COMPARE_DECODE_CONTEXTS,
            COMPARE_PREFILL_NEW_TOKENS,
            COMPARE_HALF_LAYER_BATCHES,
        )
    pts = [(n_layers, b, 1, dcs[0]) for b in db]
    if n_layers >= 2:
        pts += [(n_layers // 2, b, 1, dcs[0]) for b in hb]
    for c in dcs[1:]:
        pts += [(n_layers, b, 1, c) for b in db]
    pts += [(n_layers, 1, n, 0) for n in pn]
    grid = {
        "decode": {"batch": db, "context": dcs},
        "half_layers": {"batch": hb, "context": dcs[0]},
        "prefill": {"batch": [1], "new_tokens": pn, "context": [0]},
    }
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
    b2b = replay_ms(torch, step, reps)
    return {
        "ms": float(np.median(b2b)),
        "ms_min": float(b2b.min()),
        "ms_max": float(b2b.max()),
        "ms_sync": float(np.median(sync_ms)),
        "host_ms": float(np.median(host_ms)),
        "reps": reps,
    }


def measure_compare_point(torch, model, pieces, mode, b, n, c, budget_s, min_reps, max_reps) -> dict:
    cache, tokens, positions = _compare_inputs(torch, model, b, n, c)
    graph = step = fwd = None
    try:
        with torch.inference_mode():
            fwd = _compare_fn(model, pieces, mode, tokens, cache, c, positions)
            warm_up(torch, fwd)
            if mode in COMPARE_GRAPH_MODES:
                torch.cuda.empty_cache()
                graph = capture(torch, fwd)
                step = graph.replay
            else:
                step = fwd
            step()
            torch.cuda.synchronize()
            return _time_step(torch, step, budget_s, min_reps, max_reps)
    finally:
        del step, fwd, graph, cache, tokens, positions
        free_memory(torch)


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
    res: dict[str, dict[str, object]] = {}
    for label, (b, n, c) in {
        "decode_b4_ctx64": (4, 1, 64),
        "prefill_b1_n48": (1, 48, 0),
        "chunk_b2_n16_ctx32": (2, 16, 32),
    }.items():
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
                    res[label][name] = {"ok": False, "error": first_line(exc)}
        del cache, tokens, positions
        free_memory(torch)
    return res


def run_compare(torch, args) -> int:
    """``--mode compare`` (see the package docstring): the pieces compiled and checked, kernels counted, then
    the grid in every mode of ``--modes``."""
    t_start = time.time()
    model_path = Path(args.model)
    cfg = json.loads(model_path.read_text())
    model_name = model_path.stem
    arch = Arch(cfg, model_name)
    device = measure_device(torch)
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

    raise_dynamo_limits(torch)

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
    print(
        f"{model_name}: {n_layers} layers, weights {weights_bytes / 2**30:.1f} GiB in "
        f"{time.time() - t0:.1f} s; free {free_b / 2**30:.1f} GiB; modes {','.join(modes)}",
        flush=True,
    )

    from torch.nn.attention import sdpa_kernel

    backends = sdpa_backends(args.sdpa_backends)

    meta = _compare_meta(
        torch,
        args,
        arch,
        model_path,
        device,
        n_layers=n_layers,
        weights_bytes=weights_bytes,
        min_reps=min_reps,
        max_reps=max_reps,
        budget_s=budget_s,
        free_b=free_b,
        margin=margin,
        grid=grid,
    )
    write_json(meta_path, meta)

    pieces, compiled_ok = _compile_pieces(torch, args, model, modes, backends, meta)
    try:
        with sdpa_kernel(backends):
            meta["checks"] = compare_checks(torch, model, pieces)
        print("checks:", json.dumps(meta["checks"]), flush=True)
    except Exception as exc:
        meta["checks"] = {"error": first_line(exc, 400)}
    write_json(meta_path, meta)

    kc = _kernel_counts(torch, model, pieces, compiled_ok, backends)
    meta["kernel_counts_b8_ctx512"] = kc
    print("kernel counts:", json.dumps(kc), flush=True)
    write_json(meta_path, meta)

    graphs_before = dynamo_graphs(torch)
    n_rows, stopped = _compare_grid(
        torch,
        args,
        model,
        pieces,
        points,
        modes,
        compiled_ok,
        backends,
        budget_bytes,
        meta,
        meta_path,
        t_start,
        budget_s,
        min_reps,
        max_reps,
    )
    meta["dynamo_graphs_after_grid"] = dynamo_graphs(torch)
    meta["recompiled_during_grid"] = (
        None
        if graphs_before is None or meta["dynamo_graphs_after_grid"] is None
        else meta["dynamo_graphs_after_grid"] - graphs_before
    )
    meta["stopped_early_by_time_limit"] = stopped
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time() - t_start:.0f} s", flush=True)
    return 0


def _compare_meta(
    torch,
    args,
    arch: Arch,
    model_path: Path,
    device,
    *,
    n_layers,
    weights_bytes,
    min_reps,
    max_reps,
    budget_s,
    free_b,
    margin,
    grid,
) -> dict:
    """The sidecar of ``--mode compare`` before any step: what, when, on which device, what each mode
    and column means, how."""
    return {
        "kind": "compare",
        "gpu": args.gpu_name,
        "model": arch.name,
        "model_config": str(model_path),
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(torch),
        "device": device_meta(torch) if device.type == "cuda" else {"name": str(device)},
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
        "model_build": {
            "dtype": "bfloat16",
            "layers_built": n_layers,
            "weights_bytes_on_gpu": int(weights_bytes),
            "qk_norm": arch.qk_norm,
            "notes": "random weights, as the default mode builds them (see its meta)",
        },
        "method": {
            "sdpa_backends": args.sdpa_backends,
            "warmup": "one eager run on a side stream (compiles when needed), capture, one untimed replay",
            "reps": {"min": min_reps, "max": max_reps, "timed_seconds_per_point": budget_s},
            "memory_free_after_weights_bytes": int(free_b),
            "memory_margin_bytes": margin,
            "quick": args.quick,
        },
        "grid": grid,
        "points_columns": [
            "mode",
            "layers",
            "batch",
            "new_tokens",
            "context",
            "ms",
            "ms_min",
            "ms_max",
            "ms_sync",
            "host_ms",
            "reps",
        ],
        "points": [],
        "skipped": [],
    }


def _compile_pieces(torch, args, model: Model, modes: list, backends, meta: dict):
    """The step's pieces, plain and, when a compiled mode is asked for, compiled (by first calls as
    vLLM makes them); a compile failure is recorded in ``meta`` and drops the compiled modes.
    Returns the pieces and whether the compiled ones are there."""
    from torch.nn.attention import sdpa_kernel

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
                for b, n, c in ((1, args.compile_tokens, 0), (1, 1, 16), (3, 1, 16)):
                    cache, tokens, positions = _compare_inputs(torch, model, b, n, c)
                    pieces["compiled"].forward(tokens, cache, c, positions)
                    del cache, tokens, positions
            torch.cuda.synchronize()
            meta["compile"] = {
                "seconds": round(time.time() - t1, 1),
                "dynamo_graphs": dynamo_graphs(torch),
                "first_call_tokens": args.compile_tokens,
                "inductor": "default mode (no Inductor CUDA graphs, no max-autotune); "
                "pieces pre/post/final compiled with fullgraph=True; token "
                "axis marked dynamic (maybe_mark_dynamic) when >= 2",
            }
            print(f"compiled pieces in {time.time() - t1:.1f} s ({dynamo_graphs(torch)} graphs)", flush=True)
        except Exception as exc:
            compiled_ok = False
            meta["compile"] = {"error": first_line(exc, 400)}
            print(f"compile failed: {first_line(exc, 400)}", flush=True)
            pieces.pop("compiled")
        free_memory(torch)
    return pieces, compiled_ok


def _kernel_counts(torch, model: Model, pieces: dict, compiled_ok: bool, backends) -> dict:
    """Kernels per step of each way of running the step, at batch 8, context 512, with the whole
    model and with half its layers; from the two, kernels per layer and outside the layers."""
    from torch.nn.attention import sdpa_kernel

    n_layers = model.num_layers
    kc: dict[str, Any] = {}
    try:
        with sdpa_kernel(backends), torch.inference_mode():
            for layers in sorted({n_layers, max(1, n_layers // 2)}):
                with _FirstLayers(model, layers):
                    cache, tokens, positions = _compare_inputs(torch, model, 8, 1, 512)
                    for name, mode in (
                        ("model_forward", "eager"),
                        ("pieces_plain", "graph_pieces"),
                        ("pieces_compiled", "compiled"),
                    ):
                        if name == "pieces_compiled" and not compiled_ok:
                            continue
                        fn = _compare_fn(model, pieces, mode, tokens, cache, 512, positions)
                        fn()
                        kc.setdefault(name, {})[str(layers)] = _count_kernels(torch, fn)
                    del cache, tokens, positions
                    free_memory(torch)
        if n_layers >= 2:
            for d in kc.values():
                lo, hi = d[str(n_layers // 2)]["kernels"], d[str(n_layers)]["kernels"]
                d["per_layer"] = round((hi - lo) / (n_layers - n_layers // 2), 2)
                d["outside_layers"] = round(hi - d["per_layer"] * n_layers, 2)
    except Exception as exc:
        kc["error"] = first_line(exc, 400)
    return kc


def _compare_grid(
    torch,
    args,
    model: Model,
    pieces: dict,
    points: list,
    modes: list,
    compiled_ok: bool,
    backends,
    budget_bytes: int,
    meta: dict,
    meta_path: Path,
    t_start: float,
    budget_s: float,
    min_reps: int,
    max_reps: int,
) -> tuple[int, bool]:
    """Every point in every mode, a CSV row and a sidecar update as soon as it is timed; a point that
    would not fit, or fails, is skipped with the reason. Returns the rows written and whether the
    time limit stopped the grid."""
    from torch.nn.attention import sdpa_kernel

    arch, model_name = model.arch, model.arch.name
    out_path = Path(args.out)
    stopped = False
    n_rows = 0
    fh, wr = csv_out(out_path, COMPARE_COLUMNS)
    with fh:
        for layers, b, n, c in points:
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
                    meta["skipped"].append(
                        {**pt, "reason": f"needs ~{need / 2**30:.1f} GiB, {budget_bytes / 2**30:.1f} GiB available"}
                    )
                    continue
                try:
                    with sdpa_kernel(backends), _FirstLayers(model, layers):
                        r = measure_compare_point(torch, model, pieces, mode, b, n, c, budget_s, min_reps, max_reps)
                except Exception as exc:  # out of memory or a capture error: keep going
                    free_memory(torch)
                    meta["skipped"].append({**pt, "reason": "error: " + first_line(exc)})
                    print(f"error  {mode:14s} L={layers} b={b} n={n} c={c}: {first_line(exc)}", flush=True)
                    continue
                wr.writerow(
                    [
                        args.gpu_name,
                        model_name,
                        mode,
                        layers,
                        b,
                        n,
                        c,
                        f"{r['ms']:.4f}",
                        f"{r['ms_sync']:.4f}",
                        f"{r['host_ms']:.4f}",
                    ]
                )
                fh.flush()
                n_rows += 1
                meta["points"].append(
                    [
                        mode,
                        layers,
                        b,
                        n,
                        c,
                        round(r["ms"], 4),
                        round(r["ms_min"], 4),
                        round(r["ms_max"], 4),
                        round(r["ms_sync"], 4),
                        round(r["host_ms"], 4),
                        r["reps"],
                    ]
                )
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                write_json(meta_path, meta)
                print(
                    f"{mode:14s} L={layers:2d} b={b:4d} n={n:5d} c={c:5d}: {r['ms']:8.3f} ms "
                    f"(sync {r['ms_sync']:8.3f}, host {r['host_ms']:7.3f}, reps {r['reps']})",
                    flush=True,
                )
    return n_rows, stopped
