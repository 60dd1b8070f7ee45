"""Workload generation: arrival processes, length distributions, sharing, sessions, traces, seeding."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.commands.trace import generate_trace
from simulator.engine.compiled import layout as L
from simulator.engine.compiled.engine import CompiledEngine
from simulator.engine.cost import ConstantCost
from simulator.engine.requests import RequestTable
from simulator.engine.rules import RequestStatus, SchedulerConfig
from simulator.errors import ConfigError
from simulator.metrics import request_frame
from simulator.run import simulate
from simulator.scenario.config import Scenario, build, load_scenario
from workloads.arrivals import RateFunction
from workloads.config import LengthConfig, WorkloadConfig
from workloads.factory import RequestFactory, keeps_finished_content, start_workload
from workloads.lengths import LengthSampler, PairSampler
from workloads.presets import PRESETS
from workloads.trace import SESSION_KEY_BASE, read_trace

Z = 4.5  # width of every confidence bound, in standard errors (two-sided miss rate ~7e-6 per check)


def wl(data: dict) -> WorkloadConfig:
    return build(WorkloadConfig, data, "workload")


def record(
    w: WorkloadConfig, n: int | None, seed: int = 0, until: float | None = None, max_model_len=None
) -> pd.DataFrame:
    """Run only the workload (no engine): every submit is recorded; want_event requests end at once."""
    env = simpy.Environment()
    rows = []

    def submit(s, want_event=False):
        rows.append(
            (
                env.now,
                s.prompt_len,
                s.max_tokens,
                s.group,
                s.group_len,
                s.priority,
                s.content_key,
                s.client,
                s.client_class,
            )
        )
        if want_event:
            ev = env.event()
            ev.succeed()
            return ev
        return None

    start_workload(env, submit, w, seed, n, max_model_len=max_model_len)
    env.run(until=until)
    return pd.DataFrame(
        rows, columns=["t", "prompt", "output", "group", "group_len", "priority", "key", "client", "cls"]
    )


def engine_run(
    w: WorkloadConfig, until: float, seed: int = 0, step_s: float = 0.05, blocks: int = 20_000, seqs: int = 256
):
    """The real engine and scheduler with a constant step cost, fed by ``w``."""
    cfg = SchedulerConfig(
        max_num_seqs=seqs, max_num_batched_tokens=4096, block_size=16, cache_finished_content=keeps_finished_content(w)
    )
    env = simpy.Environment()
    eng = CompiledEngine(env, cfg, blocks, ConstantCost(step_s), RequestTable(), max_model_len=10**6)
    start_workload(env, eng.submit, w, seed, None)
    env.run(until=until)
    eng.finish_run()
    return eng, eng.reqs.columns()


def mean_ci(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), Z * float(x.std(ddof=1)) / math.sqrt(len(x))


def cv_ci(x: np.ndarray) -> tuple[float, float]:
    """Sample CV and its delta-method half-width from the sample's own moments."""
    n, m = len(x), x.mean()
    d = x - m
    v, m3, m4 = (d**2).mean(), (d**3).mean(), (d**4).mean()
    gm, gv = -math.sqrt(v) / m**2, 1 / (2 * m * math.sqrt(v))
    var = (gm**2 * v + 2 * gm * gv * m3 + gv**2 * (m4 - v**2)) / n
    return math.sqrt(v) / m, Z * math.sqrt(var)


# ---- arrivals -----------------------------------------------------------------------------------


def test_poisson_rate_and_unit_cv():
    """Poisson gaps have mean 1/rate and CV 1 within confidence bounds from 40,000 arrivals."""
    df = record(wl({"arrival": {"type": "poisson", "rate": 25.0}}), 40_000)
    gaps = np.diff(np.concatenate([[0.0], df.t.to_numpy()]))
    m, h = mean_ci(gaps)
    assert abs(m - 1 / 25) < h
    cv, hc = cv_ci(gaps)
    assert abs(cv - 1.0) < hc


def test_gamma_arrivals_have_the_requested_rate_and_burstiness():
    """Gamma arrivals with cv=3 keep the mean rate and have gap CV 3 (confidence bounds from the sample)."""
    df = record(wl({"arrival": {"type": "gamma", "rate": 50.0, "cv": 3.0}}), 60_000)
    gaps = np.diff(np.concatenate([[0.0], df.t.to_numpy()]))
    m, h = mean_ci(gaps)
    assert abs(m - 1 / 50) < h
    cv, hc = cv_ci(gaps)
    assert abs(cv - 3.0) < hc, (cv, hc)


def test_constant_rate_is_exactly_periodic():
    """Constant-rate arrivals are exactly 1/rate apart."""
    df = record(wl({"arrival": {"type": "constant", "rate": 4.0}}), 100)
    assert np.allclose(np.diff(df.t), 0.25, rtol=0, atol=1e-12) and df.t.iloc[0] == 0.25


@pytest.mark.parametrize("interp", ["step", "linear"])
def test_time_varying_rate_counts_match_the_integrated_rate(interp):
    """Arrivals per window of a piecewise/ramped Poisson rate match the integral of the rate (Poisson bounds)."""
    sched = {0: 5.0, 100: 40.0, 200: 10.0}
    df = record(
        wl({"arrival": {"type": "time_varying", "schedule": sched, "interpolation": interp}}), None, until=300.0
    )
    fn = RateFunction(sorted(sched.items()), interp)
    grid = np.linspace(0, 300, 30_001)
    lam = np.array([fn.rate(t) for t in grid])
    for a, b in [(0, 50), (50, 100), (100, 150), (150, 200), (200, 300)]:
        sel = (grid >= a) & (grid <= b)
        expected = np.trapezoid(lam[sel], grid[sel])
        got = int(((df.t > a) & (df.t <= b)).sum())
        assert abs(got - expected) < Z * math.sqrt(expected), (interp, a, b, got, expected)


