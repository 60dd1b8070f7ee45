"""Write the recorder's plans (plans/*.json): which server each GPU runs and the benches against it.

    python tools/e2e/plans.py

`wave1` runs four lanes at once (one GPU each); `wave2` another four (one of them on two GPUs).
The `_h200` variants push concurrency further, since an H200's larger KV cache fills later.
`cpu_h200` (one GPU): the host's share of serving, lane by lane (`cpu_lanes`).
`sglang_h200` (one GPU): SGLang 0.5.16 serving the same model (`sglang_lanes`).
`sglang_moe_h200` (one GPU): an MoE model served by SGLang and then by vLLM (`sglang_moe_lanes`).
`sglang_mla_h200` (one GPU): a DeepSeek-architecture model (MLA, DeepSeekMoE) the same way (`sglang_mla_lanes`).
`sglang_prefill_h200` (one GPU): SGLang's prefills with and without CUDA graphs (`sglang_prefill_lanes`).
`sglang_lpm_h200` (one GPU): SGLang's schedule policies over shared prefixes and a small pool (`sglang_lpm_lanes`).
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXED = {"prompt": 128, "output": 370}
SPREAD = {"prompt": 128, "output": {"mean": 370, "sigma": 0.5}}


def seed(name: str) -> int:
    """Each run's own seed: runs that drew their prompts from one seed repeated each other's, and
    the server's prefix cache served the repeats (the 2026-11-27 recording)."""
    return zlib.crc32(name.encode())


def closed(name: str, c: int, n: int, lengths: dict, **kw) -> dict:
    return {"name": name, "max_concurrency": c, "num_prompts": n, **lengths, "timeout_s": 300, "seed": seed(name), **kw}


def rate(name: str, r: float, seconds: float, lengths: dict, **kw) -> dict:
    return {
        "name": name,
        "request_rate": r,
        "num_prompts": int(r * seconds),
        **lengths,
        "timeout_s": 300,
        "seed": seed(name),
        **kw,
    }


def lane(name: str, gpus: list[int], model: str, serve_args: list[str], runs: list[dict], **kw) -> dict:
    return {
        "name": name,
        "gpus": gpus,
        "port": 8100 + gpus[0],
        "model": model,
        "serve_args": serve_args,
        "runs": runs,
        **kw,
    }


def plans(h200: bool) -> dict[str, dict]:
    big = [1024, 1200, 1600, 2000] + ([2600, 3200] if h200 else [])
    fixed_big = [c for c in big if c != 1600]
    seqs = ["--max-num-seqs", "4096" if h200 else "2048", "--max-num-batched-tokens", "8192"]
    wave1 = [
        lane(
            "llama8b_fixed",
            [0],
            "llama-3.1-8b",
            seqs,
            [
                closed("c1", 1, 6, FIXED),
                closed("c64", 64, 192, FIXED),
                closed("c256", 256, 768, FIXED),
                closed("c512", 512, 1536, FIXED),
            ]
            + [closed(f"c{c}", c, 2 * c, FIXED) for c in fixed_big],
        ),
        lane(
            "llama8b_spread",
            [1],
            "llama-3.1-8b",
            seqs,
            [closed(f"c{c}", c, 3 * c if c <= 1200 else 2 * c, SPREAD) for c in [512] + big],
        ),
        lane(
            "qwen32b",
            [2],
            "qwen3-32b",
            [],
            [
                closed("c1", 1, 4, FIXED),
                closed("c32", 32, 96, FIXED),
                closed("c128", 128, 384, FIXED),
                closed("c256", 256, 512, FIXED),
                closed("c256_spread", 256, 512, SPREAD),
            ],
        ),
        lane(
            "qwen30b_moe",
            [3],
            "qwen3-30b-a3b",
            [],
            [
                closed("c1", 1, 6, FIXED),
                closed("c64", 64, 192, FIXED),
                closed("c256", 256, 768, FIXED),
                closed("c512", 512, 1024, FIXED),
                closed("c512_spread", 512, 1024, SPREAD),
            ],
        ),
    ]
    long = {"prompt": {"mean": 1024, "sigma": 0.6, "max": 8000}, "output": {"mean": 256, "sigma": 0.6, "max": 2000}}
    wave1[2]["runs"] += [rate(f"r{r}", r, 40, SPREAD) for r in (1, 2)]
    wave1[3]["runs"] += [rate(f"r{r}", r, 40, SPREAD) for r in (5, 10)]
    wave2 = [
        lane(
            "llama8b_poisson",
            [0],
            "llama-3.1-8b",
            seqs,
            [rate(f"r{r}", r, 40, SPREAD) for r in (10, 25, 40, 50, 60)]
            + [closed(f"long_c{c}", c, 3 * c, long) for c in (16, 64, 256)],
        ),
        lane(
            "llama8b_api2",
            [1],
            "llama-3.1-8b",
            seqs + ["--api-server-count", "2"],
            [
                closed("c1", 1, 6, FIXED),
                closed("c1200", 1200, 3600, SPREAD),
                closed("c2000", 2000, 4000, SPREAD),
                closed("c1200_2clients", 1200, 3600, SPREAD, clients=2),
            ],
        ),
        lane(
            "qwen32b_tp2",
            [2, 3],
            "qwen3-32b",
            ["--tensor-parallel-size", "2"],
            [
                closed("c1", 1, 4, FIXED),
                closed("c64", 64, 192, FIXED),
                closed("c256", 256, 768, FIXED),
                closed("c512", 512, 1024, FIXED),
                closed("c512_spread", 512, 1024, SPREAD),
            ],
        ),
    ]
    # Past saturation (wave2's r50, r60: the server's throughput fell as the rate rose): is it the
    # benchmark client (one process against two), the API server (1 against 4 processes), or the
    # engine (a closed loop holding as many requests as r60 had running)?
    wave3 = [
        lane(
            "llama8b_overload",
            [0],
            "llama-3.1-8b",
            seqs,
            [
                rate("r60", 60, 40, SPREAD),
                rate("r60_2clients", 60, 40, SPREAD, clients=2),
                closed("c840", 840, 2520, SPREAD),
            ],
        ),
        lane(
            "llama8b_overload_api4",
            [1],
            "llama-3.1-8b",
            seqs + ["--api-server-count", "4"],
            [rate("r60", 60, 40, SPREAD), rate("r60_2clients", 60, 40, SPREAD, clients=2)],
        ),
    ]
    # The engine's own step time at large batch, from its iteration log (one API server: vLLM logs
    # iteration details only then): closed loops of fixed lengths and Poisson rates below the
    # server's saturation, for calibrating the engine's CPU work per sequence.
    wave4 = [
        lane(
            "llama8b_steps",
            [0],
            "llama-3.1-8b",
            seqs,
            [closed(f"steps_c{c}", c, 3 * c, FIXED) for c in (128, 384, 768)],
        ),
        lane(
            "llama8b_steps_rate",
            [1],
            "llama-3.1-8b",
            seqs,
            [rate(f"steps_r{r}", r, 40, SPREAD) for r in (30, 45)],
        ),
    ]
    # Whether the API server paces the engine (servesim's frontend.paces_engine): the closed loops
    # whose one API server held the engine's steps to its own pace (steps_c768, c840), with two and
    # four API-server processes; the engine's step from /metrics (tokens per second per running).
    wave5 = [
        lane(
            f"llama8b_pace_api{k}",
            [i],
            "llama-3.1-8b",
            seqs + ["--api-server-count", str(k)],
            [closed("c768", 768, 3 * 768, FIXED), closed("c840", 840, 2520, SPREAD)],
        )
        for i, k in ((0, 4), (1, 2), (0, 1))
    ] + [
        lane(
            "llama8b_overload_api2",
            [1],
            "llama-3.1-8b",
            seqs + ["--api-server-count", "2"],
            [rate("r60", 60, 40, SPREAD)],
        )
    ]
    # The README's collapse case as scenarios/collapse_c*.yaml set it (on an H100: the pool, the
    # memory share, two API servers), each concurrency run for about four rounds of its clients.
    collapse_args = [
        "--max-num-seqs",
        "2048",
        "--max-num-batched-tokens",
        "8192",
        "--gpu-memory-utilization",
        "0.9",
        "--api-server-count",
        "2",
    ]
    collapse = [
        lane("llama8b_collapse_c1200", [0], "llama-3.1-8b", collapse_args, [closed("c1200", 1200, 4800, SPREAD)]),
        lane(
            "llama8b_collapse_c512_c1028",
            [1],
            "llama-3.1-8b",
            collapse_args,
            [closed("c512", 512, 2048, SPREAD), closed("c1028", 1028, 4112, SPREAD)],
        ),
    ]
    return {
        "collapse": {"lanes": collapse},
        "wave1": {"lanes": wave1},
        "wave5": {"lanes": wave5},
        "wave4": {"lanes": wave4},
        "wave2": {"lanes": wave2},
        "wave3": {"lanes": wave3},
        "offload": {"lanes": offload_lanes()},
    }


