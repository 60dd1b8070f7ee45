"""Grid against Optuna's TPE sampler on a large plan: how many candidates each evaluates to find
the cheapest fleet, and how close TPE gets with fewer.

Runs ``servesim plan`` on the 200-candidate space below with every candidate (the grid, whose
cheapest is the true optimum of the space), then with ``--strategy optuna --trials T`` for each T
and seed, each in a fresh folder (nothing reused), and prints a table: candidates evaluated, wall
time, the cost found and its gap to the optimum.

Run: python benchmarks/plan_search.py [--trials 20,40,60] [--seeds 0,1,2] [--grid-dir DIR]
(``--grid-dir``: a finished grid plan of the same space to read instead of running it again).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPACE = [
    "model=llama-3.1-8b,llama-3.1-70b",
    "hardware.gpu=a100-80gb,h100-sxm,h200,b200,l40s",
    "hardware.tensor_parallel_size=1,2,4,8",
    "engine.max_num_seqs=32,64,128,256,1024",
]
COMMAND = [
    sys.executable,
    "-m",
    "simulator",
    "plan",
    str(ROOT / "scenarios" / "plan_chat.yaml"),
    "--rate",
    "50",
    "--no-check",
    *[a for s in SPACE for a in ("--search", s)],
]


def plan(out: Path, *extra: str) -> tuple[float, dict, int]:
    t0 = time.perf_counter()
    subprocess.run([*COMMAND, "--out", str(out), *extra], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0, *read(out)


def read(out: Path) -> tuple[dict, int]:
    rec = json.loads((out / "recommendation.json").read_text())
    with open(out / "plan.csv") as f:
        evaluated = sum(1 for row in csv.DictReader(f) if row["status"] != "not run")
    return rec["best"], evaluated


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", default="20,40,60")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--grid-dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.grid_dir:
            wall, (best, n) = None, read(Path(args.grid_dir))
        else:
            wall, best, n = plan(Path(tmp) / "grid")
        opt = best["usd_per_hour"]
        print("| strategy | seed | candidates evaluated | wall s | cheapest found $/h | gap to the optimum |")
        print("|---|---|---|---|---|---|")
        print(f"| grid | - | {n} | {'' if wall is None else f'{wall:.0f}'} | {opt:.2f} | 0% |", flush=True)
        for t in args.trials.split(","):
            for s in args.seeds.split(","):
                wall, b, n = plan(Path(tmp) / f"tpe{t}_{s}", "--strategy", "optuna", "--trials", t, "--search-seed", s)
                print(
                    f"| optuna TPE, {t} trials | {s} | {n} | {wall:.0f} | {b['usd_per_hour']:.2f} | "
                    f"{b['usd_per_hour'] / opt - 1:.0%} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
