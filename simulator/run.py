"""Wire a validated scenario into a simulation and run it."""

from __future__ import annotations

import gc
import os
import time
from dataclasses import dataclass, replace

import numpy as np
import simpy

from simulator import versions
from simulator.config import Scenario, check_model, run_duration
from simulator.cost import (
    FA2_ATTN_COMPUTE,
    FA2_MIXED_DECODE_ROWS,
    FA3_ATTN_COMPUTE,
    FA3_ATTN_MEMORY,
    CostModel,
    Efficiency,
    Execution,
    FrontendCosts,
    StepWork,
    decode_work,
)
from simulator.engine import Engine
from simulator.errors import ConfigError
from simulator.hardware import GPU, load_gpu
from simulator.memory import GIB, MemoryPlan, plan_memory
from simulator.models import ModelArch, load_model
from simulator.requests import RequestTable
from simulator.rules import SchedulerConfig
from simulator.step_log import BinnedStepLog, StepLog
from workloads.config import parse_schedule
from workloads.factory import Ids, keeps_finished_content, start_workload


@dataclass
class Result:
    scenario: Scenario
    model: ModelArch
    gpu: GPU
    memory: MemoryPlan
    sched_cfg: SchedulerConfig
    reqs: RequestTable
    engine: Engine
    end_time: float
    wall_s: float
    workload_counts: Ids  # what the workload did (requests truncated or drawn again to fit max_model_len)
    size: RunSize  # what it was estimated to hold before it ran
    stopped_by: str  # "duration" (run.duration_s or the default length), or "requests done"


def engine_defaults(gpu: GPU, sc: Scenario) -> tuple[int, int]:
    """vLLM's `vllm serve` defaults: larger batches on 80 GB-class GPUs other than A100s."""
    seqs, tokens = versions.batch_defaults(versions.version(sc.engine.vllm_version), gpu.name, gpu.hbm_bytes)
    return sc.engine.max_num_seqs or seqs, sc.engine.max_num_batched_tokens or tokens


def execution(sc: Scenario, gpu: GPU, seqs: int, tokens: int) -> Execution:
    """How the engine runs its steps (CUDA graphs, async scheduling, the attention kernel's extra
    cost in mixed steps), from the version's defaults and the GPU."""
    e = sc.engine
    v = versions.version(e.vllm_version)
    return Execution(
        max_capture_size=0 if e.enforce_eager else versions.max_capture_size(v, seqs, tokens, e.max_cudagraph_capture_size),
        capture_by16_from=v.capture_by16_from,
        full_decode_graphs=v.cudagraph_mode == "full_and_piecewise",
        pad=not e.enforce_eager,
        async_scheduling=v.async_scheduling if e.async_scheduling is None else e.async_scheduling,
        cpu_share=1.0,
        enforce_eager=e.enforce_eager,
        mixed_decode_rows=FA2_MIXED_DECODE_ROWS if versions.attention_kernel(gpu.compute_capability) == "fa2" else 0.0,
    )


def efficiency(sc: Scenario, gpu: GPU, model: ModelArch) -> Efficiency:
    """Calibrated factors (built-in for the GPU, or a file), the attention rates of the kernel vLLM
    runs on the GPU (FlashAttention-3 on Hopper, measured; FlashAttention-2 on 8.x, published), then
    any per-field overrides."""
    from simulator import calibrate

    c = sc.cost
    base = calibrate.resolve(c.calibration, gpu.key)
    v = versions.version(sc.engine.vllm_version)
    over = {"cpu_step_s": v.host.engine_step_s, "cpu_per_seq_s": v.engine_per_seq_s}
    kernel = versions.attention_kernel(gpu.compute_capability)
    if kernel == "fa3" and not model.is_mla:  # MLA runs FlashMLA instead
        over.update(attn_compute=FA3_ATTN_COMPUTE, attn_memory=FA3_ATTN_MEMORY)
    elif kernel == "fa2" and not model.is_mla:
        over.update(attn_compute=FA2_ATTN_COMPUTE)
    for f in ("matmul_compute", "matmul_memory", "attn_compute", "attn_memory"):
        v = getattr(c, f)
        if v is not None:
            over[f] = v
    if c.step_overhead_ms is not None:
        over["step_overhead_s"] = c.step_overhead_ms / 1e3
    if c.per_seq_overhead_us is not None:
        over["per_seq_overhead_s"] = c.per_seq_overhead_us / 1e6
    if c.engine_cpu_ms is not None:
        over["cpu_step_s"] = c.engine_cpu_ms / 1e3
    if c.engine_cpu_per_seq_us is not None:
        over["cpu_per_seq_s"] = c.engine_cpu_per_seq_us / 1e6
    return replace(base, **over)


