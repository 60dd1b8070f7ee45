"""Fleets: several replicas behind a router, and prefill/decode disaggregation.

Each replica is a whole engine of its own (``resolve.build_engine``: its step, KV pool, cost model and
front-end) as a SimPy process in the shared environment; the workload submits to the ``Cluster``,
which asks its ``Router`` (``simulator.fleet.router``) for a replica and submits there. With
``disaggregation``, a request is first prefilled on a prefill replica (its prompt and one token),
its KV cache then crosses the prefill replica's link to the decode side (``transfer_s``: bytes of
the prompt's KV on one GPU over the link's bandwidth, plus its latency, one transfer at a time per
link), and it decodes on a decode replica, which allocates blocks for the transferred prompt at
admission (``Engine.submit(external=...)``) and computes only its last token before sampling. The
client's first token and finish come from the decode replica.

The ``Cluster`` stands in for the engine in ``run.simulate`` and in the metrics: it counts what is
done, merges the replicas' request records (one row per client request, with the replica that
served it) and step logs (summed throughput and counters, KV usage per replica), so the summary has
the keys of a single run plus ``replicas``, one summary per replica.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import zip_longest
from typing import Any, cast

import numpy as np
import simpy

from simulator import resolve
from simulator.engine.core import Engine
from simulator.engine.rules import RequestStatus
from simulator.engine.step_log import BinnedStepLog, WindowTotals
from simulator.engine.submission import Submission
from simulator.errors import ConfigError
from simulator.scenario.config import EngineConfig, HardwareConfig, ReplicaGroup, Scenario
from simulator.scenario.fields import build
from simulator.scenario.hardware import hourly_price


def replica_scenario(sc: Scenario, group: ReplicaGroup) -> Scenario:
    """The scenario one replica of ``group`` runs: the scenario's hardware and engine with the
    group's fields on top."""
    hw = sc.hardware if group.hardware is None else build(HardwareConfig, {**asdict(sc.hardware), **group.hardware})
    eng = sc.engine if group.engine is None else build(EngineConfig, dict(group.engine), base=sc.engine)
    return replace(sc, hardware=hw, engine=eng, cluster=None, disaggregation=None)


def _groups(sc: Scenario) -> list[tuple[str, Scenario, str, int]]:
    """(role, scenario, where it is defined, count) of every replica group, in order."""
    from simulator.scenario.config import replica_groups

    if sc.disaggregation is None:
        assert sc.cluster is not None  # a fleet: cluster or disaggregation is set (run.build)
        parts = [("both", sc.cluster.replicas, "cluster.replicas")]
    else:
        d = sc.disaggregation
        parts = [("prefill", d.prefill, "disaggregation.prefill"), ("decode", d.decode, "disaggregation.decode")]
    out = []
    for role, raw, path in parts:
        for i, g in enumerate(replica_groups(raw, path)):
            where = f"{path}[{i}]" if isinstance(raw, (list, tuple)) else path
            out.append((role, replica_scenario(sc, g), where, g.count))
    return out


def replica_groups_of(sc: Scenario) -> list[tuple[Scenario, int, str]]:
    """(scenario, count, where it is defined) of each replica group: what a fleet is made of,
    without a replica built (the size guard reads it)."""
    return [(rsc, count, where) for _, rsc, where, count in _groups(sc)]


def replica_plan(sc: Scenario) -> list[tuple[str, Scenario, str]]:
    """(role, scenario, where its group is defined) of every replica, in order: co-located
    replicas, or prefill then decode."""
    return [(role, rsc, where) for role, rsc, where, count in _groups(sc) for _ in range(count)]


