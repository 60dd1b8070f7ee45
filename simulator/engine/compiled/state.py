"""The compiled step's state: the arrays of ``layout.State`` for a new engine, and a small example of
every array type (what the compiler is given)."""

from __future__ import annotations

import numpy as np

from simulator.engine import host_tier
from simulator.engine.compiled import layout as L
from simulator.engine.cost import new_shapes
from simulator.engine.requests import RequestTable
from simulator.engine.rules import N_WORK, SGL_ORDER_CODES, SchedulerConfig
from simulator.engine.step_log import StepLog
from simulator.scenario.limits import SPEC_MAX_TOKENS


def new_state(
    cfg: SchedulerConfig,
    num_blocks: int,
    cp: np.ndarray,
    reqs: RequestTable,
    log: StepLog,
    max_steps: int,
    stall_steps: int,
    trace: int = 0,
    longest: int = 1 << 62,
) -> L.State:
    """The state of an engine with ``num_blocks`` usable blocks and nothing submitted yet
    (``trace``: the ``cfg[TRACE]`` level of request events to record)."""
    n = num_blocks
    seats = cfg.max_num_seqs + 1
    ctl = np.zeros(L.N_CTL, np.int64)
    conf = np.zeros(L.N_CFG, np.int64)
    conf[L.MAX_SEQS] = cfg.max_num_seqs
    conf[L.BUDGET] = cfg.max_num_batched_tokens
    conf[L.BS] = cfg.block_size
    conf[L.CACHING] = cfg.enable_prefix_caching
    conf[L.THR] = cfg.long_prefill_token_threshold
    conf[L.FULL_PROMPT] = cfg.admission == "full_prompt"
    conf[L.PRIORITY] = {"fcfs": 0, "lpm": 0, "dfs-weight": 0, "priority": 1, "lof": 2}[cfg.policy]
    conf[L.SWAP] = cfg.preemption_mode == "swap"
    conf[L.SWAP_SPACE] = cfg.swap_space_blocks
    conf[L.ABORT_ON_FULL] = cfg.on_swap_full == "abort"
    conf[L.CACHE_FINISHED] = cfg.cache_finished_content
    conf[L.OUTPUTS_LATE] = cfg.outputs_late
    conf[L.STAGE_CAP] = log._STAGE
    conf[L.MAX_STEPS] = max_steps
    conf[L.STALL_STEPS] = stall_steps
    conf[L.TRACE] = trace
    conf[L.SPEC_K] = cfg.spec_tokens
    conf[L.SPEC_LOOK] = cfg.spec_lookahead
    conf[L.SPEC_SEED] = cfg.spec_seed
    conf[L.SPEC_SLOTS] = cfg.spec_draft_slots
    conf[L.MAX_LORAS] = cfg.max_loras
    conf[L.LONGEST] = longest
    conf[L.SGLANG] = cfg.framework == "sglang"
    conf[L.SGL_PREFILL] = cfg.sgl_prefill_tokens
    conf[L.SGL_PAGE] = cfg.sgl_page
    conf[L.SGL_ORDER] = SGL_ORDER_CODES.get(cfg.policy, 0)
    fctl = np.zeros(L.N_FCTL)
    fctl[L.SGL_RATIO], fctl[L.SGL_R0] = cfg.sgl_ratio[0], cfg.sgl_ratio[0]
    fctl[L.SGL_RMIN], fctl[L.SGL_RDECAY] = cfg.sgl_ratio[1], cfg.sgl_ratio[2]
    ctl[L.SGL_CHUNKED] = -1
    at_least = np.zeros(SPEC_MAX_TOKENS)
    at_least[: len(cfg.spec_accept_at_least)] = cfg.spec_accept_at_least
    ctl[L.STOP_AFTER] = -1
    blocks = np.full((n, L.N_B), -1, np.int32)
    blocks[:, L.B_REF] = 0
    blocks[:, L.B_SERIAL] = 0
    cap = max(4 * n, 64)
    queue = np.zeros((2, cap), np.int32)
    h = (cap - n) // 2
    queue[0, h : h + n] = np.arange(n)
    ctl[L.Q_HEAD], ctl[L.Q_TAIL], ctl[L.FREE] = h, h + n, n
    ctl[L.ROWS_FREE] = seats
    req_extra = np.full((len(reqs.status), L.N_X), -1, np.int64)
    req_extra[:, L.X_SWAPPED] = 0
    host_ctl = np.zeros(host_tier.N_HC, np.int64)
    host_ctl[host_tier.HC_CAP] = cfg.host_blocks
    host_ctl[host_tier.HC_LRU] = host_ctl[host_tier.HC_MRU] = -1
    T = reqs.tables
    wcap = 2 * seats + 64
    return L.State(
        ctl=ctl,
        fctl=fctl,
        cfg=conf,
        cp=np.concatenate([cp, [cfg.block_bytes], at_least]),
        req_i64=T[np.int64],
        req_f64=T[np.float64],
        req_i32=T[np.int32],
        status=reqs.status,
        req_extra=req_extra,
        groups=np.full((8, 2), -1, np.int64),
        blocks=blocks,
        queue=queue,
        tables=np.zeros((seats, 16), np.int32),
        rows=np.arange(seats, dtype=np.int32),
        # Twice the seats: ended requests leave holes until a quarter of the slots are holes.
        slots=np.zeros((2 * seats, L.N_S), np.int64),
        slot_time=np.zeros(2 * seats),
        # Slot marks, 64 to a word: explicit slots, then a bucket per step for the lazy ones.
        bits=np.zeros((1 + cfg.block_size + 2, (2 * seats + 63) // 64), np.uint64),
        wq=np.zeros(wcap, np.int64),
        wk=np.zeros((wcap, 2), np.int64),
        wa=np.zeros(wcap),
        wo=np.zeros((L.N_WO_ROWS, wcap if cfg.policy in SGL_ORDER_CODES else 1), np.int64),
        swq=np.zeros(seats, np.int64),
        stage=log._stage,
        hist=log.itl_hist,
        fin=np.zeros(2 * seats, np.int64),  # ended in one call (one step's with waiters, two at most)
        ab=np.zeros(seats, np.int64),
        ended=np.zeros((seats, L.N_E), np.int64),
        trace=np.zeros((64 * seats if trace else 1, 4)),
        buf=np.zeros((2, n), np.int64),
        hits=np.zeros(n + 1, np.int64),
        work=np.zeros(N_WORK, np.int64),
        lora_gpu=np.full((2, max(cfg.max_loras, 1)), -1, np.int64),
        lora_cpu=np.full((2, max(cfg.max_cpu_loras, 1)), -1, np.int64),
        lora_running=np.zeros(1, np.int64),
        host_own=np.full((len(reqs.status), host_tier.N_H), -1, np.int64),
        host_grp=np.full((8, host_tier.N_H), -1, np.int64),
        host_ctl=host_ctl,
        iq=np.zeros((64, 3)),
        iqr=np.zeros(64, np.int64),
        rq=np.zeros(64),
        rqr=np.zeros(64, np.int64),
        pd=np.zeros(1),
        pdr=np.zeros((1, 2), np.int64),
        shp=np.zeros((1, L.N_SH), np.int64),
        shapes=new_shapes(cp, cfg),
    )


def example_state() -> L.State:
    """A small state with every array of the types the engine uses (what the compiler is given)."""
    return new_state(SchedulerConfig(max_num_seqs=4), 8, np.zeros(L.N_COST), RequestTable(4), StepLog(8), 10, 10)