def engine_class(sc: Scenario) -> type[Engine]:
    """The compiled production step, or the readable reference (``run.kernel: reference``)."""
    if sc.run.kernel == "reference":
        from simulator.reference.engine import ReferenceEngine

        return ReferenceEngine
    from simulator.kernel.engine import CompiledEngine

    return CompiledEngine


def memory_plan(sc: Scenario, model: ModelArch, gpu: GPU, seqs: int, tokens: int) -> MemoryPlan:
    """The KV pool of ``sc``'s engine, as vLLM sizes it at start-up."""
    e = sc.engine
    v = versions.version(e.vllm_version)
    # The KV cache keeps the model's activation dtype unless kv_cache_dtype says otherwise.
    kv_dtype_bytes = 1.0 if e.kv_cache_dtype == "fp8" else model.dtype_bytes
    return plan_memory(
        model,
        gpu,
        tp=sc.hardware.tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization(sc),
        block_size=e.block_size,
        max_batched_tokens=tokens,
        max_num_seqs=seqs,
        kv_dtype_bytes=kv_dtype_bytes,
        quantization=quantization(sc, model),
        graphs_in_budget=v.graphs_in_budget(model.is_moe) and not e.enforce_eager,
        reserve_bytes=None if e.runtime_reserve_gb is None else e.runtime_reserve_gb * GIB,
        num_gpu_blocks_override=e.num_gpu_blocks_override,
        runner=v.runner(model.is_moe),
    )


def quantization(sc: Scenario, model: ModelArch) -> str:
    """The weight format: ``engine.quantization``, or the checkpoint's (its quantization_config)."""
    return sc.engine.quantization if sc.engine.quantization is not None else model.quantization


def gpu_memory_utilization(sc: Scenario) -> float:
    """The scenario's ``engine.gpu_memory_utilization``, or its vLLM release's default."""
    e = sc.engine
    return e.gpu_memory_utilization if e.gpu_memory_utilization is not None else versions.version(e.vllm_version).gpu_memory_utilization


def load_arch(sc: Scenario) -> ModelArch:
    """The scenario's model, in the dtype the engine runs it in (``engine.dtype``)."""
    model = load_model(sc.model)
    if sc.engine.dtype != "auto":
        model = replace(model, dtype=sc.engine.dtype)
    return model


def frontend_costs(sc: Scenario) -> FrontendCosts | None:
    """The API server's costs: the version's defaults, then the scenario's values."""
    f = sc.frontend
    if not f.enabled:
        return None
    h = versions.version(sc.engine.vllm_version).host
    chat = f.endpoint == "chat"
    return FrontendCosts(
        request_s=(h.chat_request_s if chat else h.request_s) if f.request_ms is None else f.request_ms / 1e3,
        prompt_token_s=h.prompt_token_s if f.prompt_token_us is None else f.prompt_token_us / 1e6,
        step_s=h.step_s if f.step_us is None else f.step_us / 1e6,
        token_s=(h.chat_token_s if chat else h.token_s) if f.output_token_us is None else f.output_token_us / 1e6,
        servers=f.api_server_count,
        latency_s=h.latency_s if f.latency_ms is None else f.latency_ms / 1e3,
        finish_s=(h.chat_finish_s if chat else h.finish_s) if f.finish_ms is None else f.finish_ms / 1e3,
        first_pass=(h.chat_first_pass if chat else h.first_pass) if f.first_pass is None else f.first_pass,
    )


def cost_model(sc: Scenario, model: ModelArch, gpu: GPU, seqs: int, tokens: int) -> CostModel:
    """The step cost of ``sc``'s engine (``seqs``, ``tokens``: its max_num_seqs and token budget)
    and its front-end."""
    e = sc.engine
    kv_dtype_bytes = 1.0 if e.kv_cache_dtype == "fp8" else model.dtype_bytes
    return CostModel(model, gpu, sc.hardware.tensor_parallel_size, efficiency(sc, gpu, model), kv_dtype_bytes,
                     quantization(sc, model), execution(sc, gpu, seqs, tokens), frontend_costs(sc))


