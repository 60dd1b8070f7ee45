"""What a reader of a run's table should not miss, as one-line notes: a server vLLM would not start
(its KV pool cannot hold one request of max_model_len); requests rejected, cut or aborted; a run that
ended before its requests did; traffic the server could not keep up with; a run in which nothing was
measured or nothing reached the engine, and why; steps that waited for kernels compiled on first
use; a huge per-step log; and settings that follow an
older vLLM than the release line named (swap preemption); a vLLM release that runs as the release
line it shares its modelled behaviour with, and what differs."""

from __future__ import annotations

import numpy as np

from simulator.engine.rules import RequestStatus
from simulator.outputs.figures import share
from simulator.scenario import sglang, versions
from simulator.scenario.config import Scenario

STEP_ROWS_HINT = 1_000_000  # more engine steps than this: suggest a binned step log
OVERLOAD_WAITING = 0.1  # of the requests submitted, the share still waiting that calls a run overloaded
# A queue that grew in this share of equal slices of the measured window (and by at least
# OVERLOAD_GROWTH requests over it) calls an open-loop run overloaded, however few are left waiting
# at the end: a stable queue grows in about half of them, and rises no further.
OVERLOAD_SLICES, OVERLOAD_SHARE, OVERLOAD_GROWTH = 20, 0.6, 10
# servesim's KV pool against the pools real vLLM servers logged: within 2% (docs/validation.md), so a
# pool this close to one request of max_model_len may be one that vLLM refuses.
KV_POOL_ERROR = 0.02


SGLANG_NOTE = (
    "SGLang 0.5's scheduler (prefill first, admission that keeps room for output, retraction); not "
    "modelled: expert parallelism's all-to-all and balancing, DP-attention ranks' imbalance, "
    "the overlap scheduler's one-step-late finish, an MoE layer's own launches in a prefill without CUDA "
    "graphs beyond one Hopper GPU; its host costs are fitted on five public runs and ten of two recorded "
    "servers (docs/sglang.md)"
)


PROBE_NOTE = (
    "hardware.host gives a probe reading: on the cloud machines servesim was recorded on, a reading told a "
    "host's CPU factor no better than the other hosts' mean did (leave one out over 43 hosts: mean |log| "
    "error 0.143 against 0.144, docs/hosts.md); leave hardware.host out to get the band across hosts"
)


def scenario_notes(sc: Scenario) -> list[str]:
    """Notes on the scenario itself, before it runs (``servesim check`` prints them too)."""
    from simulator.fleet import engine_groups

    groups = [g for g, _, _ in engine_groups(sc)]
    notes = []
    if any(g.engine.framework == "sglang" for g in groups):
        notes.append(f"{sc.name}: {SGLANG_NOTE}")
    for policy in sorted({g.engine.schedule_policy for g in groups if g.engine.framework == "sglang"}):
        if policy in sglang.CACHE_AWARE_POLICIES and any(
            g.engine.schedule_policy == policy and not g.engine.prefix_caching for g in groups
        ):
            notes.append(
                f"{sc.name}: engine.schedule_policy '{policy}' orders the queue by the radix cache, which "
                "engine.disable_radix_cache turns off: it runs as 'fcfs', as SGLang adjusts it"
            )
    if any(isinstance(g.hardware.host, dict) for g in groups):
        notes.append(f"{sc.name}: {PROBE_NOTE}")
    for release in sorted({g.engine.vllm_version for g in groups if g.engine.framework == "vllm"}):
        note = versions.release_note(release)
        if note:
            notes.append(f"{sc.name}: {note}")
    swapping = sorted({g.engine.vllm_version for g in groups if g.engine.preemption_mode == "swap"})
    if swapping:
        notes.append(
            f"{sc.name}: engine.preemption_mode 'swap': vLLM {', '.join(swapping)} (V1, as every release "
            "line servesim follows) has no swap preemption, only recompute; this run swaps as vLLM V0 did "
            "with --swap-space"
        )
    notes += _hybrid_notes(sc.name, sorted({str(g.model) for g in groups}))
    notes += _dummy_routing_notes(sc.name, groups)
    notes += _attention_notes(sc.name, groups)
    return notes


