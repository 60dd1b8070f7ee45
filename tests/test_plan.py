"""Capacity planning (simulator.planning.plan): the search by hand, the cost arithmetic, resuming, failing
candidates, and the same plan on a local Ray cluster."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_png_drawn

from simulator.errors import ConfigError
from simulator.planning import plan as P

SCEN = """
name: tiny
model: llama-3.1-8b
hardware: {gpu: h100-sxm}
workload:
  arrival: {type: poisson, rate: 1}
  prompt_tokens: {dist: uniform, min: 200, max: 2000}
  output_tokens: {dist: lognormal, mean: 150, sigma: 0.8}
slo: {p99_ttft_ms: 300, p99_tpot_ms: 20}
run: {seed: 0}
"""


def fake_probe(threshold: float):
    def probe(data, rate, spec):
        return {
            "rate": rate,
            "ok": bool(rate <= threshold),
            "keeps_up": True,
            "p99_ttft_ms": 100.0 * rate / max(threshold, 1e-9),
            "p99_tpot_ms": 10.0,
            "request_throughput": rate,
            "output_tokens_per_request": 200.0,
        }

    return probe


@pytest.mark.parametrize("threshold", [37.0, 1.0, 0.3, 250.0])
def test_capacity_search_by_hand(monkeypatch, threshold):
    """Doubling from 1 req/s to the first failing rate, then bisection: the capacity is a rate that
    meets the targets, within the tolerance of one that does not, and the probes are as stated."""
    monkeypatch.setattr(P, "probe", fake_probe(threshold))
    spec = P.PlanSpec(rate=100, tolerance=0.05)
    cap, probes = P.capacity({}, spec)
    rates = [q["rate"] for q in probes]
    assert cap <= threshold and any(q["rate"] == cap and q["ok"] for q in probes)
    failing = min(q["rate"] for q in probes if not q["ok"])
    assert failing > threshold and failing - cap <= 0.05 * failing
    if threshold >= 1:
        k = int(math.floor(math.log2(threshold))) + 1  # 1, 2, 4, ... up to the first failure
        assert rates[: k + 1] == [2.0**i for i in range(k + 1)]
    else:
        assert rates[:3] == [1.0, 0.5, 0.25]


def test_a_candidate_that_never_meets_the_targets_has_no_capacity(monkeypatch):
    monkeypatch.setattr(P, "probe", fake_probe(0.0))
    cap, probes = P.capacity({}, P.PlanSpec(rate=10))
    assert cap == 0.0 and min(q["rate"] for q in probes) < 2 * P.LOWEST


def test_units_and_cost_by_hand(monkeypatch, tmp_path):
    """37 req/s per unit and a 100 req/s target: 3 units; two GPUs (TP 2) at the catalogue's
    $2.69 per H100-hour: 3 x 2 x 2.69 $/h; per million output tokens at 200 tokens a request."""
    monkeypatch.setattr(P, "probe", fake_probe(37.0))
    data = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "tensor_parallel_size": 2}}
    spec = P.PlanSpec(rate=100)
    r = P.evaluate((data, spec.__dict__, str(tmp_path / "c.json")))
    assert r["status"] == "ok" and r["units"] == math.ceil(100 / r["capacity_rps"]) == 3
    assert r["unit_gpus"] == 2 and r["gpus"] == 6
    assert r["usd_per_hour"] == pytest.approx(3 * 2 * 2.69)
    assert r["usd_per_million_output_tokens"] == pytest.approx(3 * 2 * 2.69 / (100 * 200 * 3600) * 1e6)
    # A price given on the command line wins over the catalogue's; a GPU without one is an error.
    r2 = P.evaluate((data, P.PlanSpec(rate=100, prices={"h100-sxm": 1.0}).__dict__, str(tmp_path / "d.json")))
    assert r2["usd_per_hour"] == pytest.approx(6.0)
    r3 = P.evaluate(({**data, "hardware": {"gpu": "mi300x"}}, spec.__dict__, str(tmp_path / "e.json")))
    assert r3["status"] == "failed" and "price_per_hour" in r3["error"] and "--price mi300x=" in r3["error"]


def test_recommendation_picks_the_cheapest_and_says_why_the_runner_up_lost():
    def row(gpu, units, unit_gpus, price, cap, model):
        return {
            "param:model": model,
            "param:hardware.gpu": gpu,
            "status": "ok",
            "gpu": gpu,
            "units": units,
            "unit_gpus": unit_gpus,
            "gpus": units * unit_gpus,
            "usd_per_hour": units * price,
            "capacity_rps": cap,
            "usd_per_million_output_tokens": 0.1,
        }

    rows = [
        row("a100-80gb", 3, 1, 1.39, 20, "8b"),
        row("h100-sxm", 2, 1, 2.69, 30, "8b"),
        row("h100-sxm", 2, 4, 10.76, 30, "70b"),
        {"param:model": "70b", "param:hardware.gpu": "a100-80gb", "status": "infeasible", "error": "does not fit"},
    ]
    rec = P.recommend(rows, P.PlanSpec(rate=50), "model")
    assert rec["best"]["gpu"] == "a100-80gb" and rec["best"]["usd_per_hour"] == pytest.approx(4.17)
    assert rec["runner_up"]["gpu"] == "h100-sxm" and "$1.21/h more" in rec["runner_up"]["why_not"]
    assert [r["param:model"] for r in rec["best_per"]["model"]] == ["8b", "70b"]


def plan_args(tmp_path, out, **kw):
    sc = tmp_path / "tiny.yaml"
    sc.write_text(SCEN)
    return dict(
        path=str(sc),
        rate=20.0,
        slo=None,
        search=["hardware.gpu=h100-sxm,a100-80gb", "engine.max_num_seqs=0,64"],
        overrides=[],
        out=out,
        jobs=2,
        probe_s=40.0,
        tolerance=0.25,
        check_s=60.0,
        **kw,
    )


def test_a_small_plan_end_to_end_resumes_and_reports_a_bad_candidate(tmp_path, capsys, drawn):
    out = tmp_path / "plan"
    rc = P.run_plan(**plan_args(tmp_path, out))
    assert rc == 1  # two candidates have max_num_seqs=0: failed, reported, the others finish
    text = capsys.readouterr().out
    assert "FAILED: engine.max_num_seqs must be >= 1 (got 0)" in text
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["best"]["status"] == "ok" and rec["check"]["runs"][-1]["meets_slo"] in (True, False)
    assert rec["check"]["units"] >= rec["best"]["units"]
    table = (out / "plan.csv").read_text()
    assert table.count(",failed,") == 2 and table.count(",ok,") == 2
    assert (out / "probes.csv").stat().st_size > 0
    _check_plan_plots(drawn, table, rec)
    for f in ("plan_cost.png", "latency_vs_rate.png"):
        assert_png_drawn(out / f)
    # Again: every evaluated candidate comes from its cache, the same table; a damaged one is recomputed.
    victim = next((out / "candidates").glob("gpu=h100-sxm__max_num_seqs=64.json"))
    victim.write_text("{trunc")
    P.run_plan(**plan_args(tmp_path, out))
    again = capsys.readouterr().out
    lines = {ln.split("] ", 1)[1].split(":", 1)[0]: ln for ln in again.splitlines() if ln.startswith("[")}
    assert lines["gpu=a100-80gb__max_num_seqs=64"].endswith("(cached)")
    assert lines["gpu=h100-sxm__max_num_seqs=64"].endswith("runs)")  # recomputed
    assert (out / "plan.csv").read_text() == table


def _check_plan_plots(drawn: dict, table: str, rec: dict) -> None:
    """The plan's plots show its feasible candidates: each one's fleet cost as a bar, its capacity
    per unit against its unit price as a point, the recommendation starred; and each one's p99
    latencies against the probed rates."""
    import csv

    ok = [r for r in csv.DictReader(table.splitlines()) if r["status"] == "ok"]
    cost, capacity = drawn["plan_cost.png"].axes[:2]
    assert sorted(p.get_width() for p in cost.patches) == pytest.approx(sorted(float(r["usd_per_hour"]) for r in ok))
    assert cost.get_xlabel() == "fleet cost for the target rate (US$ per hour)" and "20 req/s" in cost.get_title()
    by_label = {c.get_label(): c.get_offsets() for c in capacity.collections}
    points = np.concatenate([by_label[g] for g in {r["gpu"] for r in ok}])
    want = [(float(r["unit_usd_per_hour"]), float(r["capacity_rps"])) for r in ok]
    np.testing.assert_allclose(sorted(map(tuple, points.tolist())), sorted(want))
    star = by_label["recommended"]
    np.testing.assert_allclose(star, [[rec["best"]["unit_usd_per_hour"], rec["best"]["capacity_rps"]]])
    ttft, tpot = drawn["latency_vs_rate.png"].axes[:2]
    assert ttft.get_ylabel() == "p99 TTFT (ms)" and tpot.get_ylabel() == "p99 TPOT (ms)"
    labelled = [ln for ln in ttft.get_lines() if not str(ln.get_label()).startswith("_")]  # not the capacities
    drawn_lines = [ln for ln in labelled if ln.get_label() != "target"]
    assert len(drawn_lines) == len(ok)  # one curve per feasible candidate
    for ln in drawn_lines:
        assert (np.diff(ln.get_xdata()) > 0).all() and (ln.get_ydata() > 0).all()  # rates probed upwards


def test_bad_plan_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="--slo: 'p95_ttft_ms' is not a target"):
        P.parse_slo("p95_ttft_ms=10")
    with pytest.raises(ConfigError, match="--rate must be a number > 0"):
        P.PlanSpec(rate=0)
    with pytest.raises(ConfigError, match="--price must look like GPU=USD_PER_HOUR"):
        P.parse_prices(["h100"])
    # A field the scenario does not have is said once, before any work (plan and sweep alike).
    args = plan_args(tmp_path, tmp_path / "p")
    args["search"] = ["engine.max_num_seq=64,128"]
    with pytest.raises(ConfigError, match=r"--search engine.max_num_seq: .*did you mean 'max_num_seqs'"):
        P.run_plan(**args)
    from simulator.planning.sweep import run_sweep

    with pytest.raises(ConfigError, match=r"--param engine.max_num_seq: .*did you mean 'max_num_seqs'"):
        run_sweep(args["path"], ["engine.max_num_seq=64,128"], [], tmp_path / "s", 1)
    assert not (tmp_path / "p" / "plan.csv").exists() and not (tmp_path / "s" / "sweep.csv").exists()


@contextlib.contextmanager
def _within(seconds: int, what: str):
    """Fail the test, rather than hang the suite, if the block takes longer than ``seconds``."""

    def stop(*_a):
        raise TimeoutError(f"{what} took more than {seconds} s")

    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_the_same_plan_on_a_local_ray_cluster_is_identical(tmp_path):
    """On a private local Ray cluster of two CPUs (a fresh one beside any other on the machine, its
    object store small) the plan is the same, byte for byte; the cluster is gone afterwards and its
    folder removed. Bounded: a cluster that does not start or answer fails the test in minutes."""
    import ray  # (the test command installs the ray extra: a missing Ray fails here, loudly)

    local, remote = tmp_path / "local", tmp_path / "ray"
    P.run_plan(**plan_args(tmp_path, local, check=False))
    before = set(Path(tempfile.gettempdir()).glob("servesim-ray-*"))
    with _within(300, "the plan on a local Ray cluster"):
        P.run_plan(**plan_args(tmp_path, remote, check=False, executor="ray"))
    assert not ray.is_initialized() and set(Path(tempfile.gettempdir()).glob("servesim-ray-*")) == before
    assert (local / "plan.csv").read_bytes() == (remote / "plan.csv").read_bytes()
    assert (local / "probes.csv").read_bytes() == (remote / "probes.csv").read_bytes()
    a = json.loads((local / "recommendation.json").read_text())
    b = json.loads((remote / "recommendation.json").read_text())
    assert a == b


def test_optuna_finds_the_grid_optimum_in_fewer_evaluations(monkeypatch, tmp_path):
    """On a space whose cheapest candidate is known (a fake probe: capacity grows with max_num_seqs
    and the GPU), TPE reaches the grid's best having evaluated fewer candidates than the grid."""
    import optuna  # noqa: F401 (the test command installs the search extra)

    caps = {"h100-sxm": 30.0, "a100-80gb": 12.0, "h200": 34.0}

    def probe(data, rate, spec):
        cap = float(caps[data["hardware"]["gpu"]] * (1 + np.log2(data["engine"]["max_num_seqs"] / 16) / 4))
        return fake_probe(cap)(data, rate, spec)

    monkeypatch.setattr(P, "probe", probe)
    args = plan_args(tmp_path, tmp_path / "g", check=False)
    args["search"] = ["hardware.gpu=h100-sxm,a100-80gb,h200", "engine.max_num_seqs=16,32,64,128,256,512,1024"]
    args["jobs"] = 1  # in this process, where the probe is replaced
    monkeypatch.setattr(P, "run_tasks", lambda fn, items, *a, **k: ((i, fn(x)) for i, x in enumerate(items)))
    P.run_plan(**args)
    grid_best = json.loads((tmp_path / "g" / "recommendation.json").read_text())["best"]["usd_per_hour"]
    args.update(out=tmp_path / "o", strategy="optuna", trials=12)
    P.run_plan(**args)
    rec = json.loads((tmp_path / "o" / "recommendation.json").read_text())
    evaluated = (tmp_path / "o" / "plan.csv").read_text().count(",ok,")
    assert rec["best"]["usd_per_hour"] == pytest.approx(grid_best) and evaluated < 21
