"""The Blackwell and AMD Instinct GPUs of the catalogue: their numbers, their 4-bit rates, the
attention kernel they get and the efficiencies derived for them from public measurements."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.engine import calibration
from simulator.engine.calibration import builtin, vllm_attention
from simulator.engine.cost import FA3_ATTN_COMPUTE, CostModel, Efficiency, decode_work
from simulator.errors import ConfigError
from simulator.resolve import efficiency
from simulator.run import build
from simulator.scenario.config import blank_scenario, scenario_from_dict
from simulator.scenario.hardware import builtin_gpus, gpu_from_dict, load_gpu
from simulator.scenario.models import load_model
from simulator.scenario.versions import attention_kernel

NEW = ("b300", "gb200", "mi325x", "mi355x")

# Hand-checked against the catalogue's sources: driver-reported memory (MiB x 2**20), datasheet
# bandwidth, dense BF16 and 4-bit peaks (None: no 4-bit matrix cores), the NVLink domain, and NVIDIA's
# compute capability or AMD's LLVM target.
EXPECTED = {
    "b200": (183_359 * 2**20, 8.0e12, 2250e12, 9000e12, 8, "10.0", None),
    "b300": (275_040 * 2**20, 8.0e12, 2250e12, 13500e12, 8, "10.3", None),
    "gb200": (189_471 * 2**20, 8.0e12, 2500e12, 10000e12, 72, "10.0", None),
    "mi300x": (205_822_885_888, 5.3e12, 1307.4e12, None, 8, None, "gfx942"),
    "mi325x": (261_824 * 2**20, 6.0e12, 1307.4e12, None, 8, None, "gfx942"),
    "mi355x": (308_902_100_992, 8.0e12, 2516.6e12, 10066.3e12, 8, None, "gfx950"),
}


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_each_gpu_loads_with_its_hand_checked_numbers(key):
    hbm, bw, bf16, fp4, group, cc, gfx = EXPECTED[key]
    g = load_gpu(key)
    assert key in builtin_gpus()
    assert (g.hbm_bytes, g.hbm_bandwidth, g.peak_flops["bf16"], g.link_group) == (hbm, bw, bf16, group)
    assert g.peak_flops.get("fp4") == fp4
    assert (g.compute_capability, g.gfx) == (cc, gfx)
    assert g.interconnect_bandwidth > g.host_link_bandwidth > 0


def test_catalogue_entries_cite_a_source_for_every_number():
    from simulator.scenario import yamlio
    from simulator.scenario.hardware import CATALOG

    cat = yamlio.load(CATALOG.read_text())
    for key in NEW:
        entry = cat[key]
        numbers = {k for k in entry if k not in ("name", "sources")}
        assert numbers <= set(entry["sources"]), (key, numbers - set(entry["sources"]))


def test_the_fp4_rate_is_asked_for_only_by_4_bit_formats():
    """fp4 (NVFP4 / MXFP4) reads the 4-bit rate where a GPU has one and the bf16 rate where it does
    not; every weight format servesim sizes gives the same step time with or without an fp4 entry."""
    b200, h100, mi300x = load_gpu("b200"), load_gpu("h100-sxm"), load_gpu("mi300x")
    for fmt in ("fp4", "nvfp4", "mxfp4"):
        assert b200.flops(fmt) == 9000e12
        assert h100.flops(fmt) == h100.peak_flops["bf16"]
        assert mi300x.flops(fmt) == mi300x.peak_flops["bf16"]
    assert load_gpu("mi355x").flops("mxfp4") == 10066.3e12
    without = replace(b200, peak_flops={k: v for k, v in b200.peak_flops.items() if k != "fp4"})
    m = load_model("llama-3.1-8b")
    for q in ("none", "fp8", "int8", "int4"):
        a, b = CostModel(m, b200, 1, quantization=q), CostModel(m, without, 1, quantization=q)
        for work in (decode_work(256, 2048), decode_work(8, 0, 2048)):
            assert a.step_time(work) == b.step_time(work), q


def test_an_amd_gpu_does_not_get_flashattention():
    """AMD GPUs carry gfx, not a compute capability: the attention kernel is not FA2 or FA3, so
    their attention runs at the calibration's rates, not FA3's."""
    m = load_model("llama-3.1-8b")
    sc = blank_scenario(["model=llama-3.1-8b"])
    for key in ("mi300x", "mi325x", "mi355x"):
        g = load_gpu(key)
        assert attention_kernel(g.compute_capability) == "other"
        eff = efficiency(sc, g, m)
        assert eff.attn_compute == Efficiency().attn_compute != FA3_ATTN_COMPUTE
    assert attention_kernel(load_gpu("h200").compute_capability) == "fa3"
    assert attention_kernel(load_gpu("b300").compute_capability) == "other"


def test_vllm_before_0_19_runs_its_triton_attention_on_an_amd_gpu():
    """vLLM's default attention on an AMD GPU is its Triton kernel before 0.19 (ROCM_ATTN from 0.19):
    where the GPU's calibration fitted that kernel's rates (the MI355X, on llm-d's vLLM 0.15.1 runs)
    a scenario of such a release gets them; 0.19 on, SGLang, and a user's calibration file do not."""
    m = load_model("llama-3.1-8b")
    g = load_gpu("mi355x")
    assert attention_kernel(g.compute_capability, g.gfx, "triton") == "rocm_triton"
    assert attention_kernel(g.compute_capability, g.gfx, "rocm") == "other"
    assert attention_kernel(load_gpu("h200").compute_capability, None, "triton") == "fa3"
    fitted = vllm_attention("mi355x")
    assert set(fitted) == {"attn_compute", "attn_memory"}
    assert vllm_attention("mi300x") == {}  # nothing fitted there: its efficiency stands

    def eff(*sets):
        return efficiency(blank_scenario(["model=llama-3.1-8b", "hardware.gpu=mi355x", *sets]), g, m)

    for release in ("0.15.1", "0.11", "0.10.2"):
        e = eff(f"engine.vllm_version={release}")
        assert (e.attn_compute, e.attn_memory) == (fitted["attn_compute"], fitted["attn_memory"]), release
    base = builtin("mi355x")
    for sets in (["engine.vllm_version=0.19"], ["engine.vllm_version=0.26"], ["engine.framework=sglang"]):
        e = eff(*sets)
        assert (e.attn_compute, e.attn_memory) == (base.attn_compute, base.attn_memory), sets
    assert eff("engine.vllm_version=0.15.1", "cost.calibration=none").attn_compute == Efficiency().attn_compute


def test_vllm_on_an_amd_gpu_says_which_attention_it_prices_and_whether_measured():
    """A note where vLLM's default attention on an AMD GPU was not measured (its Triton kernel on the
    MI300X; ROCM_ATTN, 0.19 on, anywhere); none where it was (the MI355X before 0.19), for SGLang,
    for a user's calibration file, or on an NVIDIA GPU."""
    from simulator.outputs.notes import scenario_notes

    def notes(*sets):
        sc = blank_scenario(["model=llama-3.1-8b", *sets])
        return [n for n in scenario_notes(sc) if "attention is priced at the GPU's calibration" in n]

    assert not notes("hardware.gpu=mi355x", "engine.vllm_version=0.15.1")
    assert "Triton attention (TRITON_ATTN" in notes("hardware.gpu=mi300x", "engine.vllm_version=0.15.1")[0]
    assert "runs ROCM_ATTN" in notes("hardware.gpu=mi355x", "engine.vllm_version=0.26")[0]
    assert not notes("hardware.gpu=mi355x", "engine.vllm_version=0.26", "cost.calibration=none")
    assert not notes("hardware.gpu=mi355x", "engine.framework=sglang", "engine.max_num_seqs=null",
                     "engine.max_num_batched_tokens=null", "engine.gpu_memory_utilization=null")  # fmt: skip
    assert not notes("hardware.gpu=h200", "engine.vllm_version=0.15.1")


def test_gpt_oss_on_an_a100_says_its_attention_runs_on_vllms_triton_kernel():
    """vLLM's Triton fallback for attention sinks is said where it prices a run (gpt-oss on Ampere),
    with its rate; not on Hopper, for a model without sinks, for SGLang, or where the scenario sets
    the attention rate itself."""
    from simulator.outputs.notes import scenario_notes

    def notes(*sets, gpu="a100-80gb"):
        sc = blank_scenario([f"hardware.gpu={gpu}", *sets])
        return [n for n in scenario_notes(sc) if "with its Triton kernel (TRITON_ATTN" in n]

    (note,) = notes("model=gpt-oss-20b")
    assert "gpt-oss-20b's attention on a100-80gb" in note and "11% of the bf16 peak" in note
    assert not notes("model=gpt-oss-20b", gpu="h200")
    assert not notes("model=llama-3.1-8b")
    assert not notes("model=gpt-oss-20b", "cost.attn_compute=0.3")
    assert not notes("model=gpt-oss-20b", "engine.framework=sglang", "engine.max_num_seqs=null",
                     "engine.max_num_batched_tokens=null", "engine.gpu_memory_utilization=null")  # fmt: skip


def test_gfx_is_checked():
    base = {"hbm_bytes": 8e10, "hbm_bandwidth": 3e12, "peak_flops": {"bf16": 1e15}}
    base |= {"interconnect_bandwidth": 4e11, "host_link_bandwidth": 6.4e10}
    assert gpu_from_dict("x", {**base, "gfx": "gfx942"}).gfx == "gfx942"
    with pytest.raises(
        ConfigError, match=r"^hardware\.gfx must be an AMD LLVM target such as 'gfx942' \(got 'cdna3'\)$"
    ):
        gpu_from_dict("x", {**base, "gfx": "cdna3"})
    with pytest.raises(ConfigError, match=r"^hardware\.gfx: an AMD GPU has no NVIDIA compute_capability"):
        gpu_from_dict("x", {**base, "gfx": "gfx942", "compute_capability": "9.0"})
    # fp4 is accepted in a custom GPU's peak_flops, and checked as every rate is.
    assert gpu_from_dict("x", {**base, "peak_flops": {"bf16": 1e15, "fp4": 4e15}}).flops("nvfp4") == 4e15
    with pytest.raises(ConfigError, match=r"peak_flops\.fp4 must be a finite number > 0 \(got -1"):
        gpu_from_dict("x", {**base, "peak_flops": {"bf16": 1e15, "fp4": -1}})


# GPUs whose MoE rate and per-layer kernel time are fitted on public SGLang runs (the B200's and the
# MI300X's own; the others share them with the GPU whose kernels they run).
PUBLIC_FIT = {"b200": "b200", "b300": "b200", "gb200": "b200", "mi300x": "mi300x", "mi325x": "mi300x"}
# ... and those whose per-layer kernel time is fitted on public vLLM runs (fit_gpu_family.py --engine vllm)
VLLM_FIT = ("mi355x",)


def test_new_gpus_take_efficiencies_derived_from_public_measurements():
    """The H100 fit's matmul_compute scaled by the GPU's best-shape matmul over its peak against the
    H100's; a streaming read's share of bandwidth, the family's where the GPU has none; the rest the
    defaults. The B200 and MI300X, in the catalog before, are derived the same way."""
    h100 = calibration.builtin("h100-sxm")
    assert h100 is not None
    scale = h100.matmul_compute / (794.5 / 989.4)
    measured = {"b300": 1769 / 2250, "gb200": 1822 / 2500, "mi325x": 784.9 / 1307.4, "mi355x": 1565 / 2516.6}
    measured |= {"b200": 1745 / 2250, "mi300x": 668.4 / 1307.4}
    memory = {"b300": 7.48 / 8.0, "gb200": 7.48 / 8.0, "mi325x": 4.256 / 5.3, "mi355x": 4.256 / 5.3}
    memory |= {"b200": 7.48 / 8.0, "mi300x": 4.256 / 5.3}
    for key in measured:
        eff = calibration.builtin(key)
        assert eff is not None
        assert eff.matmul_compute == pytest.approx(scale * measured[key], abs=1e-4)
        assert eff.matmul_memory == pytest.approx(memory[key], abs=1e-3)
        fitted = ("moe_memory", "per_layer_overhead_s") if key in PUBLIC_FIT else ()
        fitted += ("per_layer_overhead_s",) if key in VLLM_FIT else ()
        rest = {
            f: getattr(eff, f) for f in calibration.GPU_FIELDS if f not in ("matmul_compute", "matmul_memory", *fitted)
        }
        assert rest == {f: getattr(Efficiency(), f) for f in rest}
    # the MI325X (the MI300X's chip with more and faster memory) is not slower than the MI300X
    for key, fitted_on in PUBLIC_FIT.items():
        eff, src = calibration.builtin(key), calibration.builtin(fitted_on)
        assert (eff.moe_memory, eff.per_layer_overhead_s) == (src.moe_memory, src.per_layer_overhead_s), key
    assert calibration.builtin("mi325x").matmul_compute >= calibration.builtin("mi300x").matmul_compute


@pytest.mark.parametrize("key", NEW)
def test_the_default_scenario_builds_on_each_new_gpu(key):
    """What `servesim run --set hardware.gpu=KEY` resolves: the memory plan, the batch defaults (every
    new GPU holds 160 GiB or more: vLLM 0.28 and later give `vllm serve` 16384 tokens a step there)."""
    _, eng, _ = build(scenario_from_dict({"hardware": {"gpu": key}}))
    assert eng.kv_cache_tokens > 0
    assert (eng.cfg.max_num_seqs, eng.cfg.max_num_batched_tokens) == (1024, 16384)
    _, eng, _ = build(scenario_from_dict({"hardware": {"gpu": key}, "engine": {"vllm_version": "0.26"}}))
    assert (eng.cfg.max_num_seqs, eng.cfg.max_num_batched_tokens) == (1024, 8192)


def test_servesim_gpus_lists_every_built_in_gpu(capsys):
    from simulator.cli import main

    assert main(["gpus"]) in (0, None)
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: line for line in lines if line.startswith("  ") and not line.startswith("  gpu ")}
    assert sorted(listed) == builtin_gpus()
    assert listed["gb200"].split()[-2] == "derived" and " 72 " in listed["gb200"]
    assert listed["h100-sxm"].split()[-7] == "fitted" and listed["mi300x"].split()[-7] == "derived"
    # what each is checked against: counted from the validation data, 'none' where nothing is
    from simulator.validation.validate import runs_per_gpu

    checked = runs_per_gpu()
    rec, pub, sgl = checked["h200"]
    assert rec > 50 and pub > 0 and sgl > 0 and listed["h200"].endswith(f"{rec} rec, {pub} pub, {sgl} SGLang")
    assert checked["b200"][1] >= 1 and listed["mi325x"].endswith("none") and "mi325x" not in checked
    # llm-d's MI355X page: vLLM 0.15.1, nine rows counted (three whose outputs stopped early are not)
    assert checked["mi355x"] == (0, 9, 0) and listed["mi355x"].endswith("0 rec, 9 pub")
    # dstack's MI300X runs are SGLang 0.4.x, before the modelled 0.5 line (reported, not counted); the
    # cookbook's DeepSeek-V3.1 sweep on SGLang 0.5.7 counts
    assert checked["mi300x"] == (0, 2, 9) and listed["mi300x"].endswith("0 rec, 2 pub, 9 SGLang")
    assert "gfx950" in listed["mi355x"] and "13,500" in listed["b300"]


