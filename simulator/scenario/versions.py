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
from pathlib import Path


@dataclass(frozen=True)
class HostCosts:
    """Seconds spent outside the GPU, fitted on the calibration half of measured end-to-end runs
    (``tools/validation/fit_host.py`` writes a set of them, HOST_SETS, to simulator/data/host_costs.yaml;
    ``servesim validate`` reports them with the held-out half): the engine core's CPU work per step, and the API
    server's (``cost.FrontendCosts``), per endpoint: a request taken in and a token streamed cost
    more through /v1/chat/completions (chat template, larger chunks) than through /v1/completions.
    They include the benchmark client's own work, which runs on the same host in the measurements."""

    engine_step_s: float = 1.0e-3
    # Per scheduled sequence: up to 0.11 (synchronous scheduling, model runner V1), and from 0.19
    # (async scheduling, input preparation moved to the GPU). Both start the fit from ~21 us, V1's
    # decode-to-decode gap of "about 5-6ms" at batch 256 (https://github.com/vllm-project/vllm/issues/10634).
    engine_per_seq_s: float = 2.1e-5
    engine_per_seq_s_019: float = 2.1e-5
    latency_s: float = 0.02
    # ~1 us per token: "DGX H100's CPU can do about only about 1k tokens/ms" (tokenizer, one
    # thread; https://github.com/vllm-project/vllm/issues/19012).
    prompt_token_s: float = 1.0e-6
    step_s: float = 2.0e-4
    request_s: float = 2.0e-3
    token_s: float = 1.5e-5
    chat_request_s: float = 4.0e-3
    chat_token_s: float = 3.0e-5
    finish_s: float = 2.0e-3
    chat_finish_s: float = 1.6e-2
    # The share of a request's intake before its task first yields the loop (simulator.engine.frontend),
    # started from the public bursts' TTFT spread: evenly from about a fifth (completions, vLLM
    # 0.19) and a half (chat, 0.11) of the way to the p99.
    first_pass: float = 0.25
    chat_first_pass: float = 0.5
    # Rounds of its API server's streams a request waits for on its way in (simulator.engine.frontend):
    # measured, not fitted, from the recorded servers' own TTFT against their clients'
    # (tools/validation/intake_rounds.py); the public runs record no server-side TTFT, and the recorded
    # value raises their calibration loss (8.44 to 8.51), so 0 there.
    intake_rounds: float = 0.0


HOST_COSTS_FILE = Path(__file__).resolve().parents[1] / "data" / "host_costs.yaml"
# Host costs come in sets, each fitted on its own measurements (tools/validation/fit_host.py): the
# public runs (vLLM 0.10-0.19, mixed hosts and clients) and the servers recorded with tools/e2e
# (vLLM 0.26, `vllm bench serve` on the same host over loopback).
HOST_SETS = ("public", "recorded")


def load_host_costs(which: str = "public", path: Path = HOST_COSTS_FILE) -> HostCosts:
    if not path.is_file():
        return HostCosts()
    from simulator.scenario import yamlio

    data = yamlio.load(path.read_text()) or {}
    return HostCosts(**(data.get(which) or {}).get("host_costs", {}))


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
    host_set: str  # which fitted host costs (HOST_SETS) apply
    host: HostCosts
    # The API server paces the engine (simulator.engine.frontend.step_start): a stand-in that fits the
    # recorded 0.26 servers best with one set of host costs (their engine, profiled, runs ahead); the
    # public runs of 0.10-0.19 fit an engine that runs ahead of it (docs/validation.md).
    paces_engine: bool = False

    @property
    def engine_per_seq_s(self) -> float:
        return engine_per_seq_s(self.host, self.name)

    def runner(self, is_moe: bool) -> str:
        """The model runner that serves a model: "v1" or "v2"."""
        if self.model_runner == "v2_dense":
            return "v1" if is_moe else "v2"
        return self.model_runner

    def graphs_in_budget(self, is_moe: bool) -> bool:
        """Whether the CUDA graphs' estimated memory is taken from the KV budget."""
        return self.graphs_in_budget_v2 if self.runner(is_moe) == "v2" else self.graphs_in_budget_v1


def engine_per_seq_s(host: HostCosts, line: str) -> float:
    """The engine's CPU work per scheduled sequence on release line ``line``."""
    return host.engine_per_seq_s if line in ("0.10", "0.11") else host.engine_per_seq_s_019


_PUBLIC, _RECORDED = load_host_costs("public"), load_host_costs("recorded")
# 0.32 (vLLM 0.33) keeps the host costs of the newest release measured here (0.26).
VERSIONS = {
    "0.10": VllmVersion(
        "0.10", "first_chunk", False, "piecewise", 1 << 30, False, True, 0.9, "v1", False, False, "public", _PUBLIC
    ),
    "0.11": VllmVersion(
        "0.11",
        "first_chunk",
        False,
        "full_and_piecewise",
        1 << 30,
        False,
        True,
        0.9,
        "v1",
        False,
        False,
        "public",
        _PUBLIC,
    ),
    "0.19": VllmVersion(
        "0.19", "full_prompt", True, "full_and_piecewise", 256, True, True, 0.9, "v1", False, False, "public", _PUBLIC
    ),
    "0.26": VllmVersion(
        "0.26",
        "full_prompt",
        True,
        "full_and_piecewise",
        256,
        True,
        True,
        0.92,
        "v2_dense",
        True,
        False,
        "recorded",
        _RECORDED,
        paces_engine=True,
    ),
    "0.32": VllmVersion(
        "0.32",
        "full_prompt",
        True,
        "full_and_piecewise",
        256,
        True,
        True,
        0.92,
        "v2",
        True,
        True,
        "recorded",
        _RECORDED,
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
    (Blackwell defaults to FlashInfer, AMD to ROCm's kernels; a custom GPU without a capability)."""
    major = (compute_capability or "").partition(".")[0]
    return {"8": "fa2", "9": "fa3"}.get(major, "other")


def max_capture_size(v: VllmVersion, max_num_seqs: int, max_num_batched_tokens: int, given: int | None = None) -> int:
    """The largest step (in tokens) replayed from a CUDA graph."""
    if given is not None:
        return given
    cap = min(2 * max_num_seqs, 512)
    return min(cap, max_num_batched_tokens) if v.capture_cap_by_budget else cap
