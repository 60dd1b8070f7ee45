"""What a new user meets in the first hour: each surprise found when trying servesim as one, fixed,
with the behaviour a careful user would call right checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_png_drawn, line_of

from simulator.cli import main
from simulator.run import simulate
from simulator.scenario.config import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "run.duration_s=20", "--set", "run.warmup_s=0"]


def test_a_run_whose_every_request_is_rejected_still_writes_its_results(tmp_path, capsys, drawn):
    """Open loop, every prompt too long: the run completes, writes every file, and says why (no
    front-end, so that every request reaches the engine within the run); its plots are drawn, with
    no KV usage and no throughput in them."""
    args = [
        "run",
        "--out",
        str(tmp_path),
        *SHORT,
        "--set",
        "frontend.enabled=false",
        "--set",
        "workload.arrival={type: poisson, rate: 10}",
        "--set",
        "workload.prompt_tokens={dist: fixed, value: 200000}",
        "--set",
        "workload.over_max_model_len=reject",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_rejected"] == summary["num_submitted"] > 100 and summary["num_steps"] == 0
    assert "requests rejected (the first: prompt (200000)" in out
    for f in ("requests.csv", "steps.csv"):
        assert (tmp_path / f).stat().st_size > 0
    kv, tput = drawn["kv_cache_usage.png"].axes[0], drawn["throughput.png"].axes[0]
    name = summary["scenario"]
    assert len(line_of(kv, name).get_xydata()) == 0 and kv.get_ylabel() == "KV-cache usage (%)"
    assert not line_of(tput, name).get_ydata().any()
    for f in ("kv_cache_usage.png", "throughput.png"):
        assert_png_drawn(tmp_path / f)


def test_closed_loop_clients_resubmitting_rejected_requests_stop_with_one_line(tmp_path, capsys):
    """Closed loop without a front-end (whose intake takes time): rejected requests come back at the
    same instant forever; the run stops with a one-line diagnostic (before, it ran out of memory)."""
    args = [
        "run",
        "--out",
        str(tmp_path),
        *SHORT,
        "--set",
        "frontend.enabled=false",
        "--set",
        "workload.prompt_tokens={dist: fixed, value: 200000}",
        "--set",
        "workload.over_max_model_len=reject",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        "error: SimulationStalled: 100,000 requests in a row rejected at t=0.000 s"
    )


def test_num_requests_means_that_many_unless_a_duration_is_set(capsys, tmp_path):
    """run.num_requests alone runs until that many are done (as --num-prompts); with run.duration_s
    too, the run stops at whichever comes first and says so."""
    base = ["--set", "workload.arrival={type: poisson, rate: 20}", "--set", "run.warmup_s=0"]
    sc, _ = load_scenario(
        None, ["workload.arrival={type: poisson, rate: 20}", "run.warmup_s=0", "run.num_requests=3000"]
    )
    res = simulate(sc)
    assert res.reqs.n == 3000 and res.stopped_by == "requests done" and res.end_time > 140
    assert (
        main(["run", "--out", str(tmp_path), *base, "--set", "run.num_requests=3000", "--set", "run.duration_s=60"])
        == 0
    )
    assert "stopped at run.duration_s (60 s) after submitting 1,2" in capsys.readouterr().out


def test_truncated_requests_are_counted_and_reported(tmp_path, capsys):
    args = [
        "run",
        "--out",
        str(tmp_path),
        *SHORT,
        "--set",
        "workload.arrival={type: poisson, rate: 2}",
        "--set",
        "workload.prompt_tokens={dist: fixed, value: 1000000}",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_truncated"] == summary["num_submitted"] > 10
    assert f"{summary['num_truncated']} requests cut to fit max_model_len" in out


def test_an_empty_scenario_file_runs_the_documented_defaults(tmp_path):
    """An empty file gets `servesim fields`' defaults (64 closed-loop clients...), not the built-in
    collapse case that `servesim run` runs without a file (which `fields` and `run --help` name)."""
    (tmp_path / "empty.yaml").write_text("")
    sc, _ = load_scenario(str(tmp_path / "empty.yaml"))
    assert sc.workload.arrival.concurrency == 64 and sc.workload.output_tokens.value == 256
    default, _ = load_scenario(None)
    assert default.workload.arrival.concurrency == 1200


def test_overload_and_unfinished_runs_are_flagged(tmp_path, capsys):
    """An open-loop run whose queue grows is called overloaded, and a 'finished 0' beside a high
    throughput is explained."""
    args = [
        "run",
        "--out",
        str(tmp_path),
        "--set",
        "run.duration_s=30",
        "--set",
        "run.warmup_s=10",
        "--set",
        "workload.arrival={type: poisson, rate: 200}",
        "--set",
        "workload.output_tokens={dist: fixed, value: 2000}",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "overloaded:" in out and "requests still waiting at the end" in out
    assert "no request that arrived after the warm-up finished before the run ended" in out


def test_runs_go_to_their_own_folder_and_a_replaced_run_is_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", *SHORT]) == 0
    assert (tmp_path / "results" / "collapse_c1200" / "summary.json").is_file()
    assert "replaced" not in capsys.readouterr().out
    assert main(["run", *SHORT]) == 0
    assert "note: collapse_c1200: replaced the earlier run in results/collapse_c1200/" in capsys.readouterr().out


def test_compare_tells_two_runs_of_one_scenario_apart(tmp_path, capsys):
    for d in ("a", "b"):
        assert main(["run", "--out", str(tmp_path / d / "run"), *SHORT]) == 0
    capsys.readouterr()
    assert (
        main(["compare", str(tmp_path / "a" / "run"), str(tmp_path / "b" / "run"), "--out", str(tmp_path / "ab")]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("a/run ") and lines[2].startswith("b/run ")


def test_plot_redraws_a_folder_of_runs_and_a_sweep(tmp_path, capsys):
    scen = [str(ROOT / "scenarios" / f"collapse_c{c}.yaml") for c in (512, 1200)]
    assert main(["run", *scen, "--out", str(tmp_path / "runs"), *SHORT]) == 0
    (tmp_path / "runs" / "kv_cache_usage.png").unlink()
    assert main(["plot", str(tmp_path / "runs")]) == 0
    assert (tmp_path / "runs" / "kv_cache_usage.png").is_file()
    assert (
        main(["sweep", "--param", "engine.max_num_seqs=256,512", *SHORT, "--out", str(tmp_path / "sw"), "--jobs", "1"])
        == 0
    )
    (tmp_path / "sw" / "metrics_vs_knob.png").unlink()
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "sw")]) == 0
    assert (tmp_path / "sw" / "metrics_vs_knob.png").is_file() and "metrics_vs_knob.png" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["plot"])
    assert main(["plot", str(tmp_path / "nothing")]) == 2


def test_a_sweep_whose_points_all_fail_lists_only_what_it_wrote(tmp_path, capsys):
    args = ["sweep", "--param", "engine.max_num_seqs=0,-1", *SHORT, "--out", str(tmp_path), "--jobs", "1"]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "0 of 2 points ok, 2 failed" in out
    assert "wrote" in out and "kv_cache_usage.png" not in out.split("wrote")[-1]
    assert not (tmp_path / "kv_cache_usage.png").exists()


def test_parity_runs_from_any_folder(tmp_path):
    """The recorded vLLM traces ship with the package: `servesim parity` needs no checkout."""
    out = subprocess.run(
        [sys.executable, "-m", "simulator", "parity"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "replays exact" in out.stdout.splitlines()[-1]


def test_long_runs_show_a_progress_bar(monkeypatch, capsys):
    """On a terminal (forced here) a run that takes a while shows its progress in simulated seconds."""
    from simulator import progress

    monkeypatch.setenv("SERVESIM_PROGRESS", "1")
    bar = progress.RunProgress("x", 100.0, None, after_s=0.0)
    for t in range(1, 200):
        bar(t / 2, 0)
    bar.close()
    err = capsys.readouterr().err
    assert "x:" in err and "sim s" in err


def test_the_summary_line_shows_the_slo_and_a_queue_that_grows_is_overloaded(tmp_path, capsys):
    """With `slo:` set, the table has the share within the SLO and the goodput; a Poisson run whose
    queue grows through most of its measured window is called overloaded though fewer than a tenth
    of its requests are waiting at the end (Llama-3.1-70B past its capacity: TTFT rising to seconds,
    almost nothing within the SLO); the same server below capacity is not."""
    (tmp_path / "s.yaml").write_text(
        "name: seventy\nmodel: llama-3.1-70b\nhardware: {gpu: h100-sxm, tensor_parallel_size: 4}\n"
        "workload:\n  arrival: {type: poisson, rate: 10}\n  prompt_tokens: {dist: fixed, value: 1024}\n"
        "  output_tokens: {dist: lognormal, mean: 300, sigma: 0.5}\n"
        "slo: {p99_ttft_ms: 2000, p99_tpot_ms: 100}\nrun: {duration_s: 240, warmup_s: 30}\n"
    )
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "over")]) == 0
    out = capsys.readouterr().out
    head, row = out.splitlines()[:2]
    assert "in SLO" in head and "goodput req/s" in head
    s = json.loads((tmp_path / "over" / "summary.json").read_text())
    assert f"{s['slo_attainment']:.1%}" in row and s["slo_attainment"] < 0.05
    assert s["num_waiting_at_end"] < 0.1 * s["num_submitted"]
    assert "overloaded: the queue grew in" in out and "within the SLO" in out
    assert (
        main(["run", str(tmp_path / "s.yaml"), "--set", "workload.arrival.rate=8", "--out", str(tmp_path / "ok")]) == 0
    )
    out = capsys.readouterr().out
    assert "overloaded" not in out and "100.0%" in out.splitlines()[1]


def test_a_day_plan_shows_each_policy_in_simulated_hours(monkeypatch, capsys, tmp_path):
    """`plan --day` runs each policy with a bar of its own, named for the policy and counting
    simulated hours (a bar per line where two run at once); validation runs show a bar of runs."""
    from simulator import progress
    from simulator.planning import plan_day

    monkeypatch.setenv("SERVESIM_PROGRESS", "1")
    with progress.labelled("static (6 replicas)", 1):
        bar = progress.RunProgress("fleet_day", 6 * 3600.0, None, after_s=0.0)
    for t in range(1, 200):
        bar(t * 100.0, 0)
    assert bar.bar.desc == "static (6 replicas)" and bar.bar.pos in (1, -1) and bar.bar.total == 6.0
    bar.close()
    assert "simulated h" in capsys.readouterr().err
    seen = []

    def fake_tasks(fn, items, *a, **k):
        seen.extend(items)
        return iter([(i, {"error": "not run here"}) for i in range(len(items))])

    monkeypatch.setattr(plan_day, "run_tasks", fake_tasks)
    plan_day._run([("autoscaled", {}), ("static (2 replicas)", {})], tmp_path, 0, "local", None, None)
    assert [item[2] for item in seen] == [("autoscaled", 0), ("static (2 replicas)", 1)]
    runs = progress.Progress(3, "validate: public runs", " runs")
    runs.done(False)
    runs.close()
    assert "1/3 runs" in capsys.readouterr().err
