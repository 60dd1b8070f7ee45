"""Fit a GPU's MoE weight-streaming rate and per-layer kernel time on its calibration runs of the SGLang
cookbook, and write them into its calibration file.

    python tools/validation/fit_gpu_family.py --gpu b200 [--write] [--jobs 2]

The GPUs no profile of ours measured (the B200 and the MI300X: their calibration files derive matmul
rates from public microbenchmarks, every other factor the H100's defaults) decode MoE models at a
pace the defaults miss (docs/sglang.md). Two factors set that pace: ``moe_memory``, the share of HBM
bandwidth the experts' weights stream at (what grows with the batch, as more experts are touched),
and ``per_layer_overhead_s``, the small kernels' time a layer (the floor at one request in flight).
They are searched on a grid for the least sum of |log(simulated / measured)| over output throughput
and p50 TPOT of the GPU's runs marked ``fits: gpu`` in simulator/data/validation/sglang_runs.yaml
(the 1k/8k runs, decode-bound: ``tools/validation/add_sglang_runs.py``); every other run of the GPU
is held out. Where those runs hold a DeepSeek-V3-architecture model with FP8 experts beside another
model (the B200's: DeepSeek-R1 and Qwen3-235B-A22B), the one floor cannot serve both, and
``fp8_mla_moe_kernels`` (that model's MoE layers' extra small kernels) is searched too, by coordinate
descent from none: the two factors' grid, then the count's, until neither moves. ``--write`` stores
them in simulator/data/calibration/<gpu>.yaml and in the files of the GPUs that share its kernels
(``FAMILY``), each keeping its own matmul rates.

    python tools/validation/fit_gpu_family.py --gpu mi355x --engine vllm [--write]

``--engine vllm`` fits an AMD GPU on its public vLLM runs marked ``fits: gpu`` in
simulator/data/validation/runs.yaml (llm-d's MI355X page: tools/validation/add_public_2026.py):
``per_layer_overhead_s`` and the two rates of the attention vLLM runs there by default before 0.19
(its Triton kernel: ``vllm_triton_attention`` in the GPU's file, ``versions.attention_kernel``), by
coordinate descent over grids (the per-layer time with the decode rate, then the prefill rate, until
neither moves), on the least sum of |log error| in output throughput and mean TTFT. The other runs
of the GPU are held out.

    python tools/validation/fit_gpu_family.py --gpu mi300x --prefill [--write]

``--prefill`` fits the rate SGLang's MoE kernels multiply at on the GPU (``moe_compute`` in the file's
``sglang_rates`` section: SGLang's own kernels, which vLLM's runs there do not share) on its SGLang
runs marked ``fits: prefill`` (a prefill-bound run: long prompts at one request in flight), the
least |log error| of their p50 TTFT; every other run is held out. ``--write`` stores it in the GPU's
file and those of its family.

    python tools/validation/fit_gpu_family.py --eager

``--eager`` fits ``sglang_eager_launch_s`` (the host's time to launch one kernel of a prefill SGLang
runs without graphs, as every release before 0.5.10 does) on a recorded pair of servers with and
without prefill graphs, ``moe_eager_layer_s`` (the host time an MoE layer adds to such a step) on a
recorded pair of an MoE model, then ``sglang_eager_tp_growth`` (the growth of both with the
tensor-parallel ranks) on the TP8 runs above (``fit_eager``); it prints them for the defaults in
simulator/engine/cost.py.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.engine.calibration import SGLANG_RATES, VLLM_TRITON_ATTENTION, builtin, vllm_attention
from simulator.engine.cost import Efficiency
from simulator.scenario.models import load_model
from simulator.validation import validate
from tools.validation.fit_host import loss as fit_loss

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "simulator" / "data" / "calibration"
MOE_MEMORY = (0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.81, 0.9)
PER_LAYER_US = (20.0, 30.0, 35.0, 40.0, 45.0, 50.0, 55.0, 60.0, 70.0, 80.0, 100.0, 120.0, 150.0)
FP8_MLA_KERNELS = (0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 14.0, 20.0, 30.0)
METRICS = ("output_throughput", "median_tpot_ms")
# --prefill: the grid of the rate SGLang's MoE kernels multiply at (of the GPU's peak for the experts' format)
MOE_PREFILL = (0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.05, 0.065, 0.08, 0.12, 0.2, 0.33, 0.5)
# GPUs that run the same kernels as the one fitted: the same die (GB200), the same architecture
# (B300, Blackwell Ultra), the same compute die with more memory (MI325X).
FAMILY = {"b200": ("b300", "gb200"), "mi300x": ("mi325x",)}
# --engine vllm: the AMD GPUs with public vLLM runs to fit on, and the grids of vLLM's Triton attention
VLLM_GPUS = ("mi355x",)
ATTN_MEMORY = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.6, 0.8)
ATTN_COMPUTE = (0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.08, 0.15, 0.3)
VLLM_METRICS = ("output_throughput", "mean_ttft_ms")
# --eager: the grids of sglang_eager_launch_s (us) and sglang_eager_tp_growth, and the recorded pairs
# (without prefill graphs, with them) of calibration runs the first is fitted on
EAGER_US = (20.0, 26.0, 30.0, 34.0, 36.0, 38.0, 40.0, 42.0, 46.0, 55.0, 70.0)
EAGER_TP_GROWTH = (0.0, 0.1, 0.2, 0.25, 0.3, 0.32, 0.35, 0.4, 0.5, 0.7)
EAGER_PAIRS = (
    (
        "h200_sgprefill_2026-12-01_sglang_llama8b_eager_c1_short",
        "h200_sgprefill_2026-12-01_sglang_llama8b_graphs_c1_short",
    ),
)
# ... and of an MoE model, which the MoE layer's host time (moe_eager_layer_s, in us) is fitted on
# (marked ``fits: eager`` in the index: not the host costs' calibration, as the dense pair is)
EAGER_MOE_US = (0.0, 200.0, 400.0, 500.0, 600.0, 650.0, 700.0, 725.0, 750.0, 775.0, 800.0, 850.0, 1000.0, 1400.0)
EAGER_MOE_PAIRS = tuple(
    (
        f"h200_sgprefill3_2026-12-01_sglang_qwen30b_pair_eager_{run}",
        f"h200_sgprefill3_2026-12-01_sglang_qwen30b_pair_graphs_{run}",
    )
    for run in ("c1_short", "c1_mid")
)


def runs_of(gpu: str, path: Path = validate.SGLANG_FILE, fits: str = "gpu") -> list[dict]:
    """The runs of ``gpu`` in ``path`` marked to fit its kernels (``fits: gpu``, or ``fits``)."""
    return [r for r in validate.load(path)["runs"] if r["gpu"] == gpu and r.get("fits") == fits]


def replay(runs: list[dict], gpu: str, factors: dict[str, float], jobs: int, recorded: bool = False) -> list:
    """The runs replayed with the GPU's built-in factors changed so: the scenarios' calibration is a file
    of them (for vLLM's Triton attention rates too, which efficiency() otherwise takes from the built-in
    file's own section)."""
    eff = {**vars(builtin(gpu) or Efficiency()), **factors}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"efficiency": eff}, f)
    try:
        res = validate.run_all(runs, extra=[f"cost.calibration={f.name}"], jobs=jobs, recorded=recorded)
    finally:
        Path(f.name).unlink()
    for r in res:
        if r.error:
            raise SystemExit(f"{r.id}: {r.error}")
    return res


