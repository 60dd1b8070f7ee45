"""Multi-LoRA in the compiled step (reference: ``Scheduler._start``, ``_lora_stop``): running
requests per adapter, the adapters in use, and the GPU slots and host memory they are loaded into
(``rules.lora_cache_use``), counted per step for its cost and over the run."""

from __future__ import annotations

from simulator.engine.compiled.layout import (
    I_LORA,
    LORA_ACTIVE,
    LORA_DISK_LOADS,
    LORA_LOADS,
    LORA_STEP_DISK,
    LORA_STEP_LOADS,
    MAX_LORAS,
    STEPS,
)
from simulator.engine.rules import lora_cache_use

COLD = ()  # not inlined (see build.py)


def lora_start(st, rid):
    """``rid`` starts running: its adapter has one more user, and is loaded where it is not."""
    a = st.req_i64[rid, I_LORA]
    if a < 0 or st.cfg[MAX_LORAS] == 0:
        return
    ctl, run = st.ctl, st.lora_running
    if run[a] == 0:
        ctl[LORA_ACTIVE] += 1
    run[a] += 1
    disk = lora_cache_use(st.lora_cpu, a, ctl[STEPS], run)  # from storage, then into a slot
    slot = lora_cache_use(st.lora_gpu, a, ctl[STEPS], run)
    ctl[LORA_STEP_DISK] += disk
    ctl[LORA_DISK_LOADS] += disk
    ctl[LORA_STEP_LOADS] += slot
    ctl[LORA_LOADS] += slot


def lora_stop(st, rid):
    """``rid`` stops running (finished, preempted): its adapter has one user fewer."""
    a = st.req_i64[rid, I_LORA]
    if a < 0 or st.cfg[MAX_LORAS] == 0:
        return
    st.lora_running[a] -= 1
    if st.lora_running[a] == 0:
        st.ctl[LORA_ACTIVE] -= 1


def lora_users(st, rid):
    """Running requests that use the adapter ``rid`` asks for (0 for the base model)."""
    a = st.req_i64[rid, I_LORA]
    return st.lora_running[a] if a >= 0 else 0