def in_flight_at_steps(eng, c) -> tuple[np.ndarray, np.ndarray]:
    """(step start, requests arrived and not finished by then) from the request records."""
    starts = eng.log.columns()["start"]
    arr = np.sort(c["arrival"])
    fin = np.sort(np.where(np.isnan(c["finish"]), np.inf, c["finish"]))
    return starts, np.searchsorted(arr, starts, side="right") - np.searchsorted(fin, starts, side="right")


def test_closed_loop_holds_exactly_c_in_flight_and_follows_concurrency_steps():
    """Closed loop keeps exactly C requests in flight; a schedule raises C at once and lowers it as surplus clients finish."""
    w = wl(
        {
            "arrival": {"type": "closed_loop", "concurrency": 8, "schedule": {20: 20, 40: 5}},
            "prompt_tokens": {"dist": "uniform", "min": 8, "max": 64},
            "output_tokens": {"dist": "uniform", "min": 2, "max": 12},
        }
    )
    eng, c = engine_run(w, until=60.0)
    s, n = in_flight_at_steps(eng, c)
    assert (n[(s > 0) & (s < 20)] == 8).all()
    assert (n[(s >= 20) & (s < 40)] == 20).all()
    assert (n[s >= 42] == 5).all()  # every surplus request has finished 2 s after the step down
    assert set(np.unique(c["client"][c["arrival"] > 42])) == set(range(5))


@pytest.mark.no_cover  # two whole runs each (tests/test_differential.py)
@pytest.mark.parametrize("kernel", ["reference", "compiled"])
def test_back_to_back_clients_as_callbacks_match_client_processes(monkeypatch, kernel):
    """Closed-loop clients without think time run as callbacks on their requests' completion events;
    forced back into one SimPy process each, the run is byte-identical (ramp-up, a request budget,
    rejected requests, classes sharing the clients and a class with clients of its own)."""
    import workloads.factory as factory
    from workloads.arrivals import closed_loop

    sc = build(
        Scenario,
        {
            "name": "back_to_back",
            "model": "llama-3.1-8b",
            "hardware": {"gpu": "h100-sxm"},
            "engine": {"max_model_len": 3000, "num_gpu_blocks_override": 2000},
            "workload": {
                "arrival": {"type": "closed_loop", "concurrency": 40, "ramp_up_s": 3},
                "over_max_model_len": "reject",
                "classes": {
                    "chat": {"weight": 3, "preset": "chat"},
                    "summarise": {"weight": 1, "preset": "summarisation"},
                    "solo": {"arrival": {"type": "closed_loop", "concurrency": 5}, "preset": "chat"},
                },
            },
            "run": {"seed": 3, "duration_s": None, "num_requests": 600, "warmup_s": 0, "kernel": kernel},
        },
        "scenario",
    )
    chained = simulate(sc)

    def as_processes(*args, request=None, job=None, **kw):
        if request is not None:

            def job(client, active, request=request):
                yield request(client)

        return closed_loop(*args, job=job, **kw)

    monkeypatch.setattr(factory, "closed_loop", as_processes)
    processes = simulate(sc)
    a, b = request_frame(chained), request_frame(processes)
    assert len(a) == 600 and (a["status"] == "rejected").sum() > 20
    pd.testing.assert_frame_equal(a, b)


def test_client_latency_delays_each_next_request_by_exactly_that_time():
    """With client_latency_s, every client's next request arrives that long after its previous one
    ended (chained clients and client processes alike); with 0 it arrives at the same instant."""
    for extra in ({}, {"think_time_s": 1e-9}):  # think time forces the process form
        for lat in (0.0, 0.25):
            w = wl(
                {
                    "arrival": {"type": "closed_loop", "concurrency": 4, "client_latency_s": lat, **extra},
                    "prompt_tokens": {"value": 32},
                    "output_tokens": {"value": 4},
                }
            )
            _, c = engine_run(w, until=20.0)
            order = np.lexsort((c["arrival"], c["client"]))
            cl, arr, fin = c["client"][order], c["arrival"][order], c["finish"][order]
            same = cl[1:] == cl[:-1]
            gap = arr[1:][same] - fin[:-1][same]
            want = lat + extra.get("think_time_s", 0.0)
            assert len(gap) > 20 and np.allclose(gap, want, atol=1e-9), (lat, extra, gap[:5])


