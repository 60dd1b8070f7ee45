"""What servesim tells the user: overload however a run is limited, runs that measured nothing (and
why), fleets overlaid as fleets, vLLM's own metric series, a recommendation that says what it
means, and help for every option."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path

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


ROOT = Path(__file__).resolve().parents[1]
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
    # Most requests, not all, in the warm-up: the figures are the rest's, and the note says how many
    # (vllm bench serve counts every prompt); no note once the warm-up holds fewer than half.
    notes = []
    for warm in (2, 1):
        code, out, _ = _main(
            [
                "run",
                "--out",
                str(tmp_path / f"c{warm}"),
                *POISSON[:2],
                *POISSON[4:],
                "--set",
                "run.num_requests=100",
                "--set",
                f"run.warmup_s={warm}",
                "--set",
                "workload.arrival={type: constant, rate: 40}",
            ]
        )
        assert code == 0
        notes.append([line for line in out.splitlines() if "leaves out" in line])
    assert len(notes[0]) == 1 and "leaves out the 80 of the 100 requests that arrived in it" in notes[0][0], notes
    assert "set run.warmup_s=0" in notes[0][0] and notes[1] == []


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

    assert "has the same throughput (within 0.5%)" in recommend(df(1002.0), False)["text"]
    assert "loses 5% of throughput" in recommend(df(950.0), False)["text"]
    assert "has 5% more throughput" in recommend(df(1050.0), False)["text"]
    assert "-0%" not in recommend(df(1002.0), False)["text"]


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


def _sweep_df(rows: list[tuple]) -> pd.DataFrame:
    """A sweep table from (params, throughput, preemptions) rows."""
    out = []
    for params, thr, pre in rows:
        out.append(
            {**{f"param:{k}": v for k, v in params.items()}, "status": "ok", "num_preemptions": pre}
            | {"output_throughput": thr, "kv_cache_usage_mean": 0.5}
        )
    return pd.DataFrame(out)


def test_sweeps_recommend_what_the_user_sets_and_say_why():
    """A sweep of the workload alone recommends nothing and says how far the load goes without
    preemption; a sweep of a setting and the workload recommends the setting for each load; two
    settings name the point and the rule it won by."""
    load = _sweep_df(
        [({"workload.arrival.concurrency": c}, t, p) for c, t, p in ((512, 17.1, 0), (1028, 17.5, 0), (1200, 17.3, 9))]
    )
    rec = recommend(load, False)
    assert rec["label"] == "nothing to recommend" and "best_no_preemption" not in rec
    assert "workload.arrival.concurrency is the workload's, not a server setting" in rec["text"]
    assert "no preemption is at workload.arrival.concurrency=1028" in rec["text"]
    mixed = _sweep_df(
        [
            ({"workload.arrival.concurrency": c, "engine.max_num_seqs": s}, t, p)
            for c, s, t, p in ((512, 256, 16.0, 0), (512, 1024, 17.0, 0), (1200, 256, 16.0, 0), (1200, 1024, 15.0, 0))
        ]
    )
    rec = recommend(mixed, False)
    assert "the best setting depends on workload.arrival.concurrency" in rec["text"]
    assert [p["param:engine.max_num_seqs"] for p in rec["best_per_situation"]] == [1024, 256]
    two = _sweep_df(
        [
            ({"engine.max_num_seqs": s, "engine.max_num_batched_tokens": b}, s * b / 1e6, 0 if s < 1024 else 5)
            for s in (256, 1024)
            for b in (2048, 8192)
        ]
    )
    rec = recommend(two, False)
    assert rec["text"].startswith("engine.max_num_seqs=256, engine.max_num_batched_tokens=8192: the most output")
    assert "with no preemption among the 4 points" in rec["text"]


def test_sweeps_of_server_size_rank_per_gpu_and_name_the_latency_pick():
    """Points holding different numbers of GPUs (tensor parallelism, a fleet's replicas) are ranked by
    output throughput per GPU, or the largest server would always win; the sentence gives both figures
    and the point with the shortest p50 TPOT, and the fleet's GPUs come from its GPU-hours."""
    from simulator.planning.sweep import gpus_held, sweep_title

    rows = []
    for tp, thr, tpot in ((1, 1800.0, 34.0), (2, 2700.0, 23.0), (8, 4000.0, 15.8)):
        rows.append({"param:hardware.tensor_parallel_size": tp, "status": "ok", "num_preemptions": 0,
                     "output_throughput": thr, "kv_cache_usage_mean": 0.05, "median_tpot_ms": tpot,
                     "tensor_parallel_size": tp})  # fmt: skip
    df = pd.DataFrame(rows)
    df["gpus"] = gpus_held(df)
    df["output_throughput_per_gpu"] = df["output_throughput"] / df["gpus"]
    rec = recommend(df, False)
    # per GPU: 1,800, 1,350 and 500 tok/s; in all the TP8 point has the most
    assert rec["best_no_preemption"] == {"param:hardware.tensor_parallel_size": 1}
    assert "the most output throughput per GPU with no preemption" in rec["text"]
    assert "1,800 tok/s per GPU, 1,800 on 1 GPU," in rec["text"]
    assert (
        "the shortest p50 TPOT is hardware.tensor_parallel_size=8's (15.8 ms against 34.0, at 500 tok/s per GPU)"
        in rec["text"]
    )
    assert rec["ranked_by"].startswith("output throughput per GPU")
    # one size throughout: the plain rule, nothing said per GPU
    same = df.assign(gpus=1.0, output_throughput_per_gpu=df["output_throughput"])
    rec = recommend(same, False)
    assert rec["best_no_preemption"] == {"param:hardware.tensor_parallel_size": 8}
    assert "per GPU" not in rec["text"] and "ranked_by" not in rec
    # a fleet of 8 one-GPU replicas over 300 s held 0.667 GPU-hours: 8 GPUs
    fleet = pd.DataFrame(
        {"tensor_parallel_size": [1, 1], "gpu_hours": [2 / 3, None], "simulated_time_s": [300.0, 300.0]}
    )
    assert list(gpus_held(fleet)) == pytest.approx([8.0, 1.0])
    # the plots' title keeps what every point ran and drops what the sweep varies
    s0 = {"model": "gpt-oss-120b", "gpu": "h200"}
    assert sweep_title("gpt-oss-120b on h200 x1", s0, ["hardware.tensor_parallel_size"]) == "gpt-oss-120b on h200"
    assert sweep_title("gpt-oss-120b on h200 x1", s0, ["hardware.gpu"]) == "gpt-oss-120b"
    assert sweep_title("gpt-oss-120b on h200 x1", s0, ["engine.max_num_seqs"]) == "gpt-oss-120b on h200 x1"


def test_a_sweep_over_tensor_parallelism_plots_throughput_per_gpu(tmp_path):
    """The CLI end to end: sweep.csv gets each point's GPUs and throughput per GPU, the recommendation
    says it ranked per GPU, and the plot's title leaves out the size the sweep varies."""
    out = tmp_path / "sw"
    args = ["sweep", "--param", "hardware.tensor_parallel_size=1,2", "--set", "run.num_requests=40"]
    args += ["--set", "run.duration_s=null", "--set", "run.warmup_s=0", "--set", "workload.arrival.concurrency=32"]
    assert _main([*args, "--out", str(out), "--jobs", "1"])[0] == 0
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["gpus"]) == [1, 2]
    assert table["output_throughput_per_gpu"].tolist() == pytest.approx(
        (table["output_throughput"] / table["gpus"]).tolist()
    )
    rec = json.loads((out / "recommendation.json").read_text())
    assert "per GPU" in rec["ranked_by"] and "per GPU" in rec["text"]


