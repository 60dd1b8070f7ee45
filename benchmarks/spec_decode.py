"""Speculative decoding against public measurements (data/spec_decode/public.yaml): servesim's
speed-up (or loss) from each drafter as the load grows, beside what was published. The three sets
(SpecDecode-Bench, vLLM issue #20780, llm-d's Qwen3-32B ladder) are described and run by
simulator/validation/features.py (``servesim validate --features`` runs them too); the drafter's host
time per pass is the one constant fitted, on #20780 (``--fit``).

Run: python benchmarks/spec_decode.py [--plot docs/img/spec_decode_speedup.png] [--fit]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.validation.features import BENCH_BATCHES, bench_set, error_lines, issue_set, llmd_set  # noqa: E402


def fit_pass_s() -> float:
    """The host time per drafter pass that best fits set 2 (mean squared log error of the TPOT
    speed-ups), over a grid of 0 to 2 ms in steps of 10 us."""
    import math

    from simulator.engine import speculative

    best = (math.inf, 0.0)
    for us in range(0, 2001, 10):
        speculative.DRAFT_PASS_S = us * 1e-6
        loss = sum(math.log(r["servesim"] / r["published"]) ** 2 for r in issue_set()) / 12
        best = min(best, (loss, us * 1e-6))
    return best[1]


def plot(rows: list[dict], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = {"eagle3": "tab:blue", "eagle": "tab:green", "ngram": "tab:orange"}
    for method, color in colors.items():
        sel = [r for r in rows if r["set"] == "SpecDecode-Bench" and r["method"] == method]
        ax.plot(BENCH_BATCHES, [r["servesim"] for r in sel], "-o", color=color, label=f"{method}: servesim")
        ax.plot(
            BENCH_BATCHES, [r["published"] for r in sel], "--s", color=color, alpha=0.6, label=f"{method}: published"
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(BENCH_BATCHES, [str(b) for b in BENCH_BATCHES])
    ax.set_xlabel("sequences decoded at once (closed loop)")
    ax.set_ylabel("output throughput, drafts / none")
    ax.set_title(
        "Speculative decoding speed-up vs batch: Llama-3.1-8B, one H100, k = 3\n"
        "published: SpecDecode-Bench (arXiv 2601.11580, vLLM 0.10.1, ShareGPT)",
        fontsize=10,
    )
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", type=Path, help="write the speed-up-vs-batch figure here")
    ap.add_argument("--fit", action="store_true", help="fit the host time per drafter pass on set 2 and print it")
    args = ap.parse_args()
    if args.fit:
        print(f"DRAFT_PASS_S = {fit_pass_s():.6f}  # fitted on vLLM issue #20780 (set 2)")
        return 0
    rows = bench_set() + issue_set() + llmd_set()
    print("| set | method | load | metric | published | servesim | error | servesim acceptance length |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        err = r["servesim"] / r["published"] - 1
        print(
            f"| {r['set']} | {r['method']} | {r['load']} | {r['metric']} | {r['published']:.2f} | "
            f"{r['servesim']:.2f} | {err:+.0%} | {r['acceptance_length']:.2f} |"
        )
    print()
    print("\n".join(error_lines(rows, {"vLLM #20780": "calibration"})))
    if args.plot:
        plot(rows, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
