"""Which Triton kernels a vLLM engine compiles at a step it runs without CUDA graphs, step by step,
on the device: what a server's first steps of new sizes wait for.

    python3 tools/e2e/jit_probe.py --model gpt-oss-20b --tokens 1100,1132,1100,2100 --out jit.json

One offline engine (``vllm.LLM`` in this process: dummy weights, prefix caching off, graphs captured
up to ``--capture`` tokens, a token budget of 8,192, the start-up's profile step and captures as a
server runs them) with its own empty Triton cache (``TRITON_CACHE_DIR``). Then one request at a time,
each a prompt of the next ``--tokens`` count generating one token: a step of exactly that many tokens.
After each, the kernels newly in the Triton cache (each compiled variant is a folder holding the
kernel's metadata) are listed by name with what Triton specialized them on (the kernel's signature
line from its TTIR: which integer arguments it took as constants or as divisible by 16), beside the
step's wall time. A step that compiles nothing takes its GPU time; one that compiles waits for it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane import model_dir
from moe_steps import offline_engine


def kernels(cache: Path) -> dict[str, dict]:
    """Every compiled kernel variant in the Triton cache ``cache``: folder -> name, metadata."""
    out = {}
    for meta in cache.glob("*/*.json"):
        if meta.name.startswith("__grp__"):
            continue
        try:
            d = json.loads(meta.read_text())
        except (OSError, ValueError):
            continue
        name = str(d.get("name", meta.stem))
        sig = ""
        ttir = meta.with_suffix(".ttir")
        if ttir.exists():
            m = re.search(r"tt\.func public @[^\n]*", ttir.read_text(errors="replace"))
            sig = m.group(0)[:4000] if m else ""
        keep = {k: d[k] for k in ("num_warps", "num_stages", "shared") if k in d}
        out[meta.parent.name] = {"name": name, **keep, "signature": sig}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-oss-20b")
    ap.add_argument("--capture", type=int, default=1024, help="max_cudagraph_capture_size")
    ap.add_argument("--tokens", required=True, help="each step's token count, in order (comma-separated)")
    ap.add_argument("--root", default="/root/e2e")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process
    cache = Path(tempfile.mkdtemp(prefix="triton_cache_"))
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    import vllm
    from vllm import LLM, SamplingParams

    mdir, tdir = model_dir(Path(a.root), a.model)
    vocab = int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    t0 = time.perf_counter()
    llm = offline_engine(LLM, mdir, tdir, a.capture)
    start_s = time.perf_counter() - t0
    seen = kernels(cache)
    at_start = sorted({k["name"] for k in seen.values()})
    print(json.dumps({"start_s": start_s, "kernels_at_start": len(seen)}), flush=True)
    rng = random.Random(0)
    sp = SamplingParams(max_tokens=1, temperature=0.0)
    rows = []
    for n in (int(x) for x in a.tokens.split(",") if x):
        prompt = {"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(n)]}
        t = time.perf_counter()
        llm.generate([prompt], sp, use_tqdm=False)
        wall = time.perf_counter() - t
        now = kernels(cache)
        new = [now[k] for k in sorted(set(now) - set(seen))]
        seen = now
        rows.append({"tokens": n, "wall_s": wall, "compiled": new})
        print(json.dumps({"tokens": n, "wall_s": round(wall, 3), "compiled": [k["name"] for k in new]}), flush=True)
    out = {
        "model": a.model,
        "capture": a.capture,
        "vllm": vllm.__version__,
        "start_s": start_s,
        "kernels_at_start": at_start,
        "rows": rows,
    }
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
