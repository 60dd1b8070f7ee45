"""llm-d, "AMD MI355X Performance Reference (Llama-3.3-70B-FP8-KV, TP=8)", transcribed as printed
(read 2026-11-30): docs/accelerators/amd-mi355x-perf.md of github.com/llm-d/llm-d at commit
a974157bb1230897f6e9e629b4419cb71f952b2c (llm-d PR #1233, April 2026)."""

URL = "https://github.com/llm-d/llm-d/blob/main/docs/accelerators/amd-mi355x-perf.md"
COMMIT = "a974157bb1230897f6e9e629b4419cb71f952b2c"
SERVE = (
    "vllm serve amd/Llama-3.3-70B-Instruct-FP8-KV --tensor-parallel-size 8 --gpu-memory-utilization 0.85 "
    "--block-size 128 --max-model-len <varied> --disable-uvicorn-access-log"
)
# The page's tables: (tag, input, output, concurrency, output tok/s, total tok/s, mean TTFT ms,
# median TPOT or ITL ms, which of the two the page names; None where it prints none)
ROWS = [
    ("1k256-c16", 1024, 256, 16, 1320.8, 6598.8, 343, 10.3, "itl"),
    ("1k256-c64", 1024, 256, 64, 1519.2, 25820.6, 2440, 37.3, "tpot"),
    ("1k256-c128", 1024, 256, 128, 2985.0, 26853.0, 1505, 39.2, "tpot"),
    ("1k256-c256", 1024, 256, 256, 3347.9, 30118.4, 2296, 72.5, "tpot"),
    ("4k4k-c4", 4096, 4096, 4, 353.6, 707.1, 369, 11.3, "tpot"),
    ("4k4k-c16", 4096, 4096, 16, 1233.0, 2466, 871, 12.8, "tpot"),
    ("4k4k-c32", 4096, 4096, 32, 2230.0, 4459, 1204, 14.1, "tpot"),
    ("16k2k-c4", 16384, 2048, 4, 246.8, 2221, 1770, 21.0, "tpot"),  # TTFT printed as 1.77 s
    ("16k2k-c16", 16384, 2048, 16, 717.1, 6454, 3100, 21.2, "tpot"),
    ("16k2k-c32", 16384, 2048, 32, 1112.6, 10013, 4440, 27.7, "tpot"),
    ("32k128-c4", 32768, 128, 4, 48.8, 12533, 4290, None, None),
    ("64k128-c2", 65536, 128, 2, 15.5, 7959, 9090, None, None),
]
REPRODUCER = "4k4k-c32"  # the page's reproducer command: 128 prompts at 32 in flight
NOTE = (
    "Each row of the page is the best of a 51-configuration sweep (gpu-memory-utilization 0.85/0.90/0.95, block size "
    "64/128/256, max-num-seqs 256/512, max-model-len 32k/64k/128k), within 1-3% of each other; one run per "
    "configuration, --seed 1. The page states the request count only for its reproducer (128 at 32 in flight); "
    "4 x concurrency is assumed for the others. The bench command has no --ignore-eos."
)


def points() -> list[dict]:
    out = []
    for tag, i, o, c, otp, ttp, ttft, lat, which in ROWS:
        n = 128 if tag == REPRODUCER else 4 * c
        res = {"output_token_throughput": otp, "total_token_throughput": ttp, "mean_ttft_ms": float(ttft)}
        if which:
            res[f"median_{which}_ms"] = lat
        note = NOTE
        ratio, full = ttp / otp, (i + o) / o
        if abs(ratio - full) / full > 0.02:  # the outputs stopped early
            note += (
                f" Total/output throughput is {ratio:.2f} where {i}/{o} tokens give {full:.2f}: the outputs stopped early "
                f"(about {i / (ratio - 1):.0f} tokens on average if every prompt had {i}); their spread is not printed."
            )
        bench = (
            "vllm bench serve --backend vllm --model /models/Llama-3.3-70B-Instruct-FP8-KV --dataset-name random "
            f"--random-input-len {i} --random-output-len {o} --num-prompts {n} --max-concurrency {c} --seed 1"
        )
        if tag != REPRODUCER:
            bench += "  (the page's reproducer command with this row's lengths and concurrency; num-prompts assumed)"
        out.append(
            {
                "id": f"llmd-mi355x-llama70b-fp8kv-tp8-{tag}",
                "url": URL,
                "date": "2026-04 (page: 'Date: April 2026'; llm-d PR #1233)",
                "title": "AMD MI355X Performance Reference (Llama-3.3-70B-FP8-KV, TP=8)",
                "model": "amd/Llama-3.3-70B-Instruct-FP8-KV",
                "gpu": "MI355X",
                "num_gpus": 8,
                "tp": 8,
                "vllm_version": "0.15.1 (ghcr.io/llm-d/llm-d-rocm:v0.6.0, ROCm 7.x)",
                "serve_cmd": SERVE,
                "bench_cmd": bench,
                "dataset": "random",
                "input_len": i,
                "output_len": o,
                "num_prompts": n,
                "max_concurrency": c,
                "request_rate": "inf",
                "results": res,
                "read": "2026-11-30",
                "notes": note,
                "commit": COMMIT,
            }
        )
    return out
