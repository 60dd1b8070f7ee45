"""Each engine's fixed CPU cost a step is read off a small model's short decode steps (vLLM 0.26's
engine core: h200_floor_2026-11-29; SGLang 0.5.16's scheduler: h200_sgfloor_2026-12-01). A reading
holds only while the GPU's step, as servesim prices it, is the shorter: had a later change to the
GPU's price covered those steps, the cost would stand unmeasured (as SGLang's 3.9 ms a step did,
docs/sglang.md). These tests keep each reading's premise true."""

from __future__ import annotations

import pytest

from simulator.resolve import cost_model, engine_defaults, load_arch
from simulator.scenario import hosts
from simulator.scenario.hardware import load_gpu
from simulator.validation import validate
from tools.validation import fit_host


def _run(index, run_id: str) -> dict:
    (run,) = [r for r in validate.load(index)["runs"] if r["id"] == run_id]
    return run


def _gpu_step_ms(run: dict, context: int) -> float:
    """servesim's step of one decode at ``context`` tokens on the run's GPU, with no CPU work."""
    sc = validate.e2e_scenario(run)
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    cm = cost_model(sc, model, gpu, *engine_defaults(gpu, sc))
    return fit_host.scheduler_step_ms(cm, 1.0, 0.0, 0.0, 1, context)


def test_vllms_engine_step_is_read_where_the_engine_sets_the_step():
    """Qwen3-0.6B on vLLM 0.26, one request in flight (128 + 512 tokens): the server's TPOT is well
    above servesim's GPU step, so the engine core's 2.0 ms a step (reference host) is what the run
    measures; replayed on its host, servesim's TPOT is within 10% of the server's."""
    run = _run(validate.E2E_FILE, "h200_floor_2026-11-29_qwen06b_floor_c1")
    measured = run["measured"]["median_tpot_ms"]
    assert _gpu_step_ms(run, 128 + 256) < 0.85 * measured
    cpu_ms = hosts.load_host_costs("recorded").engine_step_s * 1e3 * validate.recorded_scale(run)
    assert cpu_ms > _gpu_step_ms(run, 128 + 256)  # the engine core's step is the longer of the two
    res = validate.simulate_e2e(run)
    assert res.simulated["median_tpot_ms"] == pytest.approx(measured, rel=0.10)


def test_sglangs_scheduler_step_is_an_upper_bound_its_short_steps_keep():
    """Qwen3-0.6B on SGLang 0.5.16, one request in flight: the server's TPOT is about servesim's GPU
    step (within 15%), so the steps only bound the scheduler's CPU work a step from above, and the
    set's (on the run's host) stays within that bound."""
    run = _run(validate.E2E_SGLANG_FILE, "h200_sgfloor_2026-12-01_sglang_qwen06b_floor_c1")
    measured = run["measured"]["median_tpot_ms"]
    assert _gpu_step_ms(run, 128 + 256) == pytest.approx(measured, rel=0.15)
    cpu_ms = hosts.load_host_costs("sglang").engine_step_s * 1e3 * validate.recorded_scale(run)
    assert cpu_ms <= measured
