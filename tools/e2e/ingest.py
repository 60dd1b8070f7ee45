"""Unpack an end-to-end recording (`device.sh collect`'s results.tar.xz) into the repository.

    python tools/e2e/ingest.py RESULTS.tar.xz --name h200_2026-11-27 --gpu h200 [--plan tools/e2e/plans/wave1_h200.json ...]

Writes:
- data/e2e/NAME/LANE/: lane.json (serve command, versions, timings), server.log (the server's lines
  without progress bars), for an SGLang lane decode_batches.csv (its scheduler's `Decode batch` lines,
  every 40 steps: ``decode_batches``), and per run RUN/: bench.json (`vllm bench serve`'s summary), requests.csv
  (a row per request in the order the benchmark sent them: start, server-side prompt tokens, output
  tokens, TTFT, ITL quantiles), metrics.csv (/metrics once a second), itl_quantiles.csv, and
  steps.csv (the engine's iteration log, one API server only: time, requests and tokens per step),
  cpu.csv where the lane read it (each server process's CPU seconds so far, once a second), and
  stat.csv and watch.csv (every CPU's /proc/stat time, the machine read under load) likewise;
- simulator/data/validation/e2e/NAME_LANE_RUN.csv: the run's requests as a servesim trace (recorded
  arrival times for Poisson runs; order only for closed loops);
- simulator/data/validation/e2e.yaml: one entry per run (what ran, the measured figures, the KV pool
  and memory profile the server logged, the server's preemptions and KV usage, the host's probe
  reading around the lane, the run's check), with its split: within each lane, runs alternate
  calibrate / heldout in the order they ran, starting with calibrate (fixed before anything was
  fitted).

Every run is checked first (checks.py: each request's prompt exactly the planned tokens, as the server
counted them, and no prefix-cache hit unless the plan shares prefixes; the planned lengths from the
run's planned.csv, or drawn again from its seed for runs recorded before it was kept). If any run
fails, nothing is written and the reasons are printed, unless `--keep-failed`: then the failing runs
are written marked confounded, with the reason.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import statistics
import sys
import tarfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
import checks  # noqa: E402
import uniform_routing  # noqa: E402

from simulator.commands import probe_host  # noqa: E402  (standard library only, like the rest here)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data" / "e2e"
VALIDATION = ROOT / "simulator" / "data" / "validation"
# A lane whose server drew its routers' weights again (uniform_routing.py) was meant to choose its experts as
# a trained model does, but its decode steps were as short as with dummy routing (data/e2e/README.md,
# h200_gptoss_spread_2026-11-29): which experts its steps read is not known. Its runs are replayed as
# dummy routing is priced and reported, not counted.
ROUTING_NOTE = (
    "routing not known: the server drew its routers' weights again (tools/e2e/uniform_routing.py), yet its "
    "decode steps were as short as with dummy routing (data/e2e/README.md, h200_gptoss_spread_2026-11-29)"
)
# servesim's names for the models served: the recorder's config.json files (tools/e2e/models/) are named
# as servesim names the models
MODELS = {p.stem: p.stem for p in sorted((HERE / "models").glob("*.json"))}
MEASURED = (
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


def server_facts(log: str) -> dict:
    """The KV pool and memory profile a vLLM server logs at start-up; an SGLang server's pool and the
    settings it chose (its scheduler's line: sglang/srt/managers/scheduler.py, 0.5.16)."""
    if m := re.search(
        r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
        r"max_running_requests=(\d+), context_len=(\d+)",
        log,
    ):
        out = dict(
            zip(
                (
                    "kv_cache_tokens",
                    "chunked_prefill_size",
                    "max_prefill_tokens",
                    "max_running_requests",
                    "context_len",
                ),
                map(int, m.groups()),
            )
        )
        for key, pattern in (
            ("mem_fraction_static", r"mem_fraction_static=([\d.]+)"),
            ("cuda_graph_max_bs", r"cuda_graph_max_bs=(\d+)"),
            ("attention_backend", r"attention_backend='(\w+)'"),
            ("sampling_backend", r"sampling_backend='(\w+)'"),
        ):
            if f := re.search(pattern, log):
                out[key] = f.group(1) if key.endswith("backend") else float(f.group(1))
        return out
    out = {}
    if m := re.search(r"GPU KV cache size: ([\d,]+) tokens", log):
        out["kv_cache_tokens"] = int(m.group(1).replace(",", ""))
    if m := re.search(r"Available KV cache memory: ([\d.]+) GiB", log):
        out["available_kv_gib"] = float(m.group(1))
    if m := re.search(
        r"Actual usage is ([\d.]+) GiB for weight, ([\d.]+) GiB for peak activation, ([\d.]+) GiB "
        r"for non-torch memory, and ([\d.]+) GiB for CUDAGraph memory",
        log,
    ):
        out.update(
            weights_gib=float(m.group(1)),
            activation_gib=float(m.group(2)),
            non_torch_gib=float(m.group(3)),
            cudagraph_gib=float(m.group(4)),
        )
    if m := re.search(r"CUDA graph pool memory: ([\d.]+) GiB \(actual\), ([\d.]+) GiB \(estimated\)", log):
        out["cudagraph_estimate_gib"] = float(m.group(2))
    out["model_runner"] = "v2" if "vllm.v1.worker.gpu.model_runner" in log else "v1"
    out["cudagraph_in_budget"] = "CUDA graph memory profiling is enabled" in log
    return out


def server_series(rows: list[dict]) -> dict:
    """What the server's metrics say of the run: preemptions, KV usage, queues, prefix-cache hits."""

    def col(name):
        return [float(r[name]) for r in rows if r.get(name) not in (None, "")]

    out = {}
    pre = col("vllm:num_preemptions_total")
    if pre:
        out["num_preemptions"] = int(pre[-1] - pre[0])
    kv = col("vllm:kv_cache_usage_perc")
    if kv:
        out["kv_usage_max"] = round(max(kv), 4)
        busy = [k for k, r in zip(kv, col("vllm:num_requests_running")) if r > 0]
        out["kv_usage_mean_busy"] = round(statistics.fmean(busy), 4) if busy else 0.0
    for name, key in (("vllm:num_requests_running", "running_max"), ("vllm:num_requests_waiting", "waiting_max")):
        if c := col(name):
            out[key] = int(max(c))
    q, h = col("vllm:prefix_cache_queries_total"), col("vllm:prefix_cache_hits_total")
    if q and h and q[-1] > q[0]:
        out["prefix_cache_hit_rate"] = round((h[-1] - h[0]) / (q[-1] - q[0]), 4)
        # KV offloading: tokens the connector found on the host, over the same prompt tokens
        x = col("vllm:external_prefix_cache_hits_total")
        if x:
            out["host_prefix_cache_hit_rate"] = round((x[-1] - x[0]) / (q[-1] - q[0]), 4)
    return out


def combined(benches: list[dict]) -> dict:
    """One run's figures from its benchmark clients' summaries: counts and throughputs summed, the
    longest duration, latency figures averaged over the clients weighted by their requests (a
    median or p99 so averaged is an approximation: the clients' requests are not pooled)."""
    if len(benches) == 1:
        return benches[0]
    n = [b["completed"] for b in benches]
    out = dict(benches[0])
    for k in benches[0]:
        if k in ("completed", "total_input_tokens", "total_output_tokens") or k.endswith("_throughput"):
            out[k] = sum(b[k] for b in benches)
        elif k.endswith("_ms"):
            out[k] = sum(b[k] * c for b, c in zip(benches, n)) / sum(n)
    out["duration"] = max(b["duration"] for b in benches)
    return out


def _count_after(line: str, word: str) -> int:
    """The count that follows ``word`` in ``line`` (0 if none)."""
    tail = line.split(word, 1)[1].split() if word in line else []
    return int(tail[0].rstrip(",")) if tail and tail[0].rstrip(",").isdigit() else 0


def routing(log: str) -> str:
    """How the server's routers were set (``uniform_routing``'s line in its log): ``"dummy"`` (no
    line, or biases zeroed alone: as vLLM's dummy weights route), ``"redrawn"`` (router weights
    drawn again, with or without the expert biases zeroed: the routing stayed concentrated, such a
    lane's runs are marked confounded, ``ROUTING_NOTE``) or ``"spread"`` (router logits drawn at
    random: routed uniformly, priced as real weights are)."""
    for line in log.splitlines():
        if uniform_routing.ROUTING_LINE in line:
            if uniform_routing.NOISE in line:
                return "spread"
            if _count_after(line, uniform_routing.SPREAD) > 0:
                return "redrawn"
    return "dummy"


def engine_flags(flags: dict, facts: dict) -> dict:
    """servesim's engine settings for a server's flags: the scheduler's caps, the longest request, the memory
    share, the weights' quantization, the KV cache's format, async scheduling where set, KV offloading, and a pool given in bytes (``--kv-cache-memory-bytes``)
    as the blocks the server logged."""
    out: dict = {
        k: int(v)
        for k, v in (
            ("max_num_seqs", flags.get("--max-num-seqs")),
            ("max_num_batched_tokens", flags.get("--max-num-batched-tokens")),
            ("max_model_len", flags.get("--max-model-len")),
        )
        if v is not None
    }
    if "--gpu-memory-utilization" in flags:
        out["gpu_memory_utilization"] = float(flags["--gpu-memory-utilization"])
    if "--quantization" in flags:  # weights quantized at load (fp8: per tensor, vLLM's online path)
        out["quantization"] = flags["--quantization"]
    if "--kv-cache-dtype" in flags:
        out["kv_cache_dtype"] = flags["--kv-cache-dtype"]
    for switch, on in (("--async-scheduling", True), ("--no-async-scheduling", False)):
        if switch in flags:  # the release's default otherwise (on from 0.14)
            out["async_scheduling"] = on
    if "--kv-offloading-size" in flags:
        out["kv_offloading_size"] = float(flags["--kv-offloading-size"])
    if "--kv-cache-memory-bytes" in flags and facts.get("kv_cache_tokens"):
        out["num_gpu_blocks_override"] = facts["kv_cache_tokens"] // 16  # vLLM's default block size
    return out


# SGLang's scheduler logs a line every 40 decode steps (its --decode-log-interval): the running requests,
# the tokens held, the pool's usage, whether CUDA graphs ran, and its generation rate over the 40 steps.
DECODE_BATCH = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\] Decode batch[.,] #running-req: (\d+), #token: (\d+), "
    r"token usage: ([\d.]+), cuda graph: (\w+), gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
)


