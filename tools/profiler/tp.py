"""``--mode tp``: tensor-parallel steps of ``--model`` over ``--tp`` GPUs, one process per GPU,
NCCL, the whole step (collectives included) captured in one CUDA graph per shape."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tools.profiler.common import (
    NO_MULTICAST_ENV,
    csv_out,
    device_meta,
    dynamo_graphs,
    first_line,
    free_memory,
    free_port,
    raise_dynamo_limits,
    replay_ms,
    sdpa_backends,
    software_versions,
    warm_up,
    write_json,
)
from tools.profiler.model import Arch, Model
from tools.profiler.tp_layout import TPForward, tp_arch, tp_inputs, tp_layout_check

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
    times = replay_ms(torch, step, reps)
    return {"ms": float(np.median(times)), "ms_min": float(times.min()), "ms_max": float(times.max()), "reps": reps}


def _tp_point(torch, dist, model, fwd, vocab, mode, b, n, c, budget_s, min_reps, max_reps, rank, dev) -> dict:
    """One step shape on every rank: warm-up (compiles when needed), capture of the whole step,
    collectives included, in one CUDA graph (``mode`` != eager), one untimed replay, timing."""
    cache, tokens, positions = tp_inputs(torch, model, vocab, b, n, c, seed=1 + b + 7 * n + 13 * c)
    graph = step = fn = None
    try:
        with torch.inference_mode():

            def fn(tokens=tokens, cache=cache, positions=positions):
                return fwd.forward(tokens, cache, c, positions)

            warm_up(torch, fn)
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
        free_memory(torch)


def _all_ok(torch, dist, ok: bool, dev) -> bool:
    t = torch.tensor([1.0 if ok else 0.0], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item() >= 1.0)


def _run_text(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as exc:  # not fatal: the sidecar just lacks it
        return "error: " + first_line(exc)


def _tp_worker(rank: int, world: int, port: int, args, argv: list) -> None:
    os.environ.update(NO_MULTICAST_ENV)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group(
        "nccl", rank=rank, world_size=world, device_id=dev, timeout=_dt.timedelta(seconds=args.tp_timeout_s)
    )
    try:
        _TPRun(torch, dist, rank, world, dev, args, argv).run()
    finally:
        dist.destroy_process_group()


class _TPRun:
    """One rank's ``--mode tp`` run: the settings read once from the command line and the model
    config, and the sidecar (held by rank 0 alone), shared by the phases :meth:`run` goes through.
    Every rank takes every decision alike: collectives pair up only if all ranks call them."""

    def __init__(self, torch, dist, rank: int, tp: int, dev, args, argv: list):
        self.t_start = time.time()
        self.torch, self.dist, self.rank, self.tp, self.dev = torch, dist, rank, tp, dev
        self.args, self.argv = args, argv
        self.model_path = Path(args.model)
        cfg = json.loads(self.model_path.read_text())
        self.model_name = self.model_path.stem
        self.arch = Arch(cfg, self.model_name)
        self.loc = tp_arch(self.arch, tp)
        torch.backends.cuda.matmul.allow_tf32 = True
        quick = args.quick
        self.min_reps = args.min_reps if args.min_reps is not None else 3
        self.max_reps = args.max_reps if args.max_reps is not None else (5 if quick else 20)
        self.budget_s = args.budget_s if args.budget_s is not None else (0.05 if quick else 0.15)
        self.dev_name = torch.cuda.get_device_name(dev)
        self.gpu = _gpu_label(self.dev_name) if args.gpu_name == "auto" else args.gpu_name
        raise_dynamo_limits(torch)
        self.backends = sdpa_backends(args.sdpa_backends)
        self.out_path = Path(args.out)
        self.meta_path = self.out_path.with_name(self.out_path.name + ".meta.json")
        self.meta: dict[str, Any] = {}  # the run's metadata, kept and written by rank 0
        self.n_layers = args.num_layers or self.arch.layers
        self.points, self.grid = build_tp_grid(quick)

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(msg, flush=True)

    def save(self) -> None:
        if self.rank == 0:
            self.meta["wall_seconds"] = round(time.time() - self.t_start, 1)
            write_json(self.meta_path, self.meta)

    def run(self) -> None:
        """The layout checked against the whole model, this rank's shard built, the step's pieces
        compiled and checked, then the grid."""
        if self.rank == 0:
            self.out_path.parent.mkdir(parents=True, exist_ok=True)
            self.meta = self._meta()
            self.save()
        loc = self.loc
        self.log(
            f"{self.model_name}: tp {self.tp} on {self.dev_name} ({self.gpu}); {self.n_layers} layers; "
            f"per GPU {loc.heads} q heads, {loc.kv_heads} kv heads, intermediate {loc.intermediate}, "
            f"vocab {loc.vocab}"
        )
        self._check_layout()
        model, budget_bytes = self._build_shard()
        fwds, modes = self._pieces(model)
        self._grid(model, fwds, modes, budget_bytes)

    def _meta(self) -> dict:
        """The sidecar before any phase: what, when, on which devices and links, with which NCCL
        settings, the layout, how."""
        torch, tp, args, arch = self.torch, self.tp, self.args, self.arch
        gpu, model_name, model_path, n_layers = self.gpu, self.model_name, self.model_path, self.n_layers
        rank, grid, argv = self.rank, self.grid, self.argv
        return {
            "kind": "tp",
            "gpu": gpu,
            "gpu_label_from": "nvidia-smi device name (--gpu-name auto)" if args.gpu_name == "auto" else "--gpu-name",
            "model": model_name,
            "model_config": str(model_path),
            "tp": tp,
            "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "software": software_versions(torch),
            "device": device_meta(torch, rank),
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
            "nvidia_smi_L": _run_text(["nvidia-smi", "-L"]),
            "nvidia_smi_topo": _run_text(["nvidia-smi", "topo", "-m"]),
            "command": " ".join(argv),
            "env": {
                k: os.environ.get(k)
                for k in sorted(
                    set(NO_MULTICAST_ENV)
                    | {"NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_DEBUG", "NCCL_CUMEM_ENABLE"}
                )
            },
            "layout": self._layout_meta(),
            "model_build": {
                "dtype": "bfloat16",
                "layers_built": n_layers,
                "layers_in_config": arch.layers,
                "qk_norm": arch.qk_norm,
                "notes": "random weights (per-rank seed), one shard per GPU built directly in the "
                "shapes of the layout above; the per-layer cost is the model's, the "
                "layer count is --layers when given",
            },
            "method": self._method_meta(),
            "grid": grid,
            "columns": list(TP_COLUMNS),
            "points_columns": [
                "step_mode",
                "batch",
                "new_tokens",
                "context",
                "ms_rank0",
                "ms_min_rank0",
                "ms_max_rank0",
                "ms_median_per_rank",
                "reps",
            ],
            "points": [],
            "skipped": [],
            "rows": 0,
        }

    def _layout_meta(self) -> dict:
        """How the layers are split over the GPUs, and the collectives of a step."""
        arch, loc, n_layers, tp = self.arch, self.loc, self.n_layers, self.tp
        return {
            "attention": f"column-parallel fused QKV: {loc.heads} of {arch.heads} query heads and "
            f"{loc.kv_heads} of {arch.kv_heads} KV heads per GPU (vLLM: max(1, kv_heads // tp)); "
            "row-parallel output projection, then an all-reduce of the hidden states",
            "mlp": f"column-parallel fused gate/up ({loc.intermediate} of {arch.intermediate} per GPU), "
            "row-parallel down projection, then an all-reduce of the hidden states",
            "embedding_lm_head": f"vocabulary-parallel ({loc.vocab} of {arch.vocab} rows per GPU): "
            "embedding by masked gather + all-reduce; LM head on the last token "
            "of each sequence, logits all-gathered",
            "collectives_per_step": {"all_reduce": 2 * n_layers + 1, "all_gather": 1} if tp > 1 else {},
        }

    def _method_meta(self) -> dict:
        """How the step is run and timed."""
        args, min_reps, max_reps, budget_s = self.args, self.min_reps, self.max_reps, self.budget_s
        quick = args.quick
        return {
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
        }

    def _check_layout(self) -> None:
        """The layout against the whole model (small, float32)."""
        torch, dist, rank, tp, dev = self.torch, self.dist, self.rank, self.tp, self.dev
        arch, meta, save, log = self.arch, self.meta, self.save, self.log
        try:
            chk = tp_layout_check(torch, dist, arch, rank, tp, dev, torch.float32)
        except Exception as exc:
            chk = {"error": first_line(exc, 300)}
        if rank == 0:
            meta["layout_check_fp32"] = chk
            save()
        log(f"layout check (fp32, small model, TP logits vs whole model): {json.dumps(chk)}")
        free_memory(torch)

    def _build_shard(self):
        """This rank's shard of the model, and the memory a point may take beyond it (the least
        free over the ranks, less the margin)."""
        torch, dist, rank, dev, args = self.torch, self.dist, self.rank, self.dev, self.args
        loc, n_layers, points, meta, save, log = self.loc, self.n_layers, self.points, self.meta, self.save, self.log
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
        log(
            f"weights {weights_bytes / 2**30:.1f} GiB per GPU in {time.time() - t0:.1f} s; "
            f"free {free_b / 2**30:.1f} GiB (least over ranks)"
        )
        if rank == 0:
            meta["model_build"]["weights_bytes_per_gpu"] = int(weights_bytes)
            meta["method"]["memory_free_after_weights_bytes"] = free_b
            meta["method"]["memory_margin_bytes"] = margin
            save()
        return model, budget_bytes

    def _pieces(self, model):
        """The step's forms on this rank: plain pieces (modes ``graph`` and ``eager``) and, unless
        ``--tp-no-compile``, compiled ones, compiled by a first call and checked against the plain
        ones; compiled pieces that fail on any rank are dropped on all. Returns the forms and the
        step modes to try, in order."""
        from torch.nn.attention import sdpa_kernel

        torch, dist, rank, tp, dev, args = self.torch, self.dist, self.rank, self.tp, self.dev, self.args
        arch, backends, meta, save, log = self.arch, self.backends, self.meta, self.save, self.log
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
                    for b, n, c in ((1, args.compile_tokens, 0), (1, 1, 16), (3, 1, 16)):
                        cache, tokens, positions = tp_inputs(torch, model, arch.vocab, b, n, c, seed=3)
                        fwds["compiled_graph"].forward(tokens, cache, c, positions)
                        del cache, tokens, positions
                torch.cuda.synchronize()
            except Exception as exc:
                err = first_line(exc, 400)
            ok = _all_ok(torch, dist, err is None, dev)
            if rank == 0:
                meta["compile"] = (
                    {
                        "seconds": round(time.time() - t1, 1),
                        "dynamo_graphs": dynamo_graphs(torch),
                        "first_call_tokens": args.compile_tokens,
                    }
                    if ok
                    else {"error": err or "failed on another rank"}
                )
                save()
            log(f"compiled pieces in {time.time() - t1:.1f} s" if ok else f"compile failed: {err}")
            if not ok:
                modes.remove("compiled_graph")
                fwds.pop("compiled_graph")
            free_memory(torch)
            if ok:  # compiled against plain pieces on the real shard (bf16)
                res: dict[str, float | str] = {}
                with sdpa_kernel(backends), torch.inference_mode():
                    cache, tokens, positions = tp_inputs(torch, model, arch.vocab, 4, 1, 64, seed=5)
                    try:
                        ref = fwds["graph"].forward(tokens, cache.clone(), 64, positions).float()
                        got = fwds["compiled_graph"].forward(tokens, cache.clone(), 64, positions).float()
                        res = {"decode_b4_ctx64_rel_err": round(float((got - ref).norm() / ref.norm()), 6)}
                    except Exception as exc:
                        res = {"error": first_line(exc)}
                    del cache, tokens, positions
                free_memory(torch)
                if rank == 0:
                    meta["compiled_vs_plain_bf16"] = res
                    save()
                log(f"compiled vs plain pieces (bf16 logits): {json.dumps(res)}")
        return fwds, modes

    def _grid(self, model, fwds: dict, modes: list, budget_bytes: int) -> None:
        """Every point of the grid, a row each (rank 0) in the step mode of the first point that ran;
        a point that would not fit, or fails on any rank, is skipped on all."""
        torch, dist, rank, tp, dev, args = self.torch, self.dist, self.rank, self.tp, self.dev, self.args
        arch, loc, n_layers, points = self.arch, self.loc, self.n_layers, self.points
        gpu, model_name, out_path, t_start = self.gpu, self.model_name, self.out_path, self.t_start
        meta, save, log = self.meta, self.save, self.log
        kv_per_token = 2 * n_layers * loc.kv_dim * 2
        step_mode = None
        stopped = False
        n_rows = 0
        fh: Any = None  # rank 0's CSV file and its writer
        wr: Any = None
        if rank == 0:
            fh, wr = csv_out(out_path, TP_COLUMNS)
        for b, n, c in points:
            pt = {"batch": b, "new_tokens": n, "context": c}
            # every rank decides alike: the time limit from rank 0's clock
            go = torch.tensor(
                [0.0 if (args.time_limit_s and time.time() - t_start > args.time_limit_s) else 1.0], device=dev
            )
            dist.broadcast(go, 0)
            if go.item() < 1.0:
                stopped = True
                if rank == 0:
                    meta["skipped"].append({**pt, "reason": "time limit"})
                continue
            need = kv_per_token * b * (c + n) + loc.activation_bytes(b, n) + 2 * b * arch.vocab * 4
            if need > budget_bytes:
                if rank == 0:
                    meta["skipped"].append(
                        {
                            **pt,
                            "reason": f"needs ~{need / 2**30:.1f} GiB per GPU, "
                            f"{budget_bytes / 2**30:.1f} GiB available",
                        }
                    )
                log(f"skip   b={b:4d} n={n:5d} c={c:5d}: needs ~{need / 2**30:.1f} GiB per GPU")
                continue
            r, mode = self._point(model, fwds, [step_mode] if step_mode else modes, b, n, c, pt)
            if r is not None and step_mode is None:
                step_mode = mode
                if rank == 0:
                    meta["step_mode"] = mode
                    if mode != TP_STEP_MODES[0]:
                        meta["step_mode_note"] = f"fell back to {mode}: " + "; ".join(
                            e["error"] for e in meta.get("errors", [])
                        )
                log(f"step mode: {mode}")
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
                meta["points"].append(
                    [
                        step_mode,
                        b,
                        n,
                        c,
                        round(r["ms"], 4),
                        round(r["ms_min"], 4),
                        round(r["ms_max"], 4),
                        [round(v, 4) for v in meds.tolist()],
                        r["reps"],
                    ]
                )
                meta["rows"] = n_rows
                save()
            log(
                f"point  b={b:4d} n={n:5d} c={c:5d}: {r['ms']:9.3f} ms "
                f"(ranks {', '.join(f'{v:.3f}' for v in meds.tolist())}; "
                f"min {r['ms_min']:.3f}, max {r['ms_max']:.3f}, reps {r['reps']})"
            )
        if rank == 0:
            fh.close()
            meta["stopped_early_by_time_limit"] = stopped
            meta["dynamo_graphs_after_grid"] = dynamo_graphs(torch)
            meta["rows"] = n_rows
            save()
        log(f"wrote {n_rows} rows to {out_path} in {time.time() - t_start:.0f} s")
        dist.barrier(device_ids=[rank])

    def _point(self, model, fwds: dict, tries: list, b: int, n: int, c: int, pt: dict):
        """The timings of point (b, n, c) in the first step mode of ``tries`` that runs on every rank,
        and that mode; (None, None) if none does. Each failure is recorded."""
        from torch.nn.attention import sdpa_kernel

        torch, dist, rank, dev = self.torch, self.dist, self.rank, self.dev
        arch, backends = self.arch, self.backends
        budget_s, min_reps, max_reps = self.budget_s, self.min_reps, self.max_reps
        meta, save, log = self.meta, self.save, self.log
        for mode in tries:
            err = None
            try:
                with sdpa_kernel(backends):
                    r = _tp_point(
                        torch,
                        dist,
                        model,
                        fwds[mode],
                        arch.vocab,
                        mode,
                        b,
                        n,
                        c,
                        budget_s,
                        min_reps,
                        max_reps,
                        rank,
                        dev,
                    )
            except Exception as exc:  # out of memory or a capture error
                free_memory(torch)
                err = first_line(exc)
            if not _all_ok(torch, dist, err is None, dev):
                if rank == 0:
                    meta.setdefault("errors", []).append(
                        {**pt, "step_mode": mode, "error": err or "failed on another rank"}
                    )
                    save()
                log(f"error  {mode} b={b} n={n} c={c}: {err or 'failed on another rank'}")
                continue
            return r, mode
        return None, None


def run_tp(torch, args) -> int:
    import torch.multiprocessing as mp

    os.environ.update(NO_MULTICAST_ENV)
    tp = args.tp
    have = torch.cuda.device_count()
    if tp > have:
        print(f"error: --tp {tp} needs {tp} GPUs, found {have}", file=sys.stderr)
        return 2
    port = free_port()
    t0 = time.time()
    mp.spawn(_tp_worker, args=(tp, port, args, list(sys.argv)), nprocs=tp, join=True)
    print(f"tp {tp} done in {time.time() - t0:.0f} s", flush=True)
    return 0