def offload_lanes() -> list[dict]:
    """KV offloading to host memory (--kv-offloading-size, the native connector): Llama-3.1-8B with a
    20 GiB GPU KV pool (--kv-cache-memory-bytes, the same pool on any GPU), prompts of a 3,000-word
    shared prefix (one of 100, or of 40) and 100 words of their own, 32 clients. The 100 prefixes
    (~300k tokens) overflow the GPU pool (~164k tokens), the 40 fit; off, 16 GiB (less than the GPU
    pool: with writes as blocks are computed the host holds nothing the GPU does not) and 64 GiB."""
    runs = [
        closed(name, 32, 800, {"prompt": 100, "output": 32}, prefix={"groups": g, "words": 3000})
        for name, g in (("p100", 100), ("p40", 40))
    ]
    pool = ["--kv-cache-memory-bytes", str(20 << 30)]
    return [
        lane("llama8b_kvoff_none", [0], "llama-3.1-8b", pool, runs),
        lane(
            "llama8b_kvoff_64",
            [1],
            "llama-3.1-8b",
            pool + ["--kv-offloading-size", "64", "--kv-offloading-backend", "native"],
            runs,
        ),
        lane(
            "llama8b_kvoff_16",
            [0],
            "llama-3.1-8b",
            pool + ["--kv-offloading-size", "16", "--kv-offloading-backend", "native"],
            runs,
        ),
    ]


# Llama-3.1-8B on one H200 at vLLM 0.26's default gpu_memory_utilization 0.92: 143,771 MiB x 0.92 =
# 129.2 GiB, less 15.0 GiB of weights, ~1.1 GiB of activations and 0.2 GiB outside torch, leaves
# 112.3 GiB of KV cache at 128 KiB a token (2 x 32 layers x 8 KV heads x 128 x 2 bytes): a pool of
# 919,744 tokens, as every recorded H200 server logged (an H100 at 0.9 holds about 450k). With 768
# clients at most min(768, max_num_seqs) requests run. A request of 1,024 prompt tokens and 256
# output tokens holds 64 to 80 blocks of 16 tokens, 72.5 (1,160 tokens) on average over its life:
# - max_num_seqs 512: 512 x 1,280 = 655k tokens even if every request were at its end (71% of the
#   pool): the cache never binds;
# - max_num_seqs 1,024 (768 running): 768 x 1,160 = 891k tokens on average (97%), 983k (107%) at
#   the end of every request: the cache fills and vLLM preempts (servesim: KV 100%, about 60
#   preemptions in 1,536 requests; none at 512).
KV = {"prompt": 1024, "output": 256}
# Decode-heavy: nearly every step a decode, the engine's and the API server's per-token work the
# whole cost (768 x 1,088 = 836k tokens at the end of the round: the cache does not bind).
DECODE = {"prompt": 64, "output": 1024}
SEQS = (128, 256, 512, 1024)


def sweep_flags(n: int) -> list[str]:
    """The serve flags of the max_num_seqs sweeps: ``n`` requests a step, vLLM's 8,192-token budget and
    0.92 of the GPU's memory."""
    return ["--max-num-seqs", str(n), "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.92"]


def cpu_lanes() -> list[dict]:
    """One 1-GPU H200 machine, lane by lane (each one server start; `README.md` gives each lane's wall
    time, about 3.5 to 5.5 minutes): Llama-3.1-8B with 768 closed-loop clients and one API server
    at each max_num_seqs (`llama8b_s*`: `kv`, where the KV cache binds at 1,024, then `decode`),
    the decode-heavy run with two API servers (`llama8b_api2_s*`), Poisson arrivals near and past
    one API server's saturation (`llama8b_poisson`, about 25 requests/s of 64 + 512 tokens), and
    Qwen3-32B at three max_num_seqs (`qwen32b_s*`: its 269k-token pool binds at 512). Every run has
    its own seed (the lane's and the run's names), so no two runs send one prompt."""

    def run(lane_name: str, kind: str, **kw) -> dict:
        return {"name": kind, **kw, "timeout_s": 420, "seed": zlib.crc32(f"cpu_h200/{lane_name}/{kind}".encode())}

    out = []
    for n in SEQS:
        name = f"llama8b_s{n}"
        out.append(
            lane(
                name,
                [0],
                "llama-3.1-8b",
                sweep_flags(n),
                [
                    run(name, "kv", max_concurrency=768, num_prompts=2 * 768, **KV),
                    run(name, "decode", max_concurrency=768, num_prompts=768, **DECODE),
                ],
            )
        )
    for n in SEQS:
        name = f"llama8b_api2_s{n}"
        out.append(
            lane(
                name,
                [0],
                "llama-3.1-8b",
                [*sweep_flags(n), "--api-server-count", "2"],
                [run(name, "decode", max_concurrency=768, num_prompts=768, **DECODE)],
            )
        )
    poisson = {"prompt": 64, "output": 512}
    out.append(
        lane(
            "llama8b_poisson",
            [0],
            "llama-3.1-8b",
            sweep_flags(1024),
            [run("llama8b_poisson", f"r{r}", request_rate=r, num_prompts=30 * r, **poisson) for r in (20, 28, 36)],
        )
    )
    for n in (128, 256, 512):
        name = f"qwen32b_s{n}"
        out.append(
            lane(
                name,
                [0],
                "qwen3-32b",
                sweep_flags(n),
                [run(name, "decode", max_concurrency=768, num_prompts=768, prompt=64, output=512)],
            )
        )
    return out


# cpu_h200x4: the same lanes on a 4-GPU H200 machine, spread over its GPUs (each GPU runs its lanes
# one after another, about 14 minutes in all): one host, every lane's server beside three others.
X4_GPU = {
    "llama8b_s128": 0,
    "llama8b_api2_s128": 0,
    "llama8b_poisson": 0,
    "llama8b_s256": 1,
    "llama8b_api2_s256": 1,
    "qwen32b_s128": 1,
    "llama8b_s512": 2,
    "llama8b_api2_s512": 2,
    "qwen32b_s256": 2,
    "llama8b_s1024": 3,
    "llama8b_api2_s1024": 3,
    "qwen32b_s512": 3,
}


def drift_lanes() -> list[dict]:
    """drift_h200 (one 1-GPU H200, about 25 minutes): whether a machine's drift (h200_repeat2_2026-12-04:
    one run 1.49x apart within fifteen minutes) follows the batch the API server streams or the
    machine alone. cpu_h200.json's decode-heavy run at max_num_seqs 512 and at 128, alternating,
    three times each, each a fresh server, with its seed (the same prompts each time); the lane reads
    the machine under load beside every run (host_probe.py --watch) and every CPU's steal."""
    runs = {lane["name"]: lane for lane in cpu_lanes()}
    out = []
    for tag in "abc":
        for n in (512, 128):
            src = runs[f"llama8b_s{n}"]
            decode = next(r for r in src["runs"] if r["name"] == "decode")
            out.append({**src, "name": f"drift_s{n}{tag}", "runs": [decode]})
    return out