def decode_batches(log: str) -> str:
    """decode_batches.csv of an SGLang server's log: a row per `Decode batch` line, with the mean decode
    step it implies (running requests over the generation rate; a prefill step among the 40 counts in
    it too)."""
    rows = ["time,running,tokens,token_usage,cuda_graph,gen_tokens_per_s,queued,step_ms"]
    for line in log.splitlines():
        if m := DECODE_BATCH.match(line):
            t, run, tok, use, graph, rate, queue = m.groups()
            step = f"{1e3 * int(run) / float(rate):.2f}" if float(rate) > 0 else ""
            rows.append(f"{t},{run},{tok},{use},{graph == 'True'},{rate},{queue},{step}")
    return "\n".join(rows) + "\n"


SGLANG_FLAGS = {  # an SGLang server's flags as servesim's engine settings (the knobs keep SGLang's names)
    "--max-running-requests": ("max_running_requests", int),
    "--mem-fraction-static": ("mem_fraction_static", float),
    "--chunked-prefill-size": ("chunked_prefill_size", int),
    "--max-prefill-tokens": ("max_prefill_tokens", int),
    "--schedule-policy": ("schedule_policy", str),
    "--cuda-graph-max-bs": ("cuda_graph_max_bs", int),
    "--page-size": ("page_size", int),
}