def test_a_gb200_tensor_parallel_group_stays_on_nvlink_across_the_rack():
    """GB200's NVLink domain is the NVL72 rack: TP16 all-reduces over NVLink there, and over PCIe
    on an 8-GPU HGX B200 board."""
    from simulator.engine.cost import PARAMS

    m = load_model("llama-3.1-70b")
    bw = PARAMS.index("interconnect_bw")
    gb200, b200 = load_gpu("gb200"), load_gpu("b200")
    eff = Efficiency()
    assert CostModel(m, gb200, 16, eff).params[bw] == pytest.approx(900e9 * eff.allreduce_bandwidth)
    assert CostModel(m, b200, 16, eff).params[bw] == pytest.approx(64e9 * eff.allreduce_bandwidth)
    assert CostModel(m, b200, 8, eff).params[bw] == pytest.approx(900e9 * eff.allreduce_bandwidth)


@pytest.mark.parametrize("gpu", ["b200", "mi300x"])
def test_a_public_fit_replays_its_calibration_runs_closer_than_the_defaults(gpu):
    """tools/validation/fit_gpu_family.py's stored factors, against the defaults they replaced, on the
    runs they were fitted on (output throughput and p50 TPOT; the held-out runs: docs/sglang.md)."""
    from tools.validation import fit_gpu_family as mod

    runs = mod.runs_of(gpu)
    eff, base = calibration.builtin(gpu), Efficiency()
    assert len(runs) >= 3 and all(r["split"] == "calibrate" for r in runs)
    fitted = mod.loss(runs, gpu, eff.moe_memory, eff.per_layer_overhead_s, jobs=1)
    default = mod.loss(runs, gpu, base.moe_memory, base.per_layer_overhead_s, jobs=1)
    assert fitted < 0.8 * default, (fitted, default)


