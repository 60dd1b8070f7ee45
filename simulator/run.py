"""Wire a validated scenario into a simulation and run it."""

from __future__ import annotations

import functools
import gc
import math
import time
from dataclasses import dataclass
from pathlib import Path
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


# ---- the band across hosts -------------------------------------------------------------------------
# The headline figures a scenario that names no host reports at the slowest and fastest catalog host
# (simulator.scenario.hosts): how much the answer moves with a CPU the scenario does not say.
BAND_METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "p99_tpot_ms", "p99_ttft_ms")
# servesim's own error given the host, which the band adds to the spread across hosts: per metric, a
# quantile of |ln(servesim / server)| over the recorded calibration runs, each on its own host
# (tools/validation/band_coverage.py --fit --write).
MARGIN_FILE = Path(__file__).resolve().parent / "data" / "band_margin.yaml"
MARGIN_QUANTILE = 0.8


@functools.lru_cache(maxsize=1)
def _margin_data() -> dict:
    from simulator.scenario import yamlio

    return (yamlio.load(MARGIN_FILE.read_text()) if MARGIN_FILE.is_file() else None) or {}


def band_margin() -> dict[str, float]:
    """Per metric, how far (in |ln|) the band reaches beyond the hosts' own figures."""
    return {m: float(v) for m, v in (_margin_data().get("margin") or {}).items() if m in BAND_METRICS}


def band_quantile() -> float:
    """The share of the calibration runs whose miss the margin covers (the file's quantile)."""
    return float(_margin_data().get("quantile", MARGIN_QUANTILE))


def widen(on_hosts: dict) -> dict:
    """The band as reported: each metric's range across the hosts (``on_hosts``: {metric: [low, high]})
    widened by servesim's own error (``band_margin``), low times e^-margin and high times e^margin,
    with both beside it: ``on_hosts``, and ``margin`` as a fraction of the figure (e^margin - 1)."""
    margin = band_margin()
    out: dict = {}
    for m, (lo, hi) in on_hosts.items():
        k = margin.get(m, 0.0)
        out[m] = [lo * math.exp(-k), hi * math.exp(k)]
    out["on_hosts"] = {m: list(v) for m, v in on_hosts.items()}
    out["margin"] = {m: round(math.expm1(margin[m]), 4) for m in on_hosts if m in margin}
    return out


def band_basis(band: dict) -> str:
    """What a band spans, as the lines that print it say: "across the catalog's hosts and servesim's own
    error", or, a named host's, "on probe 4.6 us and servesim's own error given the host"."""
    if band.get("named"):
        return f"on {band['hosts'][0]} and servesim's own error given the host"
    return "across the catalog's hosts and servesim's own error"


def band_text(band: dict) -> str:
    """The headline figures of a host band as a reader takes them in: "out tok/s 13,624-17,334, TPOT
    p50 ...", each range low to high, a metric the runs did not give left out."""
    parts = [
        f"{label} {fmt.format(band[k][0])}-{fmt.format(band[k][1])}{unit}"
        for k, label, fmt, unit in (
            ("output_throughput", "out tok/s", "{:,.0f}", ""),
            ("median_tpot_ms", "TPOT p50", "{:,.1f}", " ms"),
            ("median_ttft_ms", "TTFT p50", "{:,.0f}", " ms"),
        )
        if band.get(k)
    ]
    return ", ".join(parts)


def on_band_hosts(sc: Scenario) -> list[Scenario]:
    """``sc`` on the slowest and on the fastest catalog host, whatever host it names."""
    from dataclasses import replace

    from simulator.scenario.hosts import band_hosts

    return [replace(sc, hardware=replace(sc.hardware, host=h.name)) for h in band_hosts()]


def band_scenarios(sc: Scenario) -> list[Scenario]:
    """``sc`` on the slowest and on the fastest catalog host, when it names no host ([] when it does,
    or when ``run.host_band`` is off)."""
    if sc.hardware.host is not None or not sc.run.host_band:
        return []
    return on_band_hosts(sc)


def host_label(host: str | dict) -> str:
    """A named host as a reader knows it: the catalog host's name, or "probe 4.6 us"."""
    if isinstance(host, dict):
        return f"probe {float(host['probe_us']):g} us"
    return str(host)


def _band_point(sc: Scenario) -> dict:
    from simulator.metrics import summarize

    s = summarize(simulate(sc))
    return {m: s.get(m) for m in BAND_METRICS}


class HostBand:
    """The range a real server's figures should fall in. A scenario that names no host: its two runs
    on the slowest and fastest catalog host, started beside the scenario's own (one process each,
    forked, so they cost the run's wall time next to nothing where the machine has a core for them),
    or, ``serial``, run one after the other when ``result`` asks (a sweep's point, in a worker that
    has no core to spare); ``result`` gathers them: ``{metric: [low, high]}`` over the slowest host,
    the fastest and the run itself, widened by servesim's own error, and which hosts. A scenario that
    names its host: no run beyond its own; the band is its own figures widened by servesim's own
    error given the host (``named``; ``hosts`` names it alone)."""

    def __init__(self, sc: Scenario, serial: bool = False) -> None:
        self.scenarios = band_scenarios(sc)
        self.named = host_label(sc.hardware.host) if sc.hardware.host is not None and sc.run.host_band else None
        self._serial = serial and bool(self.scenarios)
        self._pool = None
        self._jobs: list = []
        if self.scenarios and not serial:
            import multiprocessing

            self._pool = multiprocessing.get_context("fork").Pool(len(self.scenarios))
            self._jobs = [self._pool.apply_async(_band_point, (s,)) for s in self.scenarios]

    def result(self, own: dict) -> dict | None:
        """The band, once both runs are done (None: no band was asked for, or a run of it failed)."""
        if self.named is not None:
            out = widen({m: [own[m], own[m]] for m in BAND_METRICS if own.get(m) is not None})
            out["hosts"], out["named"] = [self.named], True
            return out
        if not self._serial and self._pool is None:
            return None
        try:
            points = [_band_point(s) for s in self.scenarios] if self._serial else [j.get() for j in self._jobs]
        except Exception:  # the run itself stands; only its band is missing
            return None
        finally:
            self.close()
        on_hosts: dict = {}
        for m in BAND_METRICS:
            values = [v for v in [own.get(m), *(p.get(m) for p in points)] if v is not None]
            if values:
                on_hosts[m] = [min(values), max(values)]
        out = widen(on_hosts)
        out["hosts"], out["named"] = [s.hardware.host for s in self.scenarios], False
        return out

    def close(self) -> None:
        """Stop the band's runs if they are still going (the run itself failed), and reap them."""
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None
