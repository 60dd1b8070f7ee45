"""How close servesim comes to real vLLM servers, on public measurements it ships with.

``servesim validate`` runs two checks and writes a table and a plot of each:

- ``--kv``: the KV pool vLLM sized at start-up ("GPU KV cache size: N tokens") for the model, GPU,
  tensor parallelism and memory settings of each logged run (``data/validation/kv_cache_lines.yaml``),
  against what ``simulator.scenario.memory`` computes for the same settings;
- ``--runs``: public ``vllm bench serve`` runs (``data/validation/runs.yaml``: each with its URL, the
  quoted serve and bench commands, vLLM version, GPU and printed results), each turned into a
  scenario (``run_scenario``) and simulated; measured against simulated output throughput, mean
  TTFT and mean TPOT, with median absolute errors over the runs the constants were fitted on
  (``split: calibrate``) and over the rest (``split: heldout``), reported apart;
- ``--recorded``: real vLLM servers recorded with tools/e2e (``data/validation/e2e.yaml``: each run
  with its serve and bench commands, the requests as the benchmark sent them, `vllm bench serve`'s
  figures and the server's own metrics), replayed request for request (``e2e_scenario``): output
  throughput, median and mean TTFT and TPOT, the preemptions and the KV pool, with the same split.
"""

from __future__ import annotations

import functools
import io
import json
import math
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.outputs.writers import atomic_write_bytes, atomic_write_text, text_file
from simulator.scenario import yamlio
from simulator.validation import verdict
from workloads.bench_client import bench_arrival

DATA = Path(__file__).resolve().parents[1] / "data" / "validation"
KV_FILE = DATA / "kv_cache_lines.yaml"
RUNS_FILE = DATA / "runs.yaml"
SGLANG_FILE = DATA / "sglang_runs.yaml"  # public SGLang runs (tools/validation/add_sglang_runs.py)
E2E_FILE = DATA / "e2e.yaml"
E2E_SGLANG_FILE = DATA / "e2e_sglang.yaml"  # real SGLang servers recorded with tools/e2e (framework: sglang)
OFFLOAD_FILE = DATA / "kv_offload.yaml"  # recorded servers with KV offloading (nothing fitted to them)
# Every file ``servesim validate`` may write in its folder (checked before any work).
OUTPUT_FILES = (
    "kv_cache_check.csv",
    "kv_cache_check_recorded.csv",
    "runs.csv",
    "validation.png",
    "recorded.csv",
    "validation_recorded.png",
    "sglang_runs.csv",
    "validation_sglang.png",
    "recorded_kv_offload.csv",
    "features.csv",
    "report.txt",
    "verdict.txt",
)
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
# The recorded runs have every request's figures: medians as well as means.
E2E_METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms", "mean_ttft_ms", "mean_tpot_ms")
SGLANG_METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "mean_tpot_ms")
LABELS = {
    "output_throughput": "output tok/s",
    "mean_ttft_ms": "mean TTFT ms",
    "mean_tpot_ms": "mean TPOT ms",
    "median_ttft_ms": "p50 TTFT ms",
    "median_tpot_ms": "p50 TPOT ms",
}
# A recorded run whose prompts were partly in the server's prefix cache from the lane's earlier runs
# (the 2026-11-27 recording drew every run's prompts from one seed, so a run repeated the prompts of
# the run before it) had cheaper prefills than the replay, which starts cold: it is reported but
# not counted (confounded). The prefills are up to a fifth of the work of a wave of 32B requests.
E2E_WARM_CACHE = 0.05


def load(path: Path) -> dict:
    return yamlio.load(Path(path).read_text())


def confounded(run: dict, recorded: bool = False) -> bool:
    """Whether a run is reported but not counted: marked so in its data, or (a recorded run) served
    from a cache its lane's earlier runs had warmed (prompts repeated; shared prefixes by design do
    not count)."""
    if recorded:
        server = run.get("server") or {}
        if server.get("prefix_cache_hit_rate", 0.0) > E2E_WARM_CACHE and not run.get("prefix"):
            return True
    return bool(run.get("confounded"))


def host_calibration(run: dict) -> bool:
    """Whether a run calibrates the host side (the host costs, the band's margins, a GPU's matmul rates
    fitted end to end): marked ``split: calibrate``, and not one that fits a kernel's rate instead
    (``fits: gpu``, ``attention``, ``prefill``, ``eager``)."""
    return run["split"] == "calibrate" and run.get("fits", "host") == "host"


def median(xs: list[float]) -> float:
    xs = sorted(x for x in xs if not math.isnan(x))
    if not xs:
        return float("nan")
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else 0.5 * (xs[k - 1] + xs[k])


# ---- the KV pool ----------------------------------------------------------------------------------


def kv_scenario(e: dict):
    """The scenario of one logged start-up (engine alone: only its memory plan is used)."""
    from simulator.scenario.config import blank_scenario

    over = [
        f"model={e['model']}",
        f"hardware.gpu={e['gpu']}",
        f"hardware.tensor_parallel_size={e['tensor_parallel_size']}",
        f"engine.vllm_version={e.get('servesim_version', '0.19')}",
        f"engine.dtype={e['dtype']}",
        f"engine.quantization={e['quantization']}",
        f"engine.kv_cache_dtype={'fp8' if e['kv_cache_dtype'] == 'fp8' else 'auto'}",
        f"engine.gpu_memory_utilization={e['gpu_memory_utilization']}",
        f"engine.max_model_len={e['max_model_len']}",
        f"engine.max_num_seqs={e['max_num_seqs']}",
        f"engine.max_num_batched_tokens={e['max_num_batched_tokens']}",
        f"engine.block_size={e['block_size']}",
    ]
    return blank_scenario(over)


def kv_rows(path: Path = KV_FILE) -> list[dict]:
    """Printed against computed KV-pool tokens, one row per logged start-up."""
    from simulator.resolve import engine_defaults, load_arch, memory_plan
    from simulator.scenario.hardware import load_gpu

    rows = []
    for e in load(path)["lines"]:
        sc = kv_scenario(e)
        model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
        seqs, tokens = engine_defaults(gpu, sc)
        mem = memory_plan(sc, model, gpu, seqs, tokens)
        got, gib = printed_pool(sc, model, mem, tokens)
        want = int(e["printed"]["kv_cache_tokens"])
        rows.append(
            {
                "id": e["id"],
                "split": e["split"],
                "model": e["model"],
                "tp": e["tensor_parallel_size"],
                "quantization": e["quantization"],
                "kv_dtype": e["kv_cache_dtype"],
                "printed_tokens": want,
                "servesim_tokens": got,
                "error": got / want - 1.0,
                "printed_kv_gib": e["printed"].get("available_kv_gib"),
                "servesim_kv_gib": gib,
            }
        )
    return rows