def test_vllm_runs_its_triton_attention_where_flashattention_cannot_take_attention_sinks():
    """FlashAttention-2 takes no attention sinks (vLLM's ``flash_attn_supports_sinks``: FA3 and FA4
    only), nor does FlashInfer off Blackwell, so vLLM runs gpt-oss on Ampere with its Triton kernel,
    priced at ``TRITON_ATTN_COMPUTE``; Hopper keeps FA3, Blackwell FlashInfer, a model without sinks
    FA2, an AMD GPU its own rule, and SGLang what it had."""
    from simulator.engine.cost import FA2_ATTN_COMPUTE, TRITON_ATTN_COMPUTE

    a100 = load_gpu("a100-80gb")
    assert attention_kernel(a100.compute_capability, None, "", True) == "triton"
    assert attention_kernel(a100.compute_capability, None, "", False) == "fa2"
    assert attention_kernel(load_gpu("l40s").compute_capability, None, "", True) == "triton"
    assert attention_kernel(load_gpu("h200").compute_capability, None, "", True) == "fa3"
    assert attention_kernel(load_gpu("b200").compute_capability, None, "", True) == "other"
    g = load_gpu("mi355x")
    assert attention_kernel(g.compute_capability, g.gfx, "triton", True) == "rocm_triton"
    oss, llama = load_model("gpt-oss-120b"), load_model("llama-3.1-8b")
    vllm = blank_scenario(["model=gpt-oss-120b", "hardware.gpu=a100-80gb"])
    assert efficiency(vllm, a100, oss).attn_compute == TRITON_ATTN_COMPUTE < FA2_ATTN_COMPUTE / 4
    assert efficiency(blank_scenario(["model=llama-3.1-8b"]), a100, llama).attn_compute == FA2_ATTN_COMPUTE
    sglang = blank_scenario(["model=gpt-oss-120b", "hardware.gpu=a100-80gb", "engine.framework=sglang"])
    assert efficiency(sglang, a100, oss).attn_compute == FA2_ATTN_COMPUTE


