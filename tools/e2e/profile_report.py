"""Where a recorded server's processes spent their time, run by run, from tools/e2e/stack_sampler.py.

    python tools/e2e/profile_report.py data/e2e/NAME/LANE [--top 12]

For each run of the lane (its start and wall time from lane.json) and each sampled process (the API
server, the engine core, the benchmark client): each thread's CPU share from /proc, the share of its
samples in each activity (below), the time in the garbage collector. An activity is the first of
its rules whose pattern is in the sampled stack (file:function frames); stacks that match none are
counted by their innermost frame (``--top`` of them).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

IDLE = "idle or in native code (the event loop, sockets)"
# (activity, any of these frames in the stack), first match wins. Stacks are innermost frame first.
ACTIVITIES = [
    # the engine core's busy loop
    ("engine: idle, waiting for requests", ("core.py:_process_input_queue",)),
    ("engine: waiting for the GPU", ("streams.py:synchronize", "async_utils.py:get_output")),
    ("engine: sample", ("sample_tokens",)),
    ("engine: prepare and launch the step", ("execute_model",)),
    ("engine: schedule", ("scheduler.py:schedule",)),
    ("engine: update from outputs", ("scheduler.py:update_from_output",)),
    ("engine: output thread", ("core.py:process_output_sockets",)),
    ("engine: input thread", ("core.py:process_input_sockets",)),
    # the API server's event loop (a request's add_request runs inside its stream's generator)
    (
        "API: intake (parse, render, add request)",
        (
            "async_llm.py:add_request",
            "async_llm.py:_add_request",
            "_send_input_message",
            "create_completion",
            "renderers",
            "httptools_impl.py:data_received",
            "h11_impl.py:handle_events",
            "httptools_impl.py:on_",
        ),
    ),
    ("API: iteration log (--enable-logging-iteration-details)", ("_log_iteration_details",)),
    ("API: stream chunks (build, write)", ("completion_stream_generator", "responses.py:stream_response")),
    (
        "API: process outputs (detokenize, collect)",
        ("output_processor.py:process_outputs", "async_llm.py:output_handler"),
    ),
    ("API: receive outputs (decode)", ("core_client.py:process_outputs_socket",)),
    ("API: metrics endpoint", ("exposition.py", "process_collector.py")),
    (IDLE, ("selectors.py:select",)),
]


def role(w: dict) -> str | None:
    """What a sampled process is: the engine core, the API server, the benchmark client (None: other)."""
    threads = " ".join(w["native_ids"])
    a = " ".join(w["argv"])
    if "process_output_sockets" in threads:
        return "engine core"
    if "bench" in a:
        return "bench client"
    if "serve" in a:
        return "API server"
    return None


def activity(stack: str) -> str:
    for name, pats in ACTIVITIES:
        if any(p in stack for p in pats):
            return name
    inner = stack.split("|", 1)[0]
    if inner.startswith("runners.py:run"):  # uvloop runs the loop in native code
        return IDLE
    return "other: " + inner


def read_windows(lane_dir: Path) -> list[dict]:
    """The sampler's windows: from samples/ (as collected) or samples.tar.xz (as kept in data/e2e/)."""
    if (lane_dir / "samples").is_dir():
        return [json.loads(p.read_text()) for p in sorted((lane_dir / "samples").glob("*.json"))]
    packed = lane_dir / "samples.tar.xz"
    if not packed.is_file():
        return []
    import tarfile

    with tarfile.open(packed) as tar:
        return [json.load(tar.extractfile(m)) for m in sorted(tar.getmembers(), key=lambda m: m.name) if m.isfile()]


def active(requests_csv: Path, t0: float, t1: float) -> tuple[float, float]:
    """From the first request sent to the last one ended (the bench's own start-up and the run's
    tail are not the load), as epoch seconds; the run's span where the requests are not known."""
    import csv

    if not requests_csv.is_file():
        return t0, t1
    with requests_csv.open() as f:
        rows = [r for r in csv.DictReader(f) if r["start_s"] and r["ttft_s"]]
    if not rows:
        return t0, t1
    first = min(float(r["start_s"]) for r in rows)
    last = max(float(r["start_s"]) + float(r["ttft_s"]) + float(r["itl_sum_s"] or 0) for r in rows)
    return t0 + first, t0 + last


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lane_dir", type=Path)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    meta = json.loads((a.lane_dir / "lane.json").read_text())
    windows = read_windows(a.lane_dir)
    if not windows:
        print(f"no samples in {a.lane_dir} (samples/ or samples.tar.xz)", file=sys.stderr)
        return 2
    for run in meta["runs"]:
        t0 = run.get("start_epoch")
        if t0 is None:
            continue
        t1 = t0 + run["wall_s"]
        t0, t1 = active(a.lane_dir / run["name"] / "requests.csv", t0, t1)
        print(f"\n=== run {run['name']}: requests in flight for {t1 - t0:.0f} s (windows wholly inside)")
        by_pid: dict[int, list[dict]] = defaultdict(list)
        for w in windows:
            if w["t0"] >= t0 and w["t1"] <= t1:
                by_pid[w["pid"]].append(w)
        for pid, ws in sorted(by_pid.items()):
            who = role(ws[-1])
            if who is None:
                continue
            span = sum(w["t1"] - w["t0"] for w in ws)
            names = {str(v): k for k, v in ws[-1]["native_ids"].items()}
            # thread CPU seconds are cumulative: the last window's minus the one before the first
            ordered = sorted(ws, key=lambda w: w["t0"])
            before = [w for w in windows if w["pid"] == pid and w["t1"] <= ordered[0]["t0"] + 1e-6]
            base = before[-1]["thread_cpu_s"] if before else {}
            last = ordered[-1]["thread_cpu_s"]
            busy = {tid: last[tid] - base.get(tid, 0.0) for tid in last}
            top = sorted(busy.items(), key=lambda kv: -kv[1])[:6]
            gc_s = sum(w["gc_s"] for w in ws)
            print(f"-- {who} (pid {pid}): {span:.0f} s sampled, gc {gc_s / span:.1%} of the time")
            print("   CPU by thread: " + ", ".join(f"{names.get(t, t)} {s / span:.0%}" for t, s in top if s > 0))
            per_thread: dict[str, Counter] = defaultdict(Counter)
            for w in ws:
                for tname, stack, c in w["stacks"]:
                    act = activity(stack)
                    per_thread[tname][act] += c
            cpu_of = {names.get(t, t): v for t, v in busy.items()}
            for tname, acts in sorted(per_thread.items(), key=lambda kv: -cpu_of.get(kv[0], 0.0))[:1]:
                n = sum(acts.values())
                print(f"   {tname} ({n} samples):")
                for act, c in acts.most_common(a.top):
                    print(f"     {c / n:6.1%}  {act}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
