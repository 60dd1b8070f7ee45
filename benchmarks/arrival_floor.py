"""What the arrival side of a run costs on its own, whatever the engine does.

The closed-loop clients (SimPy processes, or callbacks on completion events for clients without
think time), the request records and the per-request events
are the part of a run that no faster engine can remove. This script runs a scenario's workload
against a stub engine that does no scheduling at all: every ``step_s`` seconds it finishes the
oldest requests in flight, at the rate the real run finished them, so the clients resubmit as
often as they do in the real run. What it takes is a floor under the whole run's wall time.

Defaults: the collapse case at concurrency 1,200 (27,012 requests finished in 8,162 engine steps
over 600 simulated seconds, as the real run does).

Run: python benchmarks/arrival_floor.py [--scenario PATH] [--requests N] [--steps N] [--repeat N]
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import simpy

from simulator.engine.requests import RequestTable
from simulator.scenario.config import load_scenario
from workloads.factory import start_workload

ROOT = Path(__file__).resolve().parents[1]


def floor(path: str, requests: int, steps: int) -> tuple[float, int, float]:
    """(wall seconds, requests submitted, simulated seconds) for the workload against the stub."""
    sc, _ = load_scenario(path)
    duration = sc.run.duration_s
    if duration is None:
        raise SystemExit(f"{path}: the floor is measured over run.duration_s, which this scenario leaves unset")
    env = simpy.Environment()
    reqs = RequestTable()
    in_flight: collections.deque = collections.deque()

    def submit(
        prompt_len,
        max_tokens,
        group=-1,
        group_len=0,
        priority=0,
        content_key=-1,
        client=-1,
        client_class=-1,
        want_event=False,
    ):
        reqs.add(
            env.now,
            prompt_len,
            max_tokens,
            priority=priority,
            group=group,
            group_len=group_len,
            content_key=content_key,
            client=client,
            client_class=client_class,
        )
        ev = env.event() if want_event else None
        in_flight.append(ev)
        return ev

    step_s = duration / steps
    per_step = requests / steps

    def engine():
        owed = 0.0
        while True:
            yield env.timeout(step_s)
            owed += per_step
            while owed >= 1 and in_flight:
                ev = in_flight.popleft()
                owed -= 1
                if ev is not None:
                    ev.succeed()

    env.process(engine())
    start_workload(env, submit, sc.workload, sc.run.seed, None, max_model_len=1 << 30)
    t0 = time.perf_counter()
    env.run(until=duration)
    return time.perf_counter() - t0, reqs.n, duration


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "collapse_c1200.yaml"))
    ap.add_argument("--requests", type=int, default=27_012, help="requests the real run finishes")
    ap.add_argument("--steps", type=int, default=8_162, help="engine steps the real run takes")
    ap.add_argument("--repeat", type=int, default=3, help="runs; the fastest is reported")
    a = ap.parse_args()
    best = min(floor(a.scenario, a.requests, a.steps) for _ in range(a.repeat))
    wall, n, sim = best
    print(
        f"{Path(a.scenario).name}: {n:,} requests submitted over {sim:g} simulated s against a stub engine: "
        f"{wall:.3f} s wall ({wall / n * 1e6:.1f} us a request); on its own that caps the run at "
        f"{sim / wall:,.0f}x real time"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