def test_the_triton_attention_measured_on_an_h200_is_a_tenth_of_flashattention_3():
    """vLLM 0.26.0's offline engine on an H200, gpt-oss-20b (dummy weights, routing spread), one
    prompt at a time in chunks of 8,192 on each backend (data/profiles/served_steps/
    gptoss20b_prefill_{fa3,triton}.json): what 16k and 32k tokens took beyond 8k (the request's fixed
    costs cancel) is what ``servesim step-time`` prices at FA3's rate and at 6.3% of the bf16 peak, a
    tenth of it, within 6%; at the A100's fitted rate the Triton prefills would be far shorter."""
    import json
    from pathlib import Path

    from simulator.engine.cost import TRITON_ATTN_COMPUTE
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario.config import load_scenario

    served = Path(__file__).resolve().parents[1] / "data" / "profiles" / "served_steps"

    def measured(backend: str) -> dict[int, float]:
        doc = json.loads((served / f"gptoss20b_prefill_{backend}.json").read_text())
        assert (
            doc["vllm"] == "0.26.0" and doc["attention_backend"] == {"fa3": "default", "triton": "TRITON_ATTN"}[backend]
        )
        return {r["prompt"]: r["ms"] for r in doc["rows"]}

    def priced(rate: float) -> dict[int, float]:
        sc, _ = load_scenario(
            None, ["model=gpt-oss-20b", "hardware.gpu=h200", "engine.vllm_version=0.26", f"cost.attn_compute={rate}"]
        )
        m, gpu = load_arch(sc), load_gpu("h200")
        cm = cost_model(sc, m, gpu, *engine_defaults(gpu, sc))
        chunk_ms = {c: cm.step_time(decode_work(1, c, 8192)) * 1e3 for c in range(0, 32768, 8192)}
        return {n: sum(chunk_ms[c] for c in range(0, n, 8192)) for n in (8192, 16384, 32768)}

    for backend, rate in (("fa3", FA3_ATTN_COMPUTE), ("triton", FA3_ATTN_COMPUTE / 10)):
        got, want = priced(rate), measured(backend)
        for n in (16384, 32768):
            extra = got[n] - got[8192]
            assert abs(extra / (want[n] - want[8192]) - 1) < 0.06, (backend, n, extra)
    fitted = priced(TRITON_ATTN_COMPUTE)
    assert fitted[32768] - fitted[8192] < 0.7 * (measured("triton")[32768] - measured("triton")[8192])


