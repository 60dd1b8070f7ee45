"""What changes between vLLM releases that the simulator models, one record per release line.

``engine.vllm_version`` picks a record; fields a scenario leaves null take their defaults from it.
Each value cites where it was read (vLLM source at the release tag, or its release notes):

- admission: ``scheduler_reserve_full_isl`` (a waiting request is admitted only if its whole prompt
  fits) exists and is on from 0.19.0 (PR #37307); before, only the first chunk had to fit.
- async_scheduling: ``--async-scheduling`` is off in 0.10-0.11 (experimental), on by default from
  0.14.0 (release notes: "Async scheduling is now enabled by default").
- cudagraph_mode: 0.10.x captures piecewise graphs (attention runs eagerly between graphed
  pieces); from 0.11.0 the default is FULL_AND_PIECEWISE (``VllmConfig.__post_init__``): one full
  graph for a pure-decode step, piecewise graphs for mixed steps.
- capture sizes: ``[1, 2, 4] + range(8, max + 1, 8)`` up to 0.11.0; from 0.11.1
  ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``; ``max = min(2 * max_num_seqs, 512)``
  (from 0.12 also capped at ``max_num_batched_tokens``). A step's token count is padded up to the
  next capture size; steps above the largest run without graphs.
- graphs_in_budget: the CUDA-graph memory estimate is subtracted from the KV budget by default
  from 0.21 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``); before, graphs used the headroom.
- a100_small_defaults: from 0.9.2 the large batch defaults (1024 sequences, 8192 tokens for the
  API server) need >= 70 GiB and a GPU that is not an A100 (``EngineArgs._set_default_args``).
- gpu_memory_utilization: the default is 0.9 up to 0.19 and 0.92 from 0.22 (``CacheConfig``).
- model_runner: which GPU model runner serves the model, since it sizes the profiling pass and the
  CUDA graphs differently (simulator.scenario.memory): V1 up to 0.19; from 0.22 the V2 runner serves models
  without mixture-of-experts layers by default (``VllmConfig.use_v2_model_runner``; MoE models stay on
  V1); by 0.33, every model. V1 subtracts its CUDA-graph estimate from the KV budget from 0.21; V2
  does not in 0.22-0.26 (``profile_cudagraph_memory`` returns 0) and does in 0.33. Seen in the
  recorded 0.26 servers (data/e2e/): "Available KV cache memory" leaves the graphs out for dense
  models and subtracts them for Qwen3-30B-A3B.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.scenario.hosts import HostCosts, load_host_costs


@dataclass(frozen=True)
class VllmVersion:
    name: str
    admission: str  # "first_chunk" | "full_prompt"
    async_scheduling: bool
    cudagraph_mode: str  # "piecewise" | "full_and_piecewise"
    capture_by16_from: int  # capture sizes step by 16 from this size on (by 8 below it)
    capture_cap_by_budget: bool  # the largest capture size is also capped at max_num_batched_tokens
    a100_small_defaults: bool
    gpu_memory_utilization: float
    model_runner: str  # "v1" | "v2_dense" (V2 unless the model has MoE layers) | "v2"
    graphs_in_budget_v1: bool  # the V1 runner subtracts its CUDA-graph estimate from the KV budget
    graphs_in_budget_v2: bool  # the V2 runner does
    host_set: str  # which fitted host costs (hosts.HOST_SETS) apply
    host: HostCosts
    # The API server paces the engine (simulator.engine.host.step_start): a stand-in that fits the
    # recorded 0.26 servers best with one set of host costs (their engine, profiled, runs ahead); the
    # public runs of 0.10-0.19 fit an engine that runs ahead of it (docs/validation.md).
    paces_engine: bool = False

    @property
    def engine_per_seq_s(self) -> float:
        return self.host.engine_per_seq(self.name)

    def runner(self, is_moe: bool) -> str:
        """The model runner that serves a model: "v1" or "v2"."""
        if self.model_runner == "v2_dense":
            return "v1" if is_moe else "v2"
        return self.model_runner

    def graphs_in_budget(self, is_moe: bool) -> bool:
        """Whether the CUDA graphs' estimated memory is taken from the KV budget."""
        return self.graphs_in_budget_v2 if self.runner(is_moe) == "v2" else self.graphs_in_budget_v1