def kv32_lanes() -> list[dict]:
    """kv32_h200 (one 1-GPU H200, about 20 minutes): the max_num_seqs sweep where the KV cache binds,
    on a 30B+ model: Qwen3-32B with 768 closed-loop clients of 512 + 512 tokens, one API server, at
    max_num_seqs 128, 256 and 512, a fresh server each. Its ~270k-token pool holds about 260
    such requests at their end: 128 leaves it half full, 256 fills it, and 512 cannot fit its
    batch and preempts (servesim, before the recording: 480 preemptions, and less output than at
    256). Every run its own seed."""

    out = []
    for n in (128, 256, 512):
        name = f"qwen32b_kv_s{n}"
        run = {"name": "kv", "max_concurrency": 768, "num_prompts": 1024, "prompt": 512, "output": 512}
        run |= {"timeout_s": 420, "seed": zlib.crc32(f"kv32_h200/{name}/kv".encode())}
        out.append(lane(name, [0], "qwen3-32b", sweep_flags(n), [run]))
    return out


def kv32_h100_lanes() -> list[dict]:
    """kv32_h100 (one 1-GPU H100, about 15 minutes): the same 30B+ model where the KV cache binds, on an
    80 GB card. Qwen3-32B's bf16 weights leave it a pool of about 35k tokens at 0.92 of the memory,
    short of the model's 40,960-token length, so the server is capped at 4,096 tokens
    (``--max-model-len``). 128 closed-loop clients send 384 requests of 512 + 512 tokens at
    max_num_seqs 32, 64 and 128, one API server, a fresh server each: the pool holds about 34 such
    requests at their end, so 32 nearly fills it and 64 and 128 preempt. servesim, before the
    recording, on a guessed reading of 4.0 us: 1,029 / 1,202 / 1,205 tok/s, p50 TPOT 29.4 / 33.7 /
    34.2 ms, 0 / 257 / 259 preemptions, a pool of 35,536 tokens, at servesim's default release line
    (0.32, which takes the CUDA graphs' estimate out of the pool; the servers run 0.26, which does not:
    data/e2e/README.md, "h100_kv32_2026-12-06"). Every run its own seed."""

    out = []
    for n in (32, 64, 128):
        name = f"qwen32b_h100_s{n}"
        run = {"name": "kv", "max_concurrency": 128, "num_prompts": 384, "prompt": 512, "output": 512}
        run |= {"timeout_s": 420, "seed": zlib.crc32(f"kv32_h100/{name}/kv".encode())}
        out.append(lane(name, [0], "qwen3-32b", [*sweep_flags(n), "--max-model-len", "4096"], [run]))
    return out


def cpu_lanes_x4() -> list[dict]:
    return [{**x, "gpus": [X4_GPU[x["name"]]], "port": 8100 + X4_GPU[x["name"]]} for x in cpu_lanes()]


# gptoss_h200: gpt-oss-120b (MXFP4 experts, bf16 attention with sinks, alternating 128-token sliding
# windows) on one H200 at vLLM's own defaults but for the pool's share of memory: the three shapes of
# public gpt-oss benchmarks (1k/1k, 8k/1k, 1k/8k) from 4 to 128 requests in flight, one server start
# (about 13 minutes in all). Every run its own seed.
GPTOSS_SHAPES = {
    "1k1k": ({"prompt": 1024, "output": 1024}, ((4, 16), (16, 48), (64, 128), (128, 256))),
    "8k1k": ({"prompt": 8192, "output": 1024}, ((4, 12), (16, 32), (64, 128))),
    "1k8k": ({"prompt": 1024, "output": 8192}, ((16, 16), (64, 64))),
}


# gpt-oss as the recorder serves it: bf16 attention, the longest request 10,240 tokens.
GPTOSS_1K1K = {"prompt": 1024, "output": 1024}


def gptoss_serve(memory: str = "0.92") -> list[str]:
    """The gpt-oss lanes' serve flags, with ``memory`` as the share of the GPU's memory vLLM may use."""
    return ["--dtype", "bfloat16", "--max-model-len", "10240", "--gpu-memory-utilization", memory]


GPTOSS_SERVE = gptoss_serve()


def gptoss_lanes() -> list[dict]:
    runs = [
        closed(f"{shape}_c{c}", c, n, lengths, timeout_s=540, seed=seed(f"gptoss_h200/{shape}_c{c}"))
        for shape, (lengths, points) in GPTOSS_SHAPES.items()
        for c, n in points
    ]
    return [lane("gptoss120b", [0], "gpt-oss-120b", GPTOSS_SERVE, runs)]


# gptoss20b_h200: gpt-oss-20b on the same machine right after (about 6 minutes): 1k/1k at 4, 32 and
# 128 in flight, 8k/1k at 32.
def gptoss20b_lanes() -> list[dict]:
    points = [("1k1k", 1024, 4, 16), ("1k1k", 1024, 32, 96), ("1k1k", 1024, 128, 256), ("8k1k", 8192, 32, 64)]
    runs = [
        closed(f"{shape}_c{c}", c, n, {"prompt": prompt, "output": 1024}, seed=seed(f"gptoss20b_h200/{shape}_c{c}"))
        for shape, prompt, c, n in points
    ]
    return [lane("gptoss20b", [0], "gpt-oss-20b", GPTOSS_SERVE, runs)]


# gptoss_kv_h200 (one GPU, about 5 minutes): where gpt-oss's KV cache binds, how many requests the
# server runs at once against its logged pool (a small memory share: 4k-token prompts at 256 in flight
# need about five times the pool). GPUStack's KV-bound gpt-oss bursts fit servesim with half its pool.
def gptoss_kv_lanes() -> list[dict]:
    serve = ["--dtype", "bfloat16", "--max-model-len", "10240", "--gpu-memory-utilization", "0.2"]
    runs = [
        closed(
            "kv4k_c256", 256, 512, {"prompt": 4000, "output": 256}, timeout_s=240, seed=seed("gptoss_kv_h200/kv4k_c256")
        )
    ]
    return [lane("gptoss20b_kv", [0], "gpt-oss-20b", serve, runs)]


# floor_h200 (one GPU, about 10 minutes): the engine core's CPU work per step where the GPU's step
# is short. A 0.6B model's decode step takes the GPU well under a millisecond, so at 1-16 requests
# in flight its TPOT is the engine's and API server's own time per step; Llama-3.1-8B and
# gpt-oss-20b at 1-16 in flight beside it, whose GPU steps are longer. 128 + 512 tokens (1,024 +
# 512 for gpt-oss), one lane after another on GPU 0.
FLOOR_LANES = (
    (
        "qwen06b_floor",
        "qwen3-0.6b",
        ["--max-model-len", "4096"],
        128,
        ((1, 12), (4, 24), (16, 64), (64, 192), (256, 512)),
    ),
    ("llama8b_floor", "llama-3.1-8b", ["--max-model-len", "4096"], 128, ((1, 8), (4, 16), (16, 48))),
    ("gptoss20b_floor", "gpt-oss-20b", ["--dtype", "bfloat16", "--max-model-len", "4096"], 1024, ((1, 6), (8, 24))),
)


def floor_lanes() -> list[dict]:
    out = []
    for name, model, serve, prompt, points in FLOOR_LANES:
        lengths = {"prompt": prompt, "output": 512}
        runs = [closed(f"c{c}", c, n, lengths, seed=seed(f"floor_h200/{name}/c{c}")) for c, n in points]
        out.append(lane(name, [0], model, [*serve, "--gpu-memory-utilization", "0.92"], runs))
    return out


# gptoss20b_repeat_h200 (one GPU, about 8 minutes): whether gpt-oss's multi-second stalls
# (h200_gptoss_2026-11-29: 1.5-4.8 s with no step logged, in most runs of more than one wave)
# come back when the same shape runs again on a warm server. gpt-oss-20b, 1k/1k at 32 in flight
# three times (two waves each) and at 128 twice, each with its own prompts.
def gptoss_repeat_lanes() -> list[dict]:
    points = [("a", 32, 64), ("b", 32, 64), ("c", 32, 64), ("a", 128, 256), ("b", 128, 256)]
    runs = [
        closed(f"1k1k_c{c}_{tag}", c, n, GPTOSS_1K1K, seed=seed(f"gptoss20b_repeat_h200/1k1k_c{c}_{tag}"))
        for tag, c, n in points
    ]
    return [lane("gptoss20b_repeat", [0], "gpt-oss-20b", GPTOSS_SERVE, runs)]


