"""``--mode allreduce``: NCCL all-reduce of bf16 buffers over the host's GPUs, one process per GPU,
launched eagerly and replayed from a CUDA graph."""

from __future__ import annotations

import datetime as _dt
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
    first_line,
    free_port,
    software_versions,
    write_json,
)

ALLREDUCE_SIZES = [2**i for i in range(11, 29)]  # 2 KiB .. 256 MiB
QUICK_ALLREDUCE_SIZES = [2**11, 2**20, 2**24]
ALLREDUCE_COLUMNS = (
    "gpu",
    "world_size",
    "dtype",
    "bytes",
    "mode",
    "iters",
    "ms",
    "ms_min",
    "ms_max",
    "algbw_gbps",
    "busbw_gbps",
)


def _allreduce_iters(nbytes: int) -> int:
    if nbytes <= 2**20:
        return 50
    if nbytes <= 2**25:
        return 20
    return 10


def _allreduce_worker(
    rank: int, world: int, port: int, out: str, gpu_name: str, quick: bool, reps: int, argv: list
) -> None:
    """One rank of ``--mode allreduce`` (a process of its own): every size eagerly, then in a CUDA
    graph; rank 0 writes the rows, each the slowest rank's time."""
    os.environ.update(NO_MULTICAST_ENV)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev, timeout=_dt.timedelta(seconds=120))
    sizes = QUICK_ALLREDUCE_SIZES if quick else ALLREDUCE_SIZES
    out_path = Path(out)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    t_start = time.time()
    big = torch.empty(max(sizes) // 2, device=dev, dtype=torch.bfloat16)
    meta: dict[str, Any] = {}  # the run's metadata, kept and written by rank 0
    if rank == 0:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        meta = _allreduce_meta(torch, gpu_name, reps, argv)
        write_json(meta_path, meta)
        fh, wr = csv_out(out_path, ALLREDUCE_COLUMNS)
    n_rows = 0
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for mode in ("eager", "graph"):
        for nbytes in sizes:
            buf = big[: nbytes // 2]
            iters = _allreduce_iters(nbytes)
            times, err = _allreduce_ms(torch, dist, buf, mode, iters, reps, rank, start, end)
            ok = torch.tensor([0.0 if err else 1.0], device=dev)
            dist.all_reduce(ok, op=dist.ReduceOp.MIN)
            if ok.item() < 1.0:
                if rank == 0:
                    meta["errors"][f"{mode}_{nbytes}"] = err or "failed on another rank"
                    write_json(meta_path, meta)
                if mode == "graph":
                    break  # a broken capture is not retried at larger sizes
                continue
            stats = torch.tensor(
                [float(np.median(times)), float(np.min(times)), float(np.max(times))], device=dev, dtype=torch.float64
            )
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)
            med, lo, hi = stats.tolist()
            if rank == 0:
                algbw = nbytes / med / 1e6
                busbw = algbw * 2 * (world - 1) / world
                wr.writerow(
                    [
                        gpu_name,
                        world,
                        "bfloat16",
                        nbytes,
                        mode,
                        iters,
                        f"{med:.5f}",
                        f"{lo:.5f}",
                        f"{hi:.5f}",
                        f"{algbw:.2f}",
                        f"{busbw:.2f}",
                    ]
                )
                fh.flush()
                n_rows += 1
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                write_json(meta_path, meta)
                print(
                    f"{mode:5s} {nbytes:>10d} B: {med * 1e3:9.2f} us  algbw {algbw:7.1f} GB/s  busbw {busbw:7.1f} GB/s",
                    flush=True,
                )
    if rank == 0:
        fh.close()
    dist.barrier(device_ids=[rank])
    dist.destroy_process_group()


def _allreduce_meta(torch, gpu_name: str, reps: int, argv: list) -> dict:
    """The sidecar of ``--mode allreduce`` (rank 0) before any size: what, when, on which devices
    and links, with which NCCL settings, how."""
    topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    return {
        "kind": "allreduce",
        "gpu": gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(torch),
        "device": device_meta(torch, 0),
        "devices": [torch.cuda.get_device_properties(i).name for i in range(torch.cuda.device_count())],
        "nvidia_smi_topo": topo.stdout.strip(),
        "command": " ".join(argv),
        "env": {
            k: os.environ.get(k)
            for k in sorted(
                set(NO_MULTICAST_ENV)
                | {"NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_DISABLE", "NCCL_DEBUG", "NCCL_CUMEM_ENABLE"}
            )
        },
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


def _allreduce_ms(torch, dist, buf, mode: str, iters: int, reps: int, rank: int, start, end):
    """Per-call milliseconds of ``reps`` batches of ``iters`` back-to-back all-reduces of ``buf``, each
    batch after a barrier (``mode`` graph: the batch captured in one CUDA graph, replayed), and the
    error that stopped them, if one did."""
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
        err = first_line(exc, 300)
    del graph
    return times, err


def run_allreduce(torch, args) -> int:
    import torch.multiprocessing as mp

    os.environ.update(NO_MULTICAST_ENV)
    world = args.world_size or torch.cuda.device_count()
    if world < 2:
        print(f"error: all-reduce needs at least 2 GPUs, found {world}", file=sys.stderr)
        return 2
    port = free_port()
    reps = args.max_reps or (5 if args.quick else 20)
    t0 = time.time()
    mp.spawn(
        _allreduce_worker,
        args=(world, port, args.out, args.gpu_name, args.quick, reps, list(sys.argv)),
        nprocs=world,
        join=True,
    )
    print(f"all-reduce done in {time.time() - t0:.0f} s", flush=True)
    return 0