def check_vllm_rules(model: ModelArch, tp: int, seqs: int, tokens: int) -> None:
    """Settings vLLM refuses at start-up, refused here with the same rule."""
    if tokens < seqs:
        raise ConfigError(f"engine.max_num_batched_tokens must be >= engine.max_num_seqs ({seqs}), as vLLM "
                          f"requires (got {tokens})")
    if model.num_heads % tp:
        raise ConfigError(f"hardware.tensor_parallel_size must divide {model.name}'s {model.num_heads} attention heads, "
                          f"as vLLM requires (got {tp})")
    kv = model.num_kv_heads
    if not model.is_mla and (kv % tp if kv >= tp else tp % kv):
        rule = f"divide its {kv} KV heads" if kv >= tp else f"be a multiple of its {kv} KV heads"
        raise ConfigError(f"hardware.tensor_parallel_size must {rule} ({model.name}), as vLLM requires (got {tp})")


# What a run holds in memory, measured on the collapse and Poisson workloads: a closed-loop client's
# objects, a submitted request's record and workload state, a step-log row (or time bin); and what
# each replica's engine holds before any request arrives (queues, step state, front-end), plus its
# block tables, measured on fleets of 200 replicas (Llama-3.1-8B and -70B, Qwen3-0.6B; A100 to B200).
CLIENT_BYTES, REQUEST_BYTES, STEP_ROW_BYTES = 1500, 600, 64
ENGINE_BYTES, ENGINE_BLOCK_BYTES = 700_000, 36


@dataclass(frozen=True)
class RunSize:
    """Upper estimates of what a run will hold: clients, requests, step-log rows, replicas' engines
    and bytes."""

    clients: int
    requests: int
    step_rows: int
    closed_share: float = 0.0  # of the requests, the share closed-loop clients submit
    replicas: int = 1
    engine_bytes: int = 0  # the replicas' engines, empty

    @property
    def bytes(self) -> int:
        return (self.clients * CLIENT_BYTES + self.requests * REQUEST_BYTES + self.step_rows * STEP_ROW_BYTES
                + self.engine_bytes)


def _replica_engines(sc: Scenario) -> tuple[list[tuple[Scenario, int, CostModel, int]], int]:
    """Each distinct replica group of ``sc`` (one for a single engine) as (scenario, count, step
    cost, max_num_seqs), and the bytes its engines hold empty; from the scenario alone, nothing built."""
    from simulator.cluster import replica_groups_of

    groups = [(sc, 1, "")] if sc.cluster is None and sc.disaggregation is None else replica_groups_of(sc)
    out, engine_bytes = [], 0
    for rsc, count, where in groups:
        try:
            model, gpu = load_arch(rsc), load_gpu(rsc.hardware.gpu)
            seqs, tokens = engine_defaults(gpu, rsc)
            check_vllm_rules(model, rsc.hardware.tensor_parallel_size, seqs, tokens)
            check_model(rsc, model)
            blocks = memory_plan(rsc, model, gpu, seqs, tokens).num_gpu_blocks
            cost = cost_model(rsc, model, gpu, seqs, tokens)
        except ConfigError as e:  # a group's own hardware or engine: say which group
            raise ConfigError(f"{where}: {e}" if where.endswith("]") else str(e)) from None
        out.append((rsc, count, cost, seqs))
        engine_bytes += count * (ENGINE_BYTES + ENGINE_BLOCK_BYTES * blocks)
    return out, engine_bytes