@dataclass
class Replica:
    index: int
    role: str
    scenario: Scenario
    engine: Engine
    parts: dict
    in_flight: int = 0  # requests the router sent here that have not ended
    on_end: object = field(default=None, repr=False)  # callback of the requests it serves for the cluster
    # An autoscaled fleet's replicas come and go (simulator.fleet.autoscaler): starting (cold), serving,
    # draining (finishing its requests, sent no more) or stopped; from ``born`` (when it was asked
    # for: a GPU is paid from then) until ``gone``.
    state: str = "serving"
    born: float = 0.0
    gone: float = math.inf

    @property
    def gpus(self) -> int:
        return self.scenario.hardware.tensor_parallel_size

    @property
    def label(self) -> str:
        hw = self.scenario.hardware
        tp = f" x{hw.tensor_parallel_size}" if hw.tensor_parallel_size > 1 else ""
        role = "" if self.role == "both" else f" {self.role}"
        return f"replica {self.index}{role} ({self.parts['gpu'].key}{tp})"


def transfer_s(kv_bytes_per_token_per_gpu: float, tokens: int, bandwidth_gbps: float, latency_ms: float) -> float:
    """Seconds to move ``tokens`` tokens of KV from a prefill replica to a decode replica: each GPU
    sends its own shard over its own link (the same on every GPU), plus the transfer's latency."""
    return latency_ms / 1e3 + tokens * kv_bytes_per_token_per_gpu / (bandwidth_gbps * 1e9 / 8)


