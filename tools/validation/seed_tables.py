"""The seed article's "Real Numbers" tables beside the physical floor and servesim.

    python tools/validation/seed_tables.py

For each single-request (B=1) inter-token latency the article quotes (shared seeds, 001: Llama 3
8B on A100/H100, Llama 3 70B on A100/H100 with tensor parallelism), prints the least time a decode
step can take, streaming each GPU's share of the weights once from HBM at the datasheet bandwidth
(KV reads and everything else ignored, so a true step is slower still), and servesim's decode step
at batch 1 with the article's context. An article entry below the floor cannot have been
measured as stated. Output: a markdown table (docs/validation.md quotes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.engine.cost import decode_work
from simulator.resolve import cost_model, engine_defaults, load_arch
from simulator.scenario.config import blank_scenario
from simulator.scenario.hardware import load_gpu
from simulator.scenario.memory import weight_bytes

# (label, model, gpu, tp, quantization, context at the first decode step, article's ITL at B=1 in ms)
ROWS = [
    ("Llama 3 8B, A100, FP16", "llama-3.1-8b", "a100-80gb", 1, "none", 2048, 7.1),
    ("Llama 3 8B, A100, INT8", "llama-3.1-8b", "a100-80gb", 1, "int8", 2048, 5.8),
    ("Llama 3 8B, H100, FP16", "llama-3.1-8b", "h100-sxm", 1, "none", 2048, 4.2),
    ("Llama 3 8B, H100, FP8", "llama-3.1-8b", "h100-sxm", 1, "fp8", 2048, 3.5),
    ("Llama 3 70B, 2x A100, FP16 (TP2)", "llama-3.1-70b", "a100-80gb", 2, "none", 4096, 15.0),
    ("Llama 3 70B, 4x A100, INT8 (TP4)", "llama-3.1-70b", "a100-80gb", 4, "int8", 4096, 6.5),
    ("Llama 3 70B, 2x H100, FP16 (TP2)", "llama-3.1-70b", "h100-sxm", 2, "none", 4096, 9.0),
    ("Llama 3 70B, 4x H100, FP8 (TP4)", "llama-3.1-70b", "h100-sxm", 4, "fp8", 4096, 3.5),
    ("Llama 3 70B, 8x H100, FP8 (TP8)", "llama-3.1-70b", "h100-sxm", 8, "fp8", 4096, 2.2),
]


def main() -> int:
    print("| configuration | article ITL, B=1 | weight-streaming floor | servesim decode step | article below floor? |")
    print("|---|---:|---:|---:|---|")
    for label, model, gpu, tp, q, ctx, itl in ROWS:
        sc = blank_scenario(
            [
                f"model={model}",
                f"hardware.gpu={gpu}",
                f"hardware.tensor_parallel_size={tp}",
                f"engine.quantization={q}",
                "frontend.enabled=false",
            ]
        )
        m, g = load_arch(sc), load_gpu(gpu)
        floor_ms = weight_bytes(m, q, tp) / g.hbm_bandwidth * 1e3
        step_ms = cost_model(sc, m, g, *engine_defaults(g, sc)).step_time(decode_work(1, ctx)) * 1e3
        flag = f"yes, by {100 * (1 - itl / floor_ms):.0f}%" if itl < floor_ms else "no"
        print(f"| {label} | {itl:.1f} ms | {floor_ms:.1f} ms | {step_ms:.1f} ms | {flag} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