def replay_loss(runs: list[dict], gpu: str, factors: dict[str, float], metrics: tuple[str, ...], jobs: int) -> float:
    """The runs' loss with the GPU's built-in factors changed so (``replay``)."""
    return fit_loss(replay(runs, gpu, factors, jobs), metrics)


def loss(
    runs: list[dict], gpu: str, moe_memory: float, per_layer_s: float, jobs: int, fp8_mla: float | None = None
) -> float:
    factors = {"moe_memory": moe_memory, "per_layer_overhead_s": per_layer_s}
    if fp8_mla is not None:
        factors["fp8_mla_moe_kernels"] = fp8_mla
    return replay_loss(runs, gpu, factors, METRICS, jobs)


def separates_fp8_mla(runs: list[dict]) -> bool:
    """Whether ``runs`` hold a model whose MoE layers take ``fp8_mla_moe_kernels`` (MLA, FP8 experts)
    and another model, so that the count and the per-layer time can be told apart."""
    kinds = {r["quantization"] == "fp8" and load_model(r["model"]).is_mla for r in runs}
    return kinds == {True, False}


def vllm_loss(runs: list[dict], gpu: str, per_layer_s: float, attn: dict[str, float], jobs: int) -> float:
    return replay_loss(runs, gpu, {"per_layer_overhead_s": per_layer_s, **attn}, VLLM_METRICS, jobs)


