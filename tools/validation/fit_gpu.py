"""Fit a GPU's matmul rate on the calibration half of the public runs, for a GPU we have no
profiles of (the A100: no A100 was at hand to measure on).

    python tools/validation/fit_gpu.py [--gpu a100-80gb] [--jobs 2]

The attention rate is the published FlashAttention-2 figure (``simulator.engine.cost.FA2_ATTN_COMPUTE``:
Dao 2023, arXiv 2307.08691, 50-73% of the A100's peak in the forward pass; 0.60, the middle),
and every other factor keeps the generic default (simulator/engine/cost.py Efficiency). The matmul rate
is searched on a grid (0.50 to 0.95 of peak) for the least sum of |log(simulated / measured)| over
output throughput, mean TTFT and mean TPOT of the ``split: calibrate`` runs on that GPU in
simulator/data/validation/runs.yaml (confounded runs left out; the held-out runs are never
simulated here). Writes simulator/data/calibration/<gpu>.yaml, which `cost.calibration: auto`
then uses for that GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.engine.calibration import CALIBRATION_DIR
from simulator.engine.cost import FA2_ATTN_COMPUTE, Efficiency
from simulator.validation import validate
from tools.validation import fit_host

GRID = [round(0.50 + 0.05 * i, 2) for i in range(10)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="a100-80gb")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    runs = [
        r
        for r in validate.load(validate.RUNS_FILE)["runs"]
        if validate.host_calibration(r)  # not a run that fits a kernel's rate (``fits: attention``, ``gpu``)
        and not r.get("confounded")
        and r["gpu"] == args.gpu
    ]
    if not runs:
        print(f"no calibration runs on {args.gpu}", file=sys.stderr)
        return 1
    attn = FA2_ATTN_COMPUTE  # what the scenarios of its runs use (simulator/run.py efficiency), recorded in the file
    scores = []
    for mm in GRID:
        extra = [f"cost.matmul_compute={mm}"]
        got = fit_host.loss(validate.run_all(runs, extra, jobs=args.jobs))
        scores.append((got, mm))
        print(f"matmul_compute {mm:.2f}: loss {got:.3f}", flush=True)
    best, mm = min(scores)
    eff = replace(Efficiency(), matmul_compute=mm, attn_compute=attn)
    out = CALIBRATION_DIR / f"{args.gpu}.yaml"
    lines = [
        "# Written by tools/validation/fit_gpu.py. No profiles of this GPU: matmul_compute fitted on the",
        "# public calibration runs below, attn_compute from the FlashAttention-2 paper's A100 figures",
        "# (arXiv 2307.08691: 50-73% of peak in the forward pass), every other factor the generic default.",
        f"gpu: {args.gpu}",
        "fitted_on:",
        *(f"- {r['id']}" for r in runs),
        *fit_host.stamp(best),
        "grid:  # matmul_compute: loss",
        *(f"  {m}: {s:.4f}" for s, m in sorted(scores, key=lambda x: x[1])),
        *fit_host.section("efficiency", asdict(eff)),
    ]
    out.write_text("\n".join(lines) + "\n")
    print(f"{len(runs)} runs; matmul_compute {mm} (loss {best:.3f}); wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
