"""Write a run's results directory, and comparisons of several runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from simulator.errors import ConfigError
from simulator.metrics import request_columns, step_columns, summarize
from simulator.outputs.background import BackgroundPlots
from simulator.outputs.notes import ungraphed_moe_share
from simulator.outputs.writers import atomic_write_text, write_csv, write_json


def run_title(s: dict) -> str:
    """What ran, for a plot's title: the model on its GPUs, or the fleet."""
    reps = s.get("replicas")
    if not reps:
        return f"{s['model']} on {s['gpu']} x{s['tensor_parallel_size']}"
    gpus = {(r["gpu"], r["tensor_parallel_size"]) for r in reps}
    (gpu, tp), *_ = gpus
    on = (f" on {gpu}" + (f" x{tp}" if tp > 1 else "")) if len(gpus) == 1 else ", mixed GPUs"
    pre = sum(r.get("role") == "prefill" for r in reps)
    what = f"{len(reps)} replicas" if not pre else f"{pre} prefill + {len(reps) - pre} decode replicas"
    a = s.get("autoscaler")
    if a is not None:
        what = f"{a['serving_min']}-{a['serving_max']} replicas (autoscaled)"
    return f"{s['model']}, {what}{on}"


PLOTTED = (
    "bin",
    "start",
    "duration",
    "kv_usage",
    "num_generated",
    "num_preemptions",
)  # steps.csv columns the plots read


def run_plots(label: str, steps, summary: dict, warmup_s: float, out: Path, fleet=None) -> list[tuple[str, tuple]]:
    """The plots of one run, as (``simulator.outputs.plots`` function, arguments) jobs. A fleet's steps
    (with a ``replica`` column) are drawn a line per replica, and the fleet's total throughput. An
    autoscaled fleet's replicas come and go: its ``fleet`` (fleet.csv's columns) gives the serving
    replicas' mean KV usage at each reading, its throughput is the fleet's total, and fleet.png
    shows its replicas over time."""
    title = f"{label}, {run_title(summary)}"
    end = float(summary["simulated_time_s"])
    if fleet is not None:
        kv = {"start": np.asarray(fleet["time"]), "kv_usage": np.asarray(fleet["kv_cache_usage"])}
        total = [(f"{label}: all replicas", fleet_timeline(steps, end))]
        return [
            (
                "plot_kv_usage",
                (
                    [("mean of serving replicas, at each autoscaler reading", kv)],
                    out / "kv_cache_usage.png",
                    f"KV-cache usage: {title}",
                    warmup_s,
                    end,
                ),
            ),
            ("plot_throughput", (total, out / "throughput.png", f"Output throughput: {title}", warmup_s, end)),
            ("plot_fleet", (fleet, out / "fleet.png", f"Replicas and load: {title}", summary)),
        ]
    if "replica" in steps:
        rep = np.asarray(steps["replica"])
        labels = {r["replica"]: r["label"] for r in summary.get("replicas", [])}
        series = [
            (
                labels.get(int(i), f"replica {int(i)}"),
                {c: np.asarray(steps[c])[rep == i] for c in PLOTTED if c in steps},
            )
            for i in np.unique(rep)
        ]
        roles = {r["replica"]: r["role"] for r in summary.get("replicas", [])}
        served = [s for i, s in zip(np.unique(rep), series) if roles.get(int(i)) != "prefill"]
    else:
        series = [(label, {c: steps[c] for c in PLOTTED if c in steps})]
        served = None
    return [
        ("plot_kv_usage", (series, out / "kv_cache_usage.png", f"KV-cache usage: {title}", warmup_s, end)),
        (
            "plot_throughput",
            (
                series if served is None else served,
                out / "throughput.png",
                f"Output throughput: {title}",
                warmup_s,
                end,
                None,
                served is not None,
            ),
        ),
    ]


