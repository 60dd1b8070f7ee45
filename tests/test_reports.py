"""What servesim tells the user: overload however a run is limited, runs that measured nothing (and
why), fleets overlaid as fleets, vLLM's own metric series, a recommendation that says what it
means, and help for every option."""

from __future__ import annotations

import argparse
import contextlib
import io

import numpy as np
import pandas as pd
import pytest

from simulator.cli import main, parser
from simulator.metrics import step_columns, throughput_series
from simulator.outputs.export import openmetrics_text, trace_events
from simulator.outputs.results import fleet_timeline, load_run
from simulator.planning.sweep import recommend
from simulator.run import simulate
from simulator.scenario.config import load_scenario


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


POISSON = [
    "--set",
    "run.duration_s=null",
    "--set",
    "run.warmup_s=0",
    "--set",
    "frontend.enabled=false",
    "--set",
    "workload.prompt_tokens={dist: fixed, value: 2000}",
    "--set",
    "workload.output_tokens={dist: fixed, value: 200}",
]


def test_overload_is_reported_when_a_request_count_ends_the_run(tmp_path):
    """Poisson arrivals faster than the server, limited by run.num_requests (the run drains its
    queue, so nothing waits at the end): called overloaded with the offered and served rates; the
    same requests at a rate it keeps up with: no such note."""
    code, out, _ = _main(
        [
            "run",
            "--out",
            str(tmp_path / "a"),
            *POISSON,
            "--set",
            "run.num_requests=3000",
            "--set",
            "workload.arrival={type: poisson, rate: 150}",
        ]
    )
    assert code == 0
    note = next(line for line in out.splitlines() if "overloaded" in line)
    assert "requests arrived at 1" in note and "faster than served" in note and "grow with run.num_requests" in note
    code, out, _ = _main(
        [
            "run",
            "--out",
            str(tmp_path / "b"),
            *POISSON,
            "--set",
            "run.num_requests=300",
            "--set",
            "workload.arrival={type: poisson, rate: 5}",
        ]
    )
    assert code == 0 and "overloaded" not in out


def test_a_run_that_measured_nothing_says_why(tmp_path):
    """Nothing reached the engine within the run (the front-end's intake is slower than the run): a
    note says so rather than an empty table; every request arriving during the warm-up is named as
    such, not 'run longer'."""
    code, out, _ = _main(
        [
            "run",
            "--out",
            str(tmp_path / "a"),
            "--set",
            "run.duration_s=5",
            "--set",
            "run.warmup_s=0",
            "--set",
            "frontend.request_ms=60000",
            "--set",
            "workload.arrival.concurrency=50",
        ]
    )
    assert code == 0 and "no engine step ran: none of the 50 requests submitted reached the engine" in out
    code, out, _ = _main(
        [
            "run",
            "--out",
            str(tmp_path / "b"),
            *POISSON[:2],
            *POISSON[4:],
            "--set",
            "run.num_requests=50",
            "--set",
            "run.warmup_s=30",
            "--set",
            "workload.arrival={type: poisson, rate: 10}",
        ]
    )
    assert code == 0 and "every request arrived during the warm-up" in out and "run longer" not in out


def test_fleet_timeline_sums_throughput_and_averages_kv_over_replicas():
    """Two replicas stepping at their own times: the timeline's KV usage is their mean (0.2 and 0.6:
    0.4, never a jump back to zero) and its tokens their sum, against the concatenated rows read as
    one timeline (what overlays used to draw)."""
    rows = []
    for rep, (u, every) in enumerate(((0.2, 0.01), (0.6, 0.013))):
        t = np.arange(0, 10, every)
        rows.append(
            pd.DataFrame(
                {"replica": rep, "start": t, "duration": every, "kv_usage": u, "num_generated": 5, "num_preemptions": 0}
            )
        )
    steps = pd.concat(rows, ignore_index=True)
    tl = fleet_timeline(steps, 10.0, points=100)
    assert np.allclose(tl["kv_usage"][1:-1], 0.4)
    tokens = 5 * (len(rows[0]) + len(rows[1]))
    assert tl["num_generated"].sum() == pytest.approx(tokens)
    ts = throughput_series(tl, 1.0, 10.0)["output_tokens_per_s"]
    assert np.allclose(ts[1:-1], 5 / 0.01 + 5 / 0.013, rtol=0.02)
    assert throughput_series(steps, 1.0, 10.0)["output_tokens_per_s"].max() > 2 * ts.max()  # the old reading


def test_overlays_of_fleet_runs_draw_the_fleet(tmp_path, monkeypatch):
    """compare on two fleet runs: the throughput drawn for each is the fleet's, its mean over the
    measured window within a few percent of the summary's output throughput."""
    from simulator.outputs import plots

    dirs = []
    for router in ("round_robin", "least_requests"):
        d = tmp_path / router
        args = [
            "run",
            "scenarios/cluster_routers.yaml",
            "--out",
            str(d),
            "--set",
            "run.duration_s=30",
            "--set",
            "run.warmup_s=10",
            "--set",
            f"cluster.router={router}",
            "--set",
            "cluster.replicas=3",
            "--set",
            "workload.arrival.rate=30",
        ]
        assert _main(args)[0] == 0
        dirs.append(d)
    drawn = {}
    monkeypatch.setattr(plots, "plot_throughput", lambda series, *a, **k: drawn.update(series=series))
    assert _main(["compare", *map(str, dirs), "--out", str(tmp_path / "ab")])[0] == 0
    for (label, steps), d in zip(drawn["series"], dirs):
        summary, _ = load_run(d)
        ts = throughput_series(steps, 1.0, 30.0)
        window = ts["time_s"] >= 10
        assert np.mean(ts["output_tokens_per_s"][window]) == pytest.approx(summary["output_throughput"], rel=0.05), (
            label
        )


