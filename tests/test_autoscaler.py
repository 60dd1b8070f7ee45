"""Autoscaled fleets (simulator.fleet.autoscaler): HPA's arithmetic by hand, the fleet's life over a run
against its rules, GPU-hours, and the diurnal arrival rate."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import assert_png_drawn

import workloads.factory
from simulator.engine.rules import RequestStatus
from simulator.errors import ConfigError
from simulator.fleet.autoscaler import recommend
from simulator.metrics import summarize
from simulator.run import simulate
from simulator.scenario.config import blank_scenario
from workloads.arrivals import RateFunction, diurnal_points

BASE = [
    "model=llama-3.1-8b",
    "hardware.gpu=h100-sxm",
    "run.warmup_s=0",
    "workload.prompt_tokens={dist: lognormal, mean: 300, sigma: 0.8, max: 4000}",
    "workload.output_tokens={dist: lognormal, mean: 300, sigma: 0.8, max: 2000}",
]
# 4 -> 60 -> 4 requests/s over 15 minutes: the fleet must grow and shrink.
RAMP = "workload.arrival={type: time_varying, interpolation: linear, schedule: {0: 4, 300: 60, 500: 60, 700: 4}}"
SCALER = "cluster.autoscaler={metric: num_requests_running, target: 24, min_replicas: 1, max_replicas: 6, cold_start_s: 40, interval_s: 10, scale_down_delay_s: 60}"


def run(*over: str):
    return simulate(blank_scenario([*BASE, *over]))


def test_recommendation_by_hand():
    # 3 serving replicas running 90 requests, target 20 each: ceil(90 / 20) = 5.
    assert recommend(90.0, ready=3, current=3, target=20.0, tolerance=0.1) == 5
    # 63 running on 3 with target 20: 1.05 of the target, within the 10% tolerance: stay at 4 (3 + 1 starting).
    assert recommend(63.0, ready=3, current=4, target=20.0, tolerance=0.1) == 4
    # Idle: ceil(0) = 0 (the bounds then hold it at min_replicas).
    assert recommend(0.0, ready=2, current=2, target=20.0, tolerance=0.1) == 0
    # Nothing serving yet (all starting): no reading, no change.
    assert recommend(0.0, ready=0, current=3, target=20.0, tolerance=0.1) == 3
    # Exactly a multiple: 40 / 20 = 2, not 3 (no rounding up of float noise).
    assert recommend(40.0000000001, ready=4, current=4, target=20.0, tolerance=0.0) == 2


@pytest.mark.no_cover  # a whole day's fleet: its lines are traced by the smaller fleet tests
def test_the_fleet_follows_hpa_rules_over_a_ramp():
    res = run(RAMP, "run.duration_s=900", "cluster.replicas=1", SCALER, "cluster.router=least_requests")
    cl = res.engine
    f = cl.autoscaler.columns(res.scenario)
    t, serving, starting, replicas, rec = f["time"], f["serving"], f["starting"], f["replicas"], f["recommended"]
    assert np.all(np.diff(t[1:]) == 10.0) and t[0] == 0.0
    assert serving.max() >= 3, "the ramp to 60 requests/s needs several replicas"
    assert serving[-1] < serving.max(), "and the fleet shrinks again"
    assert np.all((replicas >= 1) & (replicas <= 6)) and np.all((rec >= 1) & (rec <= 6))
    assert np.all(replicas == serving + starting)
    for k in range(1, len(t)):
        window = (t > t[k] - 60 - 1e-9) & (t <= t[k]) & (np.arange(len(t)) >= 1)
        if replicas[k] < replicas[k - 1]:  # shrank: to the highest recommendation of the last 60 s
            assert replicas[k] == rec[window].max(), k
        if replicas[k] > replicas[k - 1]:  # grew (no scale-up window): to this reading's recommendation
            assert replicas[k] == rec[k], k
    # Each started replica served nothing before its cold start ended, and each stopped one got
    # nothing after it was told to drain (it stops once its last request ends).
    c = res.reqs.columns()
    started = [r for r in cl.replicas if r.born > 0]
    assert started
    for r in cl.replicas:
        mine = c["replica"] == r.index
        if r.born > 0 and mine.any():
            assert c["arrival"][mine].min() >= r.born + 40.0 - 1e-9
        if r.state == "stopped" and mine.any():
            assert np.all(c["finish"][mine] <= r.gone + 1e-9)
            assert np.all(c["status"][mine] == RequestStatus.FINISHED)


def test_gpu_hours_are_the_replicas_lifetimes():
    res = run(RAMP, "run.duration_s=900", "cluster.replicas=1", SCALER)
    s = summarize(res)
    cl = res.engine
    by_hand = sum(min(r.gone, 900.0) - r.born for r in cl.replicas) / 3600
    assert s["gpu_hours"] == pytest.approx(by_hand)
    # The same from fleet.csv's 10-s readings (replicas held between readings), within a reading per change.
    f = cl.autoscaler.columns(res.scenario)
    held = (f["serving"] + f["starting"] + f["draining"])[:-1] * np.diff(f["time"])
    changes = int(np.count_nonzero(np.diff(f["serving"] + f["starting"] + f["draining"])))
    assert abs(held.sum() / 3600 - s["gpu_hours"]) <= (changes + 2) * 10 / 3600
    assert s["cost_usd"] == pytest.approx(s["gpu_hours"] * 2.69)  # the catalogue's H100 SXM price
    # A fixed fleet: replicas x GPUs x the run.
    fixed = summarize(run(RAMP, "run.duration_s=120", "cluster.replicas=3", "hardware.tensor_parallel_size=2"))
    assert fixed["gpu_hours"] == pytest.approx(3 * 2 * 120 / 3600)


def test_running_ahead_changes_nothing(monkeypatch):
    """Replicas of a fleet whose arrivals are fixed in advance run ahead of each other
    (simtime.horizon); forced to stop at every event instead, they serve every request the same."""
    over = [RAMP, "run.duration_s=300", "cluster.replicas=3", "cluster.router=least_kv"]
    fast = run(*over)
    assert all(r.engine.independent for r in fast.engine.replicas)
    monkeypatch.setattr(workloads.factory, "completion_driven", lambda w: True)
    slow = run(*over)
    assert not any(r.engine.independent for r in slow.engine.replicas)
    a, b = fast.reqs.columns(), slow.reqs.columns()
    for k in ("replica", "arrival", "first_token", "finish", "num_out", "status"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_closed_loop_and_session_fleets_do_not_run_ahead():
    closed = run("workload.arrival={type: closed_loop, concurrency: 8}", "run.duration_s=20", "cluster.replicas=2")
    assert not any(r.engine.independent for r in closed.engine.replicas)


@pytest.mark.parametrize(
    "over, message",
    [
        (["cluster.autoscaler={metric: kv_cache_usage}"], "cluster.autoscaler.target: required"),
        (["cluster.replicas=5", "cluster.autoscaler={target: 10, max_replicas: 4}"], "min_replicas..max_replicas"),
        (["cluster.autoscaler={target: 10, min_replicas: 5, max_replicas: 4}"], "max_replicas must be >= min_replicas"),
        (
            ["cluster.replicas=[{count: 1}, {count: 1, hardware: {gpu: h200}}]", "cluster.autoscaler={target: 10}"],
            "needs one replica group",
        ),
        (["cluster.autoscaler={target: 10, interval_s: 0}"], "interval_s"),
        (["cluster.autoscaler={target: 10}", "disaggregation={prefill: 1, decode: 1}"], "with disaggregation"),
    ],
)
def test_bad_autoscaler_settings_are_named(over, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        blank_scenario([*BASE, *over])


def test_diurnal_rate_by_hand():
    pts = diurnal_points(20.0, 4.0, 14.0)
    rates = np.array([r for _, r in pts])
    assert rates.max() == pytest.approx(32.0) and rates.min() == pytest.approx(8.0)  # 20 x (1 +- 0.6)
    assert dict(pts)[14 * 3600.0] == pytest.approx(32.0) and dict(pts)[2 * 3600.0] == pytest.approx(8.0)
    fn = RateFunction(pts, "linear")
    # Over a whole day the mean rate is 20 (the cosine averages out; linear pieces within 0.1%).
    day = fn.cum[96] if len(fn.cum) > 96 else None
    assert day is not None and day / 86400 == pytest.approx(20.0, rel=1e-3)
    assert math.isclose(fn.rate(14 * 3600.0), 32.0, rel_tol=1e-9)


def test_a_diurnal_day_arrives_as_its_rate_says():
    res = simulate(
        blank_scenario(
            [
                "run.warmup_s=0",
                "workload.arrival={type: diurnal, rate: 2, peak_to_trough: 3, peak_hour: 6}",
                "workload.prompt_tokens={dist: fixed, value: 64}",
                "workload.output_tokens={dist: fixed, value: 4}",
                "run.duration_s=43200",
                "run.step_log_bin_s=60",
            ]
        )
    )
    arr = res.reqs.columns()["arrival"]
    # rate(h) = 2 (1 + 0.5 cos(2 pi (h - 6) / 24)): over hours 5-7 the cosine averages
    # sin(pi/12) / (pi/12); over hours 0-12, 2 / pi.
    peak = np.count_nonzero((arr >= 5 * 3600) & (arr < 7 * 3600)) / 7200
    x = math.pi / 12
    assert peak == pytest.approx(2 * (1 + 0.5 * math.sin(x) / x), rel=0.03)
    assert len(arr) / 43200 == pytest.approx(2 * (1 + 0.5 * 2 / math.pi), rel=0.02)


def test_a_sweep_of_fleets_recommends_the_cheapest_within_the_slo(tmp_path, drawn):
    import pandas as pd

    from simulator.outputs.plots import plot_sweep_metrics
    from simulator.planning.sweep import recommend as recommend_point

    static, scaled, lean = {"replicas": 6}, {"replicas": 2, "autoscaler": {"target": 32}}, {"replicas": 1}
    df = pd.DataFrame(
        {
            "param:cluster": [static, scaled, lean],
            "status": ["ok"] * 3,
            "num_preemptions": [0, 0, 0],
            "output_throughput": [6000.0, 5990.0, 4000.0],
            "kv_cache_usage_mean": [0.02, 0.04, 0.5],
            "goodput": [28.0, 27.9, 20.0],
            # The autoscaled fleet is 0.3 points below the best attainment (within SLO_SLACK) and
            # cheaper; the lean one is cheaper still but misses the SLO.
            "slo_attainment": [0.999, 0.996, 0.90],
            "gpu_hours": [144.0, 98.0, 24.0],
            "cost_usd": [113.76, 77.22, 19.0],
            "p99_ttft_ms": [83.0, 85.0, 900.0],
            "p99_tpot_ms": [25.0, 30.0, 60.0],
        }
    )
    rec = recommend_point(df, slo=True)
    assert rec["best_cost"] == {"param:cluster": scaled}
    assert "$77.22" in rec["text_cost"] and "costs $113.76" in rec["text_cost"]
    plot_sweep_metrics(df, ["cluster"], tmp_path / "m.png", "fleets", rec)  # values that are mappings
    assert_png_drawn(tmp_path / "m.png")
    # A fleet per position on the x axis, named by its settings, each panel one metric of the sweep.
    fig = drawn["m.png"]
    for ax, col in zip(fig.axes, ("output_throughput", "p99_ttft_ms", "p99_tpot_ms", "num_preemptions")):
        np.testing.assert_array_equal(ax.get_lines()[0].get_xydata(), np.column_stack([range(3), df[col]]))
    ticks = [t.get_text().replace("\n", " ") for t in fig.axes[0].get_xticklabels()]
    assert len(ticks) == 3 and "replicas" in ticks[0] and "autoscaler" in ticks[1]


def test_plan_day_weighs_the_policy_against_a_static_fleet(tmp_path, capsys, drawn):
    import csv
    import json

    from simulator.cli import main

    scen = str(Path(__file__).resolve().parents[1] / "scenarios" / "fleet_day_autoscale.yaml")
    short = ["--set", "run.duration_s=900", "--set", "workload.arrival.rate=40", "--set", "run.step_log_bin_s=5"]
    assert main(["plan", scen, "--day", *short, "--out", str(tmp_path / "p"), "--jobs", "1"]) == 0
    rows = list(csv.DictReader((tmp_path / "p" / "plan_day.csv").read_text().splitlines()))
    assert rows[0]["policy"] == "autoscaled" and rows[1]["policy"].startswith("static at the peak")
    peak = int(rows[0]["replicas"].split("-")[1])
    assert rows[1]["replicas"] == str(peak)
    # The static fleet holds its peak all run: never fewer GPU-hours than the autoscaled one.
    assert float(rows[1]["gpu_hours"]) == pytest.approx(peak * 900 / 3600)
    assert float(rows[0]["gpu_hours"]) <= float(rows[1]["gpu_hours"]) + 1e-9
    rec = json.loads((tmp_path / "p" / "recommendation.json").read_text())
    assert rec["best_cost"]["param:policy"] in {r["policy"] for r in rows}
    assert_png_drawn(tmp_path / "p" / "day.png")
    # Each policy's replicas over the day as the legend names it: the autoscaled fleet's from its
    # fleet.csv, the static fleet a flat line at its peak.
    (ax, *_) = drawn["day.png"].axes
    lines = {str(ln.get_label()).split(":")[0]: ln for ln in ax.get_lines()}
    fleet = pd.read_csv(tmp_path / "p" / "policies" / "autoscaled" / "fleet.csv")
    np.testing.assert_array_equal(lines["autoscaled"].get_ydata(), fleet["serving"] + fleet["starting"])
    static = lines[rows[1]["policy"]]
    assert set(static.get_ydata()) == {peak} and ax.get_ylabel() == "replicas (serving + starting)"
    assert (tmp_path / "p" / "policies" / "autoscaled" / "fleet.csv").is_file()
    capsys.readouterr()
    # Bad requests are one line each.
    assert main(["plan", scen, "--static", "3", "--out", str(tmp_path / "q")]) == 2
    assert main(["plan", scen, "--out", str(tmp_path / "q")]) == 2
    assert main(["plan", scen, "--day", "--set", "cluster.autoscaler=null", "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "--static is for --day" in err[0] and "--rate is required" in err[1] and "needs cluster.autoscaler" in err[2]
