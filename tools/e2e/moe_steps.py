"""Time vLLM's decode steps of an MoE model at batches below and above its largest CUDA-graph capture
size, on the device: what a step without graphs costs against the same step replayed from a graph.

    python3 tools/e2e/moe_steps.py --model qwen3-30b-a3b --capture 512 --out moe_steps_512.json

One offline engine (``vllm.LLM``: dummy weights, prefix caching off, graphs captured up to
``--capture`` tokens; no API server). For each batch B it generates B requests of 32 distinct prompt
tokens twice, with ``--short`` and ``--long`` output tokens (ignore_eos), and takes a decode step of
B requests as (T_long - T_short) / (long - short): the prefill and the fixed costs cancel. Run it
twice, at vLLM 0.26's default capture size (512) and above the largest batch, and compare the steps
at the batches between (``device.sh moesteps``; data/profiles/moe_steps/). ``--async-scheduling off``
times the same steps with the engine core's CPU work not overlapped with the GPU's: with ``on``, it
shows how the two meet as the batch grows (any model: ``--model llama-3.1-8b``). ``--prefill N,...``
times one request's prefill at each prompt length instead of decode steps (``prefills``);
``--attention-backend TRITON_ATTN`` runs the engine on that attention backend rather than vLLM's pick.
``--prompts 320,64-576`` times each batch once for each set of prompt lengths (``prompt_lengths``):
every request of the same length, or lengths spread over a range with the same mean, as open-loop
traffic has them (does a decode step cost what its summed context says, or more?).

``--profile B,...`` also traces those batches' decode steps with torch's profiler (CUDA activity
only: kernels and the runtime's launch calls, no per-op CPU records that would slow the host) and
reports per decode step, again as the difference of two generations: the kernels run and their
summed time, the time the GPU was busy (the union of kernel intervals), launches by kind, and the
kernels that took the most time. The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
so that the profiler sees its GPU work. A step whose GPU is busy for much less than the step lasts
waits on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane import model_dir

PROMPT = 32  # prompt tokens of every request


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--capture", type=int, required=True, help="max_cudagraph_capture_size")
    ap.add_argument("--batches", default="128,256,384,512,640,768")
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=80)
    ap.add_argument("--root", default="/root/e2e")
    ap.add_argument("--out", required=True)
    ap.add_argument("--profile", default="", help="batches whose decode steps to trace (comma-separated)")
    ap.add_argument("--profile-short", type=int, default=4)
    ap.add_argument("--profile-long", type=int, default=12)
    ap.add_argument(
        "--prefill",
        default="",
        help="prompt lengths whose prefill to time, one request at a time (comma-separated; then no decode steps)",
    )
    ap.add_argument(
        "--prompts",
        default=str(PROMPT),
        help="sets of prompt lengths, each batch timed with each (comma-separated: N, or LO-HI spread evenly)",
    )
    ap.add_argument(
        "--async-scheduling", choices=("default", "on", "off"), default="default",
        help="the engine's async scheduling (default: as the release has it)",
    )  # fmt: skip
    ap.add_argument(
        "--max-model-len", type=int, default=0,
        help="the engine's max_model_len (default: the model's; a large model on one card may need less)",
    )  # fmt: skip
    ap.add_argument(
        "--attention-backend", default="",
        help="vLLM's attention backend by name, e.g. TRITON_ATTN (default: the one vLLM picks)",
    )  # fmt: skip
    a = ap.parse_args()
    if a.profile:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its kernels traced
    import vllm
    from vllm import LLM, SamplingParams

    mdir, tdir = model_dir(Path(a.root), a.model)
    vocab = int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    llm = offline_engine(
        LLM,
        mdir,
        tdir,
        a.capture,
        **({} if a.async_scheduling == "default" else {"async_scheduling": a.async_scheduling == "on"}),
        **({"attention_backend": a.attention_backend} if a.attention_backend else {}),
        **({"max_model_len": a.max_model_len} if a.max_model_len else {}),
    )
    try:  # what the engine ran with, as its config says
        async_on = bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling)
    except AttributeError:
        async_on = None
    rng = random.Random(0)
    rows, profiles = [], []
    traced = {int(x) for x in a.profile.split(",") if x}
    if a.prefill:
        rows = prefills(llm, SamplingParams, [int(x) for x in a.prefill.split(",") if x], vocab, rng)
    for b in (int(x) for x in ("" if a.prefill else a.batches).split(",") if x):
        for spec in a.prompts.split(","):
            lengths = prompt_lengths(spec, b, rng)
            prompts = [{"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(n)]} for n in lengths]

            def timed(n: int, prompts: list = prompts) -> float:
                return generate_s(
                    llm, prompts, SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0)
                )

            timed(4)  # the batch's shapes once before timing
            short, long = timed(a.short), timed(a.long)
            shape = {"batch": b, "prompts": spec, "mean_prompt": sum(lengths) / b, "max_prompt": max(lengths)}
            rows.append(
                {**shape, "short_s": short, "long_s": long, "step_ms": (long - short) / (a.long - a.short) * 1e3}
            )
            print(json.dumps(rows[-1]), flush=True)
            if b in traced:
                lo, hi = (trace(timed, n) for n in (a.profile_short, a.profile_long))
                profiles.append({**shape, **per_step(lo, hi, a.profile_long - a.profile_short)})
                print(json.dumps(profiles[-1])[:600], flush=True)
    out = {
        "model": a.model,
        "capture": a.capture,
        "short": a.short,
        "long": a.long,
        "vllm": vllm.__version__,
        "async_scheduling": async_on,
        "attention_backend": a.attention_backend or "default",
        "max_model_len": a.max_model_len or "default",
        "rows": rows,
        **({"profiles": profiles} if profiles else {}),
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def offline_engine(llm_class, mdir: Path, tdir: Path, capture: int, **extra):
    """vLLM's offline engine (``llm_class``: ``vllm.LLM``) as these measurements run it: the model's
    config with dummy weights, graphs captured up to ``capture`` tokens, 1,024 requests and 8,192
    tokens a step at most, prefix caching off; ``extra``: other engine arguments."""
    return llm_class(
        model=str(mdir),
        tokenizer=str(tdir),
        load_format="dummy",
        max_cudagraph_capture_size=capture,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.9,
        seed=0,
        **extra,
    )


def generate_s(llm, prompts: list, sp) -> float:
    """Seconds the engine takes to generate ``prompts`` with sampling parameters ``sp``."""
    t0 = time.perf_counter()
    llm.generate(prompts, sp, use_tqdm=False)
    return time.perf_counter() - t0


def prompt_lengths(spec: str, batch: int, rng: random.Random) -> list[int]:
    """The prompt lengths of a batch's ``batch`` requests: ``N``, every one N tokens; ``LO-HI``, spread
    evenly from LO to HI (mean (LO + HI) / 2), in a shuffled order."""
    lo, _, hi = spec.partition("-")
    if not hi:
        return [int(lo)] * batch
    a, b = int(lo), int(hi)
    lengths = [round(a + (b - a) * i / max(batch - 1, 1)) for i in range(batch)]
    rng.shuffle(lengths)
    return lengths


def prefills(llm, sampling, lengths: list[int], vocab: int, rng: random.Random, repeats: int = 5) -> list[dict]:
    """One request of each prompt length, generating one token: the wall time of ``repeats``
    generations, each with prompts of its own (the prefix cache is off anyway), after one untimed;
    their median is the prefill step and the engine's fixed cost of a request (a short prompt's
    time gives the latter)."""
    sp = sampling(max_tokens=1, temperature=0.0)
    rows = []
    for n in lengths:

        def once(n: int = n) -> float:
            return generate_s(llm, [{"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(n)]}], sp)

        once()
        times = sorted(once() for _ in range(repeats))
        rows.append({"prompt": n, "ms": times[repeats // 2] * 1e3, "all_ms": [t * 1e3 for t in times]})
        print(json.dumps(rows[-1]), flush=True)
    return rows


LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")


def trace(timed, n: int) -> dict:
    """One generation of ``n`` tokens under torch's profiler (CUDA activity): its wall time, kernel
    count and summed time by name, the GPU's busy time, and the runtime's launch calls by kind."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        wall = timed(n)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return summarize(events, wall)