def test_metrics_follow_vllm_v1(tmp_path):
    """No V0 swap gauge in a recompute run (present when it swaps as V0 did); prefix-cache queries
    and hits as vLLM counts them, their last samples the prompt tokens looked up and found; the
    Perfetto KV counter named percent holds percent."""
    sc, _ = load_scenario(
        None,
        [
            "run.duration_s=20",
            "run.warmup_s=0",
            "workload.arrival.concurrency=64",
            "workload.shared_prefix={num_groups: 2, tokens: 512, fraction: 1.0}",
        ],
    )
    res = simulate(sc, trace=1)
    text = openmetrics_text(res).decode()
    assert "vllm:num_requests_swapped" not in text
    c = res.reqs.columns()
    sched = np.isfinite(c["first_scheduled"])

    def last(name: str) -> float:
        return float([ln for ln in text.splitlines() if ln.startswith(name + "{")][-1].split()[1])

    assert last("vllm:prefix_cache_queries_total") == c["prompt_len"][sched].sum()
    assert 0 < last("vllm:prefix_cache_hits_total") == np.maximum(c["cached_tokens"][sched], 0).sum()
    steps = step_columns(res)
    kv = [e["args"]["percent"] for e in trace_events(res) if e.get("name") == "kv_cache_usage"]
    assert kv == pytest.approx(list(np.round(steps["kv_usage"] * 100, 4))) and max(kv) > 1
    swap, _ = load_scenario(None, ["run.duration_s=5", "run.warmup_s=0", "engine.preemption_mode=swap"])
    assert "vllm:num_requests_swapped" in openmetrics_text(simulate(swap)).decode()


def test_a_recommendation_never_reads_minus_zero_percent():
    """A preempting point whose throughput is within half a percent of the best: "the same
    throughput", not "changes throughput by -0%"; a real loss or gain says which."""

    def df(thr_preempting: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "param:cluster.router": ["a", "b"],
                "status": ["ok", "ok"],
                "num_preemptions": [0, 9],
                "output_throughput": [1000.0, thr_preempting],
                "kv_cache_usage_mean": [0.5, 0.9],
            }
        )

    assert "has the same throughput (within 0.5%)" in recommend(df(1002.0), "cluster.router", False)["text"]
    assert "loses 5% of throughput" in recommend(df(950.0), "cluster.router", False)["text"]
    assert "has 5% more throughput" in recommend(df(1050.0), "cluster.router", False)["text"]
    assert "-0%" not in recommend(df(1002.0), "cluster.router", False)["text"]


def test_every_option_has_help_and_version_is_printed():
    """servesim --version prints the version; every option and positional of every command has help
    text; trace's subcommand is documented (no bare 'rest')."""
    code, out, _ = _main(["--version"])
    assert code == 0 and out.startswith("servesim ")
    missing = []
    subs = dict(parser()._subparsers._group_actions[0].choices)
    subs["trace generate"] = subs["trace"]._subparsers._group_actions[0].choices["generate"]
    for name, sub in subs.items():
        for a in sub._actions:
            if not a.help and not isinstance(a, argparse._SubParsersAction):
                missing.append(f"{name} {a.option_strings or a.dest}")
    assert not missing, missing
    code, out, _ = _main(["trace", "--help"])
    assert code == 0 and "rest" not in out and "generate" in out
    code, out, _ = _main(["trace", "generate", "--help"])
    assert "--out FILE" in out and "bare file name" in out


def test_fields_name_types_and_units_as_users_write_them():
    """servesim fields: no Python type names; a session's turns counted in turns, not tokens."""
    code, out, _ = _main(["fields"])
    assert code == 0 and "typing." not in out
    assert "cluster.replicas: integer or list of groups = 1" in out
    assert "workload.session.turns.value: integer = 4 [turns]" in out
    code, _, err = _main(["check", "--set", "workload.session={turns: {dist: fixed, value: 0}}"])
    assert code == 2 and "workload.session.turns.value must be >= 1 turns (got 0)" in err


def test_long_plot_titles_stay_inside_the_figure(tmp_path, monkeypatch):
    """A fleet's long title is wrapped so that it fits the figure's width."""
    from simulator.outputs import plots

    figs = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figs.append(fig))
    steps = {
        "start": np.arange(10.0),
        "duration": np.ones(10),
        "num_generated": np.full(10, 2e6),
        "num_preemptions": np.zeros(10),
        "kv_usage": np.full(10, 0.5),
    }
    title = "Output throughput: cluster_disaggregation, llama-3.1-8b, 3 prefill + 1 decode replicas on h100-sxm x2"
    plots.plot_throughput([("a", steps)], tmp_path / "t.png", title, 1.0, 10.0)
    fig = figs[0]
    r = fig.canvas.get_renderer()
    box = fig.axes[0].title.get_window_extent(r)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width


def test_docs_say_trace_paths_are_read_from_the_scenario_files_folder(tmp_path):
    """docs/workloads.md says a trace named in a scenario file is read from the file's folder, and
    so it is, whatever folder the command runs in."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "workloads.md").read_text()
    assert "relative to the working directory" not in doc and "read from that file's folder" in doc
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n")
    (tmp_path / "in" / "s.yaml").write_text("workload: {trace: t.csv}\n")
    sc, _ = load_scenario(str(tmp_path / "in" / "s.yaml"))
    assert Path(sc.workload.trace) == tmp_path / "in" / "t.csv"