SGLANG_SWITCHES = {  # flags without a value
    "--disable-prefill-cuda-graph": "disable_prefill_cuda_graph",
    "--disable-cuda-graph": "enforce_eager",
}


def sglang_engine(flags: dict, version: str) -> dict:
    """servesim's engine settings for an SGLang server's flags (``SGLANG_FLAGS``, ``SGLANG_SWITCHES``;
    unflagged knobs as servesim derives SGLang's defaults), on the server's release."""
    return (
        {"framework": "sglang", "sglang_version": version}
        | {key: cast(flags[flag]) for flag, (key, cast) in SGLANG_FLAGS.items() if flag in flags}
        | {key: True for flag, key in SGLANG_SWITCHES.items() if flag in flags}
    )


def serve_flags(args: list[str]) -> dict:
    """A server's command-line flags, each with its value; a switch (followed by another flag, or the
    last) with True."""
    out: dict = {}
    i = 0
    while i < len(args):
        has_value = i + 1 < len(args) and not str(args[i + 1]).startswith("--")
        out[args[i]] = args[i + 1] if has_value else True
        i += 2 if has_value else 1
    return out


def prefix_groups(rd: Path, run: dict, reqs: list[dict], exact: bool = False) -> list[tuple[int, int]]:
    """Per request of a shared-prefix run (groups.csv beside it): its group and the group's prefix in
    the server's tokens: exact for prompts sent as token ids (``exact``), else estimated as the
    group's median prompt scaled by prefix words over prompt words (the server counted more tokens
    than words, the same for every copy of one text); [] for a run without shared prefixes."""
    path = rd / "groups.csv"
    if not run.get("prefix") or not path.is_file():
        return []
    rows = {(int(g["client"]), int(g["index"])): int(g["group"]) for g in csv.DictReader(path.open())}
    group = [rows[(int(r["client"]), int(r["index"]))] for r in reqs]
    words = run["prefix"]["words"]
    if exact:
        return [(g, min(words, int(r["prompt_tokens"]) - 1)) for g, r in zip(group, reqs)]
    share = words / (words + run["prompt"])
    by: dict[int, list[int]] = {}
    for g, r in zip(group, reqs):
        by.setdefault(g, []).append(int(r["prompt_tokens"]))
    tokens = {g: round(statistics.median(p) * share) for g, p in by.items()}
    return [(g, min(tokens[g], int(r["prompt_tokens"]) - 1)) for g, r in zip(group, reqs)]