def busy_time(spans) -> float:
    """The length of the union of intervals ``spans`` ((start, end, ...) tuples, sorted by start): the
    time a GPU was busy with the kernels they time."""
    busy, end = 0.0, float("-inf")
    for t0, t1, *_ in spans:
        if t1 > end:
            busy += t1 - max(t0, end)
            end = t1
    return busy


def summarize(events: list[dict], wall: float) -> dict:
    """A chrome trace's kernels and launch calls, summed (``trace``)."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    by_name, count = Counter(), Counter()
    for e in kernels:
        by_name[e["name"][:90]] += float(e["dur"])
        count[e["name"][:90]] += 1
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in kernels)
    busy = busy_time(spans)
    launches = Counter(e["name"] for e in events if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCHES)
    return {
        "wall_us": wall * 1e6,
        "kernels": len(kernels),
        "kernel_us": sum(by_name.values()),
        "busy_us": busy,
        "launches": dict(launches),
        "by_name": dict(by_name),
        "count": dict(count),
    }


def per_step(lo: dict, hi: dict, steps: int) -> dict:
    """A decode step's share of the difference between two traced generations."""
    names = set(lo["by_name"]) | set(hi["by_name"])
    top = sorted(names, key=lambda k: hi["by_name"].get(k, 0.0) - lo["by_name"].get(k, 0.0), reverse=True)[:20]
    return {
        "step_wall_ms": (hi["wall_us"] - lo["wall_us"]) / steps / 1e3,
        "kernels": (hi["kernels"] - lo["kernels"]) / steps,
        "kernel_ms": (hi["kernel_us"] - lo["kernel_us"]) / steps / 1e3,
        "busy_ms": (hi["busy_us"] - lo["busy_us"]) / steps / 1e3,
        "launches": {k: (hi["launches"].get(k, 0) - lo["launches"].get(k, 0)) / steps for k in LAUNCHES},
        "top": [
            {
                "name": k,
                "ms": (hi["by_name"].get(k, 0.0) - lo["by_name"].get(k, 0.0)) / steps / 1e3,
                "count": (hi["count"].get(k, 0) - lo["count"].get(k, 0)) / steps,
            }
            for k in top
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
