"""vLLM recipes, "AMD GPU Installation and Benchmarking Guide" for DeepSeek-R1 (DeepSeek/AMD_GPU/README.md
of github.com/vllm-project/recipes, AMD-authored, removed from the repository on 2026-01-31), transcribed
as printed (read 2026-12-01) from two versions of the file, both of 2025-08-07: the first runs 128
requests in flight, the second 256 (with other serve flags, after locking the GPUs' clocks)."""

BENCH = (
    "python3 /app/vllm/benchmarks/benchmark_serving.py --model deepseek-ai/DeepSeek-R1 --dataset-name random "
    "--ignore-eos --num-prompts 500 --max-concurrency {c} --random-input-len 3200 --random-output-len 800 "
    "--percentile-metrics ttft,tpot,itl,e2el"
)
ENV = (
    "SAFETENSORS_FAST_GPU=1 VLLM_USE_V1=1 VLLM_ROCM_USE_AITER=1 VLLM_ROCM_USE_AITER_RMSNORM=0 VLLM_ROCM_USE_AITER_MHA=0 "
    "VLLM_V1_USE_PREFILL_DECODE_ATTENTION=1"
)
SERVE = (
    "{env} vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size 8 --max-model-len {mml} --max-num-seqs 1024 "
    "--max-num-batched-tokens 32768 --disable-log-requests --block-size 1 --compilation-config "
    "'{{\"full_cuda_graph\":false}}' --trust-remote-code"
)
K = (
    "successful_requests", "duration_s", "total_input_tokens", "total_generated_tokens", "request_throughput",
    "output_token_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
)
# (concurrency, commit, date, environment, max-model-len, printed results in K's order, note)
ROWS = [
    (
        128, "cbb075bc97ee792159824303c4eaa36d34375b49", "2025-08-07 14:31 +0800", ENV, 32768,
        (500, 283.98, 1597574, 400000, 1.76, 1408.53, 7034.09, 7585.82, 4689.25, 30544.70,
         80.02, 83.26, 88.89, 80.02, 50.92, 2263.85),
        "",
    ),
    (
        256, "b7d325e027bfa796f217af9dc4c020361db1bc4f", "2025-08-07 17:11 +0800", "NCCL_MIN_NCHANNELS=112 " + ENV, 65536,
        (500, 234.00, 1597574, 400000, 2.14, 1709.39, 8536.59, 18547.34, 5711.21, 59776.29,
         124.24, 140.70, 144.12, 124.24, 71.91, 2290.11),
        " This version of the guide first locks the GPUs' clocks (`rocm-smi --setperfdeterminism 1900`: 1,900 MHz, "
        "where the MI300X's peak is 2,100) and serves with other flags than the 128-in-flight run (max-model-len "
        "65536, NCCL_MIN_NCHANNELS=112): the two are not a clean sweep.",
    ),
]
NOTE = (
    "vLLM version not printed: the guide runs the image rocm/vllm:latest, which on 2025-08-07 was "
    "rocm/vllm:rocm6.4.1_vllm_0.9.1_20250715 (AMD's build of vLLM 0.9.1; its next was 0.10.0 on 2025-08-12). "
    "AITER on (its RMSNorm and MHA off), V1 engine, block size 1 (AITER's MLA), piecewise CUDA graphs "
    "(full_cuda_graph false); prefix caching on by default, and the random dataset shares no prefix."
)


def points() -> list[dict]:
    out = []
    for c, commit, date, env, mml, vals, extra in ROWS:
        out.append(
            {
                "id": f"vllm-recipes-dsr1-mi300x-tp8-3200-800-c{c}",
                "url": f"https://github.com/vllm-project/recipes/blob/{commit}/DeepSeek/AMD_GPU/README.md",
                "date": date,
                "title": "vLLM recipes: DeepSeek-R1 on AMD GPUs (DeepSeek/AMD_GPU/README.md)",
                "model": "deepseek-ai/DeepSeek-R1",
                "gpu": "MI300X",
                "num_gpus": 8,
                "tp": 8,
                "vllm_version": "0.9.1 (inferred: rocm/vllm:latest of 2025-08-07, rocm6.4.1_vllm_0.9.1_20250715)",
                "serve_cmd": SERVE.format(env=env, mml=mml),
                "bench_cmd": BENCH.format(c=c),
                "dataset": "random",
                "input_len": 3200,
                "output_len": 800,
                "num_prompts": 500,
                "max_concurrency": c,
                "request_rate": "inf",
                "results": dict(zip(K, vals)),
                "read": "2026-12-01",
                "notes": NOTE + extra,
                "commit": commit,
            }
        )
    return out