def planned_rows(run: dict, model: str, clients: int) -> list[dict]:
    """A run's planned requests (planned.csv's rows), drawn again from its seed as lane.py drew them
    (for runs recorded before lane.py kept planned.csv)."""
    sys.path.insert(0, str(HERE))
    import lane

    vocab = int(json.loads((HERE / "models" / f"{model}.json").read_text())["vocab_size"])
    ids, out, group = lane.prompts(run, vocab)
    return [
        {
            "client": i % clients,
            "index": i // clients,
            "prompt_tokens": len(x),
            "output_tokens": int(out[i]),
            "group": int(group[i]),
        }
        for i, x in enumerate(ids)
    ]


def check(read, files: dict, lane_meta: dict, run_name: str) -> dict:
    """checks.check_run on a run of the archive (``read(name)`` gives a member's text)."""
    lane, base = lane_meta["lane"], f"{lane_meta['lane']['name']}/{run_name}"
    run = next(r for r in lane["runs"] if r["name"] == run_name)
    info = next((r for r in lane_meta.get("runs", []) if r["name"] == run_name), {})
    if f"{base}/planned.csv" in files:
        planned = checks.read_csv(read(f"{base}/planned.csv"))
    else:
        planned = planned_rows(run, lane["model"], int(run.get("clients", 1)))
    recorded = checks.read_csv(read(f"{base}/requests.csv")) if f"{base}/requests.csv" in files else []
    counters = info.get("counters")
    if not counters and f"{base}/metrics.csv" in files:
        counters = checks.counters_from_metrics(checks.read_csv(read(f"{base}/metrics.csv")))
    return checks.check_run(planned, recorded, counters, bool(run.get("prefix")), sglang=checks.serves_sglang(lane))


def host(probes: dict) -> dict:
    """The host's probe readings around the lane (``probes``: "before" and "after" -> host_probe.py's
    report): servesim's reading (``probe_host.reading_of``: the tenth percentile of a reading's
    timings, serial and per CPU) before the server started, after it stopped, and of both together,
    the run's ``probe_us``: what a user who probed the machine around the lane would give."""
    tags = ("before", "after")
    samples = {t: s for t in tags if (s := probe_host.samples_of(probes.get(t) or {}))}
    if not samples:
        return {}
    cpu = next((str(p["model_name"]) for t in tags if (p := probes.get(t) or {}).get("model_name")), "")
    cpu = cpu.strip().removeprefix("model name").strip(" \t:")
    out = {
        "probe_us": probe_host.reading_of([v for s in samples.values() for v in s]),
        **{f"probe_us_{t}": probe_host.reading_of(samples[t]) for t in tags if t in samples},
    }
    return {k: round(v, 3) for k, v in out.items()} | ({"cpu": cpu} if cpu else {})