def _dummy_routing_notes(name: str, groups: list[Scenario]) -> list[str]:
    """Dummy weights on a mixture-of-experts model whose router adds a bias to its scores: vLLM's
    dummy router sends every token to the same experts (``cost.expert_params``), so its steps read a
    few experts' weights where a real checkpoint's read most of them at a few dozen requests."""
    from simulator.errors import ConfigError
    from simulator.scenario.models import load_model

    out = []
    for g in groups:
        if g.engine.load_format != "dummy":
            continue
        try:
            m = load_model(g.model)
        except ConfigError:
            continue  # said where the scenario is built
        if not (m.is_moe and m.router_bias):
            continue
        note = (
            f"{name}: engine.load_format 'dummy' on {m.name}: its dummy router sends every token to the same "
            f"{m.experts_per_token} of {m.num_experts} experts, as a vLLM server with dummy weights does, so "
            "each step reads only their weights (gpt-oss-120b's 1k/8k decode at 16 requests: 13.3 ms a token "
            "recorded on a server routed as a real checkpoint, 4.8 ms priced with dummy routing); leave it 'auto' "
            "to price a real checkpoint's routing"
        )
        if note not in out:
            out.append(note)
    return out


def _attention_notes(name: str, groups: list[Scenario]) -> list[str]:
    """vLLM's attention kernel where it is not FlashAttention: on an AMD GPU, which kernel the release
    runs there by default, and whether its rates were measured (only vLLM's Triton kernel, on the
    MI355X) or are the GPU's calibration; on Ampere or Ada, the Triton kernel vLLM falls back to for a
    model with attention sinks (gpt-oss), and at what rate it is priced."""
    from simulator.engine import calibration
    from simulator.engine.cost import TRITON_ATTN_COMPUTE
    from simulator.errors import ConfigError
    from simulator.resolve import attention_kernel
    from simulator.scenario.hardware import load_gpu
    from simulator.scenario.models import load_model

    out = []
    for g in groups:
        if g.engine.framework != "vllm" or g.cost.calibration != "auto":
            continue
        try:
            gpu, model = load_gpu(g.hardware.gpu), load_model(g.model)
        except ConfigError:
            continue  # said where the scenario is built
        kernel = attention_kernel(g, gpu, model)
        if kernel == "triton":
            note = (
                f"{name}: vLLM runs {model.name}'s attention on {gpu.key} with its Triton kernel (TRITON_ATTN: "
                "FlashAttention-2 has no attention sinks), whose prefill is priced at "
                f"{TRITON_ATTN_COMPUTE:.0%} of the bf16 peak (fitted on one public A100 run; on an H200 the kernel "
                "measured a tenth of FlashAttention-3's rate): long prompts prefill several times slower than "
                "FlashAttention would take them"
            )
            if g.cost.attn_compute is None and note not in out:
                out.append(note)
            continue
        if kernel == "rocm_triton":
            if calibration.vllm_attention(gpu.key):
                continue  # measured: docs/validation.md, "AMD Instinct under vLLM"
            text = "its Triton attention (TRITON_ATTN, the default before 0.19), measured only on the MI355X"
        elif gpu.gfx:
            text = "ROCM_ATTN (the default from 0.19), which nothing here measured"
        else:
            continue
        note = (
            f"{name}: vLLM {g.engine.vllm_version} on {gpu.key} runs {text}: attention is priced at the GPU's "
            "calibration, which may be far from that kernel (vLLM 0.15.1's Triton attention reached 2.5% of the "
            "MI355X's bf16 peak in prefill)"
        )
        if note not in out:
            out.append(note)
    return out


def _hybrid_notes(name: str, models: list[str]) -> list[str]:
    """A model with sliding-window layers beside full-attention ones: how its KV pool is sized."""
    from simulator.errors import ConfigError
    from simulator.scenario.models import builtin_for_repo, load_model

    out = []
    for spec in models:
        try:
            m = load_model(spec)
        except ConfigError:
            continue  # said where the scenario is built
        builtin = builtin_for_repo(spec)
        if builtin is not None:
            out.append(f"{name}: model '{spec}' runs as the built-in {builtin} (its config.json's architecture)")
        if m.is_hybrid:
            out.append(
                f"{name}: {m.name} has {m.num_sliding_layers} sliding-window layers ({m.sliding_window} tokens) of "
                f"{m.num_layers}: the KV pool holds the others and sets aside the windows of the most requests that "
                "can run at once (max_num_seqs, or the workload's closed-loop clients if fewer; vLLM shares one pool "
                "between them), so it can be smaller than vLLM's when fewer requests run"
            )
    return out