class Cluster:
    """Replicas behind a router; stands in for the engine of a single run (see the module docstring)."""

    def __init__(self, env: simpy.Environment, sc: Scenario, trace: int = 0) -> None:
        from simulator.fleet.router import Router

        self.env, self.scenario = env, sc
        self.replicas: list[Replica] = []
        for i, (role, rsc, where) in enumerate(replica_plan(sc)):
            try:
                engine, parts = resolve.build_engine(env, rsc, trace)
            except ConfigError as e:  # a group's own hardware or engine: say which group
                raise ConfigError(f"{where}: {e}" if where.endswith("]") else str(e)) from None
            r = Replica(i, role, rsc, engine, parts)
            r.on_end = functools.partial(self._replica_ended, r)
            self.replicas.append(r)
        self.disaggregated = sc.disaggregation is not None
        # Replicas whose steps can reach no other replica run ahead of each other (simtime.horizon):
        # not when a request's end leads to a submission (a client's next request, a session's next
        # turn, a disaggregated request's decode part).
        from workloads.factory import completion_driven

        if not self.disaggregated and not completion_driven(sc.workload):
            for r in self.replicas:
                r.engine.independent = True
        cfg = sc.cluster
        both = [r for r in self.replicas if r.role == "both"]
        if self.disaggregated:
            pre = [r for r in self.replicas if r.role == "prefill"]
            dec = [r for r in self.replicas if r.role == "decode"]
            self.router = Router(env, pre, cfg, sc.run.seed)
            self.decode_router = Router(env, dec, cfg, sc.run.seed + 1)
            assert sc.disaggregation is not None  # self.disaggregated
            kv = sc.disaggregation.kv_transfer
            self.links = {r.index: simpy.Resource(env, capacity=1) for r in pre}
            self._kv_link = (kv.bandwidth_gbps, kv.latency_ms)
        else:
            self.router = Router(env, both, cfg, sc.run.seed)
        self.max_model_len = min(r.engine.max_model_len for r in self.replicas)
        self._merged = MergedRequests(self)
        # Per client request (by its id here): where it went.
        self.rep: list[int] = []  # the replica (prefill replica) of each
        self.rid: list[int] = []  # its id there
        self._client_end: dict[int, float] = {}  # client -> when its last request ended (host.turnaround)
        self.dec_rep: list[int] = []  # disaggregated: its decode replica and id there, -1 until then
        self.dec_rid: list[int] = []
        self.moved: list[list[float]] = []  # disaggregated: its transfer's start and end
        self.expected: int | None = None
        self.num_done = 0
        self.all_done = env.event()
        self._progress = None
        self._trace = trace
        self.most = len(self.replicas) if cfg is None else cfg.max_replicas
        self.autoscaler = None
        if cfg is not None and cfg.autoscaler is not None:
            from simulator.fleet.autoscaler import Autoscaler, cold_start_s

            r0 = self.replicas[0]
            weights = r0.parts["memory"].weight_bytes * r0.gpus
            self.autoscaler = Autoscaler(self, cfg.autoscaler, cold_start_s(cfg.autoscaler, weights))
            self.router.set_replicas(self.serving())

    @property
    def progress(self):
        return self._progress

    @progress.setter
    def progress(self, bar) -> None:
        """A progress bar (``simulator.progress``) that every replica moves, with the fleet's count."""
        self._progress = bar
        for r in self.replicas:
            self._show_progress(r)

    def _show_progress(self, r: Replica) -> None:
        bar = self._progress
        # cast: Engine.progress is inferred None-typed (simulator/engine/core.py)
        r.engine.progress = None if bar is None else cast(Any, lambda t, _n: bar(t, self.num_done))

    # ---- an autoscaled fleet's replicas (simulator.fleet.autoscaler) -----------------------------------
    def serving(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "serving"]

    def starting(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "starting"]

    def draining(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "draining"]

    def size(self) -> int:
        """Replicas as the autoscaler counts them: starting and serving."""
        return sum(1 for r in self.replicas if r.state in ("starting", "serving"))

    def start_replica(self, cold_s: float) -> Replica:
        """A new replica (a fresh engine) that serves once ``cold_s`` seconds have passed."""

        first = self.replicas[0]
        engine, parts = resolve.build_engine(self.env, first.scenario, self._trace)
        engine.independent = first.engine.independent
        r = Replica(len(self.replicas), first.role, first.scenario, engine, parts, state="starting", born=self.env.now)
        r.on_end = functools.partial(self._replica_ended, r)
        self.replicas.append(r)
        self._show_progress(r)
        self.env.process(self._warm_up(r, cold_s))
        return r

    def _warm_up(self, r: Replica, cold_s: float):
        yield self.env.timeout(cold_s)
        if r.state == "starting":
            r.state = "serving"
            self.router.set_replicas(self.serving())

    def cancel(self, r: Replica) -> None:
        """Give up a replica still starting."""
        self._stop(r)

    def drain(self, r: Replica) -> None:
        """Send ``r`` nothing more; it stops once its requests have ended."""
        r.state = "draining"
        self.router.set_replicas(self.serving())
        if r.in_flight == 0:
            self._stop(r)

    def _stop(self, r: Replica) -> None:
        r.state, r.gone = "stopped", self.env.now

    def gpu_hours(self, end: float) -> list[float]:
        """Per replica: GPU-hours it held until ``end``, from when it was asked for."""
        return [(min(r.gone, end) - min(r.born, end)) * r.gpus / 3600.0 for r in self.replicas]

    def fleet_summary(self, end: float) -> dict:
        """GPU-hours and their cost (US dollars: ``hardware.price_per_hour`` or the catalogue's; null
        where a GPU has no price) until ``end``; an autoscaled fleet's resizing too."""
        hours = self.gpu_hours(end)
        prices = [hourly_price(r.scenario.hardware.price_per_hour, r.parts["gpu"]) for r in self.replicas]
        priced = [p for p in prices if p is not None]
        out: dict = {
            "gpu_hours": sum(hours),
            "cost_usd": sum(h * p for h, p in zip(hours, priced)) if len(priced) == len(prices) else None,
        }
        a = self.autoscaler
        if a is not None:
            serving = np.array([row[1] for row in a.rows], np.float64)
            out["autoscaler"] = {
                "cold_start_s": a.cold_s,
                "scale_ups": a.scale_ups,
                "scale_downs": a.scale_downs,
                "replicas_started": len(self.replicas) - len(a.initial),
                "serving_min": int(serving.min()),
                "serving_max": int(serving.max()),
                "serving_mean": float(serving.mean()),
            }
        return out

    # ---- the engine interface the workload and the run use -------------------------------------
    def submit(self, s: Submission, want_event: bool = False):
        """A client's request, routed to a replica now (disaggregated: its prefill part; the decode
        part follows once its KV has moved). The replica takes it in after the turnaround of the
        client's previous request, wherever that ran (``host.turnaround``)."""
        gid = len(self.rep)
        r = self.router.pick(s.prompt_len, s.group, s.group_len, s.content_key)
        r.in_flight += 1
        previous_end = self._client_end.get(s.client) if s.client >= 0 else None
        if not self.disaggregated:
            # The replica's own completion event is the client's: the cluster's bookkeeping runs first.
            ev = r.engine.submit(s, True, previous_end)
            self.rep.append(r.index)
            self.rid.append(r.engine.reqs.n - 1)
            ev.callbacks.append(r.on_end)
            return ev
        done = simpy.Event(self.env) if want_event else None
        # The prefill part: the prompt and one token.
        ev = r.engine.submit(s._replace(max_tokens=1), True, previous_end)
        self.rep.append(r.index)
        self.rid.append(r.engine.reqs.n - 1)
        self.dec_rep.append(-1)
        self.dec_rid.append(-1)
        self.moved.append([np.nan, np.nan])
        ev.callbacks.append(lambda e, gid=gid, r=r: self._prefilled(gid, r, s, done))
        return done

    def _client_ended(self, client: int) -> None:
        if client >= 0:
            self._client_end[client] = self.env.now

    def _ended(self, gid: int, r: Replica, done, client: int = -1) -> None:
        r.in_flight -= 1
        self._client_ended(client)
        self._count_done(1)
        if done is not None:
            done.succeed(gid)

    def _replica_ended(self, r: Replica, event) -> None:
        self._ended(-1, r, None, int(r.engine.reqs.client[event.value]))
        if r.state == "draining" and r.in_flight == 0:
            self._stop(r)

    def _prefilled(self, gid: int, r: Replica, s: Submission, done) -> None:
        """The prefill part ended: if it was rejected the request ends; else its KV moves on."""
        r.in_flight -= 1
        rid = self.rid[gid]
        if r.engine.reqs.status[rid] != RequestStatus.FINISHED:
            self._client_ended(s.client)
            self._count_done(1)
            if done is not None:
                done.succeed(gid)
            return
        self.env.process(self._transfer(gid, r, s, done))

    def _transfer(self, gid: int, r: Replica, s: Submission, done):
        link = self.links[r.index]
        with link.request() as slot:
            yield slot
            moved = self.moved[gid]
            moved[0] = self.env.now
            bw, lat = self._kv_link
            yield self.env.timeout(transfer_s(r.parts["memory"].kv_bytes_per_token, s.prompt_len, bw, lat))
            moved[1] = self.env.now
        d = self.decode_router.pick(s.prompt_len, s.group, s.group_len, s.content_key)
        d.in_flight += 1
        # The decode part: its prompt's KV came with it; the fleet hands it on, so no client's
        # turnaround delays it (a previous end infinitely long ago).
        ev = d.engine.submit(s._replace(external=s.prompt_len - 1, sent=None), True, -math.inf)
        self.dec_rep[gid], self.dec_rid[gid] = d.index, d.engine.reqs.n - 1
        ev.callbacks.append(lambda e: self._ended(gid, d, done, s.client))

    # the fleet counts what ended as one engine does
    _count_done = cast("Callable[[Cluster, int], None]", Engine._count_done)

    def finish_run(self) -> None:
        for r in self.replicas:
            r.engine.finish_run()
        self._merged.cache = None  # the records are final now: merge them once, when first asked

    # ---- merged views for the metrics ------------------------------------------------------------
    @property
    def reject_reasons(self) -> dict[int, str]:
        """Why requests were rejected, by client request id."""
        if not any(r.engine.reject_reasons for r in self.replicas):
            return {}
        out = {}
        for gid, (i, rid) in enumerate(zip(self.rep, self.rid)):
            reason = self.replicas[i].engine.reject_reasons.get(rid)
            if reason is None and self.disaggregated and self.dec_rep[gid] >= 0:
                reason = self.replicas[self.dec_rep[gid]].engine.reject_reasons.get(self.dec_rid[gid])
            if reason is not None:
                out[gid] = reason
        return out

    @property
    def num_gpu_blocks(self) -> int:
        return sum(r.engine.num_gpu_blocks for r in self.replicas)

    @property
    def kv_cache_tokens(self) -> int:
        """Tokens the fleet's KV pools hold."""
        return sum(r.engine.kv_cache_tokens for r in self.replicas)

    @property
    def num_steps(self) -> int:
        return sum(r.engine.num_steps for r in self.replicas)

    def lora_counts(self) -> list[int]:
        """The replicas' LoRA adapter loads, summed."""
        return [sum(c) for c in zip(*(r.engine.lora_counts() for r in self.replicas))]

    def jit_counts(self) -> tuple[int, float]:
        """The replicas' steps that waited for kernels compiled for their shape, and the seconds, summed."""
        counts = [r.engine.jit_counts() for r in self.replicas]
        return sum(n for n, _ in counts), sum(s for _, s in counts)

    def host_counts(self) -> list[int]:
        """The replicas' KV-offloading loads and writes (blocks), summed."""
        return [sum(c) for c in zip(*(r.engine.host_counts() for r in self.replicas))]

    def spec_counts(self) -> list[int]:
        """The replicas' speculative-decoding counters, summed (position by position: replica groups
        may propose different numbers of drafts)."""
        return [sum(c) for c in zip_longest(*(r.engine.spec_counts() for r in self.replicas), fillvalue=0)]

    @property
    def log(self) -> ClusterLog:
        serving = [r for r in self.replicas if r.role != "prefill"]
        return ClusterLog(
            [r.engine.log for r in self.replicas],
            [r.engine.log for r in serving],
            [r.index for r in self.replicas],
            [(r.born, r.gone) for r in self.replicas],
        )

    def merged_requests(self) -> MergedRequests:
        return self._merged