def test_trace_sent_closed_loop_keeps_its_order_and_concurrency(tmp_path):
    """trace_arrivals: closed_loop sends a trace's rows in order with C clients in flight, ignoring
    the recorded times; the lengths are the trace's."""
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_time_s,prompt_tokens,output_tokens\n"
        + "".join(f"{1000 + i},{16 + i},{2 + i % 5}\n" for i in range(60))
    )
    sc, _ = load_scenario(
        None,
        [
            "model=llama-3.1-8b",
            "hardware.gpu=h100-sxm",
            f"workload={{trace: '{path}', trace_arrivals: closed_loop, "
            "arrival: {type: closed_loop, concurrency: 3}}",
        ],
    )
    df = request_frame(simulate(sc)).sort_values("id")
    assert len(df) == 60 and (df["status"] == "finished").all()
    assert list(df["prompt_tokens"]) == [16 + i for i in range(60)]
    assert list(df["output_tokens"]) == [2 + i % 5 for i in range(60)]
    assert df["arrival_s"].max() < 1000 and (df["arrival_s"].iloc[:3] == 0).all()
    assert (df["arrival_s"].diff().iloc[1:] >= 0).all()  # sent in the trace's order
    ev = np.sort(np.concatenate([df["arrival_s"], df["finish_s"]]))
    inflight = np.searchsorted(np.sort(df["arrival_s"]), ev, "right") - np.searchsorted(
        np.sort(df["finish_s"]), ev, "right"
    )
    assert inflight.max() == 3


# ---- lengths ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg,mean",
    [
        ({"dist": "lognormal", "mean": 300.0, "sigma": 0.8}, 300.0),
        ({"dist": "uniform", "min": 10, "max": 90}, 50.0),
        ({"dist": "normal", "mean": 200.0, "std": 30.0}, 200.0),
    ],
)
def test_length_means_within_confidence_bounds(cfg, mean):
    """Lognormal, uniform and normal lengths have the configured mean (rounding aside) within bounds from 50,000 draws."""
    x = LengthSampler(build(LengthConfig, cfg), np.random.default_rng(1)).draw(50_000).astype(float)
    m, h = mean_ci(x)
    assert abs(m - mean) < h + 0.5


def test_clipped_normal_and_zipf_respect_bounds_and_shape():
    """Clipped normal stays in [min, max]; bounded Zipf's P(min) matches k^-s normalisation (binomial bound)."""
    x = LengthSampler(
        build(LengthConfig, {"dist": "normal", "mean": 100.0, "std": 80.0, "min": 20, "max": 150}),
        np.random.default_rng(2),
    ).draw(20_000)
    assert x.min() == 20 and x.max() == 150
    z = LengthSampler(
        build(LengthConfig, {"dist": "zipf", "alpha": 1.5, "min": 1, "max": 1000}), np.random.default_rng(3)
    ).draw(50_000)
    p1 = 1.0 / (np.arange(1, 1001, dtype=float) ** -1.5).sum()
    got = (z == 1).mean()
    assert abs(got - p1) < Z * math.sqrt(p1 * (1 - p1) / len(z)) and z.min() >= 1 and z.max() <= 1000


def test_empirical_lengths_from_lines_and_csv_column(tmp_path):
    """Empirical lengths resample the file's values (plain lines or a CSV column); a bad line names file and line."""
    (tmp_path / "l.txt").write_text("10\n20\n\n30\n")
    (tmp_path / "l.csv").write_text("id,len\na,100\nb,300\n")
    x = LengthSampler(
        build(LengthConfig, {"dist": "empirical", "file": str(tmp_path / "l.txt")}), np.random.default_rng(0)
    ).draw(30_000)
    assert set(np.unique(x)) == {10, 20, 30}
    m, h = mean_ci(x.astype(float))
    assert abs(m - 20) < h
    y = LengthSampler(
        build(LengthConfig, {"dist": "empirical", "file": str(tmp_path / "l.csv"), "column": "len"}),
        np.random.default_rng(0),
    ).draw(1000)
    assert set(np.unique(y)) == {100, 300}
    (tmp_path / "bad.txt").write_text("10\n-3\n")
    with pytest.raises(ConfigError, match=r"^bad.txt line 2: length must be an integer >= 1 \(got '-3'\)$"):
        wl({"prompt_tokens": {"dist": "empirical", "file": str(tmp_path / "bad.txt")}})


def test_copula_correlation_keeps_marginals_and_sets_rank_correlation():
    """A Gaussian copula with rho gives Spearman 6/pi asin(rho/2) and leaves each marginal's mean unchanged."""
    p = LengthSampler(build(LengthConfig, {"dist": "lognormal", "mean": 500.0, "sigma": 0.7}), np.random.default_rng(0))
    o = LengthSampler(build(LengthConfig, {"dist": "uniform", "min": 1, "max": 400}), np.random.default_rng(0))
    a, b = PairSampler(p, o, 0.7, np.random.default_rng(5)).draw(40_000)
    rs = np.corrcoef(pd.Series(a).rank(), pd.Series(b).rank())[0, 1]
    assert abs(rs - 6 / math.pi * math.asin(0.35)) < Z / math.sqrt(len(a))
    for x, mean in ((a, 500.0), (b, 200.5)):
        m, h = mean_ci(x.astype(float))
        assert abs(m - mean) < h + 0.5


def test_max_model_len_rules():
    """truncate cuts the own prompt (then the output) to fit, keeping the shared prefix; reject submits as drawn."""
    base = {
        "prompt_tokens": {"dist": "uniform", "min": 100, "max": 3000},
        "output_tokens": {"dist": "uniform", "min": 10, "max": 1500},
        "shared_prefix": {"tokens": 64},
        "arrival": {"type": "poisson", "rate": 10.0},
    }
    for rule in ("truncate", "resample"):
        df = record(wl({**base, "over_max_model_len": rule}), 3000, max_model_len=2048)
        assert (df.prompt + df.output <= 2048).all() and (df.group_len == 64).all() and (df.prompt > 64).all()
    df = record(wl({**base, "over_max_model_len": "reject"}), 3000, max_model_len=2048)
    assert (df.prompt + df.output > 2048).any()