def run_size(sc: Scenario) -> RunSize:
    """Estimate ``sc``'s size before anything of it is built: closed-loop clients (their most);
    requests (the open-loop rate, or the peak of a time-varying one, times the run's length; for
    closed loops, the clients times the run's length over a request's time, from the mean output
    length and the step cost of a full batch on one replica; the request limit; a trace's rows);
    step-log rows (the run's length over the shortest possible step, or over the bin width, for
    every replica); the replicas' engines."""
    from workloads.factory import class_specs
    from workloads.lengths import LengthSampler
    from workloads.trace import read_trace

    engines, engine_bytes = _replica_engines(sc)
    replicas = sum(count for _, count, _, _ in engines)
    _, _, cost, max_num_seqs = engines[0]
    until = run_duration(sc)
    w = sc.workload
    clients, rate, closed_rate, rows = 0, 0.0, 0.0, 0
    specs = class_specs(w)
    arrivals = [(w.arrival, specs)] if w.trace is None else []
    arrivals += [(c.arrival, [c]) for c in specs if c.arrival is not None]
    for a, sources in arrivals:
        if a.type == "closed_loop":
            steps = parse_schedule(a.schedule, "schedule", integer=True) if a.schedule is not None else []
            n = max([a.concurrency] + [c for _, c in steps])
            clients += n
            if until is not None:  # each client: a request's time (its output at a full batch's step time), then its think time
                rng = np.random.default_rng(0)
                out = max(float(np.mean([LengthSampler(c.output, rng)() for _ in range(200)])) for c in sources)
                batch = min(-(-n // replicas), max_num_seqs)
                step = cost.step_time(decode_work(batch, int(out)))
                closed_rate += n / (out * step + a.think_time_s)
        elif a.type == "time_varying":
            rate += max(r for _, r in parse_schedule(a.schedule, "schedule", integer=False))
        else:
            rate += a.rate
    if w.trace is not None:
        rows = read_trace(w.trace).n
    rate += closed_rate
    requests = rows + (int(rate * until) if until is not None else 0)
    if sc.run.num_requests is not None:
        requests = min(requests, sc.run.num_requests) if requests else sc.run.num_requests
    requests = max(requests, clients)
    bin_s = sc.run.step_log_bin_s
    if until is None:  # until the requests are done: at most a step per token of theirs
        step_rows = requests * 64
        if bin_s is not None and rate > 0:  # time bins: as many as the arrivals take
            step_rows = min(step_rows, int(requests / rate / bin_s) + 1)
    else:
        step_rows = int(until / max(cost.step_time(StepWork()), 1e-6))
        if bin_s is not None:
            step_rows = min(step_rows, int(until / bin_s) + 1)
    return RunSize(clients, requests, step_rows * replicas, closed_rate / rate if rate > 0 else 0.0, replicas,
                   engine_bytes)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def check_size(sc: Scenario, size: RunSize) -> None:
    """Refuse a run that would need more than half of this machine's memory, naming the field that
    drives it: the replicas, the closed-loop clients, or the run's length (its duration, its request
    limit, or its trace)."""
    limit = _physical_memory() // 2
    if size.bytes <= limit:
        return
    cap = f"about {size.bytes / 2**30:,.1f} GB, more than half of this machine's {2 * limit / 2**30:,.0f} GB"
    parts = {"replicas": size.engine_bytes, "clients": size.clients * CLIENT_BYTES,
             "requests": size.requests * REQUEST_BYTES, "steps": size.step_rows * STEP_ROW_BYTES}
    worst = max(parts, key=parts.get)
    if worst == "replicas":
        if sc.disaggregation is not None:
            d = sc.disaggregation
            raise ConfigError(f"disaggregation.prefill, .decode: {size.replicas:,} replicas need {cap} (their engines "
                              f"alone) (got prefill {d.prefill!r}, decode {d.decode!r})")
        raise ConfigError(f"cluster.replicas: {size.replicas:,} replicas need {cap} (their engines alone) "
                          f"(got {sc.cluster.replicas!r})")
    if worst == "clients" or parts["clients"] > limit:  # too many clients, however short the run
        raise ConfigError(f"workload.arrival.concurrency: {size.clients:,} closed-loop clients, submitting about "
                          f"{size.requests:,} requests in the run, need {cap} (got {size.clients})")
    until = run_duration(sc)
    steps = f"a per-step log of up to {size.step_rows:,} steps"
    if size.replicas > 1:
        steps += f" ({size.step_rows // size.replicas:,} for each of {size.replicas:,} replicas)"
    if until is not None:  # the run's length decides how much it holds
        length = f"{sc.run.duration_s!r}" if sc.run.duration_s is not None else f"none: {until:g} s by default"
        if worst == "requests":
            raise ConfigError(f"run.duration_s: up to {size.requests:,} requests in {until:g} s need {cap}; shorten "
                              f"the run, lower the rate or concurrency, or set run.num_requests (got {length})")
        raise ConfigError(f"run.duration_s: {steps} needs {cap}; set run.step_log_bin_s (a row per time bin) or "
                          f"shorten the run (got {length})")
    if sc.run.num_requests is None:  # a trace replayed to its end
        raise ConfigError(f"workload.trace: its {size.requests:,} requests ({steps} to finish them) need {cap}; set "
                          f"run.num_requests or run.duration_s to replay part of it (got {sc.workload.trace!r})")
    if worst == "requests":
        raise ConfigError(f"run.num_requests: {size.requests:,} requests need {cap} (got {sc.run.num_requests})")
    raise ConfigError(f"run.num_requests: finishing {size.requests:,} requests may take {steps}, which needs {cap}; "
                      f"set run.step_log_bin_s (a row per time bin), run.duration_s or fewer requests "
                      f"(got {sc.run.num_requests})")


def scheduler_config(sc: Scenario, seqs: int, tokens: int, block_bytes: float) -> SchedulerConfig:
    """The scheduler's settings for ``sc``'s engine (``seqs``, ``tokens``: its max_num_seqs and token
    budget; ``block_bytes``: one KV block on one GPU, which sets the swap space in blocks)."""
    e = sc.engine
    return SchedulerConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        block_size=e.block_size,
        enable_prefix_caching=e.enable_prefix_caching,
        long_prefill_token_threshold=e.long_prefill_token_threshold,
        admission=e.admission or versions.version(e.vllm_version).admission,
        policy=e.scheduling_policy,
        preemption_mode=e.preemption_mode,
        swap_space_blocks=int(e.swap_space_gb * GIB // block_bytes),
        block_bytes=block_bytes,  # per GPU: each GPU copies its own shard over its own host link
        on_swap_full=e.on_swap_full,
        cache_finished_content=keeps_finished_content(sc.workload),
    )


def build_engine(env: simpy.Environment, sc: Scenario, trace: int = 0) -> tuple[Engine, dict]:
    """One replica's engine for ``sc`` (its model, hardware, engine, front-end and cost), in ``env``,
    with nothing submitted yet."""
    model = load_arch(sc)
    gpu = load_gpu(sc.hardware.gpu)
    tp = sc.hardware.tensor_parallel_size
    e = sc.engine
    seqs, tokens = engine_defaults(gpu, sc)
    check_vllm_rules(model, tp, seqs, tokens)
    mem = memory_plan(sc, model, gpu, seqs, tokens)
    scfg = scheduler_config(sc, seqs, tokens, mem.block_bytes)
    reqs = RequestTable()
    cost = cost_model(sc, model, gpu, seqs, tokens)
    bin_s = sc.run.step_log_bin_s
    usable = mem.num_gpu_blocks - 1  # one is the null block
    log = StepLog(usable) if bin_s is None else BinnedStepLog(usable, bin_s, sc.run.warmup_s)
    max_len = e.max_model_len or model.max_position_embeddings
    engine = engine_class(sc)(
        env,
        scfg,
        mem.num_gpu_blocks,
        cost,
        reqs,
        max_model_len=max_len,
        max_steps=sc.run.max_steps,
        log=log,
        trace=trace,
    )
    parts = {"model": model, "gpu": gpu, "memory": mem, "sched_cfg": scfg, "reqs": reqs}
    return engine, parts


def build(sc: Scenario, trace: int = 0) -> tuple[simpy.Environment, Engine, dict]:
    """The simulation of ``sc``, ready to run (``trace``: the request events the engine records). A
    scenario with ``cluster`` or ``disaggregation`` builds its replicas and router
    (``simulator.cluster``), which stand in for the engine."""
    size = run_size(sc)  # before anything is built: a fleet too large for memory is never built
    check_size(sc, size)
    if sc.cluster is not None or sc.disaggregation is not None:
        from simulator.cluster import build_cluster

        return build_cluster(sc, trace, size)
    env = simpy.Environment()
    engine, parts = build_engine(env, sc, trace)
    ids = Ids()
    engine.expected = start_workload(
        env, engine.submit, sc.workload, sc.run.seed, sc.run.num_requests, max_model_len=engine.max_model_len, ids=ids
    )
    if engine.expected is not None and run_duration(sc) is None:
        parts["reqs"].reserve(engine.expected)  # every one of them will arrive: allocate the records once
    return env, engine, {**parts, "workload_counts": ids, "size": size}


_RAN = False  # whether this process has simulated before (see simulate)


def simulate(sc: Scenario, trace: int = 0, progress: bool = False) -> Result:
    """Run ``sc``. ``progress``: show a progress bar on the terminal if the run takes a while."""
    t0 = time.perf_counter()
    env, engine, parts = build(sc, trace)
    until = run_duration(sc)
    if progress:
        from simulator.progress import RunProgress

        engine.progress = RunProgress(sc.name, until, engine.expected)
    # Everything alive now (imported libraries, the engine's state) lives through the run: keep
    # the cyclic garbage collector from re-scanning it at every full collection the run triggers.
    # First collect what earlier runs in this process left (a sweep or plan worker runs many):
    # unfrozen, their cycles sit in the oldest generation, which is seldom collected, and a
    # worker's memory would grow by megabytes a run. A process's first run has nothing to collect.
    global _RAN
    if _RAN:
        gc.collect()
    _RAN = True
    gc.freeze()
    try:
        if engine.expected is not None:
            stop = engine.all_done if until is None else (engine.all_done | env.timeout(until))
            env.run(until=stop)
        else:
            env.run(until=until)
    finally:
        engine.finish_run()
        gc.unfreeze()
        if engine.progress is not None:
            engine.progress.close()
    done = engine.expected is not None and engine.all_done.triggered
    return Result(scenario=sc, engine=engine, end_time=env.now, wall_s=time.perf_counter() - t0,
                  stopped_by="requests done" if done else "duration", **parts)
