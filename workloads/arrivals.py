"""Arrival processes as SimPy processes: closed-loop clients and open-loop Poisson arrivals.

Each process asks ``factory`` for the next request's shape and hands it to ``engine.submit``.
Events are per request, never per token or per step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy


class Budget:
    """How many requests may still be submitted (None: unlimited)."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def closed_loop(
    env: simpy.Environment,
    submit: Callable,
    factory: Callable,
    concurrency: int,
    think_time_s: float,
    ramp_up_s: float,
    budget: Budget,
) -> None:
    """Start ``concurrency`` clients; each sends a request, waits for its end, thinks, repeats."""

    def client(cid: int):
        if ramp_up_s > 0:
            yield env.timeout(ramp_up_s * cid / concurrency)
        while budget.take():
            done = submit(*factory(), client=cid, want_event=True)
            yield done
            if think_time_s > 0:
                yield env.timeout(think_time_s)

    for cid in range(concurrency):
        env.process(client(cid))


def poisson(
    env: simpy.Environment,
    submit: Callable,
    factory: Callable,
    rate: float,
    rng: np.random.Generator,
    budget: Budget,
):
    """Open loop: exponential inter-arrival times with mean 1/rate."""
    gaps = rng.exponential(1.0 / rate, size=4096)
    i = 0
    while budget.take():
        if i == len(gaps):
            gaps = rng.exponential(1.0 / rate, size=4096)
            i = 0
        yield env.timeout(float(gaps[i]))
        i += 1
        submit(*factory())