class ClusterLog:
    """The replicas' step logs seen as one: counters summed, KV usage averaged over replicas (each
    weighted by how long it lived in the window: equally in a fixed fleet; peak: the highest),
    inter-token latency from the serving replicas' histograms together."""

    def __init__(self, logs: list, serving: list, indices: list[int], alive: list[tuple[float, float]]) -> None:
        self.logs, self.serving, self.indices, self.alive = logs, serving, indices, alive
        self.bin_s = logs[0].bin_s if isinstance(logs[0], BinnedStepLog) else None

    def window(self, t0: float, t1: float) -> WindowTotals:
        ws = [log.window(t0, t1) for log in self.logs]
        gen = sum(w.num_generated for log, w in zip(self.logs, ws) if any(log is s for s in self.serving))
        return WindowTotals(
            num_generated=int(gen),
            num_preemptions=sum(w.num_preemptions for w in ws),
            recomputed_tokens=sum(w.recomputed_tokens for w in ws),
            kv_usage_mean=_alive_mean([w.kv_usage_mean for w in ws], self.alive, t0, t1),
            kv_usage_max=float(max(w.kv_usage_max for w in ws)),
        )

    @property
    def itl_count(self) -> int:
        return sum(log.itl_count for log in self.serving)

    def itl_quantile(self, q: float) -> float:
        from simulator.engine.step_log import itl_bin_value

        n = self.itl_count
        if n == 0:
            return float("nan")
        hist = np.sum([log.itl_hist for log in self.serving], axis=0)
        return float(itl_bin_value(int(np.searchsorted(np.cumsum(hist), q * n, side="left"))))

    def columns(self) -> dict[str, np.ndarray]:
        """steps.csv of the cluster: every replica's rows, with its index first."""
        parts = [log.columns() for log in self.logs]
        out = {"replica": np.concatenate([np.full(len(p["start"]), i, np.int64) for i, p in zip(self.indices, parts)])}
        for c in parts[0]:
            out[c] = np.concatenate([p[c] for p in parts])
        return out


