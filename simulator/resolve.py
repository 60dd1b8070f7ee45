"""Resolve a validated scenario into one engine's settings, and build that engine.

Every caller that needs an engine's settings takes them from here: ``servesim run`` and every
replica of a fleet (``build_engine``), the size guard, ``check``, ``validate`` and the parity
replays (``scheduler_config``). The release line's defaults come from ``simulator.scenario.versions``, the
KV pool from ``simulator.scenario.memory``, the step cost from ``simulator.engine.cost``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import simpy

from simulator.engine import lora, speculative
from simulator.engine.core import Engine
from simulator.engine.cost import (
    FA2_ATTN_COMPUTE,
    FA2_MIXED_DECODE_ROWS,
    FA3_ATTN_COMPUTE,
    FA3_ATTN_MEMORY,
    TRITON_ATTN_COMPUTE,
    CostModel,
    Efficiency,
    Execution,
    SpecCost,
    jit_shape_s,
    jit_variant_s,
)
from simulator.engine.host import ApiServer, EngineCpu, HostModel
from simulator.engine.requests import RequestTable
from simulator.engine.rules import SGL_UNCHUNKED, SchedulerConfig
from simulator.engine.step_log import BinnedStepLog, StepLog
from simulator.engine.submission import Target
from simulator.errors import ConfigError
from simulator.scenario import sglang, versions
from simulator.scenario.config import Scenario, run_duration
from simulator.scenario.hardware import GPU, load_gpu
from simulator.scenario.hosts import load_host
from simulator.scenario.memory import GIB, MemoryPlan, plan_memory, plan_memory_sglang
from simulator.scenario.models import ModelArch, load_model
from workloads.arrivals import RunEnd
from workloads.config import most_in_flight
from workloads.factory import keeps_finished_content, start_workload


def engine_defaults(gpu: GPU, sc: Scenario) -> tuple[int, int]:
    """The running-request cap and the step's token budget: vLLM's `vllm serve` defaults (larger
    batches on 80 GB-class GPUs other than A100s), or SGLang's (``sglang_limits``)."""
    if sc.engine.framework == "sglang":
        return sglang_limits(sc, load_arch(sc), gpu)
    v = versions.version(sc.engine.vllm_version)
    seqs, tokens = versions.batch_defaults(v, gpu.name, gpu.hbm_bytes, sc.engine.performance_mode)
    return sc.engine.max_num_seqs or seqs, sc.engine.max_num_batched_tokens or tokens


def sglang_batches(sc: Scenario, gpu: GPU) -> tuple[int, int]:
    """SGLang's chunked_prefill_size and cuda_graph_max_bs: the scenario's, or the defaults SGLang
    picks from the GPU's memory (``simulator.scenario.sglang``)."""
    e = sc.engine
    chunk, graph_bs = sglang.memory_defaults(gpu.hbm_bytes, sc.hardware.tensor_parallel_size)
    chunk = e.chunked_prefill_size if e.chunked_prefill_size is not None else chunk
    graph_bs = e.cuda_graph_max_bs if e.cuda_graph_max_bs is not None else graph_bs
    return chunk, graph_bs


def sglang_settings(sc: Scenario, gpu: GPU, model: ModelArch) -> tuple[int, int, float]:
    """``sglang_batches``, and SGLang's mem_fraction_static: the scenario's or SGLang's default."""
    e, tp = sc.engine, sc.hardware.tensor_parallel_size
    chunk, graph_bs = sglang_batches(sc, gpu)
    frac = e.mem_fraction_static
    if frac is None:
        frac = sglang.mem_fraction_static(gpu.hbm_bytes, tp, chunk, graph_bs, model.is_mla, e.dp_attention)
    return chunk, graph_bs, frac


