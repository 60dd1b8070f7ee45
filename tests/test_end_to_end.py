"""The CLI end to end: results directory contents and byte-identical reruns."""

from __future__ import annotations

import json
import subprocess
import sys

from simulator.cli import main

SMALL = ["--set", "run.duration_s=20", "--set", "run.warmup_s=2", "--set", "workload.arrival.concurrency=64"]


def test_run_writes_results_and_is_deterministic(tmp_path):
    """Same scenario and seed: byte-identical summary.json (no wall-clock keys), requests.csv and steps.csv."""
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
    assert (a / "kv_cache_usage.png").stat().st_size > 10_000
    assert (a / "throughput.png").stat().st_size > 10_000


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