_PUBLIC, _RECORDED = load_host_costs("public"), load_host_costs("recorded")
# 0.32 (vLLM 0.33) keeps the host costs of the newest release measured here (0.26).
VERSIONS = {
    "0.10": VllmVersion(
        name="0.10",
        admission="first_chunk",
        async_scheduling=False,
        cudagraph_mode="piecewise",
        capture_by16_from=1 << 30,
        capture_cap_by_budget=False,
        a100_small_defaults=True,
        gpu_memory_utilization=0.9,
        model_runner="v1",
        graphs_in_budget_v1=False,
        graphs_in_budget_v2=False,
        host_set="public",
        host=_PUBLIC,
    ),
    "0.11": VllmVersion(
        name="0.11",
        admission="first_chunk",
        async_scheduling=False,
        cudagraph_mode="full_and_piecewise",
        capture_by16_from=1 << 30,
        capture_cap_by_budget=False,
        a100_small_defaults=True,
        gpu_memory_utilization=0.9,
        model_runner="v1",
        graphs_in_budget_v1=False,
        graphs_in_budget_v2=False,
        host_set="public",
        host=_PUBLIC,
    ),
    "0.19": VllmVersion(
        name="0.19",
        admission="full_prompt",
        async_scheduling=True,
        cudagraph_mode="full_and_piecewise",
        capture_by16_from=256,
        capture_cap_by_budget=True,
        a100_small_defaults=True,
        gpu_memory_utilization=0.9,
        model_runner="v1",
        graphs_in_budget_v1=False,
        graphs_in_budget_v2=False,
        host_set="public",
        host=_PUBLIC,
    ),
    "0.26": VllmVersion(
        name="0.26",
        admission="full_prompt",
        async_scheduling=True,
        cudagraph_mode="full_and_piecewise",
        capture_by16_from=256,
        capture_cap_by_budget=True,
        a100_small_defaults=True,
        gpu_memory_utilization=0.92,
        model_runner="v2_dense",
        graphs_in_budget_v1=True,
        graphs_in_budget_v2=False,
        host_set="recorded",
        host=_RECORDED,
        paces_engine=True,
    ),
    "0.32": VllmVersion(
        name="0.32",
        admission="full_prompt",
        async_scheduling=True,
        cudagraph_mode="full_and_piecewise",
        capture_by16_from=256,
        capture_cap_by_budget=True,
        a100_small_defaults=True,
        gpu_memory_utilization=0.92,
        model_runner="v2",
        graphs_in_budget_v1=True,
        graphs_in_budget_v2=True,
        host_set="recorded",
        host=_RECORDED,
        paces_engine=True,
    ),
}
LATEST = "0.32"
LINES = tuple(VERSIONS)


def version(name: str) -> VllmVersion:
    return VERSIONS[name]


def batch_defaults(v: VllmVersion, gpu_name: str, hbm_bytes: float) -> tuple[int, int]:
    """``vllm serve``'s max_num_seqs and max_num_batched_tokens when the user sets neither."""
    big = hbm_bytes >= 70 * float(1 << 30) and not (v.a100_small_defaults and "a100" in gpu_name.lower())
    return (1024, 8192) if big else (256, 2048)


def attention_kernel(compute_capability: str | None) -> str:
    """The flash-attention kernel vLLM's FlashAttention backend runs on a GPU: FlashAttention-3 on
    Hopper (compute capability 9.x), FlashAttention-2 on Ampere and Ada (8.x); ``other`` elsewhere
    (Blackwell, 10.x, defaults to FlashInfer; a custom GPU without a capability; and every AMD GPU,
    which carries ``gfx`` and no compute capability: vLLM runs its ROCm backends there, TRITON_ATTN
    before 0.19, ROCM_ATTN from 0.19, ROCM_AITER_FA with AITER on; servesim gives them the cost
    model's default attention efficiencies)."""
    major = (compute_capability or "").partition(".")[0]
    return {"8": "fa2", "9": "fa3"}.get(major, "other")


def max_capture_size(v: VllmVersion, max_num_seqs: int, max_num_batched_tokens: int, given: int | None = None) -> int:
    """The largest step (in tokens) replayed from a CUDA graph."""
    if given is not None:
        return given
    cap = min(2 * max_num_seqs, 512)
    return min(cap, max_num_batched_tokens) if v.capture_cap_by_budget else cap
