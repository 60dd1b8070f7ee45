"""Calibration: the weight-streaming pin, the fit on synthetic profiles, the per-layer kernel count."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from simulator.engine.cost import (
    FA2_ATTN_COMPUTE,
    FA3_ATTN_COMPUTE,
    FA3_ATTN_MEMORY,
    CostModel,
    Efficiency,
    Execution,
    StepWork,
    decode_work,
)
from simulator.engine.params import P
from simulator.scenario.hardware import load_gpu
from simulator.scenario.models import load_model
from simulator.validation.calibrate import fit, is_streaming, mape, predict, streaming_efficiency

GRID = [(b, 1, c) for b in (1, 4, 16, 64, 256) for c in (128, 1024, 4096)] + [
    (b, n, c) for b in (1, 4) for n in (64, 512, 2048) for c in (0, 1024)
]


def _streaming_rows(gpu: str, eff: float, tail_s: float) -> pd.DataFrame:
    bw = load_gpu(gpu).hbm_bandwidth * eff
    rows = []
    for n_out, n_in in [(1024, 1024), (4096, 4096), (28672, 4096), (51200, 5120), (128256, 4096)]:
        nbytes = 2 * n_out * n_in
        ms = (nbytes / bw + tail_s) * 1e3
        if nbytes < 16e6:
            ms *= 3  # launch-dominated small matrices are left out of the slope
        rows.append([gpu, "gemv", n_out, n_in, 1, nbytes, 8, ms])
    return pd.DataFrame(rows, columns=["gpu", "op", "out_features", "in_features", "batch", "bytes", "copies", "ms"])


def test_streaming_efficiency_is_the_slope_of_time_over_bytes():
    """ms = bytes / (0.8 x HBM bandwidth) + 6 us: the fit gives 0.8 whatever the fixed tail."""
    eff, bw = streaming_efficiency(_streaming_rows("h100-sxm", 0.8, 6e-6), "h100-sxm")
    assert eff == pytest.approx(0.8, rel=1e-6)
    assert bw == pytest.approx(0.8 * load_gpu("h100-sxm").hbm_bandwidth, rel=1e-6)


def _synthetic_profile(gpu: str, truth: Efficiency) -> pd.DataFrame:
    rows = []
    for model in ("llama-3.1-8b", "qwen3-32b"):
        cm = CostModel(load_model(model), load_gpu(gpu), 1, truth)
        for b, n, c in GRID:
            rows.append([gpu, model, b, n, c, cm.step_time(decode_work(b, c, n)) * 1e3])
    return pd.DataFrame(rows, columns=["gpu", "model", "batch", "new_tokens", "context", "ms"])


def test_fit_on_one_model_with_the_pin_predicts_the_other():
    """Profiles made by the cost model itself: with matmul_memory pinned to its true value, a fit on
    one model recovers the overheads and predicts the other model almost exactly."""
    truth = Efficiency(
        matmul_compute=0.55,
        matmul_memory=0.83,
        attn_compute=0.3,
        attn_memory=0.75,
        step_overhead_s=0.0,
        per_seq_overhead_s=6e-6,
        per_layer_overhead_s=7e-5,
    )
    df = _synthetic_profile("h100-sxm", truth)
    qwen, llama = df[df["model"] == "qwen3-32b"], df[df["model"] == "llama-3.1-8b"]
    eff = fit(qwen, "h100-sxm", pinned={"matmul_memory": 0.83})
    assert eff.matmul_memory == 0.83
    assert eff.per_layer_overhead_s == pytest.approx(7e-5, rel=0.05)
    assert mape(llama, eff, "h100-sxm") < 0.01
    pred = predict(llama, eff, "h100-sxm")
    assert np.all(pred > 0)


def test_qk_norm_layers_pay_for_two_more_kernels():
    """Qwen3 runs 8 small kernels per layer (two q/k RMSNorms on top of a Llama layer's 6), so its
    per-layer overhead is 8/6 of a plain layer's; nothing else in the step changes."""
    qwen = load_model("qwen3-8b")
    assert qwen.qk_norm and not load_model("llama-3.1-8b").qk_norm
    plain = dataclasses.replace(qwen, qk_norm=False)
    eff = Efficiency(per_layer_overhead_s=6e-5)
    g = load_gpu("h100-sxm")
    w = StepWork(num_seqs=1, num_tokens=1, num_decode_tokens=1, context_tokens=100, attn_pairs=101, num_sampled=1)
    extra = CostModel(qwen, g, 1, eff).step_time(w) - CostModel(plain, g, 1, eff).step_time(w)
    assert extra == pytest.approx(6e-5 * qwen.num_layers * 2 / 6, rel=1e-9)


def test_calibrate_cli_pins_matmul_memory_from_a_streaming_file(tmp_path):
    truth = Efficiency(matmul_memory=0.8, step_overhead_s=0.0, per_layer_overhead_s=5e-5)
    prof = tmp_path / "prof.csv"
    _synthetic_profile("h200", truth).to_csv(prof, index=False)
    stream = tmp_path / "streaming.csv"
    _streaming_rows("h200", 0.8, 4e-6).to_csv(stream, index=False)
    assert is_streaming(stream) and not is_streaming(prof)
    out = tmp_path / "cal.yaml"
    r = subprocess.run(
        [sys.executable, "-m", "simulator", "calibrate", str(prof), str(stream), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert "matmul_memory pinned to 0.800" in r.stdout
    doc = yaml.safe_load(out.read_text())
    assert doc["efficiency"]["matmul_memory"] == pytest.approx(0.8, rel=1e-6)
    assert doc["pinned"]["matmul_memory"]["measured_in"] == [str(stream)]
    assert doc["mape"] < 0.01


def test_mixed_step_decodes_cost_the_fa2_tile_rows():
    """Where vLLM runs FlashAttention-2 (compute capability 8.x), a decode batched with a prefill
    chunk pays FA2_MIXED_DECODE_ROWS more query rows over its context, by hand: the extra FLOPs
    are rows x its context x the model's attention FLOPs per pair. A step of decodes alone, a
    prefill alone, and any step on an FA3 GPU (Hopper) pay nothing extra."""
    from simulator.engine.cost import FA2_MIXED_DECODE_ROWS
    from simulator.scenario.versions import attention_kernel

    assert (
        attention_kernel(load_gpu("a100-80gb").compute_capability),
        attention_kernel(load_gpu("l40s").compute_capability),
        attention_kernel(load_gpu("h100-sxm").compute_capability),
        attention_kernel(load_gpu("b200").compute_capability),
        attention_kernel(load_gpu("mi300x").compute_capability),
    ) == ("fa2", "fa2", "fa3", "other", "other")
    m, g = load_model("qwen3-14b"), load_gpu("a100-80gb")
    # Attention compute-bound in every case: memory made free.
    eff = Efficiency(attn_memory=1e6)
    fa2 = CostModel(m, g, 1, eff, execution=Execution(mixed_decode_rows=FA2_MIXED_DECODE_ROWS))
    plain = CostModel(m, g, 1, eff)
    # 64 decodes over 4,096 cached tokens each, and a 2,048-token chunk starting at token 0.
    dec = dict(
        num_seqs=64,
        num_tokens=64,
        context_tokens=64 * 4096,
        attn_pairs=64 * 4097.0,
        num_sampled=64,
        single_row_context=64 * 4096,
    )
    mixed = StepWork(
        num_seqs=65,
        num_tokens=64 + 2048,
        context_tokens=64 * 4096,
        attn_pairs=64 * 4097.0 + 2048 * 2049 / 2,
        num_sampled=64,
        single_row_context=64 * 4096,
    )
    extra = FA2_MIXED_DECODE_ROWS * 64 * 4096 * fa2.params[P.ATTN_FLOPS_PER_PAIR] / fa2.params[P.ATTN_FLOPS]
    assert fa2.step_time(mixed) - plain.step_time(mixed) == pytest.approx(extra, rel=1e-9)
    assert extra > 0.02  # 106 rows x 64 x 4,096 keys x 40 layers: tens of ms on an A100
    for w in (StepWork(**dec), StepWork(num_seqs=1, num_tokens=2048, attn_pairs=2048 * 2049 / 2, num_sampled=1)):
        assert fa2.step_time(w) == plain.step_time(w)
    # The same on the GPU as a scenario runs it: A100 FA2, H100 FA3.
    from simulator.resolve import execution
    from simulator.scenario.config import blank_scenario

    sc = blank_scenario(["model=qwen3-14b"])
    assert execution(sc, g, m, 256, 2048).mixed_decode_rows == FA2_MIXED_DECODE_ROWS
    assert execution(sc, load_gpu("h100-sxm"), m, 256, 2048).mixed_decode_rows == 0.0


def test_hopper_attention_runs_at_vllm_fa3_rates():
    """On Hopper vLLM runs FlashAttention-3, whose measured rates replace the calibration's
    (PyTorch's FA2); on compute capability 8.x FlashAttention-2 at its published A100 rate; an MLA
    model (FlashMLA) keeps the calibration's, and a scenario's own cost.attn_* override wins."""
    from simulator.engine.calibration import builtin
    from simulator.engine.cost import FA3_ATTN_COMPUTE, FA3_ATTN_MEMORY
    from simulator.resolve import efficiency
    from simulator.scenario.config import blank_scenario

    h100, a100 = load_gpu("h100-sxm"), load_gpu("a100-80gb")
    sc = blank_scenario(["model=qwen3-14b"])
    e = efficiency(sc, h100, load_model("qwen3-14b"))
    assert (e.attn_compute, e.attn_memory) == (FA3_ATTN_COMPUTE, FA3_ATTN_MEMORY)
    cal = builtin("h100-sxm")
    assert e.matmul_compute == cal.matmul_compute and cal.attn_compute != FA3_ATTN_COMPUTE
    mla = efficiency(sc, h100, load_model("deepseek-v3"))
    assert (mla.attn_compute, mla.attn_memory) == (cal.attn_compute, cal.attn_memory)
    a = efficiency(sc, a100, load_model("qwen3-14b"))
    assert (a.attn_compute, a.matmul_compute) == (
        builtin("a100-80gb").attn_compute,
        builtin("a100-80gb").matmul_compute,
    )
    assert builtin("a100-40gb") == builtin("a100-80gb")
    from simulator.engine.cost import FA2_ATTN_COMPUTE

    l40s = efficiency(sc, load_gpu("l40s"), load_model("qwen3-14b"))  # FA2, no calibration of its own
    assert l40s.attn_compute == FA2_ATTN_COMPUTE and l40s.matmul_compute == Efficiency().matmul_compute
    own = efficiency(blank_scenario(["model=qwen3-14b", "cost.attn_compute=0.5"]), h100, load_model("qwen3-14b"))
    assert own.attn_compute == 0.5 and own.attn_memory == FA3_ATTN_MEMORY


def test_moe_cost_follows_vllms_fused_moe_kernel():
    """The routed experts' cost (cost.moe_s at the default fused-MoE rates) against vLLM's own
    Triton kernel replayed from a CUDA graph on an H100 (data/profiles/moe/vllm_moe_h100-sxm.csv,
    64 tokens and more): within 8% on average, where the max of compute and streaming at the rates
    once taken from PyTorch's grouped GEMMs (0.30 / 0.70) was 15% off, and no point is off by more
    than a quarter."""
    from simulator.engine.cost import moe_s
    from simulator.engine.params import PARAMS

    rows = pd.read_csv("data/profiles/moe/vllm_moe_h100-sxm.csv")
    rows = rows[rows["tokens"] >= 64]
    assert len(rows) >= 20
    g, e = load_gpu("h100-sxm"), Efficiency()

    def predicted(compute, memory):
        out = []
        for r in rows.itertuples():
            cp = np.zeros(len(PARAMS))
            cp[[P.MOE_LAYERS, P.EXPERTS_PER_TOKEN, P.NUM_EXPERTS, P.EXPERT_PARAMS, P.EXPERT_WEIGHT_BYTES]] = (
                1,
                r.top_k,
                r.experts,
                3 * r.intermediate * r.hidden,
                2,
            )
            cp[P.MOE_FLOPS], cp[P.MOE_BW] = g.flops("bf16") * compute, g.hbm_bandwidth * memory
            out.append(moe_s(cp, r.tokens))
        return np.array(out)

    err = np.abs(np.log(predicted(e.moe_compute, e.moe_memory) / (rows["ms_graph"].to_numpy() * 1e-3)))
    assert err.mean() < 0.08 and err.max() < np.log(1.25), (err.mean(), err.max())


def test_enforce_eager_launches_at_vllms_eager_rate():
    """With enforce_eager every step is launched kernel by kernel through vLLM's modules (no graphs,
    no compilation), at vllm_eager_launch_s a kernel: a decode step of Llama-3.1-8B at batch 8 on an
    H100 is bound by that floor (32 layers x 10 kernels x 30 us = 9.6 ms, above the GPU's ~6.5 ms),
    where a compiled step too big for a graph keeps the plain-PyTorch rate (eager_launch_s)."""
    from simulator.engine.cost import GEMMS_PER_LAYER, small_kernels_per_layer
    from simulator.resolve import cost_model
    from simulator.scenario.config import blank_scenario

    m, g = load_model("llama-3.1-8b"), load_gpu("h100-sxm")
    per_step = m.num_layers * (small_kernels_per_layer(m) + GEMMS_PER_LAYER)
    e = Efficiency()
    for eager, rate in ((True, e.vllm_eager_launch_s), (False, e.eager_launch_s)):
        sc = blank_scenario(["model=llama-3.1-8b", f"engine.enforce_eager={str(eager).lower()}"])
        cm = cost_model(sc, m, g, 256, 8192)
        assert cm.params[P.EAGER_FLOOR_S] == pytest.approx(rate * per_step)
    sc = blank_scenario(["model=llama-3.1-8b", "engine.enforce_eager=true", "engine.vllm_version='0.10'"])
    cm = cost_model(sc, m, g, 256, 8192)
    step = cm.step_time(decode_work(8, 96))
    assert step >= e.vllm_eager_launch_s * per_step > cm.with_execution(Execution()).step_time(decode_work(8, 96))


def test_a_blended_roofline_is_the_norm_of_compute_and_memory_time():
    """Hand-computed: 3 s of compute and 4 s of memory traffic cost 4 s under the max (blend 0) and
    (3^2 + 4^2)^(1/2) = 5 s under blend 2; a blend never makes an operator faster than the max."""
    from simulator.engine.cost import roofline

    assert roofline((3.0, 4.0), 1.0, 1.0, 0.0) == 4.0
    assert roofline((3.0, 4.0), 1.0, 1.0, 2.0) == pytest.approx(5.0, rel=1e-12)
    assert roofline((3.0, 4.0), 1.0, 1.0, 3.0) == pytest.approx((27.0 + 64.0) ** (1 / 3), rel=1e-12)
    for blend in (2.0, 3.0, 6.0):
        assert roofline((3.0, 4.0), 1.0, 1.0, blend) > 4.0
    # the step of a calibration with blend 0 (every built-in file but the H200's) is the max's, term for term
    g, m = load_gpu("h200"), load_model("llama-3.1-8b")
    w = decode_work(128, 80, 1)
    assert CostModel(m, g, 1, Efficiency(roofline_blend=0.0)).step_time(w) == CostModel(m, g, 1).step_time(w)
    assert CostModel(m, g, 1, Efficiency(roofline_blend=3.0)).step_time(w) > CostModel(m, g, 1).step_time(w)


def test_calibrate_finds_the_blend_its_profile_was_made_with_and_refits_the_overheads_on_served_steps(tmp_path):
    """A profile made by the cost model with blend 3: `--roofline-blend auto` picks 3 and fits it
    almost exactly; `--overheads-from` fits the per-layer and per-sequence overheads again on served
    steps made with other overheads (everything else held) and says so under `adjusted`; `--pin`
    holds an efficiency at the value given."""
    truth = Efficiency(matmul_memory=0.8, step_overhead_s=0.0, per_layer_overhead_s=5e-5, roofline_blend=3.0)
    prof = tmp_path / "prof.csv"
    _synthetic_profile("h200", truth).to_csv(prof, index=False)
    served_truth = dataclasses.replace(truth, per_layer_overhead_s=3e-5, per_seq_overhead_s=2e-6)
    cm = CostModel(load_model("llama-3.1-8b"), load_gpu("h200"), 1, served_truth)
    rows = [
        ["h200", "llama-3.1-8b", b, 1, 80, cm.step_time(decode_work(b, 80, 1)) * 1e3] for b in (1, 16, 64, 128, 256)
    ]
    served = tmp_path / "served.csv"
    pd.DataFrame(rows, columns=["gpu", "model", "batch", "new_tokens", "context", "ms"]).to_csv(served, index=False)
    out = tmp_path / "cal.yaml"
    args = [str(prof), "--pin", "matmul_memory=0.8", "--roofline-blend", "auto", "--overheads-from", str(served)]
    r = subprocess.run(
        [sys.executable, "-m", "simulator", "calibrate", *args, "-o", str(out)], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["efficiency"]["roofline_blend"] == 3.0
    assert doc["mape"] < 0.01
    assert doc["pinned"]["matmul_memory"] == {"value": 0.8, "given": "--pin"}
    assert doc["efficiency"]["per_layer_overhead_s"] == pytest.approx(3e-5, rel=0.05)
    assert doc["adjusted"]["per_layer_overhead_s"]["from"] == pytest.approx(5e-5, rel=0.05)
    assert "served.csv" in doc["adjusted"]["why"]
    # without --roofline-blend the max is kept, as every built-in calibration has it
    r = subprocess.run(
        [sys.executable, "-m", "simulator", "calibrate", str(prof), "-o", str(tmp_path / "max.yaml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load((tmp_path / "max.yaml").read_text())["efficiency"]["roofline_blend"] == 0.0


def test_calibrate_scales_then_refits_what_it_is_told_on_served_steps(tmp_path):
    """`--scale` multiplies a fitted value before the served steps' refit; `--refit` names what that
    refit fits (here the weights' streaming share and the per-sequence time, the per-layer time held
    at its scaled value); `--pin` holds an overhead too. The file records each step under `adjusted`.
    The served steps are priced as servesim prices vLLM's on the GPU: attention at FlashAttention-3's
    rates on an H200 (steps made so, at long contexts, are fitted exactly), while the file keeps the
    profiles' own attention rates; refitting those is refused in one line."""
    truth = Efficiency(matmul_memory=0.9, step_overhead_s=0.0, per_layer_overhead_s=6e-5, per_seq_overhead_s=4e-6)
    prof = tmp_path / "prof.csv"
    _synthetic_profile("h200", truth).to_csv(prof, index=False)
    served_truth = dataclasses.replace(
        truth,
        per_layer_overhead_s=3e-5,
        matmul_memory=0.75,
        per_seq_overhead_s=2e-6,
        attn_compute=FA3_ATTN_COMPUTE,
        attn_memory=FA3_ATTN_MEMORY,
    )
    cm = CostModel(load_model("llama-3.1-8b"), load_gpu("h200"), 1, served_truth)
    rows = [
        ["h200", "llama-3.1-8b", b, 1, c, cm.step_time(decode_work(b, c, 1)) * 1e3]
        for b in (1, 8, 16, 32, 64, 128, 256, 384)
        for c in (80, 1024)
    ]
    served = tmp_path / "served.csv"
    pd.DataFrame(rows, columns=["gpu", "model", "batch", "new_tokens", "context", "ms"]).to_csv(served, index=False)
    out = tmp_path / "cal.yaml"
    args = [
        "--scale",
        "per_layer_overhead_s=0.5",
        "--served",
        str(served),
        "--refit",
        "matmul_memory,per_seq_overhead_s",
    ]
    r = _calibrate(str(prof), *args, "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load(out.read_text())
    adj, eff = doc["adjusted"], doc["efficiency"]
    assert adj["per_layer_overhead_s"]["from"] == pytest.approx(6e-5, rel=0.05)
    assert adj["per_layer_overhead_s"]["factor"] == 0.5
    assert eff["per_layer_overhead_s"] == pytest.approx(adj["per_layer_overhead_s"]["from"] * 0.5)  # held
    assert eff["matmul_memory"] == pytest.approx(0.75, rel=0.03)
    assert adj["matmul_memory"]["from"] == pytest.approx(0.9, rel=0.03)
    assert eff["per_seq_overhead_s"] == pytest.approx(2e-6, rel=0.2)
    assert "scaled by 0.5" in adj["why"] and "served.csv" in adj["why"]
    assert "0.0% after" in adj["why"] and "attn_memory 0.87" in adj["why"]
    assert eff["attn_memory"] == pytest.approx(truth.attn_memory, rel=0.05)  # the profiles' rate, kept
    r = _calibrate(str(prof), "--served", str(served), "--refit", "attn_memory", "-o", str(out))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "--refit attn_memory: the served steps' attention runs a kernel" in r.stderr
    # an overhead pinned holds in the profiles' fit
    r = _calibrate(str(prof), "--pin", "per_layer_overhead_s=5e-05", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(out.read_text())["efficiency"]["per_layer_overhead_s"] == 5e-5
    # a value both pinned and refitted is refused in one line
    both = ["--pin", "matmul_memory=0.8", "--served", str(served), "--refit", "matmul_memory"]
    r = _calibrate(str(prof), *both, "-o", str(out))
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "matmul_memory both pinned (--pin) and refitted (--refit)" in r.stderr


def _calibrate(*args: str) -> subprocess.CompletedProcess:
    """``servesim calibrate ARGS`` in a child process, its output captured."""
    return subprocess.run([sys.executable, "-m", "simulator", "calibrate", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--pin", "matmul_memory=1.5"], "--pin: 'matmul_memory=1.5' must be NAME=VALUE"),
        (["--pin", "per_layer_overhead_s=0.5"], "0 <= VALUE <= 0.01 s for an overhead"),
        (["--pin", "step_overhead_s=0.001"], "NAME one of matmul_compute"),
        (["--scale", "matmul_memory=0"], "--scale: 'matmul_memory=0' must be NAME=VALUE"),
        (["--refit", "matmul_memory,matmul_memory"], "--refit: 'matmul_memory,matmul_memory' must be names"),
        (["--refit", "matmul_memory"], "calibrate: --refit names what --served CSV refits"),
        (["--roofline-blend", "sharp"], "--roofline-blend: 'sharp' must be 'auto' or a number from 0 to 64"),
    ],
)
def test_calibrate_names_a_bad_pin_or_blend_in_one_line(tmp_path, args, says):
    prof = tmp_path / "prof.csv"
    _synthetic_profile("h200", Efficiency()).to_csv(prof, index=False)
    r = subprocess.run(
        [sys.executable, "-m", "simulator", "calibrate", str(prof), *args, "-o", str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0
    assert says in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_served_steps_of_another_gpu_are_refused_in_one_line(tmp_path):
    prof, served = tmp_path / "prof.csv", tmp_path / "served.csv"
    _synthetic_profile("h200", Efficiency()).to_csv(prof, index=False)
    _synthetic_profile("h100-sxm", Efficiency()).to_csv(served, index=False)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulator",
            "calibrate",
            str(prof),
            "--served",
            str(served),
            "-o",
            str(tmp_path / "c.yaml"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"--served {served} holds steps of h100-sxm, not h200" in r.stderr
    assert not (tmp_path / "c.yaml").exists()


def test_served_steps_are_priced_with_the_attention_kernel_vllm_runs_on_the_gpu():
    """Hand-checked against resolve.kernel_attention_rates: FlashAttention-3's measured rates on Hopper,
    FlashAttention-2's published compute on Ampere; none on an AMD GPU under the newest line (ROCM_ATTN,
    unmeasured) nor for an MLA model (FlashMLA), whose served steps keep the file's own rates."""
    from simulator.validation.calibrate import served_attention_rates

    def steps(model: str) -> pd.DataFrame:
        return pd.DataFrame({"model": [model]})

    assert served_attention_rates(steps("llama-3.1-8b"), "h200") == {
        "attn_compute": FA3_ATTN_COMPUTE,
        "attn_memory": FA3_ATTN_MEMORY,
    }
    assert served_attention_rates(steps("llama-3.1-8b"), "a100-80gb") == {"attn_compute": FA2_ATTN_COMPUTE}
    assert served_attention_rates(steps("llama-3.1-8b"), "mi300x") == {}
    assert served_attention_rates(steps("deepseek-v2-lite"), "h200") == {}