def run_notes(summary: dict, result) -> list[str]:
    """Notes on a finished run (see the module docstring)."""
    sc, name = result.scenario, summary["scenario"]
    notes = scenario_notes(sc) + _startup_notes(result.engine, name)
    n_sub = summary["num_submitted"]
    if summary["num_rejected"]:
        first = next(iter(result.engine.reject_reasons.values()), "")
        notes.append(f"{name}: {summary['num_rejected']:,} of {n_sub:,} requests rejected (the first: {first})")
    if summary["num_truncated"]:
        notes.append(
            f"{name}: {summary['num_truncated']:,} requests cut to fit max_model_len "
            "(workload.over_max_model_len: truncate; 'resample' draws them again, 'reject' submits them as drawn)"
        )
    if summary["num_aborted"]:
        notes.append(
            f"{name}: {summary['num_aborted']:,} requests aborted: swap space full (engine.on_swap_full: abort)"
        )
    want = sc.run.num_requests
    if want is not None and summary["stopped_by"] == "duration" and n_sub < want:
        notes.append(
            f"{name}: stopped at run.duration_s ({summary['simulated_time_s']:g} s) after submitting {n_sub:,} of "
            f"run.num_requests {want:,} (without run.duration_s the run goes on until all are done)"
        )
    load = _load_notes(summary, result)
    notes += load
    if any(": overloaded: " in n for n in load):
        notes += _api_bound_notes(summary, result)
    else:
        notes += _api_paced_notes(summary, result)
    notes += _ungraphed_moe_notes(summary, result)
    notes += _jit_notes(summary, result)
    if sc.run.step_log_bin_s is None and summary["num_steps"] > STEP_ROWS_HINT:
        notes.append(
            f"{name}: steps.csv has {summary['num_steps']:,} rows, one per engine step; "
            "--set run.step_log_bin_s=1 keeps one row per simulated second instead"
        )
    return notes


# What an MoE model's decode steps cost without CUDA graphs where they were measured (one GPU): vLLM
# 0.26 offline (data/profiles/README-measurements.md, "A step without CUDA graphs in vLLM 0.26" and "What
# a step without graphs waits on") and the recorded vLLM and SGLang servers (data/e2e/README.md,
# h200_moe_2026-11-30 and h200_mla_2026-11-30). servesim prices their MoE layers' host time on one Hopper
# GPU (cost.fused_moe_eager_layers) and its launches a request (cost.launch_s); the measurements spread
# widely, and DeepSeek-V2-Lite's served steps are longer than servesim's.
UNGRAPHED_CLAIM = "such MoE steps were measured 2-3.5x as long as with graphs, and spread widely"
UNGRAPHED_MOE = (
    f"{UNGRAPHED_CLAIM} (one H200: Qwen3-30B-A3B on vLLM 0.26, 63-90 ms at 640-768 requests offline on two "
    "machines and 25.5-28.9 ms with graphs, where servesim gives 57-64 ms; the recorded vLLM and SGLang servers "
    "of two MoE models, 55-69 ms)"
)
UNGRAPHED_SHARE = 0.05  # of a run's steps: fewer such steps change little


def ungraphed_moe_share(result, steps: dict) -> float | None:
    """The share of an MoE model's steps on one GPU that decode more requests than its largest CUDA
    graph (``summary.json``'s ``ungraphed_decode_steps``; ``steps``: the run's steps.csv columns), where
    at least ``UNGRAPHED_SHARE`` do; None otherwise (a dense model, more GPUs, no graphs at all, or a
    binned step log)."""
    sc = result.scenario
    if not result.model.is_moe or sc.hardware.tensor_parallel_size != 1 or hasattr(result.engine, "replicas"):
        return None
    cap = result.engine.cost.execution.max_capture_size
    if cap <= 0 or sc.run.step_log_bin_s is not None:
        return None  # eager throughout (said apart), or no per-step rows to tell
    seqs = np.asarray(steps["num_seqs"], dtype=float)
    if not seqs.size:
        return None
    share = float(((np.asarray(steps["prefill_tokens"], dtype=float) == 0) & (seqs > cap)).mean())
    return share if share >= UNGRAPHED_SHARE else None