def test_presets_load_and_match_their_cited_means():
    """Every preset builds, has a source note, and draws lengths with its configured mean."""
    for name, (p, _, source) in PRESETS.items():
        assert "arXiv" in source or "arxiv" in source
        f = RequestFactory(wl({"preset": name}), 0)
        x = f.prompt.draw(20_000).astype(float)
        m, h = mean_ci(x)
        assert abs(m - p.mean) < h + 0.01 * p.mean, name  # clipping at max removes a little of the tail


# ---- classes, sharing, sessions -----------------------------------------------------------------


def test_client_classes_weights_own_arrivals_priorities_and_lengths():
    """Weighted classes split the shared arrivals by weight (binomial bound); a class with its own arrival runs it."""
    w = wl(
        {
            "arrival": {"type": "poisson", "rate": 100.0},
            "classes": {
                "chat": {"weight": 3, "prompt_tokens": {"value": 100}, "priority": 1, "slo": {"p99_ttft_ms": 500}},
                "batch": {"weight": 1, "prompt_tokens": {"value": 2000}},
                "bg": {"arrival": {"type": "constant", "rate": 2.0}, "prompt_tokens": {"value": 7}, "priority": 5},
            },
        }
    )
    df = record(w, None, until=200.0)
    shared = df[df.cls < 2]
    frac = (shared.cls == 0).mean()
    assert abs(frac - 0.75) < Z * math.sqrt(0.75 * 0.25 / len(shared))
    assert (df[df.cls == 0].prompt == 100).all() and (df[df.cls == 1].prompt == 2000).all()
    assert (df[df.cls == 0].priority == 1).all() and (df[df.cls == 2].priority == 5).all()
    assert len(df[df.cls == 2]) == 399 and (df[df.cls == 2].prompt == 7).all()


def test_shared_prefix_and_session_turns_hit_the_prefix_cache():
    """Shared-prefix requests hit their group's cached blocks and each session turn re-hits the previous turn's prompt + output."""
    w = wl(
        {
            "arrival": {"type": "closed_loop", "concurrency": 6},
            "prompt_tokens": {"value": 40},
            "output_tokens": {"value": 20},
            "shared_prefix": {"tokens": 64, "num_groups": 2},
            "session": {"turns": {"value": 4}, "user_tokens": {"value": 30}, "think_time_s": 0.3},
        }
    )
    assert keeps_finished_content(w)
    _, c = engine_run(w, until=40.0)
    done = c["status"] == 3
    df = pd.DataFrame(
        {k: c[k] for k in ("content_key", "prompt_len", "max_tokens", "cached_tokens", "group", "arrival")}
    )[done]
    assert (df.content_key >= SESSION_KEY_BASE).all()
    hits = 0
    for _, s in df.groupby("content_key"):
        s = s.sort_values("arrival")
        assert (
            list(s.prompt_len) == [104, 154, 204, 254][: len(s)]
        )  # 64 + 40, then + 20 output + 30 user tokens per turn
        for prev, cur in zip(s.itertuples(), list(s.itertuples())[1:]):
            assert cur.cached_tokens >= (prev.prompt_len + prev.max_tokens - 1) // 16 * 16
            hits += 1
    assert hits > 50
    first_turns = df.sort_values("arrival").groupby("content_key").head(1).iloc[4:]
    assert (first_turns.cached_tokens >= 64).all()  # the group's system prompt was cached by an earlier request


def test_without_sharing_nothing_hits():
    """Unique prompts (no prefix groups, no sessions) get no prefix-cache hits, and finished content is not kept."""
    w = wl(
        {"arrival": {"type": "poisson", "rate": 20.0}, "prompt_tokens": {"value": 64}, "output_tokens": {"value": 8}}
    )
    assert not keeps_finished_content(w)
    _, c = engine_run(w, until=20.0)
    assert (c["cached_tokens"][c["status"] == 3] == 0).all()


# ---- seeding ------------------------------------------------------------------------------------


def test_same_seed_same_requests_and_components_are_independent():
    """Same seed gives identical requests; changing output lengths leaves arrival times and prompts untouched."""
    base = {
        "arrival": {"type": "gamma", "rate": 10.0, "cv": 2.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 300.0},
        "output_tokens": {"dist": "uniform", "min": 1, "max": 100},
        "shared_prefix": {"fraction": 0.3, "num_groups": 4},
    }
    a, b = record(wl(base), 2000, seed=7), record(wl(base), 2000, seed=7)
    pd.testing.assert_frame_equal(a, b)
    c = record(wl({**base, "output_tokens": {"dist": "fixed", "value": 9}}), 2000, seed=7)
    assert (a.t == c.t).all() and (a.prompt == c.prompt).all() and (a.group == c.group).all()
    assert not (record(wl(base), 2000, seed=8).t == a.t).all()


# ---- traces -------------------------------------------------------------------------------------

