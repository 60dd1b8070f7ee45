"""Wire a validated scenario into a simulation and run it."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import simpy

from simulator import resolve
from simulator.engine.core import Engine
from simulator.engine.requests import RequestTable
from simulator.engine.rules import SchedulerConfig
from simulator.scenario.config import Scenario, run_duration
from simulator.scenario.hardware import GPU
from simulator.scenario.memory import MemoryPlan
from simulator.scenario.models import ModelArch
from simulator.size import RunSize, check_size, run_size
from workloads.factory import Ids

if TYPE_CHECKING:
    from simulator.progress import RunProgress


@dataclass
class Result:
    scenario: Scenario
    model: ModelArch
    gpu: GPU
    memory: MemoryPlan
    sched_cfg: SchedulerConfig
    reqs: RequestTable
    engine: Engine
    end_time: float
    wall_s: float
    workload_counts: Ids  # what the workload did (requests truncated or drawn again to fit max_model_len)
    size: RunSize  # what it was estimated to hold before it ran
    stopped_by: str  # "duration" (run.duration_s or the default length), or "requests done"

    def replica_results(self) -> list[Result]:
        """One Result per replica of a fleet's run (for per-replica summaries); [] for one engine."""
        return [
            Result(
                scenario=r.scenario,
                engine=r.engine,
                end_time=self.end_time,
                wall_s=self.wall_s,
                stopped_by=self.stopped_by,
                workload_counts=self.workload_counts,
                size=self.size,
                **r.parts,
            )
            for r in getattr(self.engine, "replicas", [])
        ]


def build(sc: Scenario, trace: int = 0) -> tuple[simpy.Environment, Engine, dict]:
    """The simulation of ``sc``, ready to run (``trace``: the request events the engine records). A
    scenario with ``cluster`` or ``disaggregation`` builds its replicas and router
    (``simulator.fleet.cluster``), which stand in for the engine."""
    size = run_size(sc)  # before anything is built: a fleet too large for memory is never built
    check_size(sc, size)
    if sc.cluster is not None or sc.disaggregation is not None:
        from simulator.fleet.cluster import build_cluster

        return build_cluster(sc, trace, size)
    env = simpy.Environment()
    engine, parts = resolve.build_engine(env, sc, trace)
    ids = Ids()
    engine.expected = resolve.start_clients(env, engine, sc, ids)
    if engine.expected is not None and run_duration(sc) is None:
        parts["reqs"].reserve(engine.expected)  # every one of them will arrive: allocate the records once
    return env, engine, {**parts, "workload_counts": ids, "size": size}


_RAN = False  # whether this process has simulated before (see simulate)


def simulate(sc: Scenario, trace: int = 0, progress: bool = False) -> Result:
    """Run ``sc``. ``progress``: show a progress bar on the terminal if the run takes a while."""
    t0 = time.perf_counter()
    env, engine, parts = build(sc, trace)
    until = run_duration(sc)
    if progress:
        from simulator.progress import RunProgress

        engine.progress = RunProgress(sc.name, until, engine.expected)
    # Everything alive now (imported libraries, the engine's state) lives through the run: keep
    # the cyclic garbage collector from re-scanning it at every full collection the run triggers.
    # First collect what earlier runs in this process left (a sweep or plan worker runs many):
    # unfrozen, their cycles sit in the oldest generation, which is seldom collected, and a
    # worker's memory would grow by megabytes a run. A process's first run has nothing to collect.
    global _RAN
    if _RAN:
        gc.collect()
    _RAN = True
    gc.freeze()
    try:
        if engine.expected is not None:
            stop = engine.all_done if until is None else (engine.all_done | env.timeout(until))
            env.run(until=stop)
        else:
            env.run(until=until)
    finally:
        engine.finish_run()
        gc.unfreeze()
        if engine.progress is not None:
            cast("RunProgress", engine.progress).close()  # the bar set above (a fleet's is the bar itself)
    done = engine.expected is not None and engine.all_done.triggered
    return Result(
        scenario=sc,
        engine=engine,
        end_time=env.now,
        wall_s=time.perf_counter() - t0,
        stopped_by="requests done" if done else "duration",
        **parts,
    )
