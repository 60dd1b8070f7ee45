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

Run: python benchmarks/lora.py [--plot docs/img/lora_max_loras.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.config import load_scenario  # noqa: E402
from simulator.metrics import summarize  # noqa: E402
from simulator.run import simulate  # noqa: E402

# max_loras -> (mean TTFT ms, mean TPOT ms, output tok/s) over the hour, 128 adapters.
SWEEP = {
    8: (78360.08, 20.73, 1428.78),
    16: (29017.56, 24.43, 1449.33),
    32: (9354.02, 35.62, 1457.71),
    64: (175.91, 41.36, 1456.59),
    128: (183.77, 46.25, 1457.02),
}
# PR #48887, vLLM 0.25.1 column: (output tok/s, mean TPOT ms) of base-model and adapter requests.
PR48887 = {"base": (993.65, 57.91), "lora": (880.72, 65.21)}


def run(overrides: list[str]) -> dict:
    sc, _ = load_scenario(None, overrides)
    return summarize(simulate(sc))


def sweep_set() -> list[dict]:
    base = [
        "model=llama-3.1-8b",
        "hardware.gpu=h100-sxm",
        "engine.max_num_seqs=2048",
        "engine.enable_prefix_caching=false",
        "engine.enable_lora=true",
        "engine.max_lora_rank=16",
        "engine.max_cpu_loras=128",
        "workload.arrival={type: poisson, rate: 7.47}",
        "workload.prompt_tokens={dist: lognormal, mean: 223, sigma: 1.0, max: 4096}",
        "workload.output_tokens={dist: lognormal, mean: 196, sigma: 1.0, max: 2048}",
        "workload.lora={adapters: 128}",
        "run.duration_s=3600",
        "run.warmup_s=0",
    ]
    rows = []
    for m, (ttft, tpot, thr) in SWEEP.items():
        s = run([*base, f"engine.max_loras={m}"])
        for metric, pub, sim in (
            ("mean TTFT ms", ttft, s["mean_ttft_ms"]),
            ("mean TPOT ms", tpot, s["mean_tpot_ms"]),
            ("output tok/s", thr, s["output_throughput"]),
        ):
            rows.append(
                {
                    "set": "V1 max_loras sweep",
                    "load": f"max_loras {m}",
                    "metric": metric,
                    "published": pub,
                    "servesim": sim,
                }
            )
    return rows


def kernel_set() -> list[dict]:
    base = [
        "model=qwen2.5-7b",
        "hardware.gpu=h100-sxm",
        "engine.vllm_version=0.26",
        "engine.enable_lora=true",
        "engine.max_lora_rank=8",
        "engine.enable_prefix_caching=false",
        "workload.arrival={type: poisson, rate: 10}",
        "workload.prompt_tokens={dist: fixed, value: 2048}",
        "workload.output_tokens={dist: fixed, value: 256}",
        "run.num_requests=100",
        "run.duration_s=null",
        "run.warmup_s=0",
    ]
    b, lo = run(base), run([*base, "workload.lora={adapters: 1}"])
    rows = []
    for metric, key, k in (("throughput ratio", "output_throughput", 0), ("TPOT ratio", "mean_tpot_ms", 1)):
        rows.append(
            {
                "set": "PR #48887 kernels",
                "load": "10 req/s",
                "metric": metric,
                "published": PR48887["lora"][k] / PR48887["base"][k],
                "servesim": lo[key] / b[key],
            }
        )
    return rows


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
    for name in dict.fromkeys(r["set"] for r in rows):
        for metric in dict.fromkeys(r["metric"] for r in rows if r["set"] == name):
            errs = [abs(r["servesim"] / r["published"] - 1) for r in rows if (r["set"], r["metric"]) == (name, metric)]
            print(f"{name} (held out), {metric}: median absolute error {statistics.median(errs):.1%} over {len(errs)}")
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
