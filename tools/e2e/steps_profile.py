"""Decode-step timings of ``moe_steps.py`` (async scheduling on) as a step profile CSV for
``servesim calibrate --served``: one row a timed batch (and set of prompts), the step's time in ms at
the mean context of the decode steps it was taken over; several timings of one GPU, their rows in turn.

    python tools/e2e/steps_profile.py data/profiles/served_steps/llama8b_async_on.json \\
        --gpu h200 --upto 256 --out data/profiles/served_steps/h200_llama-3.1-8b.csv

With async scheduling on, an offline engine's decode step takes its GPU's time while the engine's
CPU work stays below it (the profiled batches of ``llama8b_profiled.json`` say so up to 256): the
rows up to ``--upto`` are the GPU's steps as vLLM runs them, compiled and from CUDA graphs.

    python tools/e2e/steps_profile.py --gemm data/profiles/served_steps/llama8b_profiled.json --gpu h200

prints the weight-streaming efficiency of the served GEMMs instead: at one request, the model's
dense weights and LM head (bytes, as servesim counts them) over the summed time of the GEMM kernels
the profiler saw (cuBLAS's ``nvjet`` kernels and their split-K reductions), as a share of the GPU's
HBM bandwidth: what ``servesim calibrate --pin matmul_memory=...`` takes for a GPU whose served
kernels stream weights slower than a bare matrix-vector product does.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from moe_steps import PROMPT

from simulator.validation.calibrate import PROFILE_COLUMNS


def rows(timing: dict, gpu: str, upto: int) -> list[list]:
    """The profile's rows (``PROFILE_COLUMNS``) of each timed batch up to ``upto``: a step taken
    as the difference of a ``long`` and a ``short`` generation averages the decodes between, whose
    contexts run from the prompt + short to the prompt + long - 1 (the prompt: a row's mean prompt
    length where its batch was timed with several, ``moe_steps.py --prompts``; else PROMPT)."""
    decoded = (timing["short"] + timing["long"] - 1) / 2
    return [
        [gpu, timing["model"], r["batch"], 1, round(r.get("mean_prompt", PROMPT) + decoded), round(r["step_ms"], 4)]
        for r in timing["rows"]
        if r["batch"] <= upto
    ]


GEMM_KERNELS = ("nvjet", "splitKreduce")  # cuBLAS's Hopper GEMMs and their split-K reductions


def gemm_efficiency(profiled: dict, gpu_key: str) -> tuple[float, float, float]:
    """(efficiency, bytes, ms): the served GEMMs' weight streaming at batch 1 of a profiled timing,
    from the kernels it lists (``moe_steps.per_step``'s twenty that took the most time: at one
    request the GEMMs lead them)."""
    from simulator.engine.cost import CostModel
    from simulator.engine.params import P
    from simulator.scenario.hardware import load_gpu
    from simulator.scenario.models import load_model

    gpu = load_gpu(gpu_key)
    cp = CostModel(load_model(profiled["model"]), gpu, 1).params
    nbytes = cp[P.LIN_PARAMS] * cp[P.WEIGHT_BYTES] + cp[P.LM_BYTES]
    one = next(p for p in profiled["profiles"] if p["batch"] == 1)
    ms = sum(k["ms"] for k in one["top"] if any(g in k["name"] for g in GEMM_KERNELS))
    return nbytes / (ms / 1e3) / gpu.hbm_bandwidth, nbytes, ms


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "timing", nargs="+", help="moe_steps.py's JSON, taken with --async-scheduling on (--gemm: one, with --profile)"
    )
    ap.add_argument("--gemm", action="store_true", help="print the served GEMMs' weight-streaming efficiency")
    ap.add_argument("--gpu", required=True, help="the GPU's key in the catalogue")
    ap.add_argument("--upto", type=int, default=0, help="the largest batch whose step is the GPU's")
    ap.add_argument("--out")
    a = ap.parse_args()
    timings = [json.loads(Path(t).read_text()) for t in a.timing]
    if a.gemm:
        if len(timings) > 1:
            ap.error("--gemm reads one profiled timing")
        eff, nbytes, ms = gemm_efficiency(timings[0], a.gpu)
        print(f"{nbytes / 1e9:.2f} GB of weights in {ms:.3f} ms of GEMM kernels: {eff:.3f} of the HBM bandwidth")
        return 0
    if not (a.upto and a.out):
        ap.error("--upto and --out are needed to write a profile")
    for path, timing in zip(a.timing, timings):
        if timing.get("async_scheduling") is not True:
            sys.exit(f"{path}: not taken with async scheduling on")
    with open(a.out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(PROFILE_COLUMNS)
        for timing in timings:
            w.writerows(rows(timing, a.gpu, a.upto))
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
