"""The command line, ``python -m tools.profiler``: every mode's flags and the dispatch to the module
that runs it (torch is imported only then)."""

from __future__ import annotations

import argparse
import sys

import tools.profiler
from tools.profiler.allreduce import run_allreduce
from tools.profiler.attention import run_mixed_attention, run_vllm_attention
from tools.profiler.common import DEFAULT_MARGIN_BYTES
from tools.profiler.compare import COMPARE_ALL_MODES, COMPARE_MODES, run_compare
from tools.profiler.fp8 import run_fp8
from tools.profiler.moe import MOE_DEFAULT_MODELS, run_moe, run_vllm_moe
from tools.profiler.steps import run_model, run_streaming
from tools.profiler.sustained import run_sustained
from tools.profiler.tp import run_tp


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m tools.profiler", description=tools.profiler.__doc__.split("\n\n")[0])
    p.add_argument("--model", help="config.json-style model preset (required unless --streaming)")
    p.add_argument(
        "--streaming",
        action="store_true",
        help="measure weight-streaming GEMV bandwidth and the kernel floor instead of a model",
    )
    p.add_argument(
        "--mode",
        default="model",
        choices=(
            "model",
            "streaming",
            "compare",
            "moe",
            "fp8",
            "allreduce",
            "tp",
            "sustained",
            "mixed_attention",
            "vllm_attention",
            "vllm_moe",
        ),
        help="model: step latencies of --model (default); streaming: as --streaming; "
        "compare: compiled+CUDA-graph vs graph vs eager steps of --model; moe: routed-"
        "expert FFN of MoE layers; fp8: FP8 vs bf16 GEMM rates; allreduce: NCCL "
        "all-reduce over the GPUs of this host; tp: tensor-parallel steps of --model "
        "over --tp GPUs (one process each, NCCL); sustained: minutes of back-to-back "
        "prefill and decode GEMMs with the clocks, power and temperature; mixed_attention: "
        "decodes and a prefill chunk in one flash-attention call against each alone",
    )
    p.add_argument(
        "--modes", default=",".join(COMPARE_MODES), help="compare: comma list of " + ", ".join(COMPARE_ALL_MODES)
    )
    p.add_argument(
        "--moe-models",
        default=MOE_DEFAULT_MODELS,
        help="moe: comma list of PRESET.json[:TP] (TP slices the expert intermediate size)",
    )
    p.add_argument("--world-size", type=int, default=None, help="allreduce: GPUs (default: all)")
    p.add_argument("--tp", type=int, default=2, help="tp: tensor-parallel degree (GPUs, one process each)")
    p.add_argument(
        "--tp-no-compile", action="store_true", help="tp: capture the uncompiled pieces only (skip torch.compile)"
    )
    p.add_argument(
        "--tp-timeout-s",
        type=int,
        default=180,
        help="tp: NCCL collective timeout (a rank stuck this long aborts the run)",
    )
    p.add_argument(
        "--compile-tokens",
        type=int,
        default=2048,
        help="compare: tokens of the first compiled call (dynamic shapes traced and Triton "
        "configs autotuned at this size, as vLLM's profiling run does)",
    )
    p.add_argument(
        "--moe-src", default=None, help="vllm_moe: a vLLM wheel's model_executor/layers/fused_moe/fused_moe.py"
    )
    p.add_argument("--moe-configs", default=None, help="vllm_moe: that wheel's fused_moe/configs folder")
    p.add_argument(
        "--fa-dir",
        default=None,
        help="vllm_attention: a copy of a vLLM wheel's vllm/vllm_flash_attn folder (with its .so files)",
    )
    p.add_argument(
        "--gpu-name",
        required=True,
        help="catalogue key written to the 'gpu' column, e.g. h100-sxm "
        "(tp: 'auto' derives it from the device name the driver reports)",
    )
    p.add_argument("--out", required=True, help="CSV output path (the sidecar is <out>.meta.json)")
    p.add_argument("--quick", action="store_true", help="small grid and few repetitions (smoke test)")
    p.add_argument("--phases", default="decode,prefill", help="comma list of decode,prefill")
    p.add_argument("--warmup", type=int, default=None, help="warm-up replays per point")
    p.add_argument("--min-reps", type=int, default=None)
    p.add_argument("--max-reps", type=int, default=None)
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="timed seconds aimed at per point (sets the repetitions between min and max)",
    )
    p.add_argument(
        "--margin-gib",
        type=float,
        default=DEFAULT_MARGIN_BYTES / 1024**3,
        help="GPU memory kept free beyond each point's estimate",
    )
    p.add_argument(
        "--num-layers",
        "--layers",
        type=int,
        default=None,
        help="build only this many layers (testing; the timings are then not the model's)",
    )
    p.add_argument("--eager", action="store_true", help="time eager launches instead of CUDA-graph replays")
    p.add_argument(
        "--sdpa-backends", default="flash", help="comma list of SDPA backends allowed (flash, cudnn, efficient, math)"
    )
    p.add_argument("--self-test", action="store_true", help="check attention paths first and record the result")
    p.add_argument(
        "--time-limit-s",
        type=float,
        default=None,
        help="stop starting new points after this many seconds (the CSV stays valid)",
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    if args.mode in (
        "compare",
        "moe",
        "fp8",
        "allreduce",
        "tp",
        "sustained",
        "mixed_attention",
        "vllm_attention",
        "vllm_moe",
    ):
        if not torch.cuda.is_available():
            print("error: no CUDA device", file=sys.stderr)
            return 2
        if args.mode in ("compare", "tp"):
            if not args.model:
                print(f"error: --mode {args.mode} needs --model", file=sys.stderr)
                return 2
            return run_compare(torch, args) if args.mode == "compare" else run_tp(torch, args)
        return {
            "moe": run_moe,
            "fp8": run_fp8,
            "allreduce": run_allreduce,
            "sustained": run_sustained,
            "mixed_attention": run_mixed_attention,
            "vllm_attention": run_vllm_attention,
            "vllm_moe": run_vllm_moe,
        }[args.mode](torch, args)
    if args.streaming or args.mode == "streaming":
        return run_streaming(torch, args)
    if not args.model:
        print("error: --model is required (or pass --streaming)", file=sys.stderr)
        return 2
    return run_model(torch, args)


if __name__ == "__main__":
    sys.exit(main())
