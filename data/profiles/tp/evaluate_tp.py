"""How well simulator/cost.py predicts the measured tensor-parallel steps in this folder.

Run from the repository root: ``python data/profiles/tp/evaluate_tp.py [--tp 2|4] [--json OUT.json]``.

For every row of ``*_tp{N}.csv`` (``python -m tools.profiler --mode tp``, N = ``--tp``, default 2): the step the cost
model prices for that model with the measured layer count, on that GPU at ``tp=N``, with the GPU's built-in calibration and the
default execution (every shape graphed, nothing padded, no CPU time, as the profiler measures):

    CostModel(replace(load_model(model), num_layers=layers), load_gpu(gpu), tp=N,
              calibrate.builtin(gpu), execution=Execution()).step_time(decode_work(batch, context, new_tokens))

It prints the mean absolute percentage error (overall, decode, prefill, per model), the share of the
predicted step that the model gives the all-reduces, then fits ONLY the tensor-parallel terms of
``simulator.cost.Efficiency`` (``allreduce_latency_s``, ``allreduce_bandwidth``) on every other point
by batch (by new tokens for prefills) within each model and phase/context, and reports the error on
the held-out other half and with the fitted terms on all points. ``*_tp1.csv`` rows (the same code at
``tp=1`` on the same machine) are scored with the same calibration as a reference. Nothing is written
to the calibration files or to ``cost.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from simulator.cost import CostModel, Efficiency, Execution, decode_work  # noqa: E402
from simulator.hardware import load_gpu  # noqa: E402
from simulator.models import load_model  # noqa: E402

from simulator import calibrate  # noqa: E402

HERE = Path(__file__).resolve().parent
FIT = ("allreduce_latency_s", "allreduce_bandwidth")


def load(pattern: str) -> pd.DataFrame:
    frames = [pd.read_csv(p) for p in sorted(HERE.glob(pattern))]
    df = pd.concat(frames, ignore_index=True)
    df["phase"] = np.where(df["new_tokens"] == 1, "decode", "prefill")
    return df


def cost_model(row, eff: Efficiency) -> CostModel:
    model = replace(load_model(row.model), num_layers=int(row.layers))
    return CostModel(model, load_gpu(row.gpu), int(row.tp), eff, execution=Execution())


def predict(df: pd.DataFrame, eff_of) -> tuple[np.ndarray, np.ndarray]:
    """Predicted ms and the all-reduce share of each predicted step."""
    ms, share = np.empty(len(df)), np.empty(len(df))
    for i, r in enumerate(df.itertuples(index=False)):
        cm = cost_model(r, eff_of(r.gpu))
        w = decode_work(int(r.batch), int(r.context), int(r.new_tokens))
        t = cm.step_time(w)
        ar = sum(o.seconds for o in cm.ops(w) if o.name == "allreduce")
        ms[i], share[i] = t * 1e3, ar / t
    return ms, share


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(pred - meas) / meas


def split_halves(df: pd.DataFrame) -> np.ndarray:
    """True for the fit half: every other point by batch (prefills: by new tokens) within each model
    and phase/context, starting with the first."""
    fit = np.zeros(len(df), bool)
    for _, g in df.groupby(["gpu", "model", "phase", "context"]):
        order = g.sort_values(["batch", "new_tokens"]).index.to_numpy()
        fit[order[::2]] = True
    return fit


def fit_tp_terms(df: pd.DataFrame, base_of) -> dict[str, dict[str, float]]:
    """allreduce_latency_s and allreduce_bandwidth per GPU minimising the mean squared relative error."""
    out = {}
    for gpu, g in df.groupby("gpu"):
        base = base_of(gpu)
        meas = g["ms"].to_numpy(float)

        def loss(x, g=g, base=base, meas=meas):
            eff = replace(base, allreduce_latency_s=float(np.exp(x[0])), allreduce_bandwidth=float(np.exp(x[1])))
            pred, _ = predict(g, lambda _gpu, eff=eff: eff)
            return float(np.mean(((pred - meas) / meas) ** 2))

        x0 = np.log([base.allreduce_latency_s, base.allreduce_bandwidth])
        x = calibrate._nelder_mead(loss, x0)
        x = calibrate._nelder_mead(loss, x, step=0.1)
        out[gpu] = {"allreduce_latency_s": float(np.exp(x[0])), "allreduce_bandwidth": float(np.exp(x[1]))}
    return out


def summary(df: pd.DataFrame, pred: np.ndarray) -> dict:
    e = ape(pred, df["ms"].to_numpy(float))
    s = {"all": (float(e.mean()), float(e.max()), len(e))}
    for ph in ("decode", "prefill"):
        m = (df["phase"] == ph).to_numpy()
        if m.any():
            s[ph] = (float(e[m].mean()), float(e[m].max()), int(m.sum()))
    for col in ("gpu", "model"):
        for name in sorted(df[col].unique()):
            m = (df[col] == name).to_numpy()
            s[name] = (float(e[m].mean()), float(e[m].max()), int(m.sum()))
    return s


def fmt(s: dict) -> str:
    return "; ".join(f"{k} {v[0]:.1%} (worst {v[1]:.1%}, n={v[2]})" for k, v in s.items())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, default=2, help="the tensor-parallel degree whose files to score")
    ap.add_argument("--json", help="write the numbers here too")
    args = ap.parse_args()

    def builtin(gpu: str) -> Efficiency:
        return calibrate.builtin(gpu) or Efficiency()

    res: dict = {}
    df = load(f"*_tp{args.tp}.csv")
    pred0, share0 = predict(df, builtin)
    df["pred_builtin_ms"] = pred0
    df["allreduce_share"] = share0
    res["builtin"] = summary(df, pred0)
    print(f"TP{args.tp}, built-in calibration:", fmt(res["builtin"]))
    for ph in ("decode", "prefill"):
        m = (df["phase"] == ph).to_numpy()
        print(
            f"  predicted all-reduce share, {ph}: {share0[m].min():.1%} .. {share0[m].max():.1%} "
            f"(median {np.median(share0[m]):.1%})"
        )
    res["allreduce_share"] = {
        ph: [
            float(share0[(df["phase"] == ph).to_numpy()].min()),
            float(np.median(share0[(df["phase"] == ph).to_numpy()])),
            float(share0[(df["phase"] == ph).to_numpy()].max()),
        ]
        for ph in ("decode", "prefill")
    }

    fit_mask = split_halves(df)
    fitted = fit_tp_terms(df[fit_mask].reset_index(drop=True), builtin)
    res["fitted"] = fitted
    print("fitted on", int(fit_mask.sum()), "points:", json.dumps(fitted))

    def fitted_eff(gpu: str) -> Efficiency:
        return replace(builtin(gpu), **fitted[gpu])

    pred1, share1 = predict(df, fitted_eff)
    df["pred_fitted_ms"] = pred1
    df["allreduce_share_fitted"] = share1
    held = ~fit_mask
    res["fit_half"] = summary(df[fit_mask].reset_index(drop=True), pred1[fit_mask])
    res["held_out"] = summary(df[held].reset_index(drop=True), pred1[held])
    res["held_out_builtin"] = summary(df[held].reset_index(drop=True), pred0[held])
    res["fitted_all"] = summary(df, pred1)
    print("fit half, fitted:", fmt(res["fit_half"]))
    print("held-out half, built-in:", fmt(res["held_out_builtin"]))
    print("held-out half, fitted:", fmt(res["held_out"]))
    print("all points, fitted:", fmt(res["fitted_all"]))
    for ph in ("decode", "prefill"):
        m = (df["phase"] == ph).to_numpy()
        print(f"  fitted all-reduce share, {ph}: {share1[m].min():.1%} .. {share1[m].max():.1%}")

    ref = load("*_tp1.csv")
    if len(ref):
        p, _ = predict(ref, builtin)
        res["tp1_reference"] = summary(ref, p)
        print("TP1 (same machine), built-in calibration:", fmt(res["tp1_reference"]))
        ref["pred_builtin_ms"] = p

    cols = [
        "gpu",
        "model",
        "tp",
        "layers",
        "batch",
        "new_tokens",
        "context",
        "ms",
        "pred_builtin_ms",
        "allreduce_share",
        "pred_fitted_ms",
    ]
    df["fit_half"] = fit_mask
    print()
    print(df[[*cols, "fit_half"]].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    if args.json:
        res["rows"] = df[[*cols, "allreduce_share_fitted", "fit_half"]].to_dict(orient="records")
        if len(ref):
            res["tp1_rows"] = ref[
                ["gpu", "model", "tp", "layers", "batch", "new_tokens", "context", "ms", "pred_builtin_ms"]
            ].to_dict(orient="records")
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
