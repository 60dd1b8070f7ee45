"""``--mode fp8``: FP8 GEMMs (tensor-wise, row-wise and 128-block scaling) against bf16 ``F.linear``
over the same shapes, weights read from HBM."""

from __future__ import annotations

import datetime as _dt
import sys
import time
from pathlib import Path

from tools.profiler.common import (
    csv_out,
    device_meta,
    first_line,
    free_memory,
    measure_device,
    software_versions,
    time_graph,
    write_json,
)

FP8_SHAPES = ((4096, 4096), (14336, 4096), (4096, 14336), (7168, 2048))  # (N, K): y[M,N] = x[M,K] W[N,K]^T
FP8_M = [2**i for i in range(14)]  # 1 .. 8192
QUICK_FP8_M = [1, 64, 1024]
FP8_POOL_BYTES = 2**29  # bf16 weight copies per shape: at least this much (10x the H100's L2)
FP8_VARIANTS = (("bf16", "none"), ("fp8_e4m3", "tensor"), ("fp8_e4m3", "row"), ("fp8_e4m3", "block128"))
FP8_COLUMNS = ("gpu", "dtype", "scaling", "m", "n", "k", "copies", "ms", "tflops", "gbps", "bytes")


def _fp8_ops(torch, m, n, k, a, w, a8, w8):
    """Callables and dequantised float32 references for each variant of y = a @ w^T."""
    F = torch.nn.functional
    dev = a.device
    f32 = torch.float32
    sa_row = torch.rand(m, 1, device=dev, dtype=f32).add_(0.5)
    sb_row = torch.rand(1, n, device=dev, dtype=f32).add_(0.5)
    one = torch.tensor(1.0, device=dev, dtype=f32)
    # DeepSeek-V3 style: activations 1x128 blocks, weights 128x128 blocks; cuBLAS layouts
    # (scale_a [M, K/128] M-major; scale_b [K/128, N/128] K-major).
    sa_blk = torch.rand(k // 128, m, device=dev, dtype=f32).add_(0.5).t()
    sb_blk = torch.rand(n // 128, k // 128, device=dev, dtype=f32).add_(0.5).t()

    def call(variant, wmat, wmat8):
        dt, sc = variant
        if dt == "bf16":
            return F.linear(a, wmat)
        if sc == "tensor":
            return torch._scaled_mm(
                a8, wmat8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )
        if sc == "row":
            return torch._scaled_mm(
                a8, wmat8.t(), scale_a=sa_row, scale_b=sb_row, out_dtype=torch.bfloat16, use_fast_accum=True
            )
        from torch.nn.functional import ScalingType

        return F.scaled_mm(
            a8,
            wmat8.t(),
            sa_blk,
            ScalingType.BlockWise1x128,
            sb_blk,
            ScalingType.BlockWise128x128,
            output_dtype=torch.bfloat16,
        )

    def reference(variant):
        dt, sc = variant
        if dt == "bf16":
            return a.float() @ w.float().t()
        af, wf = a8.float(), w8.float()
        if sc == "row":
            af, wf = af * sa_row, wf * sb_row.t()
        elif sc == "block128":
            af = af * sa_blk.repeat_interleave(128, dim=1)
            wf = wf * sb_blk.t().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
        return af @ wf.t()

    return call, reference


def run_fp8(torch, args) -> int:
    """y = x W^T for each shape, variant and M, a row each; every variant checked against a dequantised
    float32 reference at M = 64."""
    t_start = time.time()
    dev = measure_device(torch)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    ms_list = QUICK_FP8_M if args.quick else FP8_M
    reps = args.max_reps or (5 if args.quick else 10)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = _fp8_meta(torch, args, dev, reps)
    write_json(meta_path, meta)
    n_rows = 0
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    fh, wr = csv_out(out_path, FP8_COLUMNS)
    with fh:
        for n, k in FP8_SHAPES:
            copies = 2 if args.quick else max(2, -(-FP8_POOL_BYTES // (2 * n * k)))
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
            w8s = [w.to(torch.float8_e4m3fn) for w in ws]
            print(f"N={n} K={k}: {copies} copies", flush=True)
            for m in ms_list:
                if args.time_limit_s and time.time() - t_start > args.time_limit_s:
                    meta.setdefault("skipped", []).append({"m": m, "n": n, "k": k, "reason": "time limit"})
                    continue
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
                a8 = a.to(torch.float8_e4m3fn)
                call, reference = _fp8_ops(torch, m, n, k, a, ws[0], a8, w8s[0])
                line = []
                for variant in FP8_VARIANTS:
                    key = f"{variant[0]}/{variant[1]}"
                    try:
                        with torch.inference_mode():
                            if m == 64:
                                ref = reference(variant)
                                got = call(variant, ws[0], w8s[0]).float()
                                err = float((got - ref).norm() / ref.norm())
                                meta["checks"][f"{key}_M{m}_N{n}_K{k}"] = {
                                    "rel_err": round(err, 6),
                                    "ok": bool(err < 2e-2),
                                }

                            def chain(variant=variant, call=call, ws=ws, w8s=w8s):
                                for w, w8 in zip(ws, w8s):
                                    call(variant, w, w8)

                            ms = time_graph(torch, chain, reps) / copies
                    except Exception as exc:
                        free_memory(torch)
                        meta["errors"].setdefault(key, first_line(exc, 300))
                        line.append(f"{key}: error")
                        continue
                    eb = 2 if variant[0] == "bf16" else 1
                    nbytes = eb * (m * k + n * k) + 2 * m * n
                    flops = 2.0 * m * n * k
                    wr.writerow(
                        [
                            args.gpu_name,
                            variant[0],
                            variant[1],
                            m,
                            n,
                            k,
                            copies,
                            f"{ms:.5f}",
                            f"{flops / ms / 1e9:.2f}",
                            f"{nbytes / ms / 1e6:.1f}",
                            nbytes,
                        ]
                    )
                    fh.flush()
                    n_rows += 1
                    line.append(f"{key} {ms * 1e3:8.1f} us {flops / ms / 1e9:6.1f} TF {nbytes / ms / 1e6:6.0f} GB/s")
                print(f"  M={m:5d}: " + " | ".join(line), flush=True)
                del a, a8, call, reference
                meta["rows"] = n_rows
                meta["wall_seconds"] = round(time.time() - t_start, 1)
                write_json(meta_path, meta)
            del ws, w8s
            free_memory(torch)
    meta["rows"] = n_rows
    meta["wall_seconds"] = round(time.time() - t_start, 1)
    write_json(meta_path, meta)
    print(f"wrote {n_rows} rows to {out_path} in {time.time() - t_start:.0f} s", flush=True)
    return 0


def _fp8_meta(torch, args, dev, reps: int) -> dict:
    """The sidecar of ``--mode fp8`` before any point: what, when, on which device, how."""
    return {
        "kind": "fp8",
        "gpu": args.gpu_name,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "software": software_versions(torch),
        "device": device_meta(torch) if dev.type == "cuda" else {"name": str(dev)},
        "command": " ".join(sys.argv),
        "variants": {
            "bf16/none": "F.linear(x, W) in bf16 (cuBLAS)",
            "fp8_e4m3/tensor": "torch._scaled_mm, one fp32 scale per tensor, use_fast_accum=True",
            "fp8_e4m3/row": "torch._scaled_mm, fp32 scale per row of x and per output channel of W, "
            "use_fast_accum=True",
            "fp8_e4m3/block128": "F.scaled_mm, BlockWise1x128 (x) x BlockWise128x128 (W) fp32 scales "
            "(DeepSeek-V3's weight_block_size)",
        },
        "method": "y[M,N] = x[M,K] W[N,K]^T, bf16 output; inputs random (fp8 = bf16 N(0,1) cast), "
        "quantisation of x NOT timed (operands pre-quantised); `copies` distinct weight "
        f"matrices (>= {FP8_POOL_BYTES / 2**20:.0f} MiB of bf16 per shape, same count in fp8) "
        f"chained in one CUDA graph; ms = median of {reps} replays / copies; "
        "bytes = x + W + y once each (fp8: 1 byte/element for x and W); tflops = 2MNK / time",
        "columns": list(FP8_COLUMNS),
        "checks": {},
        "errors": {},
        "rows": 0,
    }
