"""What changes between vLLM releases that the simulator models, one record per release line.

``engine.vllm_version`` picks a record; fields a scenario leaves null take their defaults from it.
It may also name any release from 0.10.0 to 0.33.0 (``RELEASES``): that runs as the line whose
modelled behaviour it shares, with the fields it sets otherwise, and a note says so
(docs/vllm-releases.md).
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
  (from 0.12 also capped at ``max_num_batched_tokens``); a model's config may raise ``max``
  (``MODEL_CAPTURE_ARCHITECTURES``: gpt-oss, to ``gpt_oss_capture``: 1024, 992 in 0.11.0). A
  step's token count is padded up to the next capture size; steps above the largest run without
  graphs (``capture_sizes``).
- graphs_in_budget: the CUDA-graph memory estimate is subtracted from the KV budget by default
  from 0.21 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``); before, graphs used the headroom.
- a100_small_defaults: from 0.9.2 the large batch defaults (1024 sequences, 8192 tokens for the
  API server) need >= 70 GiB and a GPU that is not an A100 (``EngineArgs._set_default_args``).
- tier_160: from 0.28.0 the API server's default step budget is 16384 tokens on a GPU of 160 GiB or
  more (B200, B300, GB200, MI300X and up; ``EngineArgs.get_batch_defaults``: "for GPUs like
  B200/B300 with >= 160GB memory, use the largest defaults"); 0.27.1 has no such tier.
- has_performance_mode: ``--performance-mode`` (balanced, interactivity, throughput) exists from 0.28.0:
  throughput doubles the default max_num_seqs and max_num_batched_tokens where the user sets
  neither (``_set_default_max_num_seqs_and_batched_tokens_args``); interactivity captures every
  CUDA-graph size from 1 to 32 (``VllmConfig._set_cudagraph_sizes``), not 1, 2, 4, 8, 16, 24, 32.
  Nothing else reads it in 0.28.0 to 0.33.0.
- gpu_memory_utilization: the default is 0.9 up to 0.19 and 0.92 from 0.22 (``CacheConfig``).
- model_runner: which GPU model runner serves the model, since it sizes the profiling pass and the
  CUDA graphs differently (simulator.scenario.memory): V1 up to 0.19; from 0.22 the V2 runner serves
  models without mixture-of-experts layers by default (``VllmConfig.use_v2_model_runner``; MoE models
  stay on V1 unless their architecture is in ``V2_MOE_ARCHITECTURES``); by 0.33, every model. V1
  subtracts its CUDA-graph estimate from the KV budget from 0.21; V2 does not in 0.22-0.26
  (``profile_cudagraph_memory`` returns 0) and does in 0.33. Seen in the recorded 0.26 servers
  (data/e2e/): "Available KV cache memory" leaves the graphs out for dense models and DeepSeek-V2-Lite
  and subtracts them for Qwen3-30B-A3B.
- rocm_attention: the attention backend vLLM picks on an AMD GPU when none is asked for: TRITON_ATTN
  (its Triton unified attention, prefill and decode) before 0.19, ROCM_ATTN from 0.19
  (``vllm/platforms/rocm.py``); ROCM_AITER_FA only with AITER turned on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simulator.errors import ConfigError
from simulator.scenario.hosts import HostCosts, load_host_costs
from simulator.scenario.models import ModelArch

# MoE architectures vLLM serves on its V2 model runner all the same where the default is V1 for MoE
# models (``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` in vllm/config/vllm.py, read in the 0.26.0 wheel;
# its log names the runner: ``vllm.v1.worker.gpu.model_runner`` for DeepSeek-V2-Lite in
# data/e2e/h200_mla_2026-11-30, ``vllm.v1.worker.gpu_model_runner`` for Qwen3-30B-A3B).
V2_MOE_ARCHITECTURES = frozenset({"DeepseekV2ForCausalLM", "GraniteMoeForCausalLM", "Qwen2MoeForCausalLM"})


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
    # vLLM's default attention backend on an AMD GPU: "triton" (TRITON_ATTN) | "rocm" (ROCM_ATTN)
    rocm_attention: str = "triton"
    tier_160: bool = False  # 16384 batched tokens by default on GPUs of 160 GiB or more
    has_performance_mode: bool = False  # --performance-mode exists
    # The API server paces the engine (simulator.engine.host.step_start): a stand-in that fits the
    # recorded 0.26 servers best with one set of host costs (their engine, profiled, runs ahead); the
    # public runs of 0.10-0.19 fit an engine that runs ahead of it (docs/validation.md).
    paces_engine: bool = False
    # The all-reduce buffers are allocated before the memory profile (simulator.scenario.memory,
    # NON_TORCH_BYTES): at TP >= 2 they leave the KV budget alone, whichever runner serves the model.
    early_allreduce: bool = False
    # The largest CUDA-graph capture size gpt-oss's model config sets where the user sets no capture
    # sizes (``MODEL_CAPTURE_ARCHITECTURES``): 1024 from its first release (0.10.1); 992 in 0.11.0,
    # whose full graphs on FlashAttention-3 went no higher (PR #25508); 1024 again from 0.11.1 (PR
    # #28345, after #27840 lifted that limit).
    gpt_oss_capture: int = 1024

    def runner(self, model: ModelArch) -> str:
        """The model runner that serves ``model``: "v1" or "v2"."""
        if self.model_runner == "v2_dense":
            v2 = not model.is_moe or not V2_MOE_ARCHITECTURES.isdisjoint(model.architectures)
            return "v2" if v2 else "v1"
        return self.model_runner

    def graphs_in_budget(self, model: ModelArch) -> bool:
        """Whether the CUDA graphs' estimated memory is taken from the KV budget."""
        return self.graphs_in_budget_v2 if self.runner(model) == "v2" else self.graphs_in_budget_v1


