"""Where a decode step's GPU sits idle: vLLM's own profiler on its engine core (the engine in its own
process, as a server runs it), and each idle stretch of the GPU put down to what the host was doing.

    python3 tools/e2e/step_gaps.py --model gpt-oss-120b --batches 1,4,8,32 --out step_gaps.json

One offline engine (``moe_steps.offline_engine``: dummy weights, graphs up to ``--capture`` tokens,
prefix caching off; ``--async-scheduling`` as given). For each batch B: B prompts of ``--prompt``
tokens; a decode step timed as ``moe_steps.py`` times it (two generations, ``--short`` and ``--long``
tokens, differenced); then one generation of ``--traced`` tokens under vLLM's torch profiler
(``profiler_config``: kernels, the CUDA runtime's calls and the engine's own annotations, no stacks),
and of that trace:

- its steady decode steps (``decode_steps``: each the replay of the step's CUDA graph), medians of
  the interval from one graph to the next, the graph's span, the GPU's busy time in it and the idle
  time between its kernels, and the span and busy time of the work outside it;
- every idle stretch between two kernels of at least ``--min-gap-us``, over the whole generation and
  shared over its steps, split by who made it wait: ``host_late`` where the kernel after it was
  launched after the one before had ended (the GPU had nothing queued: the host was late),
  ``queued`` where it had been launched before (a wait on the GPU's side: between the nodes of a
  graph, or on an event); and of the host's, the part within the steady decode steps;
- the pairs (kernel before, kernel after) that hold the most idle time, each with the engine's
  annotations open on the launching thread when the host was late.

The raw trace of each batch is kept beside the output, gzip-compressed; ``--read TRACE...`` prints
the same analysis of kept traces (here, with no GPU):

    python tools/e2e/step_gaps.py --read data/profiles/step_gaps/*.trace.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lane import model_dir
from moe_steps import busy_time, generate_s, offline_engine

ANNOTATIONS = ("user_annotation", "gpu_user_annotation", "cpu_op", "python_function")


def newest_trace(d: Path, before: set[Path]) -> Path | None:
    """The trace file the profiler wrote into ``d`` since ``before`` was listed."""
    new = [p for p in d.rglob("*") if p.is_file() and p not in before and ".json" in p.name]
    return max(new, key=lambda p: p.stat().st_mtime) if new else None


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f).get("traceEvents", [])


def decode_steps(events: list[dict]) -> dict:
    """The steady decode steps of a trace, each the replay of the step's CUDA graph (the graph launches
    that ran the most kernels; a prefill's piecewise graphs run fewer): medians over the steps, in ms,
    of the interval from one step's graph to the next, the graph's span, the GPU's busy time in it and
    the idle time between its kernels, and the work outside it (kernels and copies before the next
    graph: the LM head where it is not captured, sampling, the next step's input copies)."""
    work = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]), (e.get("args") or {}).get("correlation"))
        for e in events
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e
    )
    by_launch: dict = defaultdict(list)
    for w in work:
        by_launch[w[2]].append(w)
    graphs = [
        by_launch[(e.get("args") or {}).get("correlation")]
        for e in sorted(events, key=lambda e: float(e.get("ts", 0)))
        if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch"
    ]
    size = max((len(g) for g in graphs), default=0)
    steps = [sorted(g) for g in graphs if g and len(g) == size]
    rows = []
    for g, nxt in itertools.pairwise(steps):
        start, end = g[0][0], max(w[1] for w in g)
        busy = busy_time(g)
        outside = [w for w in work if w[0] >= end and w[1] <= nxt[0][0]]
        rows.append(
            {
                "interval": nxt[0][0] - start,
                "graph": end - start,
                "graph_busy": busy,
                "graph_idle": end - start - busy,
                "outside": nxt[0][0] - end,
                "outside_busy": sum(w[1] - w[0] for w in outside),
                "outside_items": len(outside),
            }
        )
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}
    return {
        "steps": len(rows),
        "first_us": steps[0][0][0] if steps else 0.0,  # the first step's graph starts, and the last's
        "last_us": steps[-1][0][0] if steps else 0.0,
        "graph_kernels": size,
        **{f"{k}_ms": v / 1e3 for k, v in med.items() if k != "outside_items"},
        "outside_items": med.get("outside_items", 0),
    }


