"""The vLLM features against public measurements: speculative decoding, multi-LoRA and KV
offloading, as ``servesim validate --features`` and the benchmarks (benchmarks/spec_decode.py,
lora.py, kv_offload.py) run them. Each set is a function returning rows ``{set, load, metric,
published, servesim}`` (with ``method`` and ``acceptance_length`` for speculative decoding); the
published figures are constants here, with their sources in data/spec_decode/, data/lora/ and
data/kv_offload/ (public.yaml: URLs, quotes, commands).

Speculative decoding (none of it fitted but set 2, on which the drafter's host time per pass was):
1. SpecDecode-Bench (arXiv 2601.11580, vLLM 0.10.1, one H100): Llama-3.1-8B-Instruct, ShareGPT, k = 3,
   generated-token throughput with drafts over without, at 1, 16, 64 and 128 sequences decoded at
   once, for EAGLE-3, EAGLE and n-gram (ratios read off the paper's figure; acceptance from its data).
2. vLLM issue #20780 (one GPU, batch 1): Llama-3.1-8B-Instruct, TPOT at k = 2..7 for EAGLE and EAGLE-3
   against 7.07 ms without, with the mean acceptance length measured at each k.
3. llm-d's Qwen3-32B EAGLE-3 ladder (two H200s, TP 2, Poisson 1-16 requests/s, random prompts of
   ~2,048 tokens, outputs of ~256): median TPOT and output throughput with and without drafts
   (acceptance not published: servesim's EAGLE-3 default is used).

Multi-LoRA (nothing fitted):
1. The V1 scheduler's adapter limit (vLLM main of 2025-04, Llama-3.1-8B-Instruct, rank 16, ShareGPT,
   128 adapters sent Poisson traffic for an hour, ~7.5 requests/s in all; an H100): mean TTFT, mean
   TPOT and output throughput at max_loras 8 to 128 (every adapter the same share of the traffic
   here; lengths lognormal around ShareGPT's means).
2. The LoRA kernels' cost (vLLM PR #48887, vLLM 0.25.1, Qwen2.5-7B-Instruct, one adapter of rank 8,
   2,048-token prompts and 256-token outputs at 10 requests/s): output throughput and mean TPOT of the
   adapter's requests over the base model's.

KV offloading (nothing fitted): vLLM's blog on the offloading connector (2026-01-08), one
Llama-3.1-8B request on an H100, TTFT of a full prefill and of a 100% host hit at 10k-100k tokens
(read off its chart). The recorded servers with offloading are ``servesim validate --recorded``'s.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from simulator.engine.rules import cdiv
from simulator.metrics import summarize
from simulator.outputs.writers import text_file
from simulator.run import simulate
from simulator.scenario.config import load_scenario
from simulator.scenario.hosts import reference_host_override
from workloads.presets import PRESETS

# SpecDecode-Bench, Llama-3.1-8B-Instruct, ShareGPT, H100, k = 3 (data/spec_decode/public.yaml:
# specdecode-bench-llama31-8b-sharegpt-vs-batch; acceptance: specdecode-bench-derived-acceptance-llama31-8b,
# per-position shares of verifications, turned into conditional rates).
BENCH_BATCHES = (1, 16, 64, 128)
BENCH_SPEEDUP = {
    "eagle3": (1.71, 1.68, 1.55, 1.29),
    "eagle": (1.67, 1.66, 1.53, 1.30),
    "ngram": (1.27, 1.25, 1.19, 1.11),
}
BENCH_ACCEPT = {
    "eagle3": (0.622, 0.381 / 0.622, 0.252 / 0.381),
    "ngram": (0.160, 0.128 / 0.160, 0.107 / 0.128),
    "eagle": None,  # not derived in the source: servesim's default for EAGLE
}
# vLLM issue #20780: batch 1, TPOT without drafts 7.07 ms; (k, mean acceptance length, TPOT ms).
ISSUE_20780 = {
    "eagle": ((2, 2.10, 4.37), (3, 2.29, 4.29), (4, 2.39, 4.48), (5, 2.43, 4.71), (6, 2.45, 4.94), (7, 2.47, 5.20)),
    "eagle3": ((2, 2.36, 4.32), (3, 2.79, 4.09), (4, 3.08, 4.05), (5, 3.32, 4.13), (6, 3.46, 4.20), (7, 3.54, 4.29)),
}
ISSUE_20780_BASE_TPOT_MS = 7.07
# llm-d, Qwen3-32B, 2 x H200 TP 2, EAGLE-3 k = 3: rate -> (median TPOT ms, output tok/s) without / with.
LLMD = {
    1: ((13.2, 265), (9.7, 244)),
    2: ((15.1, 525), (11.7, 538)),
    4: ((24.6, 1006), (21.4, 1032)),
    8: ((209.7, 1649), (210.1, 1442)),
}


def sharegpt_lengths() -> list[str]:
    """ShareGPT as SpecDecode-Bench ran it: outputs of 740 tokens on average (its 310 requests; the
    spread, sigma 0.8, is an assumption); prompts as the ``chat`` preset's (LMSYS-Chat-1M)."""
    c = PRESETS["chat"][0]
    return [
        f"workload.prompt_tokens={{dist: lognormal, mean: {c.mean}, sigma: {c.sigma}, max: {c.max}}}",
        "workload.output_tokens={dist: lognormal, mean: 740, sigma: 0.8, max: 4096}",
    ]


