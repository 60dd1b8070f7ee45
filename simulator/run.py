"""Wire a validated scenario into a simulation and run it."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace

import simpy

from simulator.config import Scenario
from simulator.cost import CostModel, Efficiency
from simulator.engine import Engine
from simulator.hardware import GPU, load_gpu
from simulator.memory import GIB, MemoryPlan, plan_memory
from simulator.models import ModelArch, load_model
from simulator.requests import RequestTable
from simulator.rules import SchedulerConfig
from simulator.step_log import BinnedStepLog, StepLog
from workloads.factory import keeps_finished_content, start_workload


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


def engine_defaults(gpu: GPU, sc: Scenario) -> tuple[int, int]:
    """vLLM's `vllm serve` defaults: larger batches on 80 GB-class GPUs."""
    big = gpu.hbm_bytes >= 70 * GIB
    seqs = sc.engine.max_num_seqs or (1024 if big else 256)
    tokens = sc.engine.max_num_batched_tokens or (8192 if big else 2048)
    return seqs, tokens


def efficiency(sc: Scenario, gpu: GPU) -> Efficiency:
    """Calibrated factors (built-in for the GPU, or a file), then any per-field overrides."""
    from simulator import calibrate

    c = sc.cost
    base = calibrate.resolve(c.calibration, gpu.key)
    over = {}
    for f in ("matmul_compute", "matmul_memory", "attn_compute", "attn_memory"):
        v = getattr(c, f)
        if v is not None:
            over[f] = v
    if c.step_overhead_ms is not None:
        over["step_overhead_s"] = c.step_overhead_ms / 1e3
    if c.per_seq_overhead_us is not None:
        over["per_seq_overhead_s"] = c.per_seq_overhead_us / 1e6
    return replace(base, **over)


def engine_class(sc: Scenario) -> type[Engine]:
    """The compiled production step, or the readable reference (``run.kernel: reference``)."""
    if sc.run.kernel == "reference":
        from simulator.reference.engine import ReferenceEngine

        return ReferenceEngine
    from simulator.kernel.engine import CompiledEngine

    return CompiledEngine


def build(sc: Scenario, trace: int = 0) -> tuple[simpy.Environment, Engine, dict]:
    """The simulation of ``sc``, ready to run (``trace``: the request events the engine records)."""
    model = load_model(sc.model)
    gpu = load_gpu(sc.hardware.gpu)
    tp = sc.hardware.tensor_parallel_size
    e = sc.engine
    seqs, tokens = engine_defaults(gpu, sc)
    # The KV cache keeps the model's activation dtype unless kv_cache_dtype says otherwise.
    kv_dtype_bytes = 1.0 if e.kv_cache_dtype == "fp8" else model.dtype_bytes
    if e.quantization != "none":
        model = replace(model, dtype=e.quantization)
    mem = plan_memory(
        model,
        gpu,
        tp=tp,
        gpu_memory_utilization=e.gpu_memory_utilization,
        block_size=e.block_size,
        max_batched_tokens=tokens,
        max_num_seqs=seqs,
        kv_dtype_bytes=kv_dtype_bytes,
        reserve_bytes=None if e.runtime_reserve_gb is None else e.runtime_reserve_gb * GIB,
        num_gpu_blocks_override=e.num_gpu_blocks_override,
    )
    scfg = SchedulerConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        block_size=e.block_size,
        enable_prefix_caching=e.enable_prefix_caching,
        long_prefill_token_threshold=e.long_prefill_token_threshold,
        admission=e.admission,
        policy=e.scheduling_policy,
        preemption_mode=e.preemption_mode,
        swap_space_blocks=int(e.swap_space_gb * GIB // mem.block_bytes),
        block_bytes=mem.block_bytes,  # per GPU: each GPU copies its own shard over its own host link
        on_swap_full=e.on_swap_full,
        cache_finished_content=keeps_finished_content(sc.workload),
    )
    reqs = RequestTable()
    cost = CostModel(model, gpu, tp, efficiency(sc, gpu), kv_dtype_bytes)
    env = simpy.Environment()
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
    engine.expected = start_workload(
        env, engine.submit, sc.workload, sc.run.seed, sc.run.num_requests, max_model_len=max_len
    )
    if engine.expected is not None and sc.run.duration_s is None:
        reqs.reserve(engine.expected)  # every one of them will arrive: allocate the records once
    parts = {"model": model, "gpu": gpu, "memory": mem, "sched_cfg": scfg, "reqs": reqs}
    return env, engine, parts


def simulate(sc: Scenario, trace: int = 0) -> Result:
    t0 = time.perf_counter()
    env, engine, parts = build(sc, trace)
    until = sc.run.duration_s
    # Everything alive now (imported libraries, the engine's state) lives through the run: keep
    # the cyclic garbage collector from re-scanning it at every full collection the run triggers.
    gc.freeze()
    try:
        if sc.run.num_requests is not None:
            stop = engine.all_done if until is None else (engine.all_done | env.timeout(until))
            env.run(until=stop)
        else:
            env.run(until=until)
    finally:
        engine.finish_run()
        gc.unfreeze()
    return Result(scenario=sc, engine=engine, end_time=env.now, wall_s=time.perf_counter() - t0, **parts)
