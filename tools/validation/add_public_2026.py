"""Append the public runs of data/sources/models-gpus-2026/public_runs.yaml that servesim can replay
(their lengths, request count and concurrency are printed or quoted) to
simulator/data/validation/runs.yaml, in its form.

    python tools/validation/add_public_2026.py

Taken: GPUStack's DeepSeek-R1-0528 (FP8) runs on 8 x H200 (vLLM 0.11.0) not there yet (its ShareGPT,
ShareGPT at 4 in flight and random 2,000/100 runs already are, as h200x8_deepseek-r1_gpustack_*), vLLM PR #23696's gpt-oss-120b
run on 8 x B200 (FlashInfer MXFP4 MoE) and issue #30326's gpt-oss-120b run on 8 x H200 at 8 in flight
(its throughput only), and the vLLM blog's gpt-oss-20b runs on an H100 with a bf16 and an fp8 KV cache
(throughput only), and GPUStack's gpt-oss-120b (15 runs) and gpt-oss-20b (12 runs) on A100 SXM
80GB (vLLM 0.11.0; every vLLM result block of the two pages: ShareGPT bursts of 1,000 with and without
async scheduling, at TP2 (120b) and at 4,096 and 8,192 batched tokens, random 32,000/100, 4,000/200,
2,000/100 and 128/4 bursts with the baseline and the optimized serve command, and the 120b page's
ShareGPT at 4 in flight; both batched-token runs are kept although the page prints the serve command of
only one, the other's being named by the header over its result block). These take the form of the
GPUStack H100 gpt-oss runs (which no script wrote: they were added by hand in fd951ab). Left out, and
why: issue #30326's 128-in-flight point (its request count is not quoted), PR #23369 (GPU not stated),
issue #40838 (dataset not in the excerpt), the EAGLE runs (draft models servesim does not have built
in), the blog's fp8 run that keeps the sliding-window layers in bf16 (no such knob), the MI300X run
(dataset unknown), and of the A100 pages the SGLang runs (another engine, not in public_runs.yaml) and
the TensorRT-LLM and FlashInfer-attention attempts (they failed on SM80: no numbers). Each run is held
out (nothing was fitted to it) except issue #30326's, which decided between two forms of the MXFP4 MoE
cost on Hopper (the notes on recording h200_gptoss_2026-11-29 in data/e2e/README.md) and is marked
calibrate. Then llm-d's MI355X reference page (Llama-3.3-70B FP8 at TP8, vLLM 0.15.1 on ROCm), every
row: the first vLLM runs on an AMD GPU servesim replays, three of them the calibration of the MI355X's
vLLM kernels (``LLMD_FITS``), the rest held out. Its rows are each the best of a
51-configuration sweep within 1-3% of each other (the serve command's own settings are taken), its
request counts are the reproducer's four per client, and three of its short-prompt rows stopped
early (no --ignore-eos) by unknown amounts: those are shown, not counted (``CONFOUNDED``). Then the
vLLM recipes' DeepSeek-R1 guide for 8 x MI300X (random 3,200/800 at 128 and 256 in flight, AMD's vLLM
0.9.1 build, replayed on the 0.10 line), held out. Running it twice adds nothing (runs already present
are skipped).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "data" / "sources" / "models-gpus-2026" / "public_runs.yaml"
RUNS = ROOT / "simulator" / "data" / "validation" / "runs.yaml"

# GPUStack's gpt-oss runs on A100 (public_runs.yaml's gpustack-gptoss120b-a100-NN, -20b-a100-NN, in
# the pages' order): (tensor-parallel size, id tag, engine flags besides max_model_len)
_ASYNC = {"async_scheduling": True}
_MBT4K = {**_ASYNC, "max_num_batched_tokens": 4096}
_MBT8K = {**_ASYNC, "max_num_batched_tokens": 8192}
_LENGTHS = ("random32000-100", "random4000-200", "random2000-100", "random128-4")
# the one that fits the prefill rate of vLLM's Triton attention (gpt-oss's sinks on an A100:
# cost.TRITON_ATTN_COMPUTE, on its output throughput and mean TTFT); the others are held out
A100_FITS = {"gpustack-gptoss120b-a100-05"}
GPUSTACK_A100: dict[str, list[tuple[int, str, dict]]] = {
    "gpt-oss-120b": [
        (1, "sharegpt", {}),
        (1, "sharegpt_async", _ASYNC),
        (2, "sharegpt_async", _ASYNC),
        (1, "sharegpt_async_mbt4k", _MBT4K),
        (1, "sharegpt_async_mbt8k", _MBT8K),
        *[(1, tag, {}) for tag in (*_LENGTHS, "sharegpt_c4")],
        *[(1, f"{tag}_async_mbt4k", _MBT4K) for tag in _LENGTHS],
        (1, "sharegpt_async_mbt4k_c4", _MBT4K),
    ],
    "gpt-oss-20b": [
        (1, "sharegpt", {}),
        (1, "sharegpt_async", _ASYNC),
        (1, "sharegpt_async_mbt4k", _MBT4K),
        (1, "sharegpt_async_mbt8k", _MBT8K),
        *[(1, tag, {}) for tag in _LENGTHS],
        *[(1, f"{tag}_async", _ASYNC) for tag in _LENGTHS],
    ],
}
GPUSTACK_LAB = "GPUStack Performance Lab (gpustack/gpustack docs)"
# what the GPU makes of gpt-oss's MXFP4 experts, for the GPUStack runs' notes
MXFP4_PATH = {
    "a100-80gb": "gpt-oss's MXFP4 experts on an A100 (no FP4 or FP8 tensor cores): weight-only, 16-bit math "
    "(vLLM's Marlin MoE kernels on SM80, where Hopper runs its Triton ones)."
}

# llm-d's MI355X rows the GPU's vLLM kernel rates are fitted on (tools/validation/fit_gpu_family.py
# --engine vllm): the fewest rows that pin its three rates (decode at short and at long context, a long
# prefill), chosen after every row had been replayed blind and before anything was fitted
LLMD_FITS = ("4k4k-c4", "16k2k-c16", "32k128-c4")

# source id -> (our id, servesim model, GPU, release line, quantization, endpoint, engine flags, split)
TAKEN: dict[str, tuple[str, str, str, str, str, str, dict, str]] = {
    **{
        f"gpustack-dsr1-0528-h200-0{k}": (
            f"h200x8_deepseek-r1_gpustack_tp8_{tag}_{k:02d}",
            "deepseek-r1",
            "h200",
            "0.11",
            "fp8",
            "chat",
            {},
            "heldout",
        )
        for k, tag in ((1, "random32000-100"), (2, "random4000-200"), (4, "random128-4"))
    },
    "vllm-pr23696-b200-120b-tp8-flashinfer": (
        "b200x8_gpt-oss-120b_vllm-pr23696_tp8_sharegpt",
        "gpt-oss-120b",
        "b200",
        "0.10",
        "mxfp4",
        "completions",
        {"max_model_len": 32768},
        "heldout",
    ),
    "vllm-issue30326-h200-120b-tp8-c8-before": (
        "h200x8_gpt-oss-120b_vllm-issue30326_tp8_random1024-1024_c8",
        "gpt-oss-120b",
        "h200",
        "0.11",  # vLLM 0.12's line; its capture-size change does not apply where the size is given
        "mxfp4",
        "completions",
        {
            "max_cudagraph_capture_size": 2048,
            "max_model_len": 2058,
            "max_num_seqs": 512,
            "max_num_batched_tokens": 8192,
            "enable_prefix_caching": False,
            "async_scheduling": True,
            "gpu_memory_utilization": 0.9,
        },
        "calibrate",
    ),
    "vllm-blog-fp8kv-gptoss20b-h100-bf16": (
        "h100_gpt-oss-20b_vllm-blog-fp8kv_tp1_bf16kv_c8",
        "gpt-oss-20b",
        "h100-sxm",
        "0.19",
        "mxfp4",
        "completions",
        {},
        "heldout",
    ),
    "vllm-blog-fp8kv-gptoss20b-h100-fp8": (
        "h100_gpt-oss-20b_vllm-blog-fp8kv_tp1_fp8kv_c8",
        "gpt-oss-20b",
        "h100-sxm",
        "0.19",
        "mxfp4",
        "completions",
        {"kv_cache_dtype": "fp8"},
        "heldout",
    ),
    **{
        f"gpustack-{model.replace('-', '')}-a100-{k:02d}": (
            f"a100{f'x{tp}' if tp > 1 else ''}_{model}_gpustack_tp{tp}_{tag}_{k:02d}",
            model,
            "a100-80gb",
            "0.11",
            "mxfp4",
            "chat",
            {**({"max_model_len": 32768} if model == "gpt-oss-120b" else {}), **engine},
            "calibrate" if f"gpustack-{model.replace('-', '')}-a100-{k:02d}" in A100_FITS else "heldout",
        )
        for model, runs in GPUSTACK_A100.items()
        for k, (tp, tag, engine) in enumerate(runs)
    },
    # llm-d's MI355X reference page (vLLM 0.15.1 on ROCm): the first public vLLM runs on an AMD GPU
    # servesim replays; max_model_len the reproducer's (the 64k-token prompts need it)
    **{
        f"llmd-mi355x-llama70b-fp8kv-tp8-{tag}": (
            f"mi355xx8_llama-3.3-70b-fp8_llmd_tp8_{tag.replace('-', '_')}",
            "llama-3.3-70b-fp8",
            "mi355x",
            "0.15.1",  # the release itself: its ROCm attention default is 0.19's line's no longer
            "fp8",
            "completions",
            {"gpu_memory_utilization": 0.85, "block_size": 128, "max_model_len": 131072},
            "calibrate" if tag in LLMD_FITS else "heldout",
        )
        for tag in (
            *(f"1k256-c{c}" for c in (16, 64, 128, 256)),
            *(f"4k4k-c{c}" for c in (4, 16, 32)),
            *(f"16k2k-c{c}" for c in (4, 16, 32)),
            "32k128-c4",
            "64k128-c2",
        )
    },
    # the vLLM recipes' DeepSeek-R1 guide for AMD GPUs (8 x MI300X): AMD's vLLM 0.9.1 build, replayed on
    # the earliest line servesim models; the serve command's own settings
    **{
        f"vllm-recipes-dsr1-mi300x-tp8-3200-800-c{c}": (
            f"mi300xx8_deepseek-r1_vllm-recipes_tp8_random3200-800_c{c}",
            "deepseek-r1",
            "mi300x",
            "0.10",
            "fp8",
            "completions",
            {"max_num_seqs": 1024, "max_num_batched_tokens": 32768, "block_size": 1, "max_model_len": mml},
            "heldout",
        )
        for c, mml in ((128, 32768), (256, 65536))
    },
}
API_SERVERS = {"vllm-issue30326-h200-120b-tp8-c8-before": 20}
# runs shown but not counted, and why
_EARLY = (
    "its outputs stopped early (no --ignore-eos: the printed total/output throughput gives a mean near {mean} of the "
    "{asked} tokens asked, their spread not printed), and the page's row is the best of 51 configurations"
)
CONFOUNDED = {
    "llmd-mi355x-llama70b-fp8kv-tp8-1k256-c64": _EARLY.format(mean=64, asked=256),
    "llmd-mi355x-llama70b-fp8kv-tp8-1k256-c128": _EARLY.format(mean=128, asked=256),
    "llmd-mi355x-llama70b-fp8kv-tp8-1k256-c256": _EARLY.format(mean=128, asked=256),
}


def entry(src: dict) -> dict:
    rid, model, gpu, line, quant, endpoint, engine, split = TAKEN[src["id"]]
    res = src.get("results") or {}
    n = int(src["num_prompts"])
    if res.get("total_input_tokens"):
        prompt, output = res["total_input_tokens"] / n, res["total_generated_tokens"] / n
    else:  # fixed lengths as planned (random with range ratio 1, or the blog's stated means)
        prompt, output = float(src["input_len"]), float(src["output_len"])
    dataset = "sharegpt" if src["dataset"] == "sharegpt" else "random"
    notes = [f"From {SOURCE.relative_to(ROOT)} ({src['id']}).", "Added as held out: nothing was fitted to it."]
    if split == "calibrate":
        notes[1] = (
            "Marked calibrate: it decided between two forms of the MXFP4 MoE cost on Hopper (the notes on "
            "recording h200_gptoss_2026-11-29 in data/e2e/README.md); nothing else was fitted to it."
        )
    lab = src["id"].startswith("gpustack-gptoss")  # in the form of the GPUStack H100 gpt-oss runs
    if lab:
        notes.insert(1, f"GPUStack '{src['label']}' point; {MXFP4_PATH[gpu]}")
    if src.get("notes") or src.get("note"):
        notes.append(str(src.get("notes") or src.get("note")))
    out = {
        "id": rid,
        "split": split,
        "source": GPUSTACK_LAB if lab else src.get("title") or src.get("label") or src["id"],
        "url": src["url"],
        **({"url_rendered": src["rendered_url"], "commit": src["url"].split("/blob/")[1].split("/")[0]} if lab else {}),
        "vllm_version": src["vllm_version"],
        "servesim_version": line,
        "gpu": gpu,
        "gpu_reported": f"NVIDIA {src['gpu']}" if lab else src["gpu"],
        "tensor_parallel_size": int(src.get("tp") or 1),
        "hf_model": src["model"],
        "model": model,
        "quantization": quant,
        "serve_command": src["serve_cmd"],
        "bench_command": src["bench_cmd"],
        "engine": dict(engine),
        "bench": {
            "endpoint": endpoint,
            "dataset": dataset,
            "num_prompts": n,
            "request_rate": "inf",
            "max_concurrency": src.get("max_concurrency"),
            "mean_prompt_tokens": round(prompt, 2),
            "mean_output_tokens": round(output, 2),
            "input_len": src.get("input_len"),
            "output_len": src.get("output_len"),
        },
        "results": {k: v for k, v in res.items() if v is not None},
        "notes": notes,
    }
    if src["id"] in A100_FITS:
        notes[1] = (
            "Marked calibrate: it fits cost.TRITON_ATTN_COMPUTE, the prefill rate of vLLM's Triton attention, which "
            "vLLM runs for gpt-oss on an A100 (its attention sinks: FlashAttention-2 has none), on output "
            "throughput and mean TTFT; nothing else was fitted to it."
        )
        out["fits"] = "attention"
    if split == "calibrate" and src["id"].startswith("llmd-"):
        notes[1] = (
            "Marked calibrate: the MI355X's per-layer kernel time and the rates of vLLM's Triton attention "
            "there were fitted on it with two other rows of the page (tools/validation/fit_gpu_family.py --engine vllm)."
        )
        out["fits"] = "gpu"
    if src["id"] in CONFOUNDED:
        out["confounded"] = CONFOUNDED[src["id"]]
    if src["id"] in API_SERVERS:
        out["frontend"] = {"api_server_count": API_SERVERS[src["id"]]}
    return out


def main() -> int:
    sources = {r["id"]: r for r in yaml.safe_load(SOURCE.read_text())["runs"]}
    have = {r["id"] for r in yaml.safe_load(RUNS.read_text())["runs"]}
    new = [entry(sources[s]) for s in TAKEN if TAKEN[s][0] not in have]
    if new:  # at the end of the runs list, before the rejected sources (the file's comments kept)
        text = RUNS.read_text()
        cut = text.index("\nrejected:") + 1
        block = yaml.safe_dump(new, sort_keys=False, width=200, allow_unicode=True)
        RUNS.write_text(text[:cut] + block + text[cut:])
    print(f"{len(new)} runs added to {RUNS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
