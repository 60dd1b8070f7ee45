"""Factories for tests: a tiny simulation with a hand-sized pool and a constant step cost, on either
engine step (the readable reference or the compiled production step)."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import pytest
import simpy
from hypothesis import settings

from simulator.engine.compiled import layout as L
from simulator.engine.compiled.engine import CompiledEngine
from simulator.engine.cost import ConstantCost
from simulator.engine.events import step_records
from simulator.engine.reference.engine import ReferenceEngine
from simulator.engine.requests import RequestTable
from simulator.engine.rules import SchedulerConfig
from simulator.engine.submission import Submission

# CI explores the same examples every run (reproducible results); locally Hypothesis keeps exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ENGINES = {"reference": ReferenceEngine, "compiled": CompiledEngine}


@pytest.fixture(params=list(ENGINES))
def engine(request) -> str:
    """Run the test on each engine step."""
    return request.param


class Sim:
    """A simulation driven by an explicit request list: (arrival_s, prompt_len, max_tokens[, group, group_len
    [, priority]]) on one engine step, every step costing ``step_s`` (plus swap traffic at ``swap_bw`` bytes/s).

    ``steps``: one ``simulator.engine.events.StepRecord`` per step (what it scheduled, preempted, admitted...).
    """

    def __init__(
        self,
        requests,
        num_gpu_blocks: int = 11,
        engine: str = "reference",
        step_s: float = 1.0,
        swap_bw: float = 1000.0,
        max_model_len=10**6,
        **overrides,
    ):
        cfg = replace(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8, block_size=4), **overrides)
        self.env = simpy.Environment()
        self.engine = ENGINES[engine](
            self.env,
            cfg,
            num_gpu_blocks,
            ConstantCost(step_s, swap_bw),
            RequestTable(8),
            max_model_len=max_model_len,
            trace=2,
        )
        if engine == "reference":  # the pool's invariants after every step's scheduling
            sched = self.engine.sched
            schedule = sched.schedule

            def checked(now):
                plan = schedule(now)
                sched.pool.check()
                return plan

            sched.schedule = checked
        self.env.process(self._arrivals(sorted(requests, key=lambda r: r[0])))

    def _arrivals(self, requests):
        for r in requests:
            t = r[0]
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            extra = {"group": r[3], "group_len": r[4]} if len(r) > 3 else {}
            if len(r) > 5:
                extra["priority"] = r[5]
            self.engine.submit(Submission(r[1], r[2], **extra))

    def run(self, until=None):
        self.env.run(until=until)
        self.engine.finish_run()
        if isinstance(self.engine, CompiledEngine):
            check_compiled_state(self.engine)
        self.steps = step_records(self.engine.trace_events(), self.engine.log.columns())
        return self

    @property
    def reqs(self):
        return self.engine.reqs

    def free_blocks(self) -> int:
        return self.engine.queues()[3]


def check_compiled_state(eng: CompiledEngine) -> None:
    """Invariants of the compiled step's block pool: a block is in the free queue exactly when nobody
    holds it, the free count matches, every running request's table holds its blocks, and the
    reference counts equal the number of tables holding each block."""
    st = eng.st
    ctl, blocks = st.ctl, st.blocks
    ref = blocks[:, L.B_REF]
    assert (ref >= 0).all()
    h, t = int(ctl[L.Q_HEAD]), int(ctl[L.Q_TAIL])
    q = st.queue[:, h:t]
    valid = (ref[q[0]] == 0) & (blocks[q[0], L.B_SERIAL] == q[1])
    assert int(valid.sum()) == int(ctl[L.FREE]) == int((ref == 0).sum())
    assert len(set(q[0][valid].tolist())) == int(valid.sum())  # no block queued twice
    held = np.zeros(len(blocks), np.int64)
    for s in range(int(ctl[L.END])):
        if st.slots[s, L.S_RID] >= 0:
            row, n = st.slots[s, L.S_ROW], st.slots[s, L.S_NBLK]
            np.add.at(held, st.tables[row, :n], 1)
    assert (held == ref).all()
