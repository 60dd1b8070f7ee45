"""The calibrated cost model against step profiles it was not fitted on (data/profiles/compiled/*_heldout.csv).

Each file is a ``python -m tools.profiler --mode compare`` run of a model the GPU's built-in calibration never saw
(simulator/data/calibration/<gpu>.yaml lists what it was fitted on); its compiled + CUDA-graph
steps (how vLLM runs a step) are predicted with that calibration, unchanged.
Run: python benchmarks/cost_model_heldout.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from simulator.engine.calibration import builtin
from simulator.validation.calibrate import predict, read_profile

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    files = sorted((ROOT / "data" / "profiles" / "compiled").glob("*_heldout.csv"))
    if not files:
        print("no held-out profiles in data/profiles/compiled/")
        return 1
    for f in files:
        df = read_profile(f)
        gpu = str(df["gpu"].iloc[0])
        eff = builtin(gpu)
        if eff is None:
            print(f"{f.name}: no built-in calibration for {gpu}")
            continue
        pred = predict(df, eff, gpu)
        err = (pred - df["ms"].to_numpy()) / df["ms"].to_numpy()
        print(
            f"{f.relative_to(ROOT)}: {len(df)} steps, MAPE {np.mean(np.abs(err)):.1%}, worst {np.max(np.abs(err)):.1%}"
        )
        for r, p, e in zip(df.itertuples(), pred, err, strict=True):
            kind = "decode" if r.new_tokens == 1 else "prefill"
            print(
                f"  {kind:7s} batch {r.batch:4d} x {r.new_tokens:5d} tokens, context {r.context:5d}: "
                f"measured {r.ms:8.2f} ms, model {p:8.2f} ms ({e:+.1%})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