# gptoss120b_uniform_h200 (one GPU, about 8 minutes, after `device.sh routing`): gpt-oss-120b with
# its routers' biases zeroed (tools/e2e/uniform_routing.py), so that its dummy-weight experts are
# chosen as a trained model's are, spread over all 128: the experts' weights a step reads and the
# grouped GEMMs' shapes of a real checkpoint. Each shape runs first on a warm-up run of its own
# prompts (whatever the server compiles for it, it compiles then; checks.stalls marks it).
def gptoss_uniform_lanes() -> list[dict]:
    points = [
        ("1k1k", 1024, 16, 32, "warm"),
        ("1k1k", 1024, 16, 48, ""),
        ("1k1k", 1024, 64, 64, "warm"),
        ("1k1k", 1024, 64, 128, ""),
        ("8k1k", 8192, 16, 32, ""),
        ("8k1k", 8192, 64, 64, ""),
        ("1k1k", 1024, 128, 256, ""),
    ]
    runs = [
        closed(
            f"{shape}_c{c}" + (f"_{tag}" if tag else ""),
            c,
            n,
            {"prompt": prompt, "output": 1024},
            seed=seed(f"gptoss120b_uniform_h200/{shape}_c{c}_{tag}"),
        )
        for shape, prompt, c, n, tag in points
    ]
    return [lane("gptoss120b_uniform", [0], "gpt-oss-120b", GPTOSS_SERVE, runs)]


# gptoss_spread_h200 (one GPU, after `device.sh routing`): gpt-oss with its routers' biases zeroed
# and weights drawn again (tools/e2e/uniform_routing.py), so that a step's tokens go to ~28 of the 32
# experts at 16 in flight and all of them at 64, as a trained model's do (measured: it did not, nor
# with the experts' biases zeroed too; data/e2e/README.md, h200_gptoss_spread_2026-11-29 and
# h200_gptoss_routed_2026-11-29). gpt-oss-20b, then gpt-oss-120b, about 7
# minutes each (each server took 260 s to start). The 8k/1k run is the
# one whose steps are prefill: the fused MoE's rate over many experts' rows.
SPREAD_POINTS = tuple(
    (f"{shape}_c{c}", prompt, c, n, 1024)
    for shape, prompt, c, n in (("1k1k", 1024, 16, 32), ("1k1k", 1024, 64, 64), ("8k1k", 8192, 16, 16))
)


def spread_lane(
    name: str,
    model: str,
    points=SPREAD_POINTS,
    timeout_s: float = 200,
    gpus: tuple[int, ...] = (0,),
    serve: list[str] = GPTOSS_SERVE,
) -> dict:
    """One gpt-oss lane on ``gpus`` (tensor-parallel over them) at ``points`` (run name, prompt, in
    flight, prompts, output), each run seeded by its lane and name; ``serve``: its serve flags."""
    runs = [
        closed(r, c, n, {"prompt": prompt, "output": output}, timeout_s=timeout_s, seed=seed(f"{name}_h200/{r}"))
        for r, prompt, c, n, output in points
    ]
    tp = ["--tensor-parallel-size", str(len(gpus))] if len(gpus) > 1 else []
    return lane(name, list(gpus), model, serve + tp, runs)


def gptoss_spread_lanes() -> list[dict]:
    return [spread_lane("gptoss20b_spread", "gpt-oss-20b"), spread_lane("gptoss120b_spread", "gpt-oss-120b")]


# gptoss_noise_h200 (one GPU, after `device.sh routing`, the fourth version of uniform_routing.py):
# gpt-oss-120b whose routers' logits are drawn at random, token by token, so that a step's tokens
# go to as many experts as uniform routing sends them to; the three earlier ways of spreading a
# dummy-weight server's routing did not (data/e2e/README.md). Two decode-bound points, the 8k/1k
# prefill point, about 7 minutes with the server's start.
def gptoss_noise_lanes() -> list[dict]:
    return [spread_lane("gptoss120b_noise", "gpt-oss-120b")]


# gptoss_noise2_h200 (one GPU, after `device.sh routing`, the fourth version of uniform_routing.py):
# gpt-oss-120b, then gpt-oss-20b, routed at random as in gptoss_noise_h200, at the shapes
# the first recording left out: 4 and 128 in flight at 1k/1k, 1k/8k at 4, 8k/1k at 64, and lone
# prompts of 2k, 4k and 8k tokens (each a single prefill step: the fused MoE's rate against the
# step's token count). A warm-up run of its own prompts comes first (Triton compiles the routing
# kernels on a server's first steps: 6 s stalls in the first recording). About 8 minutes a lane with
# the server's start.
NOISE2_POINTS = (
    ("1k1k_c128_warm", 1024, 128, 128, 128),
    ("2k_c1", 2048, 1, 4, 16),
    ("4k_c1", 4096, 1, 4, 16),
    ("8k_c1", 8192, 1, 4, 16),
    ("1k1k_c4", 1024, 4, 8, 1024),
    ("1k1k_c128", 1024, 128, 128, 1024),
    ("8k1k_c64", 8192, 64, 64, 1024),
    ("1k8k_c4", 1024, 4, 4, 8192),
)


def gptoss_noise2_lanes() -> list[dict]:
    return [
        spread_lane(name, model, NOISE2_POINTS, timeout_s=240)
        for name, model in (("gptoss120b_noise2", "gpt-oss-120b"), ("gptoss20b_noise2", "gpt-oss-20b"))
    ]


# gptoss_tp2_h200x2 (two GPUs of one host, after `device.sh routing`, the fourth version of
# uniform_routing.py): gpt-oss-120b at tensor parallel 2, routed at random as in gptoss_noise2_h200,
# at the shapes the issue names (1k/1k at 4, 32 and 128 in flight, 1k/8k at 4 and 64, 8k/1k at 64)
# and a lone 8k prompt (the prefill rate with the experts split over two GPUs). A warm-up run first.
# About 11 minutes with the server's start. Recorded (h200x2_gptoss_tp2_2026-11-29), six of the eight
# runs stalled 1.2-5.7 s at mixed steps of new token counts, which the warm-up did not cover. A next
# TP lane wants a warm-up at every concurrency it runs.
TP2_POINTS = (
    ("1k1k_c128_warm", 1024, 128, 128, 128),
    ("8k_c1", 8192, 1, 4, 16),
    ("1k1k_c4", 1024, 4, 8, 1024),
    ("1k1k_c32", 1024, 32, 64, 1024),
    ("1k1k_c128", 1024, 128, 256, 1024),
    ("8k1k_c64", 8192, 64, 64, 1024),
    ("1k8k_c4", 1024, 4, 4, 8192),
    ("1k8k_c64", 1024, 64, 64, 8192),
)


def gptoss_tp2_lanes() -> list[dict]:
    return [spread_lane("gptoss120b_tp2", "gpt-oss-120b", TP2_POINTS, timeout_s=300, gpus=(0, 1))]


# gptoss_blind_h200 (one GPU, after `device.sh routing`, the fourth version of uniform_routing.py):
# gpt-oss-120b routed at random, recorded after the MXFP4 prefill on Hopper took its measured rate
# (cost.MXFP4_WEIGHT_ONLY_MOE_COMPUTE) as that rate's blind check: 8k/1k at 4 and 16 in flight, 1k/8k
# at 16 (long contexts' decode), 1k/1k at 64; warm-up runs of 1k and 8k prompts first. Each run's
# seed as the plan was first written (drawn at random, not from its name). About 11 minutes with the
# server's start (six minutes on its machine).
BLIND_POINTS = (
    ("1k1k_c64_warm", 1024, 64, 64, 128, 4154097660),
    ("8k_c16_warm", 8192, 16, 16, 16, 639480276),
    ("8k1k_c16", 8192, 16, 32, 1024, 829617218),
    ("1k8k_c16", 1024, 16, 16, 8192, 3989175941),
    ("1k1k_c64", 1024, 64, 128, 1024, 986040103),
    ("8k1k_c4", 8192, 4, 8, 1024, 3807983881),
)


