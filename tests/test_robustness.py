"""Edge cases a capacity-planning tool must survive: nothing arrives, one request, huge concurrency,
stalls, broken sweep points, interrupted sweeps, and identical results across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import Sim

from simulator.cli import main
from simulator.engine.core import SimulationStalled
from simulator.engine.params import P
from simulator.metrics import summarize
from simulator.run import simulate
from simulator.scenario.config import load_scenario


def _run(*overrides):
    sc, _ = load_scenario(None, list(overrides))
    return simulate(sc)


def test_zero_arrivals_gives_an_empty_but_valid_summary():
    """A Poisson rate so low that nothing arrives: zero throughput, no crash, no NaN in the summary."""
    res = _run("workload.arrival={type: poisson, rate: 1.0e-9}", "run.duration_s=10", "run.warmup_s=0")
    s = summarize(res)
    assert s["num_submitted"] == 0 and s["output_throughput"] == 0 and s["num_steps"] == 0
    assert s["mean_ttft_ms"] is None
    json.dumps(s, allow_nan=False)


def test_single_request_runs_to_completion():
    """One request, alone: it completes with exactly its output length; its TTFT is the front-end's
    intake, one prefill step and the front-end's delivery of one token, by hand; without a
    front-end, one prefill step."""

    one = (
        "workload.arrival={type: poisson, rate: 100}",
        "run.num_requests=1",
        "run.duration_s=null",
        "workload.prompt_tokens={dist: fixed, value: 100}",
        "workload.output_tokens={dist: fixed, value: 7}",
    )
    for frontend in (True, False):
        res = _run(*one, f"frontend.enabled={str(frontend).lower()}")
        R, cp = res.reqs, res.engine.cost.params
        assert R.n == 1 and R.num_out[0] == 7 and res.engine.num_steps == 7
        log = res.engine.log.columns()
        intake = cp[P.FE_REQUEST_S] + 100 * cp[P.FE_PROMPT_TOKEN_S]
        deliver = cp[P.FE_STEP_S] + cp[P.FE_TOKEN_S]
        assert (intake > 0 and deliver > 0) == frontend
        assert log["start"][0] == pytest.approx(R.arrival[0] + intake + cp[P.FE_LATENCY_S], abs=1e-12)
        assert R.first_token[0] - R.arrival[0] == pytest.approx(
            intake + cp[P.FE_LATENCY_S] + log["duration"][0] + deliver, abs=1e-12
        )
        assert R.finish[0] == pytest.approx(
            log["start"][6] + log["duration"][6] + deliver + cp[P.FE_FINISH_S], abs=1e-12
        )


def test_enormous_concurrency_is_admitted_as_memory_allows():
    """20,000 closed-loop clients: nothing rejected, the running list never exceeds max_num_seqs (the
    engine alone: one API server would take minutes to take them all in)."""
    res = _run(
        "workload.arrival.concurrency=20000",
        "run.duration_s=3",
        "run.warmup_s=0",
        "engine.max_num_seqs=2048",
        "frontend.enabled=false",
    )
    log = res.engine.log.columns()
    assert log["num_running"].max() <= 2048
    assert res.reqs.n == 20000
    assert int(np.count_nonzero(res.reqs.status[: res.reqs.n] == 4)) == 0


def test_watchdog_stops_a_stalled_engine_with_a_diagnostic():
    """An engine that has work but schedules nothing raises SimulationStalled naming queues and pool, instead of hanging."""
    sim = Sim([], num_gpu_blocks=8)
    sim.engine.sched.has_work = lambda: True  # work that can never be scheduled
    with pytest.raises(SimulationStalled, match=r"no progress for \d+ steps.*waiting=.*free_blocks="):
        sim.run(until=1e9)


def test_sweep_survives_a_broken_point_and_resumes(tmp_path, capsys):
    """A point with an invalid value fails alone; a second run reuses the finished points."""
    args = [
        "sweep",
        "--param",
        "engine.max_num_seqs=0,64,128",
        "--set",
        "run.duration_s=10",
        "--set",
        "run.warmup_s=0",
        "--set",
        "workload.arrival.concurrency=64",
        "--out",
        str(tmp_path),
        "--jobs",
        "1",
    ]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "FAILED: engine.max_num_seqs must be >= 1 (got 0)" in out
    assert "2 of 3 points ok, 1 failed" in out
    assert main(args) == 1
    out = capsys.readouterr().out
    assert out.count(": cached") == 2
    rows = (tmp_path / "sweep.csv").read_text().splitlines()
    assert len(rows) == 4 and (tmp_path / "recommendation.json").is_file()


def test_sweep_recomputes_damaged_and_stale_points_and_says_why(tmp_path, capsys, monkeypatch):
    """A cached point is reused only if it is complete and was computed from the same scenario, code
    and input files: a truncated summary.json, a missing requests.csv, a changed trace file or a
    changed simulator are recomputed, each with the reason in the progress line."""
    from simulator.planning import sweep

    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_time_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.05},100,20\n" for i in range(200))
    )
    out = tmp_path / "sw"
    args = [
        "sweep",
        "--param",
        "engine.max_num_seqs=16,32,64",
        "--set",
        f"workload.trace={trace}",
        "--set",
        "run.duration_s=null",
        "--set",
        "run.num_requests=200",
        "--out",
        str(out),
        "--jobs",
        "1",
    ]
    assert main(args) == 0
    capsys.readouterr()
    pts = sorted((out / "points").iterdir())
    (pts[0] / "summary.json").write_text('{"scenario": "max_num_seqs=1')  # what a crash mid-write leaves
    (pts[1] / "requests.csv").unlink()
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "recomputed, damaged: summary.json unreadable" in text
    assert "recomputed, damaged: requests.csv missing or empty" in text
    assert text.count(": cached") == 1
    trace.write_text(trace.read_text().replace(",100,20", ",120,20"))  # the input changed: nothing is reused
    assert main(args) == 0
    assert capsys.readouterr().out.count("recomputed, computed from another scenario, code or input file") == 3
    assert main(args) == 0
    assert capsys.readouterr().out.count(": cached") == 3
    monkeypatch.setattr(sweep, "code_hash", lambda: "another version")  # a behaviour change
    assert main(args) == 0
    assert capsys.readouterr().out.count(": cached") == 0


def test_results_identical_across_processes(tmp_path):
    """Two separate interpreter processes give byte-identical requests.csv and steps.csv."""
    outs = []
    for i in range(2):
        d = tmp_path / f"r{i}"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "simulator",
                "run",
                "--out",
                str(d),
                "--set",
                "run.duration_s=15",
                "--set",
                "run.warmup_s=0",
                "--set",
                "workload.arrival.concurrency=200",
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": str(i)},
        )
        outs.append(d)
    for name in ("requests.csv", "steps.csv"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()


def _slow_write(item: tuple[str, float]) -> dict:
    """A task for ``run_tasks``: wait, then leave a file (the mark of a finished item)."""
    import time
    from pathlib import Path

    path, wait = item
    time.sleep(wait)
    Path(path).write_text("done")
    return {"path": path}


def test_closing_the_local_executor_early_ends_its_workers(tmp_path):
    """After an interrupt the caller counts what finished: once the task generator is closed, no
    queued or running item may finish behind its back (workers used to take the next item)."""
    import time

    from simulator.planning.executor import run_tasks

    items = [(str(tmp_path / f"{i}"), 0.0 if i == 0 else 2.0) for i in range(5)]
    tasks = run_tasks(_slow_write, items, jobs=2)
    i, r = next(tasks)
    assert i == 0 and r == {"path": items[0][0]}
    tasks.close()
    time.sleep(3.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]


def test_an_interrupted_sweep_counts_what_finished_and_says_its_recommendation_is_partial(
    tmp_path, capsys, monkeypatch
):
    """Ctrl-C after two points were reported and a third had finished unreported: three counted ok,
    one not run, and the recommendation says it comes from three of four points."""
    from simulator.planning import sweep

    real = sweep.run_tasks

    def interrupted(fn, items, *a, **k):
        for n, (i, r) in enumerate(real(fn, items[:3], 1)):
            if n == 2:  # the third finished, but the interrupt came first
                raise KeyboardInterrupt
            yield i, r

    monkeypatch.setattr(sweep, "run_tasks", interrupted)
    code = main(
        [
            "sweep",
            "--param",
            "engine.max_num_seqs=16,32,64,128",
            "--set",
            "run.duration_s=5",
            "--set",
            "run.warmup_s=0",
            "--set",
            "workload.arrival.concurrency=32",
            "--out",
            str(tmp_path),
            "--jobs",
            "1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 130
    assert "3 of 4 points ok, 0 failed, 1 not run" in out
    assert "(from the 3 of 4 points that finished; 1 not run (interrupted))" in out
    rec = json.loads((tmp_path / "recommendation.json").read_text())
    assert rec["points_finished"] == 3 and rec["points"] == 4


def test_the_same_scenario_twice_and_a_folder_above_results_are_refused(tmp_path, capsys, monkeypatch):
    """One scenario file given twice to run (by one name or two) is refused in one line, nothing run;
    a report of a folder that holds results folders but none of its own names them and writes nothing."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(tmp_path)
    f = str(root / "scenarios" / "collapse_c512.yaml")
    for args in ([f, f], [f, str(root / "scenarios" / ".." / "scenarios" / "collapse_c512.yaml")]):
        assert main(["run", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "given twice; each file runs once" in err
    assert not (tmp_path / "results").exists()
    short = ["--set", "run.duration_s=5", "--set", "run.warmup_s=0", "--set", "workload.arrival.concurrency=8"]
    assert main(["run", f, "--out", "results/one", *short]) == 0
    capsys.readouterr()
    assert main(["report", "results"]) == 2
    err = capsys.readouterr().err
    assert "results holds no run, fleet, sweep or plan of its own, only results folders inside it (one)" in err
    assert not (tmp_path / "results" / "report.html").exists()
    assert main(["report", "results/one"]) == 0
