"""Fit the cost model's efficiency factors and overheads to measured step latencies.

A profile CSV has columns ``gpu,model,batch,new_tokens,context,ms`` (``python -m tools.profiler``
measures one on a real GPU). The fit minimises the squared *relative* error of the predicted step
latency over every row, by Nelder-Mead on the logarithms of the parameters (all positive), with the
efficiencies capped at 1.

A profile of one model cannot tell the weight-streaming efficiency (``matmul_memory``) from the
per-layer overhead: at small batches both only add a constant. A streaming CSV
(``python -m tools.profiler --streaming``: timed matrix-vector products over many weight
shapes) measures that efficiency directly, as the slope of time over bytes; given one, the fit
pins ``matmul_memory`` to it and fits the rest. The result is a small YAML file that scenarios reference with
``cost: {calibration: FILE}``; built-in calibrations live in ``simulator/data/calibration/``.

How an operator's compute and memory times combine (``Efficiency.roofline_blend``) is their max
unless ``--roofline-blend`` says otherwise: a p-norm's exponent, or ``auto``, the one among
``BLENDS`` whose fit has the least mean absolute error.

``--pin NAME=VALUE`` holds an efficiency or an overhead at a value measured elsewhere (over a
streaming CSV's). ``--scale NAME=FACTOR`` multiplies a fitted value afterwards (a profile run
uncompiled, say, scaled by the ratio a compiled one showed on another GPU). ``--served CSV``
(``--overheads-from``): step latencies of the engine as served (a profile CSV of the same columns:
vLLM's own decode steps, whose graphs run compiled kernels the step profiles may not), on which the
``--refit`` parameters (default: the small-kernel overheads, per layer and per sequence) are fitted
again with everything else held. The file says what was scaled and refitted under ``adjusted``.
"""

from __future__ import annotations

import io
from dataclasses import asdict, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import yaml

from simulator.engine.calibration import GPU_FIELDS
from simulator.engine.cost import CostModel, Efficiency, decode_work
from simulator.errors import ConfigError
from simulator.outputs.writers import atomic_write_text
from simulator.scenario.hardware import load_gpu
from simulator.scenario.models import load_model
from simulator.scenario.textfile import ENCODING, read_text

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pandas as pd

EFFICIENCIES = ("matmul_compute", "matmul_memory", "attn_compute", "attn_memory")  # fractions of a peak, at most 1
OVERHEADS = ("per_layer_overhead_s", "per_seq_overhead_s")  # refitted on served steps by default (--served)
FITTED = (*EFFICIENCIES, *OVERHEADS)  # what a fit fits, and what --pin, --scale and --refit may name
# The roofline blends tried (Efficiency.roofline_blend; 0: the max of compute and memory time), and
# the largest one may give (a step's seconds to a higher power would underflow).
BLENDS = (0.0, 6.0, 4.0, 3.0, 2.5, 2.0)
MAX_BLEND = 64.0
MAX_OVERHEAD_S = 0.01  # the most seconds an overhead may be pinned at (measured ones are microseconds)
# The headers of a step profile and of a weight-streaming CSV, by which ``is_streaming`` tells the
# two apart; ``tools/profiler`` writes both from these tuples.
PROFILE_COLUMNS = ("gpu", "model", "batch", "new_tokens", "context", "ms")
STREAMING_COLUMNS = ("gpu", "op", "out_features", "in_features", "batch", "bytes", "copies", "ms")
_STREAMING_MIN_BYTES = 16e6  # smaller matrices are dominated by the kernel's fixed latency