def fit_vllm(gpu: str, write_it: bool, jobs: int) -> int:
    runs = runs_of(gpu, validate.RUNS_FILE)
    if not runs:
        print(f"no vLLM run of {gpu} is marked fits: gpu", file=sys.stderr)
        return 1
    base = builtin(gpu) or Efficiency()
    stored = {"attn_compute": base.attn_compute, "attn_memory": base.attn_memory, **vllm_attention(gpu)}
    was = vllm_loss(runs, gpu, base.per_layer_overhead_s, stored, jobs)
    per_layer, attn = base.per_layer_overhead_s, dict(stored)
    while True:
        seen = {
            (p, m): vllm_loss(runs, gpu, p * 1e-6, {**attn, "attn_memory": m}, jobs)
            for p in PER_LAYER_US
            for m in ATTN_MEMORY
        }
        (p, m), _ = min(seen.items(), key=lambda kv: kv[1])
        seen_c = {c: vllm_loss(runs, gpu, p * 1e-6, {"attn_memory": m, "attn_compute": c}, jobs) for c in ATTN_COMPUTE}
        c, best = min(seen_c.items(), key=lambda kv: kv[1])
        moved = (p * 1e-6, m, c) != (per_layer, attn["attn_memory"], attn["attn_compute"])
        per_layer, attn = p * 1e-6, {"attn_memory": m, "attn_compute": c}
        if not moved:
            break
    print(
        f"{gpu} (vLLM): per_layer_overhead {per_layer * 1e6:g} us, Triton attention compute {attn['attn_compute']} "
        f"memory {attn['attn_memory']}: loss {best:.3f} over {len(runs)} runs (stored: {was:.3f})"
    )
    edge = (
        per_layer * 1e6 in (PER_LAYER_US[0], PER_LAYER_US[-1])
        or attn["attn_memory"] in (ATTN_MEMORY[0], ATTN_MEMORY[-1])
        or attn["attn_compute"] in (ATTN_COMPUTE[0], ATTN_COMPUTE[-1])
    )
    if edge:
        print("  the least sits on the grid's edge: widen the grid before writing", file=sys.stderr)
        return 1
    if write_it:
        rewrite(
            gpu,
            {"per_layer_overhead_s": round(per_layer, 9)},
            {
                VLLM_TRITON_ATTENTION: attn,
                "fitted_on_public_vllm_runs": (
                    f"per_layer_overhead_s and {VLLM_TRITON_ATTENTION} (the rates of the attention vLLM runs here by "
                    f"default before 0.19, its Triton kernel): python tools/validation/fit_gpu_family.py --gpu {gpu} "
                    f"--engine vllm --write, on llm-d's {', '.join(r['id'].split('tp8_')[-1] for r in runs)} (sum of "
                    f"|log error| in output throughput and mean TTFT {best:.3f}); the page's other rows held out"
                ),
            },
        )
    return 0


def fit_prefill(gpu: str, write_it: bool, jobs: int) -> int:
    runs = runs_of(gpu, fits="prefill")
    if not runs:
        print(f"no SGLang run of {gpu} is marked fits: prefill", file=sys.stderr)
        return 1
    seen = {c: replay_loss(runs, gpu, {"moe_compute": c}, ("median_ttft_ms",), jobs) for c in MOE_PREFILL}
    c, best = min(seen.items(), key=lambda kv: kv[1])
    print(f"{gpu} (SGLang): moe_compute {c:g}: p50 TTFT loss {best:.3f} over {len(runs)} runs ({_grid(seen)})")
    if c in (MOE_PREFILL[0], MOE_PREFILL[-1]):
        print("  the least sits on the grid's edge: widen the grid before writing", file=sys.stderr)
        return 1
    if write_it:
        for g, src in family(gpu):
            note = (
                f"{SGLANG_RATES}.moe_compute{src}: python tools/validation/fit_gpu_family.py --gpu {gpu} "
                f"--prefill --write, on the SGLang cookbook's {run_names(runs)} "
                f"(|log error| of p50 TTFT {best:.3f}); its other runs held out"
            )
            rewrite(g, {}, {SGLANG_RATES: {"moe_compute": c}, "fitted_sglang_rates": note})
    return 0


