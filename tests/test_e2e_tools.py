"""The recorder's profiling tools (tools/e2e/stack_sampler.py, tools/e2e/profile_report.py): the
sampler sees where a process's threads are, and the report reads it back run by run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "tools" / "e2e"

CHILD = """
import gc, os, time

def busy_work(seconds):  # seconds of this thread's CPU, however busy the machine
    t = time.thread_time()
    while time.thread_time() - t < seconds:
        sum(range(500))

busy_work(1.2)
gc.collect()
if os.fork() == 0:  # a forked child samples itself too
    busy_work(0.8)
    time.sleep(0.5)
    os._exit(0)
os.wait()
time.sleep(0.5)
"""


def test_stack_sampler_records_stacks_cpu_and_gc(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(E2E / "stack_sampler.py", site / "sitecustomize.py")
    out = tmp_path / "samples"
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "SERVESIM_SAMPLE_DIR": str(out),
        "SERVESIM_SAMPLE_MS": "2",
        "SERVESIM_SAMPLE_WINDOW_S": "0.3",
    }
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True, timeout=60)
    windows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    pids = {w["pid"] for w in windows}
    assert len(pids) == 2, "the parent and its forked child each write their own windows"
    parent = min(pids, key=lambda pid: min(w["t0"] for w in windows if w["pid"] == pid))
    mine = [w for w in windows if w["pid"] == parent]
    main = [(stack, c) for w in mine for name, stack, c in w["stacks"] if name == "MainThread"]
    busy = sum(c for stack, c in main if "busy_work" in stack)
    waiting = sum(c for stack, c in main if stack.split("|")[0].endswith(":<module>"))  # in os.wait / sleep
    assert busy >= 50 and waiting >= 50  # 1.2 s in the loop, then 1.8 s waiting: both seen
    assert stack_frames_first_innermost(mine)
    assert sum(w["gc_runs"][2] for w in mine) >= 1  # the full collection was counted
    main_tid = str(parent)  # the main thread's native id is the pid
    assert max(w["thread_cpu_s"].get(main_tid, 0.0) for w in mine) > 0.6  # about 1.2 s of CPU


def stack_frames_first_innermost(windows) -> bool:
    """A sampled stack lists the innermost frame first (busy_work before the module)."""
    for w in windows:
        for _name, stack, _c in w["stacks"]:
            frames = stack.split("|")
            if any(f.endswith(":busy_work") for f in frames):
                return frames.index(next(f for f in frames if f.endswith(":busy_work"))) < frames.index(
                    next(f for f in frames if f.endswith(":<module>"))
                )
    return False


def _window(pid, t0, t1, argv, threads, stacks, cpu):
    return {
        "pid": pid,
        "argv": argv,
        "t0": t0,
        "t1": t1,
        "gc_s": 0.5,
        "gc_runs": [10, 1, 0],
        "thread_cpu_s": cpu,
        "native_ids": threads,
        "stacks": stacks,
    }


def test_profile_report_splits_time_by_activity_within_the_run(tmp_path):
    lane = tmp_path / "lane"
    (lane / "r1").mkdir(parents=True)
    (lane / "samples").mkdir()
    t0 = 1000.0
    (lane / "lane.json").write_text(json.dumps({"runs": [{"name": "r1", "start_epoch": t0, "wall_s": 60.0}]}))
    # requests in flight from 10 s to 40 s of the run
    (lane / "r1" / "requests.csv").write_text("start_s,ttft_s,itl_sum_s\n10,1,5\n20,2,18\n")
    api = ["python", "-m", "vllm.entrypoints.cli.main", "serve", "model"]
    threads = {"MainThread": 7}
    stream = "serving.py:completion_stream_generator|responses.py:stream_response|runners.py:run"
    outputs = "output_processor.py:process_outputs|async_llm.py:output_handler|runners.py:run"
    windows = [
        # before the requests: left out (its CPU is the base of the next)
        _window(7, t0 + 0, t0 + 10, api, threads, [["MainThread", outputs, 100]], {"7": 1.0}),
        _window(
            7, t0 + 10, t0 + 20, api, threads, [["MainThread", stream, 30], ["MainThread", outputs, 10]], {"7": 9.0}
        ),
        _window(
            7, t0 + 20, t0 + 30, api, threads, [["MainThread", stream, 30], ["MainThread", outputs, 10]], {"7": 17.0}
        ),
        # straddles the end of the requests: left out
        _window(7, t0 + 30, t0 + 45, api, threads, [["MainThread", outputs, 100]], {"7": 30.0}),
    ]
    for i, w in enumerate(windows):
        (lane / "samples" / f"7-{i:05d}.json").write_text(json.dumps(w))
    out = subprocess.run(
        [sys.executable, str(E2E / "profile_report.py"), str(lane)], capture_output=True, text=True, check=True
    ).stdout
    assert "requests in flight for 30 s" in out
    assert "API server (pid 7): 20 s sampled, gc 5.0% of the time" in out
    assert "MainThread 80%" in out  # 16 CPU seconds over 20 s
    assert "75.0%  API: stream chunks (build, write)" in out
    assert "25.0%  API: process outputs (detokenize, collect)" in out


def test_ingest_keeps_the_flags_servesim_needs_and_a_burst_reads_as_one():
    """A lane's --max-model-len reaches the run's engine settings, and a run sent all at once is
    labelled a burst (not 'inf req/s')."""
    import importlib.util

    from simulator.validation import validate

    spec = importlib.util.spec_from_file_location("e2e_ingest", E2E / "ingest.py")
    ingest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ingest)
    flags = {"--max-model-len": "8192", "--max-num-seqs": "4096"}
    assert ingest.engine_flags(flags, {}) == {"max_num_seqs": 4096, "max_model_len": 8192}
    burst = {"arrival": {"request_rate": "inf"}, "measured": {"completed": 40}}
    assert validate._load_text(burst) == "burst of 40"
    assert validate._load_text({"arrival": {"request_rate": 60}}) == "60 req/s"
    (run,) = [r for r in validate.load(validate.E2E_FILE)["runs"] if r["recording"] == "h100_long_2026-11-28"]
    assert run["engine"] == {"max_model_len": 8192} and validate._load_text(run) == "burst of 40"