def gptoss_blind_lanes() -> list[dict]:
    runs = [
        closed(r, c, n, {"prompt": prompt, "output": output}, timeout_s=300, seed=s)
        for r, prompt, c, n, output, s in BLIND_POINTS
    ]
    return [lane("gptoss120b_blind", [0], "gpt-oss-120b", GPTOSS_SERVE, runs)]


# gptoss_grid_h200 (one GPU, after `device.sh routing`, the fourth version of uniform_routing.py):
# gpt-oss-120b routed at random over the grid the models-of-2026 check names for one H200 (1k/1k,
# 8k/1k and 1k/8k at 4, 16, 64 and 128 in flight), less 1k/8k at 16 and 128 (the longest runs; the
# blind recording has 1k/8k at 16), recorded blind on a new host. A warm-up at every concurrency the
# grid runs, and one of 8k prompts, come first: the earlier lanes stalled at mixed steps of token
# counts their warm-ups had not run. About 20 minutes with the server's start.
GRID_POINTS = (
    ("w1k_c4", 1024, 4, 8, 64),
    ("w1k_c16", 1024, 16, 16, 64),
    ("w1k_c64", 1024, 64, 64, 64),
    ("w1k_c128", 1024, 128, 128, 64),
    ("w8k_c16", 8192, 16, 16, 16),
    ("1k1k_c4", 1024, 4, 8, 1024),
    ("1k1k_c16", 1024, 16, 32, 1024),
    ("1k1k_c64", 1024, 64, 128, 1024),
    ("1k1k_c128", 1024, 128, 256, 1024),
    ("8k1k_c4", 8192, 4, 8, 1024),
    ("8k1k_c16", 8192, 16, 32, 1024),
    ("8k1k_c64", 8192, 64, 64, 1024),
    ("8k1k_c128", 8192, 128, 128, 1024),
    ("1k8k_c4", 1024, 4, 4, 8192),
    ("1k8k_c64", 1024, 64, 64, 8192),
)


def gptoss_grid_lanes() -> list[dict]:
    return [spread_lane("gptoss120b_grid", "gpt-oss-120b", GRID_POINTS, timeout_s=330)]


# gptoss20b_fresh_h200 (one GPU, after `device.sh routing`): a server just started, its first runs
# the grid's two warm-up shapes on gpt-oss-20b, to check held out what its first steps without graphs
# wait for (the routing kernels and the expert matmuls' variants: `cost.first_compile`). Short: the
# last minutes of a device session.
FRESH_POINTS = (GRID_POINTS[0], GRID_POINTS[2])


# gptoss_long8k_h200 (one GPU, after `device.sh routing`): the grid's 1k/8k shape at the two
# concurrencies it left out (16 and 128), on a server just started, with no warm-up, then at 256,
# where the KV cache binds (servesim's pool: 1.89 million tokens; 256 such requests need 2.36 million).
LONG8K_POINTS = (
    ("1k8k_c16", 1024, 16, 16, 8192),
    ("1k8k_c128", 1024, 128, 128, 8192),
    ("1k8k_c256", 1024, 256, 256, 8192),
)


def gptoss_long8k_lanes() -> list[dict]:
    return [spread_lane("gptoss120b_long8k", "gpt-oss-120b", LONG8K_POINTS, timeout_s=500)]


def gptoss20b_fresh_lanes() -> list[dict]:
    return [spread_lane("gptoss20b_fresh", "gpt-oss-20b", FRESH_POINTS, timeout_s=120)]


# gptoss_pool_h200 (one GPU, after `device.sh routing`, the fourth version of uniform_routing.py):
# gpt-oss-120b routed at random in the memory one H100 gives it (`--gpu-memory-utilization 0.52` of an
# H200's 139.8 GiB is the 72.7 GiB that 0.92 of an H100's 79.1 GiB is: the same weights, and a pool
# servesim sizes at 139,168 KV tokens against the H100's 141,328, the MXFP4 padding counted), so
# that the grid's points where an H100's KV cache binds run here: 1k/1k at 64, 128 and 256 in
# flight, 8k/1k at 16 and 64, 1k/8k at 64 (preemptions, with the sliding-window layers' blocks in
# one pool with the full-attention layers'). A warm-up at every concurrency first. Recorded blind
# (servesim's predictions: the commit that added it): data/e2e/h200_gptoss_pool_2026-12-03,
# 19 minutes of lane with the server's start (the server logged a pool of 106,780 tokens). A first
# attempt lost its results before they were collected (tools/e2e/README.md: end every waiting call
# with `collect`).
POOL_POINTS = (
    ("w1k_c64", 1024, 64, 64, 64),
    ("w1k_c128", 1024, 128, 128, 64),
    ("w1k_c256", 1024, 256, 256, 64),
    ("w8k_c16", 8192, 16, 16, 16),
    ("1k1k_c64", 1024, 64, 64, 1024),
    ("1k1k_c128", 1024, 128, 128, 1024),
    ("1k1k_c256", 1024, 256, 256, 1024),
    ("8k1k_c16", 8192, 16, 16, 1024),
    ("8k1k_c64", 8192, 64, 64, 1024),
    ("1k8k_c64", 1024, 64, 64, 8192),
)


def gptoss_pool_lanes() -> list[dict]:
    return [spread_lane("gptoss120b_pool", "gpt-oss-120b", POOL_POINTS, timeout_s=420, serve=gptoss_serve("0.52"))]


# gptoss_stall_h200 (one GPU, after `device.sh routing trace`): the pool plan's two runs that paused
# most in the least time (1k/1k at 256 in flight, 25.5 s), after its warm-up at 256, with the
# stack sampler's stall trail on every process of the lane (tools/e2e/stack_sampler.py,
# SERVESIM_STALL_S): what the engine core does while it pauses, a pause that came nearly every time a
# running request was preempted (data/e2e/README.md, h200_gptoss_pool_2026-12-03).
STALL_POINTS = tuple(p for p in POOL_POINTS if p[0] in ("w1k_c256", "1k1k_c256"))
STALL_ENV = {
    "SERVESIM_SAMPLE_AFTER_S": "190",
    "SERVESIM_SAMPLE_DIR": "/root/e2e/results/gptoss120b_stall/samples",
    "SERVESIM_SAMPLE_MS": "20",
    "SERVESIM_STALL_S": "0.4",
    # the engine core serves about 180 s after it starts (h200_gptoss_pool_2026-12-03's log)
    "SERVESIM_STALL_DUMP_AFTER_S": "10",
}


def gptoss_stall_lanes() -> list[dict]:
    x = spread_lane("gptoss120b_stall", "gpt-oss-120b", STALL_POINTS, timeout_s=420, serve=gptoss_serve("0.52"))
    return [{**x, "env": STALL_ENV}]


def sglang_lanes() -> list[dict]:
    """SGLang 0.5.16 on one H200 (`"framework": "sglang"`, lane.py), Llama-3.1-8B with dummy weights:
    with SGLang's own defaults (`sglang_llama8b`: memory share, chunk, running cap, CUDA graphs, all
    as it picks them) at 1, 64 and 256 closed-loop clients, the cpu lanes' KV-bound and decode-heavy
    runs at 768 clients, and Poisson 20 requests/s; then the two 768-client runs again with
    `--max-running-requests 128` (`sglang_llama8b_r128`, the knob a user sweeps)."""

    def run(lane_name: str, kind: str, **kw) -> dict:
        return {"name": kind, **kw, "timeout_s": 420, "seed": zlib.crc32(f"sglang_h200/{lane_name}/{kind}".encode())}

    name = "sglang_llama8b"
    defaults = lane(
        name,
        [0],
        "llama-3.1-8b",
        [],
        [
            run(name, "c1", max_concurrency=1, num_prompts=6, **FIXED),
            run(name, "c64", max_concurrency=64, num_prompts=192, **FIXED),
            run(name, "c256", max_concurrency=256, num_prompts=768, **FIXED),
            run(name, "kv", max_concurrency=768, num_prompts=2 * 768, **KV),
            run(name, "decode", max_concurrency=768, num_prompts=768, **DECODE),
            run(name, "r20", request_rate=20, num_prompts=600, prompt=64, output=512),
        ],
        framework="sglang",
    )
    name = "sglang_llama8b_r128"
    capped = lane(
        name,
        [0],
        "llama-3.1-8b",
        ["--max-running-requests", "128"],
        [
            run(name, "kv", max_concurrency=768, num_prompts=2 * 768, **KV),
            run(name, "decode", max_concurrency=768, num_prompts=768, **DECODE),
        ],
        framework="sglang",
    )
    # the capped lane's decode run alone, as planned (its seed), for the recording that had no time left for it
    decode_only = lane(
        "sglang_llama8b_r128_decode",
        [0],
        "llama-3.1-8b",
        ["--max-running-requests", "128"],
        [run(name, "decode", max_concurrency=768, num_prompts=768, **DECODE)],
        framework="sglang",
    )
    return [defaults, capped, decode_only]


