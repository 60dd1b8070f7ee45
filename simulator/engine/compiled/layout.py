"""The compiled step's state: named numpy arrays, and what each slot and column of them holds.

Everything the step reads or writes is one ``State`` (a named tuple of arrays, so the compiled
functions take one argument and name what they touch: ``st.blocks[b, B_REF]``). Scalars live in
``st.ctl`` (int64) and ``st.fctl`` (float64) at the slots below; the scheduler's knobs in
``st.cfg``, the cost model's constants in ``st.cp`` (``simulator.engine.params.P`` order). Column
indices into the request records are derived from ``simulator.engine.requests.ROW_LAYOUT`` and the
step-log stage rows from ``simulator.engine.step_log``, so the layouts are stated once.

This module imports no numba: the engine builds and grows the state in plain Python.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from simulator.engine.params import N_COST
from simulator.engine.requests import ROW_LAYOUT
from simulator.engine.rules import ITL_BINS, N_WO
from simulator.engine.step_log import STAGE_ROWS
from simulator.scenario.limits import SPEC_MAX_TOKENS

State = namedtuple(
    "State",
    [
        "ctl",
        "fctl",
        "cfg",
        "cp",  # scalars, knobs, cost constants
        "req_i64",
        "req_f64",
        "req_i32",
        "status",  # the request records (views of RequestTable's tables) and status
        "req_extra",  # per request: its prefix-cache key, swapped blocks, heap key; per key: its indexed blocks
        "groups",  # per shared-prefix group: its indexed blocks
        "blocks",  # per block: reference count, free-queue serial, cached content, index links
        "queue",  # the free queue: (block, serial) entries between Q_HEAD and Q_TAIL
        "tables",
        "rows",  # block tables (a row per running request) and the free rows
        "slots",
        "slot_time",
        "bits",  # running slots and their marks (see lazy.py)
        "wq",
        "wk",
        "wa",  # waiting queue: a heap of requests and their keys
        "wo",  # scratch for re-ordering it (rules.sgl_waiting_order's rows, then the requests: WO_RID)
        "swq",  # swapped requests: a ring, in the order they went out
        "stage",
        "hist",
        "fin",
        "ab",  # step-log rows, ITL histogram, ended requests to notify, aborted this step
        "ended",  # requests ended at the last update that still hold their places (cfg OUTPUTS_LATE): E_* columns
        "trace",  # request events (time, kind, request, value) when cfg[TRACE] asks for them
        "buf",
        "hits",
        "work",  # scratch: a released table's blocks, a lookup's hits, a step's work (rules.N_WORK)
        "lora_gpu",
        "lora_cpu",  # LoRA adapters in GPU slots and in host memory (rows: adapter, last use)
        "lora_running",  # running requests per LoRA adapter
        "host_own",
        "host_grp",
        "host_ctl",  # KV offloading's host tier (simulator.engine.host_tier): per own-content key, per group, scalars
        "iq",
        "iqr",  # the API server's intake (intake.py): pieces waiting, a heap of (ready, work, rest) and their requests
        "rq",
        "rqr",  # requests on their way to the engine: a ring of (time they reach it, request), in that order
        "pd",
        "pdr",  # closed-loop clients to tell (clients.py): when each ended request reaches its client; (request, batch)
        "shp",  # their next requests' shapes, drawn ahead: rows of SH_* columns
        "shapes",  # per expert-matmul variant, then per compile key of a step without graphs: 1 once compiled (cost.new_shapes)
    ],
)

# ---- ctl: int64 scalars ----------------------------------------------------------------------------
(
    N_RUN,  # running requests (the live slots among the first END)
    FREE,  # free blocks
    Q_HEAD,
    Q_TAIL,  # free queue: valid entries between Q_HEAD and Q_TAIL of ``queue``
    STAMP,  # serial of the latest release
    STEPS,  # engine steps scheduled
    IDLE,  # steps in a row without a token computed for the first time
    PENDING,  # 1: the last scheduled step's outcome is not applied yet
    STAGE_N,  # rows in the step-log stage
    ROWS,  # step-log rows completed (= updates applied)
    ITL_N,  # inter-token gaps counted into the histogram
    FIN_N,  # requests ended since the call started (in ``fin`` when someone listens)
    AB_N,  # aborted by the step in flight (notified with its outcome)
    STALLED,  # 1: the step in flight computes no new token
    ROWS_FREE,  # block-table rows not in use: the first ROWS_FREE entries of ``rows``
    END,  # slots in use: the running requests, in order, and holes left by ended ones
    LAZY,  # lazy running slots (see lazy.py)
    LAZY_SUM,  # their tokens computed at S_G0, minus S_G0, summed
    IN_NEXT,
    IN_END,  # requests from IN_NEXT to IN_END (set by the caller) are new: their intake starts
    WQ_LEN,  # waiting requests (heap entries)
    SEQ_BACK,
    SEQ_FRONT,  # heap insertion counters (FCFS: back pushes count up, front pushes down)
    SW_HEAD,
    SW_LEN,  # swapped ring
    SWAP_USED,  # host blocks in use
    PREEMPTED,  # preemptions in the step being scheduled
    TRACE_N,  # rows in ``trace``
    STOP_AFTER,  # report ended requests as soon as this many have ended in the call (the run's end; -1: none)
    N_SAMPLED,  # requests the step in flight samples a token for
    SPEC_N,  # speculative decoding: verifications with drafts, drafts verified, drafts accepted
    SPEC_DRAFTS,
    SPEC_ACC,
    LORA_ACTIVE,  # multi-LoRA: adapters the running requests use
    LORA_LOADS,  # adapters put into GPU slots, and read from storage, over the run
    LORA_DISK_LOADS,
    LORA_STEP_LOADS,  # the same in the step being scheduled
    LORA_STEP_DISK,
    IQ_N,  # pieces of intake waiting (heap entries of iq)
    RQ_HEAD,
    RQ_LEN,  # requests on their way to the engine (ring rq)
    ARRIVED,  # requests that reached the engine
    SGL_FULL,  # SGLang: 1 once admission stopped on the KV budget or the request cap (reset as the batch shrinks)
    SGL_CHUNKED,  # SGLang: the request whose prompt is being chunked (-1: none)
    REQ_N,  # closed-loop clients run here (clients.py): requests recorded, rows the records have room for
    REQ_CAP,
    PD_N,  # ended requests whose clients are still to be told (pd, pdr), and the batch they end in now
    PD_SEQ,
    SH_NEXT,  # the next shape to use, and the end of those drawn (shp)
    SH_END,
    DONE_TOLD,  # requests ended whose clients have been told (the engine's num_done)
    SENT,  # requests the clients sent from here
    REJ_K,  # rejections told in a row at one time (fctl[REJ_T]), and the last one's request
    REJ_RID,
    JIT_N,  # steps that waited while the engine core compiled kernels they ran first (cost.first_compile)
    ENDED_N,  # rows of ``ended`` in use
    SPEC_POS,  # SPEC_MAX_TOKENS slots from here: drafts accepted at each position
) = range(57)
N_CTL = SPEC_POS + SPEC_MAX_TOKENS

# ---- fctl: float64 scalars -------------------------------------------------------------------------
(
    T_NOW,  # the call's start (now)
    T_PEEK,  # the next SimPy event: steps must start before it
    T_RET,  # the time the call's return code refers to
    T_LAST,  # when the latest update's tokens reached their clients (its time, without a front-end)
    SWAP_BYTES,  # swap traffic of the step being scheduled
    FE_FREE,  # the API server's outputs (simulator.engine.host) are busy until this time
    FE_INTAKE,  # the latest piece of intake ends at this time (outputs wait for it)
    FE_BATCH,  # the last batch of outputs queued starts at this time (intake waits for the batch in progress)
    T_WAKE,  # an idle engine's next look: when the API server's intake next moves (inf: nothing in it)
    FE_TURN,  # the API server, waiting for its outputs, turns to its intake again at this time
    SGL_RATIO,  # SGLang: the new-token ratio, its start, floor and decay per decode step
    SGL_R0,
    SGL_RMIN,
    SGL_RDECAY,
    REJ_T,  # closed-loop clients run here: the time of the rejections told in a row (ctl[REJ_K])
    JIT_S,  # seconds the steps of ctl[JIT_N] waited for their kernels (cost.first_compile)
    N_FCTL,
) = range(17)

# ---- cfg: int64 knobs ------------------------------------------------------------------------------
# PRIORITY: 0 FCFS (and SGLang's lpm and dfs-weight, re-ordered before a prefill), 1 priority, 2 longest output first (SGLang's lof). WAITERS: 1 when ended requests must be reported at their time (someone waits for them); TRACE: 0 none, 1 request events, 2 also every scheduled request's
# tokens each step.
(
    MAX_SEQS,
    BUDGET,
    BS,
    CACHING,
    THR,
    FULL_PROMPT,
    PRIORITY,
    SWAP,
    SWAP_SPACE,
    ABORT_ON_FULL,
    CACHE_FINISHED,
    STAGE_CAP,
    WAITERS,
    MAX_STEPS,
    STALL_STEPS,
    TRACE,
    SPEC_K,  # speculative decoding: drafts proposed per request (0: off), KV slots kept ahead, seed,
    SPEC_LOOK,
    SPEC_SEED,
    SPEC_SLOTS,  # and budget tokens each scheduled request leaves to a draft model (rules.room)
    MAX_LORAS,  # multi-LoRA: adapters a step may serve (0: off)
    LONGEST,  # the longest prompt + max_tokens accepted: a longer request is rejected when it reaches the engine
    SGLANG,  # 1: SGLang's scheduling (compiled/sglang.py), with its max_prefill_tokens and page size
    SGL_PREFILL,
    SGL_PAGE,
    SGL_ORDER,  # SGLang's cache-aware policy re-ordering the waiting queue (rules.SGL_ORDER_CODES; 0: none)
    CLOOP,  # 1: the engine runs the turns of closed-loop clients CL_BASE to CL_BASE + CL_N - 1 (clients.py)
    CL_BASE,
    CL_N,
    LIVELOCK_AT,  # rejections told in a row at one time that stop the run (core.REJECT_LIVELOCK)
    OUTPUTS_LATE,  # 1: a step is scheduled before the last one's outputs are in (rules.seats_taken, rules.known_tokens)
    N_CFG,
) = range(32)

# cp: the cost model's parameters (the target's, then the draft model's: params.N_COST), the KV bytes
# of one block (swap traffic), then P(at least i + 1 drafts accepted) for each draft position.
C_BLOCK_BYTES = N_COST
C_AT_LEAST = N_COST + 1
N_CP = C_AT_LEAST + SPEC_MAX_TOKENS

# ---- the request records' columns (RequestTable.tables, row-major per dtype) -----------------------
# Column prefixes name the array: I_ req_i64, F_ req_f64, I32_ req_i32; X_ req_extra, B_ blocks, S_ slots.
_I, _F, _P = ROW_LAYOUT[np.int64], ROW_LAYOUT[np.float64], ROW_LAYOUT[np.int32]
(
    I_NTOK,
    I_NCOMP,
    I_NOUT,
    I_MAXT,
    I_HWM,
    I_NBLK,
    I_CACHED,
    I_RECOMP,
    I_GROUP,
    I_GLEN,
    I_EXTERNAL,
    I_LORA,
    I_HOST_CACHED,
    I_PROMPT,
    I_CKEY,
    I_CLIENT,
    I_CLASS,
) = (
    _I.index(c)
    for c in (
        "num_tokens",
        "num_computed",
        "num_out",
        "max_tokens",
        "computed_hwm",
        "num_blocks",
        "cached_tokens",
        "recomputed",
        "group",
        "group_len",
        "external",
        "lora",
        "host_cached_tokens",
        "prompt_len",
        "content_key",
        "client",
        "client_class",
    )
)
F_FSCHED, F_FTOK, F_LTOK, F_FIN, F_ARR, F_SWAPPED, F_READY = (
    _F.index(c) for c in ("first_scheduled", "first_token", "last_token", "finish", "arrival", "swapped_bytes", "ready")
)
I32_PREEMPT, I32_PRIO = (_P.index(c) for c in ("preemptions", "priority"))

# ---- req_extra: per request (and, for prefix-cache keys, per key: a key is the id of its first request) ----
X_KEY, X_SWAPPED, X_OHEAD, X_OTAIL, N_X = range(5)

# ---- shp: a closed-loop client's next request, drawn ahead (clients.py) ------------------------------------
# Its fields as ``submission.RequestRow`` gives them, and what drawing it added to the workload's counts of
# requests truncated and drawn again to fit max_model_len (taken back for those never sent).
SH_PROMPT, SH_MAXT, SH_GROUP, SH_GLEN, SH_PRIO, SH_CLASS, SH_LORA, SH_TRUNC, SH_RESAMPLED, N_SH = range(10)

# ---- blocks: per block ------------------------------------------------------------------------------------
# A block is in the free queue exactly when nobody holds it (ref 0), at the entry whose serial is its
# own. Cached content: B_KEY >= 0 is an own-content key, B_KEY <= -2 is shared-prefix group -2 - B_KEY,
# -1 is none; B_COL its block index; B_NEXT / B_PREV link the copies cached under the same key in the
# order they were cached.
B_REF, B_SERIAL, B_KEY, B_COL, B_NEXT, B_PREV, N_B = range(7)

# ---- slots: running slots (the running list in order, with the fields every step touches) -----------
# S_A: tokens this step; S_G0, S_EVT: a lazy slot's update and due step (-1: explicit); S_ROW: its
# block table's row; S_SPEC: the draft tokens it holds (speculative decoding); S_THEN, S_HASHABLE: at
# its last scheduling, the tokens it had and those whose blocks were hashed (rules.cacheable). An ended
# or preempted request's slot is a hole (S_RID -1) until slots close up.
(S_RID, S_NTOK, S_NCOMP, S_NOUT, S_MAXT, S_NBLK, S_HWM, S_A, S_G0, S_EVT, S_ROW, S_SPEC, S_THEN, S_HASHABLE, N_S) = (
    range(15)
)

# ---- ended: requests ended at the last update still holding their places (cfg OUTPUTS_LATE), in the order
# they ended: the request, its block table's row, its blocks, and those of them hashed (pool.release_table).
E_RID, E_ROW, E_NBLK, E_NFULL, N_E = range(5)

# ---- stage: one step-log row per column (simulator.engine.step_log.STAGE_ROWS) ----------------------------
(
    L_START,
    L_DURATION,
    L_RUNNING,
    L_WAITING,
    L_SWAPPED,
    L_FREE,
    L_SEQS,
    L_PREFILL,
    L_DECODE,
    L_RECOMPUTED,
    L_PREEMPTIONS,
    L_GENERATED,
    L_FINISHED,
    L_SPEC_N,
    L_SPEC_DRAFTS,
    L_SPEC_ACC,
) = (
    STAGE_ROWS.index(c)
    for c in (
        "start",
        "duration",
        "num_running",
        "num_waiting",
        "num_swapped",
        "num_free_blocks",
        "num_seqs",
        "prefill_tokens",
        "decode_tokens",
        "recomputed_tokens",
        "num_preemptions",
        "num_generated",
        "num_finished",
        "spec_drafts",
        "spec_draft_tokens",
        "spec_accepted_tokens",
    )
)

# ---- what ``advance`` returns --------------------------------------------------------------------------
STEPPED = (
    0  # a step is under way until fctl[T_RET]: report what ended before it (ctl[FIN_N]), yield until then, call again
)
IDLE_NOW = 1  # nothing to run from fctl[T_RET] on: wait for a submission, or until fctl[T_WAKE]
NOTIFY = 2  # requests ended at fctl[T_RET] (``fin``): report them, then call again to schedule on
UNSTAGE = 3  # the step-log stage is full: move it out, call again
UNTRACE = 4  # the trace has no room for another step: drain it, call again
MAX_STEPS_HIT = 5
STALL = 6
PACED = 7  # the next step waits for the front-end until fctl[T_RET]: report what ended (ctl[FIN_N]), yield, call again
REFILL = 8  # closed-loop clients to tell at fctl[T_RET], with too few shapes or request rows left: add some, call again
LIVELOCK = 9  # ctl[REJ_K] rejections told in a row at one time, the last ctl[REJ_RID]: stop the run

HIST_LEN = ITL_BINS + 2
WO_RID = N_WO  # the row of ``wo`` that holds the waiting requests while they are re-ordered
N_WO_ROWS = N_WO + 1