def test_feature_sweeps_draw_the_readme_plots(tmp_path):
    """A sweep of speculative decoding on and off against the concurrency draws the speed-up; a sweep
    of the KV offloading tier's size draws the hit rates by tier, the size in GiB on the axis."""
    from simulator.outputs import plots

    short = ["--set", "run.duration_s=20", "--set", "run.warmup_s=5", "--jobs", "1"]
    spec = str(ROOT / "scenarios" / "spec_decode_eagle3.yaml")
    args = ["sweep", spec, "--param", "workload.arrival.concurrency=1,16", "--param"]
    args += ["engine.speculative_config.method=none,eagle3", "--out", str(tmp_path / "spec"), *short]
    assert _main(args)[0] == 0
    assert (tmp_path / "spec" / "spec_decode_speedup.png").is_file()
    kv = str(ROOT / "scenarios" / "kv_offload_sessions.yaml")
    args = ["sweep", kv, "--param", "engine.kv_offloading_size=0,50", "--out", str(tmp_path / "kv"), *short]
    args += ["--set", "workload.arrival.concurrency=16", "--set", "workload.arrival.ramp_up_s=0"]
    assert _main(args)[0] == 0
    assert (tmp_path / "kv" / "kv_offload.png").is_file()
    assert plots.feature_plots(["engine.max_num_seqs"], pd.DataFrame({"param:engine.max_num_seqs": [1]})) == []