def run(overrides: list[str]) -> dict:
    """A published setup's summary, on the host the host costs were fitted at (its own is not described)."""
    sc, _ = load_scenario(None, [reference_host_override(), *overrides])
    return summarize(simulate(sc))


def spec(method: str, k: int, accept) -> list[str]:
    if method == "none":
        return []
    if accept is None:
        rate = "null"
    elif isinstance(accept, float):
        rate = f"{accept:.4f}"
    else:
        rate = "[" + ", ".join(f"{a:.4f}" for a in accept) + "]"
    return [f"engine.speculative_config={{method: {method}, num_speculative_tokens: {k}, acceptance_rate: {rate}}}"]


def constant_rate(length: float, k: int) -> float:
    """The conditional acceptance rate a, the same at every position, with 1 + a + ... + a^k = ``length``."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        lo, hi = (a, hi) if sum(a**i for i in range(k + 1)) < length else (lo, a)
    return (lo + hi) / 2


def _spec_row(name: str, method: str, load: str, metric: str, published: float, servesim: float, s: dict) -> dict:
    """A speculative-decoding row: with the acceptance length servesim drew (``s``: the run with drafts)."""
    return {
        "set": name,
        "method": method,
        "load": load,
        "metric": metric,
        "published": published,
        "servesim": servesim,
        "acceptance_length": s["spec_decode"]["mean_acceptance_length"],
    }


def bench_set() -> list[dict]:
    base = [
        "model=llama-3.1-8b",
        "hardware.gpu=h100-sxm",
        "engine.vllm_version=0.10",
        *sharegpt_lengths(),
        "run.duration_s=180",
        "run.warmup_s=30",
    ]
    rows = []
    for i, b in enumerate(BENCH_BATCHES):
        load = [*base, f"workload.arrival={{type: closed_loop, concurrency: {b}}}"]
        none = run(load)["output_throughput"]
        for method, published in BENCH_SPEEDUP.items():
            s = run(load + spec(method, 3, BENCH_ACCEPT[method]))
            speedup = s["output_throughput"] / none
            rows.append(
                _spec_row("SpecDecode-Bench", method, f"batch {b}", "throughput speed-up", published[i], speedup, s)
            )
    return rows


def issue_set() -> list[dict]:
    base = [
        "model=llama-3.1-8b",
        "hardware.gpu=h100-sxm",
        "workload.arrival={type: closed_loop, concurrency: 1}",
        "workload.prompt_tokens={dist: fixed, value: 128}",
        "workload.output_tokens={dist: fixed, value: 256}",
        "run.duration_s=60",
        "run.warmup_s=5",
    ]
    none = run(base)["median_tpot_ms"]
    rows = []
    for method, points in ISSUE_20780.items():
        for k, length, tpot in points:
            s = run(base + spec(method, k, constant_rate(length, k)))
            pub, sim = ISSUE_20780_BASE_TPOT_MS / tpot, none / s["median_tpot_ms"]
            rows.append(_spec_row("vLLM #20780", method, f"batch 1, k {k}", "TPOT speed-up", pub, sim, s))
    return rows


def llmd_set() -> list[dict]:
    base = [
        "model=qwen3-32b",
        "hardware.gpu=h200",
        "hardware.tensor_parallel_size=2",
        "workload.prompt_tokens={dist: normal, mean: 2048, std: 1024, min: 10, max: 4096}",
        "workload.output_tokens={dist: normal, mean: 256, std: 128, min: 10, max: 512}",
        "run.duration_s=120",
        "run.warmup_s=20",
    ]
    rows = []
    for rate, (without, with_) in LLMD.items():
        load = [*base, f"workload.arrival={{type: poisson, rate: {rate}}}"]
        n, s = run(load), run(load + spec("eagle3", 3, None))
        for metric, pub, sim in (
            ("p50 TPOT speed-up", without[0] / with_[0], n["median_tpot_ms"] / s["median_tpot_ms"]),
            ("throughput ratio", with_[1] / without[1], s["output_throughput"] / n["output_throughput"]),
        ):
            rows.append(_spec_row("llm-d Qwen3-32B", "eagle3", f"{rate} req/s", metric, pub, sim, s))
    return rows


# ---- multi-LoRA --------------------------------------------------------------------------------
# max_loras -> (mean TTFT ms, mean TPOT ms, output tok/s) over the hour, 128 adapters.
SWEEP = {
    8: (78360.08, 20.73, 1428.78),
    16: (29017.56, 24.43, 1449.33),
    32: (9354.02, 35.62, 1457.71),
    64: (175.91, 41.36, 1456.59),
    128: (183.77, 46.25, 1457.02),
}
# PR #48887, vLLM 0.25.1 column: (output tok/s, mean TPOT ms) of base-model and adapter requests.
PR48887 = {"base": (993.65, 57.91), "lora": (880.72, 65.21)}


def sweep_set() -> list[dict]:
    base = [
        "model=llama-3.1-8b",
        "hardware.gpu=h100-sxm",
        "engine.max_num_seqs=2048",
        "engine.enable_prefix_caching=false",
        "engine.enable_lora=true",
        "engine.max_lora_rank=16",
        "engine.max_cpu_loras=128",
        "workload.arrival={type: poisson, rate: 7.47}",
        "workload.prompt_tokens={dist: lognormal, mean: 223, sigma: 1.0, max: 4096}",
        "workload.output_tokens={dist: lognormal, mean: 196, sigma: 1.0, max: 2048}",
        "workload.lora={adapters: 128}",
        "run.duration_s=3600",
        "run.warmup_s=0",
    ]
    rows = []
    for m, (ttft, tpot, thr) in SWEEP.items():
        s = run([*base, f"engine.max_loras={m}"])
        for metric, pub, sim in (
            ("mean TTFT ms", ttft, s["mean_ttft_ms"]),
            ("mean TPOT ms", tpot, s["mean_tpot_ms"]),
            ("output tok/s", thr, s["output_throughput"]),
        ):
            rows.append(
                {
                    "set": "V1 max_loras sweep",
                    "load": f"max_loras {m}",
                    "metric": metric,
                    "published": pub,
                    "servesim": sim,
                }
            )
    return rows


def kernel_set() -> list[dict]:
    base = [
        "model=qwen2.5-7b",
        "hardware.gpu=h100-sxm",
        "engine.vllm_version=0.26",
        "engine.enable_lora=true",
        "engine.max_lora_rank=8",
        "engine.enable_prefix_caching=false",
        "workload.arrival={type: poisson, rate: 10}",
        "workload.prompt_tokens={dist: fixed, value: 2048}",
        "workload.output_tokens={dist: fixed, value: 256}",
        "run.num_requests=100",
        "run.duration_s=null",
        "run.warmup_s=0",
    ]
    b, lo = run(base), run([*base, "workload.lora={adapters: 1}"])
    rows = []
    for metric, key, k in (("throughput ratio", "output_throughput", 0), ("TPOT ratio", "mean_tpot_ms", 1)):
        rows.append(
            {
                "set": "PR #48887 kernels",
                "load": "10 req/s",
                "metric": metric,
                "published": PR48887["lora"][k] / PR48887["base"][k],
                "servesim": lo[key] / b[key],
            }
        )
    return rows


# ---- KV offloading ---------------------------------------------------------------------------------
# vllm-blog-2026-01-single-request-ttft-llama8b: prompt tokens -> (full prefill, 100% host hit) TTFT ms
OFFLOAD_BLOG = {10000: (263, 42), 20000: (634, 70), 50000: (2291, 150), 100000: (6850, 310)}


def single_request(n: int) -> tuple[float, float]:
    """TTFT (ms) of a cold ``n``-token prefill and of the same content again (a session's next turn,
    one token longer) after another prompt has evicted it from a GPU pool that holds one prompt: the
    second found on a 64 GiB host tier and loaded."""
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "trace.csv"
        trace.write_text(f"arrival_time_s,prompt_tokens,output_tokens,session_id\n0,{n},1,0\n0,{n},1,\n0,{n + 1},1,0\n")
        sc, _ = load_scenario(
            None,
            [
                reference_host_override(),
                "model=llama-3.1-8b",
                "hardware.gpu=h100-sxm",
                f"engine.num_gpu_blocks_override={cdiv(n + 1, 16) + 1}",
                f"engine.max_model_len={n + 16}",
                "engine.kv_offloading_size=64",
                "workload.arrival={type: closed_loop, concurrency: 1}",
                f"workload.trace={trace}",
                "workload.trace_arrivals=closed_loop",
                "run.duration_s=null",
                "run.warmup_s=0",
            ],
        )
        r = simulate(sc)
        ttft = (r.reqs.first_token - r.reqs.arrival)[:3] * 1e3
        return float(ttft[0]), float(ttft[2])


def offload_blog_set() -> list[dict]:
    rows = []
    for n, (cold, hit) in OFFLOAD_BLOG.items():
        c, h = single_request(n)
        for metric, pub, sim in (("full prefill TTFT ms", cold, c), ("host hit TTFT ms", hit, h)):
            rows.append(
                {
                    "set": "vLLM blog KV offloading",
                    "load": f"{n:,} tokens",
                    "metric": metric,
                    "published": pub,
                    "servesim": sim,
                }
            )
    return rows


# ---- all sets --------------------------------------------------------------------------------------
# name -> (the function computing its rows, what the set was used for)
SETS = {
    "SpecDecode-Bench": (bench_set, "held out"),
    "vLLM #20780": (issue_set, "calibration"),
    "llm-d Qwen3-32B": (llmd_set, "held out"),
    "V1 max_loras sweep": (sweep_set, "held out"),
    "PR #48887 kernels": (kernel_set, "held out"),
    "vLLM blog KV offloading": (offload_blog_set, "held out"),
}


def medians(rows: list[dict]) -> list[tuple[str, str, float, int]]:
    """Per set and metric: (set, metric, the median absolute relative error, points)."""
    out = []
    for name in dict.fromkeys(r["set"] for r in rows):
        for metric in dict.fromkeys(r["metric"] for r in rows if r["set"] == name):
            errs = [abs(r["servesim"] / r["published"] - 1) for r in rows if (r["set"], r["metric"]) == (name, metric)]
            out.append((name, metric, statistics.median(errs), len(errs)))
    return out


def error_lines(rows: list[dict], role: dict[str, str] | None = None) -> list[str]:
    """Per set and metric: the median absolute relative error (and the set's role)."""
    return [
        f"{name} ({(role or {}).get(name, 'held out')}), {metric}: median absolute error {err:.1%} over {n}"
        for name, metric, err, n in medians(rows)
    ]


def run_sets(names: list[str] | None = None, jobs: int = 1) -> list[dict]:
    """The rows of the named sets (all by default), each set in its own process with ``jobs`` > 1."""
    names = list(SETS) if names is None else names
    if jobs <= 1:
        return [r for n in names for r in _set_rows(n)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(jobs, len(names))) as ex:
        return [r for rows in ex.map(_set_rows, names) for r in rows]


def _set_rows(name: str) -> list[dict]:
    return SETS[name][0]()


def write_report(rows: list[dict], out: Path) -> list[str]:
    """features.csv (a row per point) and the error lines."""
    import csv

    path = out / "features.csv"
    with text_file(path) as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["set", "method", "load", "metric", "published", "servesim", "error"])
        for r in rows:
            w.writerow(
                [
                    r["set"],
                    r.get("method", ""),
                    r["load"],
                    r["metric"],
                    r["published"],
                    r["servesim"],
                    r["servesim"] / r["published"] - 1,
                ]
            )
    role = {n: v[1] for n, v in SETS.items()}
    return [f"vLLM features against public measurements ({len(rows)} points; {path}):"] + [
        "  " + line for line in error_lines(rows, role)
    ]
