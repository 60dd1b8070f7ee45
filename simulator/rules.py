"""The scheduling rules both engine steps follow, each written once.

The readable reference (``simulator/reference/``) calls these functions as plain Python; the
compiled production step (``simulator/kernel/``) compiles the very same functions with numba. A
rule changed here changes both, and the differential tests then compare them byte for byte.
Everything here is plain integer/float arithmetic (the subset numba compiles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ---- request status codes (the ``status`` column of the request records) ------------------------
WAITING, RUNNING, SWAPPED, FINISHED, REJECTED, ABORTED = range(6)
STATUS_NAMES = ("waiting", "running", "swapped", "finished", "rejected", "aborted")


@dataclass(frozen=True)
class SchedulerConfig:
    """The engine knobs the step reads (resolved from the scenario by ``simulator.run``)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    enable_prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    admission: str = "first_chunk"  # or "full_prompt" (vLLM's scheduler_reserve_full_isl)
    policy: str = "fcfs"  # or "priority"
    preemption_mode: str = "recompute"  # or "swap"
    swap_space_blocks: int = 0
    block_bytes: float = 0.0  # KV bytes of one block on one GPU (for swap traffic)
    on_swap_full: str = "recompute"  # or "abort"
    cache_finished_content: bool = False  # keep finished requests' own blocks findable (sessions)


def kv_usage(num_free, num_blocks):
    """vLLM's ``kv_cache_usage``: the share of the usable (non-null) blocks that are not free; cached
    but free blocks count as free."""
    return 1.0 - num_free / num_blocks


def cdiv(a, b):
    return (a + b - 1) // b


def long_prefill_cap(threshold, num_requests):
    """The per-request chunk cap in force this step: vLLM drops it when at most one request is in
    the engine (running, waiting or swapped) at the step's start, as nobody else could use the budget."""
    return 0 if num_requests <= 1 else threshold


def chunk(num_tokens, num_computed, cap, budget):
    """Tokens a request runs this step: what it has left to compute (chunked prefill), capped by
    the long-prefill cap (0: none) and by what is left of the step's token budget."""
    need = num_tokens - num_computed
    if cap > 0 and need > cap:
        need = cap
    return need if need < budget else budget


def new_blocks(num_computed, tokens, blocks_held, block_size):
    """Blocks a request must be given to hold ``num_computed + tokens`` tokens' KV."""
    if num_computed + tokens <= blocks_held * block_size:
        return 0
    return cdiv(num_computed + tokens, block_size) - blocks_held


def hit_limit(num_tokens, block_size):
    """Most leading blocks a prefix-cache lookup may return: at most num_tokens - 1 tokens, so the
    last token is always computed (it produces the next token's logits)."""
    return (num_tokens - 1) // block_size


def admitted_computed(hit_blocks, block_size, external, first_admission):
    """Tokens a request has computed when admitted: its prefix-cache hits, or, at its first
    admission, the prompt tokens whose KV arrived with it (a disaggregated decode), if more; their
    blocks beyond the hits are allocated like a chunk's. Preempted, it has lost them."""
    nc = hit_blocks * block_size
    if first_admission and external > nc:
        return external
    return nc


def admission_blocks(num_tokens, hit_blocks, first_chunk_blocks, block_size, full_prompt):
    """Blocks that must be free (besides evictable hit blocks) to admit a waiting request:
    the whole prompt's (vLLM >= 0.32, ``scheduler_reserve_full_isl``) or its first chunk's (0.10)."""
    if full_prompt:
        return cdiv(num_tokens, block_size) - hit_blocks
    return first_chunk_blocks


def recomputed(before, after, high_water):
    """Of the tokens computed in a step (``before`` to ``after``), those computed once already
    (below the request's high-water mark): work lost to preemption."""
    r = (after if after < high_water else high_water) - before
    return r if r > 0 else 0


def attn_pairs(sum_tokens_x_context, sum_tokens_x_tokens_plus_1):
    """Query-key pairs of a step from two integer sums over its requests: tokens x context before
    the step, and tokens x (tokens + 1) (causal attention within each chunk)."""
    return float(sum_tokens_x_context) + 0.5 * float(sum_tokens_x_tokens_plus_1)


def later_victim(prio_a, arrival_a, id_a, prio_b, arrival_b, id_b):
    """Whether request a is preempted before request b under priority scheduling: higher priority
    value (less urgent) first, then later arrival, then (exact arrival ties, a simulator's, not a
    clock's) the later submitted; letting ties fall to list order lets two equal requests preempt
    each other forever."""
    if prio_a != prio_b:
        return prio_a > prio_b
    if arrival_a != arrival_b:
        return arrival_a > arrival_b
    return id_a > id_b


# ---- inter-token-latency histogram: log-spaced bins from 1 us to ~1e4 s, 200 per decade ---------
ITL_LO, ITL_PER_DECADE, ITL_DECADES = -6.0, 200, 10
ITL_BINS = ITL_PER_DECADE * ITL_DECADES  # bins 1..ITL_BINS; 0 and ITL_BINS + 1 catch what falls outside


def itl_bin(gap):
    """The histogram bin of one inter-token gap (seconds)."""
    b = (math.log10(max(gap, 1e-12)) - ITL_LO) * ITL_PER_DECADE
    i = int(math.floor(b)) + 1
    return min(max(i, 0), ITL_BINS + 1)


def itl_bin_value(k):
    """A bin's representative gap (its geometric centre), seconds."""
    return 10.0 ** (ITL_LO + (k - 0.5) / ITL_PER_DECADE)