def test_a_sweep_with_an_slo_marks_its_pick_and_draws_the_target(tmp_path, monkeypatch):
    """A max_num_seqs sweep with a p99 TPOT target: recommendation.json carries the targets beside the
    point with the most goodput, that point meets the target where a larger max_num_seqs does not,
    and the per-knob plot draws the target line and marks the SLO's pick apart from the throughput
    pick (their labels in the one legend)."""
    import json

    import matplotlib.figure

    labels: list[str] = []
    real_legend = matplotlib.figure.Figure.legend

    def legend(self, handles, found, *a, **k):
        labels.extend(found)
        return real_legend(self, handles, found, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "legend", legend)
    out = tmp_path / "sw"
    args = ["sweep", "collapse_c1200", "--param", "engine.max_num_seqs=128,512,1024", "--out", str(out)]
    args += ["--set", "slo.p99_tpot_ms=40", "--set", "run.duration_s=120", "--set", "run.warmup_s=30", "--jobs", "1"]
    assert _main(args)[0] == 0
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["slo_targets"] == {"p99_tpot_ms": 40}
    df = pd.read_csv(out / "sweep.csv")
    tpot = dict(zip(df["param:engine.max_num_seqs"], df["p99_tpot_ms"]))
    pick = rec["best_goodput"]["param:engine.max_num_seqs"]
    assert tpot[pick] <= 40 < tpot[1024], tpot
    assert {"recommended", "most goodput within the SLO", "SLO target"} <= set(labels), labels


def test_plots_read_well(tmp_path, monkeypatch):
    """Any scenario name is drawn without empty boxes or mathematics (a character no font has as its
    code point); a plan's GPUs keep one colour across its plots; no '0 candidates cannot meet the
    targets'; the cost chart's legend sits clear of the bars' labels."""
    import warnings

    from simulator.outputs import plots
    from simulator.planning.plan import PlanSpec, _label

    figs = []
    real_save = plots._save

    def keep(fig, path):
        figs.append(fig)
        real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    steps = {"start": np.arange(5.0), "duration": np.ones(5), "kv_usage": np.full(5, 0.5)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a missing glyph is a warning from matplotlib
        plots.plot_kv_usage([("Δ ünï 中 $x$", steps)], tmp_path / "k.png", "KV: Δ ünï 中 $x$ 5$")
    title = figs[-1].axes[0].get_title()
    assert title == "KV: Δ ünï [U+4E2D] $x$ 5$" and not figs[-1].axes[0].title.get_parse_math()

    rows = []
    for gpu, price in (("h200", 3.6), ("a100-80gb", 1.4), ("l40s", 0.8)):
        for seqs in (64, 256):
            cap = 4.0 * price * (seqs / 64) ** 0.2
            units = int(np.ceil(20 / cap))
            probes = [{"rate": r, "ok": r <= cap, "p99_ttft_ms": 50.0 * r, "p99_tpot_ms": 10.0} for r in (1, 2, 4, 8)]
            rows.append(
                {"param:hardware.gpu": gpu, "param:engine.max_num_seqs": seqs, "status": "ok", "gpu": gpu}
                | {"capacity_rps": cap, "unit_gpus": 1, "units": units, "gpus": units, "unit_usd_per_hour": price}
                | {"usd_per_hour": units * price, "_probes": probes}
            )
    spec = PlanSpec(rate=20, p99_ttft_ms=500)
    plots.plot_plan_cost(rows, {"best": rows[4]}, spec, tmp_path / "c.png", _label)
    plots.plot_plan_latency(rows, {"best": rows[4]}, spec, tmp_path / "l.png", _label)
    cost, lat = figs[-2], figs[-1]
    assert "cannot meet the targets" not in cost.axes[0].get_title()
    from matplotlib.colors import to_rgba

    colors = {g: to_rgba(c) for g, c in plots.gpu_colors(r["gpu"] for r in rows).items()}
    shown = plots._cheapest(rows, 20)[1]
    assert [to_rgba(b.get_facecolor()) for b in cost.axes[0].patches] == [colors[r["gpu"]] for r in shown]
    gpu_of = {_label(r): r["gpu"] for r in rows}
    lines = [ln for ln in lat.axes[0].get_lines() if ln.get_label() in gpu_of]
    assert len(lines) == 6 and all(to_rgba(ln.get_color()) == colors[gpu_of[ln.get_label()]] for ln in lines)
    r = cost.canvas.get_renderer()
    legend = cost.axes[0].get_legend().get_window_extent(r)
    for t in cost.axes[0].texts:  # the bars' labels
        assert not legend.overlaps(t.get_window_extent(r)), t.get_text()