def sglang_limits(sc: Scenario, model: ModelArch, gpu: GPU) -> tuple[int, int]:
    """SGLang's running-request cap (from its pool, ``sglang.max_running_requests``) and its prefill
    chunk (``rules.SGL_UNCHUNKED`` when chunking is off)."""
    chunk, _ = sglang_batches(sc, gpu)
    mem = memory_plan(sc, model, gpu, 1, 1)
    dp = sc.engine.dp_attention  # DP attention: each rank's pool, cap and chunk, D of them
    pool_tokens = int(mem.kv_bytes // mem.kv_bytes_per_token)
    context = sc.engine.max_model_len or model.max_position_embeddings
    given = sc.engine.max_running_requests
    seqs = dp * sglang.max_running_requests(pool_tokens, context, None if given is None else max(given // dp, 1))
    return seqs, SGL_UNCHUNKED if chunk < 0 else dp * (chunk // dp)


def attention_kernel(sc: Scenario, gpu: GPU, model: ModelArch | None = None) -> str:
    """The attention kernel ``sc``'s engine runs on ``gpu`` for ``model`` (``versions.attention_kernel``):
    on an AMD GPU vLLM's default depends on its release, on Ampere whether the model has attention
    sinks (None: a caller asking only about AMD GPUs, where sinks change nothing); SGLang runs none of
    vLLM's ROCm backends, and its own kernels are priced as they were fitted (no fallback for sinks)."""
    vllm = sc.engine.framework == "vllm"
    rocm = versions.version(sc.engine.vllm_version).rocm_attention if vllm else ""
    sinks = vllm and model is not None and model.attention_sinks
    return versions.attention_kernel(gpu.compute_capability, gpu.gfx, rocm, sinks)


def kernel_attention_rates(kernel: str, model: ModelArch, gpu_key: str, builtin_file: bool = True) -> dict[str, float]:
    """The attention rates of ``kernel`` (``versions.attention_kernel``) where they were measured apart
    from a GPU's step profiles: FlashAttention-3 on Hopper, FlashAttention-2's compute on 8.x, and on
    an AMD GPU vLLM's Triton attention as the GPU's built-in file fitted it (``builtin_file``: a
    user's own file stands). {} for an MLA model (FlashMLA) and elsewhere."""
    from simulator.engine import calibration

    if model.is_mla:
        return {}
    if kernel == "fa3":
        return {"attn_compute": FA3_ATTN_COMPUTE, "attn_memory": FA3_ATTN_MEMORY}
    if kernel == "fa2":
        return {"attn_compute": FA2_ATTN_COMPUTE}
    if kernel == "triton":
        return {"attn_compute": TRITON_ATTN_COMPUTE}
    if kernel == "rocm_triton" and builtin_file:
        return calibration.vllm_attention(gpu_key)
    return {}


def execution(sc: Scenario, gpu: GPU, model: ModelArch, seqs: int, tokens: int) -> Execution:
    """How the engine runs its steps on the GPU (CUDA graphs, the attention kernel's extra cost in
    mixed steps), from the version's defaults and the GPU."""
    e = sc.engine
    mixed_rows = FA2_MIXED_DECODE_ROWS if attention_kernel(sc, gpu, model) == "fa2" else 0.0
    if e.framework == "sglang":  # decode batches up to cuda_graph_max_bs (a rank's) replay graphs
        chunk, graph_bs = sglang_batches(sc, gpu)
        eager = e.enforce_eager  # SGLang's --disable-cuda-graph: no graphs at all
        return Execution(
            max_capture_size=0 if eager else graph_bs * e.dp_attention,
            capture_by16_from=256,
            full_decode_graphs=True,
            pad=not eager,
            mixed_decode_rows=mixed_rows,
            prefill_capture_size=0
            if eager or e.disable_prefill_cuda_graph
            else sglang.prefill_graph_max(e.sglang_version, bool(gpu.gfx), model.is_mla, e.dp_attention, chunk),
            framework="sglang",
        )
    v = versions.version(e.vllm_version)
    largest, by16 = versions.capture_sizes(v, seqs, tokens, e.max_cudagraph_capture_size, model.architectures)
    return Execution(
        max_capture_size=0 if e.enforce_eager else largest,
        capture_by16_from=by16,
        capture_each=versions.capture_each(e.performance_mode),
        full_decode_graphs=v.cudagraph_mode == "full_and_piecewise",
        pad=not e.enforce_eager,
        enforce_eager=e.enforce_eager,
        mixed_decode_rows=mixed_rows,
    )


def efficiency(sc: Scenario, gpu: GPU, model: ModelArch) -> Efficiency:
    """Calibrated factors (built-in for the GPU, or a file), the attention rates of the kernel vLLM
    runs on the GPU (FlashAttention-3 on Hopper, measured; FlashAttention-2 on 8.x, published; its
    Triton attention for sinks on 8.x and on an AMD GPU before 0.19, fitted), SGLang's own kernels'
    rates where the GPU's file fitted them (``calibration.sglang_rates``), then any per-field
    overrides."""
    from simulator.engine import calibration

    c = sc.cost
    base = calibration.resolve(c.calibration, gpu.key)
    over = kernel_attention_rates(attention_kernel(sc, gpu, model), model, gpu.key, c.calibration == "auto")
    if sc.engine.framework == "sglang" and c.calibration == "auto":
        over.update(calibration.sglang_rates(gpu.key))
    for f in ("matmul_compute", "matmul_memory", "attn_compute", "attn_memory", "allreduce_bandwidth"):
        v = getattr(c, f)
        if v is not None:
            over[f] = v
    for f, unit in (
        ("step_overhead_ms", 1e3),
        ("per_seq_overhead_us", 1e6),
        ("allreduce_latency_us", 1e6),
        ("allreduce_hop_us", 1e6),
    ):
        v = getattr(c, f)
        if v is not None:
            over[f.rsplit("_", 1)[0] + "_s"] = v / unit
    return replace(base, **over)


def engine_class(sc: Scenario) -> type[Engine]:
    """The compiled production step, or the readable reference (``run.kernel: reference``)."""
    if sc.run.kernel == "reference":
        from simulator.engine.reference.engine import ReferenceEngine

        return ReferenceEngine
    from simulator.engine.compiled.engine import CompiledEngine

    return CompiledEngine


def kv_dtype_bytes(sc: Scenario, model: ModelArch) -> float:
    """Bytes of one KV-cache element: the model's activation dtype unless kv_cache_dtype says otherwise."""
    return 1.0 if sc.engine.kv_cache_dtype == "fp8" else model.dtype_bytes


def memory_plan(sc: Scenario, model: ModelArch, gpu: GPU, seqs: int, tokens: int) -> MemoryPlan:
    """The KV pool of ``sc``'s engine, as vLLM (or SGLang) sizes it at start-up."""
    e = sc.engine
    kv_bytes = kv_dtype_bytes(sc, model)
    if e.framework == "sglang":
        _, _, frac = sglang_settings(sc, gpu, model)
        return plan_memory_sglang(
            model,
            gpu,
            tp=sc.hardware.tensor_parallel_size,
            mem_fraction_static=frac,
            page_tokens=sglang.accounting_page(e.page_size or 1),
            kv_dtype_bytes=kv_bytes,
            quantization=quantization(sc, model),
            dp_attention=e.dp_attention,
        )
    v = versions.version(e.vllm_version)
    return plan_memory(
        model,
        gpu,
        tp=sc.hardware.tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization(sc),
        block_size=e.block_size,
        max_batched_tokens=tokens,
        max_num_seqs=seqs,
        kv_dtype_bytes=kv_bytes,
        quantization=quantization(sc, model),
        graphs_in_budget=v.graphs_in_budget(model) and not e.enforce_eager,
        reserve_bytes=None if e.runtime_reserve_gb is None else e.runtime_reserve_gb * GIB,
        num_gpu_blocks_override=e.num_gpu_blocks_override,
        runner=v.runner(model),
        early_allreduce=v.early_allreduce,
        window_requests=most_in_flight(sc.workload) if model.is_hybrid else None,
        **extra_memory(sc, model, kv_bytes),
    )


def extra_memory(sc: Scenario, model: ModelArch, kv_dtype_bytes: float) -> dict:
    """What ``sc``'s engine holds beside the model's weights and KV, per GPU: the drafter's weights and
    KV bytes per token (speculative decoding), the LoRA slots (counted with the weights, as vLLM
    allocates them when it loads the model)."""
    e, tp = sc.engine, sc.hardware.tensor_parallel_size
    weights, kv = 0.0, 0.0
    spec = e.speculative_config
    draft = speculative.draft_arch(spec, model) if speculative.enabled(spec) else None
    if draft is not None:
        weights += speculative.draft_weight_params(spec, model, draft) * draft.dtype_bytes / tp
        kv += draft.kv_bytes_per_token(kv_dtype_bytes, tp)
    if e.enable_lora:
        weights += e.max_loras * lora.slot_bytes(model, e.max_lora_rank, tp)
    if not weights and not kv:
        return {}
    return {"extra_weight_bytes": weights, "extra_kv_bytes_per_token": kv}


def quantization(sc: Scenario, model: ModelArch) -> str:
    """The weight format: ``engine.quantization``, or the checkpoint's (its quantization_config)."""
    return sc.engine.quantization if sc.engine.quantization is not None else model.quantization


def gpu_memory_utilization(sc: Scenario) -> float:
    """The scenario's ``engine.gpu_memory_utilization``, or its vLLM release's default."""
    e = sc.engine
    return (
        e.gpu_memory_utilization
        if e.gpu_memory_utilization is not None
        else versions.version(e.vllm_version).gpu_memory_utilization
    )


def load_arch(sc: Scenario) -> ModelArch:
    """The scenario's model, in the dtype the engine runs it in (``engine.dtype``)."""
    model = load_model(sc.model)
    if sc.engine.dtype != "auto":
        model = replace(model, dtype=sc.engine.dtype)
    return model


def host_model(sc: Scenario, model: ModelArch, gpu: GPU) -> HostModel:
    """The CPU side of ``sc``'s engine (``simulator.engine.host``) serving ``model`` on ``gpu`` (which
    sets the kernels compiled on a step shape's first use, ``cost.jit_shape_s``): the release line's fitted costs
    on the scenario's host (``hardware.host``; the catalog's median host when it names none), then
    the scenario's own values, taken as they are (measured on that host)."""
    e, f, c = sc.engine, sc.frontend, sc.cost
    if e.framework == "sglang":
        h, paces, line = sglang.host_costs(), False, sglang.HOST_SET
    else:
        v = versions.version(e.vllm_version)
        h, paces, line = v.host, v.paces_engine, v.name
    scale = load_host(sc.hardware.host).scale
    h = h.scaled(scale)
    overlap = not e.disable_overlap_schedule if e.framework == "sglang" else async_scheduling(sc)
    step_s, per_seq_s = h.engine_cpu(line, overlap)
    groups = model.kv_cache_groups if h.per_kv_group else 1  # the set's per-request costs are per group
    q = quantization(sc, model)
    engine = EngineCpu(
        step_s=step_s if c.engine_cpu_ms is None else c.engine_cpu_ms / 1e3,
        per_seq_s=(per_seq_s if c.engine_cpu_per_seq_us is None else c.engine_cpu_per_seq_us / 1e6) * groups,
        jit_shape_s=jit_shape_s(model, gpu, q, e.framework) * scale,
        jit_variant_s=jit_variant_s(model, gpu, q, e.framework) * scale,
        eager_seq_s=h.engine_eager_seq_layer_s * model.num_layers,
        launch_serial=h.launch_serial,
    )
    api = None
    if f.enabled:
        a = h.api_costs(f.endpoint == "chat", model.harmony_chat)

        def cost(default: float, given: float | None, unit: float) -> float:
            return default if given is None else given / unit

        api = ApiServer(
            request_s=cost(a["request_s"], f.request_ms, 1e3),
            prompt_token_s=cost(h.prompt_token_s, f.prompt_token_us, 1e6),
            step_s=cost(h.step_s, f.step_us, 1e6),
            token_s=cost(a["token_s"], f.output_token_us, 1e6),
            servers=f.api_server_count,
            latency_s=a["latency_s"] if f.latency_ms is None else f.latency_ms / 1e3,
            finish_s=cost(a["finish_s"], f.finish_ms, 1e3),
            first_pass=a["first_pass"] if f.first_pass is None else f.first_pass,
            paces_engine=paces if f.paces_engine is None else f.paces_engine,
            rounds=h.intake_rounds if f.intake_rounds is None else f.intake_rounds,
            stream_doubling=h.stream_doubling if f.stream_doubling is None else f.stream_doubling,
        )
    return HostModel(engine, api, overlap)


def async_scheduling(sc: Scenario) -> bool:
    """Whether ``sc``'s vLLM engine schedules a step ahead (``engine.async_scheduling``, or its
    release's default)."""
    e = sc.engine
    return versions.version(e.vllm_version).async_scheduling if e.async_scheduling is None else e.async_scheduling


def cost_model(sc: Scenario, model: ModelArch, gpu: GPU, seqs: int, tokens: int) -> CostModel:
    """The step cost of ``sc``'s engine (``seqs``, ``tokens``: its max_num_seqs and token budget)
    and its host's CPU side."""
    e = sc.engine
    kv_bytes = kv_dtype_bytes(sc, model)
    tp, eff, x = sc.hardware.tensor_parallel_size, efficiency(sc, gpu, model), execution(sc, gpu, model, seqs, tokens)
    ep = sc.hardware.expert_parallel_size
    if ep > 1 and not model.is_moe:
        raise ConfigError(f"hardware.expert_parallel_size: {model.name} has no experts to deal (got {ep}); leave it 1")
    if ep > 1 and model.num_experts % ep:
        raise ConfigError(
            f"hardware.expert_parallel_size must divide {model.name}'s {model.num_experts} experts (got {ep})"
        )
    return CostModel(
        model,
        gpu,
        tp,
        eff,
        kv_bytes,
        quantization(sc, model),
        x,
        host_model(sc, model, gpu),
        spec_cost(sc, model, gpu, tp, eff, kv_bytes, x),
        lora.lora_cost(model, e.max_lora_rank, tp, eff.per_layer_overhead_s) if e.enable_lora else None,
        e.load_format == "dummy",
        e.dp_attention,
        ep,
    )


def spec_cost(sc: Scenario, model: ModelArch, gpu: GPU, tp: int, eff, kv_dtype_bytes: float, x) -> SpecCost | None:
    """What ``sc``'s speculative decoding adds to a step (None: off): the drafter's host time per
    request, and its draft model's own step constants on the same GPUs, run the same way."""
    spec = sc.engine.speculative_config
    if not speculative.enabled(spec):
        return None
    draft = speculative.draft_arch(spec, model)
    host = speculative.NGRAM_HOST_SEQ_S if spec.method == "ngram" else 0.0
    cm = CostModel(draft, gpu, tp, eff, kv_dtype_bytes, "none", x) if draft is not None else None
    return SpecCost(spec.num_speculative_tokens, host, cm, speculative.DRAFT_PASS_S if cm else 0.0)


def check_vllm_rules(model: ModelArch, tp: int, seqs: int, tokens: int, sglang: bool = False) -> None:
    """Settings vLLM refuses at start-up, refused here with the same rule (SGLang's budget is a
    prefill chunk's, not a step's: ``sglang``)."""
    if tokens < seqs and not sglang:
        raise ConfigError(
            f"engine.max_num_batched_tokens must be >= engine.max_num_seqs ({seqs}), as vLLM requires (got {tokens})"
        )
    if model.num_heads % tp:
        raise ConfigError(
            f"hardware.tensor_parallel_size must divide {model.name}'s {model.num_heads} attention heads, "
            f"as vLLM requires (got {tp})"
        )
    kv = model.num_kv_heads
    if not model.is_mla and (kv % tp if kv >= tp else tp % kv):
        rule = f"divide its {kv} KV heads" if kv >= tp else f"be a multiple of its {kv} KV heads"
        raise ConfigError(f"hardware.tensor_parallel_size must {rule} ({model.name}), as vLLM requires (got {tp})")


def scheduler_config(sc: Scenario, seqs: int, tokens: int, block_bytes: float) -> SchedulerConfig:
    """The scheduler's settings for ``sc``'s engine (``seqs``, ``tokens``: its max_num_seqs and token
    budget; ``block_bytes``: one KV block on one GPU, which sets the swap space in blocks)."""
    e = sc.engine
    if e.framework == "sglang":
        return sglang_scheduler_config(sc, seqs, tokens)
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
        outputs_late=async_scheduling(sc),
        **spec_settings(sc),
        max_loras=e.max_loras if e.enable_lora else 0,
        max_cpu_loras=(e.max_cpu_loras or e.max_loras) if e.enable_lora else 0,
        # vLLM's --kv-offloading-size is all ranks' host memory together; each rank holds its shard.
        host_blocks=int(e.kv_offloading_size * GIB // (block_bytes * sc.hardware.tensor_parallel_size)),
        jit_warm=e.jit_cache == "warm",
        jit_seen_tokens=tuple(int(t) for t in e.jit_cache) if isinstance(e.jit_cache, list) else (),
    )


def sglang_scheduler_config(sc: Scenario, seqs: int, tokens: int) -> SchedulerConfig:
    """SGLang's scheduler settings (``seqs``: max_running_requests; ``tokens``: the prefill chunk)."""
    e = sc.engine
    dp_factor = sglang.DP_CONSERVATIVENESS if e.dp_attention > 1 else 1.0
    init, floor, decay = sglang.new_token_ratio(e.schedule_conservativeness * dp_factor)
    return SchedulerConfig(
        framework="sglang",
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        block_size=sglang.accounting_page(e.page_size or 1),
        enable_prefix_caching=e.prefix_caching,
        admission="sglang",
        policy=sglang.active_policy(e.schedule_policy, e.prefix_caching),
        cache_finished_content=keeps_finished_content(sc.workload),
        sgl_prefill_tokens=e.max_prefill_tokens,
        sgl_page=e.page_size or 1,
        sgl_ratio=(init, floor, decay),
    )


def spec_settings(sc: Scenario) -> dict:
    """The scheduler's speculative-decoding settings for ``sc`` (none when it is off)."""
    spec = sc.engine.speculative_config
    if not speculative.enabled(spec):
        return {}
    return {
        "spec_tokens": spec.num_speculative_tokens,
        "spec_lookahead": speculative.lookahead(spec),
        "spec_draft_slots": speculative.draft_slots(spec),
        "spec_seed": sc.run.seed,
        "spec_accept_at_least": speculative.accept_at_least(spec),
    }


def build_engine(env: simpy.Environment, sc: Scenario, trace: int = 0) -> tuple[Engine, dict]:
    """One replica's engine for ``sc`` (its model, hardware, engine, front-end and cost), in ``env``,
    with nothing submitted yet."""
    model = load_arch(sc)
    gpu = load_gpu(sc.hardware.gpu)
    tp = sc.hardware.tensor_parallel_size
    e = sc.engine
    seqs, tokens = engine_defaults(gpu, sc)
    check_vllm_rules(model, tp, seqs, tokens, e.framework == "sglang")
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


def start_clients(env: simpy.Environment, target: Target, sc: Scenario, ids: Any) -> int | None:
    """Start scenario ``sc``'s workload against ``target`` (an engine or a fleet). Returns how many
    requests will be submitted (None: unbounded)."""
    w, run = sc.workload, sc.run
    # An engine runs its closed-loop clients' turns; a fleet routes each request.
    engine = cast(Engine, target) if isinstance(target, Engine) else None
    return start_workload(
        env,
        target.submit,
        w,
        run.seed,
        run.num_requests,
        max_model_len=target.max_model_len,
        ids=ids,
        runner=engine,
        end=run_end(sc),
    )


def run_end(sc: Scenario) -> RunEnd | None:
    """When ``sc``'s run stops, as arrivals handed over ahead need it (None: only once its requests
    are done): at ``run_duration``, before the arrivals at that moment unless the run also stops
    after a number of requests (``simulator.run.simulate``: then it stops once the events queued
    at that moment before it have run)."""
    until = run_duration(sc)
    if until is None:
        return None
    return RunEnd(until, sc.run.num_requests is not None or sc.workload.trace is not None)
