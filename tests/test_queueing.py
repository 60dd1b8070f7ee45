"""Checks against queueing theory."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import Sim

from simulator.run import simulate
from simulator.scenario.config import load_scenario


@pytest.mark.no_cover  # long runs for their statistics; the step's lines are traced by the other tests
def test_single_server_matches_md1_waiting_time(engine):
    """max_num_seqs=1 with fixed lengths and a constant step cost is an M/D/1 queue: Wq = rho D / (2 (1 - rho))."""
    rng = np.random.default_rng(7)
    lam, n = 0.5, 8000
    arrivals = np.cumsum(rng.exponential(1 / lam, n))
    # Prompt 4 fits one step; 4 output tokens -> 4 steps of 0.25 s: D = 1 s.
    sim = Sim(
        [(float(t), 4, 4) for t in arrivals],
        num_gpu_blocks=64,
        step_s=0.25,
        engine=engine,
        max_num_seqs=1,
        max_num_batched_tokens=64,
    ).run()
    R = sim.reqs
    service = R.finish[:n] - R.first_scheduled[:n]
    assert np.allclose(service, 1.0)
    wq = (R.first_scheduled[:n] - R.arrival[:n])[1000:].mean()
    rho = lam * 1.0
    expected = rho * 1.0 / (2 * (1 - rho))
    assert abs(wq - expected) / expected < 0.08, (wq, expected)


def test_littles_law_on_open_loop_run():
    """Time-average requests in the engine (from step samples) equals arrival rate x mean time in the
    engine (no front-end, whose queue the step log does not see)."""
    sc, _ = load_scenario(
        None,
        [
            "frontend.enabled=false",
            "workload.arrival={type: poisson, rate: 30}",
            "workload.prompt_tokens={dist: uniform, min: 64, max: 512}",
            "workload.output_tokens={dist: lognormal, mean: 200, sigma: 0.6}",
            "run.duration_s=300",
            "run.warmup_s=0",
            "engine.max_num_seqs=256",
        ],
    )
    res = simulate(sc)
    log = res.engine.log.columns()
    T = res.end_time
    in_system = log["num_running"] + log["num_waiting"]
    L = float(np.dot(in_system, log["duration"]) / T)
    R = res.reqs
    n = R.n
    done = np.isfinite(R.finish[:n])
    lam = n / T
    W = float((np.where(done, R.finish[:n], T) - R.arrival[:n]).mean())
    assert abs(lam - 30) / 30 < 0.05
    assert abs(L - lam * W) / (lam * W) < 0.05, (L, lam * W)
