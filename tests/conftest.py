"""Factories for tests: a scheduler with a hand-sized pool, and a tiny simulation with a constant step cost."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import simpy
from hypothesis import settings

from simulator.block_pool import BlockPool
from simulator.cost import StepWork
from simulator.engine import Engine
from simulator.kv_cache import KVCacheManager
from simulator.requests import RequestTable
from simulator.scheduler import Scheduler, SchedulerConfig

# CI explores the same examples every run (reproducible results); locally Hypothesis keeps exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@dataclass(frozen=True)
class ConstantCost:
    """Every step costs ``step_s`` plus swap traffic at ``swap_bw`` bytes/s."""

    step_s: float = 1.0
    swap_bw: float = 1000.0

    def step_time(self, w: StepWork) -> float:
        return self.step_s + w.swap_bytes / self.swap_bw


def make_scheduler(num_gpu_blocks: int = 11, **overrides) -> Scheduler:
    cfg = replace(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8, block_size=4), **overrides)
    reqs = RequestTable(capacity=8)
    kv = KVCacheManager(BlockPool(num_gpu_blocks), cfg.block_size, cfg.enable_prefix_caching)
    return Scheduler(cfg, reqs, kv)


class Sim:
    """A simulation driven by an explicit request list: (arrival_s, prompt_len, max_tokens[, group, group_len])."""

    def __init__(self, requests, num_gpu_blocks: int = 11, cost=None, check=True, max_model_len=10**6, **overrides):
        self.sched = make_scheduler(num_gpu_blocks, **overrides)
        self.env = simpy.Environment()
        self.plans = []
        self.check = check
        self.engine = Engine(
            self.env,
            self.sched,
            cost or ConstantCost(),
            self.sched.reqs,
            max_model_len=max_model_len,
            max_blocks_per_request=self.sched.pool.num_blocks,
        )
        self._wrap()
        self.env.process(self._arrivals(sorted(requests, key=lambda r: r[0])))

    def _wrap(self):
        sched, plans = self.sched, self.plans
        orig = sched.schedule

        def schedule(now):
            plan = orig(now)
            plans.append(plan)
            if self.check:
                sched.pool.check()
            return plan

        sched.schedule = schedule

    def _arrivals(self, requests):
        for r in requests:
            t = r[0]
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            extra = {"group": r[3], "group_len": r[4]} if len(r) > 3 else {}
            self.engine.submit(r[1], r[2], **extra)

    def run(self, until=None):
        self.env.run(until=until)
        return self

    @property
    def reqs(self):
        return self.sched.reqs
