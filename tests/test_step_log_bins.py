"""The binned step log (``run.step_log_bin_s``): its rows are exactly the per-step log grouped by the
bin in which each step starts, and the summary does not depend on which log a run keeps."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from conftest import assert_png_drawn, line_of, window_of
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.engine.step_log import BinnedStepLog
from simulator.errors import ConfigError
from simulator.metrics import step_frame, summarize
from simulator.run import simulate
from simulator.scenario.config import load_scenario

SCENARIOS = [
    # the collapse case, short: preemptions, full cache, warm-up inside the run
    ("scenarios/collapse_c1200.yaml", ["run.duration_s=40", "run.warmup_s=7.3", "engine.num_gpu_blocks_override=8000"]),
    # open loop with idle gaps (bins without steps)
    (None, ["workload.arrival={type: poisson, rate: 0.7}", "run.duration_s=60", "run.warmup_s=5"]),
]


def _both(path, overrides, bin_s):
    full = simulate(load_scenario(path, overrides)[0])
    binned = simulate(load_scenario(path, [*overrides, f"run.step_log_bin_s={bin_s}"])[0])
    return full, binned


# The per-step counts a bin sums (the speculative-decoding ones are in steps.csv with drafts on).
COUNTS = (
    "num_seqs",
    "prefill_tokens",
    "decode_tokens",
    "recomputed_tokens",
    "num_preemptions",
    "num_generated",
    "num_finished",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
)


def _group(steps: pd.DataFrame, bin_s: float) -> pd.DataFrame:
    """The per-step log grouped by bin, by pandas: what the binned log must equal."""
    s = steps.assign(bin=np.floor(steps["start"] / bin_s).astype(np.int64))
    for c in ("num_running", "num_waiting", "num_swapped", "kv_usage"):
        s[c + "_w"] = s[c] * s["duration"]
    g = s.groupby("bin")
    out = g[[c for c in COUNTS if c in steps]].sum()
    out["num_steps"] = g.size()
    out["busy_s"] = g["duration"].sum()
    out["kv_usage_max"] = g["kv_usage"].max()
    for c in ("num_running", "num_waiting", "num_swapped", "kv_usage"):
        out[c] = g[c + "_w"].sum() / out["busy_s"]
    return out


@pytest.mark.parametrize("path,overrides", SCENARIOS)
@pytest.mark.parametrize("bin_s", [1.0, 0.37])
def test_bins_are_the_steps_grouped_and_the_summary_is_unchanged(path, overrides, bin_s):
    full, binned = _both(path, overrides, bin_s)
    assert isinstance(binned.engine.log, BinnedStepLog)
    steps, bins = step_frame(full), step_frame(binned).set_index("bin")
    want = _group(steps, bin_s)
    assert list(bins.index) == list(want.index)  # only bins with steps, in order
    assert np.allclose(bins["start"], want.index * bin_s) and (bins["duration"] == bin_s).all()
    for c in ("num_steps", *(c for c in COUNTS if c in steps)):
        assert (bins[c].to_numpy() == want[c].to_numpy()).all(), c
    for c in ("busy_s", "kv_usage_max", "num_running", "num_waiting", "num_swapped", "kv_usage"):
        assert np.allclose(bins[c], want[c], rtol=1e-12, atol=1e-12), c
    # Same simulation either way; the summary's window totals are kept exactly as the steps pass.
    a, b = summarize(full), summarize(binned)
    for k, v in a.items():
        if isinstance(v, float):
            assert math.isclose(v, b[k], rel_tol=1e-12, abs_tol=1e-15), k
        else:
            assert v == b[k], k
    assert a["num_preemptions"] > 0 or path is None


@settings(max_examples=40, deadline=None)
@given(
    durations=st.lists(st.floats(1e-4, 3.0), min_size=1, max_size=300),
    gaps=st.lists(st.floats(0.0, 5.0), min_size=300, max_size=300),
    bin_s=st.floats(0.05, 4.0),
    t0=st.floats(0.0, 50.0),
    seed=st.integers(0, 2**31),
)
def test_bins_and_window_totals_on_random_step_sequences(durations, gaps, bin_s, t0, seed):
    """Random step sequences (crossing the stage buffer's flushes): bins equal the grouped steps and
    the window totals equal the per-step log's, whatever the bin width and warm-up."""
    from types import SimpleNamespace

    from simulator.engine.step_log import StepLog

    rng = np.random.default_rng(seed)
    k = len(durations)
    start = np.cumsum(np.concatenate(([0.0], np.array(durations[:-1]) + np.array(gaps[: k - 1]))))
    rows = {
        "start": start,
        "duration": np.array(durations),
        "num_running": rng.integers(0, 50, k),
        "num_waiting": rng.integers(0, 50, k),
        "num_swapped": rng.integers(0, 3, k),
        "num_free_blocks": rng.integers(0, 101, k),
        "num_seqs": rng.integers(0, 50, k),
        "prefill_tokens": rng.integers(0, 900, k),
        "decode_tokens": rng.integers(0, 50, k),
        "recomputed_tokens": rng.integers(0, 90, k),
        "num_preemptions": rng.integers(0, 3, k),
        "num_generated": rng.integers(0, 50, k),
        "num_finished": rng.integers(0, 5, k),
        "spec_drafts": rng.integers(0, 5, k),
        "spec_draft_tokens": rng.integers(0, 20, k),
        "spec_accepted_tokens": rng.integers(0, 10, k),
    }
    full, binned = StepLog(100), BinnedStepLog(100, bin_s, t0)
    binned._STAGE = 7  # flush every few steps, so bins are folded across many flushes
    for i in range(k):
        r = {c: v[i] for c, v in rows.items()}
        work = SimpleNamespace(
            num_seqs=r["num_seqs"], num_prefill_tokens=r["prefill_tokens"], num_decode_tokens=r["decode_tokens"]
        )
        plan = SimpleNamespace(
            work=work,
            num_running=r["num_running"],
            num_waiting=r["num_waiting"],
            num_swapped=r["num_swapped"],
            num_free_blocks=r["num_free_blocks"],
            recomputed_tokens=r["recomputed_tokens"],
            preempted=(0,) * int(r["num_preemptions"]),
        )
        out = SimpleNamespace(
            num_generated=r["num_generated"],
            finished=(0,) * int(r["num_finished"]),
            itl_gaps=(),
            spec=(r["spec_drafts"], r["spec_draft_tokens"], r["spec_accepted_tokens"]),
        )
        for log in (full, binned):
            log.add(float(r["start"]), float(r["duration"]), plan, out)
    steps = pd.DataFrame(full.columns())
    want = _group(steps, bin_s)
    got = pd.DataFrame(binned.columns())
    assert len(got) == len(want)
    assert (got["num_steps"].to_numpy() == want["num_steps"].to_numpy()).all()
    for c in ("num_generated", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens"):
        assert (got[c].to_numpy() == want[c].to_numpy()).all(), c
    assert np.allclose(got["kv_usage"], want["kv_usage"], rtol=1e-9)
    assert np.allclose(got["kv_usage_max"], want["kv_usage_max"], rtol=0)
    end = float(start[-1] + durations[-1])
    a, b = full.window(t0, end), binned.window(t0, end)
    assert (a.num_generated, a.num_preemptions, a.recomputed_tokens) == (
        b.num_generated,
        b.num_preemptions,
        b.recomputed_tokens,
    )
    assert math.isclose(a.kv_usage_mean, b.kv_usage_mean, rel_tol=1e-9, abs_tol=1e-12)
    assert a.kv_usage_max == b.kv_usage_max


def test_binned_run_writes_results_and_plots(tmp_path, drawn):
    """The CLI with a binned log: steps.csv has one row per bin and the plots are drawn from it, each
    bin's KV usage at the bin's centre and every generated token in the throughput."""
    out = tmp_path / "r"
    rc = main(
        [
            "run",
            "--set",
            "run.duration_s=30",
            "--set",
            "run.warmup_s=5",
            "--set",
            "run.step_log_bin_s=2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    steps = pd.read_csv(out / "steps.csv")
    assert steps.columns[0] == "bin" and (steps["duration"] == 2).all() and len(steps) <= 15
    kv = drawn["kv_cache_usage.png"].axes[0]
    name = kv.get_lines()[0].get_label()
    np.testing.assert_allclose(
        line_of(kv, name).get_xydata(),
        np.column_stack([steps["start"] + steps["duration"] / 2, 100 * steps["kv_usage"]]),
        atol=1e-6,  # steps.csv's rounding
    )
    tput = drawn["throughput.png"].axes[0]
    rate = line_of(tput, name).get_ydata()
    assert float(np.sum(rate)) * window_of(tput.get_title()) == pytest.approx(float(steps["num_generated"].sum()))
    for f in ("kv_cache_usage.png", "throughput.png"):
        assert_png_drawn(out / f)


@pytest.mark.parametrize("value", [0, -1])
def test_bin_width_must_be_positive(value):
    with pytest.raises(ConfigError, match=rf"run\.step_log_bin_s must be > 0.0 s \(got {value}\)"):
        load_scenario(None, [f"run.step_log_bin_s={value}"])


def test_long_per_step_logs_get_a_hint_binned_ones_do_not(tmp_path, monkeypatch, capsys):
    """A run with more steps than the threshold is told how to get a row per second instead."""
    import simulator.outputs.notes as notes

    monkeypatch.setattr(notes, "STEP_ROWS_HINT", 100)
    assert main(["run", "--set", "run.duration_s=20", "--set", "run.warmup_s=0", "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"note: collapse_c1200: steps\.csv has [\d,]+ rows", out) and "run.step_log_bin_s=1" in out
    assert (
        main(
            [
                "run",
                "--set",
                "run.duration_s=20",
                "--set",
                "run.warmup_s=0",
                "--set",
                "run.step_log_bin_s=1",
                "--out",
                str(tmp_path / "b"),
            ]
        )
        == 0
    )
    assert "steps.csv has" not in capsys.readouterr().out


def test_binned_usage_is_plotted_at_bin_centres():
    """A bin's usage is its mean over the bin, so the plot places it mid-bin (a step's at its start)."""
    from simulator.outputs.plots import _usage_series

    bins = pd.DataFrame({"bin": [0, 3], "start": [0.0, 6.0], "duration": [2.0, 2.0], "kv_usage": [0.5, 0.25]})
    t, u = _usage_series(bins)
    assert list(t) == [1.0, 7.0] and list(u) == [50.0, 25.0]
    steps = pd.DataFrame({"step": [0, 1], "start": [0.0, 0.4], "duration": [0.4, 0.3], "kv_usage": [0.5, 0.25]})
    assert list(_usage_series(steps)[0]) == [0.0, 0.4]
