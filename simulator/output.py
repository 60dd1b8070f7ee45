"""Write a run's results directory, and comparisons of several runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from simulator.metrics import atomic_write_text, request_frame, step_frame, summarize, write_csv, write_json
from simulator.plots import plot_kv_usage, plot_throughput


def _title(s: dict) -> str:
    return f"{s['model']} on {s['gpu']} x{s['tensor_parallel_size']}"


def write_run(result, raw_scenario: dict, out: Path) -> dict:
    """summary.json, requests.csv, steps.csv, scenario.yaml and two plots; returns the summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(result)
    steps = step_frame(result)
    write_csv(request_frame(result), out / "requests.csv")
    write_csv(steps, out / "steps.csv")
    atomic_write_text(out / "scenario.yaml", yaml.safe_dump(raw_scenario, sort_keys=False))
    label = f"{summary['scenario']}"
    warm = result.scenario.run.warmup_s
    plot_kv_usage([(label, steps)], out / "kv_cache_usage.png", f"KV-cache usage: {label}, {_title(summary)}", warm)
    plot_throughput([(label, steps)], out / "throughput.png", f"Output throughput: {label}, {_title(summary)}", warm)
    write_json(summary, out / "summary.json")  # written last: its presence means the run is complete
    return summary


def redraw(out: Path) -> list[Path]:
    """Redraw a finished run's plots from summary.json and steps.csv."""
    summary, steps = load_run(out)
    label = summary["scenario"]
    warm = float(summary["simulated_time_s"]) - float(summary["duration_s"])
    files = [Path(out) / "kv_cache_usage.png", Path(out) / "throughput.png"]
    plot_kv_usage([(label, steps)], files[0], f"KV-cache usage: {label}, {_title(summary)}", warm)
    plot_throughput([(label, steps)], files[1], f"Output throughput: {label}, {_title(summary)}", warm)
    return files


def load_run(path: Path) -> tuple[dict, pd.DataFrame]:
    import json

    path = Path(path)
    summary = json.loads((path / "summary.json").read_text())
    steps = pd.read_csv(path / "steps.csv")
    return summary, steps


def write_comparison(run_dirs: list[Path], out: Path) -> list[Path]:
    """Overlaid KV-usage and throughput plots and a table for several finished runs."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(d) for d in run_dirs]
    labels = [s["scenario"] for s, _ in runs]
    series = [(lab, st) for lab, (_, st) in zip(labels, runs)]
    warm = max(float(s.get("simulated_time_s", 0)) - float(s.get("duration_s", 0)) for s, _ in runs)
    title = _title(runs[0][0])
    files = [out / "kv_cache_usage.png", out / "throughput.png", out / "comparison.csv"]
    plot_kv_usage(series, files[0], f"KV-cache usage: {title}", warm)
    plot_throughput(series, files[1], f"Output throughput: {title}", warm)
    write_csv(pd.DataFrame([s for s, _ in runs]), files[2])
    return files
