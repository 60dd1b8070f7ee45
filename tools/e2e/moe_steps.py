"""Time vLLM's decode steps of an MoE model at batches below and above its largest CUDA-graph capture
size, on the device: what a step without graphs costs against the same step replayed from a graph.

    python3 tools/e2e/moe_steps.py --model qwen3-30b-a3b --capture 512 --out moe_steps_512.json

One offline engine (``vllm.LLM``: dummy weights, prefix caching off, graphs captured up to
``--capture`` tokens; no API server). For each batch B it generates B requests of 32 distinct prompt
tokens twice, with ``--short`` and ``--long`` output tokens (ignore_eos), and takes a decode step of
B requests as (T_long - T_short) / (long - short): the prefill and the fixed costs cancel. Run it
twice, at vLLM 0.26's default capture size (512) and above the largest batch, and compare the steps
at the batches between (``device.sh moesteps``; data/profiles/moe_steps/).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane import model_dir


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--capture", type=int, required=True, help="max_cudagraph_capture_size")
    ap.add_argument("--batches", default="128,256,384,512,640,768")
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=80)
    ap.add_argument("--root", default="/root/e2e")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import vllm
    from vllm import LLM, SamplingParams

    mdir, tdir = model_dir(Path(a.root), a.model)
    vocab = int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    llm = LLM(
        model=str(mdir),
        tokenizer=str(tdir),
        load_format="dummy",
        max_cudagraph_capture_size=a.capture,
        max_num_seqs=1024,
        max_num_batched_tokens=8192,
        enable_prefix_caching=False,
        gpu_memory_utilization=0.9,
        seed=0,
    )
    rng = random.Random(0)
    rows = []
    for b in (int(x) for x in a.batches.split(",")):
        prompts = [{"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(32)]} for _ in range(b)]

        def timed(n: int, prompts: list = prompts) -> float:
            sp = SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0)
            t0 = time.perf_counter()
            llm.generate(prompts, sp, use_tqdm=False)
            return time.perf_counter() - t0

        timed(4)  # the batch's shapes once before timing
        short, long = timed(a.short), timed(a.long)
        rows.append(
            {"batch": b, "short_s": short, "long_s": long, "step_ms": (long - short) / (a.long - a.short) * 1e3}
        )
        print(json.dumps(rows[-1]), flush=True)
    out = {
        "model": a.model,
        "capture": a.capture,
        "short": a.short,
        "long": a.long,
        "vllm": vllm.__version__,
        "rows": rows,
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