def _alive_mean(values: list[float], alive: list[tuple[float, float]], t0: float, t1: float) -> float:
    """The mean of the replicas' ``values``, each weighted by how long it lived in [t0, t1] (the plain
    mean where all lived throughout, or none did)."""
    w = np.array([max(min(b, t1) - max(a, t0), 0.0) for a, b in alive])
    if w.sum() <= 0 or np.all(w == w[0]):
        return float(np.mean(values))
    return float(np.dot(w, values) / w.sum())


class MergedRequests:
    """One record per client request, from the replicas that served it (columns as
    ``RequestTable.columns()``, plus where it went)."""

    def __init__(self, cl: Cluster) -> None:
        self.cl = cl
        self.cache: dict | None = None

    def columns(self) -> dict[str, np.ndarray]:
        if self.cache is None:
            self.cache = self._columns()
        return self.cache

    def _columns(self) -> dict[str, np.ndarray]:
        cl = self.cl
        n = len(cl.rep)
        reps = cl.replicas
        cols = [r.engine.reqs.columns() for r in reps]
        w = np.stack([np.array(cl.rep, np.int64), np.array(cl.rid, np.int64)], axis=1).reshape(n, 2)
        first = _gather(cols, w[:, 0], w[:, 1])
        if not cl.disaggregated:
            first["replica"] = w[:, 0]
            return first
        dw = np.stack([np.array(cl.dec_rep, np.int64), np.array(cl.dec_rid, np.int64)], axis=1).reshape(n, 2)
        tw = np.array(cl.moved, np.float64).reshape(n, 2)
        has = dw[:, 0] >= 0
        out = dict(first)
        if has.any():
            dec = _gather(cols, dw[has, 0], dw[has, 1])
            for c in ("first_token", "last_token", "finish", "num_out", "status", "max_tokens", "num_tokens"):
                out[c] = out[c].copy()
                out[c][has] = dec[c]
            for c in ("preemptions", "recomputed", "swapped_bytes"):
                out[c] = out[c].copy()
                out[c][has] += dec[c]
        # Prefilled, not yet (or never) on a decode replica: in flight unless it was rejected.
        waiting = ~has & (first["status"] == RequestStatus.FINISHED)
        for c in ("first_token", "last_token", "finish"):
            out[c] = out[c].copy()
            out[c][waiting] = np.nan
        out["status"] = out["status"].copy()
        out["status"][waiting] = 1  # running: between its prefill and its decode
        out["num_out"] = out["num_out"].copy()
        out["num_out"][waiting] = 0
        out["replica"] = w[:, 0]
        out["prefill_replica"] = w[:, 0]
        out["decode_replica"] = dw[:, 0]
        out["transfer_start"], out["transfer_end"] = tw[:, 0], tw[:, 1]
        return out

    @property
    def n(self) -> int:
        return len(self.cl.rep)


def _gather(cols: list[dict], rep: np.ndarray, rid: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``rid`` of replica ``rep``'s columns, for each (rep, rid) pair, as one set of columns."""
    sizes = [len(next(iter(cc.values()))) for cc in cols]
    at = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)[rep] + rid
    return {c: np.concatenate([cc[c] for cc in cols])[at] for c in cols[0]}


def build_cluster(sc: Scenario, trace: int, size):
    """(env, cluster, parts) for ``run.simulate``, the workload started; ``size``: the fleet's
    ``run.RunSize``, estimated (and checked against memory) before this builds anything."""
    from workloads.factory import Ids

    env = simpy.Environment()
    cl = Cluster(env, sc, trace)
    r0 = cl.replicas[0]
    ids = Ids()
    cl.expected = resolve.start_clients(env, cl, sc, ids)
    parts = {
        "model": r0.parts["model"],
        "gpu": r0.parts["gpu"],
        "memory": r0.parts["memory"],
        "sched_cfg": r0.parts["sched_cfg"],
        "reqs": cl.merged_requests(),
        "workload_counts": ids,
        "size": size,
    }
    return env, cl, parts
