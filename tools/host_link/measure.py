"""Measure KV-block copies between pinned host memory and the GPU (what KV offloading and swap move).

Copies a pool of blocks of one size block by block (one cudaMemcpyAsync each, as vLLM's offloading
worker issues them), host to GPU and GPU to host, and one large copy for reference; times each
direction with CUDA events over several repeats and prints CSV:

    direction,block_bytes,blocks,seconds,gb_per_s

Run on the GPU machine: python tools/host_link/measure.py > data/host_link/<gpu>.csv
"""

from __future__ import annotations

import sys

import torch

TOTAL = 4 << 30  # bytes moved per measurement
SIZES = [128 << 10, 512 << 10, 2 << 20, 8 << 20, 32 << 20]
REPEATS = 5


def main() -> None:
    dev = torch.device("cuda")
    host = torch.empty(TOTAL, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(TOTAL, dtype=torch.uint8, device=dev)
    host.fill_(1)
    gpu.fill_(2)
    stream = torch.cuda.Stream()
    out = sys.stdout
    out.write(f"# {torch.cuda.get_device_name()} torch {torch.__version__}\n")
    out.write("direction,block_bytes,blocks,seconds,gb_per_s\n")
    for size in [*SIZES, TOTAL]:
        n = TOTAL // size
        for direction, (src, dst) in (("h2d", (host, gpu)), ("d2h", (gpu, host))):
            best = float("inf")
            for _ in range(REPEATS):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                with torch.cuda.stream(stream):
                    start.record(stream)
                    for i in range(n):
                        dst[i * size : (i + 1) * size].copy_(src[i * size : (i + 1) * size], non_blocking=True)
                    end.record(stream)
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3)
            out.write(f"{direction},{size},{n},{best:.6f},{n * size / best / 1e9:.2f}\n")
            out.flush()


if __name__ == "__main__":
    main()