OPEN_LOOP = [
    "run.duration_s=15",
    "run.warmup_s=0",
    "run.seed=3",
    "workload.arrival={type: poisson, rate: 40}",
    "workload.prompt_tokens={dist: lognormal, mean: 400, sigma: 0.7}",
    "workload.output_tokens={dist: lognormal, mean: 120, sigma: 0.5}",
    "workload.shared_prefix={num_groups: 3, tokens: 128, fraction: 0.6}",
    "workload.classes={a: {weight: 2, priority: 1}, b: {weight: 1}, c: {arrival: {type: gamma, rate: 5, cv: 2}}}",
]


@pytest.mark.parametrize("ext", ["csv", "jsonl"])
def test_trace_round_trip_reproduces_an_open_loop_run(tmp_path, ext):
    """Replaying a generated trace gives the same requests.csv (timings, lengths, hits) as the direct open-loop run."""
    sc, _ = load_scenario(None, OPEN_LOOP)
    direct = request_frame(simulate(sc))
    path = tmp_path / f"t.{ext}"
    assert generate_trace(sc, path) == len(direct)
    sc2, _ = load_scenario(None, OPEN_LOOP[:3] + [f"workload={{trace: '{path}'}}"])
    replayed = request_frame(simulate(sc2))
    pd.testing.assert_frame_equal(direct, replayed)
    assert (direct.cached_tokens > 0).any()


def test_trace_cli_writes_a_trace_and_reports_errors_in_one_line(tmp_path, capsys):
    """`servesim trace generate` writes a readable trace (exit 0); a bad override exits 2 with one error line."""
    out = tmp_path / "t.csv"
    assert (
        main(
            [
                "trace",
                "generate",
                "-o",
                str(out),
                "--set",
                "workload.arrival={type: poisson, rate: 5}",
                "--set",
                "run.num_requests=30",
                "--set",
                "run.duration_s=null",
            ]
        )
        == 0
    )
    assert len(read_trace(str(out))) == 30
    assert main(["trace", "generate", "-o", str(out), "--set", "workload.arrival.rte=5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: workload.arrival.rte: unknown key; did you mean 'rate'?"


@pytest.mark.parametrize(
    "rows,msg",
    [
        ("0.5,10,5\n1.0,abc,5\n", "trace.csv line 3: prompt_tokens must be an integer >= 1 (got 'abc')"),
        ("0.5,10,5\n-1,10,5\n", "trace.csv line 3: arrival_time_s must be a number >= 0 (got '-1')"),
        ("0.5,10,0\n", "trace.csv line 2: output_tokens must be an integer >= 1 (got '0')"),
        ("0.5,10,5,1,\n", "trace.csv line 2: prefix_tokens must be given with prefix_group (got none)"),
        ("0.5,10,5,1,20\n", "trace.csv line 2: prefix_tokens must be <= prompt_tokens (10) (got 20)"),
    ],
)
def test_bad_trace_rows_name_the_line_and_column(tmp_path, rows, msg):
    """A bad trace row is reported at load as `trace.csv line N: <column> must be ... (got ...)`."""
    header = "arrival_time_s,prompt_tokens,output_tokens" + (
        ",prefix_group,prefix_tokens" if rows.count(",") > 2 * rows.count("\n") else ""
    )
    (tmp_path / "trace.csv").write_text(header + "\n" + rows)
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [f"workload.trace={tmp_path / 'trace.csv'}"])
    assert str(e.value) == msg


def test_bad_jsonl_trace_and_unknown_columns(tmp_path):
    """JSONL rows are checked the same way; unknown columns get a did-you-mean."""
    (tmp_path / "t.jsonl").write_text(
        '{"arrival_time_s": 0, "prompt_tokens": 3, "output_tokens": 2}\n{"arrival_time_s": 1, "prompt_tokens": 2.5, "output_tokens": 2}\n'
    )
    with pytest.raises(ConfigError, match=r"^t.jsonl line 2: prompt_tokens must be an integer >= 1 \(got 2.5\)$"):
        read_trace(str(tmp_path / "t.jsonl"))
    (tmp_path / "u.csv").write_text("arrival_time_s,prompt_tokens,output_tokens,sesion_id\n0,1,1,3\n")
    with pytest.raises(ConfigError, match=r"^u.csv line 1: unknown column 'sesion_id'; did you mean 'session_id'\?$"):
        read_trace(str(tmp_path / "u.csv"))


def _row_reader(path: str) -> dict[str, np.ndarray]:
    """The row-by-row reader's columns (what read_trace falls back to)."""
    from workloads.trace import _FIELDS, _check_row, _csv_rows

    cols = {key: [] for key, *_ in _FIELDS}
    for line, rec in _csv_rows(path, "t.csv"):
        _check_row(rec, "t.csv", line, cols)
    return {k: np.array(v, np.float64 if k == "arrival" else np.int64) for k, v in cols.items()}


_cell = st.one_of(st.just(""), st.integers(0, 40).map(str), st.integers(0, 40).map(lambda x: f"{x}.0"))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.floats(0, 1e6, allow_nan=False).map(
                lambda x: st.sampled_from([repr(x), f"{x:.17g}", f"{x:.3e}", f" {x:.6f}"])
            ),
            st.integers(1, 4000),
            st.integers(1, 900),
            st.integers(-1, 3),
            _cell,
            _cell,
            st.integers(-2, 2),
        ),
        min_size=1,
        max_size=30,
    ),
    data=st.data(),
)
def test_plain_csv_traces_read_as_the_row_reader_reads_them(tmp_path_factory, rows, data):
    """The C-parsed path for plain CSVs gives the row reader's values exactly (arrival times to the
    last bit, defaults for empty cells), and declines whatever it cannot vouch for."""
    from workloads.trace import _csv_fast

    lines = ["arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens,session_id,client,priority"]
    for t, p, o, g, sid, cl, pri in rows:
        glen = "" if g < 0 else str(data.draw(st.integers(1, p)))
        lines.append(",".join([data.draw(t), str(p), str(o), "" if g < 0 else str(g), glen, sid, cl, str(pri)]))
    path = tmp_path_factory.mktemp("t") / "t.csv"
    path.write_text("\n".join(lines) + "\n")
    fast, slow = _csv_fast(str(path)), _row_reader(str(path))
    assert fast is not None
    for k, v in slow.items():
        assert fast[k].dtype == v.dtype and fast[k].tolist() == v.tolist(), k


