"""A dummy-weight server's mixture-of-experts routing (``engine.load_format: dummy``): hand-computed
bytes, and the recorded servers replayed as they ran (data/e2e/h200_gptoss_2026-11-29)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.cost import CostModel, decode_work, moe_work
from simulator.scenario.config import load_scenario
from simulator.scenario.hardware import load_gpu
from simulator.scenario.models import load_model
from simulator.validation import validate


@pytest.mark.parametrize(
    "name, biased",
    [("gpt-oss-120b", True), ("gpt-oss-20b", True), ("deepseek-r1", True), ("qwen3-30b-a3b", False)],
)
def test_which_routers_add_a_bias_to_their_scores(name, biased):
    assert load_model(name).router_bias is biased


def test_a_dense_model_has_no_router_to_bias():
    assert load_model("llama-3.1-8b").router_bias is False


@pytest.mark.parametrize("tokens", [1, 4, 16, 128, 4096])
def test_a_dummy_biased_router_reads_the_same_k_experts_at_any_batch(tokens):
    m = load_model("gpt-oss-120b")
    cm = CostModel(m, load_gpu("h200"), quantization="mxfp4", dummy_weights=True)
    _, nbytes = moe_work(cm.params, tokens)
    # 36 layers x 4 experts x (3 x 2880 x 2880) weights at MXFP4's 4 bits, and their scales as the
    # H200's Triton kernel pads them (5,888 x 92 and 3,072 x 92 bytes: memory.mxfp4_expert_bytes)
    expected = 36 * 4 * (3 * 2880 * 2880 / 2 + 5888 * 92 + 3072 * 92)
    assert nbytes == pytest.approx(expected, rel=1e-9)


def test_real_weights_read_the_experts_uniform_routing_touches():
    m = load_model("gpt-oss-120b")
    cm = CostModel(m, load_gpu("h200"), quantization="mxfp4")
    per_expert = 3 * 2880 * 2880 / 2 + 5888 * 92 + 3072 * 92  # values and padded scales, as above
    for tokens in (4, 16, 128):
        touched = 128 * (1 - (1 - 4 / 128) ** tokens)
        assert moe_work(cm.params, tokens)[1] == pytest.approx(36 * touched * per_expert, rel=1e-9)


def test_dummy_weights_change_nothing_for_a_bias_free_router():
    m, gpu = load_model("qwen3-30b-a3b"), load_gpu("h200")
    real, dummy = CostModel(m, gpu), CostModel(m, gpu, dummy_weights=True)
    assert np.array_equal(real.params, dummy.params)


def test_a_scenario_with_dummy_weights_prices_a_faster_moe_step():
    def step_ms(*extra):
        from simulator.resolve import cost_model, engine_defaults, load_arch

        sc, _ = load_scenario(None, ["model=gpt-oss-120b", "hardware.gpu=h200", "hardware.host=null", *extra])
        model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
        seqs, tokens = engine_defaults(gpu, sc)
        return cost_model(sc, model, gpu, seqs, tokens).step_time(decode_work(64, 2000)) * 1e3

    assert step_ms("engine.load_format=dummy") < 0.7 * step_ms()


def test_bad_load_format_is_one_line_naming_the_field():
    from simulator.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_scenario(None, ["engine.load_format=safetensors"])
    text = str(e.value)
    assert "engine.load_format" in text and "safetensors" in text and "\n" not in text


def _gptoss_runs():
    return [r for r in validate.load(validate.E2E_FILE)["runs"] if r["recording"] == "h200_gptoss_2026-11-29"]


def test_recorded_servers_are_replayed_with_dummy_weights_on_their_own_probe():
    run = _gptoss_runs()[0]
    sc = validate.e2e_scenario(run)
    assert sc.engine.load_format == "dummy"
    # not in the host catalog: the probe the recorder read around the lane
    assert sc.hardware.host == {"probe_us": pytest.approx(run["host"]["probe_us"])}


def test_the_gptoss_120b_runs_at_16_in_flight_replay_close_only_as_the_dummy_server_routed():
    """Held out: at 16 in flight a real router would touch ~51 experts a layer, the recorded dummy
    one touched 4. Replayed as the server ran, p50 TPOT is within 20% (8-18% fast since the weight-only
    MXFP4 path was refitted on spread-routing steps: data/e2e/README.md, h200_gptoss_noise2_2026-11-29);
    priced as real weights, about 2x slow: the recording's speed comes from its routing, not from
    anything fitted."""
    runs = [r for r in _gptoss_runs() if "120b" in r["id"] and r["id"].endswith("_c16")]
    assert len(runs) == 3 and all(r["split"] == "heldout" for r in runs)
    for r in runs:
        as_ran = validate.simulate_e2e(r).rel_error("median_tpot_ms")
        real = validate.simulate_e2e(r, ["engine.load_format=auto"]).rel_error("median_tpot_ms")
        assert abs(as_ran) < 0.20 and real > 0.90 and real > 4 * abs(as_ran), (r["id"], as_ran, real)


def test_a_recorded_run_that_gives_its_own_load_format_is_replayed_with_it():
    """The recorder's default is dummy routing; a run whose entry says otherwise is replayed as it
    says, without the two settings clashing."""
    run = dict(_gptoss_runs()[0])
    run["engine"] = {**run["engine"], "load_format": "auto"}
    assert validate.e2e_scenario(run).engine.load_format == "auto"
    assert validate.e2e_scenario(_gptoss_runs()[0]).engine.load_format == "dummy"


def test_a_validation_plot_of_runs_that_all_failed_says_so(tmp_path, monkeypatch):
    """`servesim validate --only X` where every run of X fails: the figure is drawn, each panel
    saying no run was simulated, with no legend of nothing (the errors stay in the report)."""
    from matplotlib.figure import Figure

    drawn = []
    real = Figure.savefig

    def keep(fig, *a, **k):
        drawn.append(fig)
        return real(fig, *a, **k)

    monkeypatch.setattr(Figure, "savefig", keep)
    failed = [validate.RunResult("r1", "heldout", {"output_throughput": 100.0}, {}, error="ConfigError: bad")]
    path = validate.plot_runs([], failed, tmp_path / "v.png", title="recorded runs")
    assert path.is_file() and len(drawn) == 1
    fig = drawn[0]
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == len(validate.METRICS) and all(t.endswith(": no run simulated") for t in titles)
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert fig._suptitle.get_text() == "servesim vs 1 recorded runs"