def _ungraphed_moe_notes(summary: dict, result) -> list[str]:
    """An MoE model on one GPU whose decode steps outgrow its largest CUDA graph: such steps were
    measured longer than servesim prices them (``UNGRAPHED_MOE``; data/profiles/README-measurements.md
    says which forms of that cost were tried); the knob that keeps them graphed."""
    share = summary.get("ungraphed_decode_steps")
    if share is None:
        return []
    cap = result.engine.cost.execution.max_capture_size
    sglang = result.scenario.engine.framework == "sglang"
    knob = "engine.cuda_graph_max_bs" if sglang else "engine.max_cudagraph_capture_size"
    cap_of = "max_running_requests" if sglang else "max_num_seqs"
    return [
        f"{summary['scenario']}: {share:.0%} of its steps decode more requests than its largest CUDA graph "
        f"({cap:,}) and run without one; {UNGRAPHED_MOE}, so where they set the pace its TPOT is low and its "
        f"throughput high; {knob} at least {cap_of}, or {cap_of} within {cap:,}, keeps them graphed"
    ]


def _jit_notes(summary: dict, result) -> list[str]:
    """Steps that waited for kernels they ran first to be compiled (``summary.json``'s ``jit_compiles``,
    ``simulator.engine.cost.first_compile``): how long, and the setting for a server that ran them before."""
    jit = summary.get("jit_compiles")
    if jit is None:
        return []
    told = result.scenario.engine.jit_cache
    state = "a server just started" if told == "cold" else f"a server that ran the {len(told):,} step sizes given"
    return [
        f"{summary['scenario']}: {jit['steps']:,} steps run without CUDA graphs waited for vLLM's Triton MoE "
        f"kernels to compile for their size, {jit['seconds']:.1f} s in all ({state}, engine.jit_cache); "
        "engine.jit_cache: warm prices a server that has run every step size before, or whose Triton cache "
        "holds their kernels"
    ]


def _startup_notes(engine, name: str) -> list[str]:
    """vLLM starts only if its KV pool holds one request of max_model_len (and says so at start-up,
    with the longest it could hold); servesim runs such a server anyway, rejecting what cannot fit.
    SGLang starts with any pool (it caps a request at the pool's tokens less one)."""
    engines = [r.engine for r in engine.replicas] if hasattr(engine, "replicas") else [engine]
    engines = [e for e in engines if e.cfg.framework != "sglang"]
    if not engines:
        return []
    short = min(engines, key=lambda e: e.kv_cache_tokens / e.max_model_len)
    pool, max_len = short.kv_cache_tokens, short.max_model_len
    if pool < max_len:
        return [
            f"{name}: vLLM would not start this server: its KV pool ({pool:,} tokens) holds less than one "
            f"request of engine.max_model_len ({max_len:,}); set engine.max_model_len <= {pool:,} or give the "
            "cache more memory"
        ]
    if pool < max_len * (1.0 + KV_POOL_ERROR):
        return [
            f"{name}: vLLM may not start this server: its KV pool ({pool:,} tokens) holds one request of "
            f"engine.max_model_len ({max_len:,}) with {pool / max_len - 1.0:.1%} to spare, within servesim's "
            f"{KV_POOL_ERROR:.0%} error on the pool (Qwen3-32B on one H100: 0.9% to spare here, refused by vLLM 0.26); set "
            "engine.max_model_len lower"
        ]
    return []


# What the recorded servers did where this note fires (data/e2e/README.md, h200x2_overload_2026-11-27 and -28,
# h200x2_2026-11-27, h200x2_steps_2026-11-27, h100_profile_2026-11-28, h200_streams_2026-12-01: nine overloaded
# Poisson runs behind one API server; docs/hosts.md).
RECORDED_API_BOUND = (
    "On recorded servers behind one API server past its rate, the engines held 320-980 requests where "
    "servesim's held 120-190 at the same load, and TPOT was 1.2-2.5x servesim's (docs/hosts.md)"
)


