"""The CLI end to end: results directory contents and byte-identical reruns."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import assert_png_drawn, line_of, window_of

from simulator.cli import main

SMALL = ["--set", "run.duration_s=20", "--set", "run.warmup_s=2", "--set", "workload.arrival.concurrency=64"]


def test_run_writes_results_and_is_deterministic(tmp_path, drawn):
    """Same scenario and seed: byte-identical summary.json (no wall-clock keys), requests.csv and steps.csv;
    the two plots show the run's own KV usage and throughput."""
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", "--out", str(a), *SMALL]) == 0
    assert main(["run", "--out", str(b), *SMALL]) == 0
    for name in ("requests.csv", "steps.csv", "scenario.yaml", "summary.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sa = json.loads((a / "summary.json").read_text())
    assert not any("wall" in k or "speedup" in k for k in sa)
    for key in (
        "request_throughput",
        "output_throughput",
        "mean_ttft_ms",
        "p99_itl_ms",
        "kv_cache_usage_mean",
        "num_preemptions",
        "num_completed",
        "num_rejected",
        "simulated_time_s",
        "num_steps",
    ):
        assert key in sa
    assert sa["num_completed"] > 0
    steps = pd.read_csv(b / "steps.csv")  # the figures drawn last are run b's, identical to a's
    kv = drawn["kv_cache_usage.png"].axes[0]
    name = json.loads((b / "summary.json").read_text())["scenario"]
    assert kv.get_title().startswith(f"KV-cache usage: {name}") and kv.get_ylabel() == "KV-cache usage (%)"
    assert kv.get_xlabel() == "simulated time (s)"
    t, u = line_of(kv, name).get_xydata().T
    # More steps than the 2,000 points drawn: thinned in time order, each point its bucket's peak.
    assert len(steps) > 2000 and 1000 < len(t) <= 2000 and (np.diff(t) > 0).all()
    assert steps["start"].min() - 1e-6 <= t[0] and t[-1] <= steps["start"].max() + 1e-6  # steps.csv rounds
    usage = np.unique(100 * steps["kv_usage"])
    nearest = np.abs(usage[np.abs(usage[:, None] - u[None, :]).argmin(axis=0)] - u)
    assert nearest.max() < 1e-6 and u.max() == pytest.approx(usage.max())  # every point a step's, the peak kept
    tput = drawn["throughput.png"].axes[0]
    assert tput.get_ylabel() == "output throughput (tokens/s)"
    w = window_of(tput.get_title())
    rate = line_of(tput, name).get_ydata()
    # Every generated token is drawn once: the windows' rates add up to the run's output tokens.
    assert float(np.sum(rate)) * w == pytest.approx(float(steps["num_generated"].sum()), rel=1e-9)
    for f in ("kv_cache_usage.png", "throughput.png"):
        assert_png_drawn(a / f)


def test_different_seed_changes_results(tmp_path):
    """The seed matters: another seed gives other lengths."""
    a, b = tmp_path / "a", tmp_path / "b"
    main(["run", "--out", str(a), *SMALL])
    main(["run", "--out", str(b), *SMALL, "--set", "run.seed=1"])
    assert (a / "requests.csv").read_bytes() != (b / "requests.csv").read_bytes()


def test_bad_input_is_one_line_without_traceback(tmp_path):
    """A bad value exits 2 with one line on stderr."""
    p = subprocess.run(
        [sys.executable, "-m", "simulator", "run", "--out", str(tmp_path), "--set", "engine.max_num_seqs=0"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2
    assert p.stderr.strip() == "error: engine.max_num_seqs must be >= 1 (got 0)"
    assert "Traceback" not in p.stderr