def lane_probes(folder: Path) -> dict:
    """A lane's probe reports: its host_probe_before.json and _after.json (every timing), else what
    its lane.json kept of them."""
    found = {
        t: json.loads(p.read_text()) for t in ("before", "after") if (p := folder / f"host_probe_{t}.json").is_file()
    }
    if found or not (folder / "lane.json").is_file():
        return found
    kept = json.loads((folder / "lane.json").read_text()).get("host_probe") or {}
    return {t: kept[t] for t in ("before", "after") if isinstance(kept.get(t), dict)}


def rehost(runs: list[dict]) -> None:
    """Every recorded run's probe readings read again from its lane's reports under data/e2e/ (after
    the reading's rule changed)."""
    for entry in runs:
        if "lane" in entry and (hp := host(lane_probes(DATA / entry["recording"] / entry["lane"]))):
            entry["host"] = hp


def mark_stalls(runs: list[dict]) -> None:
    """The stalls of every recorded run (``checks.stalls`` on its steps.csv under data/e2e/): their
    seconds in the entry's ``server.stall_s``, and a run that stalled marked confounded (a note
    written by hand is kept)."""
    for entry in runs:
        steps = DATA / entry["recording"] / entry["lane"] / entry["run"] / "steps.csv"
        if not steps.is_file():
            continue
        reqs = steps.parent / "requests.csv"
        found = checks.stalls(
            checks.read_csv(steps.read_text()), checks.read_csv(reqs.read_text()) if reqs.is_file() else []
        )
        server = entry.setdefault("server", {})
        server.pop("stall_s", None)
        if not found:
            if str(entry.get("confounded", "")).startswith(STALLED):  # an earlier rule's note: no stall now
                del entry["confounded"]
            continue
        total = sum(g for _, g in found)
        server["stall_s"] = round(total, 2)
        if not entry.get("confounded") or str(entry["confounded"]).startswith(STALLED):
            entry["confounded"] = (
                f"{STALLED} {total:.1f} s in {len(found)} pauses of over {checks.STALL_S:g} s with requests in flight or waiting "
                "(servesim prices a first-use compile's pause, not which requests it lands on: tools/e2e/checks.py, stalls)"
            )


