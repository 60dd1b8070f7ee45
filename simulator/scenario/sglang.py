"""SGLang's server defaults and start-up sizing, for ``engine.framework: sglang``.

Each rule follows SGLang 0.5 (read in 0.5.6.post2 and 0.5.17, which agree on all of it; the file and
function each comes from are cited below and in data/sources/sglang/sglang_scheduler.md, sections 3,
5 and 8). What the scheduler does with these settings is in ``simulator.engine.rules`` (the
``sgl_`` rules) and the two engine steps.

What is approximated, and why:
- **Token granularity.** SGLang's KV pool and radix cache are per token (``page_size`` 1 on Hopper
  and AMD). servesim's pool is paged; a page of ``ACCOUNTING_PAGE`` tokens stands in for SGLang's
  single-token pages (a request's last page is part-filled: about 8 tokens a request, under 1% of a
  1k-token request's KV; a prefix-cache hit is counted in whole pages of 16). A ``page_size`` of 16
  or more (Blackwell's MLA backends force 32-128) is taken as it is.
- **Memory before the weights.** ``mem_fraction_static`` is a fraction of the memory free before
  the weights load (after the CUDA context and the distributed init); ``CONTEXT_BYTES`` stands for
  what those take.
"""

from __future__ import annotations

import re

from simulator.errors import ConfigError
from simulator.scenario.hosts import HostCosts, load_host_costs

GIB = float(1 << 30)
MIB = float(1 << 20)

LINE = "0.5"  # the modelled release line (0.5.0 to 0.5.17 alike in everything modelled but prefill graphs)
ACCOUNTING_PAGE = 16  # tokens of the pool's page standing in for SGLang's per-token slots
CONTEXT_BYTES = 1.0 * GIB  # CUDA context and distributed init, before the weights load (per GPU)

# srt/managers/schedule_policy.py (CLIP_MAX_NEW_TOKENS, env SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION):
# a request's max_new_tokens counts at most this much when its future KV is reserved.
CLIP_MAX_NEW = 4096
# srt/environ.py: SGLANG_INIT_NEW_TOKEN_RATIO, SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR,
# SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS, SGLANG_RETRACT_DECODE_STEPS.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20
MAX_PREFILL_TOKENS = 16384  # server_args.max_prefill_tokens
# The CPU side: SGLang's scheduler, tokenizer manager and detokenizer are Python processes like vLLM's
# engine core and API server, priced by the same host model (simulator.engine.host) with their own
# costs: the set "sglang" of simulator/data/host_costs.yaml, fitted on the calibration half of the
# public SGLang runs (tools/validation/fit_host.py --source sglang), the API server never pacing the
# engine (SGLang's scheduler does not wait for its outputs to be streamed).
HOST_SET = "sglang"


def host_costs() -> HostCosts:
    """SGLang's fitted host costs on the reference host."""
    return load_host_costs(HOST_SET)


_RELEASE = re.compile(r"^0\.5(\.\d+)?(\.post\d+)?$")


def release_name(value: object) -> str:
    """``engine.sglang_version``: a release of the 0.5 line, as x.y, x.y.z or x.y.z.postN."""
    text = str(value).strip().lstrip("v")
    if not _RELEASE.match(text):
        raise ConfigError(
            f"engine.sglang_version must be a release of the modelled line {LINE} (0.5, 0.5.x or 0.5.x.postN) (got {value!r})"
        )
    return text


NEWEST = (0, 5, 17)  # the newest release modelled: what the line's name alone ("0.5") stands for
PREFILL_GRAPHS_FROM = (0, 5, 10)  # the first release capturing prefill graphs by default
MLA_PREFILL_EAGER_FROM = (0, 5, 15)  # the first whose default prefill graphs leave MLA models eager
MLA_PREFILL_GRAPH_MAX = 2048  # MLA models' largest prefill graph before that (server_args.py)