def family(gpu: str) -> list[tuple[str, str]]:
    """The GPU and those that share its kernels (``FAMILY``), each with what its file says of where a fit
    was made ("" for the GPU itself)."""
    return [
        (g, "" if g == gpu else f" (fitted on the {gpu.upper()}, whose kernels this GPU shares)")
        for g in (gpu, *FAMILY.get(gpu, ()))
    ]


def run_names(runs: list[dict]) -> str:
    """The runs' names as the cookbook's sweep gives them (the part of the id after its last '_')."""
    return ", ".join(r["id"].split("_")[-1] for r in runs)


def rewrite(gpu: str, efficiency: dict, entries: dict) -> None:
    """GPU ``gpu``'s calibration file with these efficiency factors and top-level entries set."""
    path = CALIBRATION / f"{gpu}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["efficiency"].update(efficiency)
    doc.update(entries)
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=100, allow_unicode=True))
    print(f"wrote {path.relative_to(ROOT)}")


def write(
    gpu: str, moe_memory: float, per_layer_s: float, runs: list[dict], best: float, fp8_mla: float | None
) -> None:
    for g, src in family(gpu):
        what = (
            "moe_memory and per_layer_overhead_s"
            if fp8_mla is None
            else "moe_memory, per_layer_overhead_s and fp8_mla_moe_kernels"
        )
        note = (
            f"{what}{src}: python tools/validation/fit_gpu_family.py --gpu {gpu} "
            f"--write, on the SGLang cookbook's {run_names(runs)} "
            f"(sum of |log error| in output throughput and p50 TPOT {best:.3f}); its other runs held out"
        )
        factors = {"moe_memory": round(moe_memory, 4), "per_layer_overhead_s": round(per_layer_s, 9)}
        if fp8_mla is not None:
            factors["fp8_mla_moe_kernels"] = fp8_mla
        rewrite(g, factors, {"fitted_on_public_runs": note})


def fit_eager(jobs: int) -> int:
    """SGLang's eager launch time a kernel (``Efficiency.sglang_eager_launch_s``), an MoE layer's host
    time without graphs (``moe_eager_layer_s``) and their growth with the tensor-parallel ranks
    (``sglang_eager_tp_growth``), one set for every GPU, in three stages: the time a kernel on one GPU
    from the recorded SGLang servers' calibration pairs of a dense model (``EAGER_PAIRS``: the same
    requests with and without prefill graphs), the least |log| error of the difference their p50
    TTFTs show at one request in flight with short prompts, where the launches set a prefill's time;
    that held, the MoE layer's time from an MoE model's pairs (``EAGER_MOE_PAIRS``) alike; then, both
    held, the growth from the SGLang runs marked ``fits: gpu`` of every GPU that has them
    (the cookbook's TP8 runs, prefilled without graphs by SGLang 0.5.6-0.5.7), the least sum of
    |log error| in p50 TTFT. Printed, for the defaults in simulator/engine/cost.py."""
    recorded = {r["id"]: r for r in validate.load(validate.E2E_SGLANG_FILE)["runs"] if r["split"] == "calibrate"}

    def pair_loss(ids: tuple, factors: dict) -> float:
        pairs = [(recorded[e], recorded[g]) for e, g in ids]
        runs = [r for pair in pairs for r in pair]
        res = replay(runs, runs[0]["gpu"], factors, jobs, recorded=True)
        ttft = {r.id: (r.simulated["median_ttft_ms"], r.measured["median_ttft_ms"]) for r in res}
        total = 0.0
        for e, g in pairs:
            (se, me), (sg, mg) = ttft[e["id"]], ttft[g["id"]]
            total += abs(math.log(max(se - sg, 1e-3) / (me - mg)))
        return total

    seen = {us: pair_loss(EAGER_PAIRS, {"sglang_eager_launch_s": us * 1e-6}) for us in EAGER_US}
    base, best = min(seen.items(), key=lambda kv: kv[1])
    print(f"sglang_eager_launch_s {base:g} us: loss {best:.3f} over {len(EAGER_PAIRS)} recorded pairs ({_grid(seen)})")
    held = {"sglang_eager_launch_s": base * 1e-6}
    seen = {us: pair_loss(EAGER_MOE_PAIRS, {**held, "moe_eager_layer_s": us * 1e-6}) for us in EAGER_MOE_US}
    moe, best = min(seen.items(), key=lambda kv: kv[1])
    print(
        f"moe_eager_layer_s {moe:g} us: loss {best:.3f} over {len(EAGER_MOE_PAIRS)} recorded MoE pairs ({_grid(seen)})"
    )
    held["moe_eager_layer_s"] = moe * 1e-6
    runs = {g: runs_of(g) for g in FAMILY}
    growth = {
        k: sum(
            replay_loss(rs, g, {**held, "sglang_eager_tp_growth": k}, ("median_ttft_ms",), jobs)
            for g, rs in runs.items()
        )
        for k in EAGER_TP_GROWTH
    }
    k, best_k = min(growth.items(), key=lambda kv: kv[1])
    n = sum(len(rs) for rs in runs.values())
    print(
        f"sglang_eager_tp_growth {k:g}: p50 TTFT loss {best_k:.3f} over {n} runs of {', '.join(runs)} ({_grid(growth)})"
    )
    if base in (EAGER_US[0], EAGER_US[-1]) or moe in (EAGER_MOE_US[0], EAGER_MOE_US[-1]) or k == EAGER_TP_GROWTH[-1]:
        print("  the least sits on the grid's edge: widen the grid", file=sys.stderr)
        return 1
    return 0


