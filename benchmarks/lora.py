"""Multi-LoRA against public measurements (data/lora/public.yaml), none used to fit anything.

1. The V1 scheduler's adapter limit (agullo-v1-max-loras-sweep-llama31-8b-low-rate: vLLM main of
   2025-04 with the V1 scheduler, Llama-3.1-8B-Instruct, rank 16, ShareGPT, 128 adapters sent
   Poisson traffic for an hour, ~7.5 requests/s in all; an H100, its memory read as 64 GB): mean
   TTFT, mean TPOT and output throughput at max_loras 8 to 128. Here every adapter gets the same
   share of the traffic (there a third at 0.1, 0.05 and 0.025 requests/s each) and lengths are
   lognormal around ShareGPT's means (223 prompt, 196 output tokens).
2. The cost of the LoRA kernels (vllm-pr48887-qwen25-7b-oproj-lora-vs-base: vLLM 0.25.1,
   Qwen2.5-7B-Instruct, one adapter of rank 8, random 2,048-token prompts and 256-token outputs at
   10 requests/s, 100 requests): output throughput and mean TPOT of the adapter's requests against
   the base model's on the same LoRA-enabled server (GPU not stated: an H100 here).

The sets are simulator/validation/features.py's (``servesim validate --features`` runs them too).

Run: python benchmarks/lora.py [--plot docs/img/lora_max_loras.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.validation.features import SWEEP, error_lines, kernel_set, sweep_set  # noqa: E402


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 3.6))
    FigureCanvasAgg(fig)
    ms = list(SWEEP)
    for i, metric in enumerate(("mean TTFT ms", "mean TPOT ms", "output tok/s")):
        ax = fig.add_subplot(1, 3, i + 1)
        sel = [r for r in rows if r["metric"] == metric and r["set"] == "V1 max_loras sweep"]
        ax.plot(ms, [r["servesim"] for r in sel], "-o", label="servesim")
        ax.plot(ms, [r["published"] for r in sel], "--s", alpha=0.7, label="vLLM (published)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        if metric == "mean TTFT ms":
            ax.set_yscale("log")
        ax.set_xlabel("engine.max_loras")
        ax.set_title(metric, fontsize=10)
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=8)
    fig.suptitle("128 LoRA adapters, Llama-3.1-8B, ~7.5 req/s for an hour (data/lora/public.yaml)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", type=Path, help="write the max_loras figure here")
    args = ap.parse_args()
    rows = sweep_set() + kernel_set()
    print("| set | load | metric | published | servesim | error |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        err = r["servesim"] / r["published"] - 1
        print(
            f"| {r['set']} | {r['load']} | {r['metric']} | {r['published']:,.2f} | {r['servesim']:,.2f} | {err:+.0%} |"
        )
    print()
    print("\n".join(error_lines(rows)))
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