def sglang_lpm_lanes() -> list[dict]:
    """SGLang 0.5.16 on one H200, Llama-3.1-8B with dummy weights, under each of its schedule policies
    (`fcfs`, its default; the cache-aware `lpm` and `dfs-weight`), over the same requests: prompts of
    one of 64 shared 2,048-token prefixes (drawn uniformly) and 256 tokens of their own, 64 output
    tokens, a pool held to about 100k tokens (`--mem-fraction-static 0.2`: some 40 prefixes at once),
    so that which waiting requests go first decides how often a prefix is found cached. 128 clients
    (at most 128 waiting: lpm sorts the queue) and 384 (lpm leaves a queue over 128 in its order)."""

    shape = {"prompt": 256, "output": 64, "prefix": {"groups": 64, "words": 2048}}
    runs = [closed(f"c{c}", c, n, shape, seed=seed(f"sglang_lpm_h200/c{c}")) for c, n in ((128, 1024), (384, 1536))]
    return [
        lane(
            f"sglang_{policy.replace('-', '')}",
            [0],
            "llama-3.1-8b",
            ["--mem-fraction-static", "0.2", "--schedule-policy", policy],
            runs,
            framework="sglang",
        )
        for policy in ("fcfs", "lpm", "dfs-weight")
    ]


def engine_pair_runs(plan: str) -> list[dict]:
    """The runs both lanes of an engine-pair plan serve over the same requests (one seed a run, from the
    plan's name): 1, 64 and 256 closed-loop clients, then the KV-bound and decode-heavy runs at 768."""

    def run(kind: str, **kw) -> dict:
        return {"name": kind, **kw, "timeout_s": 420, "seed": zlib.crc32(f"{plan}/{kind}".encode())}

    return [
        run("c1", max_concurrency=1, num_prompts=6, **FIXED),
        run("c64", max_concurrency=64, num_prompts=192, **FIXED),
        run("c256", max_concurrency=256, num_prompts=768, **FIXED),
        run("kv", max_concurrency=768, num_prompts=2 * 768, **KV),
        run("decode", max_concurrency=768, num_prompts=768, **DECODE),
    ]


def sglang_moe_lanes() -> list[dict]:
    """Qwen3-30B-A3B (MoE, 128 experts, top 8) on one H200 with dummy weights, served by SGLang 0.5.16
    and then by vLLM 0.26, each with its own defaults, over the same requests (one seed a run, shared
    by the two lanes): 1, 64 and 256 closed-loop clients, then the KV-bound and decode-heavy runs at
    768 clients (their KV demand, 983k and 836k tokens at the end of a round, passes either pool)."""

    runs = engine_pair_runs("sglang_moe_h200")
    return [
        lane("sglang_qwen30b", [0], "qwen3-30b-a3b", [], runs, framework="sglang"),
        lane("vllm_qwen30b", [0], "qwen3-30b-a3b", [], runs),
    ]


def sglang_mla_lanes() -> list[dict]:
    """DeepSeek-V2-Lite (multi-head latent attention and DeepSeekMoE: 64 routed experts, top 6, two
    shared; the first layer dense) on one H200 with dummy weights, served by SGLang 0.5.16 and then by
    vLLM 0.26 over the same requests, as ``sglang_moe_lanes``, each engine's memory share set to 0.4
    (SGLang's ``--mem-fraction-static``, vLLM's ``--gpu-memory-utilization``): MLA's KV is so small
    (31 KB a token) that the defaults' pools (about 3.5M tokens) hold any run here, and at 0.4 the
    KV-bound and decode-heavy runs' demand (983k and 836k tokens at the end of a round) passes either
    pool (about 0.7-0.8M tokens)."""

    runs = engine_pair_runs("sglang_mla_h200")
    return [
        lane("sglang_dsv2lite", [0], "deepseek-v2-lite", ["--mem-fraction-static", "0.4"], runs, framework="sglang"),
        lane("vllm_dsv2lite", [0], "deepseek-v2-lite", ["--gpu-memory-utilization", "0.4"], runs),
    ]


def sglang_prefill_lanes() -> list[dict]:
    """SGLang 0.5.16 on one H200, each model twice over the same requests: as SGLang runs it (prefills
    replayed from its "breakable" CUDA graphs, the default from 0.5.15) and with
    `--disable-prefill-cuda-graph` (prefills launched kernel by kernel, as every release before 0.5.10
    ran them): one request at a time with short prompts (where the launches, not the GPU, set a
    prefill's time) and with long ones (where the GPU does), and 16 at a time (where every prefill
    holds up the running decodes). Llama-3.1-8B (32 layers) and Qwen3-32B (64); and Qwen3-30B-A3B (an
    MoE model, 48 layers) without graphs, one request at a time."""

    def run(lane_name: str, kind: str, **kw) -> dict:
        return {
            "name": kind,
            **kw,
            "timeout_s": 300,
            "seed": zlib.crc32(f"sglang_prefill_h200/{lane_name}/{kind}".encode()),
        }

    def alone(lane_name: str, *sizes: tuple[str, int, int]) -> list[dict]:
        """Runs of one request at a time, 32 outputs each: (kind, prompt tokens, prompts)."""
        return [run(lane_name, k, max_concurrency=1, num_prompts=n, prompt=p, output=32) for k, p, n in sizes]

    short, mid, long = ("c1_short", 128, 8), ("c1_mid", 1024, 8), ("c1_long", 4096, 6)
    both = (("graphs", []), ("eager", ["--disable-prefill-cuda-graph"]))
    lanes = []
    for model, tag in (("llama-3.1-8b", "llama8b"), ("qwen3-32b", "qwen32b")):
        for kind, args in both:
            name = f"sglang_{tag}_{kind}"
            runs = [
                *alone(name, short, long),
                run(name, "c16", max_concurrency=16, num_prompts=96, prompt=512, output=256),
            ]
            lanes.append(lane(name, [0], model, args, runs, framework="sglang"))
    # an MoE model's prefill without graphs, one request at a time (its graphed runs: h200_moe_2026-11-30)
    name = "sglang_qwen30b_eager"
    lanes.append(lane(name, [0], "qwen3-30b-a3b", both[1][1], alone(name, short, long), framework="sglang"))
    # the MoE model both ways on one machine, and at 1,024-token prompts (the public TP8 runs' length)
    for kind, args in both:
        name = f"sglang_qwen30b_pair_{kind}"
        lanes.append(lane(name, [0], "qwen3-30b-a3b", args, alone(name, short, mid, long), framework="sglang"))
    return lanes


OVERLAP_SERVE = ["--max-num-seqs", "1024", "--max-num-batched-tokens", "8192", "--gpu-memory-utilization", "0.92"]


# overlap_h200 (one GPU, about 6 minutes): the decode steps between one request and the engine
# core's CPU-bound batches, where a step's GPU and CPU times are alike. Llama-3.1-8B, 64 + 512
# tokens, closed loops of 8 to 128 clients and Poisson arrivals at 10 and 20 requests/s (light
# load, behind one API server), each run its own seed.
SHORT = {"prompt": 64, "output": 512}  # the decode-heavy requests of the overlap and sync plans