@pytest.mark.parametrize(
    "text",
    [
        "arrival_time_s,prompt_tokens,output_tokens\n# a comment\n0.5,10,5\n",
        "arrival_time_s,prompt_tokens,output_tokens\n0.5,10,5\n\n1,10,5\n",
        "arrival_time_s,prompt_tokens,output_tokens,client\n0.5,10,5\n1,10,5,3,\n",
        'arrival_time_s,prompt_tokens,output_tokens\n"0.5",10,5\n',
        "arrival_time_s,prompt_tokens,output_tokens,priority\n0.5,10,5,nan\n",
        "arrival_time_s,prompt_tokens,output_tokens\n0.5,10.5,5\n",
    ],
)
def test_traces_that_are_not_plain_go_to_the_row_reader(tmp_path, text):
    """Comments, blank lines, ragged rows, quotes, words and bad values: the fast path declines."""
    from workloads.trace import _csv_fast

    (tmp_path / "t.csv").write_text(text)
    assert _csv_fast(str(tmp_path / "t.csv")) is None


# ---- config errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data,msg",
    [
        (
            {"arrival": {"type": "time_varying"}},
            "workload.arrival.schedule: type 'time_varying' needs a schedule {t_s: rate} (got null)",
        ),
        (
            {"arrival": {"type": "time_varying", "schedule": {0: 5, 10: -1}}},
            "workload.arrival.schedule.10 must be a number >= 0 (got -1)",
        ),
        (
            {"arrival": {"type": "closed_loop", "schedule": {0: 2.5}}},
            "workload.arrival.schedule.0 must be an integer (got 2.5)",
        ),
        (
            {"arrival": {"type": "poisson", "schedule": {0: 1}}},
            "workload.arrival.schedule: only for type 'time_varying' or 'closed_loop' (got type 'poisson')",
        ),
        (
            {"classes": {"x": {"weight": 1, "arrival": {"type": "poisson"}}}},
            "workload.classes.x.weight: a class with its own arrival takes no weight (got 1.0)",
        ),
        ({"classes": {"x": {"priorty": 1}}}, "workload.classes.x.priorty: unknown key; did you mean 'priority'?"),
        (
            {"preset": "chat", "prompt_tokens": {"value": 5}},
            "workload.prompt_tokens: cannot be set together with workload.preset ('chat') (got dist 'fixed')",
        ),
        (
            {"prompt_tokens": {"dist": "empirical"}},
            "workload.prompt_tokens.file: dist 'empirical' needs a file of lengths (got null)",
        ),
        (
            {"trace_arrivals": "closed_loop", "arrival": {"type": "poisson"}},
            "workload.trace_arrivals: closed_loop sends the trace with workload.arrival.type: closed_loop clients (got arrival type 'poisson')",
        ),
        (
            {"arrival": {"type": "poisson", "client_latency_s": 1}},
            "workload.arrival.client_latency_s: only for type 'closed_loop' (got type 'poisson')",
        ),
    ],
)
def test_workload_config_errors_are_one_line_with_path_rule_and_value(data, msg):
    """Checks the generic loader cannot do still name the field path, the rule and the value."""
    with pytest.raises(ConfigError) as e:
        load_scenario(None, [f"workload={data!r}"])
    assert str(e.value) == msg


def test_workload_scenarios_load_and_run(tmp_path):
    """Every scenarios/workload_*.yaml loads and runs; the per-class SLO report covers each class."""
    from pathlib import Path

    from simulator.metrics import class_report

    paths = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("workload_*.yaml"))
    assert paths
    for p in paths:
        sc, _ = load_scenario(str(p), ["run.duration_s=8", "run.warmup_s=0"])
        res = simulate(sc)
        assert res.reqs.n > 0, p.name
        rows = class_report(res)
        assert len(rows) == max(1, len(sc.workload.class_list()))
        assert sum(r["num_completed"] for r in rows) == res.engine.num_finished