STALLED = "the server stalled"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archive", nargs="?", help="results.tar.xz (none with --stalls)")
    ap.add_argument("--name", help="folder under data/e2e/ (device and date)")
    ap.add_argument("--gpu", help="servesim's name of the GPU the runs used")
    ap.add_argument("--plan", action="append", default=[], help="the plans the lanes came from (run order)")
    ap.add_argument("--lane", action="append", default=[], help="only these lanes (default: all)")
    ap.add_argument(
        "--heldout", action="store_true", help="every run held out (a recording made after the constants were fitted)"
    )
    ap.add_argument("--index", default="e2e.yaml", help="the index under simulator/data/validation/ (default e2e.yaml)")
    ap.add_argument(
        "--keep-failed", action="store_true", help="write runs that fail their check too, marked confounded (with why)"
    )
    ap.add_argument(
        "--stalls", action="store_true", help="only mark the stalls of the runs already in the index (checks.stalls)"
    )
    ap.add_argument(
        "--probes", action="store_true", help="only read the runs' probe readings again from data/e2e/ (ingest.host)"
    )
    a = ap.parse_args()
    index_path = VALIDATION / a.index
    index = yaml.safe_load(index_path.read_text()) if index_path.is_file() else {"runs": []}
    if a.stalls or a.probes:
        (mark_stalls if a.stalls else rehost)(index["runs"])
        write_index(index_path, index)
        return 0
    if not (a.archive and a.name and a.gpu):
        ap.error("an archive, --name and --gpu are needed (or --stalls or --probes alone)")
    order = {}
    for p in a.plan:
        for lane in json.loads(Path(p).read_text())["lanes"]:
            order[lane["name"]] = [r["name"] for r in lane["runs"]]
    dest = DATA / a.name
    traces = VALIDATION / "e2e"
    traces.mkdir(parents=True, exist_ok=True)
    # A run found confounded by hand (``confounded: why``) keeps its note when its recording is read again
    # (a stall's note is found again from its steps: mark_stalls).
    notes = {
        r["id"]: r["confounded"]
        for r in index["runs"]
        if r.get("confounded") and not str(r["confounded"]).startswith(STALLED)
    }
    index["runs"] = [r for r in index["runs"] if r.get("recording") != a.name]
    with tarfile.open(a.archive) as tar:
        files = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> str:
            return tar.extractfile(files[name]).read().decode()

        lanes = []
        for lane_name in sorted({n.split("/")[0] for n in files if "/" in n}):
            if f"{lane_name}/lane.json" not in files or (a.lane and lane_name not in a.lane):
                continue
            lane_meta = json.loads(read(f"{lane_name}/lane.json"))
            runs = [r["name"] for r in lane_meta.get("runs", []) if f"{lane_name}/{r['name']}/bench.json" in files]
            if runs:
                lanes.append((lane_name, lane_meta, runs))
        results = {(ln, r): check(read, files, meta, r) for ln, meta, runs in lanes for r in runs}
        failed = {k: v for k, v in results.items() if not v["ok"]}
        for (ln, r), v in failed.items():
            print(f"CHECK FAILED {a.name}/{ln}/{r}: " + "; ".join(v["problems"]), file=sys.stderr)
        if failed and not a.keep_failed:
            print(
                f"{len(failed)} of {len(results)} runs failed their check: nothing written "
                "(--keep-failed writes them, marked confounded)",
                file=sys.stderr,
            )
            return 2
        for lane_name, lane_meta, runs in lanes:
            lane = lane_meta["lane"]
            ld = dest / lane_name
            ld.mkdir(parents=True, exist_ok=True)
            log = "".join(
                line + "\n"
                for line in read(f"{lane_name}/server_lines.log").splitlines()
                if "Capturing CUDA graphs" not in line and "it/s]" not in line
            )
            (ld / "server.log").write_text(log)
            (ld / "lane.json").write_text(json.dumps(lane_meta, indent=1) + "\n")
            for f in ("host_probe_before.json", "host_probe_after.json"):
                if f"{lane_name}/{f}" in files:
                    (ld / f).write_text(read(f"{lane_name}/{f}"))
            facts = server_facts(log)
            routed = routing(log)
            is_sglang = checks.serves_sglang(lane)
            if is_sglang:
                (ld / "decode_batches.csv").write_text(decode_batches(log))
            args = lane.get("serve_args", [])
            flags = serve_flags(args)
            versions = lane_meta["versions"]
            planned = order.get(lane_name, runs)
            for run_name in runs:
                rd = ld / run_name
                rd.mkdir(exist_ok=True)
                for f in (
                    "bench.json",
                    "requests.csv",
                    "planned.csv",
                    "metrics.csv",
                    "itl_quantiles.csv",
                    "groups.csv",
                    "steps.csv",
                    "cpu.csv",
                    "stat.csv",
                    "watch.csv",
                ):
                    if f"{lane_name}/{run_name}/{f}" in files:
                        (rd / f).write_text(read(f"{lane_name}/{run_name}/{f}"))
                run = next(r for r in lane["runs"] if r["name"] == run_name)
                bench = combined(json.loads((rd / "bench.json").read_text()))
                reqs = list(csv.DictReader(io.StringIO((rd / "requests.csv").read_text())))
                metrics = list(csv.DictReader(io.StringIO((rd / "metrics.csv").read_text())))
                rid = f"{a.name}_{lane_name}_{run_name}"
                t0 = min(float(r["start_s"]) for r in reqs)
                token_ids = lane_meta.get("prompt_format") == "token_ids"
                groups = prefix_groups(rd, run, reqs, exact=token_ids)
                with (traces / f"{rid}.csv").open("w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(
                        ["arrival_time_s", "prompt_tokens", "output_tokens"]
                        + (["prefix_group", "prefix_tokens"] if groups else [])
                    )
                    for i, r in enumerate(reqs):
                        w.writerow(
                            [
                                f"{float(r['start_s']) - t0:.4f}" if run.get("request_rate") else 0,
                                r["prompt_tokens"],
                                r["output_tokens"],
                            ]
                            + (list(groups[i]) if groups else [])
                        )
                entry = {
                    "id": rid,
                    "recording": a.name,
                    "lane": lane_name,
                    "run": run_name,
                    "split": "calibrate" if planned.index(run_name) % 2 == 0 and not a.heldout else "heldout",
                    "model": MODELS[lane["model"]],
                    "gpu": a.gpu,
                    "tensor_parallel_size": int(
                        flags.get("--tp", 1) if is_sglang else flags.get("--tensor-parallel-size", 1)
                    ),
                    # an SGLang lane's vLLM is its benchmark client's
                    "vllm_version": versions["vllm"],
                    **({"framework": "sglang", "sglang_version": versions["sglang"]} if is_sglang else {}),
                    "serve_command": (
                        "python -m sglang.launch_server --model-path MODEL --load-format dummy --enable-metrics "
                        if is_sglang
                        else "vllm serve MODEL --load-format dummy "
                    )
                    + " ".join(args),
                    "bench_command": lane_meta["runs"][[r["name"] for r in lane_meta["runs"]].index(run_name)][
                        "commands"
                    ][0],
                    # routed as a trained model routes: priced as its real weights are
                    "engine": (
                        sglang_engine(flags, versions["sglang"])
                        if is_sglang
                        else {**engine_flags(flags, facts), **({"load_format": "auto"} if routed == "spread" else {})}
                    ),
                    **({"confounded": ROUTING_NOTE} if routed == "redrawn" else {}),
                    **(
                        {"frontend": {"api_server_count": int(flags["--api-server-count"])}}
                        if "--api-server-count" in flags
                        else {}
                    ),
                    "arrival": (
                        {"max_concurrency": run["max_concurrency"]}
                        if run.get("max_concurrency")
                        else {"request_rate": run.get("request_rate", "inf")}  # inf: a burst, all sent at once
                    ),
                    **({"prefix": run["prefix"]} if run.get("prefix") else {}),
                    "lengths": {
                        ("prompt" if token_ids else "prompt_words"): run["prompt"],
                        "output": run["output"],
                        "prompt_tokens_mean": round(statistics.fmean(int(r["prompt_tokens"]) for r in reqs), 1),
                    },
                    "trace": f"e2e/{rid}.csv",
                    "measured": {k: bench[k] for k in MEASURED if k in bench},
                    # SGLang's retraction counter appears at its first increment: absent, none
                    "server": {**({"num_preemptions": 0} if is_sglang else {}), **server_series(metrics), **facts},
                }
                if hp := host(lane_probes(ld)):
                    entry["host"] = hp
                res = results[(lane_name, run_name)]
                entry["check"] = {
                    k: res[k]
                    for k in (
                        "ok",
                        "planned_prompt_tokens",
                        "server_prompt_tokens",
                        "server_prefix_cache_hits",
                        "server_retracted",
                        "problems",
                    )
                    if k in res and (k != "problems" or res[k])
                }
                if rid in notes:
                    entry["confounded"] = notes[rid]
                elif not res["ok"]:
                    entry["confounded"] = "check failed: " + "; ".join(res["problems"])
                index["runs"].append(entry)
    sglang_index = any(checks.serves_sglang(r) for r in index["runs"])  # a run names its framework as a lane does
    index["about"] = (
        "Real SGLang servers recorded with tools/e2e (`python -m sglang.launch_server`, dummy weights, exact model "
        "configs; driven by `vllm bench serve` with --ignore-eos; data/e2e/ holds the recordings and their README). "
        "Each run: what ran, the benchmark's figures (measured), what the server's /metrics (under the vLLM names "
        "they stand for: tools/e2e/lane.py SGLANG_AS_VLLM) and start-up log said (server), and the requests in the "
        "order they were sent (trace). split: within each lane, runs alternate calibrate / heldout in the order "
        "they ran, starting with calibrate."
        if sglang_index
        else "Real vLLM servers recorded with tools/e2e (dummy weights, exact model configs, `vllm bench serve` with "
        "--ignore-eos; data/e2e/ holds the recordings and their README). Each run: what ran, `vllm bench serve`'s "
        "figures (measured), what the server's /metrics and start-up log said (server), and the requests in the "
        "order they were sent (trace). split: within each lane, runs alternate calibrate / heldout in the order "
        "they ran, starting with calibrate."
    )
    mark_stalls(index["runs"])
    write_index(index_path, index)
    print(f"recordings in {dest.relative_to(ROOT)}")
    return 0


def write_index(path: Path, index: dict) -> None:
    index["runs"].sort(key=lambda r: r["id"])
    path.write_text(yaml.safe_dump({"about": index["about"], "runs": index["runs"]}, sort_keys=False, width=120))
    print(f"{len(index['runs'])} runs in {path.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(main())
