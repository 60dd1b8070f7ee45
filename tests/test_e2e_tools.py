"""The end-to-end recorder's tools: the profiling tools (tools/e2e/stack_sampler.py,
tools/e2e/profile_report.py: the sampler sees where a process's threads are, and the report reads it
back run by run), and the recorder's prompts and their check (lane.py, checks.py, bench_tokens.py,
ingest.py: every prompt exactly its planned tokens, no prefix shared unless planned)."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

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


def test_cpu_report_reads_a_tokens_cost_and_its_growth_with_the_streams_open(tmp_path):
    """cpu_report.py on a made-up lane whose API server spends 60 us a streamed token, 10 ns more
    a token for each stream open, and 2 ms a prompt taken in; its engine core 30 us a token; its
    benchmark client is on the CPU half the time; the API server ran on CPU 3 in 3 readings of 4."""
    lane = tmp_path / "lane"
    (lane / "r1").mkdir(parents=True)
    spec = {"runs": [{"name": "r1", "prompt": 128}]}
    (lane / "lane.json").write_text(json.dumps({"lane": spec, "runs": [{"name": "r1", "server_pid": 7}]}))
    (lane / "host_probe_before.json").write_text(json.dumps({"per_cpu_us": {"0": 3.9, "3": 5.25}}))
    rng = np.random.default_rng(0)
    tokens = prompts = api = engine = 0.0
    cpu, metrics = ["t,pid,process,cpu_s,cpu"], []
    for t in range(61):
        streams = 100 + 15 * t  # 100 to 1,000 streams open
        if 0 < t < 60:
            dt, dp = 8000.0 + 2000 * rng.random(), float(rng.integers(0, 40))
            tokens, prompts = tokens + dt, prompts + dp
            api += dt * (60e-6 + 10e-9 * streams) + dp * 2e-3
            engine += dt * 30e-6
        cpu += [
            f"{t}.000,7,python3,{api:.6f},{0 if t % 4 == 0 else 3}",
            f"{t}.000,8,VLLM::EngineCor,{engine:.6f},5",
            f"{t}.000,9,client:python3,{0.5 * t:.6f},6",
        ]
        metrics.append(
            {
                "t": t,
                "vllm:generation_tokens_total": tokens,
                "vllm:prompt_tokens_total": prompts * 128,
                "vllm:num_requests_running": streams - 10,
                "vllm:num_requests_waiting": 10,
            }
        )
    (lane / "r1" / "cpu.csv").write_text("\n".join(cpu) + "\n")
    with (lane / "r1" / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, list(metrics[0]))
        w.writeheader()
        w.writerows(metrics)
    # the machine beside the run: two CPUs losing 1% and 3% of their ticks to steal; three readings
    # of the probe under load
    stat = ["t,cpu,user,nice,system,idle,iowait,irq,softirq,steal"]
    for t in range(61):
        stat += [f"{t}.000,0,{50 * t},0,0,{49 * t},0,0,0,{t}", f"{t}.000,1,{50 * t},0,0,{47 * t},0,0,0,{3 * t}"]
    (lane / "r1" / "stat.csv").write_text("\n".join(stat) + "\n")
    watch = ["t,kernel_us,in_order_ns,shuffled_ns,cpu", "5.0,4.0,30,200,1", "15.0,8.0,50,400,2", "25.0,6.0,40,300,1"]
    (lane / "r1" / "watch.csv").write_text("\n".join(watch) + "\n")
    out = subprocess.run(
        [sys.executable, str(E2E / "cpu_report.py"), str(lane)], capture_output=True, text=True, check=True
    ).stdout
    assert (
        "  the machine beside it: steal 2.0% of all CPUs' time (most on one CPU 3.0%); watch: 3 readings,"
        " kernel 4.00-8.00 us (median 6.00), wide 200-400 ns"
    ) in out.splitlines()
    (row,) = [line.split() for line in out.splitlines() if line.startswith("lane/r1")]
    assert float(row[2]) == pytest.approx(30.0, abs=0.05)  # the engine core's us a token
    # the API server's: 60 us, 10 ns x 550 streams on average, 2 ms x 20 prompts / 9,000 tokens
    assert float(row[1]) == pytest.approx(60 + 5.5 + 2000 * 20 / 9000, rel=0.03)
    assert float(row[5]) == pytest.approx(0.5)  # the client's share of the wall time on the CPU
    assert " ".join(row[6:]) == "cpu 3 (75%, 5.25 us)"
    fit = re.search(r"([\d.]+) us a streamed token \+ ([\d.-]+) ns a token per stream open \+ ([\d.-]+) us a", out)
    assert [float(x) for x in fit.groups()] == pytest.approx([60.0, 10.0, 2000.0], rel=0.01)


def test_ingest_keeps_the_flags_servesim_needs_and_a_burst_reads_as_one():
    """A lane's --max-model-len (and its async-scheduling switch) reaches the run's engine settings, and a run sent all at once is
    labelled a burst (not 'inf req/s')."""
    import importlib.util

    from simulator.validation import validate

    spec = importlib.util.spec_from_file_location("e2e_ingest", E2E / "ingest.py")
    ingest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ingest)
    flags = {"--max-model-len": "8192", "--max-num-seqs": "4096"}
    assert ingest.engine_flags(flags, {}) == {"max_num_seqs": 4096, "max_model_len": 8192}
    fp8 = {"--quantization": "fp8", "--kv-cache-dtype": "fp8"}
    assert ingest.engine_flags(fp8, {}) == {"quantization": "fp8", "kv_cache_dtype": "fp8"}
    assert ingest.engine_flags({"--no-async-scheduling": True}, {}) == {"async_scheduling": False}
    assert ingest.engine_flags({"--async-scheduling": True}, {}) == {"async_scheduling": True}
    burst = {"arrival": {"request_rate": "inf"}, "measured": {"completed": 40}}
    assert validate._load_text(burst) == "burst of 40"
    assert validate._load_text({"arrival": {"request_rate": 60}}) == "60 req/s"
    (run,) = [r for r in validate.load(validate.E2E_FILE)["runs"] if r["recording"] == "h100_long_2026-11-28"]
    assert run["engine"] == {"max_model_len": 8192} and validate._load_text(run) == "burst of 40"
    # a switch (a flag with no value) reads as True, wherever it stands; an SGLang server's, on its release
    args = ["--disable-prefill-cuda-graph", "--mem-fraction-static", "0.4", "--enable-metrics"]
    flags = ingest.serve_flags(args)
    assert flags == {"--disable-prefill-cuda-graph": True, "--mem-fraction-static": "0.4", "--enable-metrics": True}
    assert ingest.sglang_engine(flags, "0.5.16") == {
        "framework": "sglang",
        "sglang_version": "0.5.16",
        "mem_fraction_static": 0.4,
        "disable_prefill_cuda_graph": True,
    }


# The recorder's prompts and its check (tools/e2e/lane.py, checks.py, bench_tokens.py, ingest.py)


def _load(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"e2e_{name}", E2E / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _vocab(model: str) -> int:
    return int(json.loads((E2E / "models" / f"{model}.json").read_text())["vocab_size"])


def test_prompts_have_exactly_the_planned_tokens_and_share_only_the_planned_prefixes():
    lane = _load("lane")
    vocab = _vocab("llama-3.1-8b")
    spread = {
        "name": "s",
        "seed": 11,
        "num_prompts": 400,
        "prompt": {"mean": 200, "sigma": 0.8, "max": 3000},
        "output": 5,
    }
    ids, _out, group = lane.prompts(spread, vocab)
    rng = lane.np.random.default_rng(11)
    assert [len(x) for x in ids] == lane.lengths(spread["prompt"], 400, rng).tolist()  # the lengths drawn, exactly
    assert all(lane.FIRST_ID <= t < vocab for x in ids for t in x)  # never a special token
    assert list(group) == [-1] * 400
    other, _, _ = lane.prompts({**spread, "seed": 12}, vocab)
    heads = [tuple(x[:16]) for x in ids + other if len(x) >= 16]
    assert len(set(heads)) == len(heads)  # no 16-token block (the prefix cache's unit) in common
    shared = {
        "name": "p",
        "seed": 5,
        "num_prompts": 60,
        "prompt": 20,
        "output": 4,
        "prefix": {"groups": 3, "words": 48},
    }
    ids, _, group = lane.prompts(shared, vocab)
    assert {len(x) for x in ids} == {68}
    for i in range(60):
        for j in range(i):
            common = next(k for k in range(68) if ids[i][k] != ids[j][k])
            assert common == (48 if group[i] == group[j] else 0)  # the planned prefix, nothing more


def test_vocabulary_words_cannot_contain_a_special_token():
    """transformers finds special tokens anywhere in a text: with "t0" and "t1" special, "t123" was
    "t1" + an unknown "23", and 128-word prompts reached the server as about 167 tokens."""
    lane = _load("lane")
    for model in ("llama-3.1-8b", "qwen3-32b", "qwen3-30b-a3b"):
        words = lane.vocabulary(_vocab(model))
        assert sorted(words.values()) == list(range(_vocab(model)))
        assert [w for w, i in words.items() if i < len(lane.SPECIAL)] == list(lane.SPECIAL)
        assert not any(s in w for w, i in words.items() if i >= len(lane.SPECIAL) for s in lane.SPECIAL)
        assert all(" " not in w for w in words)


def test_the_tokenizer_is_what_the_tokenizers_library_writes_and_counts_every_word_as_one_token():
    tokenizers = pytest.importorskip("tokenizers")
    lane = _load("lane")
    vocab = _vocab("qwen3-32b")
    lib = tokenizers.Tokenizer(tokenizers.models.WordLevel(lane.vocabulary(vocab), unk_token=lane.SPECIAL[0]))
    lib.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    lib.add_special_tokens(list(lane.SPECIAL))
    assert json.loads(lib.to_str()) == lane.tokenizer_json(vocab)
    tok = tokenizers.Tokenizer.from_str(json.dumps(lane.tokenizer_json(vocab)))
    run = {"name": "t", "seed": 3, "num_prompts": 50, "prompt": {"mean": 300, "sigma": 1.0}, "output": 1}
    for ids in lane.prompts(run, vocab)[0]:
        text = " ".join(lane.word(i) for i in ids)
        assert tok.encode(text).ids == ids and tok.decode(ids) == text


def test_transformers_loads_the_tokenizer_folder_as_it_is(tmp_path):
    """The tokenizer's folder has no config.json: transformers loads tokenizer.json as it is, whatever
    the model (a Qwen2 config.json beside it made transformers 5 build Qwen2's own class)."""
    transformers = pytest.importorskip("transformers")
    lane = _load("lane")
    _mdir, tdir = lane.model_dir(tmp_path, "qwen3-32b")
    assert sorted(p.name for p in tdir.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    tok = transformers.AutoTokenizer.from_pretrained(str(tdir), truncation_side="left")  # as vLLM loads it
    for ids in lane.prompts(
        {"name": "t", "seed": 4, "num_prompts": 20, "prompt": 500, "output": 1}, _vocab("qwen3-32b")
    )[0]:
        assert tok(" ".join(lane.word(i) for i in ids)).input_ids == ids


def _rows(text: str) -> list[dict]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


PLANNED = "client,index,prompt_tokens,output_tokens,group\n0,0,1024,256,-1\n0,1,1024,256,-1\n1,0,1024,256,-1\n"
RECORDED = "client,index,start_s,prompt_tokens,output_tokens,ttft_s,error\n0,0,0.1,1024,256,0.2,\n0,1,0.5,1024,256,0.2,\n1,0,0.1,1024,256,0.3,\n"
COUNTERS = {
    "before": {
        "vllm:prompt_tokens_total": 500,
        "vllm:prefix_cache_hits_total": 7,
        "vllm:prefix_cache_queries_total": 500,
    },
    "after": {
        "vllm:prompt_tokens_total": 3572,
        "vllm:prefix_cache_hits_total": 7,
        "vllm:prefix_cache_queries_total": 3572,
    },
}


def test_the_check_passes_when_the_server_counted_the_plan_and_fails_loudly_otherwise():
    checks = _load("checks")
    ok = checks.check_run(_rows(PLANNED), _rows(RECORDED), COUNTERS)
    assert ok["ok"] and ok["server_prompt_tokens"] == ok["planned_prompt_tokens"] == 3072
    longer = checks.check_run(_rows(PLANNED), _rows(RECORDED.replace("0,1,0.5,1024", "0,1,0.5,1337")), COUNTERS)
    assert not longer["ok"]
    assert longer["problems"] == [
        "1 requests with a prompt length other than planned (client 0 #1: 1024 planned, 1337 recorded)"
    ]
    more = {**COUNTERS, "after": {**COUNTERS["after"], "vllm:prompt_tokens_total": 3600}}
    assert checks.check_run(_rows(PLANNED), _rows(RECORDED), more)["problems"] == [
        "the server counted 3100 prompt tokens (vllm:prompt_tokens_total), the plan 3072"
    ]
    hits = {**COUNTERS, "after": {**COUNTERS["after"], "vllm:prefix_cache_hits_total": 3015}}
    (why,) = checks.check_run(_rows(PLANNED), _rows(RECORDED), hits)["problems"]
    assert why.startswith("the server's prefix cache found 3008 prompt tokens (vllm:prefix_cache_hits_total, 97.9% of")
    assert checks.check_run(_rows(PLANNED), _rows(RECORDED), hits, shares_prefix=True)["ok"]
    failed = RECORDED.replace("1,0,0.1,1024,256,0.3,", "1,0,0.1,1024,0,,Timeout")
    assert checks.check_run(_rows(PLANNED), _rows(failed), COUNTERS)["problems"][0].startswith("1 requests failed")
    assert "not recorded" in checks.check_run(_rows(PLANNED), _rows(RECORDED)[:2], COUNTERS)["problems"][0]
    assert not checks.check_run(_rows(PLANNED), _rows(RECORDED), None)["ok"]  # unread counters: not checked


def _lane_archive(tmp_path, name: str, recorded: str) -> Path:
    """A hand-made results.tar.xz: one lane of one run, as device.sh collect packs it."""
    import tarfile

    src = tmp_path / f"src_{name}"
    run = {"name": "kv", "max_concurrency": 2, "num_prompts": 3, "prompt": 1024, "output": 256, "seed": 1, "clients": 2}
    lane = {
        "name": name,
        "gpus": [0],
        "port": 8100,
        "model": "llama-3.1-8b",
        "serve_args": ["--max-num-seqs", "128"],
        "runs": [run],
    }
    # most timings at the slow of two speeds (their median 8.0), as on h200_cpu6_2026-11-30
    probe = {
        "alone_us": [8.0] * 8 + [4.2, 4.3],
        "per_cpu_us": {"0": 4.25, "1": 8.1},
        "model_name": "Intel(R) Xeon(R) Platinum 8480+",
    }
    meta = {
        "lane": lane,
        "versions": {"vllm": "0.26.0"},
        "prompt_format": "token_ids",
        "host_probe": {"repeat": 15, "before": probe, "after": {"alone_us": [4.4, 8.2, 8.3], "per_cpu_us": {}}},
        "runs": [{"name": "kv", "rc": [0, 0], "commands": ["bench"], "counters": COUNTERS}],
    }
    files = {
        "lane.json": json.dumps(meta),
        "server_lines.log": "INFO GPU KV cache size: 919,744 tokens\n",
        "kv/bench.json": json.dumps(
            [
                {"completed": 2, "duration": 10.0, "output_throughput": 51.2},
                {"completed": 1, "duration": 9.0, "output_throughput": 28.4},
            ]
        ),
        "kv/planned.csv": PLANNED,
        "kv/requests.csv": recorded,
        "kv/metrics.csv": "t,vllm:prompt_tokens_total\n0,500\n10,3572\n",
    }
    for f, text in files.items():
        (src / name / f).parent.mkdir(parents=True, exist_ok=True)
        (src / name / f).write_text(text)
    path = tmp_path / f"{name}.tar.xz"
    with tarfile.open(path, "w:xz") as tar:
        tar.add(src, arcname=".")
    return path


def test_a_stall_is_a_long_pause_with_requests_in_flight_not_a_long_step():
    checks = _load("checks")

    def rows(ts, busy):
        return [
            {"t": str(t), "ctx_requests": "0", "gen_requests": str(b), "ctx_tokens": "0", "gen_tokens": str(b)}
            for t, b in zip(ts, busy)
        ]

    # decode steps of 10 ms, then a 2.5 s pause with 8 requests in flight, then 10 ms steps again
    ts = [0.0, 0.01, 0.02, 2.52, 2.53, 2.54]
    assert checks.stalls(rows(ts, [8] * 6)) == [(2.52, 2.5)]
    # the same pause with nothing in flight is the clients' think time, not a stall
    assert checks.stalls(rows(ts, [8, 8, 0, 8, 8, 8])) == []
    # long prefill steps of 0.85 s and one of 1.7 s beside them (two steps in one log line): no stall
    assert checks.stalls(rows([0.0, 0.85, 1.70, 3.40, 3.47], [3] * 5)) == []
    # a pause at the limit is not over it
    assert checks.stalls(rows([0.0, 0.01, 1.01, 1.02], [4] * 4)) == []

    # a 70B model's 8k-token prefills (1.1 s each, their lines a step late) between 25 ms decodes: as
    # long as the run's other steps of as many prompt tokens, no stall; one of 4 s among them is one
    def waves(prefill_s):
        out, t = [], 0.0
        for s in prefill_s:
            out += [(t, 0), (t + s, 8192)] + [(t + s + 0.025 * k, 0) for k in range(1, 5)]
            t += s + 0.125
        return [
            {"t": str(x), "ctx_requests": str(int(c > 0)), "ctx_tokens": str(c), "gen_requests": "4", "gen_tokens": "4"}
            for x, c in out
        ]

    assert checks.stalls(waves([1.1, 1.12, 1.09, 1.1])) == []
    ((_, stalled),) = checks.stalls(waves([1.1, 1.12, 4.0, 1.1]))
    assert abs(stalled - 4.0) < 1e-9


def test_a_stall_is_also_a_long_wait_for_a_first_token_at_an_idle_server():
    checks = _load("checks")
    lead = checks.STEPS_LEAD_S  # the steps' clock starts this much before the requests'

    def step(t, ctx, gen):
        return {"t": str(t + lead), "ctx_requests": str(int(ctx > 0)), "ctx_tokens": str(ctx), "gen_requests": str(gen)}

    def request(start, ttft, prompt=2048, itl_sum=0.05):
        return {"start_s": str(start), "ttft_s": str(ttft), "itl_sum_s": str(itl_sum), "prompt_tokens": str(prompt)}

    # one prompt at a time: the first prefill waits 3.4 s (a new shape compiling), the next ones 0.08 s
    starts, ttfts = [0.0, 3.5, 3.7, 3.9], [3.4, 0.08, 0.08, 0.08]
    reqs = [request(s, f) for s, f in zip(starts, ttfts)]
    steps = [x for s, f in zip(starts, ttfts) for x in (step(s + f - 0.001, 2048, 0), step(s + f + 0.01, 0, 1))]
    assert checks.stalls(steps) == []  # nothing was in flight before it: the first kind does not see it
    (when, seconds), *more = checks.stalls(steps, reqs)
    assert not more and abs(seconds - 3.399) < 1e-6 and abs(when - (3.399 + lead)) < 1e-6
    # every prefill as long as the first: no stall, only long prompts
    slow = [request(s, 3.4) for s in (0.0, 3.5, 7.0, 10.5)]
    assert checks.stalls([step(s + 3.399, 2048, 0) for s in (0.0, 3.5, 7.0, 10.5)], slow) == []
    # a wave of four sent together waits once; a later wave of the same prompts is quick: one stall
    wave = [request(0.001 * i, 4.0, 1024, 0.99) for i in range(4)]
    wave += [request(5 + 0.001 * i, 0.15, 1024) for i in range(4)]
    decode = [step(4.02 + 0.01 * i, 0, 4) for i in range(98)]  # to 4.99: the wave's last tokens
    steps = [step(3.999, 1024, 0), step(4.01, 3072, 1), *decode, step(5.149, 4096, 0)]
    assert [round(s, 3) for _, s in checks.stalls(steps, wave)] == [3.999]
    # and a prompt longer than every other one has nothing to be compared with
    assert (
        checks.stalls([step(1.999, 8192, 0), step(2.139, 2048, 0)], [request(0.0, 2.0, 8192), request(2.06, 0.08)])
        == []
    )


def test_ingest_checks_every_run_and_writes_nothing_when_one_fails(tmp_path, monkeypatch, capsys):
    import yaml

    ingest = _load("ingest")
    monkeypatch.setattr(ingest, "ROOT", tmp_path)
    monkeypatch.setattr(ingest, "DATA", tmp_path / "data")
    monkeypatch.setattr(ingest, "VALIDATION", tmp_path / "validation")

    def run(archive, *flags):
        monkeypatch.setattr(sys, "argv", ["ingest", str(archive), "--name", "rec", "--gpu", "h200", *flags])
        return ingest.main()

    bad = _lane_archive(tmp_path, "bad", RECORDED.replace("1,0,0.1,1024", "1,0,0.1,1301"))
    assert run(bad) == 2
    assert "CHECK FAILED rec/bad/kv: 1 requests with a prompt length other than planned" in capsys.readouterr().err
    assert not (tmp_path / "data").exists() and not (tmp_path / "validation" / "e2e.yaml").exists()
    assert run(_lane_archive(tmp_path, "good", RECORDED)) == 0
    (entry,) = yaml.safe_load((tmp_path / "validation" / "e2e.yaml").read_text())["runs"]
    assert entry["check"] == {
        "ok": True,
        "planned_prompt_tokens": 3072,
        "server_prompt_tokens": 3072,
        "server_prefix_cache_hits": 0,
    }
    assert entry["host"] == {  # the tenth percentiles: of the 15 timings, of the 12 before, of the 3 after
        "probe_us": 4.25,
        "probe_us_before": 4.25,
        "probe_us_after": 4.4,
        "cpu": "Intel(R) Xeon(R) Platinum 8480+",
    }
    assert entry["lengths"]["prompt"] == 1024 and "confounded" not in entry
    assert (tmp_path / "data" / "rec" / "good" / "kv" / "planned.csv").read_text() == PLANNED
    assert run(bad, "--keep-failed") == 0  # written, marked
    (entry,) = [
        r for r in yaml.safe_load((tmp_path / "validation" / "e2e.yaml").read_text())["runs"] if r["lane"] == "bad"
    ]
    assert entry["confounded"].startswith("check failed: 1 requests with a prompt length other than planned")


def test_ingest_draws_the_plan_again_for_a_run_recorded_without_planned_csv():
    """The recordings made before planned.csv: their requests drawn again from the run's seed (here
    the 2026-11-27 steps lane, whose 128-word prompts the server counted as about 167 tokens)."""
    import csv

    ingest = _load("ingest")
    lane_dir = ROOT / "data" / "e2e" / "h200x2_steps_2026-11-27" / "llama8b_steps"
    meta = json.loads((lane_dir / "lane.json").read_text())
    run = next(r for r in meta["lane"]["runs"] if r["name"] == "steps_c128")
    planned = ingest.planned_rows(run, "llama-3.1-8b", 1)
    assert len(planned) == 384 and {r["prompt_tokens"] for r in planned} == {128}
    files = {f"llama8b_steps/steps_c128/{f}": None for f in ("requests.csv", "metrics.csv")}
    result = ingest.check(
        lambda name: (ROOT / "data" / "e2e" / "h200x2_steps_2026-11-27" / name).read_text(), files, meta, "steps_c128"
    )
    recorded = [int(r["prompt_tokens"]) for r in csv.DictReader((lane_dir / "steps_c128" / "requests.csv").open())]
    assert not result["ok"] and result["server_prompt_tokens"] == sum(recorded) == 64447
    assert result["problems"][0].startswith("384 requests with a prompt length other than planned")


BENCH_DATASETS = """
import csv
import json
from dataclasses import dataclass


@dataclass
class SampleRequest:
    prompt: object
    prompt_len: int
    expected_output_len: int = 0
    request_id: object = None


class CustomDataset:
    def __init__(self, dataset_path=None, random_seed=0, disable_shuffle=False, **kw):
        self.dataset_path, self.random_seed, self.disable_shuffle, self.data = dataset_path, random_seed, disable_shuffle, None
        self.load_data()

    def load_data(self):  # vLLM 0.26's needs a text prompt
        self.data = [json.loads(x) for x in open(self.dataset_path)]
        if "prompt" not in self.data[0]:
            raise ValueError("JSONL file must contain a 'prompt' column.")

    def sample(self, tokenizer, num_requests, request_id_prefix="", **kw):
        return [SampleRequest(r["prompt"], len(r["prompt"].split()), int(r["output_tokens"]), f"{request_id_prefix}{i}")
                for i, r in enumerate(self.data[:num_requests])]
"""


def test_bench_tokens_sends_each_row_of_token_ids_once_in_file_order(tmp_path, monkeypatch):
    import types

    bench_tokens = _load("bench_tokens")
    mod = types.ModuleType("vllm_datasets_standin")
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    exec(BENCH_DATASETS, mod.__dict__)
    bench_tokens.patch(mod)
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt_token_ids": [100 + i] * (i + 1), "output_tokens": 7 + i}) + "\n" for i in range(4))
    )
    reqs = mod.CustomDataset(dataset_path=str(path), disable_shuffle=True).sample(None, 4, request_id_prefix="c1-")
    assert [(r.prompt, r.prompt_len, r.expected_output_len, r.request_id) for r in reqs] == [
        ([100 + i] * (i + 1), i + 1, 7 + i, f"c1-{i}") for i in range(4)
    ]
    with pytest.raises(SystemExit, match="none is repeated"):
        mod.CustomDataset(dataset_path=str(path), disable_shuffle=True).sample(None, 5)
    with pytest.raises(SystemExit, match="--disable-shuffle"):
        mod.CustomDataset(dataset_path=str(path))
    text = tmp_path / "t.jsonl"
    text.write_text(json.dumps({"prompt": "t5 t6 t7", "output_tokens": 3}) + "\n")  # left to vLLM
    (req,) = mod.CustomDataset(dataset_path=str(text), disable_shuffle=True).sample(None, 1)
    assert (req.prompt, req.prompt_len) == ("t5 t6 t7", 3)


STANDIN_SERVER = '''
"""A stand-in for `vllm serve`: /health, /metrics (the counters checks.py reads), /v1/completions
streaming `max_tokens` chunks then the usage. SERVESIM_STANDIN_EXTRA tokens are added to every prompt
it counts; a prompt whose first 16 tokens it saw before counts 16 prefix-cache hits. With
SERVESIM_STANDIN_SGLANG, SGLang's: its metric names, a hit on a prompt's first token alone (a radix
tree), /flush_cache, and its ready line."""
import json, os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

EXTRA = int(os.environ.get("SERVESIM_STANDIN_EXTRA", "0"))
SGLANG = bool(os.environ.get("SERVESIM_STANDIN_SGLANG"))
UNIT = 1 if SGLANG else 16
lock, seen = threading.Lock(), set()
names = ["sglang:prompt_tokens_total", "sglang:cached_tokens_total"] if SGLANG else ["vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"]
count = dict.fromkeys(names, 0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        with lock:
            body = "".join(f'{k}{{engine="0"}} {float(v)}\\n' for k, v in count.items()).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if self.path == "/flush_cache":
            with lock:
                seen.clear()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ids = req["prompt"] if isinstance(req["prompt"], list) else req["prompt"].split()
        n = len(ids) + EXTRA
        with lock:
            hit = UNIT if len(ids) > UNIT and tuple(ids[:UNIT]) in seen else 0
            seen.add(tuple(ids[:UNIT]))
            for k in names:
                count[k] += hit if ("hits" in k or "cached" in k) else n
        chunks = [{"choices": [{"index": 0, "text": f" t{i}"}]} for i in range(req["max_tokens"])]
        chunks.append({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": req["max_tokens"]}})
        body = "".join(f"data: {json.dumps(c)}\\n\\n" for c in chunks).encode() + b"data: [DONE]\\n\\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer.request_queue_size = 256
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
if SGLANG:
    print("The server is fired up and ready to roll!", flush=True)
server.serve_forever()
'''

STANDIN_BENCH = '''
"""`vllm bench serve` as far as lane.py reads it: the dataset's requests sent to /v1/completions at
--max-concurrency, the detailed result (each request's prompt length from the server's usage)."""
import argparse, json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

from vllm.benchmarks.datasets.datasets import CustomDataset


def main():
    assert sys.argv[1:3] == ["bench", "serve"], sys.argv
    ap = argparse.ArgumentParser()
    for flag in ("--base-url", "--endpoint", "--dataset-path", "--result-dir", "--result-filename", "--request-id-prefix"):
        ap.add_argument(flag)
    ap.add_argument("--num-prompts", type=int)
    ap.add_argument("--max-concurrency", type=int, default=16)
    ap.add_argument("--disable-shuffle", action="store_true")
    a, _ = ap.parse_known_args(sys.argv[3:])
    reqs = CustomDataset(dataset_path=a.dataset_path, disable_shuffle=a.disable_shuffle).sample(
        None, a.num_prompts, request_id_prefix=a.request_id_prefix
    )

    def send(r):
        body = json.dumps({"prompt": r.prompt, "max_tokens": r.expected_output_len, "stream": True}).encode()
        out = {"start": time.perf_counter(), "prompt_len": r.prompt_len, "output": 0, "ttft": 0.0, "itl": [], "error": ""}
        try:
            with urllib.request.urlopen(urllib.request.Request(a.base_url + a.endpoint, body)) as resp:
                for line in resp.read().decode().splitlines():
                    if line.startswith("data: {"):
                        d = json.loads(line[6:])
                        if d.get("usage"):
                            out["output"], out["prompt_len"] = d["usage"]["completion_tokens"], d["usage"]["prompt_tokens"]
                        elif out["ttft"]:
                            out["itl"].append(0.001)
                        else:
                            out["ttft"] = time.perf_counter() - out["start"]
        except Exception as e:
            out["error"] = repr(e)
        return out

    with ThreadPoolExecutor(a.max_concurrency) as ex:
        outs = list(ex.map(send, reqs))
    keys = {"input_lens": "prompt_len", "output_lens": "output", "ttfts": "ttft", "itls": "itl", "start_times": "start", "errors": "error"}
    res = {"completed": sum(not o["error"] for o in outs), "duration": 1.0, **{k: [o[v] for o in outs] for k, v in keys.items()}}
    with open(f"{a.result_dir}/{a.result_filename}", "w") as f:
        json.dump(res, f)
'''


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _standins(tmp_path):
    """A stand-in `vllm` package (its benchmark's dataset and CLI) and the stand-in server, under
    ``tmp_path``; the package's folder, for PYTHONPATH."""
    fake = tmp_path / "fake"
    for pkg in ("vllm", "vllm/benchmarks", "vllm/benchmarks/datasets", "vllm/entrypoints", "vllm/entrypoints/cli"):
        (fake / pkg).mkdir(parents=True)
        (fake / pkg / "__init__.py").write_text("")
    (fake / "vllm/benchmarks/datasets/datasets.py").write_text(BENCH_DATASETS)
    (fake / "vllm/entrypoints/cli/main.py").write_text(STANDIN_BENCH)
    (tmp_path / "server.py").write_text(STANDIN_SERVER)
    return fake


def test_a_lane_records_its_runs_and_stops_loudly_at_the_first_that_fails_its_check(tmp_path):
    """lane.py end to end against a stand-in server and a stand-in `vllm bench serve` (no GPU, no
    vLLM): token-id prompts, the host probe around the lane, the server's counters, the check."""
    fake = _standins(tmp_path)

    def lane(name, runs, **kw):
        port = _free_port()
        server = ["python", str(tmp_path / "server.py"), str(port)]
        return {
            "name": name,
            "gpus": [0],
            "port": port,
            "model": "llama-3.1-8b",
            "server_cmd": server,
            "runs": runs,
            **kw,
        }

    runs = [
        {"name": "c4", "max_concurrency": 4, "num_prompts": 13, "prompt": 1024, "output": 8, "seed": 1},
        {
            "name": "two",
            "max_concurrency": 4,
            "num_prompts": 9,
            "prompt": {"mean": 64, "sigma": 0.5},
            "output": 3,
            "seed": 2,
            "clients": 2,
        },
        {
            "name": "shared",
            "max_concurrency": 2,
            "num_prompts": 8,
            "prompt": 8,
            "output": 2,
            "seed": 3,
            "prefix": {"groups": 2, "words": 32},
        },
        {
            "name": "again",
            "max_concurrency": 2,
            "num_prompts": 4,
            "prompt": 1024,
            "output": 2,
            "seed": 1,
        },  # c4's prompts
        {"name": "never", "max_concurrency": 2, "num_prompts": 2, "prompt": 16, "output": 2, "seed": 9},
    ]
    plan = {"lanes": [lane("ok", runs), lane("longer", runs[:1], env={"SERVESIM_STANDIN_EXTRA": "1"})]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {**os.environ, "PYTHONPATH": str(fake)}
    for name in ("ok", "longer"):
        cmd = [sys.executable, str(E2E / "lane.py"), "--plan", str(tmp_path / "plan.json"), "--lane", name]
        done = subprocess.run(
            cmd + ["--root", str(tmp_path / "root"), "--probe-repeat", "1", "--probe-objects", "4096"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stdout + done.stderr
    out = tmp_path / "root" / "results" / "ok"
    meta = json.loads((out / "lane.json").read_text())
    assert meta["prompt_format"] == "token_ids"
    assert [r["name"] for r in meta["runs"]] == ["c4", "two", "shared", "again"]  # stopped at the failed one
    assert [r["check"]["ok"] for r in meta["runs"]] == [True, True, True, False]
    assert meta["runs"][0]["check"]["server_prompt_tokens"] == 13 * 1024
    assert meta["runs"][2]["check"]["server_prefix_cache_hits"] > 0  # planned: passes
    (why,) = meta["runs"][3]["check"]["problems"]
    assert why.startswith(
        "the server's prefix cache found 64 prompt tokens (vllm:prefix_cache_hits_total, 1.6% of 4096"
    )
    assert "run again failed its check" in meta["error"] and (out / "FAILED").read_text().startswith("RuntimeError")
    assert {"before", "after"} <= set(meta["host_probe"]) and meta["host_probe"]["after"]["alone_us_median"] > 0
    wide = meta["host_probe"]["after"]["wide_ns"]  # the reading that misses the caches
    assert wide["in_order_ns"] > 0 and wide["shuffled_ns"] > 0
    assert (out / "two" / "planned.csv").read_text().count("\n") == 10 and not list(out.glob("*/dataset*.jsonl"))
    # the server's processes' CPU seconds, read from /proc once a second: the stand-in server is the
    # session's leader, its readings never fall
    rows = list(csv.DictReader((out / "c4" / "cpu.csv").open()))
    cpu = [r for r in rows if not r["process"].startswith("client:")]
    assert cpu and {r["pid"] for r in cpu} == {str(meta["runs"][0]["server_pid"])}
    # the benchmark's client read beside it (when it ran through a reading), and every row's CPU
    assert {int(r["pid"]) for r in rows if r not in cpu} <= set(meta["runs"][0]["client_pids"])
    assert meta["runs"][0]["client_pids"] and all(int(r["cpu"]) >= 0 for r in rows)
    seconds = [float(r["cpu_s"]) for r in cpu]
    assert seconds == sorted(seconds) and seconds[0] > 0
    # every CPU's /proc/stat time once a second, each reading the same CPUs, ticks never falling
    stat = list(csv.DictReader((out / "c4" / "stat.csv").open()))
    by_cpu: dict = {}
    for r in stat:
        by_cpu.setdefault(r["cpu"], []).append(int(r["idle"]) + int(r["user"]) + int(r["steal"]))
    assert by_cpu and len({len(v) for v in by_cpu.values()}) == 1
    assert all(v == sorted(v) for v in by_cpu.values())
    # the machine read under load beside the run: its rows on metrics.csv's clock (none, for a run
    # shorter than the watch's first reading)
    watch = (out / "c4" / "watch.csv").read_text().splitlines()
    assert watch[0] == "t,kernel_us,in_order_ns,shuffled_ns,cpu" and not list(out.glob("*/watch_raw.csv"))
    assert "--tokenizer" in meta["runs"][0]["commands"][0] and "bench_tokens.py" in meta["runs"][0]["commands"][0]
    longer = json.loads((tmp_path / "root" / "results" / "longer" / "lane.json").read_text())
    assert longer["runs"][0]["check"]["problems"] == [
        "13 requests with a prompt length other than planned (client 0 #0: 1024 planned, 1025 recorded; "
        "client 0 #1: 1024 planned, 1025 recorded; client 0 #2: 1024 planned, 1025 recorded)",
        "the server counted 13325 prompt tokens (vllm:prompt_tokens_total), the plan 13312",
    ]


def test_the_host_probe_watch_reads_the_machine_until_it_is_stopped(tmp_path):
    """host_probe.py --watch: a row every interval (the kernel, the wide objects in order and
    shuffled, the CPU), until SIGTERM, after which it ends cleanly with every row whole."""
    import time

    out = tmp_path / "watch.csv"
    p = subprocess.Popen(
        [sys.executable, str(E2E / "host_probe.py"), "--out", str(out), "--watch", "0.1", "--objects", "4096"]
    )
    deadline = time.time() + 90
    while time.time() < deadline and (not out.is_file() or out.read_text().count("\n") < 3):
        time.sleep(0.2)
    p.terminate()
    assert p.wait(timeout=60) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) >= 2
    assert all(float(r["kernel_us"]) > 0 and float(r["in_order_ns"]) > 0 and float(r["shuffled_ns"]) > 0 for r in rows)
    t = [float(r["t"]) for r in rows]
    assert t == sorted(t) and t[1] - t[0] >= 0.1
    assert all(int(r["cpu"]) >= 0 for r in rows)
    bad = subprocess.run(
        [sys.executable, str(E2E / "host_probe.py"), "--out", str(tmp_path / "x.json"), "--objects", "0"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1].endswith("--objects must be at least 1 (got 0)")


def test_an_sglang_lane_flushes_the_cache_and_reads_sglangs_counters(tmp_path):
    """An SGLang lane (the stand-in speaking SGLang's metric names, its prefix cache matching a
    prompt's first token): a run that repeats an earlier run's prompts passes after /flush_cache,
    the counters are read under the vLLM names they stand for, and no two prompts of a run share a
    first token."""
    fake = _standins(tmp_path)
    port = _free_port()
    runs = [
        {"name": "a", "max_concurrency": 4, "num_prompts": 12, "prompt": 32, "output": 3, "seed": 1},
        {"name": "again", "max_concurrency": 4, "num_prompts": 12, "prompt": 32, "output": 3, "seed": 1},
    ]
    lane_ = {
        "name": "sg",
        "gpus": [0],
        "port": port,
        "model": "llama-3.1-8b",
        "framework": "sglang",
        "server_cmd": ["python", str(tmp_path / "server.py"), str(port)],
        "env": {"SERVESIM_STANDIN_SGLANG": "1"},
        "runs": runs,
    }
    (tmp_path / "plan.json").write_text(json.dumps({"lanes": [lane_]}))
    cmd = [sys.executable, str(E2E / "lane.py"), "--plan", str(tmp_path / "plan.json"), "--lane", "sg"]
    done = subprocess.run(
        cmd + ["--root", str(tmp_path / "root"), "--probe-repeat", "1", "--probe-objects", "4096"],
        env={**os.environ, "PYTHONPATH": str(fake)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    meta = json.loads((tmp_path / "root" / "results" / "sg" / "lane.json").read_text())
    assert [r["check"]["ok"] for r in meta["runs"]] == [True, True]
    assert all(r["flush_cache"].startswith("200") for r in meta["runs"])
    assert meta["runs"][1]["counters"]["after"]["vllm:prompt_tokens_total"] == 2 * 12 * 32
    assert meta["runs"][1]["check"]["server_prefix_cache_hits"] == 0
    lane = _load("lane")
    ids, _, _ = lane.prompts({"num_prompts": 60, "prompt": 4, "output": 1, "seed": 5}, 170, distinct_first=True)
    assert len({x[0] for x in ids}) == 60 and min(x[0] for x in ids) >= lane.FIRST_ID
    plain, _, _ = lane.prompts({"num_prompts": 60, "prompt": 4, "output": 1, "seed": 5}, 170)
    assert len({x[0] for x in plain}) < 60  # 60 draws of 70 ids repeat some


def test_sglang_series_stand_for_vllms_and_a_retraction_allows_the_hits_it_brings():
    lane, checks = _load("lane"), _load("checks")
    page = (
        'sglang:prompt_tokens_total{model_name="m"} 100.0\n'
        'sglang:cached_tokens_total{model_name="m"} 7.0\n'
        'sglang:num_retracted_requests_total{model_name="m"} 2.0\n'
        'vllm:prompt_tokens_total{engine="0"} 5.0\n'
    )
    row = lane.parse_metrics(page, 0.0, checks.COUNTERS, lane.SGLANG_AS_VLLM)
    assert row == {
        "t": 0.0,
        "vllm:prompt_tokens_total": 100.0,
        "vllm:prefix_cache_queries_total": 100.0,
        "vllm:prompt_tokens_cached_total": 7.0,
        "vllm:prefix_cache_hits_total": 7.0,
        "vllm:num_preemptions_total": 2.0,
    }
    planned = [{"client": 0, "index": 0, "prompt_tokens": 100, "output_tokens": 1}]
    recorded = [{"client": 0, "index": 0, "prompt_tokens": 100, "output_tokens": 1, "error": ""}]
    counters = {"before": dict.fromkeys(row, 0.0) | {"t": 0.0}, "after": row}
    assert not checks.check_run(planned, recorded, counters)["ok"]  # vLLM: a hit is a shared prefix
    res = checks.check_run(planned, recorded, counters, sglang=True)
    assert res["ok"] and res["server_retracted"] == 2
    counters["after"] = row | {"vllm:num_preemptions_total": 0.0}
    assert not checks.check_run(planned, recorded, counters, sglang=True)["ok"]


def test_sglangs_decode_batch_lines_give_its_mean_step():
    """decode_batches.csv from an SGLang server's log: 753 running requests at 12,223 tokens/s are a
    61.6 ms step; an idle interval's zero rate gives no step; other lines are left out."""
    ingest = _load("ingest")
    log = (
        "[2026-11-30 19:09:17] Decode batch, #running-req: 753, #token: 825288, token usage: 0.91, cuda graph: False, "
        "gen throughput (token/s): 12223.08, #queue-req: 14\n"
        "[2026-11-30 19:09:18 TP0] Prefill batch, #new-seq: 2, #new-token: 256\n"
        "[2026-11-30 19:09:19] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 0.00, #queue-req: 0\n"
    )
    rows = ingest.decode_batches(log).splitlines()
    assert rows[0].startswith("time,running") and len(rows) == 3
    assert rows[1] == "2026-11-30 19:09:17,753,825288,0.91,False,12223.08,14,61.60"
    assert rows[2].endswith(",True,0.00,0,")


def test_how_a_lanes_server_set_its_routers_is_found_from_its_log():
    ingest = _load("ingest")
    zeroed = "(EngineCore pid=1487) uniform routing: zeroed 36 router biases"
    redrew = "(EngineCore pid=1409) uniform routing: zeroed 24 router biases, redrew 24 router weights"
    quiet = redrew + ", expert biases zeroed: 48"
    noise = quiet + ", router logits random"
    assert ingest.routing(zeroed) == "dummy"  # the first version: routing stayed concentrated
    assert ingest.routing("INFO start\n" + redrew + "\nINFO ready") == "redrawn"  # the second: so did it
    assert ingest.routing(redrew.replace("redrew 24", "redrew 0")) == "dummy"
    assert ingest.routing("INFO start\n" + quiet + "\nINFO ready") == "redrawn"  # the third: so did it
    assert ingest.routing("INFO start\n" + noise + "\nINFO ready") == "spread"  # the fourth spread it
    assert ingest.routing("INFO nothing about routing") == "dummy"


def test_uniform_routing_patches_vllms_dummy_loader_only_as_the_sites_sitecustomize(tmp_path, monkeypatch):
    import importlib.util

    pkg = tmp_path / "vllm" / "model_executor" / "model_loader"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "vllm", tmp_path / "vllm" / "model_executor", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "dummy_loader.py").write_text(
        "class DummyModelLoader:\n    def load_weights(self, model, config):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    before = list(sys.meta_path)

    def load(as_name: str):
        spec = importlib.util.spec_from_file_location(as_name, E2E / "uniform_routing.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)

    load("uniform_routing")  # imported for its constants: installs nothing
    assert sys.meta_path == before
    load("sitecustomize")
    try:
        from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader

        assert DummyModelLoader.load_weights.__qualname__ == "_patch.<locals>.load_weights"
    finally:
        sys.meta_path[:] = before
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


def test_a_lane_turns_its_servers_iteration_log_off_only_when_asked():
    lane = _load("lane")
    base = {"name": "x", "gpus": [0], "port": 8100, "model": "llama-3.1-8b", "serve_args": ["--max-num-seqs", "64"]}
    logged = lane.server_command(base, Path("/m"), Path("/t"))
    unlogged = lane.server_command({**base, "iteration_log": False}, Path("/m"), Path("/t"))
    assert "--enable-logging-iteration-details" in logged
    assert "--enable-logging-iteration-details" not in unlogged
    assert [a for a in logged if a != "--enable-logging-iteration-details"] == unlogged


def test_the_overlap_plans_send_every_run_its_own_prompts():
    """The light-load lanes and the logged/unlogged pair: one seed a run, none shared with another plan,
    and the pair's two lanes alike but for the iteration log."""
    plans = _load("plans")
    lanes = plans.overlap_lanes() + plans.overlap_log_lanes()
    seeds = [r["seed"] for x in lanes for r in x["runs"]]
    assert len(set(seeds)) == len(seeds)
    others = {
        r.get("seed")
        for path in (E2E / "plans").glob("*.json")
        if not path.name.startswith("overlap")
        for x in json.loads(path.read_text())["lanes"]
        for r in x["runs"]
    }
    assert not set(seeds) & others
    logged, unlogged = plans.overlap_log_lanes()
    assert logged["iteration_log"] and not unlogged["iteration_log"]
    assert [(r["name"], r.get("max_concurrency"), r.get("request_rate")) for r in logged["runs"]] == [
        (r["name"], r.get("max_concurrency"), r.get("request_rate")) for r in unlogged["runs"]
    ]
    for path, got in (
        ("overlap_h200.json", plans.overlap_lanes()),
        ("overlap_log_h200.json", plans.overlap_log_lanes()),
    ):
        assert json.loads((E2E / "plans" / path).read_text()) == {"lanes": got}


def test_a_step_timing_becomes_a_profile_at_the_mean_context_of_its_decodes():
    """Hand-computed: prompts of 32 tokens, a step taken between a 16- and an 80-token generation
    averages the decodes at contexts 48 to 111: 79.5, written 80; batches above --upto are left out.
    The served GEMMs' efficiency: the model's dense weights and LM head over the GEMM kernels' time."""
    sp = _load("steps_profile")
    timing = {
        "model": "llama-3.1-8b",
        "short": 16,
        "long": 80,
        "async_scheduling": True,
        "rows": [{"batch": 1, "step_ms": 4.9}, {"batch": 256, "step_ms": 9.8}, {"batch": 384, "step_ms": 17.0}],
    }
    assert sp.rows(timing, "h200", 256) == [
        ["h200", "llama-3.1-8b", 1, 1, 80, 4.9],
        ["h200", "llama-3.1-8b", 256, 1, 80, 9.8],
    ]
    prof = {
        "model": "llama-3.1-8b",
        "profiles": [
            {
                "batch": 1,
                "top": [
                    {"name": "nvjet_sm90_tst_128x8", "ms": 3.0},
                    {"name": "void cublasLt::splitKreduce_kernel", "ms": 0.5},
                    {"name": "flash::FlashAttnFwdSm90", "ms": 0.3},
                ],
            }
        ],
    }
    eff, nbytes, ms = sp.gemm_efficiency(prof, "h200")
    assert ms == 3.5
    assert nbytes == pytest.approx(6979321856 * 2 + 1050673152, rel=1e-9)  # Llama-3.1-8B's linears + LM head, bf16
    assert eff == pytest.approx(nbytes / 3.5e-3 / 4.8e12, rel=1e-12)


def test_several_step_timings_become_one_profile_in_turn(tmp_path, monkeypatch):
    """Two timings of one GPU (one with two sets of prompts, one with prompts spread over a range):
    their rows in the order given, each at its own mean prompt plus the decodes' mean (47.5 tokens
    between a 16- and an 80-token generation), 559.5 written 560; one taken without async scheduling
    is refused, naming its file."""
    sp = _load("steps_profile")
    base = {"model": "llama-3.1-8b", "short": 16, "long": 80, "async_scheduling": True}
    even = {
        **base,
        "rows": [{"batch": 8, "mean_prompt": 32.0, "step_ms": 6.2}, {"batch": 8, "mean_prompt": 512.0, "step_ms": 6.5}],
    }
    spread = {**base, "rows": [{"batch": 512, "prompts": "64-1088", "mean_prompt": 576.0, "step_ms": 27.0}]}
    paths = []
    for name, doc in (("even.json", even), ("spread.json", spread), ("sync.json", {**even, "async_scheduling": False})):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    out = tmp_path / "steps.csv"
    args = ["steps_profile.py", *paths[:2], "--gpu", "h100-sxm", "--upto", "512", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", args)
    assert sp.main() == 0
    with out.open() as fh:
        got = list(csv.reader(fh))
    assert got[1:] == [
        ["h100-sxm", "llama-3.1-8b", "8", "1", "80", "6.2"],
        ["h100-sxm", "llama-3.1-8b", "8", "1", "560", "6.5"],
        ["h100-sxm", "llama-3.1-8b", "512", "1", "624", "27.0"],
    ]
    monkeypatch.setattr(sys, "argv", [*args[:2], paths[2], *args[3:]])
    with pytest.raises(SystemExit, match=r"sync\.json: not taken with async scheduling on"):
        sp.main()


def test_prefills_time_one_request_of_each_length_after_an_untimed_one():
    """``moe_steps.prefills`` with a stand-in engine: one request a generation, one token each, prompts
    of the asked length and of their own, one untimed then ``repeats`` timed; the median is reported."""
    import random

    ms = _load("moe_steps")
    seen = []

    class Engine:
        def generate(self, prompts, sp, use_tqdm=False):
            assert len(prompts) == 1 and sp == {"max_tokens": 1, "temperature": 0.0}
            seen.append(tuple(prompts[0]["prompt_token_ids"]))

    rows = ms.prefills(Engine(), lambda **k: k, [16, 128], 1000, random.Random(0), repeats=3)
    assert [r["prompt"] for r in rows] == [16, 128]
    assert [len(p) for p in seen] == [16] * 4 + [128] * 4
    assert len(set(seen)) == len(seen)  # prompts of their own
    for r in rows:
        assert len(r["all_ms"]) == 3 and r["all_ms"] == sorted(r["all_ms"]) and r["ms"] == r["all_ms"][1]


def test_prompt_lengths_even_or_spread_with_the_same_mean():
    """``moe_steps.prompt_lengths``: ``N`` gives every request N tokens; ``LO-HI`` spreads them evenly
    from LO to HI (hand-computed for 5 requests: 64, 192, 320, 448, 576), in a shuffled order."""
    import random

    ms = _load("moe_steps")
    assert ms.prompt_lengths("320", 4, random.Random(0)) == [320] * 4
    spread = ms.prompt_lengths("64-576", 5, random.Random(0))
    assert sorted(spread) == [64, 192, 320, 448, 576] and sum(spread) / 5 == 320
    assert ms.prompt_lengths("64-576", 1, random.Random(0)) == [64]


def test_step_gaps_splits_a_steps_idle_time_between_the_graph_the_work_outside_it_and_a_late_host():
    """``step_gaps.gaps`` on a hand-built trace (us): three replays of a two-kernel graph (launched at
    0, 100 and 250), each kernel 40 long with 5 idle between them; one sampler kernel after each of the
    first two graphs, launched in time after the first and 30 late after the second; a prefill's
    one-kernel graph before them all, which is no decode step."""
    sg = _load("step_gaps")
    ev = []

    def kernel(ts, dur, corr, name="k"):
        ev.append({"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"correlation": corr}})

    def launch(ts, corr, name="cudaLaunchKernel"):
        ev.append({"cat": "cuda_runtime", "name": name, "ts": ts, "dur": 1, "args": {"correlation": corr}})

    launch(-60, 9, "cudaGraphLaunch")
    kernel(-50, 30, 9, "prefill")
    for i, start in enumerate((0, 100, 250)):
        launch(start - 10, i, "cudaGraphLaunch")
        kernel(start, 40, i, "a")
        kernel(start + 45, 40, i, "b")
    launch(80, 10)  # before the first graph ends at 85: queued
    kernel(90, 5, 10, "sample")
    launch(215, 11)  # after the second graph ends at 185: late
    kernel(215, 5, 11, "sample")
    g = sg.gaps(ev, min_gap_us=3.0)
    d = g["decode"]
    assert d["steps"] == 2 and d["graph_kernels"] == 2
    assert d["interval_ms"] == pytest.approx(0.125)  # graph to graph: 100 and 150
    assert d["graph_ms"] == pytest.approx(0.085) and d["graph_busy_ms"] == pytest.approx(0.080)
    assert d["graph_idle_ms"] == pytest.approx(0.005)
    assert d["outside_ms"] == pytest.approx(0.040) and d["outside_busy_ms"] == pytest.approx(0.005)
    # Idle stretches of 3 us or more, summed over the generation and shared over its steps (two + 1).
    # Host late (the next kernel launched after the GPU fell idle): the first graph (launched at -10,
    # the GPU idle since -20: 20), the second sampler (launched at 215, idle since 185: 30), the third
    # graph (launched at 240, idle since 220: 30). Queued: 5 inside each graph, and 5 either side of the
    # first sampler (launched at 80, before the graph ended at 85).
    assert g["idle_host_late_ms_per_step"] == pytest.approx((20 + 30 + 30) / 3 / 1e3)
    assert g["idle_queued_ms_per_step"] == pytest.approx((3 * 5 + 5 + 5) / 3 / 1e3)
    # within the decode steps (after the first graph starts, up to the last's): the last two, per step
    assert g["idle_host_late_in_decode_ms_per_step"] == pytest.approx((30 + 30) / 2 / 1e3)


def test_jit_probe_lists_each_compiled_variant_with_its_signature(tmp_path):
    """``jit_probe.kernels`` reads a Triton cache: one entry per compiled variant (a folder), named
    by its metadata, with the signature line of its TTIR; group files and unreadable metadata skipped."""
    jp = _load("jit_probe")
    a = tmp_path / "AAA"
    a.mkdir()
    (a / "_topk_forward.json").write_text(json.dumps({"name": "_topk_forward", "num_warps": 4, "num_stages": 3}))
    (a / "_topk_forward.ttir").write_text("module {\n  tt.func public @_topk_forward(%n_rows: i32) {\n  }\n}\n")
    (a / "__grp___topk_forward.json").write_text(json.dumps({"child_paths": {}}))
    b = tmp_path / "BBB"
    b.mkdir()
    (b / "broken.json").write_text("{not json")
    got = jp.kernels(tmp_path)
    assert list(got) == ["AAA"]
    assert got["AAA"]["name"] == "_topk_forward" and got["AAA"]["num_warps"] == 4
    assert got["AAA"]["signature"].startswith("tt.func public @_topk_forward(%n_rows: i32)")


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("xz") is None, reason="needs bash and xz")
def test_a_device_call_that_ends_waiting_packs_what_its_lanes_finished(tmp_path):
    """device.sh: a call whose last phase is ``wait`` collects after it (the machine may go back
    before the next call), and one that names ``collect`` after its wait packs once."""
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "results" / "l1").mkdir(parents=True)
    (root / "logs").mkdir()
    (root / "logs" / "started").write_text("l1\n")
    (root / "results" / "l1" / "DONE").write_text("")
    (root / "results" / "l1" / "lane.json").write_text("{}")
    (root / "logs" / "l1.log").write_text("lane log\n")
    out.mkdir()
    env = {**os.environ, "E2E": str(root), "OUT": str(out)}

    def call(*phases):
        r = subprocess.run(
            ["bash", str(E2E / "device.sh"), *phases], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        return [line for line in r.stdout.splitlines() if line.startswith("=== ")]

    phases = call("wait", "5")
    assert [p.split(" ")[1] for p in phases] == ["wait", "collect"]
    listed = subprocess.run(["tar", "-tJf", str(out / "results.tar.xz")], capture_output=True, text=True).stdout
    assert "./l1/lane.json" in listed.split() and "./l1.log" in listed.split()
    (out / "results.tar.xz").unlink()
    assert [p.split(" ")[1] for p in call("wait", "5", "collect")] == ["wait", "collect"]
    assert (out / "results.tar.xz").is_file()
    (out / "results.tar.xz").unlink()
    assert [p.split(" ")[1] for p in call("plain")] == ["plain"]  # no wait: nothing packed
    assert not (out / "results.tar.xz").exists()


def test_the_host_sweep_figure_joins_only_simulated_points(tmp_path, monkeypatch, capsys):
    """`figures.py --hosts`, the H100 figure: servesim's lines are simulated at every max_num_seqs of
    the grid (a machine that recorded 128 and 1,024 only gets 256 and 512 simulated, from its nearest
    run, not a straight line across them), the servers' marks sit at what each recorded, one legend
    names every machine, and the table has a row per recorded run. The simulation is stubbed: a
    point's TPOT is its max_num_seqs over 10, so a line's values say which setting was simulated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = _load("figures")
    assert figures._nearest([{"engine": {"max_num_seqs": m}} for m in (128, 512)], 256)["engine"] == {
        "max_num_seqs": 128
    }  # the smaller of two as near
    monkeypatch.setattr(figures, "simulate", lambda sc: sc)
    monkeypatch.setattr(
        figures,
        "summarize",
        lambda sc: {
            "median_tpot_ms": sc.engine.max_num_seqs / 10,
            "output_throughput": 1000.0,
            "median_ttft_ms": 1.0,
        },
    )
    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    figures.host_sweep_figure(tmp_path, plt, "h100-sxm")
    assert (tmp_path / "recorded_host_sweep_h100.png").stat().st_size > 10_000
    tpot = drawn[0].axes[0]
    lines = [ln for ln in tpot.get_lines() if ln.get_linestyle() != "None"]
    marks = [ln for ln in tpot.get_lines() if ln.get_linestyle() == "None"]
    machines = figures.HOST_SWEEPS["h100-sxm"]
    assert len(lines) == len(marks) >= len(machines)
    for ln in lines:
        assert list(ln.get_xdata()) == figures.GRID and list(ln.get_ydata()) == [n / 10 for n in figures.GRID]
    recorded = {
        (r["recording"], r["engine"]["max_num_seqs"])
        for r in figures.validate.load(figures.validate.E2E_FILE)["runs"]
        if r["recording"] in {m[0] for m in machines} and r["run"] in ("kv", "decode") and r["model"] == "llama-3.1-8b"
    }  # (a machine's other models' runs, such as h100_kv32_2026-12-06's Qwen3-32B sweep, are not drawn)
    by_marker = {marker: recording for recording, marker, _ in machines}
    assert {(by_marker[ln.get_marker()], int(x)) for ln in marks for x in ln.get_xdata()} == recorded
    legend = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert all(any(t.startswith(m[0]) for t in legend) for m in machines), legend
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| h100_")]
    assert len(rows) == sum(len(ln.get_xdata()) for ln in marks)


SERVER_LOG = "t,iteration,ctx_requests,ctx_tokens,gen_requests,gen_tokens,elapsed_ms,kv_usage_pct\n"
REPLAY_LOG = (
    "step,start,duration,num_running,num_waiting,num_swapped,kv_usage,num_free_blocks,num_seqs,"
    "prefill_tokens,decode_tokens,recomputed_tokens,num_preemptions,num_generated,num_finished\n"
)


def _spacing_logs(tmp_path: Path, server_rows: str, replay_rows: str) -> tuple[Path, Path]:
    """A recorded run's folder and a replay's, each with its steps.csv of the rows given."""
    run, replay = tmp_path / "run", tmp_path / "replay"
    run.mkdir()
    replay.mkdir()
    (run / "steps.csv").write_text(SERVER_LOG + server_rows)
    (replay / "steps.csv").write_text(REPLAY_LOG + replay_rows)
    return run, replay


def test_step_spacing_bins_both_sides_by_cache_usage(tmp_path, capsys):
    """`step_spacing.py`: the server's step is the spacing of its iteration log's time stamps, servesim's
    its step's duration; only decode-only steps of --min-decodes or more count, binned by KV usage.
    Hand-made logs: the server's counted steps at 10% usage come 20 and 22 ms apart (a step with a
    prefill and one of too few decodes left out), at 50% 30 ms; servesim's take 22 and 24 ms at 10%
    and 33 at 50%: medians 21.0 against 23.0 ms (+9.5%) and 30.0 against 33.0 (+10.0%)."""
    step_spacing = _load("step_spacing")
    run, replay = _spacing_logs(
        tmp_path,
        "0.000,1,0,0,512,512,15,10\n"
        "0.020,2,0,0,512,512,16,10\n"
        "0.042,3,1,64,511,511,17,10\n"  # a prefill beside: not counted
        "0.070,4,0,0,100,100,5,10\n"  # too few decodes
        "0.080,5,0,0,512,512,25,50\n"
        "0.110,6,0,0,512,512,25,50\n",
        "0,0.000,0.022,512,0,0,0.1,0,512,0,512,0,0,512,0\n"
        "1,0.022,0.024,512,0,0,0.1,0,512,0,512,0,0,512,0\n"
        "2,0.046,0.033,512,0,0,0.5,0,512,0,512,0,0,512,0\n"
        "3,0.079,0.010,1,0,0,0.5,0,1,64,0,0,0,0,0\n",
    )
    assert step_spacing.server_steps(run, 500) == [
        (0.1, pytest.approx(20.0), 15.0),
        (0.1, pytest.approx(22.0), 16.0),
        (0.5, pytest.approx(30.0), 25.0),
    ]
    rows = step_spacing.table(step_spacing.server_steps(run, 500), step_spacing.servesim_steps(replay, 500))
    assert rows[2] == "| 0%-20% | 2 | 21.0 | 15.5 | 2 | 23.0 | 23.0 | +9.5% |"
    assert rows[3] == "| 40%-60% | 1 | 30.0 | 25.0 | 1 | 33.0 | 33.0 | +10.0% |"
    assert len(rows) == 4
    # a run without such steps says so and fails, rather than print an empty table
    import sys

    saved = sys.argv
    sys.argv = ["step_spacing.py", str(run), str(replay), "--min-decodes", "1000"]
    try:
        assert step_spacing.main() == 1
    finally:
        sys.argv = saved
    assert "no decode-only step of 1000 or more" in capsys.readouterr().out


def test_step_spacing_counts_steps_with_a_full_chunk_when_asked(tmp_path):
    """`step_spacing.py --min-prefill N`: only steps prefilling N tokens or more beside --min-decodes
    decodes count, on both sides (the server's ctx_tokens, servesim's prefill_tokens); without it a
    step with any prefill is left out. Hand-made logs: the server's chunked steps come 200 and 220 ms
    apart, servesim's take 190 and 200: medians 210.0 against 195.0 (-7.1%)."""
    step_spacing = _load("step_spacing")
    run, replay = _spacing_logs(
        tmp_path,
        "0.000,1,8,8000,400,400,180,50\n"
        "0.200,2,8,7800,410,410,185,50\n"
        "0.420,3,1,1000,500,500,40,50\n"  # too small a chunk
        "0.460,4,0,0,512,512,30,50\n"  # no chunk at all
        "0.490,5,0,0,512,512,30,50\n",
        "0,0.000,0.190,408,0,0,0.5,0,408,8000,400,0,0,408,0\n"
        "1,0.190,0.200,418,0,0,0.5,0,418,7800,410,0,0,418,0\n"
        "2,0.390,0.030,512,0,0,0.5,0,512,0,512,0,0,512,0\n",
    )
    server = step_spacing.server_steps(run, 100, 7500)
    assert [round(s[1], 6) for s in server] == [200.0, 220.0]
    rows = step_spacing.table(server, step_spacing.servesim_steps(replay, 100, 7500))
    assert rows[2:] == ["| 40%-60% | 2 | 210.0 | 182.5 | 2 | 195.0 | 195.0 | -7.1% |"]
    assert [round(s[1], 6) for s in step_spacing.server_steps(run, 100)] == [30.0]  # decode-only, as before