@pytest.mark.no_cover  # two whole runs each, the reference step's several times slower under the tracer (tests/test_differential.py)
@pytest.mark.parametrize(
    "kernel, over",
    [
        ("compiled", ["run.duration_s=150"]),  # the README's collapse case, its cache full
        ("reference", ["run.duration_s=20", "workload.arrival.concurrency=200"]),
    ],
)
def test_a_chained_closed_loop_runs_as_its_completion_events_would(kernel, over, monkeypatch):
    """The engine runs a plain closed loop's next turns itself (``Engine.chain``: the clients whose
    requests end at one moment in one call) where each request's completion event would have woken
    its client: the same requests, sent at the same times, the same steps, as the run with an event
    per request."""
    import simulator.resolve as resolve

    sc, _ = load_scenario(None, [*over, "run.warmup_s=10", "run.host_band=false", f"run.kernel={kernel}"])
    chained = simulate(sc)
    start = resolve.start_workload
    monkeypatch.setattr(resolve, "start_workload", lambda *a, **k: start(*a, **{**k, "runner": None}))
    evented = simulate(sc)
    assert chained.engine._turns and not evented.engine._turns  # each way was taken
    if kernel == "compiled":  # the step itself ran the turns (compiled/clients.py)
        assert chained.engine.st.ctl[L.SENT] == chained.reqs.n - 1200 > 0
    a, b = chained.reqs.columns(), evented.reqs.columns()
    assert chained.reqs.n == evented.reqs.n > 300
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
    assert chained.engine.num_steps == evented.engine.num_steps
    if kernel == "compiled":
        assert a["preemptions"].sum() > 0  # the case covers preempted requests' clients too


@pytest.mark.no_cover  # two whole runs each (tests/test_differential.py)
@pytest.mark.parametrize(
    "over, covers",
    [
        # without an API server: every request reaches its client at its step's end
        (["frontend.enabled=false", "workload.arrival.concurrency=300"], None),
        # a pool too small for the clients, swap space too small for the preempted: requests aborted
        # (their clients told at the step's end, their previous request ended when it was scheduled)
        (
            [
                "engine.num_gpu_blocks_override=4000",
                "engine.preemption_mode=swap",
                "engine.swap_space_gb=0.2",
                "engine.on_swap_full=abort",
            ],
            "aborted",
        ),
        # prompts past max_model_len: rejected (told at the next step's start) or truncated (and counted)
        (
            [
                "engine.max_model_len=600",
                "workload.prompt_tokens={dist: uniform, min: 100, max: 700}",
                "workload.over_max_model_len=reject",
                "workload.arrival.concurrency=200",
            ],
            "rejected",
        ),
        (["engine.max_model_len=600", "workload.prompt_tokens={dist: uniform, min: 100, max: 700}"], "truncated"),
        # clients that start one by one (their first requests sent between the step's calls), shared
        # prefixes, LoRA adapters
        (
            [
                "workload.arrival.ramp_up_s=4",
                "workload.shared_prefix={num_groups: 4, tokens: 300, fraction: 0.5}",
                "engine.enable_lora=true",
                "engine.max_loras=2",
                "workload.lora={adapters: 6}",
            ],
            None,
        ),
        # SGLang's scheduler, its pool small enough to retract requests
        (["engine.mem_fraction_static=0.215"], "sglang"),
    ],
)
def test_the_step_runs_a_closed_loops_turns_as_the_engines_callbacks_would(over, covers, monkeypatch):
    """A closed loop that is the workload's only source has the compiled step run its turns
    (``CompiledEngine.run_turns``): the clients are told where the engine's completion callbacks
    would have told them, and send their next requests with the shapes drawn in the same order.
    The same requests, times, steps and step log, and the same counts of truncated requests, as the
    run whose turns the callbacks run."""
    path = "scenarios/sglang_collapse.yaml" if covers == "sglang" else None
    sc, _ = load_scenario(path, [*over, "run.duration_s=20", "run.warmup_s=0", "run.host_band=false"])
    inside = simulate(sc)
    monkeypatch.setattr(CompiledEngine, "run_turns", lambda self, clients, source: None)
    callbacks = simulate(sc)
    assert inside.engine.st.ctl[L.SENT] > 200 and callbacks.engine.st.ctl[L.SENT] == 0  # each way was taken
    a, b = inside.reqs.columns(), callbacks.reqs.columns()
    assert inside.reqs.n == callbacks.reqs.n
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
    la, lb = inside.engine.log.columns(), callbacks.engine.log.columns()
    for name in la:
        assert np.array_equal(la[name], lb[name], equal_nan=True), name
    assert inside.engine.num_steps == callbacks.engine.num_steps and inside.end_time == callbacks.end_time
    assert vars(inside.workload_counts) == vars(callbacks.workload_counts)
    if covers == "truncated":
        assert inside.workload_counts.truncated > 0
    elif covers == "sglang":
        assert inside.engine.cfg.framework == "sglang"
    elif covers is not None:
        assert (a["status"] == RequestStatus[covers.upper()]).sum() > 0


@pytest.mark.parametrize("limit", [7, 2500])  # within the first shapes drawn, and past them
def test_clients_rejected_again_and_again_stop_alike_either_way(limit, monkeypatch):
    """Closed-loop clients whose every request is rejected stop the run after the same number of
    rejections at one time, with the same line, whether the step or the engine's callbacks tell them."""
    import simulator.engine.compiled.engine as compiled_engine
    import simulator.engine.core as core

    monkeypatch.setattr(core, "REJECT_LIVELOCK", limit)
    monkeypatch.setattr(compiled_engine, "REJECT_LIVELOCK", limit)
    over = [
        "frontend.enabled=false",
        "workload.prompt_tokens={dist: fixed, value: 200000}",
        "workload.over_max_model_len=reject",
        "workload.arrival.concurrency=300",
        "run.host_band=false",
    ]
    sc, _ = load_scenario(None, over)
    lines = []
    for turns in (CompiledEngine.run_turns, lambda self, clients, source: None):
        monkeypatch.setattr(CompiledEngine, "run_turns", turns)
        with pytest.raises(RuntimeError) as e:
            simulate(sc)
        lines.append(str(e.value))
    assert lines[0] == lines[1] and lines[0].startswith(f"{limit:,} requests in a row rejected at t=0.000 s")