def gaps(events: list[dict], min_gap_us: float) -> dict:
    """The GPU's idle stretches of a trace, by who made it wait (the module's docstring), and its
    decode steps (``decode_steps``)."""
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and "dur" in e), key=lambda e: float(e["ts"]))
    launches = {}  # the runtime's and the driver's launch calls (Triton's kernels go through the driver)
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {}):
            launches[e["args"]["correlation"]] = e
    notes_by_tid: dict = defaultdict(list)
    for e in events:
        if e.get("cat") in ANNOTATIONS and "dur" in e and e.get("ph") == "X":
            notes_by_tid[e.get("tid")].append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e["name"][:80]))
    if not kernels:
        return {"kernels": 0}
    decode = decode_steps(events)
    end = float(kernels[0]["ts"])
    host_late = queued = late_in_decode = 0.0
    pairs: dict = defaultdict(lambda: {"us": 0.0, "n": 0, "host_late_us": 0.0, "open": Counter()})
    prev = kernels[0]
    for k in kernels:
        t0, t1 = float(k["ts"]), float(k["ts"]) + float(k["dur"])
        gap = t0 - end
        if gap >= min_gap_us:
            launch = launches.get((k.get("args") or {}).get("correlation"))
            late = launch is not None and float(launch["ts"]) > end
            p = pairs[f"{prev['name'][:60]} -> {k['name'][:60]}"]
            p["us"] += gap
            p["n"] += 1
            if late:
                host_late += gap
                p["host_late_us"] += gap
                if decode["first_us"] < t0 <= decode["last_us"]:
                    late_in_decode += gap
                mid = (end + float(launch["ts"])) / 2
                for a, b, name in notes_by_tid.get(launch.get("tid"), []):
                    if a <= mid <= b:
                        p["open"][name] += 1
            else:
                queued += gap
        if t1 > end:
            end = t1
            prev = k
    n = max(decode["steps"] + 1, 1)  # the gaps were summed over the whole generation (its prefill too)
    top = sorted(pairs.items(), key=lambda kv: kv[1]["us"], reverse=True)[:15]
    return {
        "kernels": len(kernels),
        "decode": decode,
        "idle_host_late_ms_per_step": host_late / n / 1e3,
        # of it, within the steady decode steps (after the first one's graph starts, up to the last's)
        "idle_host_late_in_decode_ms_per_step": late_in_decode / max(decode["steps"], 1) / 1e3,
        "idle_queued_ms_per_step": queued / n / 1e3,
        "top": [
            {
                "pair": key,
                "ms_per_step": p["us"] / n / 1e3,
                "count_per_step": p["n"] / n,
                "host_late_ms_per_step": p["host_late_us"] / n / 1e3,
                "open": dict(p["open"].most_common(6)),
            }
            for key, p in top
        ],
    }


def read(paths: list[str], min_gap_us: float) -> int:
    """Print the analysis of traces kept by an earlier run (``--read``)."""
    for path in paths:
        g = gaps(load_events(Path(path)), min_gap_us)
        print(Path(path).name, json.dumps({k: v for k, v in g.items() if k != "top"}))
        for t in g["top"][:5]:
            print("   ", json.dumps(t)[:300])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt-oss-120b")
    ap.add_argument("--capture", type=int, default=1024)
    ap.add_argument("--batches", default="1,4,8,32")
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--short", type=int, default=16)
    ap.add_argument("--long", type=int, default=80)
    ap.add_argument("--traced", type=int, default=24)
    ap.add_argument("--min-gap-us", type=float, default=3.0)
    ap.add_argument("--async-scheduling", choices=("default", "on", "off"), default="default")
    ap.add_argument("--root", default="/root/e2e")
    ap.add_argument("--out", help="the JSON to write (a run on the device)")
    ap.add_argument("--read", nargs="+", help="analyse traces an earlier run kept instead")
    a = ap.parse_args()
    if a.read:
        return read(a.read, a.min_gap_us)
    import vllm
    from vllm import LLM, SamplingParams

    if not a.out:
        ap.error("--out is required on the device")
    out_path = Path(a.out)
    prof_dir = Path(tempfile.mkdtemp(prefix="step_gaps_"))
    mdir, tdir = model_dir(Path(a.root), a.model)
    vocab = int(json.loads((mdir / "config.json").read_text())["vocab_size"])
    extra = {} if a.async_scheduling == "default" else {"async_scheduling": a.async_scheduling == "on"}
    llm = offline_engine(
        LLM,
        mdir,
        tdir,
        a.capture,
        profiler_config={
            "profiler": "torch",
            "torch_profiler_dir": str(prof_dir),
            "torch_profiler_with_stack": False,
            "torch_profiler_use_gzip": True,
            "torch_profiler_dump_cuda_time_total": False,
            "torch_profiler_record_shapes": False,
        },
        **extra,
    )
    try:
        async_on = bool(llm.llm_engine.vllm_config.scheduler_config.async_scheduling)
    except AttributeError:
        async_on = None
    rng = random.Random(0)
    rows = []
    for b in (int(x) for x in a.batches.split(",") if x):
        prompts = [{"prompt_token_ids": [rng.randrange(10, vocab) for _ in range(a.prompt)]} for _ in range(b)]

        def sp(n: int):
            return SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=0.0)

        generate_s(llm, prompts, sp(4))
        short, long = generate_s(llm, prompts, sp(a.short)), generate_s(llm, prompts, sp(a.long))
        row = {"batch": b, "step_ms": (long - short) / (a.long - a.short) * 1e3}
        before = {p for p in prof_dir.rglob("*") if p.is_file()}
        llm.start_profile()
        row["traced_s"] = generate_s(llm, prompts, sp(a.traced))
        llm.stop_profile()
        trace = None
        for _ in range(120):  # the engine core writes its trace after it stops profiling
            trace = newest_trace(prof_dir, before)
            if trace is not None:
                size = trace.stat().st_size
                time.sleep(2)
                if trace.stat().st_size == size:
                    break
            time.sleep(1)
        if trace is None:
            row["error"] = "no trace written"
        else:
            try:
                row.update(gaps(load_events(trace), a.min_gap_us))
            except Exception as e:  # keep the timing and the raw trace
                row["error"] = f"{type(e).__name__}: {e}"
            kept = out_path.parent / f"{out_path.stem}_b{b}.trace.json.gz"
            if trace.name.endswith(".gz"):
                shutil.copy(trace, kept)
            else:
                with open(trace, "rb") as f, gzip.open(kept, "wb") as g:
                    shutil.copyfileobj(f, g)
            row["trace_file"] = kept.name
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "top"}), flush=True)
        for t in row.get("top", [])[:6]:
            print("   ", json.dumps(t)[:300], flush=True)
    out = {
        "model": a.model,
        "capture": a.capture,
        "prompt": a.prompt,
        "short": a.short,
        "long": a.long,
        "traced": a.traced,
        "vllm": vllm.__version__,
        "async_scheduling": async_on,
        "multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1"),
        "rows": rows,
    }
    out_path.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
