"""How well the roofline cost model predicts measured GPU step latencies (data/profiles/*.csv).

Reports, per GPU: the built-in uncalibrated defaults; a fit on half the points tested on the other
half (held out, split by a fixed seed); a fit on one model tested on the other; a fit on the other
GPU; and the points where the calibrated model errs most. Where the GPU's weight-streaming
bandwidth was measured (data/profiles/streaming/<gpu>.csv) every fit pins ``matmul_memory`` to it;
the cross-model fits are also shown with it fitted, for comparison.
Run: python benchmarks/cost_model_accuracy.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.engine.cost import Efficiency
from simulator.validation.calibrate import fit, predict, read_profile, read_streaming, streaming_efficiency

ROOT = Path(__file__).resolve().parents[1]


def mape(df: pd.DataFrame, pred: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - df["ms"].to_numpy()) / df["ms"].to_numpy()))


def main() -> int:
    files = sorted((ROOT / "data" / "profiles").glob("*.csv"))
    if not files:
        print("no profiles in data/profiles/")
        return 1
    df = pd.concat([read_profile(f) for f in files], ignore_index=True)
    pins: dict[str, dict[str, float]] = {}
    for gpu in df["gpu"].unique():
        sf = ROOT / "data" / "profiles" / "streaming" / f"{gpu}.csv"
        if sf.is_file():
            eff_m, bw = streaming_efficiency(read_streaming(sf), gpu)
            pins[gpu] = {"matmul_memory": eff_m}
            print(f"{gpu}: weight streaming measured at {bw / 1e9:,.0f} GB/s: matmul_memory pinned to {eff_m:.3f}")
    print()
    for key, g in df.groupby("gpu"):
        gpu = str(key)
        g = g.reset_index(drop=True)
        pin = pins.get(gpu)
        print(f"## {gpu}: {len(g)} measured steps, models {', '.join(sorted(g['model'].unique()))}\n")
        print("| check | fit on | tested on | points | MAPE | worst |")
        print("|---|---|---|---|---|---|")
        d = predict(g, Efficiency(), gpu)
        err = np.abs(d - g["ms"].to_numpy()) / g["ms"].to_numpy()
        print(f"| uncalibrated defaults | - | all | {len(g)} | {err.mean():.1%} | {err.max():.1%} |")
        rng = np.random.default_rng(0)
        mask = rng.permutation(len(g)) < len(g) // 2
        train, test = g[mask], g[~mask]
        eff = fit(train, gpu, pinned=pin)
        p = predict(test, eff, gpu)
        e = np.abs(p - test["ms"].to_numpy()) / test["ms"].to_numpy()
        print(f"| held-out half | half of all | other half | {len(test)} | {e.mean():.1%} | {e.max():.1%} |")
        models = sorted(g["model"].unique())
        for a in models:
            for b in models:
                if a == b:
                    continue
                ta, tb = g[g["model"] == a], g[g["model"] == b]
                variants = [("cross-model", pin)] + ([("cross-model, matmul_memory fitted", None)] if pin else [])
                for label, pn in variants:
                    p = predict(tb, fit(ta, gpu, pinned=pn), gpu)
                    e = np.abs(p - tb["ms"].to_numpy()) / tb["ms"].to_numpy()
                    print(f"| {label} | {a} | {b} | {len(tb)} | {e.mean():.1%} | {e.max():.1%} |")
        for other_key, og in df.groupby("gpu"):
            other = str(other_key)
            if other == gpu:
                continue
            p = predict(g, fit(og.reset_index(drop=True), other, pinned=pins.get(other)), gpu)
            e = np.abs(p - g["ms"].to_numpy()) / g["ms"].to_numpy()
            print(
                f"| cross-GPU | {other} (both models) | {gpu} (both models) | {len(g)} | {e.mean():.1%} | {e.max():.1%} |"
            )
        eff_all = fit(g, gpu, pinned=pin)
        p = predict(g, eff_all, gpu)
        g = g.assign(pred=p, err=(p - g["ms"]) / g["ms"])
        print(f"\nCalibrated on all points: MAPE {np.abs(g['err']).mean():.1%}. Largest errors:\n")
        worst = g.reindex(g["err"].abs().sort_values(ascending=False).index).head(8)
        print("| model | batch | new tokens | context | measured ms | predicted ms | error |")
        print("|---|---|---|---|---|---|---|")
        for r in worst.itertuples():
            print(
                f"| {r.model} | {r.batch} | {r.new_tokens} | {r.context} | {r.ms:.2f} | {r.pred:.2f} | {r.err:+.1%} |"
            )
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