_PUBLIC, _RECORDED = load_host_costs("public"), load_host_costs("recorded")
# Each line is the one before it with what changed (0.32, vLLM 0.33, keeps the host costs of the
# newest release measured here, 0.26).
_V010 = VllmVersion(
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
)
_V011 = replace(_V010, name="0.11", cudagraph_mode="full_and_piecewise", gpt_oss_capture=992)
_V019 = replace(
    _V011,
    name="0.19",
    gpt_oss_capture=1024,
    admission="full_prompt",
    async_scheduling=True,
    capture_by16_from=256,
    capture_cap_by_budget=True,
    rocm_attention="rocm",
)
_V026 = replace(
    _V019,
    name="0.26",
    gpu_memory_utilization=0.92,
    model_runner="v2_dense",
    graphs_in_budget_v1=True,
    host_set="recorded",
    host=_RECORDED,
    paces_engine=True,
    early_allreduce=True,
)
_V032 = replace(
    _V026, name="0.32", model_runner="v2", graphs_in_budget_v2=True, tier_160=True, has_performance_mode=True
)
VERSIONS = {v.name: v for v in (_V010, _V011, _V019, _V026, _V032)}
LATEST = "0.32"
LINES = tuple(VERSIONS)


@dataclass(frozen=True)
class Release:
    """One vLLM release from 0.10.0 on: the line whose modelled behaviour it shares, the line's fields
    it sets otherwise (``overrides``), and what else differs that servesim does not model (``unmodelled``).
    Read from each release's source distribution on PyPI (``vllm/engine/arg_utils.py``,
    ``vllm/config/``) and its release notes; 0.15.x shipped wheels only and is taken to be as 0.14.0 and
    0.16.0, which agree on every field here."""

    name: str
    line: str
    overrides: tuple[tuple[str, Any], ...] = ()
    unmodelled: str = ""

    @property
    def series(self) -> str:
        return ".".join(self.name.split(".")[:2])