@pytest.mark.no_cover  # two whole runs each (tests/test_differential.py)
@pytest.mark.parametrize(
    "kernel, over",
    [
        # past what the engine serves (its queue grows), the API server's intake busy, cut by the duration
        ("compiled", ["workload.arrival={type: poisson, rate: 60}", "run.duration_s=40"]),
        # 1,000 requests (not a whole number of hand-overs), gamma gaps, without an API server
        (
            "compiled",
            [
                "workload.arrival={type: gamma, rate: 20, cv: 3}",
                "run.num_requests=1000",
                "run.duration_s=null",
                "frontend.enabled=false",
            ],
        ),
        ("reference", ["workload.arrival={type: poisson, rate: 25}", "run.duration_s=15"]),
    ],
)
def test_an_open_loop_handed_over_ahead_runs_as_its_arrivals_would(kernel, over, monkeypatch):
    """An open loop of single requests to one engine hands it the next arrivals at once, each with its
    own time (``arrivals.hand_over_ahead``), instead of an event at each: the same requests, sent at
    the same times, the same steps and step log, as the run that submits each at its arrival."""
    import simulator.resolve as resolve
    import workloads.factory as factory

    handed: list[int] = []  # arrivals handed over ahead, per hand-over
    hand_over = factory.hand_over_ahead

    def counted(env, times, send, budget, end):
        return hand_over(env, times, lambda batch: (handed.append(len(batch)), send(batch)), budget, end)

    monkeypatch.setattr(factory, "hand_over_ahead", counted)
    sc, _ = load_scenario(None, [*over, "run.warmup_s=0", "run.host_band=false", f"run.kernel={kernel}"])
    ahead = simulate(sc)
    assert len(handed) > 1 and sum(handed) == ahead.reqs.n  # each way was taken
    start = resolve.start_workload
    monkeypatch.setattr(resolve, "start_workload", lambda *a, **k: start(*a, **{**k, "runner": None}))
    one_by_one = simulate(sc)
    assert sum(handed) == ahead.reqs.n
    a, b = ahead.reqs.columns(), one_by_one.reqs.columns()
    assert ahead.reqs.n == one_by_one.reqs.n > 300
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
    assert ahead.engine.num_steps == one_by_one.engine.num_steps
    assert ahead.end_time == one_by_one.end_time and ahead.stopped_by == one_by_one.stopped_by
    la, lb = ahead.engine.log.columns(), one_by_one.engine.log.columns()
    assert la.keys() == lb.keys()
    for name in la:
        assert np.array_equal(la[name], lb[name], equal_nan=True), name


@pytest.mark.no_cover  # two whole runs each (tests/test_differential.py)
@pytest.mark.parametrize("closed", [False, True])
def test_a_trace_handed_to_one_engine_replays_as_one_request_at_a_time_would(closed, tmp_path, monkeypatch):
    """A trace replayed against one engine goes in as rows: at its recorded times, handed over ahead
    (``trace.replay_ahead``: rows out of order and arriving together, shared prefixes and sessions,
    some rows at or after the run's end), or closed loop with the engine running the clients' turns.
    The same requests, times and steps as the replay that submits each row on its own."""
    import simulator.resolve as resolve

    rng = np.random.default_rng(7)
    n = 700
    arrival = np.round(np.cumsum(rng.exponential(0.04, n)), 3)
    arrival[100:110] = arrival[100]  # ten rows at one moment
    arrival[200], arrival[201] = arrival[201], arrival[200]  # two out of order (the trace sorts them)
    rows = "".join(
        f"{float(arrival[i])!r},{64 + int(rng.integers(400))},{1 + int(rng.integers(300))},"
        f"{i % 3 - 1 if i % 3 else ''},{32 if i % 3 else ''},{i % 7 if i % 5 == 0 else ''}\n"
        for i in range(n)
    )
    path = tmp_path / "t.csv"
    path.write_text("arrival_time_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens,session_id\n" + rows)
    arrivals = "trace_arrivals: closed_loop, arrival: {type: closed_loop, concurrency: 40}" if closed else ""
    over = [
        "model=llama-3.1-8b",
        "hardware.gpu=h100-sxm",
        f"workload={{trace: '{path}', {arrivals}}}",
        "run.host_band=false",
        "run.warmup_s=0",
        *([] if closed else [f"run.duration_s={float(arrival[650])!r}"]),  # the run ends on a row's time
    ]
    sc, _ = load_scenario(None, over)
    ahead = simulate(sc)
    start = resolve.start_workload
    monkeypatch.setattr(resolve, "start_workload", lambda *a, **k: start(*a, **{**k, "runner": None}))
    one_by_one = simulate(sc)
    if closed:
        assert ahead.engine._turns and not one_by_one.engine._turns  # each way was taken
    a, b = ahead.reqs.columns(), one_by_one.reqs.columns()
    # (a trace's run stops after its requests or at its end: the row at exactly the end still comes)
    assert ahead.reqs.n == one_by_one.reqs.n == (n if closed else 651)
    for name in a:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
    assert ahead.engine.num_steps == one_by_one.engine.num_steps and ahead.end_time == one_by_one.end_time
