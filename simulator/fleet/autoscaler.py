"""Autoscaling a fleet the way Kubernetes' Horizontal Pod Autoscaler (or KEDA through it) scales a
vLLM deployment on the engine's metrics (``cluster.autoscaler``).

Every ``interval_s`` (HPA's sync period) the autoscaler reads the metric of each serving replica
(``num_requests_running``, ``num_requests_waiting``, ``kv_cache_usage`` as vLLM's gauges show them
then; ``request_rate``: requests that reached the fleet over the last interval, per second) and
recommends ``ceil(sum over serving replicas / target)`` replicas, i.e. ``ceil(ready x average /
target)``, unless the average is within ``tolerance`` of the target (then: as many as now). The
recommendation is held within [min_replicas, max_replicas] and stabilised as HPA's behaviour
stabilises it: the fleet grows to the lowest recommendation of the last ``scale_up_delay_s`` and
shrinks to the highest of the last ``scale_down_delay_s``, and otherwise stays.

Replicas are counted as HPA counts pods: starting ones count, draining ones do not. A new replica
serves nothing for ``cold_start_s`` (a fresh engine: empty KV cache). Shrinking first cancels
replicas still starting (the newest first), then drains serving ones (the newest first): the
router sends them nothing more and they stop once their requests have ended. Not modelled: HPA's
scaling-rate policies (pods or percent per period), and a pod killed at the end of its grace period
with requests still running.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from simulator.engine.rules import RequestStatus, kv_usage

if TYPE_CHECKING:  # (the cluster is not imported: it imports this module)
    from simulator.scenario.config import AutoscalerConfig, Scenario

FLEET_COLUMNS = (
    "time",
    "serving",
    "starting",
    "draining",
    "metric",
    "recommended",
    "replicas",
    "arrivals_per_s",
    "kv_cache_usage",
)


def cold_start_s(cfg: AutoscalerConfig, weight_bytes: float) -> float:
    """Seconds from a scale-up until the new replica serves: ``cold_start_s``, or the engine's start
    plus reading the weights of one replica (all its GPUs read their shards at once)."""
    from simulator.scenario.config import ENGINE_START_S

    if cfg.cold_start_s is not None:
        return cfg.cold_start_s
    return ENGINE_START_S + weight_bytes / (cfg.weight_load_gbps * 1e9)


def observe(metric: str, replicas: list) -> float:
    """The metric summed over ``replicas`` (``request_rate`` is read from the fleet's count instead)."""
    total = 0.0
    for r in replicas:
        running, waiting, swapped, free = r.engine.queues()
        if metric == "num_requests_running":
            total += running
        elif metric == "num_requests_waiting":
            total += waiting + swapped
        else:
            total += kv_usage(free, r.engine.num_blocks)
    return total


def recommend(total: float, ready: int, current: int, target: float, tolerance: float) -> int:
    """HPA's replica count for a metric summing to ``total`` over ``ready`` serving replicas; with
    ``current`` replicas (serving and starting) now. No ready replica: no reading, no change."""
    if ready == 0:
        return current
    if abs(total / (ready * target) - 1.0) <= tolerance:
        return current
    return math.ceil(total / target - 1e-9)


class Autoscaler:
    """Resizes ``cluster`` every ``interval_s`` (see the module docstring); ``rows`` is fleet.csv."""

    def __init__(self, cluster, cfg: AutoscalerConfig, cold_s: float) -> None:  # a simulator.fleet.cluster.Cluster
        self.cl, self.cfg, self.cold_s = cluster, cfg, cold_s
        self.recs: deque[tuple[float, int]] = deque()  # (time, recommendation), the longest window's
        self.rows: list[tuple] = []
        self.scale_ups = self.scale_downs = 0
        self._arrived = 0  # the fleet's submissions when last read
        self.initial = list(cluster.replicas)
        self._record(float("nan"), float("nan"), len(cluster.serving()), 0.0)
        cluster.env.process(self._loop())

    def _loop(self):
        env = self.cl.env
        while True:
            yield env.timeout(self.cfg.interval_s)
            self.tick()

    def tick(self) -> None:
        cfg, cl, now = self.cfg, self.cl, self.cl.env.now
        serving, starting = cl.serving(), cl.starting()
        current = len(serving) + len(starting)
        arrived = len(cl.rep)
        rate = (arrived - self._arrived) / cfg.interval_s
        self._arrived = arrived
        total = rate if cfg.metric == "request_rate" else observe(cfg.metric, serving)
        assert cfg.target is not None  # checked with the scenario
        rec = min(max(recommend(total, len(serving), current, cfg.target, cfg.tolerance), cfg.min_replicas), cl.most)
        self.recs.append((now, rec))
        oldest = now - max(cfg.scale_up_delay_s, cfg.scale_down_delay_s)
        while self.recs[0][0] < oldest:
            self.recs.popleft()
        up = min(r for t, r in self.recs if t >= now - cfg.scale_up_delay_s)
        down = max(r for t, r in self.recs if t >= now - cfg.scale_down_delay_s)
        want = up if up > current else down if down < current else current
        if want > current:
            self.scale_ups += 1
            for _ in range(want - current):
                cl.start_replica(self.cold_s)
        elif want < current:
            self.scale_downs += 1
            for r in sorted(starting, key=lambda r: -r.index)[: current - want]:
                cl.cancel(r)
            for r in sorted(serving, key=lambda r: -r.index)[: max(current - want - len(starting), 0)]:
                cl.drain(r)
        usage_sum = total if cfg.metric == "kv_cache_usage" else observe("kv_cache_usage", serving)
        usage = usage_sum / len(serving) if serving else float("nan")
        self._record(total / len(serving) if serving else float("nan"), rate, rec, usage)

    def _record(self, metric: float, rate: float, rec: int, usage: float) -> None:
        cl = self.cl
        self.rows.append(
            (cl.env.now, len(cl.serving()), len(cl.starting()), len(cl.draining()), metric, rec, cl.size(), rate, usage)
        )

    def columns(self, sc: Scenario, requests: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """fleet.csv: one row per reading (and the start), after the resizing it led to; with an SLO,
        the share of the requests that arrived since the last row and finished that met it (NaN: none)."""
        arr = np.array(self.rows, np.float64).reshape(-1, len(FLEET_COLUMNS))
        out = {c: arr[:, i] for i, c in enumerate(FLEET_COLUMNS)}
        for c in ("serving", "starting", "draining", "recommended", "replicas"):
            out[c] = out[c].astype(np.int64)
        if requests is not None and sc.slo is not None:
            from simulator.metrics import meets_slo

            done = (
                requests["status"] == RequestStatus.FINISHED
            )  # as the summary's slo_attainment: of those that finished
            ok = meets_slo(requests, sc.slo)[done]
            t = out["time"]
            bins = np.searchsorted(t, requests["arrival"][done], side="left")  # row k covers (t[k-1], t[k]]
            n = np.bincount(bins, minlength=len(t) + 1)[: len(t)]
            good = np.bincount(bins, weights=ok.astype(np.float64), minlength=len(t) + 1)[: len(t)]
            with np.errstate(invalid="ignore", divide="ignore"):
                out["slo_attainment"] = np.where(n > 0, good / np.maximum(n, 1), np.nan)
        return out
