"""The scheduling rules both engine steps follow, each written once.

The readable reference (``simulator/engine/reference/``) calls these functions as plain Python; the
compiled production step (``simulator/engine/compiled/``) compiles the very same functions with numba. A
rule changed here changes both, and the differential tests then compare them byte for byte.
Everything here is plain integer/float arithmetic (the subset numba compiles, with no array made:
``sgl_waiting_order`` works in a scratch array its caller hands it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

from simulator.engine.events import PreemptionKind

COLD = ("sgl_waiting_order", "_sort_stably")  # not inlined into the compiled step (a rare path; see compiled/build.py)


class RequestStatus(IntEnum):
    """Where a request stands (the ``status`` column of the request records), as vLLM's
    ``RequestStatus`` names them; both engine steps, the metrics and the exports use these."""

    WAITING = 0
    RUNNING = 1
    SWAPPED = 2  # preempted to host memory (swap preemption)
    FINISHED = 3
    REJECTED = 4  # refused at arrival: it could never fit
    ABORTED = 5  # a swap victim dropped when swap space is full (on_swap_full: abort)


STATUS_NAMES = tuple(s.name.lower() for s in RequestStatus)


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
    # vLLM with async scheduling: each step is scheduled before the outputs of the step in flight are
    # in, so a request that ends keeps its place and blocks through the next step's scheduling
    # (seats_taken), and a block is hashed only once its tokens are known (known_tokens)
    outputs_late: bool = False
    # Speculative decoding (0: off): draft tokens proposed after each sampled token, KV slots kept
    # ahead for the drafter's own passes (EAGLE-style heads and draft models), budget tokens kept for
    # a draft model's inputs, the acceptance draws' seed, and P(at least i drafts accepted) for
    # i = 1..spec_tokens.
    spec_tokens: int = 0
    spec_lookahead: int = 0
    spec_draft_slots: int = 0  # budget tokens each scheduled request leaves to the drafter (room, spent)
    spec_seed: int = 0
    spec_accept_at_least: tuple[float, ...] = ()
    # Multi-LoRA (0: off): adapters a step may serve (GPU slots), and adapters kept in host memory.
    max_loras: int = 0
    max_cpu_loras: int = 0
    # KV offloading (0: off): KV blocks the host tier of the prefix cache holds (simulator.engine.host_tier).
    host_blocks: int = 0
    # SGLang (framework "sglang"; simulator/scenario/sglang.py): max_num_seqs is its
    # max_running_requests, max_num_batched_tokens its chunked_prefill_size, block_size the pool's
    # page; prompt tokens a prefill step admits at most, SGLang's own page size, and the new-token
    # ratio's start, floor and decay per decode step.
    framework: str = "vllm"
    sgl_prefill_tokens: int = 16384
    sgl_page: int = 1
    sgl_ratio: tuple[float, float, float] = (0.7, 0.098, 0.001003)
    # Kernels compiled on a step shape's first use (simulator.engine.cost.shape_key): every shape's
    # already (a warm server), or those of these step token counts besides the start-up's.
    jit_warm: bool = False
    jit_seen_tokens: tuple[int, ...] = ()


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


def seats_taken(num_running, num_ended):
    """Requests that hold a place while a step is scheduled: under ``max_num_seqs`` and in the
    long-prefill cap's count (vLLM's ``len(self.running)``). Those running, and those that ended in
    the step before if outputs come in late (``SchedulerConfig.outputs_late``): with async
    scheduling vLLM schedules a step before the outputs of the step in flight are in, so a request
    that ends in it keeps its place and its KV blocks through the next step's scheduling (not
    scheduled in it) and is freed only after. A place freed in step N is thus taken again in N + 2,
    not N + 1."""
    return num_running + num_ended


def schedules_again(num_running, num_ended, num_preempted):
    """Whether a scheduling that left nothing running (so scheduled nothing) while requests that
    ended held places (``seats_taken``), and preempted none, is followed at once by another: vLLM
    runs the empty step without the model and frees them as it takes in the outputs before, at no
    time (every request of a wave ending in one step, say)."""
    return num_running == 0 and num_ended > 0 and num_preempted == 0


def room(budget, draft_slots):
    """Tokens of the step's ``budget`` left the next request may be scheduled: with a draft model each
    scheduled request also keeps ``draft_slots`` input tokens for the drafter's first pass (vLLM's
    ``SpeculativeConfig.max_num_new_slots_for_drafting``, charged to its ``max_num_batched_tokens``);
    the scheduling stops when nothing is left."""
    return budget - draft_slots


def spent(tokens, draft_slots):
    """What scheduling ``tokens`` of a request takes from the step's budget (``room``), nothing if it
    was scheduled none; a request preempted after it was scheduled in the step gives the same back."""
    return tokens + draft_slots if tokens > 0 else 0


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


def host_loads(host_hit_blocks, gpu_hit_blocks, num_computed, block_size):
    """Blocks an admitted request loads from the host tier (KV offloading): its host hits, unless
    its KV arrived with it and covers more (a disaggregated decode's first admission)."""
    return host_hit_blocks if num_computed == (gpu_hit_blocks + host_hit_blocks) * block_size else 0


def admission_blocks(num_tokens, hit_blocks, first_chunk_blocks, block_size, full_prompt):
    """Blocks that must be free (besides evictable hit blocks) to admit a waiting request:
    the whole prompt's (vLLM >= 0.32, ``scheduler_reserve_full_isl``) and its first chunk's (with a
    drafter's lookahead slots: ``first_chunk_blocks``), or its first chunk's alone (0.10)."""
    if full_prompt:
        full = cdiv(num_tokens, block_size) - hit_blocks
        return full if full > first_chunk_blocks else first_chunk_blocks
    return first_chunk_blocks


# ---- speculative decoding -------------------------------------------------------------------------
_M32 = 0xFFFFFFFF


def _mul32(x, c):
    """``x * c`` modulo 2**32 for 32-bit ``x`` and ``c``, in 16-bit halves: no product reaches 2**63,
    so Python, numpy scalars and the compiled step's 64-bit integers all give the same value."""
    lo = (x & 0xFFFF) * (c & 0xFFFF)
    mid = ((x >> 16) * (c & 0xFFFF) + (x & 0xFFFF) * (c >> 16)) & 0xFFFF
    return (lo + (mid << 16)) & _M32


def _mix32(x):
    """A 32-bit integer hash (MurmurHash3's finaliser)."""
    x &= _M32
    x ^= x >> 16
    x = _mul32(x, 0x85EBCA6B)
    x ^= x >> 13
    x = _mul32(x, 0xC2B2AE35)
    x ^= x >> 16
    return x


def spec_uniform(seed, rid, num_out):
    """The acceptance draw of request ``rid``'s drafts verified after its ``num_out``-th output token:
    a number in [0, 1) fixed by the run's seed, the request and the position (so both engine steps,
    and any schedule, draw the same)."""
    return _mix32(_mix32(_mix32(num_out) ^ rid) ^ seed) / 4294967296.0


def spec_accepted(u, drafts, at_least):
    """Draft tokens accepted of ``drafts`` verified, for draw ``u``: the leading ones whose
    probability of all being accepted (``at_least[i]``: i + 1 of them) exceeds ``u``. One draw per
    verification gives each position its conditional acceptance rate, as rejection sampling does."""
    n = 0
    while n < drafts and u < at_least[n]:
        n += 1
    return n


def spec_emitted(accepted, num_out, max_tokens):
    """Tokens a verifying request outputs: the accepted drafts and the token sampled after them, but
    none past its length (the engine drops what follows a finished request's last token)."""
    left = max_tokens - num_out
    return accepted + 1 if accepted + 1 < left else left


def drafts_scheduled(computed_after, num_tokens):
    """Draft tokens among a request's scheduled ones: those past its real tokens (0 for a prefill)."""
    d = computed_after - num_tokens
    return d if d > 0 else 0


# ---- multi-LoRA ------------------------------------------------------------------------------------
def lora_skipped(adapter, running_with_it, active, max_loras):
    """Whether a waiting request is passed over this step (vLLM V1: it goes back to the head of the
    queue, and requests behind it may be admitted): it asks for an adapter that no running request
    uses (``running_with_it`` 0) while the running requests already use ``max_loras`` adapters."""
    return adapter >= 0 and running_with_it == 0 and active >= max_loras


def lora_cache_use(cache, adapter, serial, running):
    """Use ``adapter`` from a cache of adapters (``cache``: row 0 the adapters, -1 an empty place;
    row 1 when each was last put to use), at serial ``serial``: returns 0 if it was there, 1 if it
    had to be loaded, into an empty place or in place of the least recently used adapter that no
    running request uses (``running``: running requests per adapter)."""
    n = cache.shape[1]
    for i in range(n):
        if cache[0, i] == adapter:
            cache[1, i] = serial
            return 0
    best = -1
    for i in range(n):
        a = cache[0, i]
        if a < 0:
            best = i
            break
        if running[a] == 0 and (best < 0 or cache[1, i] < cache[1, best]):
            best = i
    if best < 0:  # every place holds an adapter in use (more running adapters than places): the oldest
        best = 0
        for i in range(1, n):
            if cache[1, i] < cache[1, best]:
                best = i
    cache[0, best] = adapter
    cache[1, best] = serial
    return 1


def recomputed(before, after, high_water):
    """Of the tokens computed in a step (``before`` to ``after``), those computed once already
    (below the request's high-water mark): work lost to preemption."""
    r = (after if after < high_water else high_water) - before
    return r if r > 0 else 0


def attn_pairs(sum_tokens_x_context, sum_tokens_x_tokens_plus_1):
    """Query-key pairs of a step from two integer sums over its requests: tokens x context before
    the step, and tokens x (tokens + 1) (causal attention within each chunk)."""
    return float(sum_tokens_x_context) + 0.5 * float(sum_tokens_x_tokens_plus_1)


def admits(blocks_needed, evictable_hits, num_free):
    """Whether a waiting request's blocks fit: those it needs (``admission_blocks``), plus its hit
    blocks that are free now (evictable: taking them as hits removes them from the free queue)."""
    return blocks_needed + evictable_hits <= num_free


def samples(num_computed, num_tokens):
    """Whether a scheduled request samples a token when the step ends: it has computed every token
    it has (a prefill chunk short of the prompt's end samples nothing)."""
    return num_computed == num_tokens


def finishes(num_out, max_tokens):
    """Whether a request that has just sampled its ``num_out``-th token is done (``--ignore-eos``:
    its length is its ``max_tokens``)."""
    return num_out >= max_tokens


def made_progress(num_tokens, recomputed_tokens):
    """Whether a step computed a token never computed before; steps that only redo preempted work
    (or do nothing) for the engine's ``stall_steps`` in a row are a livelock."""
    return num_tokens - recomputed_tokens > 0


# ---- blocks of a request's content --------------------------------------------------------------
def known_tokens(num_tokens, tokens_then, ran_last_step, outputs_late):
    """Tokens of a request whose values the scheduler knows as it schedules the request: all it has
    (``num_tokens``, the outputs of every finished step counted), or, when outputs come in late
    (``SchedulerConfig.outputs_late``) and the request ran in the step still in flight, the
    ``tokens_then`` it had when that step was scheduled (vLLM's ``Request.num_tokens``: the step's
    outputs are placeholders until it reports)."""
    return tokens_then if outputs_late and ran_last_step else num_tokens


def cacheable(computed, known):
    """Tokens whose full blocks vLLM hashes as it schedules a request (``KVCacheManager.
    allocate_slots``): those computed by the end of the step, but only ``known`` ones (neither drafts
    nor the outputs of a step in flight). A block is hashed there or never: a request preempted or
    ending before its next scheduling releases the blocks past these unhashed."""
    return computed if computed < known else known


def hashed_blocks(num_computed, hashable, block_size, caching):
    """Blocks of a released table that carry a hash (full, with caching on, and ``cacheable`` when
    the request was last scheduled: ``hashable`` tokens): they go to the tail of the free queue and
    keep their content; the rest do not."""
    n = num_computed if num_computed < hashable else hashable
    return n // block_size if caching else 0


def group_blocks(group, group_len, block_size):
    """The full blocks of a request's shared prefix (0 outside a group): its content that other
    requests of the group may hold; its own content starts after them."""
    return group_len // block_size if group >= 0 else 0


def fills_group_blocks(group, group_len, num_computed):
    """Whether scheduling a request's tokens from ``num_computed`` on may fill blocks of its shared
    prefix: those are indexed as soon as they fill (any request of the group may look them up)."""
    return group >= 0 and num_computed < group_len


def writes_chunk(num_computed, num_tokens):
    """Whether a scheduled request writes its full blocks to the host tier (KV offloading) after this
    step: a prefill chunk does; a decode step does not (its blocks are written when the request
    releases them, ``simulator.engine.host_tier``)."""
    return num_computed + 1 < num_tokens


def group_blocks_below(group, group_len, upto_tokens, block_size):
    """The full shared-prefix blocks of a request below token ``upto_tokens``."""
    return group_blocks(group, group_len if group_len < upto_tokens else upto_tokens, block_size)


# ---- a step's work, summed over its requests ------------------------------------------------------
# Slots of the accumulator both steps (and ``cost.decode_work``) add each scheduled request to: the
# terms of ``cost.step_time`` and of the step log (an int64 array of N_WORK).
# W_DECODE counts decode tokens (a verifying request's drafts with its token), W_DRAFTS the drafts.
W_SEQS, W_TOKENS, W_DECODE, W_CONTEXT, W_SINGLE, W_TXC, W_TXT1, W_SAMPLED, W_DRAFTS = range(9)
N_WORK = 9


def add_request(w, tokens, before, num_tokens, drafts):
    """Add one scheduled request computing ``tokens`` after ``before`` computed, of its ``num_tokens``
    real tokens (``drafts`` more being speculative ones to verify): its context (read by attention),
    its query-key sums (``attn_pairs``), the context of single-token rows (a mixed step's extra),
    and whether it samples, and does so as a decode (one token and its drafts, after some context)."""
    w[W_SEQS] += 1
    w[W_TOKENS] += tokens
    w[W_CONTEXT] += before
    w[W_TXC] += tokens * before
    w[W_TXT1] += tokens * (tokens + 1)
    if tokens == 1:
        w[W_SINGLE] += before
    if samples(before + tokens - drafts, num_tokens):
        w[W_SAMPLED] += 1
        w[W_DRAFTS] += drafts
        if tokens - drafts == 1 and before > 0:
            w[W_DECODE] += tokens


def add_decodes(w, n, context):
    """Add ``n`` requests decoding one token each after ``context`` computed tokens among them all
    (each more than 0): what ``add_request(w, 1, c, c + 1, 0)`` adds for each, as sums."""
    w[W_SEQS] += n
    w[W_TOKENS] += n
    w[W_DECODE] += n
    w[W_CONTEXT] += context
    w[W_SINGLE] += context
    w[W_TXC] += context
    w[W_TXT1] += 2 * n
    w[W_SAMPLED] += n


def preemption_kind(swap_mode, abort_on_full, swap_used, blocks, swap_space):
    """What preempting a request that holds ``blocks`` blocks does (an ``events`` preemption kind):
    with swap preemption, swap it out if the swap space takes its blocks, else abort it
    (``on_swap_full: abort``) or fall back to recomputation; with recompute preemption, recompute."""
    if swap_mode:
        if swap_used + blocks <= swap_space:
            return PreemptionKind.SWAPPED_OUT
        if abort_on_full:
            return PreemptionKind.ABORTED
    return PreemptionKind.RECOMPUTED


def queued_before(prio_a, arrival_a, seq_a, prio_b, arrival_b, seq_b):
    """Whether waiting request a is admitted before b: vLLM's priority queue order (lower priority
    value, then earlier arrival). Arrival ties (a simulator's instants; vLLM stamps each request as
    it comes, so its stamps never tie) go to the earlier submitted: ``seq`` is the request's id, so
    a preempted request goes back to its own place among them. Under FCFS both steps queue with
    priority and arrival 0 and count insertions up at the back and down at the front (a preempted
    request); SGLang's longest-output-first counts insertions up (its stable sort)."""
    if prio_a != prio_b:
        return prio_a < prio_b
    if arrival_a != arrival_b:
        return arrival_a < arrival_b
    return seq_a < seq_b


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


# ---- SGLang's scheduler (framework "sglang") ----------------------------------------------------
# Cited from SGLang 0.5 (data/sources/sglang/sglang_scheduler.md, sections 2-6): a step is a prefill
# step (the request being chunked first, then waiting requests in queue order, no decode token beside
# them) whenever one can be admitted, else a decode step of every running request; admission keeps
# room for every running request's expected remaining output; a decode step that cannot get its KV
# retracts requests to the back of the waiting queue.

SGL_CLIP_MAX_NEW = 4096  # sglang.CLIP_MAX_NEW (the rules stay free of imports numba cannot compile)
SGL_RETRACT_DECODE_STEPS = 20  # sglang.RETRACT_DECODE_STEPS


def sgl_max_new(max_tokens, num_out):
    """Output tokens SGLang still reserves KV for: what is left, at most ``SGL_CLIP_MAX_NEW``
    (``PrefillAdder``: ``min(max_new_tokens - len(output_ids), CLIP_MAX_NEW_TOKENS)``)."""
    left = max_tokens - num_out
    if left < 0:
        left = 0
    return left if left < SGL_CLIP_MAX_NEW else SGL_CLIP_MAX_NEW


def sgl_running_reserve(max_tokens, num_out, ratio):
    """KV tokens a running request's expected remaining output holds back from admission
    (``PrefillAdder._get_running_request_total_token_offset``): its clipped remainder times the
    new-token ratio."""
    return sgl_max_new(max_tokens, num_out) * ratio


def sgl_admission_tokens(extend, max_tokens, num_out, page, last_chunk):
    """KV tokens admitting a request (or its next chunk) charges against what is left
    (``PrefillAdder.add_one_req``, ``_update_prefill_budget``): the tokens it computes now, and with its
    last chunk its whole clipped remaining output, plus a page."""
    return extend + (sgl_max_new(max_tokens, num_out) if last_chunk else 0) + page


def sgl_fits(need_tokens, rem_tokens):
    """``add_one_req``: a request is refused (NO_TOKEN) when what it needs reaches what is left."""
    return need_tokens < rem_tokens


def sgl_retract_first(out_c, prompt_c, out_b, prompt_b):
    """Whether running request c, later in the running order than b, is retracted before it
    (``_get_decode_retraction_order``, policy length: fewer output tokens first, then the longer
    prompt; on a tie the later one, as SGLang pops the end of its stably sorted batch)."""
    if out_c != out_b:
        return out_c < out_b
    return prompt_c >= prompt_b


SGL_UNCHUNKED = 1 << 40  # the prefill budget of SGLang with chunked prefill off (-1): never binds


def sgl_over_prefill_budget(chunk_budget, admitted, extend, rem_input):
    """With chunked prefill off, a request after the first of a prefill step is refused when its
    prompt reaches what is left of ``max_prefill_tokens`` (``add_one_req``; with chunking on, the
    chunk budget bounds the step instead)."""
    return chunk_budget >= SGL_UNCHUNKED and admitted > 0 and extend >= rem_input


def sgl_truncated(rem_chunk, num_computed, page):
    """Tokens of a prompt that crosses the chunk budget computed in this step: the budget left, cut
    so that the computed tokens end on a page (``add_one_req``)."""
    t = (rem_chunk // page) * page
    return ((t + num_computed) // page) * page - num_computed


def sgl_ratio_after_retract(sum_out, n_kept, sum_max_new):
    """The new-token ratio after a retraction, from the requests kept
    (``estimate_new_token_ratio_after_retract``)."""
    r = (sum_out + SGL_RETRACT_DECODE_STEPS * n_kept) / (sum_max_new + 1)
    return r if r < 1.0 else 1.0


def sgl_ratio_decayed(ratio, floor, decay):
    """The new-token ratio after a decode step that retracted nothing."""
    r = ratio - decay
    return r if r > floor else floor


def sgl_prompt_cacheable(num_tokens, num_out):
    """Tokens of a retracted request whose KV stays in the prefix cache: its prompt's (inserted into the
    radix tree when it was prefilled), not the tokens it decoded (released uncached)."""
    return num_tokens - num_out


# ---- SGLang's cache-aware schedule policies (srt/managers/schedule_policy.py: SchedulePolicy) -------
# Before each prefill step (``calc_priority``), lpm sorts the waiting queue by the tokens each request
# finds in the prefix cache, longest first; dfs-weight rebuilds it by a depth-first walk of the radix
# tree. Both first mark "in-batch" duplicates: a request that finds (almost) nothing cached but shares
# a prefix with a request ahead of it in the queue waits one round, so that the other's prefill caches
# the prefix for it.
SGL_ORDER_CODES = {"lpm": 1, "dfs-weight": 2}  # the policies that re-order (cfg: 0 for the others)
SGL_ORDER_LPM = 1
SGL_ORDER_DFS = 2
SGL_LPM_MAX_WAITING = 128  # _determine_active_policy: a longer queue is left in its order (fcfs)
SGL_IN_BATCH_CHECK = 32  # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD: cached tokens up to which it looks
SGL_IN_BATCH_DEPRIORITIZE = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD: shared tokens that defer
SGL_DEFERRED = 1 << 62  # lpm's key of a deferred request (``float("inf")``: behind every other)


def sgl_orders(policy, waiting, batch_full, chunking, running, max_running):
    """Whether SGLang re-orders its waiting queue of ``waiting`` requests before this step's prefill
    (``get_new_batch_prefill``: it returns first when the batch is full, or no request can join it,
    and no prompt is being chunked; lpm then orders a queue of at most ``SGL_LPM_MAX_WAITING``)."""
    if policy == 0 or waiting == 0:
        return False
    if not chunking and (batch_full or running >= max_running):
        return False
    return policy == SGL_ORDER_DFS or waiting <= SGL_LPM_MAX_WAITING


def sgl_shared_tokens(group, group_len, num_tokens):
    """Leading tokens a waiting request has in common with the others of its shared-prefix group, as
    SGLang's in-queue match sees them: its group's prefix, within its tokens less the last
    (``Req.adjust_max_prefix_ids``)."""
    if group < 0:
        return 0
    return group_len if group_len < num_tokens - 1 else num_tokens - 1


# Rows of the scratch the ordering works in (``sgl_waiting_order``: int64, a column per waiting request):
# what the caller fills in for each request in queue order, then the new order and the sort's own rows.
WO_HITS, WO_NGROUP, WO_GROUP, WO_SHARED, WO_ORDER, WO_TMP, WO_ROOT, WO_BRANCH, WO_DEPTH, WO_LIGHT, WO_FIRST = range(11)
N_WO = 11


def sgl_waiting_order(policy, w, n, block_size):
    """Order a waiting queue of ``n`` requests under a cache-aware policy: ``w[WO_ORDER, k]`` becomes
    the queue position of the k-th in the new order. Request i (column i, in queue order) finds
    ``w[WO_HITS, i]`` leading blocks in the prefix cache, of which its group's prefix spans
    ``w[WO_NGROUP, i]``; ``w[WO_GROUP, i]`` is its group (-1: none), ``w[WO_SHARED, i]`` its
    ``sgl_shared_tokens``.

    lpm (``_sort_by_longest_prefix``): most cached tokens first; a request deferred by the in-queue
    check last; ties in the queue's order. dfs-weight (``_sort_by_dfs_weight``): the radix tree walked
    depth first, each node's children heaviest first (a node's weight: the waiting requests whose
    match ends at or below it), each node's requests after its children's; a request that finds
    nothing cached ends at the root and comes last. The tree has a branch per group (its prefix, then
    each request's own tokens below it) and one per request whose cached tokens are its own alone;
    siblings of equal weight in the order of their first request in the queue (SGLang's: the order
    the branches entered the tree, which a simulator without token contents does not keep)."""
    for i in range(n):
        w[WO_ORDER, i] = i
    if policy == SGL_ORDER_LPM:
        k = 0  # groups entered in the in-queue tree by a request that can defer others: w[WO_TMP, :k]
        for i in range(n):
            cached = w[WO_HITS, i] * block_size
            w[WO_ROOT, i] = -cached  # lpm's key, in the row dfs-weight keeps its root mark in
            if cached > SGL_IN_BATCH_CHECK or w[WO_SHARED, i] < SGL_IN_BATCH_DEPRIORITIZE:
                continue
            deferred = False
            for j in range(k):
                if w[WO_TMP, j] == w[WO_GROUP, i]:
                    deferred = True
                    break
            if deferred:
                w[WO_ROOT, i] = SGL_DEFERRED
            else:
                w[WO_TMP, k] = w[WO_GROUP, i]
                k += 1
        _sort_stably(w, n, WO_ROOT)
        return
    for i in range(n):
        h, ng = w[WO_HITS, i], w[WO_NGROUP, i]
        w[WO_ROOT, i] = 1 if h == 0 else 0  # nothing cached: the root's own requests, last
        w[WO_DEPTH, i] = 0  # within a group's branch: its own tokens' leaves, then its prefix deepest first
        if h == 0:
            w[WO_BRANCH, i] = -1
        elif w[WO_GROUP, i] >= 0 and ng > 0:
            w[WO_BRANCH, i] = w[WO_GROUP, i]
            w[WO_DEPTH, i] = 0 if h > ng else ng - h + 1
        else:
            w[WO_BRANCH, i] = -2 - i
    _sort_stably(w, n, WO_BRANCH)  # the root's children: each one's requests together
    s = 0
    while s < n:
        e = s
        while e < n and w[WO_BRANCH, w[WO_ORDER, e]] == w[WO_BRANCH, w[WO_ORDER, s]]:
            e += 1
        for t in range(s, e):
            w[WO_LIGHT, w[WO_ORDER, t]] = s - e  # minus the branch's weight
            w[WO_FIRST, w[WO_ORDER, t]] = w[WO_ORDER, s]  # its first request in the queue
        s = e
    for i in range(n):
        w[WO_ORDER, i] = i
    _sort_stably(w, n, WO_DEPTH)
    _sort_stably(w, n, WO_FIRST)
    _sort_stably(w, n, WO_LIGHT)
    _sort_stably(w, n, WO_ROOT)


def _sort_stably(w, n, key):
    """``w[WO_ORDER, :n]`` sorted stably by ``w[key, position]`` (a merge sort through ``WO_TMP``)."""
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width if lo + width < n else n
            hi = lo + 2 * width if lo + 2 * width < n else n
            a, b, k = lo, mid, lo
            while a < mid and b < hi:
                if w[key, w[WO_ORDER, b]] < w[key, w[WO_ORDER, a]]:
                    w[WO_TMP, k] = w[WO_ORDER, b]
                    b += 1
                else:
                    w[WO_TMP, k] = w[WO_ORDER, a]
                    a += 1
                k += 1
            while a < mid:
                w[WO_TMP, k] = w[WO_ORDER, a]
                a += 1
                k += 1
            while b < hi:
                w[WO_TMP, k] = w[WO_ORDER, b]
                b += 1
                k += 1
            lo = hi
        for i in range(n):
            w[WO_ORDER, i] = w[WO_TMP, i]
        width *= 2
