"""Fit a GPU's MoE weight-streaming rate and per-layer kernel time on its calibration runs of the SGLang
cookbook, and write them into its calibration file.

    python tools/validation/fit_gpu_family.py --gpu b200 [--write] [--jobs 2]

The GPUs no profile of ours measured (the B200 and the MI300X: their calibration files derive matmul
rates from public microbenchmarks, every other factor the H100's defaults) decode MoE models at a
pace the defaults miss (docs/sglang.md). Two factors set that pace: ``moe_memory``, the share of HBM
bandwidth the experts' weights stream at (what grows with the batch, as more experts are touched),
and ``per_layer_overhead_s``, the small kernels' time a layer (the floor at one request in flight).
They are searched on a grid for the least sum of |log(simulated / measured)| over output throughput
and p50 TPOT of the GPU's runs marked ``fits: gpu`` in simulator/data/validation/sglang_runs.yaml
(the 1k/8k runs, decode-bound: ``tools/validation/add_sglang_runs.py``); every other run of the GPU
is held out. ``--write`` stores them in simulator/data/calibration/<gpu>.yaml and in the files of
the GPUs that share its kernels (``FAMILY``), each keeping its own matmul rates.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.engine.calibration import builtin
from simulator.engine.cost import Efficiency
from simulator.validation import validate
from tools.validation.fit_host import loss as fit_loss

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "simulator" / "data" / "calibration"
MOE_MEMORY = (0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.81, 0.9)
PER_LAYER_US = (20.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 70.0, 80.0, 100.0, 120.0, 150.0)
METRICS = ("output_throughput", "median_tpot_ms")
# GPUs that run the same kernels as the one fitted: the same die (GB200), the same architecture
# (B300, Blackwell Ultra), the same compute die with more memory (MI325X).
FAMILY = {"b200": ("b300", "gb200"), "mi300x": ("mi325x",)}


def runs_of(gpu: str) -> list[dict]:
    return [r for r in validate.load(validate.SGLANG_FILE)["runs"] if r["gpu"] == gpu and r.get("fits") == "gpu"]


def loss(runs: list[dict], gpu: str, moe_memory: float, per_layer_s: float, jobs: int) -> float:
    eff = {**vars(builtin(gpu) or Efficiency()), "moe_memory": moe_memory, "per_layer_overhead_s": per_layer_s}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"efficiency": eff}, f)
    try:
        res = validate.run_all(runs, extra=[f"cost.calibration={f.name}"], jobs=jobs)
    finally:
        Path(f.name).unlink()
    for r in res:
        if r.error:
            raise SystemExit(f"{r.id}: {r.error}")
    return fit_loss(res, METRICS)


def write(gpu: str, moe_memory: float, per_layer_s: float, runs: list[dict], best: float) -> None:
    for g in (gpu, *FAMILY.get(gpu, ())):
        path = CALIBRATION / f"{g}.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["efficiency"].update({"moe_memory": round(moe_memory, 4), "per_layer_overhead_s": round(per_layer_s, 9)})
        src = "" if g == gpu else f" (fitted on the {gpu.upper()}, whose kernels this GPU shares)"
        doc["fitted_on_public_runs"] = (
            f"moe_memory and per_layer_overhead_s{src}: python tools/validation/fit_gpu_family.py --gpu {gpu} "
            f"--write, on the SGLang cookbook's {', '.join(r['id'].split('_')[-1] for r in runs)} "
            f"(sum of |log error| in output throughput and p50 TPOT {best:.3f}); its other runs held out"
        )
        path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True))
        print(f"wrote {path.relative_to(ROOT)}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", required=True, choices=sorted(FAMILY))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    runs = runs_of(args.gpu)
    if not runs:
        print(f"no run of {args.gpu} is marked fits: gpu", file=sys.stderr)
        return 1
    seen = {(m, p): loss(runs, args.gpu, m, p * 1e-6, args.jobs) for m in MOE_MEMORY for p in PER_LAYER_US}
    (m, p), best = min(seen.items(), key=lambda kv: kv[1])
    base = builtin(args.gpu) or Efficiency()
    was = loss(runs, args.gpu, base.moe_memory, base.per_layer_overhead_s, args.jobs)
    print(
        f"{args.gpu}: moe_memory {m}, per_layer_overhead {p} us: loss {best:.3f} over {len(runs)} runs (stored: {was:.3f})"
    )
    edge = m in (MOE_MEMORY[0], MOE_MEMORY[-1]) or p in (PER_LAYER_US[0], PER_LAYER_US[-1])
    if edge:
        print("  the least sits on the grid's edge: widen the grid before writing", file=sys.stderr)
        return 1
    if args.write:
        write(args.gpu, m, p * 1e-6, runs, best)
    return 0


if __name__ == "__main__":
    sys.exit(main())