def runs_per_gpu() -> dict[str, tuple[int, int, int]]:
    """For each GPU (servesim's key): how many real runs ``servesim validate`` replays on it, counted
    (not confounded): (recorded vLLM servers, public vLLM runs, public SGLang runs)."""
    out: dict[str, list[int]] = {}
    for i, path in enumerate((E2E_FILE, RUNS_FILE, SGLANG_FILE)):
        for run in load(path)["runs"]:
            if not confounded(run, recorded=i == 0):
                out.setdefault(run["gpu"], [0, 0, 0])[i] += 1
    return {g: (n[0], n[1], n[2]) for g, n in out.items()}


def printed_pool(sc, model, mem, max_batched_tokens: int) -> tuple[int, float]:
    """servesim's KV pool as vLLM's start-up log prints it: tokens and GiB. A hybrid model's pool
    (sliding-window and full-attention layers sharing one block pool, in groups of as many layers as
    the smaller kind has) is printed as vLLM's ``get_kv_cache_capacity`` counts it: the pool's blocks
    over the blocks one request of ``max_model_len`` may hold in a group of each kind, times
    ``max_model_len``; a sliding-window group's share is its window plus the tokens in flight, capped
    at ``max_model_len`` (``SlidingWindowSpec.max_admission_blocks_per_request``: the step's budget
    in the wheels of 0.19.0 and 0.22.0 to 0.25.0; in 0.26.0 the budget of every batch in flight, two
    under async scheduling, and so taken for later releases). servesim keeps the windows apart
    (``window_bytes``) and counts the full-attention layers' blocks."""
    from simulator.resolve import async_scheduling, kv_dtype_bytes
    from simulator.scenario import versions

    if not model.is_hybrid:
        return mem.num_gpu_blocks * sc.engine.block_size, mem.kv_bytes / 2**30
    total, block, max_len = mem.kv_bytes + mem.window_bytes, sc.engine.block_size, sc.engine.max_model_len
    n_window = model.num_sliding_layers
    group = min(n_window, model.num_layers - n_window)  # layers per group
    page = model.kv_bytes_per_token(kv_dtype_bytes(sc, model), sc.hardware.tensor_parallel_size, 1) * block
    blocks = total // (group * page)
    from_026 = versions.release_parts(sc.engine.vllm_version) >= (0, 26)
    in_flight = max_batched_tokens * (2 if from_026 and async_scheduling(sc) else 1)
    full = -(-max_len // block)
    window = -(-min(model.sliding_window - 1 + in_flight, max_len) // block) + 1
    per_request = (model.num_layers - n_window) // group * full + n_window // group * window
    return int(blocks / per_request * max_len), total / 2**30


# The recording whose Llama-3.1-8B servers' KV pools the V2 runner's sampler constant was read off.
KV_CALIBRATION_RECORDING = "h200_2026-11-27"


def kv_rows_recorded(path: Path = E2E_FILE) -> list[dict]:
    """The KV pool each recorded server logged against servesim's, one row per server (lane). The V2
    runner's sampler constant (simulator.scenario.memory) was read off the Llama-3.1-8B servers of the first
    recording: those are the calibration rows, the others held out."""
    from simulator.resolve import engine_defaults, load_arch, memory_plan
    from simulator.scenario.hardware import load_gpu

    rows, seen = [], set()
    for run in load(path)["runs"]:
        key = (run["recording"], run["lane"])
        if key in seen or not (run.get("server") or {}).get("kv_cache_tokens"):
            continue
        seen.add(key)
        sc = e2e_scenario(run)
        model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
        seqs, tokens = engine_defaults(gpu, sc)
        mem = memory_plan(sc, model, gpu, seqs, tokens)
        (got, gib), want = printed_pool(sc, model, mem, tokens), int(run["server"]["kv_cache_tokens"])
        rows.append(
            {
                "id": f"{run['recording']}_{run['lane']}",
                "split": "calibrate"
                if run["model"] == "llama-3.1-8b" and run["recording"] == KV_CALIBRATION_RECORDING
                else "heldout",
                "model": run["model"],
                "tp": run["tensor_parallel_size"],
                "quantization": model.quantization,
                "kv_dtype": "auto",
                "printed_tokens": want,
                "servesim_tokens": got,
                "error": got / want - 1.0,
                "printed_kv_gib": run["server"].get("available_kv_gib"),
                "servesim_kv_gib": gib,
            }
        )
    return rows


# ---- end-to-end runs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunResult:
    id: str
    split: str
    measured: dict
    simulated: dict
    error: str = ""
    confounded: bool = False
    detail: dict | None = None  # what the simulation saw: preemptions, KV usage, front-end share

    def rel_error(self, metric: str) -> float:
        m, s = self.measured.get(metric), self.simulated.get(metric)
        if m is None or s is None or not m:
            return float("nan")
        return s / m - 1.0


# ShareGPT as `vllm bench serve` samples it (prompts of 4 to 1024 tokens, prompt + output <= 2048):
# lognormal lengths with the run's printed means; the spreads are assumptions (not printed).
SHAREGPT_PROMPT_SIGMA, SHAREGPT_OUTPUT_SIGMA = 1.0, 0.9


def run_scenario(run: dict, extra: list[str] | tuple[str, ...] = ()):
    """The scenario of one public run: its model, GPU, tensor parallelism, vLLM release line and
    engine flags; its endpoint; its requests (the printed mean lengths, fixed for the random
    dataset, lognormal for ShareGPT; drawn uniformly where the client drew them so); sent as the
    benchmark sends them (all at once, by ``--max-concurrency`` clients, or as a Poisson stream at
    ``--request-rate``), run until done."""
    from simulator.scenario.config import blank_scenario
    from simulator.scenario.hosts import reference_host_override

    b = run["bench"]
    n = int(b["num_prompts"])
    p, o = float(b["mean_prompt_tokens"]), float(b["mean_output_tokens"])
    if b["dataset"] == "sharegpt":
        lengths = [
            f"workload.prompt_tokens={{dist: lognormal, mean: {p}, sigma: {SHAREGPT_PROMPT_SIGMA}, min: 4, max: 1024}}",
            f"workload.output_tokens={{dist: lognormal, mean: {o}, sigma: {SHAREGPT_OUTPUT_SIGMA}, min: 4, max: 1024}}",
        ]
    elif b.get("uniform_lengths"):  # lengths drawn uniformly by the client (SGLang's, range ratio < 1)
        (pl, ph), (ol, oh) = b["uniform_lengths"]["prompt"], b["uniform_lengths"]["output"]
        lengths = [
            f"workload.prompt_tokens={{dist: uniform, min: {int(pl)}, max: {int(ph)}}}",
            f"workload.output_tokens={{dist: uniform, min: {int(ol)}, max: {int(oh)}}}",
        ]
    else:
        lengths = [
            f"workload.prompt_tokens={{dist: fixed, value: {max(1, round(p))}}}",
            f"workload.output_tokens={{dist: fixed, value: {max(1, round(o))}}}",
        ]
    # (with a cap, the cap's clients send back to back whenever the rate offers more than they take:
    # true of every such run here)
    arrival = "workload.arrival=" + json.dumps(bench_arrival(n, b.get("request_rate"), b.get("max_concurrency")))
    over = [
        f"name={run['id']}",
        f"model={run['model']}",
        f"hardware.gpu={run['gpu']}",
        f"hardware.tensor_parallel_size={run['tensor_parallel_size']}",
        *release_overrides(run),
        f"engine.quantization={run.get('quantization', 'none')}",
        f"frontend.endpoint={b['endpoint']}",
        # The public runs' hosts are not described: replayed at factor 1, the host the public host
        # costs were fitted at (a scenario without a host takes the catalog's median instead)
        reference_host_override(),
        *(f"engine.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in (run.get("engine") or {}).items()),
        # What shapes a public server had run before is not told (several rates, warm-up runs): its
        # kernels compiled on first use are taken as compiled (cost.shape_key)
        *([] if run.get("framework") == "sglang" else ["engine.jit_cache=warm"]),
        *(f"frontend.{k}={v}" for k, v in (run.get("frontend") or {}).items()),
        *lengths,
        arrival,
        "workload.over_max_model_len=truncate",
        f"run.num_requests={n}",
        "run.duration_s=null",
        "run.warmup_s=0",
        f"run.seed={int(b.get('seed') or 0)}",
        *extra,
    ]
    return blank_scenario(over)


def release_overrides(run: dict) -> list[str]:
    """The engine and its release line a public run is replayed on: vLLM's, or SGLang's
    (``framework: sglang``)."""
    if run.get("framework") == "sglang":  # its own release where the 0.5 line has it (0.4.x: the line's)
        release = str(run.get("sglang_version") or "")
        release = release if release.startswith("0.5") else run["servesim_version"]
        return ["engine.framework=sglang", f"engine.sglang_version={release}"]
    return [f"engine.vllm_version={run['servesim_version']}"]


def host_line(run: dict) -> str:
    """The release line whose host costs a public run's engine takes (SGLang's own set: ``sglang.HOST_SET``)."""
    from simulator.scenario import sglang

    return sglang.HOST_SET if run.get("framework") == "sglang" else run["servesim_version"]


def host_overrides(endpoint: str, line: str, host, harmony: bool = False, overlapped: bool = True) -> list[str]:
    """Scenario overrides that give a run through ``endpoint`` on release line ``line`` the host
    costs ``host`` (a ``hosts.HostCosts``; ``harmony``: a model whose chat is rendered in the
    Harmony format; ``overlapped``: an engine that schedules with async scheduling)."""
    a = host.api_costs(endpoint == "chat", harmony)
    step_s, per_seq_s = host.engine_cpu(line, overlapped)
    return [
        f"frontend.request_ms={a['request_s'] * 1e3!r}",
        f"frontend.output_token_us={a['token_s'] * 1e6!r}",
        f"frontend.prompt_token_us={host.prompt_token_s * 1e6!r}",
        f"frontend.step_us={host.step_s * 1e6!r}",
        f"frontend.latency_ms={a['latency_s'] * 1e3!r}",
        f"frontend.finish_ms={a['finish_s'] * 1e3!r}",
        f"frontend.first_pass={a['first_pass']!r}",
        f"frontend.intake_rounds={host.intake_rounds!r}",
        f"frontend.stream_doubling={host.stream_doubling!r}",
        f"cost.engine_cpu_ms={step_s * 1e3!r}",
        f"cost.engine_cpu_per_seq_us={per_seq_s * 1e6!r}",
    ]


def harmony_chat(run: dict) -> bool:
    """Whether a run's model renders its chat in the Harmony format (False for a model servesim cannot
    load: the run reports that error itself)."""
    return _harmony_chat(run["model"])


@functools.cache
def _harmony_chat(model: str) -> bool:
    """``harmony_chat`` by model: read once, not once per run and per evaluation of a fit."""
    from simulator.errors import ConfigError
    from simulator.scenario.models import load_model

    try:
        return load_model(model).harmony_chat
    except ConfigError:
        return False


def simulate_run(run: dict, extra: list[str] | tuple[str, ...] = (), host=None) -> RunResult:
    """Simulate one public run (``host``: other host costs than the built-in ones); a run that
    cannot be simulated keeps its error, never stops the rest."""
    from simulator.metrics import summarize
    from simulator.run import simulate

    if host is not None:
        extra = [*host_overrides(run["bench"]["endpoint"], host_line(run), host, harmony_chat(run)), *extra]
    metrics = SGLANG_METRICS if run.get("framework") == "sglang" else METRICS
    measured = {m: run["results"].get("output_token_throughput" if m == "output_throughput" else m) for m in metrics}
    marked = confounded(run)
    try:
        s = summarize(simulate(run_scenario(run, extra)))
    except Exception as e:
        return RunResult(run["id"], run["split"], measured, {}, f"{type(e).__name__}: {e}", marked)
    detail = {k: s.get(k) for k in ("num_preemptions", "kv_usage_mean", "num_steps", "kv_cache_tokens")}
    return RunResult(run["id"], run["split"], measured, {m: float(s[m]) for m in metrics}, "", marked, detail)


# ---- recorded runs (tools/e2e) ------------------------------------------------------------------

E2E_LINE = "0.26"  # the release line of the recorded servers (vLLM 0.26.0)


def e2e_scenario(run: dict, extra: list[str] | tuple[str, ...] = ()):
    """The scenario of one recorded run: its model, GPU, tensor parallelism and serve flags on vLLM
    0.26's release line (and its API servers), or for an SGLang server (``framework: sglang``) its
    engine and release line with the knobs it was given; its requests exactly as the benchmark sent
    them (the trace: the server's prompt token counts, the output lengths), by ``max_concurrency``
    closed-loop clients in the trace's order, or at their recorded times; run until all are done."""
    from simulator.scenario.config import blank_scenario

    a = run["arrival"]
    if a.get("max_concurrency"):
        arrival = [
            f"workload.arrival={{type: closed_loop, concurrency: {int(a['max_concurrency'])}}}",
            "workload.trace_arrivals=closed_loop",
        ]
    else:
        arrival = []
    engine = [f"engine.{k}={v}" for k, v in (run.get("engine") or {}).items()]
    over = [
        f"name={run['id']}",
        f"model={run['model']}",
        f"hardware.gpu={run['gpu']}",
        f"hardware.tensor_parallel_size={run['tensor_parallel_size']}",
        *_unless_given(extra, "hardware.host", recorded_host(run)),
        *([] if run.get("framework") == "sglang" else [f"engine.vllm_version={E2E_LINE}"]),
        # tools/e2e/lane.py serves dummy weights, unless the run says otherwise
        *_unless_given([*extra, *engine], "engine.load_format", ["engine.load_format=dummy"]),
        *engine,
        *(f"frontend.{k}={v}" for k, v in (run.get("frontend") or {}).items()),
        "frontend.endpoint=completions",
        f"workload.trace={DATA / run['trace']}",
        *arrival,
        "run.duration_s=null",
        "run.warmup_s=0",
        "run.seed=0",
        *extra,
    ]
    return blank_scenario(over)


def _unless_given(extra: list[str] | tuple[str, ...], key: str, overrides: list[str]) -> list[str]:
    """``overrides``, a recorded run's own setting of ``key``, unless ``extra`` sets it (given wins)."""
    return [] if any(x.startswith(f"{key}=") for x in extra) else overrides


def recorded_probe(run: dict) -> float | None:
    """The probe reading a recorded run is replayed on, as a user who probed that machine would give
    it: the catalog's idle reading of its machine, or for a machine the catalog does not hold, the
    reading the recorder took around the run's lane; None for a machine never probed."""
    from simulator.scenario.hosts import catalog

    h = catalog().hosts.get(run.get("recording", ""), {})
    return h.get("probe_us") or (run.get("host") or {}).get("probe_us")


def recorded_host(run: dict) -> list[str]:
    """The host a recorded run is replayed on (``hardware.host: {probe_us: X}``: the catalog's rule
    then gives its factor, not its own fitted one); a machine never probed runs on the catalog's
    median host."""
    from simulator.scenario.hosts import probe_override

    probe = recorded_probe(run)
    return [probe_override(probe)] if probe else []


def recorded_scale(run: dict) -> float:
    """The CPU factor of the host a recorded run is replayed on (``recorded_host``)."""
    from simulator.scenario.hosts import load_host

    probe = recorded_probe(run)
    return load_host({"probe_us": float(probe)} if probe else None).scale


def simulate_e2e(run: dict, extra: list[str] | tuple[str, ...] = (), host=None) -> RunResult:
    """Simulate one recorded run (``host``: other host costs than the built-in ones); a run that
    cannot be simulated keeps its error."""
    from simulator.metrics import summarize
    from simulator.run import simulate

    if host is not None:
        line = host_line(run) if run.get("framework") == "sglang" else E2E_LINE
        overlapped = (run.get("engine") or {}).get("async_scheduling", True) is not False  # 0.26's default: on
        extra = [*host_overrides("completions", line, host, overlapped=overlapped), *extra]
    measured = {m: run["measured"].get(m) for m in E2E_METRICS}
    server = run.get("server") or {}
    warm = confounded(run, recorded=True)
    try:
        s = summarize(simulate(e2e_scenario(run, extra)))
    except Exception as e:
        return RunResult(run["id"], run["split"], measured, {}, f"{type(e).__name__}: {e}", warm)
    detail = {
        "num_preemptions": s.get("num_preemptions"),
        "server_preemptions": server.get("num_preemptions"),
        "kv_cache_tokens": s.get("kv_cache_tokens"),
        "server_kv_cache_tokens": server.get("kv_cache_tokens"),
        "kv_usage_max": s.get("kv_cache_usage_max"),
        "server_kv_usage_max": server.get("kv_usage_max"),
        "prefix_cache_hit_rate": server.get("prefix_cache_hit_rate"),
        "servesim_prefix_cache_hit_rate": s.get("prefix_cache_hit_rate"),
    }
    if "host_prefix_cache_hit_rate" in server:  # KV offloading: the host tier's hits too
        detail["host_prefix_cache_hit_rate"] = server["host_prefix_cache_hit_rate"]
        detail["servesim_host_prefix_cache_hit_rate"] = (s.get("kv_offload") or {}).get("host_hit_rate", 0.0)
    return RunResult(run["id"], run["split"], measured, {m: float(s[m]) for m in E2E_METRICS}, "", warm, detail)


def run_all(
    runs: list[dict], extra: list[str] | tuple[str, ...] = (), jobs: int = 1, host=None, recorded: bool = False
) -> list[RunResult]:
    """Simulate public runs (or, with ``recorded``, recorded ones), in ``jobs`` processes."""
    from simulator.progress import Progress

    fn = simulate_e2e if recorded else simulate_run
    bar = Progress(len(runs), "validate: recorded servers" if recorded else "validate: public runs", " runs")
    try:
        if jobs <= 1:
            out = []
            for r in runs:
                out.append(fn(r, extra, host))
                bar.done(bool(out[-1].error))
            return out
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs) as ex:
            futs = {ex.submit(fn, r, extra, host): i for i, r in enumerate(runs)}
            found: dict[int, RunResult] = {}
            for f in as_completed(futs):
                found[futs[f]] = f.result()
                bar.done(bool(found[futs[f]].error))
            return [found[i] for i in range(len(runs))]
    finally:
        bar.close()


def error_summary(results: list[RunResult], metrics: tuple[str, ...] = METRICS) -> dict:
    """Per split and metric: median absolute relative error, runs off by more than 2x, runs counted
    (confounded runs and metrics not counted left out)."""
    out = {}
    for split in ("calibrate", "heldout", "all"):
        rs = [r for r in results if (split == "all" or r.split == split) and not r.error and not r.confounded]
        for m in metrics:
            errs = [r.rel_error(m) for r in rs]
            errs = [e for e in errs if not math.isnan(e)]
            out[(split, m)] = {
                "median_abs_error": median([abs(e) for e in errs]),
                "off_by_2x": sum(1 for e in errs if e > 1.0 or e < -0.5),
                "runs": len(errs),
            }
    return out


# ---- report ---------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.0f}%"


def write_kv_report(
    rows: list[dict], out: Path, name: str = "kv_cache_check.csv", what: str = "vLLM's 'GPU KV cache size' log lines"
) -> list[str]:
    import csv

    path = out / name
    with text_file(path) as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    lines = [f"KV pool vs {what} ({len(rows)} start-ups; {path}):"]
    for split in ("calibrate", "heldout"):
        errs = [abs(r["error"]) for r in rows if r["split"] == split]
        if errs:
            lines.append(
                f"  {split:9s} {len(errs):3d} lines: median error {100 * median(errs):.2f}%, "
                f"worst {100 * max(errs):.2f}%, within 2%: {sum(e <= 0.02 for e in errs)}/{len(errs)}"
            )
    worst = sorted(rows, key=lambda r: -abs(r["error"]))[:3]
    lines.append(
        "  largest misses: "
        + "; ".join(
            f"{r['model']} TP{r['tp']} {r['printed_tokens']:,} vs {r['servesim_tokens']:,} ({100 * r['error']:+.1f}%)"
            for r in worst
        )
    )
    return lines


def _load_text(run: dict) -> str:
    """How a run loads its server: a concurrency, a burst (every request sent at once) or a rate. A
    public run says it in its bench settings, a recorded one in its arrivals."""
    a = run["bench"] if "bench" in run else run["arrival"]
    if a.get("max_concurrency"):
        return f"max_concurrency {a['max_concurrency']}"
    if a.get("request_rate") in (None, "inf"):
        return f"burst of {a['num_prompts'] if 'bench' in run else run['measured']['completed']}"
    return f"{a['request_rate']} req/s"


def write_runs_report(
    runs: list[dict],
    results: list[RunResult],
    out: Path,
    metrics: tuple[str, ...] = METRICS,
    name: str = "runs.csv",
    what: str = "End-to-end runs vs `vllm bench serve`",
) -> list[str]:
    """A row per run (measured, simulated, error per metric; for recorded runs also the preemptions
    and the KV pool) and the error summary per split."""
    import csv

    path = out / name
    by_id = {r["id"]: r for r in runs}
    fields = ["id", "split", "confounded", "source", "gpu", "tp", "model", "load"]
    for m in metrics:
        fields += [f"{m}_measured", f"{m}_servesim", f"{m}_error"]
    details = sorted({k for r in results for k in (r.detail or {})}) if metrics is E2E_METRICS else []
    fields += details + ["error"]
    with text_file(path) as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        w.writeheader()
        for r in results:
            run = by_id[r.id]
            row = {
                "id": r.id,
                "split": r.split,
                "confounded": r.confounded,
                "source": run.get("source", run.get("recording")),
                "gpu": run["gpu"],
                "tp": run["tensor_parallel_size"],
                "model": run["model"],
                "load": _load_text(run),
                "error": r.error,
            }
            for m in metrics:
                row[f"{m}_measured"] = r.measured.get(m)
                row[f"{m}_servesim"] = r.simulated.get(m)
                row[f"{m}_error"] = r.rel_error(m)
            row.update({k: (r.detail or {}).get(k) for k in details})
            w.writerow(row)
    s = error_summary(results, metrics)
    counted = [r for r in results if not r.confounded and not r.error]
    width = 24
    lines = [
        f"{what} ({len(counted)} counted of {len(results)}; {path}):",
        f"  {'':10s}" + "".join(f"{LABELS[m]:>{width}s}" for m in metrics),
    ]
    for split in ("calibrate", "heldout", "all"):
        if not s[(split, metrics[0])]["runs"]:
            continue
        cells = []
        for m in metrics:
            v = s[(split, m)]
            cells.append(f"{100 * v['median_abs_error']:5.1f}%, {v['off_by_2x']} > 2x")
        lines.append(
            f"  {split:10s}" + "".join(f"{c:>{width}s}" for c in cells) + f"   ({s[(split, metrics[0])]['runs']} runs)"
        )
    lines += gpu_lines(runs, results, metrics)
    lines += uncounted_lines(runs, results, metrics)
    if metrics is E2E_METRICS:
        lines += preemption_lines(results)
    failed = [r for r in results if r.error]
    if failed:
        lines.append(f"  not simulated: {len(failed)} (" + "; ".join(f"{r.id}: {r.error}" for r in failed) + ")")
    return lines


def gpu_lines(runs: list[dict], results: list[RunResult], metrics: tuple[str, ...]) -> list[str]:
    """Per GPU: the held-out runs' median errors (calibration runs apart), so that a GPU checked on
    few runs, or none held out, shows as such."""
    gpu_of = {r["id"]: r["gpu"] for r in runs}
    per: dict[str, list[RunResult]] = {}
    for r in results:
        if not r.confounded and not r.error:
            per.setdefault(gpu_of[r.id], []).append(r)
    if len(per) < 2:
        return []
    lines = ["  per GPU (held out; calibration runs counted apart):"]
    for gpu, rs in sorted(per.items()):
        held = [r for r in rs if r.split == "heldout"]
        errs = median_errors(held, metrics) or "none held out"
        lines.append(f"    {gpu} ({len(held)} held out, {len(rs) - len(held)} calibration): {errs}")
    return lines


def uncounted_lines(runs: list[dict], results: list[RunResult], metrics: tuple[str, ...]) -> list[str]:
    """The confounded runs' own median errors (reported, not counted), and why, where one or two
    reasons cover them all."""
    rs = [r for r in results if r.confounded and not r.error]
    if not rs:
        return []
    ids = {r.id for r in rs}
    why = sorted({str(r["confounded"]) for r in runs if r["id"] in ids and isinstance(r.get("confounded"), str)})
    reason = f" ({'; '.join(why)})" if 0 < len(why) <= 2 else ""
    return [f"  not counted: {len(rs)} runs{reason}: {median_errors(rs, metrics) or 'no metric'}"]


def median_errors(rs: list[RunResult], metrics: tuple[str, ...]) -> str:
    """ "output tok/s 12.3%, ...": the runs' median absolute error in each of the first three metrics
    that any of them has ("" where none has one)."""
    cells = []
    for m in metrics[:3]:
        found = [abs(e) for r in rs if not math.isnan(e := r.rel_error(m))]
        if found:
            cells.append(f"{LABELS[m]} {statistics.median(found):.1%}")
    return ", ".join(cells)


def offload_hit_lines(results: list[RunResult]) -> list[str]:
    """Prefix-cache hits by tier, the server's against servesim's, a line per run."""
    lines = ["  prefix-cache hits, GPU / host tier (server, servesim):"]
    for r in results:
        d = r.detail or {}
        if r.error or "host_prefix_cache_hit_rate" not in d:
            continue
        lines.append(
            f"    {r.id}: GPU {d['prefix_cache_hit_rate']:.1%}, {d['servesim_prefix_cache_hit_rate']:.1%}; "
            f"host {d['host_prefix_cache_hit_rate']:.1%}, {d['servesim_host_prefix_cache_hit_rate']:.1%}"
        )
    return lines


def preemption_lines(results: list[RunResult]) -> list[str]:
    """The recorded runs whose server preempted: simulated against logged preemptions."""
    pre = [
        (r, r.detail["server_preemptions"], r.detail["num_preemptions"])
        for r in results
        if not r.error and r.detail and r.detail.get("server_preemptions")
    ]
    if not pre:
        return []
    within = sum(1 for _, m, s in pre if m / 2 <= s <= 2 * m)
    return [
        f"  preemptions, runs where the server preempted: {within} of {len(pre)} within 2x ("
        + "; ".join(f"{r.id}: {m:,} vs {s:,}" for r, m, s in pre)
        + ")"
    ]


# Within 10% of every recording of one run is possible only while their spread (largest over
# smallest) is at most 1.1 / 0.9.
WITHIN_10_SPREAD = 1.1 / 0.9


def replicate_key(run: dict) -> str:
    """What makes two recorded runs the same run: the model, GPU and parallelism, the engine's flags,
    the API servers, the arrivals, the lengths and shared prefixes, and the benchmark's seed (so its
    prompts)."""
    seed = re.search(r"--seed (\d+)", run.get("bench_command", ""))
    return json.dumps([*_alike(run, run.get("engine") or {}), seed.group(1) if seed else run["id"]], sort_keys=True)


def _alike(run: dict, engine: dict) -> list:
    """A recorded run's model, GPU and parallelism, ``engine`` (its flags, or some of them), API servers
    (one when unsaid), arrivals, lengths and shared prefixes: what two runs share to be compared."""
    front = {"api_server_count": 1, **(run.get("frontend") or {})}
    fields = [run["model"], run["gpu"], run["tensor_parallel_size"], engine, front]
    return [*fields, run["arrival"], run["lengths"], run.get("prefix")]


def replicate_lines(runs: list[dict], results: list[RunResult]) -> list[str]:
    """The runs recorded more than once, on different machines of one kind: how far the recordings
    of one run differ, and servesim's figure beside them. Where they differ by more than
    ``WITHIN_10_SPREAD``, no figure can be within 10% of each. Confounded runs are left out."""
    by_id = {r.id: r for r in results if not r.error and not r.confounded}
    groups: dict[str, list[dict]] = {}
    for run in runs:
        if run["id"] in by_id:
            groups.setdefault(replicate_key(run), []).append(run)
    groups = {k: g for k, g in groups.items() if len({r["recording"] for r in g}) > 1}
    if not groups:
        return []
    lines = [f"  the same run recorded on different machines of one kind ({len(groups)} runs):"]
    wide = {"output_throughput": 0, "median_tpot_ms": 0}
    for g in sorted(groups.values(), key=lambda g: g[0]["id"]):
        parts = []
        for metric, fmt in (("output_throughput", "{:,.0f}"), ("median_tpot_ms", "{:.1f}")):
            measured = [by_id[r["id"]].measured[metric] for r in g]
            sim = [by_id[r["id"]].simulated[metric] for r in g]
            spread = max(measured) / min(measured)
            wide[metric] += spread > WITHIN_10_SPREAD
            shown = list(dict.fromkeys(fmt.format(x) for x in sim))  # one figure where the replays agree
            parts.append(
                f"{LABELS[metric]} "
                + " / ".join(fmt.format(x) for x in measured)
                + f" (x{spread:.2f}), servesim "
                + " / ".join(shown)
            )
        where = ", ".join(r["recording"] for r in g)
        lines.append(f"    {g[0]['lane']}/{g[0]['run']} ({where}): " + "; ".join(parts))
    lines.append(
        f"  recordings of one run more than x{WITHIN_10_SPREAD:.3f} apart (no figure within 10% of each): "
        f"output throughput {wide['output_throughput']} of {len(groups)}, p50 TPOT {wide['median_tpot_ms']} of {len(groups)}"
    )
    return lines


# How p50 TPOT grows with max_num_seqs: the two settings compared, and how far servesim's ratio may
# miss the server's (the check a user choosing max_num_seqs for a TPOT target leans on).
KNOB_RATIO_SEQS = (128, 512)
KNOB_RATIO_TOLERANCE = 0.30


def knob_key(run: dict) -> str:
    """What makes two runs of one recording the same run at another ``max_num_seqs``: every field of
    ``replicate_key`` but the engine's ``max_num_seqs`` and the benchmark's seed (each lane has its
    own), and the recording."""
    engine = {k: v for k, v in (run.get("engine") or {}).items() if k != "max_num_seqs"}
    return json.dumps([run["recording"], *_alike(run, engine)], sort_keys=True)


def knob_ratio_lines(runs: list[dict], results: list[RunResult]) -> list[str]:
    """Per held-out recording that ran one run at both ``KNOB_RATIO_SEQS``: the server's p50 TPOT at
    the larger over the smaller, servesim's, and how far apart (runs recorded more than once at a
    setting, alternating, count by their mean). Confounded runs are left out."""
    by_id = {r.id: r for r in results if not r.error and not r.confounded and r.split == "heldout"}
    groups: dict[str, dict[int, list[RunResult]]] = {}
    names: dict[str, dict] = {}
    for run in runs:
        n = (run.get("engine") or {}).get("max_num_seqs")
        if run["id"] in by_id and n in KNOB_RATIO_SEQS:
            key = knob_key(run)
            groups.setdefault(key, {}).setdefault(n, []).append(by_id[run["id"]])
            names.setdefault(key, run)
    pairs = {k: g for k, g in groups.items() if len(g) == len(KNOB_RATIO_SEQS)}
    if not pairs:
        return []
    lo, hi = KNOB_RATIO_SEQS
    m = "median_tpot_ms"
    lines = [
        f"  p50 TPOT at max_num_seqs {hi} over {lo}, one recording's runs otherwise alike (held out; "
        f"servesim's ratio within {KNOB_RATIO_TOLERANCE:.0%} of the server's):"
    ]
    within = 0
    for key in sorted(pairs, key=lambda k: names[k]["id"]):
        g, run = pairs[key], names[key]
        server, sim = (
            statistics.fmean(getattr(r, side)[m] for r in g[hi]) / statistics.fmean(getattr(r, side)[m] for r in g[lo])
            for side in ("measured", "simulated")
        )
        miss = sim / server - 1.0
        within += abs(miss) <= KNOB_RATIO_TOLERANCE
        front = (run.get("frontend") or {}).get("api_server_count", 1)
        lines.append(
            f"    {run['recording']} {run['model']} {run['run']} ({front} API server{'s' if front > 1 else ''}): "
            f"server {server:.2f}, servesim {sim:.2f} ({miss:+.1%}){' !' if abs(miss) > KNOB_RATIO_TOLERANCE else ''}"
        )
    lines.append(f"  within {KNOB_RATIO_TOLERANCE:.0%}: {within} of {len(pairs)}")
    return lines


# The issue's target for each recorded host: its runs' median errors in throughput and p50 TPOT.
HOST_TOLERANCE = 0.10


def host_lines(runs: list[dict], results: list[RunResult]) -> list[str]:
    """Per recorded host (a cloud machine, ``simulator/data/hosts.yaml``): its runs' median errors in
    output throughput and p50 TPOT as replayed (on its probe reading where it was read, else on the
    catalog's median host), and the factor its own runs would give it; then how many hosts are
    within ``HOST_TOLERANCE`` in both, naming the others."""
    from simulator.scenario.hosts import catalog

    cat = catalog()
    by_id = {r.id: r for r in results if not r.error and not r.confounded}
    per: dict[str, list[RunResult]] = {}
    probes: dict[str, set[float]] = {}
    for run in runs:
        if run["id"] in by_id:
            per.setdefault(run["recording"], []).append(by_id[run["id"]])
            if probe := (
                cat.hosts.get(run["recording"], {}).get("probe_us") or (run.get("host") or {}).get("probe_us")
            ):
                probes.setdefault(run["recording"], set()).add(float(probe))
    if not per:
        return []
    lines = ["  per host (held out: each replayed on its probe reading, or on the catalog's median host):"]
    missed = []
    for name, rs in sorted(per.items()):
        errs = {}
        for m in ("output_throughput", "median_tpot_ms"):
            found = [abs(e) for r in rs if not math.isnan(e := r.rel_error(m))]
            errs[m] = statistics.median(found) if found else math.nan
        if not all(e <= HOST_TOLERANCE for e in errs.values()):
            missed.append(name)
        h = cat.hosts.get(name, {})
        read = sorted(probes.get(name, ()))
        span = (f"{read[0]:.2f}" if len(read) == 1 else f"{read[0]:.2f}-{read[-1]:.2f}") if read else ""
        on = f"probe {span} us" if read else "the median host"
        own = f"; its own runs fit x{float(h['scale']):.2f}" if "scale" in h else ""
        lines.append(
            f"    {name} ({len(rs)} runs, on {on}{own}): throughput {errs['output_throughput']:.1%}, "
            f"p50 TPOT {errs['median_tpot_ms']:.1%}"
        )
    lines.append(
        f"  hosts within {HOST_TOLERANCE:.0%} in both medians: {len(per) - len(missed)} of {len(per)}"
        + (f" (not: {', '.join(missed)})" if missed else "")
    )
    return lines


# What a user choosing max_num_seqs needs right, run by run (docs/hosts.md, "How close, given the host"):
# the kind of held-out run each target covers, and the tolerances every such run must meet. The kinds
# are the recorder's plans' names for them (tools/e2e/plans): "kv", every prompt prefilled and the KV
# cache binding from 512 on; "decode", short prompts and long outputs, the CPU side binding.
KV_SWEEP_TOLERANCE = {"output_throughput": 0.05, "median_tpot_ms": 0.05, "median_ttft_ms": 0.15}
KV_SWEEP_PREEMPTIONS = 1.5  # the server's preemptions over servesim's, or the inverse, at most
DECODE_HEAVY_TOLERANCE = {"output_throughput": 0.10, "median_tpot_ms": 0.20}
DECODE_HEAVY_SEQS = (256, 1024)  # the max_num_seqs they are judged at, behind one API server
LIGHT_TOLERANCE = {"output_throughput": 0.10, "median_tpot_ms": 0.15}
LIGHT_CLIENTS = 16  # a closed loop of at most this many clients is light load
SHORT_METRIC = {"output_throughput": "throughput", "median_tpot_ms": "p50 TPOT", "median_ttft_ms": "p50 TTFT"}


def _misses(r: RunResult, tolerance: dict[str, float], preemptions: float = 0.0) -> list[str]:
    """What of run ``r`` misses ``tolerance`` (its relative error in each metric, at most), and, given
    ``preemptions``, its preemption count (servesim's and the server's within that factor; none on
    both sides meets it)."""
    out = [
        f"{SHORT_METRIC[m]} {e:+.1%}" for m, tol in tolerance.items() if not abs(e := r.rel_error(m)) <= tol
    ]  # a figure missing on either side (nan) misses
    if preemptions and r.detail:
        server, sim = r.detail.get("server_preemptions") or 0, r.detail.get("num_preemptions") or 0
        if (server or sim) and not (server and sim and max(server, sim) / min(server, sim) <= preemptions):
            out.append(f"preemptions {sim:,} against {server:,}")
    return out


def _described(tolerance: dict[str, float]) -> str:
    """A tolerance table in words, metrics of one tolerance together: "throughput and p50 TPOT within 5%,
    p50 TTFT within 15%"."""
    groups: list[tuple[float, list[str]]] = []
    for m, tol in tolerance.items():
        if groups and groups[-1][0] == tol:
            groups[-1][1].append(SHORT_METRIC[m])
        else:
            groups.append((tol, [SHORT_METRIC[m]]))
    return ", ".join(f"{' and '.join(names)} within {tol:.0%}" for tol, names in groups)


@dataclass(frozen=True)
class Target:
    """One kind of held-out run a user choosing ``max_num_seqs`` leans on: what it is, the target every
    such run must meet, the runs, and each that misses with what it misses (``_misses``)."""

    kind: str
    target: str
    runs: int
    missed: tuple[tuple[str, tuple[str, ...]], ...]


def targets(runs: list[dict], results: list[RunResult]) -> list[Target]:
    """The held-out runs of each kind and how they meet their target: the KV-bound ``max_num_seqs``
    sweeps (a recording's "kv" runs at two settings or more, runs otherwise alike: every point within
    ``KV_SWEEP_TOLERANCE``, preemptions within ``KV_SWEEP_PREEMPTIONS``), the decode-heavy runs behind
    one API server at ``DECODE_HEAVY_SEQS`` and light load (closed loops of at most ``LIGHT_CLIENTS``).
    Confounded runs are left out, and so is a kind with no run."""
    by_id = {r.id: r for r in results if not r.error and not r.confounded and r.split == "heldout"}
    kept = [run for run in runs if run["id"] in by_id]
    sweeps: dict[str, list[dict]] = {}
    for run in kept:
        if run["run"] == "kv":
            sweeps.setdefault(knob_key(run), []).append(run)

    def seqs(run: dict) -> int:
        return (run.get("engine") or {}).get("max_num_seqs", 0)

    lo, hi = DECODE_HEAVY_SEQS
    kv = [run for g in sweeps.values() if len({seqs(r) for r in g}) > 1 for run in g]
    one_api = [run for run in kept if (run.get("frontend") or {}).get("api_server_count", 1) == 1]
    decode = [run for run in one_api if run["run"] == "decode" and lo <= seqs(run) <= hi]
    light = [run for run in kept if (run["arrival"].get("max_concurrency") or math.inf) <= LIGHT_CLIENTS]
    kinds = (
        (
            "KV-bound max_num_seqs sweeps, every point",
            f"{_described(KV_SWEEP_TOLERANCE)}, preemptions within {KV_SWEEP_PREEMPTIONS}x",
            kv,
            KV_SWEEP_TOLERANCE,
            KV_SWEEP_PREEMPTIONS,
        ),
        (
            f"decode-heavy behind one API server at max_num_seqs {lo:,}-{hi:,}",
            _described(DECODE_HEAVY_TOLERANCE),
            decode,
            DECODE_HEAVY_TOLERANCE,
            0.0,
        ),
        (
            f"light load (closed loops of at most {LIGHT_CLIENTS} clients)",
            _described(LIGHT_TOLERANCE),
            light,
            LIGHT_TOLERANCE,
            0.0,
        ),
    )
    out = []
    for kind, target, group, tolerance, preemptions in kinds:
        missed = [(run["id"], tuple(m)) for run in group if (m := _misses(by_id[run["id"]], tolerance, preemptions))]
        if group:
            out.append(Target(kind, target, len(group), tuple(sorted(missed))))
    return out


def target_lines(runs: list[dict], results: list[RunResult]) -> list[str]:
    """``targets``, a line each, naming each run that misses on a line of its own."""
    lines = ["  the targets for choosing max_num_seqs (held out, each run on its host's reading):"]
    for t in targets(runs, results):
        met = t.runs - len(t.missed)
        lines.append(f"    {t.kind}: {t.target}: {met} of {t.runs}" + (" (not:" if t.missed else ""))
        lines += [f"      {name}: {', '.join(m)}" for name, m in t.missed]
        if t.missed:
            lines[-1] += ")"
    return lines if len(lines) > 1 else []


# Who measured the public SGLang runs: SGLang's own client, or vLLM's (GPUStack's runs).
SGLANG_CLIENT = "sglang.bench_serving or vllm bench serve"


def plot_runs(
    runs: list[dict],
    results: list[RunResult],
    path: Path,
    metrics: tuple[str, ...] = METRICS,
    title: str = "public vLLM benchmark runs (simulator/data/validation/runs.yaml)",
    client: str = "vllm bench serve",
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 5))
    styles = {"calibrate": ("o", "#1f77b4", "calibration runs"), "heldout": ("s", "#d62728", "held-out runs")}
    s = error_summary(results, metrics)
    for ax, m in zip(axes, metrics):
        got = [(r.measured.get(m), r.simulated.get(m), r) for r in results if not r.error]
        pts = [(a, b, r) for a, b, r in got if a and b]
        if not pts:  # every run of the selection failed: its errors are in the report
            ax.set_title(f"{LABELS.get(m, m)}: no run simulated")
            continue
        lo = min(min(a, b) for a, b, _ in pts) / 1.5
        hi = max(max(a, b) for a, b, _ in pts) * 1.5
        ax.fill_between([lo, hi], [lo / 2, hi / 2], [lo * 2, hi * 2], color="0.92", label="within 2x")
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=1)
        for split, (mk, col, lab) in styles.items():
            for conf in (False, True):
                xs = [a for a, b, r in pts if r.split == split and r.confounded == conf]
                ys = [b for a, b, r in pts if r.split == split and r.confounded == conf]
                if xs:
                    ax.scatter(
                        xs,
                        ys,
                        marker=mk,
                        s=36,
                        facecolors="none" if conf else col,
                        edgecolors=col,
                        label=f"{lab}, confounded (not counted)" if conf else lab,
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured {LABELS[m]} ({client})")
        ax.set_ylabel(f"servesim {LABELS[m]}")
        ax.set_title(
            f"{LABELS[m]}: median error {100 * s[('calibrate', m)]['median_abs_error']:.0f}% calibration,\n"
            f"{100 * s[('heldout', m)]['median_abs_error']:.0f}% held out",
            fontsize=10,
        )
        ax.grid(True, which="both", alpha=0.3)
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"servesim vs {len(results)} {title}")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    return path


