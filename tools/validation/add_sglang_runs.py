"""Write simulator/data/validation/sglang_runs.yaml: the public SGLang runs of
data/sources/sglang/public_runs.yaml that servesim can replay, in the form of runs.yaml
(``servesim validate --sglang`` replays them).

    python tools/validation/add_sglang_runs.py

Taken: GPUStack's DeepSeek-R1-0528 (FP8) runs on 8 x H200 (SGLang 0.5.3; ShareGPT and four random
shapes, all sent at once; their `--enable-dp-attention` without `--dp` is plain TP8 in the 0.5 line),
dstack's DeepSeek-R1 concurrency sweep on 8 x H200 (SGLang 0.4.3.post2 with `--enable-dp-attention`,
which in 0.4.x meant eight DP-attention ranks),
GPUStack's Qwen3-14B (bf16 and FP8), Qwen3-32B and Qwen3-235B-A22B runs on H100s (0.5.5.post1, the
default attention backend), and dstack's DeepSeek-R1 (FP8) concurrency sweep on 8 x MI300X (0.4.2.post4,
plain TP8, random 3,200/800 at 4-128 in flight and longer outputs at 128), replayed as the 0.5 line.
Left out, and why: the MTP run (speculative decoding is modelled for vLLM only), the torch.compile run
(its kernels differ and are not modelled), the FlashInfer and Triton attention-backend runs (one
backend per GPU is modelled), dstack's generated-shared-prefix runs (their prefix tree is not restated), and the SGLang pull-request
and blog numbers that give no request lengths or no GPU. Also taken: the SGLang cookbook's printed
sweeps (DeepSeek-R1 and Qwen3-235B-A22B on 8 x B200, DeepSeek-V3.1 on 8 x MI300X, Llama-3.1-70B on
8 x A100, gpt-oss-120b on 8 x B200; SGLang 0.5.6-0.5.7), whose client drew lengths uniformly. Five
runs (``CALIBRATE``, ``fits: host``) fit SGLang's host costs, nine of the cookbook's
(``CALIBRATE_GPU``, ``fits: gpu``) the B200's and MI300X's MoE and per-layer costs, one
(``CALIBRATE_PREFILL``, ``fits: prefill``) the rate of SGLang's MoE kernels on the MI300X; the rest
are held out. The file is rewritten whole.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "data" / "sources" / "sglang" / "public_runs.yaml"
OUT = ROOT / "simulator" / "data" / "validation" / "sglang_runs.yaml"

_R1_H200 = ("deepseek-r1", "h200", "fp8", "chat")
_Q14 = ("qwen3-14b", "h100-sxm", "none", "chat")
_Q14_FP8 = ("qwen3-14b", "h100-sxm", "fp8", "chat")
_R1_MI300X = ("deepseek-r1", "mi300x", "fp8", "completions")
_R1_H200_DP = ("deepseek-r1", "h200", "fp8", "completions")
# SGLang 0.4.x's --enable-dp-attention set dp_size to tp_size (0.5 needs --dp as well).
DP_ATTENTION = {"enable_dp_attention": True, "dp_size": 8}

_COOKBOOK_SHAPES = [f"1000-1000-c{c}" for c in (1, 16, 100)] + [
    f"{i}-{o}-c{c}" for i, o in ((1000, 8000), (8000, 1000)) for c in (1, 16, 64)
]
# source id -> (servesim model, GPU, quantization, endpoint)
TAKEN: dict[str, tuple[str, str, str, str]] = {
    "gpustack-dsr1-h200-tp8-sharegpt": _R1_H200,
    "gpustack-dsr1-h200-tp8-dpattn-sharegpt": _R1_H200,
    "gpustack-dsr1-h200-tp8-dpattn-random-32000-100": _R1_H200,
    "gpustack-dsr1-h200-tp8-dpattn-random-4000-200": _R1_H200,
    "gpustack-dsr1-h200-tp8-dpattn-random-2000-100": _R1_H200,
    "gpustack-dsr1-h200-tp8-dpattn-random-128-4": _R1_H200,
    "gpustack-qwen3-14b-h100-bf16-sharegpt": _Q14,
    "gpustack-qwen3-14b-h100-fp8-default-sharegpt": _Q14_FP8,
    "gpustack-qwen3-14b-h100-fp8-fa3-sharegpt": _Q14_FP8,
    "gpustack-qwen3-14b-fp8-h100-random-32000-100": _Q14_FP8,
    "gpustack-qwen3-14b-fp8-h100-random-4000-200": _Q14_FP8,
    "gpustack-qwen3-14b-fp8-h100-random-2000-100": _Q14_FP8,
    "gpustack-qwen3-14b-fp8-h100-random-128-4": _Q14_FP8,
    "gpustack-qwen3-32b-h100-bf16-sharegpt": ("qwen3-32b", "h100-sxm", "none", "chat"),
    "gpustack-qwen3-235b-a22b-8xh100-tp8-sharegpt": ("qwen3-235b-a22b", "h100-sxm", "none", "chat"),
    **{f"dstack-dsr1-mi300x-random-3200-800-c{c}": _R1_MI300X for c in (4, 8, 16, 32, 64, 128)},
    **{f"dstack-dsr1-mi300x-random-3200-{o}-c128": _R1_MI300X for o in (1600, 3200, 6400)},
    **{f"dstack-dsr1-h200-random-3200-800-c{c}": _R1_H200_DP for c in (4, 8, 16, 32, 64, 128)},
    **{f"dstack-dsr1-h200-random-3200-{o}-c128": _R1_H200_DP for o in (1600, 3200, 6400)},
    # The SGLang cookbook's printed sweeps (SGLang 0.5.6-0.5.7, SGLang's own client on /generate): 1k/1k
    # at 1, 16 and 100 in flight, 1k/8k and 8k/1k at 1, 16 and 64. DeepSeek-V3.1 is DeepSeek-R1's
    # architecture and FP8 format; the Llama page's "A100" is taken as the 80 GB SXM part.
    **{f"cookbook-dsr1-b200-{s}": ("deepseek-r1", "b200", "fp8", "completions") for s in _COOKBOOK_SHAPES},
    **{f"cookbook-dsv31-mi300x-{s}": ("deepseek-r1", "mi300x", "fp8", "completions") for s in _COOKBOOK_SHAPES},
    **{f"cookbook-qwen3-235b-b200-{s}": ("qwen3-235b-a22b", "b200", "none", "completions") for s in _COOKBOOK_SHAPES},
    **{
        f"cookbook-llama70b-a100-{s}": ("llama-3.1-70b", "a100-80gb", "none", "completions")
        for s in _COOKBOOK_SHAPES[:3] + _COOKBOOK_SHAPES[6:]
    },
    # gpt-oss-120b on 8 x B200 (MXFP4 experts on FP4 tensor cores), ShareGPT at 1 and 100 in flight
    **{f"cookbook-gptoss120b-b200-sharegpt-c{c}": ("gpt-oss-120b", "b200", "mxfp4", "completions") for c in (1, 100)},
}
# Calibration half (the SGLang host costs, tools/validation/fit_host.py --source sglang, are fitted on
# these alone): one ShareGPT burst and one random shape per model and GPU of GPUStack's; the rest,
# every MI300X run included, is held out.
CALIBRATE = {
    "gpustack-dsr1-h200-tp8-sharegpt",
    "gpustack-dsr1-h200-tp8-dpattn-random-4000-200",
    "gpustack-qwen3-14b-h100-bf16-sharegpt",
    "gpustack-qwen3-14b-fp8-h100-random-2000-100",
    "gpustack-qwen3-14b-fp8-h100-random-128-4",
}
# The cookbook's 1k/8k runs (decode-bound, at 1, 16 and 64 in flight) fit the MoE weight-streaming
# rate and per-layer kernel time of the B200 and the MI300X (tools/validation/fit_gpu_family.py),
# whose calibration files otherwise derive only their matmul rates; their other runs are held out.
CALIBRATE_GPU = {
    f"cookbook-{m}-{g}-1000-8000-c{c}"
    for m, g in (("dsr1", "b200"), ("qwen3-235b", "b200"), ("dsv31", "mi300x"))
    for c in (1, 16, 64)
}
# The cookbook's one prefill-bound MI300X run (8k-token prompts, one in flight) fits the rate SGLang's
# MoE kernels multiply at there (fit_gpu_family.py --prefill); its 8k/1k runs at 16 and 64 in flight,
# and dstack's MI300X runs, are held out.
CALIBRATE_PREFILL = {"cookbook-dsv31-mi300x-8000-1000-c1"}
RESULTS = {  # runs.yaml's names for the source's
    "output_throughput": "output_token_throughput",
    "mean_ttft_ms": "mean_ttft_ms",
    "median_ttft_ms": "median_ttft_ms",
    "mean_tpot_ms": "mean_tpot_ms",
    "median_tpot_ms": "median_tpot_ms",
    "duration_s": "duration_s",
}


def uniform_lengths(w: dict) -> dict:
    """SGLang's bench_serving draws random lengths uniformly from the flag's length times
    --random-range-ratio (at least 1 token) up to the flag's length; a ratio below 1 is kept as those
    ranges (python/sglang/bench_serving.py, sample_random_requests)."""
    r = w.get("range_ratio")
    if w.get("dataset") != "random" or r is None or r >= 1:
        return {}
    i, o = int(w["input_len"]), int(w["output_len"])
    return {"uniform_lengths": {"prompt": [max(int(i * r), 1), i], "output": [max(int(o * r), 1), o]}}


def entry(src: dict) -> dict:
    model, gpu, quant, endpoint = TAKEN[src["id"]]
    w, res = src["workload"], src["results"]
    n = int(w["num_prompts"])
    prompt = res["total_input_tokens"] / n
    output = res["total_generated_tokens"] / n
    version = str(src["sglang_version"]).lstrip("v")
    fits = (
        "gpu"
        if src["id"] in CALIBRATE_GPU
        else "prefill"
        if src["id"] in CALIBRATE_PREFILL
        else "host"
        if src["id"] in CALIBRATE
        else None
    )
    split = "calibrate" if fits else "heldout"
    fitted = {
        "gpu": f"The {gpu.upper()}'s MoE rate and per-layer kernel time were fitted on it",
        "prefill": f"The rate SGLang's MoE kernels multiply at on the {gpu.upper()} was fitted on it",
        "host": "SGLang's host costs were fitted on it",
        None: "Held out: nothing was fitted to it",
    }[fits]
    notes = [f"From {SOURCE.relative_to(ROOT)} ({src['id']}).", fitted + "."]
    line = ".".join(version.split(".")[:2])  # 0.4.3.post2 -> 0.4
    older = tuple(map(int, line.split("."))) < (0, 5)
    if older:
        notes.append(f"Served by SGLang {version}; replayed as the modelled 0.5 line (same scheduler rules).")
    if src.get("notes"):
        notes.append(str(src["notes"]))
    hw = src["hardware"]
    return {
        "id": f"{gpu}_{model}_{src['id']}",
        "split": split,
        **({"fits": fits} if fits else {}),
        "framework": "sglang",
        "source": src["source"],
        "url": src["url"],
        "sglang_version": version,
        "servesim_version": "0.5",
        "gpu": gpu,
        "gpu_reported": hw,
        "tensor_parallel_size": int(w.get("tp") or 1),
        "hf_model": src["model"],
        "model": model,
        "quantization": quant,
        "serve_command": src["launch"],
        "bench_command": src["benchmark"],
        "engine": dict(DP_ATTENTION) if src["id"].startswith("dstack-dsr1-h200") else {},
        "bench": {
            "endpoint": endpoint,
            "dataset": "sharegpt" if w["dataset"] == "sharegpt" else "random",
            "num_prompts": n,
            "request_rate": "inf",
            "max_concurrency": w.get("max_concurrency"),
            "mean_prompt_tokens": round(prompt, 2),
            "mean_output_tokens": round(output, 2),
            "input_len": w.get("input_len"),
            "output_len": w.get("output_len"),
            **uniform_lengths(w),
        },
        "results": {RESULTS[k]: v for k, v in res.items() if k in RESULTS and v is not None},
        "notes": notes,
        # A release before the modelled line is reported, not counted: its kernels and scheduler are
        # not the ones servesim models (engine.sglang_version accepts the 0.5 line only).
        **({"confounded": f"SGLang {line}.x, before the modelled 0.5 line"} if older else {}),
    }


def main() -> int:
    sources = {r["id"]: r for r in yaml.safe_load(SOURCE.read_text())["runs"]}
    runs = [entry(sources[s]) for s in TAKEN]
    about = (
        "Public SGLang serving runs servesim replays (servesim validate --sglang), written by "
        "tools/validation/add_sglang_runs.py from data/sources/sglang/public_runs.yaml, whose "
        "public_runs.md cites every source. SGLang's host costs are fitted on the calibrate split alone."
    )
    text = yaml.safe_dump({"about": about, "runs": runs}, sort_keys=False, width=200, allow_unicode=True)
    OUT.write_text(text)
    print(f"{len(runs)} runs written to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