_V2_SOME = "the V2 model runner serves only some dense architectures ({}); servesim gives it every dense model"
_FROM_028 = (("tier_160", True), ("has_performance_mode", True))
_BY16 = (("capture_by16_from", 256), ("gpt_oss_capture", 1024))
_BY16_CAP = (*_BY16, ("capture_cap_by_budget", True))


def _releases() -> dict[str, Release]:
    """Every release from 0.10.0 to 0.33.0 (PyPI), each with its line."""
    rows: list[Release] = []
    for n in ("0.10.0", "0.10.1", "0.10.1.1", "0.10.2"):
        rows.append(Release(n, "0.10"))
    rows.append(Release("0.11.0", "0.11"))
    for n in ("0.11.1", "0.11.2"):
        rows.append(Release(n, "0.11", _BY16))
    for n in ("0.12.0", "0.13.0"):
        rows.append(Release(n, "0.11", _BY16_CAP))
    for n in ("0.14.0", "0.14.1", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.18.1"):
        rows.append(Release(n, "0.19", (("admission", "first_chunk"), ("rocm_attention", "triton"))))
    for n in ("0.19.0", "0.19.1", "0.20.0", "0.20.1", "0.20.2"):
        rows.append(Release(n, "0.19"))
    rows.append(Release("0.21.0", "0.19", (("graphs_in_budget_v1", True),)))
    for n in ("0.22.0", "0.22.1"):
        rows.append(Release(n, "0.26", unmodelled=_V2_SOME.format("Qwen3, unquantized")))
    rows.append(Release("0.23.0", "0.26", unmodelled=_V2_SOME.format("Qwen3, Llama, Mistral, unquantized")))
    rows.append(Release("0.24.0", "0.26", unmodelled=_V2_SOME.format("Qwen3, Llama, Mistral")))
    for n in ("0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1"):
        rows.append(Release(n, "0.26"))
    rows.append(Release("0.28.0", "0.26", _FROM_028))
    for n in ("0.29.0", "0.30.0", "0.31.0"):
        rows.append(
            Release(
                n,
                "0.32",
                unmodelled="the V2 runner's CUDA graphs are taken from the KV budget as in 0.32 (not checked)",
            )
        )
    rows.append(Release("0.32.0", "0.32"))
    rows.append(Release("0.33.0", "0.32"))
    return {r.name: r for r in rows}


RELEASES = _releases()
FIRST, NEWEST = "0.10.0", "0.33.0"


def _parts(text: str) -> tuple[int, ...] | None:
    bits = text.split(".")
    if not 2 <= len(bits) <= 4 or not all(b.isdigit() for b in bits):
        return None
    return tuple(int(b) for b in bits)


def release_name(value: object, where: str = "engine.vllm_version") -> str:
    """``value`` as the release it names: a line ('0.32'), a release ('0.13', '0.15.1'), or a number
    that reads as one (0.13; YAML reads 0.10 as 0.1, which names 0.10: a version written as a number
    has a two-digit minor). Anything before 0.10 or not a release is a one-line ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{where} must be a vLLM release such as '0.32' or '0.15.1' (got {value!r})")
    text = value if isinstance(value, str) else repr(value)
    if isinstance(value, float) and len(text.partition(".")[2]) == 1:
        text += "0"  # 0.1 as YAML reads 0.10
    parts = _parts(text)
    if parts is not None and parts < (0, 10):
        raise ConfigError(
            f"{where} must be a vLLM release from 0.10 on (servesim follows the V1 engine of {FIRST} to {NEWEST}) (got {value!r})"
        )
    if text in VERSIONS or _release(text) is not None:
        return text
    raise ConfigError(
        f"{where} must be a vLLM release from {FIRST} to {NEWEST}, as x.y or x.y.z, e.g. '0.32' or '0.15.1' "
        f"(docs/vllm-releases.md lists them) (got {value!r})"
    )


def release_parts(name: str) -> tuple[int, ...]:
    """A line or release as ``release_name`` gives it (a checked scenario's ``engine.vllm_version``),
    in numbers: (0, 26) for '0.26', (0, 15, 1) for '0.15.1'."""
    return _parts(name) or ()


def json_schema() -> dict:
    """What ``engine.vllm_version`` accepts, for editors: every line and release, as a string or
    (x.y) as the number YAML reads."""
    names = sorted({*VERSIONS, *RELEASES, *(r.series for r in RELEASES.values())}, key=lambda n: _parts(n) or ())
    numbers = sorted({float(n) for n in names if n.count(".") == 1})
    return {"enum": [*names, *numbers]}


def _release(name: str) -> Release | None:
    """The release ``name`` names: x.y is its first release, x.y.0."""
    return RELEASES.get(name) or (RELEASES.get(name + ".0") if name.count(".") == 1 else None)


def version(name: str) -> VllmVersion:
    """The modelled behaviour of a release line, or of a release: its line's, with the fields it sets."""
    if name in VERSIONS:
        return VERSIONS[name]
    r = _release(name)
    if r is None:
        release_name(name)  # raises the one-line error
        raise KeyError(name)
    return replace(VERSIONS[r.line], **dict(r.overrides))


def release_note(name: str) -> str | None:
    """One line for a release that is not a line of its own: the line it runs as and what differs
    (None for a line, and for a release of a line's own series that differs in nothing modelled)."""
    r = None if name in VERSIONS else _release(name)
    if r is None or (r.series == r.line and not r.overrides):
        return None
    text = f"engine.vllm_version {name!r} runs as release line {r.line}"
    if r.overrides:
        text += " with " + ", ".join(_OVERRIDE_TEXT[k] for k, _ in r.overrides) + f" (as {r.name} has them)"
    if r.unmodelled:
        return f"{text}; not modelled: {r.unmodelled}"
    return text + ("; no other modelled default differs" if r.overrides else "; no modelled default differs")


def release_table() -> str:
    """The Markdown table of docs/vllm-releases.md: releases with the same mapping on one row."""
    rows: list[tuple[list[str], Release]] = []
    for r in RELEASES.values():
        if rows and (rows[-1][1].line, rows[-1][1].overrides, rows[-1][1].unmodelled) == (
            r.line,
            r.overrides,
            r.unmodelled,
        ):
            rows[-1][0].append(r.name)
        else:
            rows.append(([r.name], r))
    out = [
        "| releases | runs as line | set as the release has it | what differs, not modelled |",
        "|---|---|---|---|",
    ]
    for names, r in rows:
        own = ", ".join(_OVERRIDE_TEXT[k] for k, _ in r.overrides) or "-"
        out.append(f"| {', '.join(names)} | {r.line} | {own} | {r.unmodelled or '-'} |")
    return "\n".join(out) + "\n"


# How a release's own settings read in its note.
_OVERRIDE_TEXT = {
    "capture_by16_from": "CUDA-graph capture sizes by 16 from 256",
    "capture_cap_by_budget": "the largest capture size capped at max_num_batched_tokens",
    "gpt_oss_capture": "gpt-oss's largest capture size 1024 (992 in 0.11.0)",
    "admission": "admission first_chunk (the whole-prompt check comes in 0.19)",
    "graphs_in_budget_v1": "the CUDA-graph estimate taken from the KV budget",
    "rocm_attention": "TRITON_ATTN on AMD GPUs (ROCM_ATTN comes in 0.19)",
    "tier_160": "16384 batched tokens by default on GPUs of 160 GiB or more",
    "has_performance_mode": "the --performance-mode knob",
}


def batch_defaults(v: VllmVersion, gpu_name: str, hbm_bytes: float, mode: str = "balanced") -> tuple[int, int]:
    """``vllm serve``'s max_num_seqs and max_num_batched_tokens when the user sets neither, under
    ``--performance-mode`` ``mode`` (throughput doubles both)."""
    gib = float(1 << 30)
    if v.tier_160 and hbm_bytes >= 160 * gib:
        seqs, tokens = 1024, 16384
    elif hbm_bytes >= 70 * gib and not (v.a100_small_defaults and "a100" in gpu_name.lower()):
        seqs, tokens = 1024, 8192
    else:
        seqs, tokens = 256, 2048
    k = 2 if mode == "throughput" else 1
    return k * seqs, k * tokens


INTERACTIVITY_EACH = 32  # --performance-mode interactivity captures every size up to this one


def capture_each(mode: str) -> int:
    """The CUDA-graph capture sizes taken one by one (1 to this) under ``--performance-mode``
    ``mode``; 0: the default sizes (1, 2, 4, then by 8)."""
    return INTERACTIVITY_EACH if mode == "interactivity" else 0


def attention_kernel(
    compute_capability: str | None, gfx: str | None = None, rocm_attention: str = "", sinks: bool = False
) -> str:
    """The attention kernel vLLM runs on a GPU: FlashAttention-3 on Hopper (compute capability 9.x),
    FlashAttention-2 on Ampere and Ada (8.x), except for a model with attention sinks (``sinks``:
    gpt-oss), which FlashAttention-2 cannot take (``flash_attn_supports_sinks``: FA3 and FA4 only,
    vllm/v1/attention/backends/fa_utils.py) nor FlashInfer off Blackwell, so vLLM falls back to its
    Triton unified attention there (``triton``; ``_get_backend_priorities`` in vllm/platforms/cuda.py,
    0.26.0); on an AMD GPU (``gfx``, no compute capability) its Triton unified attention
    (``rocm_triton``) where the release's default backend is TRITON_ATTN (``VllmVersion.rocm_attention``);
    ``other`` elsewhere (Blackwell, 10.x, defaults to FlashInfer, sinks included; a custom GPU without a
    capability; ROCM_ATTN from 0.19). servesim gives ``other`` the cost model's default attention
    efficiencies, ``triton`` the rate fitted on a public A100 run (``cost.TRITON_ATTN_COMPUTE``), and
    ``rocm_triton`` the rates a GPU's calibration file fitted for it where it has them
    (``simulator.engine.calibration.vllm_attention``)."""
    if gfx:
        return "rocm_triton" if rocm_attention == "triton" else "other"
    major = (compute_capability or "").partition(".")[0]
    if major == "8" and sinks:
        return "triton"
    return {"8": "fa2", "9": "fa3"}.get(major, "other")


# Architectures whose model config raises the default largest capture size where the user sets no
# capture sizes, to the release's ``gpt_oss_capture`` (vLLM ``vllm/model_executor/models/config.py``:
# ``GptOssForCausalLMConfig``, "83 graphs instead of 67", the sizes above 256 by 16 on every release).
# Every recorded gpt-oss server (vLLM 0.26, data/e2e/*gptoss*/*/server.log) logged
# ``max_cudagraph_capture_size': 1024``.
MODEL_CAPTURE_ARCHITECTURES = frozenset({"GptOssForCausalLM"})


def capture_sizes(
    v: VllmVersion,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    given: int | None = None,
    architectures: tuple[str, ...] = (),
) -> tuple[int, int]:
    """The largest step (in tokens) replayed from a CUDA graph, and the size from which the capture
    sizes step by 16: ``given`` (the user's) at the release's spacing; else a model's own
    (``MODEL_CAPTURE_ARCHITECTURES``: the release's ``gpt_oss_capture``, by 16 from 256); else
    ``min(2 x max_num_seqs, 512)`` at the release's spacing. From 0.12 no more than the step budget."""
    if given is not None:
        return given, v.capture_by16_from
    by16 = v.capture_by16_from
    if MODEL_CAPTURE_ARCHITECTURES.isdisjoint(architectures):
        cap = min(2 * max_num_seqs, 512)
    else:
        cap, by16 = v.gpt_oss_capture, min(by16, 256)
    return (min(cap, max_num_batched_tokens) if v.capture_cap_by_budget else cap), by16