def read_profile(path: str | Path) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"calibrate: profile not found: {path}")
    df = _read_csv(p)
    if "mode" in df.columns:
        # A comparison of execution modes (`python -m tools.profiler --mode compare`): the compiled
        # model replayed from a CUDA graph is how vLLM runs a step; rows of fewer layers only measured
        # the per-layer cost.
        df = df[df["mode"] == "compiled_graph"]
        if "layers" in df.columns:
            df = df[df["layers"] == df["layers"].max()]
        df = df.reset_index(drop=True)
    missing = [c for c in PROFILE_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(
            f"calibrate: {path} lacks column(s) {', '.join(missing)} (needs {', '.join(PROFILE_COLUMNS)})"
        )
    bad = df[(df["ms"] <= 0) | (df["batch"] < 1) | (df["new_tokens"] < 1) | (df["context"] < 0)]
    if len(bad):
        line = int(bad.index[0]) + 2
        raise ConfigError(f"calibrate: {path} line {line}: batch, new_tokens >= 1, context >= 0 and ms > 0 required")
    return df


def is_streaming(path: str | Path) -> bool:
    """Whether a CSV is a weight-streaming measurement (else a step profile)."""
    try:
        with open(path, encoding=ENCODING) as fh:
            header = fh.readline().strip().split(",")
    except (OSError, UnicodeDecodeError):
        return False
    return tuple(header) == STREAMING_COLUMNS


def _read_csv(path: Path) -> pd.DataFrame:
    """A CSV file as a table, read as UTF-8 (a byte-order mark allowed; anything else one line)."""
    import pandas as pd  # only calibration reads tables: simulating never loads pandas

    try:
        return pd.read_csv(io.StringIO(read_text(path)))
    except (ValueError, pd.errors.ParserError) as e:  # EmptyDataError is a ValueError
        raise ConfigError(f"calibrate: {path}: not a CSV table ({str(e).splitlines()[0]})") from None


def read_streaming(path: str | Path) -> pd.DataFrame:
    df = _read_csv(Path(path))
    bad = df[(df["ms"] <= 0) | (df["bytes"] <= 0)]
    if len(bad):
        raise ConfigError(f"calibrate: {path} line {int(bad.index[0]) + 2}: bytes > 0 and ms > 0 required")
    return df


def streaming_efficiency(df: pd.DataFrame, gpu_key: str) -> tuple[float, float]:
    """(efficiency, bytes/s): the weight-streaming bandwidth of batch-1 GEMVs, as the slope of time
    over bytes (least squares with an intercept) over matrices of at least 16 MB, and its
    fraction of the catalogue HBM bandwidth."""
    g = df[(df["gpu"] == gpu_key) & (df["op"] == "gemv") & (df["batch"] == 1) & (df["bytes"] >= _STREAMING_MIN_BYTES)]
    if len(g) < 2:
        raise ConfigError(
            f"calibrate: the streaming measurement has {len(g)} batch-1 GEMV rows of >= 16 MB "
            f"for gpu {gpu_key} (needs 2)"
        )
    A = np.column_stack([g["bytes"].to_numpy(float), np.ones(len(g))])
    (sec_per_byte, _), *_ = np.linalg.lstsq(A, g["ms"].to_numpy(float) * 1e-3, rcond=None)
    bw = 1.0 / sec_per_byte
    return min(float(bw) / load_gpu(gpu_key).hbm_bandwidth, 1.0), float(bw)


def _models(df: pd.DataFrame, gpu_key: str, tp: int) -> dict[str, CostModel]:
    gpu = load_gpu(gpu_key)
    return {m: CostModel(load_model(m), gpu, tp) for m in df["model"].unique()}


def predict(df: pd.DataFrame, eff: Efficiency, gpu_key: str | None = None, tp: int = 1) -> np.ndarray:
    """Predicted step latency (ms) for every profile row."""
    gpu_key = gpu_key or str(df["gpu"].iloc[0])
    base = _models(df, gpu_key, tp)
    out = np.empty(len(df))
    cache: dict[str, CostModel] = {}
    # (pandas types a row's fields as any scalar)
    for i, r in enumerate(cast("Iterable[Any]", df.itertuples(index=False))):
        cm = cache.get(r.model)
        if cm is None:
            b = base[r.model]
            cm = cache[r.model] = CostModel(b.model, b.gpu, tp, eff)
        out[i] = cm.step_time(decode_work(int(r.batch), int(r.context), int(r.new_tokens))) * 1e3
    return out


def _nelder_mead(f, x0: np.ndarray, step: float = 0.3, iters: int = 3000, tol: float = 1e-10) -> np.ndarray:
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2 * (centroid - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[int(np.argmin(vals))]


def _eff_from(x: np.ndarray, base: Efficiency, names: tuple[str, ...] = FITTED) -> Efficiency:
    vals = {}
    for name, v in zip(names, np.exp(x)):
        vals[name] = min(float(v), 1.0) if name in EFFICIENCIES else float(v)
    return replace(base, **vals)


def fit(
    df: pd.DataFrame,
    gpu_key: str | None = None,
    tp: int = 1,
    start: Efficiency | None = None,
    pinned: dict[str, float] | None = None,
    fitted: tuple[str, ...] = FITTED,
) -> Efficiency:
    """Efficiencies and overheads that minimise the mean squared relative error on ``df``;
    ``pinned`` parameters are held at the given values (e.g. a measured ``matmul_memory``), and only
    ``fitted`` are fitted (the rest as ``start`` has them)."""
    gpu_key = gpu_key or str(df["gpu"].iloc[0])
    base = _models(df, gpu_key, tp)
    start = start or Efficiency(per_layer_overhead_s=4e-5, step_overhead_s=0.0)
    pinned = pinned or {}
    start = replace(start, **pinned)
    free = tuple(n for n in fitted if n not in pinned)
    meas = df["ms"].to_numpy(float)
    rows = cast("Iterable[Any]", df.itertuples(index=False))  # (pandas types a row's fields as any scalar)
    works = [decode_work(int(r.batch), int(r.context), int(r.new_tokens)) for r in rows]
    names = df["model"].tolist()

    def loss(x: np.ndarray) -> float:
        eff = _eff_from(x, start, free)
        models = {m: CostModel(b.model, b.gpu, tp, eff) for m, b in base.items()}
        pred = np.fromiter((models[m].step_time(w) * 1e3 for m, w in zip(names, works)), float, len(works))
        return float(np.mean(((pred - meas) / meas) ** 2))

    x0 = np.log([max(getattr(start, n), 1e-9) for n in free])
    x = _nelder_mead(loss, x0)
    x = _nelder_mead(loss, x, step=0.1)  # restart from the optimum: Nelder-Mead stalls on flat ridges
    return _eff_from(x, start, free)


def mape(df: pd.DataFrame, eff: Efficiency, gpu_key: str | None = None, tp: int = 1) -> float:
    pred = predict(df, eff, gpu_key, tp)
    return float(np.mean(np.abs(pred - df["ms"].to_numpy(float)) / df["ms"].to_numpy(float)))


def save(
    eff: Efficiency,
    path: Path,
    gpu_key: str,
    sources: list[str],
    err: float,
    n: int,
    pinned_note: dict | None = None,
    adjusted: dict | None = None,
) -> None:
    doc = {
        "gpu": gpu_key,
        "fitted_on": sources,
        "date": date.today().isoformat(),
        "points": n,
        "mape": round(err, 5),
    }
    if pinned_note:
        doc["pinned"] = pinned_note
    doc["efficiency"] = {k: float(v) for k, v in asdict(eff).items() if k in GPU_FIELDS}
    if adjusted:
        doc["adjusted"] = adjusted
    atomic_write_text(Path(path), yaml.safe_dump(doc, sort_keys=False))


def served_attention_rates(served: pd.DataFrame, gpu_key: str) -> dict[str, float]:
    """The attention rates of the kernel vLLM's newest line runs on ``gpu_key``
    (``resolve.kernel_attention_rates``), with which servesim prices a served step there: the same for
    every model of ``served`` ({} where any is MLA, whose FlashMLA keeps the file's rates)."""
    from simulator.resolve import kernel_attention_rates
    from simulator.scenario import versions

    gpu = load_gpu(gpu_key)
    models = [load_model(m) for m in sorted(set(served["model"]))]
    if any(m.is_mla for m in models):
        return {}
    kernel = versions.attention_kernel(
        gpu.compute_capability, gpu.gfx, versions.version(versions.LATEST).rocm_attention, models[0].attention_sinks
    )
    return kernel_attention_rates(kernel, models[0], gpu_key)


def main_calibrate(
    profiles: list[str],
    out: str,
    gpu: str | None,
    tp: int,
    served_steps: str | None = None,
    pins: dict[str, float] | None = None,
    blends: tuple[float, ...] = (0.0,),
    refit: tuple[str, ...] = OVERHEADS,
    scales: dict[str, float] | None = None,
) -> int:
    streaming = [p for p in profiles if is_streaming(p)]
    steps = [p for p in profiles if p not in streaming]
    if not steps:
        raise ConfigError("calibrate: no step profile given (only weight-streaming measurements)")
    if clash := sorted(set(pins or {}) & set(refit) if served_steps else ()):
        raise ConfigError(f"calibrate: {', '.join(clash)} both pinned (--pin) and refitted (--refit); give one")
    import pandas as pd

    frames = [read_profile(p) for p in steps]
    df = pd.concat(frames, ignore_index=True)
    gpus = sorted(df["gpu"].unique())
    if gpu is None and len(gpus) > 1:
        raise ConfigError(f"calibrate: profiles mix GPUs ({', '.join(gpus)}); pass --gpu to pick one")
    key = gpu or gpus[0]
    df = df[df["gpu"] == key] if gpu is None else df
    pinned, note = {}, None
    if streaming:
        sdf = pd.concat([read_streaming(p) for p in streaming], ignore_index=True)
        eff_m, bw = streaming_efficiency(sdf, key)
        pinned = {"matmul_memory": eff_m}
        note = {
            "matmul_memory": {
                "value": round(eff_m, 5),
                "bandwidth_GBps": round(bw / 1e9, 1),
                "measured_in": [str(p) for p in streaming],
            }
        }
        print(f"matmul_memory pinned to {eff_m:.3f}: weight streaming measured at {bw / 1e9:,.0f} GB/s")
    for name, value in (pins or {}).items():  # given on the command line: they win over a streaming CSV's
        pinned[name] = value
        note = {**(note or {}), name: {"value": value, "given": "--pin"}}
        print(f"{name} pinned to {value:g} (--pin)")
    served = read_profile(served_steps) if served_steps else None  # read first: a bad file stops before any fit
    if served is not None and (other := sorted(set(served["gpu"]) - {key})):
        raise ConfigError(f"calibrate: --served {served_steps} holds steps of {', '.join(other)}, not {key}")
    before = mape(df, Efficiency(), key, tp)
    eff, after = Efficiency(), float("inf")
    for blend in blends:  # each blend's own fit; the least error wins
        got = fit(df, key, tp, start=Efficiency(per_layer_overhead_s=4e-5, roofline_blend=blend), pinned=pinned)
        err = mape(df, got, key, tp)
        if len(blends) > 1:
            print(f"  roofline blend {blend:g} ({'the max' if blend == 0 else 'a norm'}): {err:.2%}")
        if err < after:
            eff, after = got, err
    adjusted: dict[str, Any] = {}
    why = []
    for name, factor in (scales or {}).items():
        adjusted[name] = {"from": float(getattr(eff, name)), "factor": factor}
        eff = replace(eff, **{name: getattr(eff, name) * factor})
        why.append(f"{name} scaled by {factor:g} after the fit (--scale)")
    if served is not None:
        # priced as servesim prices a served step: attention at the rates of the kernel the engine runs
        rates = served_attention_rates(served, key)
        if clash := sorted(set(refit) & set(rates)):
            raise ConfigError(
                f"calibrate: --refit {', '.join(clash)}: the served steps' attention runs a kernel whose rates "
                f"servesim takes from its own measurement ({key}: {', '.join(f'{k} {v:g}' for k, v in rates.items())})"
            )
        as_served = replace(eff, **rates)
        was = mape(served, as_served, key, tp)
        refitted = fit(served, key, tp, start=as_served, fitted=refit)
        for name in refit:
            adjusted[name] = {
                **adjusted.get(name, {"from": float(getattr(eff, name))}),
                "to": float(getattr(refitted, name)),
            }
        why.append(
            f"{', '.join(refit)} fitted again on the engine's served steps in {served_steps} (mean error {was:.1%} "
            f"before, {mape(served, refitted, key, tp):.1%} after, attention at its kernel's rates"
            f"{''.join(f', {k} {v:g}' for k, v in rates.items())}), everything else held"
        )
        eff = replace(refitted, **{k: getattr(eff, k) for k in rates})  # the file keeps the profiles' rates
    if why:
        adjusted["why"] = "; ".join(why)
    save(eff, Path(out), key, [str(p) for p in profiles], after, len(df), note, adjusted or None)
    print(
        f"{len(df)} points on {key}: mean absolute percentage error {before:.1%} with the defaults, {after:.1%} calibrated"
    )
    if adjusted:
        print(f"  {adjusted['why']}")
    for k, v in asdict(eff).items():
        if k in GPU_FIELDS:
            print(f"  {k}: {v:.4g}")
    print(f"wrote {out}")
    return 0