def _select(runs: list[dict], only: list[str] | None, path: Path) -> list[dict]:
    """The runs whose id contains one of ``only`` (all without it); none is a one-line error."""
    from simulator.errors import ConfigError

    if not only:
        return runs
    picked = [r for r in runs if any(o in r["id"] for o in only)]
    if not picked:
        raise ConfigError(
            f"--only: no run of {path.name} has an id containing {' or '.join(map(repr, only))} "
            f"(ids look like {runs[0]['id']!r})"
        )
    return picked


def _select_pair(first: Path, second: Path, only: list[str] | None) -> tuple[list[dict], list[dict]]:
    """The runs of two files that ``only`` picks (all without it); none in either is a one-line error."""
    a, b = load(first)["runs"], load(second)["runs"]
    picked = {r["id"] for r in _select(a + b, only, first)}
    return [r for r in a if r["id"] in picked], [r for r in b if r["id"] in picked]


def main_validate(
    kv: bool,
    runs_check: bool,
    out: Path,
    jobs: int = 1,
    only: list[str] | None = None,
    recorded: bool = False,
    features: bool = False,
    sglang: bool = False,
) -> int:
    """``servesim validate``: the checks asked for (all by default), tables and plots in ``out``."""
    public = _select(load(RUNS_FILE)["runs"], only, RUNS_FILE) if runs_check else []
    # --only picks from both files of a check; it must match a run of one of them
    sgl, sgl_rec = _select_pair(SGLANG_FILE, E2E_SGLANG_FILE, only) if sglang else ([], [])
    rec, offload = _select_pair(E2E_FILE, OFFLOAD_FILE, only) if recorded else ([], [])
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    judged: dict = {}  # what the verdict weighs (verdict.outcomes' arguments)
    if kv:
        judged["kv"], judged["kv_recorded"] = kv_rows(), kv_rows_recorded()
        lines += write_kv_report(judged["kv"], out)
        lines += write_kv_report(
            judged["kv_recorded"], out, "kv_cache_check_recorded.csv", "the servers recorded with tools/e2e (data/e2e/)"
        )
    if public:
        results = judged["public"] = run_all(public, jobs=jobs)
        lines += write_runs_report(public, results, out)
        lines.append(f"  plot: {plot_runs(public, results, out / 'validation.png')}")
    if rec:
        results = judged["recorded"] = run_all(rec, jobs=jobs, recorded=True)
        lines += write_runs_report(
            rec,
            results,
            out,
            E2E_METRICS,
            "recorded.csv",
            "Recorded vLLM 0.26 servers vs their `vllm bench serve` runs (data/e2e/)",
        )
        lines += replicate_lines(rec, results)
        lines += knob_ratio_lines(rec, results)
        lines += target_lines(rec, results)
        lines += host_lines(rec, results)
        shown = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
        lines.append(
            f"  plot: {plot_runs(rec, results, out / 'validation_recorded.png', shown, 'recorded runs of real vLLM servers (data/e2e/)')}"
        )
    if sgl:
        results = run_all(sgl, jobs=jobs)
        lines += write_runs_report(
            sgl, results, out, SGLANG_METRICS, "sglang_runs.csv", "Public SGLang runs vs their benchmarks' results"
        )
        lines.append(
            f"  plot: {plot_runs(sgl, results, out / 'validation_sglang.png', SGLANG_METRICS[:3], 'public SGLang runs', SGLANG_CLIENT)}"
        )
    for group, name, title in (
        (
            sgl_rec,
            "recorded_sglang.csv",
            "Recorded SGLang 0.5.16 servers vs their `vllm bench serve` runs (data/e2e/; no target)",
        ),
        (
            offload,
            "recorded_kv_offload.csv",
            "Recorded vLLM 0.26 servers with KV offloading off / 16 / 64 GiB (nothing fitted)",
        ),
    ):
        if group:
            results = run_all(group, jobs=jobs, recorded=True)
            lines += write_runs_report(group, results, out, E2E_METRICS, name, title)
            lines += offload_hit_lines(results) if group is offload else []
    feature_errors: list[float] = []
    if features:
        from simulator.validation import features as features_validation

        rows = features_validation.run_sets(jobs=jobs)
        lines += features_validation.write_report(rows, out)
        feature_errors = [err for _, _, err, _ in features_validation.medians(rows)]
    short = verdict.report(verdict.outcomes(**judged), feature_errors, counts(judged, offload))
    atomic_write_text(out / "report.txt", "\n".join(lines) + "\n")
    atomic_write_text(out / "verdict.txt", "\n".join(short) + "\n")
    print("\n".join(lines))
    print(
        "\n"
        + "\n".join(short + [f"(the details above are in {out / 'report.txt'}; this verdict in {out / 'verdict.txt'})"])
    )
    return 0


def counts(judged: dict, offload: list[dict]) -> str:
    """What was replayed, counted as the verdict counts it (the README quotes this line)."""
    parts = []
    for key, what in (("recorded", "recorded runs"), ("public", "public runs")):
        rs = judged.get(key)
        if rs is None:
            continue
        ok = [r for r in rs if not r.error and not r.confounded]
        cal = sum(r.split == "calibrate" for r in ok)
        parts.append(
            f"{len(rs)} {what} ({cal} calibration, {len(ok) - cal} held out, {sum(r.confounded for r in rs)} "
            "confounded: not counted"
            + (f", {sum(bool(r.error) for r in rs)} not simulated" if any(r.error for r in rs) else "")
            + ")"
        )
    if offload:
        parts.append(f"{len(offload)} recorded with KV offloading (no target)")
    if "kv" in judged:
        parts.append(
            f"{len(judged['kv']) + len(judged['kv_recorded'])} KV-pool sizes ({len(judged['kv'])} from public "
            f"start-up logs, {len(judged['kv_recorded'])} recorded)"
        )
    return "Replayed " + ", ".join(parts) if parts else ""
