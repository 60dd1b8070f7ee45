"""The cost vector: one slot per constant of the step's formula (``simulator.engine.cost``) and of
the host's CPU work (``simulator.engine.host``), each slot named once, here, by its position.

A vector holds the target model's constants, then (from ``DRAFT`` on) the draft model's, in the same
order: the drafter's passes are priced by the very functions that price the target's. The compiled
step reads it as ``st.cp`` (``simulator.engine.compiled.layout`` appends its own slots after
``N_COST``).
"""

from __future__ import annotations

from enum import IntEnum


class P(IntEnum):
    """Slots of the cost vector, in order (a member's value is its position)."""

    FIXED_S = 0  # per step: step overhead + per-layer small kernels
    PER_SEQ_S = 1
    PER_TOKEN_S = 2
    LIN_PARAMS = 3  # dense linear-layer parameters per GPU (every token passes through them)
    MATMUL_FLOPS = 4
    WEIGHT_BYTES = 5
    ACT_BYTES_PER_TOKEN = 6
    MATMUL_BW = 7
    ATTN_FLOPS_PER_PAIR = 8
    ATTN_FLOPS = 9
    KV_BYTES_PER_TOKEN = 10
    ATTN_BW = 11
    LM_FLOPS = 12
    LM_BYTES = 13
    MOE_LAYERS = 14
    EXPERTS_PER_TOKEN = 15
    NUM_EXPERTS = 16
    EXPERT_PARAMS = 17
    SHARED_PARAMS = 18
    ALLREDUCE_COUNT = 19
    ALLREDUCE_BYTES_PER_TOKEN = 20
    INTERCONNECT_BW = 21
    ALLREDUCE_LATENCY_S = 22
    HOST_BW = 23
    GRAPH_MAX = 24
    GRAPH_BY16 = 25
    FULL_DECODE_GRAPHS = 26
    PAD = 27  # CUDA graphs (Execution)
    EAGER_FLOOR_S = 28
    PIECEWISE_FLOOR_S = 29  # launch floors of a step without graphs, with piecewise graphs
    ENGINE_STEP_S = 30
    ENGINE_PER_SEQ_S = 31
    ENGINE_PER_TOKEN_S = 32
    ASYNC_SCHEDULING = 33
    FE_ON = 34
    FE_REQUEST_S = 35
    FE_PROMPT_TOKEN_S = 36
    FE_STEP_S = 37
    FE_TOKEN_S = 38
    FE_LATENCY_S = 39  # API server (simulator.engine.host)
    MOE_FLOPS = 40
    MOE_BW = 41  # rates the fused-MoE kernels reach
    FE_FINISH_S = 42
    FE_FIRST_PASS = 43
    MIXED_ROWS = 44  # extra query rows per one-token request in a step with a prefill chunk
    SPEC_TOKENS = 45  # speculative decoding: drafts proposed per request (0: off)
    SPEC_HOST_SEQ_S = 46  # the drafter's host time per request it proposes for (n-gram lookup)
    DRAFT_MODEL = 47  # 1: a draft model (its constants follow at DRAFT) runs the drafter's passes
    DRAFT_PASS_S = 48  # the host's time per drafter pass (preparing its inputs, sampling its token)
    LORA_FIXED_S = 49  # multi-LoRA: the LoRA kernels' launch-bound time per step with adapters in use
    LORA_FLOPS_PER_TOKEN = 50  # their FLOPs per token (shrink and expand at max_lora_rank)
    LORA_BYTES_PER_ADAPTER = 51  # the weights of one adapter in use, read each step
    LORA_LOAD_S = 52  # an adapter put into a GPU slot
    LORA_DISK_LOAD_S = 53  # an adapter read from storage into host memory
    FE_PACE = 54  # 1: the engine waits for its front-end (simulator.engine.host.step_start)
    FE_ROUNDS = 55  # rounds of its API server's streams a closed-loop request waits (host.turnaround)
    EXPERT_WEIGHT_BYTES = 56  # bytes per weight of the expert matrices (WEIGHT_BYTES: the dense linears')
    WINDOW = 57  # sliding window of a hybrid model's sliding-window layers, tokens (0: none)
    WINDOW_KV_BYTES_PER_TOKEN = 58  # KV bytes per token of those layers (KV_BYTES_PER_TOKEN: the others')
    WINDOW_FLOPS_PER_PAIR = 59  # their attention FLOPs per query-key pair (ATTN_FLOPS_PER_PAIR: the others')
    FE_TOKEN_GROWTH = 60  # a streamed token's cost grows by this share per token of its batch (host.tokens_streamed_s)
    PREFILL_GRAPH_MAX = 61  # largest step with a prefill run from piecewise graphs, tokens (GRAPH_MAX for vLLM)
    ROOFLINE_BLEND = 62  # compute and memory times combined: a norm's exponent (cost.roofline; 0: the max)
    EXPERT_RANKS = 63  # expert parallelism: the groups of GPUs the experts are dealt to (1: split by TP)
    EXPERT_RANKS_MAX_Z = 64  # the expected largest of that many standard normals (cost.moe_work's busiest rank)
    GRAPH_EACH = 65  # CUDA graphs captured for every step size up to this one (0: 1, 2, 4, then by 8)
    JIT_SHAPE_S = (
        66  # the engine core's time compiling kernels for a step shape it has not run (0: none; cost.shape_key)
    )
    JIT_VARIANT_S = 67  # its time compiling an expert-matmul kernel variant no step has run (cost.matmul_variant)
    EAGER_SEQ_S = 68  # a step without graphs: the host's launch time per request it runs (cost.launch_s)
    LAUNCH_SERIAL = (
        69  # 1: with async scheduling a step's launches follow the engine core's CPU work (host.step_wall_s)
    )


PARAMS = tuple(p.name.lower() for p in P)  # the slots' names, in order (``CostModel`` fills them by name)
DRAFT = len(P)  # where the draft model's constants start
N_COST = 2 * DRAFT