def _api_bound_notes(summary: dict, result) -> list[str]:
    """An overloaded run whose backlog waits before the engine, in the API server (the engine's own
    queue empty in most steps): there the engine's running count, and with it TPOT, is not fixed by
    the load. The API server's rate fixes the output token rate R, and any running count N keeps
    pace with it, so N drifts with the run; each running request gets a token every N / R seconds,
    up to max_num_seqs / R once the engine has filled (``RECORDED_API_BOUND``: what recorded servers did)."""
    from simulator.metrics import step_columns

    sc, name = result.scenario, summary["scenario"]
    if not sc.frontend.enabled or sc.cluster is not None or sc.disaggregation is not None:
        return []
    rate, tpot = summary.get("output_throughput") or 0.0, summary.get("median_tpot_ms")
    st = step_columns(result)
    start = np.asarray(st["start"], dtype=float)
    arrival = result.reqs.columns()["arrival"]
    kept = (start >= sc.run.warmup_s) & (start <= float(arrival.max()))  # while requests came in
    if rate <= 0 or tpot is None or not kept.any():
        return []
    waiting = np.asarray(st["num_waiting"], dtype=float)[kept]
    running = float(np.median(np.asarray(st["num_running"], dtype=float)[kept]))
    most = result.sched_cfg.max_num_seqs  # the cap the engine ran with (a scenario may leave it to the release)
    if np.median(waiting) > 0 or running >= 0.9 * most:
        return []  # the engine itself is the bottleneck, or already full
    return [
        f"{name}: the backlog waits in the API server (frontend.api_server_count {sc.frontend.api_server_count}), "
        f"not in the engine: read TPOT as a floor. Past the API server's rate the engine's running count is not "
        f"fixed by the load and drifts with the run: {running:,.0f} here (the median while requests came in); "
        f"were it max_num_seqs ({most:,}), each would get a token every {1000.0 * most / rate:,.0f} ms at this "
        f"output rate. {RECORDED_API_BOUND}"
    ]


# Where one API server sets a closed loop's pace at this many requests running, the recorded servers'
# spread and servesim's bias are largest (docs/hosts.md, "How it is checked, and what is not held out").
API_PACED_RUNNING = 512
RECORDED_API_PACED = (
    "at 768 running, fourteen recorded runs on ten machines had servesim, on their readings, from 15% low to 21% "
    "high in throughput (median 1% high: 10% high on the six H200 machines, 9-15% low on three of the four H100s) "
    "and from 17% low to 22% high in p50 TPOT (median 4% low), and one machine served the same run at "
    "12,974-18,334 tok/s within fifteen minutes; behind two API servers servesim was 12% low to 9% high in "
    "throughput over the max_num_seqs sweeps (docs/hosts.md)"
)


def _api_paced_notes(summary: dict, result) -> list[str]:
    """A run whose engine waited, in most of its steps, for its one API server to take the step before's
    outputs (``simulator.engine.host.step_start``) with many requests running: there the host's CPU
    sets the pace, and what recorded servers did differs most from servesim (``RECORDED_API_PACED``)."""
    from simulator.metrics import step_columns

    sc, name = result.scenario, summary["scenario"]
    if (
        not sc.frontend.enabled
        or sc.frontend.api_server_count != 1
        or sc.engine.framework != "vllm"
        or sc.cluster is not None
        or sc.disaggregation is not None
        or sc.run.step_log_bin_s is not None
    ):
        return []
    st = step_columns(result)
    start, dur = np.asarray(st["start"], dtype=float), np.asarray(st["duration"], dtype=float)
    running = np.asarray(st["num_running"], dtype=float)
    kept = (start[:-1] >= sc.run.warmup_s) & (running[:-1] > 0)
    if not kept.any():
        return []
    waited = (start[1:] - start[:-1] - dur[:-1]) > 0.05 * dur[:-1]  # the next step started late
    share, held = float(np.mean(waited[kept])), float(np.median(running[:-1][kept]))
    if share < 0.5 or held < API_PACED_RUNNING:
        return []
    return [
        f"{name}: one API server paced the engine (it waited for the API server in {share:.0%} of its steps, "
        f"{held:,.0f} requests running): read the band, not one figure, as the answer; "
        f"{RECORDED_API_PACED}"
    ]


def queue_growth(c: dict, t0: float, t1: float, slices: int = OVERLOAD_SLICES) -> tuple[float, int, int]:
    """How the queue (requests arrived and not yet scheduled, rejected ones left out) moved over
    [t0, t1]: the share of ``slices`` equal slices in which it grew, and its length at t0 and t1."""
    if t1 <= t0:
        return 0.0, 0, 0
    kept = c["status"] != RequestStatus.REJECTED
    arrived = np.sort(c["arrival"][kept])
    started = c["first_scheduled"][kept]
    started = np.sort(np.where(np.isfinite(started), started, np.inf))
    at = np.linspace(t0, t1, slices + 1)
    q = np.searchsorted(arrived, at, side="right") - np.searchsorted(started, at, side="right")
    return float(np.mean(np.diff(q) > 0)), int(q[0]), int(q[-1])