def short_loops(seeds: str, clients: tuple[int, ...]) -> list[dict]:
    """Closed loops of ``SHORT`` requests at each count of ``clients`` (three prompts a client, at
    least 96), each seeded by ``seeds``/c<clients>."""
    return [closed(f"c{c}", c, 3 * c if c >= 32 else 96, SHORT, seed=seed(f"{seeds}/c{c}")) for c in clients]


def overlap_lanes() -> list[dict]:
    runs = short_loops("overlap_h200", (8, 32, 64, 96, 128))
    runs += [rate(f"r{r}", r, 30, SHORT, seed=seed(f"overlap_h200/r{r}")) for r in (10, 20)]
    return [lane("llama8b_overlap", [0], "llama-3.1-8b", OVERLAP_SERVE, runs)]


# overlap_log_h200 (one GPU, about 8 minutes): whether the iteration log the recorder turns on slows
# the steps it times. The same server twice on one machine, with its iteration log and without,
# Llama-3.1-8B at 64 and 128 closed-loop clients and 20 requests/s (64 + 512 tokens).
def overlap_log_lanes() -> list[dict]:
    out = []
    for name, logged in (("llama8b_logged", True), ("llama8b_unlogged", False)):
        runs = short_loops(f"overlap_log_h200/{name}", (64, 128))
        runs.append(rate("r20", 20, 30, SHORT, seed=seed(f"overlap_log_h200/{name}/r20")))
        out.append(lane(name, [0], "llama-3.1-8b", OVERLAP_SERVE, runs, iteration_log=logged))
    return out


# fp8_h200 (one GPU, about 14 minutes): FP8 weights as vLLM serves them on Hopper (`--quantization
# fp8`: the bf16 checkpoint's linear layers quantized to FP8 at load, per tensor, the activations per
# token at run time, CUTLASS FP8 GEMMs), each model beside its bf16 server on the same machine:
# Llama-3.1-8B and Qwen3-32B, a warm-up, then decodes at 1, 16 and 64 in flight (1k prompts) and
# 8k-token prefills four at a time. No FP8 server had been recorded before.
FP8_POINTS = (
    ("warm", 1024, 16, 16, 32),
    ("c1", 1024, 1, 4, 256),
    ("c16", 1024, 16, 32, 256),
    ("c64", 1024, 64, 128, 256),
    ("p8k_c4", 8192, 4, 16, 16),
)


def point_runs(plan: str, name: str, points: tuple, only: tuple[str, ...] = ()) -> list[dict]:
    """Closed loops of a plan's lane, one a point (name, prompt tokens, clients, prompts, output
    tokens), each with its own seed; ``only``: these points alone."""
    return [
        closed(r, c, n, {"prompt": prompt, "output": output}, seed=seed(f"{plan}/{name}/{r}"))
        for r, prompt, c, n, output in points
        if not only or r in only
    ]


def fp8_lanes() -> list[dict]:
    out = []
    for model, short in (("llama-3.1-8b", "llama8b"), ("qwen3-32b", "qwen32b")):
        for fmt, extra in (("bf16", []), ("fp8", ["--quantization", "fp8"])):
            name = f"{short}_{fmt}"
            runs = point_runs("fp8_h200", name, FP8_POINTS)
            serve = ["--max-model-len", "10240", "--gpu-memory-utilization", "0.92", *extra]
            out.append(lane(name, [0], model, serve, runs))
    return out


# fp8_70b_h200 (one GPU, about 10 minutes): the 70B-class model people serve on one H200, in FP8
# (`--quantization fp8`, as fp8_h200's: 70 GB of weights, which bf16 would not leave room beside):
# Llama-3.3-70B, a warm-up, decodes at 1, 16, 64 and 128 in flight (1k prompts; at 128 the KV pool,
# about 190k tokens, is nearly full), at 256 (past it: preemptions) and 8k-token prefills four at a
# time. Recorded blind: nothing in servesim is fitted on a 70B model.
FP8_70B_POINTS = (*FP8_POINTS[:4], ("c128", 1024, 128, 256, 256), ("c256", 1024, 256, 512, 256), FP8_POINTS[4])


def fp8_70b_lanes() -> list[dict]:
    def runs(name: str, only: tuple[str, ...] = ()) -> list[dict]:
        return point_runs("fp8_70b_h200", name, FP8_70B_POINTS, only)

    serve = ["--max-model-len", "10240", "--gpu-memory-utilization", "0.92", "--quantization", "fp8"]
    # the same server with an FP8 KV cache (twice the tokens in the pool): at 256 in flight, room
    kv = runs("llama70b_fp8kv", ("warm", "c16", "c256", "p8k_c4"))
    return [
        lane("llama70b_fp8", [0], "llama-3.3-70b", serve, runs("llama70b_fp8")),
        lane("llama70b_fp8kv", [0], "llama-3.3-70b", [*serve, "--kv-cache-dtype", "fp8"], kv),
    ]


# sync_h200 (one GPU, about 15 minutes): vLLM 0.26 with async scheduling off (`--no-async-scheduling`,
# as releases before 0.14 serve by default), where a step's CPU work is added to the GPU's rather than
# overlapped with it. gpt-oss-120b routed at random (after `device.sh routing`) at the grid's 1k/1k
# points and 8k/1k at 16 in flight, each shape's warm-up first; then Llama-3.1-8B's decode-heavy
# closed loops (64 + 512 tokens, overlap_h200's shapes), whose steps are the CPU's more than the GPU's.
SYNC_POINTS = (*GRID_POINTS[:9], GRID_POINTS[10])


def sync_lanes() -> list[dict]:
    oss = spread_lane("gptoss120b_sync", "gpt-oss-120b", SYNC_POINTS, timeout_s=330)
    oss["serve_args"] = [*oss["serve_args"], "--no-async-scheduling"]
    runs = short_loops("sync_h200", (8, 32, 64, 128))
    return [oss, lane("llama8b_sync", [0], "llama-3.1-8b", [*OVERLAP_SERVE, "--no-async-scheduling"], runs)]


# sync2_h200 (one GPU, about 8 minutes): the blind check of the engine core's costs without async
# scheduling, fitted on sync_h200's gpt-oss steps (fit_host.py --sync), on another machine: Llama-3.1-8B
# at 16, 96 and 256 clients (64 + 512 tokens) and 1,024-token prompts at 32 (their chunks' steps),
# and Qwen3-0.6B, whose GPU step is short beside the CPU's, at 8, 64 and 256 clients, then with async
# scheduling on.
def sync2_lanes() -> list[dict]:
    serve = [*OVERLAP_SERVE, "--no-async-scheduling"]
    llama = short_loops("sync2_h200/llama8b", (16, 96, 256))
    llama.append(closed("p1k_c32", 32, 96, {"prompt": 1024, "output": 128}, seed=seed("sync2_h200/llama8b/p1k_c32")))
    return [
        lane("llama8b_sync2", [0], "llama-3.1-8b", serve, llama),
        lane("qwen06b_sync2", [0], "qwen3-0.6b", serve, short_loops("sync2_h200/qwen06b", (8, 64, 256))),
        # the same runs with async scheduling on (vLLM 0.26's default), on the same machine
        lane("qwen06b_async2", [0], "qwen3-0.6b", OVERLAP_SERVE, short_loops("sync2_h200/qwen06b_async", (8, 64, 256))),
    ]


