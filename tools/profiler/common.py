"""What the modes share: timing on the GPU (a warm-up outside any capture, CUDA-graph capture,
replays timed with CUDA events), the sidecar's header (software, device, command), CSV files that
stay valid when a run stops early, and the settings of the multi-process modes."""

from __future__ import annotations

import csv
import datetime as _dt
import gc
import json
import platform
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

# Memory kept free beyond the per-point estimate (cuBLAS workspaces, graph
# pools, allocator rounding, the CUDA context's own growth).
DEFAULT_MARGIN_BYTES = 2 * 1024**3

# Keep NVLink multicast (NVLS) off: it can take a shared host's GPUs out of service.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def free_memory(torch) -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def warm_up(torch, fn) -> None:
    """One eager run on a side stream: lazy initialisation (cuBLAS handles and workspaces,
    attention kernels) stays out of a later capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()


def capture(torch, fn):
    """``fn`` captured in a CUDA graph (call ``warm_up`` first)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def replay_ms(torch, step, reps: int) -> np.ndarray:
    """CUDA-event milliseconds of ``reps`` back-to-back calls of ``step``."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize()
    return np.array([a.elapsed_time(b) for a, b in zip(starts, ends)], dtype=np.float64)


def time_graph(torch, fn, reps: int) -> float:
    """Median milliseconds of ``reps`` replays of ``fn`` captured in one CUDA graph."""
    warm_up(torch, fn)
    graph = capture(torch, fn)
    graph.replay()  # first replay not timed
    torch.cuda.synchronize()
    ms = float(np.median(replay_ms(torch, graph.replay, reps)))
    del graph
    free_memory(torch)
    return ms


def time_graph_or_eager(torch, fn, reps: int) -> tuple[float, str]:
    """Median ms of ``fn`` replayed from a CUDA graph; if capture fails, of back-to-back eager calls."""
    try:
        return time_graph(torch, fn, reps), "graph"
    except Exception as exc:  # not capturable: time it eagerly instead
        free_memory(torch)
        print(f"  (capture failed: {first_line(exc, 120)}; timing eager launches)", flush=True)
        warm_up(torch, fn)
        ms = float(np.median(replay_ms(torch, fn, reps)))
        free_memory(torch)
        return ms, "eager"


def measure_device(torch):
    """The device the added modes measure on (a seam for CPU dry runs of the code paths)."""
    return torch.device("cuda", 0)


def nvidia_smi() -> dict:
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return {"query": out.stdout.strip()}
    except Exception as exc:  # not fatal: the sidecar just lacks it
        return {"error": str(exc)}


def software_versions(torch) -> dict:
    sw = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
    }
    try:
        sw["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # not fatal
        sw["cudnn"] = None
    try:
        import triton

        sw["triton"] = triton.__version__
    except Exception:
        sw["triton"] = None
    try:
        v = torch.cuda.nccl.version()
        sw["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        sw["nccl"] = None
    return sw


def device_meta(torch, index: int = 0) -> dict:
    props = torch.cuda.get_device_properties(index)
    return {
        "name": props.name,
        "total_memory_bytes": int(props.total_memory),
        "multiprocessors": props.multi_processor_count,
        "capability": f"{props.major}.{props.minor}",
        "nvidia_smi": nvidia_smi(),
    }


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    tmp.replace(path)


def run_meta(torch, args, kind: str, **rest) -> dict:
    """The sidecar's header for a ``--mode`` run: what, when, with which software on which device,
    by which command; then ``rest``."""
    return {
        "kind": kind,
        "gpu": args.gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(torch),
        "device": device_meta(torch),
        "command": " ".join(sys.argv),
        **rest,
    }


def csv_out(path: Path, columns):
    """A CSV file opened for writing with its header row already on disk (a run stopped early
    leaves a valid file): the open file and its writer."""
    fh = path.open("w", newline="")
    wr = csv.writer(fh)
    wr.writerow(columns)
    fh.flush()
    return fh, wr


def first_line(exc: BaseException, n: int = 200) -> str:
    s = str(exc)
    return (s.splitlines()[0] if s else type(exc).__name__)[:n]


def dynamo_graphs(torch) -> int | None:
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def sdpa_backends(names: str) -> list:
    """The SDPA backends of a comma list (``--sdpa-backends``: flash, cudnn, efficient, math)."""
    from torch.nn.attention import SDPBackend

    backend_names = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return [backend_names[x.strip()] for x in names.split(",") if x.strip()]


def raise_dynamo_limits(torch) -> None:
    """Room for every shape of a grid in Dynamo's caches of the compiled pieces: past its recompile
    limit Dynamo would run a piece uncompiled, and the timings would no longer be of compiled code."""
    dyn_cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 64)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(dyn_cfg, name):
            setattr(dyn_cfg, name, 512)


def free_port() -> int:
    """A free TCP port on the loopback interface, where the ranks of a multi-process mode meet."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