def _load_notes(summary: dict, result) -> list[str]:
    """Whether the run measured anything, and whether the server kept up with open-loop traffic."""
    sc, name = result.scenario, summary["scenario"]
    c = result.reqs.columns()
    arrival, status = c["arrival"], c["status"]
    n_sub, warm = summary["num_submitted"], sc.run.warmup_s
    if n_sub == 0:
        return [f"{name}: no request arrived in the run's {summary['simulated_time_s']:g} s: nothing to measure"]
    if summary["num_steps"] == 0 and summary["num_rejected"] < n_sub:
        why = ""
        if sc.frontend.enabled:
            why = (
                " (the API server takes requests in one at a time: raise frontend.api_server_count, lower the "
                "load or run longer)"
            )
        return [
            f"{name}: no engine step ran: none of the {n_sub:,} requests submitted reached the engine within the "
            f"run's {summary['simulated_time_s']:g} s{why}"
        ]
    notes = []
    if warm > 0 and not (arrival >= warm).any():
        notes.append(
            f"{name}: every request arrived during the warm-up (the last at {float(arrival.max()):.1f} s, "
            f"run.warmup_s {warm:g}): nothing was measured; lower run.warmup_s, or raise run.num_requests or "
            "the rate"
        )
    elif sc.run.num_requests is not None and warm > 0 and (early := int(np.count_nonzero(arrival < warm))) * 2 > n_sub:
        notes.append(
            f"{name}: run.warmup_s ({warm:g} s) leaves out the {early:,} of the {n_sub:,} requests that arrived "
            f"in it: the figures are the last {n_sub - early:,}'s; `vllm bench serve --num-prompts` counts every "
            "request, so set run.warmup_s=0 to compare with it"
        )
    elif summary["num_completed"] == 0 and summary["output_throughput"] > 0:
        notes.append(
            f"{name}: no request that arrived after the warm-up finished before the run ended "
            f"({summary['num_in_flight_at_end']:,} in flight): latencies are empty; run longer"
        )
    open_loop = sc.workload.trace is not None or sc.workload.arrival.type != "closed_loop"
    if not open_loop:
        return notes
    if summary["stopped_by"] == "duration":
        waiting = summary["num_waiting_at_end"]
        if waiting > max(10, OVERLOAD_WAITING * n_sub):
            notes.append(
                f"{name}: overloaded: {waiting:,} requests still waiting at the end ({waiting / n_sub:.0%} of "
                "those submitted): arrivals outpace the server, so latencies grow with the run's length"
            )
            return notes
        end = float(summary["simulated_time_s"])
    else:
        # A run that ends when its requests are done drains its queue after the last arrival:
        # overloaded if, when the last request arrived, a good share had not been scheduled yet (the
        # queue grew for as long as requests came in).
        end = float(arrival.max())
        waiting = int(np.count_nonzero((status != RequestStatus.REJECTED) & ~(c["first_scheduled"] <= end)))
        if waiting > max(10, OVERLOAD_WAITING * n_sub):
            span = end - float(arrival.min())
            rate = f"requests arrived at {n_sub / span:,.1f}/s, " if span > 0 else "requests arrived "
            ttft = summary.get("median_ttft_ms")
            ttft_s = f", median TTFT {ttft / 1e3:,.1f} s" if ttft is not None else ""
            notes.append(
                f"{name}: overloaded: {rate}faster than served ({summary['request_throughput']:,.1f}/s{ttft_s}); "
                f"{waiting:,} ({waiting / n_sub:.0%}) were still waiting when the last arrived, so latencies grow "
                "with run.num_requests"
            )
            return notes
    # However few wait at the end: a queue that grew through most of the measured window.
    grew, q0, q1 = queue_growth(c, warm, end)
    if grew >= OVERLOAD_SHARE and q1 - q0 >= OVERLOAD_GROWTH:
        ttft = summary.get("median_ttft_ms")
        slo = summary.get("slo_attainment")
        extra = (f", median TTFT {ttft / 1e3:,.1f} s" if ttft is not None else "") + (
            f", {share(slo)} within the SLO" if slo is not None else ""
        )
        notes.append(
            f"{name}: overloaded: the queue grew in {grew:.0%} of the measured window ({q0:,} waiting at its "
            f"start, {q1:,} at its end{extra}): arrivals outpace the server, so latencies grow with the run"
        )
    return notes