# overlap3_h200 (one GPU, about 12 minutes): how the engine core's CPU work and the GPU's step meet
# under async scheduling, and the engine core's work a request from 8 to 512 running, with four API
# servers so that none paces the engine. Qwen3-0.6B, whose GPU step is short beside the CPU's, and
# Llama-3.1-8B, whose GPU step is about as long as the CPU's from 64 running on: each with async
# scheduling (vLLM 0.26's default) and without it (a step is then the GPU's time plus the engine
# core's), 64 + 512 tokens a request. With more than one API server vLLM logs no iteration details:
# these runs have no steps.csv (data/e2e/h200_overlap3_2026-12-04).
def overlap3_lanes() -> list[dict]:
    four = [*OVERLAP_SERVE, "--api-server-count", "4"]
    sync = [*four, "--no-async-scheduling"]

    def loops(tag: str, clients: tuple[int, ...]) -> list[dict]:
        runs = short_loops(f"overlap3_h200/{tag}", clients)
        return [{**r, "clients": 2} if r["max_concurrency"] >= 512 else r for r in runs]

    small, large = (8, 32, 64, 128, 256, 512), (32, 64, 128, 256)
    return [
        lane("qwen06b_async3", [0], "qwen3-0.6b", four, loops("qwen06b_async", small)),
        lane("qwen06b_sync3", [0], "qwen3-0.6b", sync, loops("qwen06b_sync", small)),
        lane("llama8b_async3", [0], "llama-3.1-8b", four, loops("llama8b_async", large)),
        lane("llama8b_sync3", [0], "llama-3.1-8b", sync, loops("llama8b_sync", large)),
    ]


# overlap4_h200 (one GPU, about 14 minutes): the engine core's work a request past a few hundred
# running, where overlap3_h200 ended and the four-API-server runs of h200x2_pace_2026-11-27 (768-840
# running) found it about twice what it is at 8-256. Four API servers again, so that none paces the
# engine; Qwen3-0.6B, whose step is the engine core's work alone with async scheduling, at 384-1,024
# clients, without async scheduling at 512 and 1,024, and Llama-3.1-8B at 512-1,024; 64 + 512 tokens.
# Every process runs under tools/e2e/stack_sampler.py at 50 ms (its garbage collector's share).
def overlap4_lanes() -> list[dict]:
    four = [*OVERLAP_SERVE, "--api-server-count", "4"]
    sync = [*four, "--no-async-scheduling"]

    def loops(name: str, clients: tuple[int, ...]) -> list[dict]:
        runs = short_loops(f"overlap4_h200/{name}", clients)
        return [{**r, "clients": 4 if r["max_concurrency"] >= 768 else 2} for r in runs]

    def sampled(x: dict) -> dict:
        where = f"/root/e2e/results/{x['name']}/samples"
        return {**x, "env": {"SERVESIM_SAMPLE_DIR": where, "SERVESIM_SAMPLE_MS": "50"}}

    return [
        sampled(lane("qwen06b_async4", [0], "qwen3-0.6b", four, loops("qwen06b_async", (384, 640, 768, 1024)))),
        sampled(lane("qwen06b_sync4", [0], "qwen3-0.6b", sync, loops("qwen06b_sync", (512, 1024)))),
        sampled(lane("llama8b_async4", [0], "llama-3.1-8b", four, loops("llama8b_async", (512, 768, 1024)))),
    ]


# light_h200 (one GPU, about 10 minutes): the first token at light load, where the GPU's prefill is
# short and the fixed overheads around it (the API server, the hops to the engine and back) are much
# of it: Llama-3.1-8B at one request in flight with 64-, 1,024- and 4,096-token prompts, at 4 and 8
# in flight and at Poisson 2 and 8 requests/s; Qwen3-32B at one and four in flight and 2 requests/s.
# Each lane warms up first. Recorded blind, after the API server's fixed latency was refitted.
LIGHT_POINTS = (
    ("warm", 1024, 16, 32, 64),
    ("c1_p64", 64, 1, 8, 64),
    ("c1_p1k", 1024, 1, 8, 64),
    ("c1_p4k", 4096, 1, 8, 64),
    ("c4_p1k", 1024, 4, 32, 128),
    ("c8_p64", 64, 8, 64, 256),
)


def light_lanes() -> list[dict]:
    out = []
    for model, short, only, rates in (
        ("llama-3.1-8b", "llama8b", (), (2, 8)),
        ("qwen3-32b", "qwen32b", ("warm", "c1_p64", "c1_p1k", "c4_p1k"), (2,)),
    ):
        name = f"{short}_light"
        runs = point_runs("light_h200", name, LIGHT_POINTS, only)
        lengths = {"prompt": 1024, "output": 128}
        runs += [rate(f"r{r}_p1k", r, 30, lengths, seed=seed(f"light_h200/{name}/r{r}")) for r in rates]
        serve = ["--max-model-len", "10240", "--gpu-memory-utilization", "0.92"]
        out.append(lane(name, [0], model, serve, runs))
    return out


def main() -> None:
    for h200 in (False, True):
        for name, plan in plans(h200).items():
            path = HERE / "plans" / f"{name}{'_h200' if h200 else ''}.json"
            path.write_text(json.dumps(plan, indent=1) + "\n")
            print(path)
    cpu = {"lanes": cpu_lanes()}
    seeds = [r["seed"] for x in cpu["lanes"] for r in x["runs"]]
    others = {
        r.get("seed")
        for path in (HERE / "plans").glob("*.json")
        # blind_h200.json replays one of cpu_h200.json's runs on another host, with its seed, and
        # repeat_h200.json and drift_h200.json two of them, three times each
        if path.name
        not in ("cpu_h200.json", "cpu_h200x4.json", "blind_h200.json", "repeat_h200.json", "drift_h200.json")
        for x in json.loads(path.read_text())["lanes"]
        for r in x["runs"]
    }
    assert len(set(seeds)) == len(seeds) and not set(seeds) & others, "every run its own seed"
    path = HERE / "plans" / "cpu_h200.json"
    path.write_text(json.dumps(cpu, indent=1) + "\n")
    print(path)
    path = HERE / "plans" / "cpu_h200x4.json"
    path.write_text(json.dumps({"lanes": cpu_lanes_x4()}, indent=1) + "\n")
    print(path)
    path = HERE / "plans" / "drift_h200.json"
    path.write_text(json.dumps({"lanes": drift_lanes()}, indent=1) + "\n")
    print(path)
    for name, lanes in (
        ("gptoss_h200", gptoss_lanes()),
        ("gptoss20b_h200", gptoss20b_lanes()),
        ("gptoss_kv_h200", gptoss_kv_lanes()),
        ("floor_h200", floor_lanes()),
        ("gptoss20b_repeat_h200", gptoss_repeat_lanes()),
        ("gptoss120b_uniform_h200", gptoss_uniform_lanes()),
        ("gptoss_spread_h200", gptoss_spread_lanes()),
        ("gptoss_noise_h200", gptoss_noise_lanes()),
        ("gptoss_noise2_h200", gptoss_noise2_lanes()),
        ("gptoss_tp2_h200x2", gptoss_tp2_lanes()),
        ("gptoss_blind_h200", gptoss_blind_lanes()),
        ("gptoss_grid_h200", gptoss_grid_lanes()),
        ("gptoss20b_fresh_h200", gptoss20b_fresh_lanes()),
        ("gptoss_long8k_h200", gptoss_long8k_lanes()),
        ("gptoss_pool_h200", gptoss_pool_lanes()),
        ("gptoss_stall_h200", gptoss_stall_lanes()),
        ("sglang_h200", sglang_lanes()),
        ("sglang_moe_h200", sglang_moe_lanes()),
        ("sglang_mla_h200", sglang_mla_lanes()),
        ("sglang_prefill_h200", sglang_prefill_lanes()),
        ("overlap_h200", overlap_lanes()),
        ("overlap_log_h200", overlap_log_lanes()),
        ("fp8_h200", fp8_lanes()),
        ("fp8_70b_h200", fp8_70b_lanes()),
        ("sglang_lpm_h200", sglang_lpm_lanes()),
        ("sync_h200", sync_lanes()),
        ("sync2_h200", sync2_lanes()),
        ("overlap3_h200", overlap3_lanes()),
        ("overlap4_h200", overlap4_lanes()),
        ("light_h200", light_lanes()),
        ("kv32_h200", kv32_lanes()),
        ("kv32_h100", kv32_h100_lanes()),
    ):
        path = HERE / "plans" / f"{name}.json"
        path.write_text(json.dumps({"lanes": lanes}, indent=1) + "\n")
        print(path)


if __name__ == "__main__":
    main()