def _grid(seen: dict) -> str:
    return ", ".join(f"{k:g}: {v:.3f}" for k, v in seen.items())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", choices=sorted({*FAMILY, *VLLM_GPUS}))
    ap.add_argument("--engine", choices=("sglang", "vllm"), default="sglang", help="whose public runs to fit on")
    ap.add_argument("--eager", action="store_true", help="fit SGLang's eager launch time a kernel, every GPU's runs")
    ap.add_argument("--prefill", action="store_true", help="fit the rate of SGLang's MoE kernels on its prefill runs")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if args.eager:
        return fit_eager(args.jobs)
    if args.gpu is None:
        ap.error("--gpu is required (or --eager)")
    if args.engine == "vllm":
        return fit_vllm(args.gpu, args.write, args.jobs)
    if args.prefill:
        return fit_prefill(args.gpu, args.write, args.jobs)
    runs = runs_of(args.gpu)
    if not runs:
        print(f"no run of {args.gpu} is marked fits: gpu", file=sys.stderr)
        return 1
    base = builtin(args.gpu) or Efficiency()
    k = FP8_MLA_KERNELS[0] if separates_fp8_mla(runs) else None  # from none
    while True:
        seen = {(m, p): loss(runs, args.gpu, m, p * 1e-6, args.jobs, k) for m in MOE_MEMORY for p in PER_LAYER_US}
        (m, p), best = min(seen.items(), key=lambda kv: kv[1])
        if k is None:
            break
        seen_k = {c: loss(runs, args.gpu, m, p * 1e-6, args.jobs, c) for c in FP8_MLA_KERNELS}
        c, best = min(seen_k.items(), key=lambda kv: kv[1])
        if c == k:
            break
        k = c
    was = loss(runs, args.gpu, base.moe_memory, base.per_layer_overhead_s, args.jobs)  # the file's own factors
    counted = "" if k is None else f", fp8_mla_moe_kernels {k:g}"
    print(
        f"{args.gpu}: moe_memory {m}, per_layer_overhead {p} us{counted}: loss {best:.3f} over {len(runs)} runs "
        f"(stored: {was:.3f})"
    )
    edge = m in (MOE_MEMORY[0], MOE_MEMORY[-1]) or p in (PER_LAYER_US[0], PER_LAYER_US[-1])
    edge = edge or k == FP8_MLA_KERNELS[-1]  # none (0) is a bound, not an edge
    if edge:
        print("  the least sits on the grid's edge: widen the grid before writing", file=sys.stderr)
        return 1
    if args.write:
        write(args.gpu, m, p * 1e-6, runs, best, k)
    return 0


if __name__ == "__main__":
    sys.exit(main())