def release_key(release: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release name of the line (``release_name``); the line's name alone is
    its newest modelled release."""
    parts = [int(p) for p in release.split(".post")[0].split(".")]
    return (parts[0], parts[1], parts[2]) if len(parts) > 2 else NEWEST


def prefill_graph_max(release: str, amd: bool, mla: bool, dp_attention: int, chunked_prefill_size: int) -> int:
    """The largest step with a prefill SGLang replays from CUDA graphs, in tokens (0: none; a larger one
    runs eagerly, launched kernel by kernel). Up to 0.5.9 prefills always ran eagerly
    (``enable_piecewise_cuda_graph`` off by default). From 0.5.10 they are captured piecewise by default
    (``disable_piecewise_cuda_graph``; from 0.5.15 the "breakable" backend,
    ``model_executor/cuda_graph_config.py: default_prefill_backend``) up to ``chunked_prefill_size``
    tokens, 2,048 for MLA models; not on AMD GPUs, nor with DP attention (``server_args.py:
    _handle_piecewise_cuda_graph``, 0.5.10; ``_disable_*_cudagraph_if_incompatible``, 0.5.14-0.5.17),
    and from 0.5.15 not for MLA models (the breakable backend's first rule)."""
    key = release_key(release)
    if key < PREFILL_GRAPHS_FROM or amd or dp_attention > 1:
        return 0
    if mla:
        return 0 if key >= MLA_PREFILL_EAGER_FROM else MLA_PREFILL_GRAPH_MAX
    return max(chunked_prefill_size, 0)


CACHE_AWARE_POLICIES = ("lpm", "dfs-weight")


def active_policy(policy: str, radix_cache: bool) -> str:
    """The schedule policy SGLang runs: a cache-aware one is fcfs without the radix cache
    (``SchedulePolicy._validate_and_adjust_policy``)."""
    return "fcfs" if policy in CACHE_AWARE_POLICIES and not radix_cache else policy


def new_token_ratio(conservativeness: float) -> tuple[float, float, float]:
    """(initial, floor, decay per decode step) of the scheduler's new-token ratio
    (``scheduler_components/new_token_ratio_tracker.py``; 0.5.6: ``Scheduler.__init__``)."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    floor = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
    return init, floor, (init - floor) / NEW_TOKEN_RATIO_DECAY_STEPS


def memory_defaults(hbm_bytes: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks from the GPU's memory
    (``server_args.py: _handle_gpu_memory_settings``, the same in 0.5.6 and 0.5.17)."""
    gib = hbm_bytes / GIB
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, 24 if tp < 4 else 80
    if gib < 60:
        return 4096, 32 if tp < 4 else 160
    if gib < 160:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def mem_fraction_static(
    hbm_bytes: float, tp: int, chunked_prefill_size: int, cuda_graph_max_bs: int, mla: bool, dp: int = 1
) -> float:
    """SGLang's default ``mem_fraction_static`` (``server_args.py: _handle_gpu_memory_settings``):
    the GPU's memory less a reserve for activations, CUDA graphs and the tensor-parallel buffers,
    at least 10 GiB on GPUs of more than 60 GiB; 0.5.17 also reserves 1.5 GiB for MLA's prefill
    graphs, and DP attention over ``dp`` ranks 3 MiB (4.5 above 300) per graph batch and rank."""
    gpu_mib = hbm_bytes / MIB
    chunk = chunked_prefill_size if chunked_prefill_size > 0 else MAX_PREFILL_TOKENS
    reserved = 512 + 1.5 * max(chunk, 2048) + tp / 8 * 1024 + cuda_graph_max_bs * 2 + (1536 if mla else 0)
    if dp > 1:
        reserved += cuda_graph_max_bs * dp * (4.5 if cuda_graph_max_bs > 300 else 3)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def kv_pool_bytes(hbm_bytes: float, fraction: float, weight_bytes: float) -> float:
    """KV bytes per GPU (``kv_cache_configurator.py: _profile_available_bytes``; 0.5.6
    ``model_runner.py: profile_max_num_token``): ``fraction`` of the memory free before the weights
    load, less the weights."""
    return fraction * (hbm_bytes - CONTEXT_BYTES) - weight_bytes


def max_running_requests(pool_tokens: int, context_len: int, given: int | None) -> int:
    """The running-request cap (``kv_cache_configurator.py: resolve_max_num_reqs``): given, or
    512 requests per context length of pool tokens, clamped to 2,048-4,096; never more than half the
    pool's tokens."""
    if given is not None:
        return max(1, min(given, pool_tokens // 2))
    estimated = min(max(int(pool_tokens / context_len * 512), 2048), 4096)
    return max(1, min(estimated, pool_tokens // 2))


# DP attention (``--enable-dp-attention --dp-size D``): D ranks, each scheduling its own requests into
# its own KV pool, their steps synchronised. Modelled as one scheduler over the D pools together, the
# chunk and the running-request cap per rank times D (requests are dealt round-robin, so the ranks fill
# alike; the imbalance between them and the idle ranks' padding are not modelled), admission made more
# aggressive as SGLang makes it (``schedule_conservativeness`` x 0.3, server_args.py), and the step
# priced as one rank's (``CostModel(dp_attention=D)``).
DP_CONSERVATIVENESS = 0.3


def accounting_page(page_size: int) -> int:
    """Tokens of the pool's page for SGLang's ``page_size`` (see the module's note)."""
    return page_size if page_size >= ACCOUNTING_PAGE else ACCOUNTING_PAGE