@pytest.mark.parametrize(
    ("model", "files"),
    [
        ("gpt-oss-20b", ("gptoss20b_spread_steps",)),
        ("gpt-oss-120b", ("gptoss120b_spread_steps", "gptoss120b_spread_steps_large")),
    ],
)
def test_gptoss_decode_steps_cost_what_an_h200_was_busy_for_with_routing_spread(model, files):
    """vLLM 0.26.0's offline engine on an H200, gpt-oss with dummy weights and the routing spread as
    a real checkpoint's (``device.sh routing``), decode steps at 1 to 512 requests of 1,024-token
    prompts traced with torch's profiler (data/profiles/served_steps/gptoss*_spread_steps*.json,
    nothing fitted on them): the GPU's busy time per step is what ``servesim step-time --gpu-only``
    prices within 10% at every batch traced clean (1 to 32 requests for gpt-oss-20b, 1 to 64 for
    -120b), and the experts' kernels rise with the batch as the distinct experts touched do (uniform
    routing, ``cost.moe_work``)."""
    import json
    from pathlib import Path

    from simulator.engine.cost import Execution
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario.config import load_scenario

    served = Path(__file__).resolve().parents[1] / "data" / "profiles" / "served_steps"
    profiles = []
    for f in files:
        doc = json.loads((served / f"{f}.json").read_text())
        assert (doc["model"], doc["vllm"], doc["capture"]) == (model, "0.26.0", 1024)
        profiles += doc["profiles"]
    sc, _ = load_scenario(None, [f"model={model}", "hardware.gpu=h200", "engine.vllm_version=0.26"])
    m, gpu = load_arch(sc), load_gpu("h200")
    cm = cost_model(sc, m, gpu, *engine_defaults(gpu, sc)).with_execution(Execution())
    # A trace is of decode steps alone where the experts ran in 16-row tiles only: at 64 requests and
    # more, some traced steps carried a prefill chunk or part of the batch (other tiles ran).
    clean = [
        p
        for p in profiles
        if all(t["count"] < 0.5 for t in p["top"] if "matmul_ogs" in t["name"] and "_16x" not in t["name"])
    ]
    errors = {}
    for p in clean:  # traced between the 4th and 12th output tokens of 1,024-token prompts
        errors[p["batch"]] = cm.step_time(decode_work(p["batch"], 1032)) * 1e3 / p["busy_ms"] - 1
    assert len(errors) >= 6 and max(abs(e) for e in errors.values()) < 0.10, errors
    experts = {p["batch"]: sum(t["ms"] for t in p["top"] if "matmul_ogs" in t["name"]) for p in clean}
    assert experts[1] < experts[2] < experts[4] < experts[8] < experts[16] < experts[32]