def write_run(result, raw_scenario: dict, out: Path, plots: BackgroundPlots | None = None, band=None) -> dict:
    """summary.json, requests.csv, steps.csv, scenario.yaml and two plots; returns the summary.

    ``plots``: where to draw the plots (a child process started early, see ``background.py``); by
    default in this process. They are drawn while the CSV files are written. ``band``: the runs on
    the slowest and fastest catalog host (``simulator.run.HostBand``), gathered into the summary's
    ``host_band`` once the files are written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # An earlier run's summary would mark a half-rewritten folder as complete.
    (out / "summary.json").unlink(missing_ok=True)
    plots = plots or BackgroundPlots(fork=False)
    summary = summarize(result)
    steps = step_columns(result)
    if (ungraphed := ungraphed_moe_share(result, steps)) is not None:
        summary["ungraphed_decode_steps"] = round(ungraphed, 4)
    requests = request_columns(result)
    scaler = getattr(result.engine, "autoscaler", None)
    fleet = None if scaler is None else scaler.columns(result.scenario, result.reqs.columns())
    plots.draw(run_plots(summary["scenario"], steps, summary, result.scenario.run.warmup_s, out, fleet))
    write_csv(requests, out / "requests.csv")
    write_csv(steps, out / "steps.csv")
    if fleet is not None:
        write_csv(fleet, out / "fleet.csv")
    atomic_write_text(out / "scenario.yaml", yaml.safe_dump(raw_scenario, sort_keys=False))
    plots.wait()
    if band is not None and (b := band.result(summary)) is not None:
        summary["host_band"] = b
    write_json(summary, out / "summary.json")  # written last: its presence means the run is complete
    return summary


def redraw(out: Path) -> list[Path]:
    """Redraw the plots of a finished run, or of a folder of runs (``servesim run a.yaml b.yaml``:
    each run's, and the overlay), from their CSV files. Returns the files drawn. (A sweep's plots:
    ``sweep.redraw_sweep``.)"""
    out = Path(out)
    if (out / "summary.json").is_file():
        summary, steps = load_run(out)
        fleet = None
        if "autoscaler" in summary:
            import pandas as pd

            fleet = pd.read_csv(out / "fleet.csv")
        jobs = run_plots(summary["scenario"], steps, summary, _warmup(summary), out, fleet)
        plots = BackgroundPlots(fork=False)
        plots.draw(jobs)
        plots.wait()
        return [args[1] for _, args in jobs]
    runs = sorted(d for d in out.iterdir() if (d / "summary.json").is_file()) if out.is_dir() else []
    if not runs:
        raise ConfigError(
            f"plot: {out} holds no finished run, folder of runs or sweep (no summary.json, "
            "no sub-folders with one, no sweep.csv)"
        )
    files = [f for d in runs for f in redraw(d)]
    return files + [f for f in write_comparison(runs, out) if f.suffix == ".png"]


def _warmup(summary: dict) -> float:
    return float(summary["simulated_time_s"]) - float(summary["duration_s"])


def fleet_timeline(steps, end: float, points: int = 1000) -> dict[str, np.ndarray]:
    """A fleet's steps.csv (every replica's rows, one after another, with a ``replica`` column) as
    one timeline, to overlay with other runs: in ``points`` equal time bins over [0, ``end``], the
    replicas' generated tokens and preemptions summed, and their KV usage averaged, as the summary
    averages it. The result reads as a binned step log."""
    rep = np.asarray(steps["replica"])
    width = max(end, 1e-9) / points
    edges = np.arange(points + 1) * width
    gen, pre, kv = np.zeros(points), np.zeros(points), np.zeros(points)
    ids = np.unique(rep)
    for i in ids:
        sel = rep == i
        start = np.asarray(steps["start"], np.float64)[sel]
        stop = start + np.asarray(steps["duration"], np.float64)[sel]
        k = np.minimum((stop / width).astype(np.int64), points - 1)  # a step's counts fall at its end
        gen += np.bincount(k, weights=np.asarray(steps["num_generated"], np.float64)[sel], minlength=points)
        pre += np.bincount(k, weights=np.asarray(steps["num_preemptions"], np.float64)[sel], minlength=points)
        kv += np.diff(_held_integral(start, np.asarray(steps["kv_usage"], np.float64)[sel], end, edges)) / width
    return {
        "bin": np.arange(points),
        "start": edges[:-1],
        "duration": np.full(points, width),
        "kv_usage": kv / max(len(ids), 1),
        "num_generated": gen,
        "num_preemptions": pre,
    }


def _held_integral(start: np.ndarray, values: np.ndarray, end: float, at: np.ndarray) -> np.ndarray:
    """The integral from 0 to each of ``at`` of a step function: 0 before ``start[0]``, ``values[j]``
    from ``start[j]`` to the next start (the last until ``end``)."""
    if not len(start):
        return np.zeros(len(at))
    held = np.diff(np.append(start, max(end, start[-1])))
    area = np.concatenate(([0.0], np.cumsum(values * held)))  # up to each start
    j = np.searchsorted(start, at, side="right") - 1
    jj = np.maximum(j, 0)
    return np.where(j >= 0, area[jj] + values[jj] * (np.minimum(at, start[jj] + held[jj]) - start[jj]), 0.0)


def overlay_series(steps, end: float):
    """A run's steps.csv as one line of an overlay: as it is, or a fleet's as one timeline."""
    return fleet_timeline(steps, end) if "replica" in steps else steps


def load_run(path: Path):
    """A finished run's summary and its steps.csv (a pandas DataFrame)."""
    import json

    import pandas as pd

    path = Path(path)
    summary = json.loads((path / "summary.json").read_text())
    steps = pd.read_csv(path / "steps.csv")
    return summary, steps


def run_labels(dirs: list[Path], names: list[str]) -> list[str]:
    """A label per run: its scenario name, or where names repeat (two runs of one scenario file)
    its folder, with as many parent folders as it takes to tell them apart."""
    if len(set(names)) == len(names):
        return names
    for depth in range(1, 6):
        labels = ["/".join(Path(d).resolve().parts[-depth:]) for d in dirs]
        if len(set(labels)) == len(labels):
            return labels
    return [str(Path(d).resolve()) for d in dirs]


def write_comparison(run_dirs: list[Path], out: Path) -> list[Path]:
    """Overlaid KV-usage and throughput plots and a table for several finished runs."""
    import pandas as pd

    from simulator.outputs.plots import plot_kv_usage, plot_throughput

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(d) for d in run_dirs]
    labels = run_labels(run_dirs, [s["scenario"] for s, _ in runs])
    warm = max(_warmup(s) for s, _ in runs)
    end = max(float(s["simulated_time_s"]) for s, _ in runs)
    series = [(lab, overlay_series(st, float(s["simulated_time_s"]))) for lab, (s, st) in zip(labels, runs)]
    title = run_title(runs[0][0])
    files = [out / "kv_cache_usage.png", out / "throughput.png", out / "comparison.csv"]
    plot_kv_usage(series, files[0], f"KV-cache usage: {title}", warm, end)
    plot_throughput(series, files[1], f"Output throughput: {title}", warm, end)
    table = pd.DataFrame([{**s, "scenario": lab} for lab, (s, _) in zip(labels, runs)])
    write_csv({c: table[c].to_numpy() for c in table.columns}, files[2])
    return files
