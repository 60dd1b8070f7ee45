"""Turn the ``workload:`` section into SimPy processes that submit requests to an engine."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy

from workloads.arrivals import Budget, closed_loop, poisson
from workloads.config import WorkloadConfig
from workloads.lengths import LengthSampler


class RequestFactory:
    """Draws each new request's prompt length, output length and shared-prefix group."""

    def __init__(self, w: WorkloadConfig, seed: int) -> None:
        ss = np.random.SeedSequence(seed)
        r_prompt, r_out, r_prefix, self.arrival_rng = (np.random.default_rng(s) for s in ss.spawn(4))
        self.prompt = LengthSampler(w.prompt_tokens, r_prompt)
        self.output = LengthSampler(w.output_tokens, r_out)
        self.prefix = w.shared_prefix
        self.prefix_rng = r_prefix

    def __call__(self) -> tuple[int, int, int, int]:
        p, o = self.prompt(), self.output()
        sp = self.prefix
        if sp is not None and (sp.fraction >= 1.0 or self.prefix_rng.random() < sp.fraction):
            g = int(self.prefix_rng.integers(sp.num_groups)) if sp.num_groups > 1 else 0
            return p + sp.tokens, o, g, sp.tokens
        return p, o, -1, 0


def start_workload(
    env: simpy.Environment, submit: Callable, w: WorkloadConfig, seed: int, num_requests: int | None
) -> int | None:
    """Start the arrival processes. Returns how many requests will be submitted (None: unbounded)."""
    factory = RequestFactory(w, seed)
    budget = Budget(num_requests)
    a = w.arrival
    if a.type == "closed_loop":
        closed_loop(env, submit, factory, a.concurrency, a.think_time_s, a.ramp_up_s, budget)
    else:
        env.process(poisson(env, submit, factory, a.rate, factory.arrival_rng, budget))
    return num_requests