def test_sglang_on_the_mi300x_family_multiplies_its_moe_experts_at_its_own_fitted_rate():
    """SGLang's MoE kernels on the MI300X (and the MI325X, which shares them) take the rate fitted on the
    cookbook's prefill-bound run (``sglang_rates`` in the GPU's file); vLLM there, SGLang elsewhere and
    a user's own calibration file keep the file's efficiency."""
    m = load_model("deepseek-r1")
    sets = ["model=deepseek-r1", "hardware.tensor_parallel_size=8", "engine.max_num_seqs=null",
            "engine.max_num_batched_tokens=null", "engine.gpu_memory_utilization=null"]  # fmt: skip
    for key in ("mi300x", "mi325x"):
        fitted = calibration.sglang_rates(key)
        assert set(fitted) == {"moe_compute"} and fitted["moe_compute"] < Efficiency().moe_compute / 5
        gpu = load_gpu(key)
        sglang = blank_scenario([*sets, f"hardware.gpu={key}", "engine.framework=sglang"])
        assert efficiency(sglang, gpu, m).moe_compute == fitted["moe_compute"]
        vllm = blank_scenario([*sets, f"hardware.gpu={key}"])
        assert efficiency(vllm, gpu, m).moe_compute == builtin(key).moe_compute == Efficiency().moe_compute
    assert calibration.sglang_rates("b200") == {} and calibration.sglang_rates("h200") == {}
    own = blank_scenario([*sets, "hardware.gpu=mi300x", "engine.framework=sglang", "cost.calibration=none"])
    assert efficiency(own, load_gpu("mi300x"), m).moe_compute == Efficiency().moe_compute


def test_a_gpu_named_as_its_maker_writes_it_is_found_and_a_short_name_asks_which():
    """H200, NVIDIA_H100_SXM or AMD Instinct MI300X find their catalog entry; a name that starts
    several (h100, a100) asks which, one that starts one (mi300) asks whether it was meant."""
    from simulator.scenario.hardware import load_gpu

    assert load_gpu("H200").key == "h200"
    assert load_gpu("NVIDIA_H100_SXM").key == "h100-sxm"
    assert load_gpu("AMD Instinct MI300X").key == "mi300x"
    with pytest.raises(
        ConfigError, match=r"^hardware\.gpu: 'h100' is more than one GPU; give 'h100-pcie' or 'h100-sxm'$"
    ):
        load_gpu("h100")
    with pytest.raises(ConfigError, match=r"^hardware\.gpu: unknown GPU 'mi300'; did you mean 'mi300x'\?$"):
        load_gpu("mi300")
