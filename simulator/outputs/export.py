"""A run in the formats of the tools people already use on real servers.

- ``openmetrics``: the run's time series under vLLM's own Prometheus metric names, types and
  histogram buckets (``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``,
  ``vllm:time_to_first_token_seconds``...; SGLang's own names for a run of ``engine.framework:
  sglang``, ``sglang:num_running_reqs``, ``sglang:token_usage``...), one sample per series every ``interval_s`` simulated
  seconds, timestamped from ``start_epoch``. ``promtool tsdb create-blocks-from openmetrics FILE DIR``
  turns it into Prometheus blocks, so a vLLM Grafana dashboard shows a simulated run as it would a
  real one. Written with prometheus_client (the standard client library).
- ``perfetto``: Chrome trace-event JSON (opens in ui.perfetto.dev): engine steps as slices with their
  batch composition, each request as async spans (queued, prefill, decode, preempted, swapped out),
  KV-cache usage and the queues as counter tracks.

Server-level series come from the step log (per step, or per time bin with ``run.step_log_bin_s``);
request-level histograms from the request records, each request observed when vLLM observes it (TTFT
at its first token, the rest when it finishes). Inter-token latency is observed per decode token of
a step as the time since the previous step ended, exact for requests that decoded in both steps.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from simulator.engine import events as E
from simulator.engine import speculative
from simulator.engine.rules import RequestStatus
from simulator.errors import ConfigError
from simulator.metrics import e2el_s, tpot_s, ttft_s
from simulator.outputs.writers import atomic_write_bytes

DEFAULT_START_EPOCH = 1767225600.0  # 2026-01-01T00:00:00Z: a fixed anchor keeps the file deterministic

TTFT_BUCKETS = [
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
]
ITL_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
]
LATENCY_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]


def _step_series(result) -> dict[str, np.ndarray]:
    cols = result.engine.log.columns()
    start = np.asarray(cols["start"], np.float64)
    dur = np.asarray(cols["duration"], np.float64)
    return {**cols, "start": start, "end": start + dur}


def _last_before(times: np.ndarray, values: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The value of the latest entry whose time is <= each of ``at`` (0 before the first)."""
    k = np.searchsorted(times, at, side="right") - 1
    out = np.where(k >= 0, np.asarray(values, np.float64)[np.maximum(k, 0)], 0.0)
    return out


def _cumulative(times: np.ndarray, amounts: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Sum of ``amounts`` whose time is <= each of ``at``."""
    if not len(times):  # nothing happened yet (no request finished in a short run)
        return np.zeros(len(at))
    order = np.argsort(times, kind="stable")
    t, c = times[order], np.cumsum(np.asarray(amounts, np.float64)[order])
    k = np.searchsorted(t, at, side="right")
    return np.where(k > 0, c[np.maximum(k - 1, 0)], 0.0)


def _histogram(
    times: np.ndarray, values: np.ndarray, buckets: list[float], at: np.ndarray, weights: np.ndarray | None = None
):
    """Cumulative histogram of ``values`` observed at ``times``, as of each of ``at``: bucket counts
    (len(at) x (len(buckets) + 1), the last +Inf), counts and sums."""
    w = np.ones(len(values)) if weights is None else np.asarray(weights, np.float64)
    b = np.searchsorted(np.asarray(buckets), values, side="left")  # first bucket whose bound >= value
    k = np.searchsorted(at, times, side="left")  # first scrape at or after the observation
    grid = np.zeros((len(at) + 1, len(buckets) + 1))
    np.add.at(grid, (k, b), w)
    per_scrape = np.cumsum(grid[: len(at)], axis=0)
    buckets_cum = np.cumsum(per_scrape, axis=1)
    sums = np.zeros(len(at) + 1)
    np.add.at(sums, k, w * values)
    return buckets_cum, buckets_cum[:, -1], np.cumsum(sums[: len(at)])


# SGLang's names for vLLM's series (srt/observability/metrics_collector.py, 0.5 line;
# data/sources/sglang/sglang_scheduler.md section 11); None: SGLang has no such series. Counters get
# their "_total" from the client library, as vLLM's do.
SGLANG_NAMES: dict[str, str | None] = {
    "vllm:num_requests_running": "sglang:num_running_reqs",
    "vllm:num_requests_waiting": "sglang:num_queue_reqs",
    "vllm:kv_cache_usage_perc": "sglang:token_usage",
    "vllm:num_preemptions": "sglang:num_retracted_requests",
    "vllm:prompt_tokens": "sglang:prompt_tokens",
    "vllm:generation_tokens": "sglang:generation_tokens",
    "vllm:request_success": "sglang:num_requests",
    "vllm:prefix_cache_queries": None,
    "vllm:prefix_cache_hits": "sglang:cached_tokens",
    "vllm:time_to_first_token_seconds": "sglang:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds": "sglang:inter_token_latency_seconds",
    "vllm:request_time_per_output_token_seconds": None,
    "vllm:e2e_request_latency_seconds": "sglang:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds": "sglang:queue_time_seconds",
    "vllm:request_inference_time_seconds": None,
    "vllm:request_prefill_time_seconds": None,
    "vllm:request_decode_time_seconds": None,
}


class _Families:
    """The metric families of a run, sampled at ``at`` (simulated seconds; ``stamps``: their wall-clock
    times), each series labelled with the model and the engine. ``sglang``: the series under SGLang's
    names (``SGLANG_NAMES``), those it lacks left out, without vLLM's extra labels."""

    LABELS = ("model_name", "engine")

    def __init__(self, at: np.ndarray, stamps: np.ndarray) -> None:
        self.at, self.stamps = at, stamps.tolist()
        self.families: dict[str, object] = {}
        self.sglang = False

    def _family(self, kind, name: str, doc: str, names: list[str]):
        if name not in self.families:
            self.families[name] = kind(name, doc, labels=names)
        return self.families[name]

    def _name(self, name: str) -> str | None:
        return SGLANG_NAMES.get(name) if self.sglang else name

    def gauge(self, lv: list[str], name: str, doc: str, values: np.ndarray) -> None:
        from prometheus_client.core import GaugeMetricFamily

        if (named := self._name(name)) is None:
            return
        g = self._family(GaugeMetricFamily, named, doc, list(self.LABELS))
        for ts, v in zip(self.stamps, values.tolist()):
            g.add_metric(lv, v, timestamp=ts)

    def counter(self, lv: list[str], name: str, doc: str, values: np.ndarray, extra: dict | None = None) -> None:
        from prometheus_client.core import CounterMetricFamily

        if (named := self._name(name)) is None:
            return
        extra = None if self.sglang else extra
        m = self._family(CounterMetricFamily, named, doc, [*self.LABELS, *(extra or {})])
        for ts, v in zip(self.stamps, values.tolist()):
            m.add_metric(lv + list((extra or {}).values()), v, timestamp=ts)

    def histogram(self, lv: list[str], name: str, doc: str, times, values, buckets, weights=None) -> None:
        from prometheus_client.core import HistogramMetricFamily

        if (named := self._name(name)) is None:
            return
        cum, _, sums = _histogram(
            np.asarray(times, np.float64), np.asarray(values, np.float64), buckets, self.at, weights
        )
        h = self._family(HistogramMetricFamily, named, doc, list(self.LABELS))
        bounds = [*(str(float(x)) for x in buckets), "+Inf"]
        for i, ts in enumerate(self.stamps):
            h.add_metric(lv, list(zip(bounds, cum[i].tolist())), float(sums[i]), timestamp=ts)

    def collect(self):
        return list(self.families.values())


def openmetrics_text(result, interval_s: float = 1.0, start_epoch: float = DEFAULT_START_EPOCH) -> bytes:
    """The run as OpenMetrics text with vLLM's metric names (see the module docstring). A fleet's
    replicas are engines of their own, each with its series (label ``engine``: the replica's index),
    as every vLLM server of the fleet would report them."""
    from prometheus_client.openmetrics import exposition

    end = result.end_time
    at = np.arange(1, int(np.floor(end / interval_s)) + 1) * interval_s
    if not len(at) or at[-1] < end:
        at = np.append(at, end)
    fams = _Families(at, start_epoch + at)
    if hasattr(result.engine, "replicas"):
        engines = [(str(r.index), rr) for r, rr in zip(result.engine.replicas, result.replica_results())]
    else:
        engines = [("0", result)]
    for engine, res in engines:
        _engine_series(fams, [res.model.name, engine], res)
    # vLLM's names carry a colon: written as they are (newer prometheus_client versions would
    # otherwise rewrite them in the sample lines but not in the # TYPE lines).
    allow = getattr(exposition, "ALLOWUTF8", None)
    return exposition.generate_latest(fams, escaping=allow) if allow else exposition.generate_latest(fams)


def _engine_series(fams: _Families, lv: list[str], res) -> None:
    """Every series of one engine (labels ``lv``), from its step log and request records, in vLLM's
    /metrics order."""
    s = _step_series(res)
    c = res.reqs.columns()
    fams.sglang = res.scenario.engine.framework == "sglang"
    _scheduler_gauges(fams, lv, s, res.scenario.engine)
    _token_counters(fams, lv, s, c, res.scenario.engine)
    _prefix_cache_counters(fams, lv, c, res.scenario.engine)
    _latency_histograms(fams, lv, s, c)


# The helpers below are long as a table is long: one call per vLLM series (name, help text, values);
# the formatter gives each call five lines.
def _scheduler_gauges(fams: _Families, lv: list[str], s: dict, engine) -> None:
    """The scheduler's state at each scrape: its queues and the KV cache's usage."""
    at = fams.at
    fams.gauge(
        lv,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        _last_before(s["start"], s["num_running"], at),
    )
    fams.gauge(
        lv,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        _last_before(s["start"], s["num_waiting"], at),
    )
    if engine.preemption_mode == "swap":  # a V0 series: only a run that swaps as V0 did has it
        fams.gauge(
            lv,
            "vllm:num_requests_swapped",
            "Number of requests swapped to CPU.",
            _last_before(s["start"], s["num_swapped"], at),
        )
    fams.gauge(
        lv,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        _last_before(s["start"], s["kv_usage"], at),
    )


def _token_counters(fams: _Families, lv: list[str], s: dict, c: dict, engine) -> None:
    """Preemptions, prompt and generated tokens, finished requests and speculative drafts, as counted so far."""
    at = fams.at
    fams.counter(
        lv,
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        _cumulative(s["start"], s["num_preemptions"], at),
    )
    first = np.isfinite(c["first_token"])
    fams.counter(
        lv,
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        _cumulative(c["first_token"][first], c["prompt_len"][first], at),
    )
    fams.counter(
        lv,
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        _cumulative(s["end"], s["num_generated"], at),
    )
    fin = c["status"] == RequestStatus.FINISHED
    fams.counter(
        lv,
        "vllm:request_success",
        "Count of successfully processed requests.",
        _cumulative(c["finish"][fin], np.ones(int(fin.sum())), at),
        {"finished_reason": "length"},
    )
    if speculative.enabled(engine.speculative_config):  # vLLM's spec_decode counters
        for name, col, text in (
            ("vllm:spec_decode_num_drafts", "spec_drafts", "Number of spec decoding drafts."),
            ("vllm:spec_decode_num_draft_tokens", "spec_draft_tokens", "Number of draft tokens."),
            ("vllm:spec_decode_num_accepted_tokens", "spec_accepted_tokens", "Number of accepted tokens."),
        ):
            fams.counter(lv, name, text, _cumulative(s["end"], s[col], at))


def _prefix_cache_counters(fams: _Families, lv: list[str], c: dict, engine) -> None:
    """Prefix-cache queries and hits, on the GPU and (with KV offloading) on the host tier.

    The prefix cache is looked up when a request is first scheduled: its prompt queried, what was
    found cached a hit (vLLM counts nothing with prefix caching off)."""
    at = fams.at
    sched = np.isfinite(c["first_scheduled"]) & engine.prefix_caching
    fams.counter(
        lv,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        _cumulative(c["first_scheduled"][sched], c["prompt_len"][sched], at),
    )
    host = c["host_cached_tokens"][sched]  # KV offloading: found on the host tier
    fams.counter(
        lv,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        _cumulative(c["first_scheduled"][sched], np.maximum(c["cached_tokens"][sched], 0) - host, at),
    )
    if engine.kv_offloading_size:
        fams.counter(
            lv,
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
            _cumulative(c["first_scheduled"][sched], c["prompt_len"][sched], at),
        )
        fams.counter(
            lv,
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
            _cumulative(c["first_scheduled"][sched], host, at),
        )


def _latency_histograms(fams: _Families, lv: list[str], s: dict, c: dict) -> None:
    """The latency histograms, each request observed when vLLM observes it (TTFT at its first token,
    the rest when it finishes; inter-token latency per decode token of a step)."""
    first = np.isfinite(c["first_token"])
    fams.histogram(
        lv,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        c["first_token"][first],
        ttft_s(c)[first],
        TTFT_BUCKETS,
    )
    if "num_steps" in s:  # time bins: a bin's mean step time
        gap = np.asarray(s["busy_s"], np.float64) / np.maximum(np.asarray(s["num_steps"], np.float64), 1)
    else:  # the time since the previous step ended
        gap = np.diff(s["end"], prepend=s["start"][:1])
    fams.histogram(
        lv,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        s["end"],
        gap,
        ITL_BUCKETS,
        weights=s["decode_tokens"],
    )
    fin = c["status"] == RequestStatus.FINISHED
    multi = fin & (c["num_out"] > 1)
    fams.histogram(
        lv,
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        c["finish"][multi],
        tpot_s(c)[multi],
        ITL_BUCKETS,
    )
    for name, doc, values in [
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2el_s(c)),
        (
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            c["first_scheduled"] - c["arrival"],
        ),
        (
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            c["finish"] - c["first_scheduled"],
        ),
        (
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            c["first_token"] - c["first_scheduled"],
        ),
        (
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            c["finish"] - c["first_token"],
        ),
    ]:
        fams.histogram(lv, name, doc, c["finish"][fin], values[fin], LATENCY_BUCKETS)


# One sample of every series of one engine in the text (gauges, counters, the histograms' buckets),
# measured on the collapse and cluster runs; and the most a metrics file may hold.
SAMPLE_BYTES = 21_000
MAX_METRICS_BYTES = 1 << 30


def check_metrics_size(duration_s: float, interval_s: float, engines: int = 1) -> None:
    """Refuse, before writing it, a metrics file larger than ``MAX_METRICS_BYTES``: samples every
    ``interval_s`` over ``duration_s`` simulated seconds, of every series of each of ``engines``."""
    samples = math.ceil(duration_s / interval_s)
    size = samples * engines * SAMPLE_BYTES
    if size <= MAX_METRICS_BYTES:
        return
    fits = duration_s * engines * SAMPLE_BYTES / MAX_METRICS_BYTES
    step = 10 ** math.floor(math.log10(fits))
    least = math.ceil(fits / step) * step
    what = f" of each of {engines:,} engines" if engines > 1 else ""
    raise ConfigError(
        f"--metrics-interval: {samples:,} samples of every series{what} over {duration_s:g} simulated s "
        f"are about {size / 2**30:,.1f} GB of metrics.openmetrics, more than "
        f"{MAX_METRICS_BYTES / 2**30:g} GB; give {least:g} s or more (got {interval_s:g})"
    )


def write_openmetrics(result, path: Path, interval_s: float = 1.0, start_epoch: float = DEFAULT_START_EPOCH) -> Path:
    atomic_write_bytes(path, openmetrics_text(result, interval_s, start_epoch))
    return path


# ---- Perfetto / Chrome trace events -------------------------------------------------------------------

_US = 1e6  # trace timestamps are in microseconds


def trace_events(result) -> list[dict]:
    """The run as Chrome trace events (timestamps in microseconds of simulated time). Needs the
    request events of ``simulate(..., trace=1)``. A fleet's replicas are a pair of processes each
    (the engine's steps, its requests), and disaggregated requests' KV transfers a process of
    their own."""
    if not hasattr(result.engine, "replicas"):
        return _engine_events(result, 1, f"engine ({result.model.name})", "")
    out: list[dict] = []
    for r, rr in zip(result.engine.replicas, result.replica_results()):
        out += _engine_events(rr, 2 * r.index + 1, r.label, f"{r.index}:")
    cols = result.reqs.columns()
    if "transfer_start" in cols:
        pid = 2 * len(result.engine.replicas) + 1
        out.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "KV transfers"}})
        moved = np.flatnonzero(np.isfinite(cols["transfer_start"]) & np.isfinite(cols["transfer_end"]))
        for gid in moved.tolist():
            t0, t1 = float(cols["transfer_start"][gid]), float(cols["transfer_end"][gid])
            args = {
                "request": gid,
                "from": int(cols["prefill_replica"][gid]),
                "to": int(cols["decode_replica"][gid]),
                "prompt_tokens": int(cols["prompt_len"][gid]),
            }
            out.append(
                {
                    "ph": "b",
                    "cat": "transfer",
                    "id": f"t{gid}",
                    "pid": pid,
                    "name": "KV transfer",
                    "ts": t0 * 1e6,
                    "args": args,
                }
            )
            out.append(
                {"ph": "e", "cat": "transfer", "id": f"t{gid}", "pid": pid, "name": "KV transfer", "ts": t1 * 1e6}
            )
    return out


def _engine_events(result, pid: int, name: str, ids: str) -> list[dict]:
    """One engine's steps (process ``pid``) and requests (process ``pid + 1``); request span ids
    are prefixed with ``ids`` (a replica's, in a fleet)."""
    out = _process_names(pid, name, ids)
    out += _step_events(result.engine.log.columns(), pid)
    out += _RequestSpans(result, pid + 1, ids).events()
    return out


def _process_names(pid: int, name: str, ids: str) -> list[dict]:
    """The metadata records naming an engine's two processes and its steps' thread."""
    return [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}},
        {"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "steps"}},
        {
            "ph": "M",
            "pid": pid + 1,
            "name": "process_name",
            "args": {"name": f"requests of {name}" if ids else "requests"},
        },
    ]


_STEP_ARGS = (
    "num_running",
    "num_waiting",
    "num_swapped",
    "num_seqs",
    "prefill_tokens",
    "decode_tokens",
    "recomputed_tokens",
    "num_preemptions",
    "num_generated",
)


def _step_events(log: dict, pid: int) -> list[dict]:
    """Each step (or time bin) of the step log as a slice with its batch composition, followed by
    the KV-cache usage and queue counters at its start."""
    out: list[dict] = []
    binned = "num_steps" in log
    for k in range(len(log["start"])):
        ts = float(log["start"][k]) * _US
        out.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": 1,
                "name": "time bin" if binned else "step",
                "ts": ts,
                "dur": float(log["duration"][k]) * _US,
                "args": {c: int(log[c][k]) for c in _STEP_ARGS},
            }
        )
        out.append(
            {
                "ph": "C",
                "pid": pid,
                "name": "kv_cache_usage",
                "ts": ts,
                "args": {"percent": round(float(log["kv_usage"][k]) * 100, 4)},
            }
        )
        out.append(
            {
                "ph": "C",
                "pid": pid,
                "name": "queues",
                "ts": ts,
                "args": {"running": int(log["num_running"][k]), "waiting": int(log["num_waiting"][k])},
            }
        )
    return out


class _RequestSpans:
    """Each request of one engine as a sequence of async spans (queued, prefill, decode, preempted,
    resumed, streaming out), one open at a time, built from the engine's request events."""

    def __init__(self, result, pid: int, ids: str) -> None:
        self.result, self.pid, self.ids = result, pid, ids
        self.c = result.reqs.columns()
        self.out: list[dict] = []
        self.phase: dict[int, tuple[str, float]] = {}  # request -> its open span (name, start)

    def close(self, rid: int, t: float) -> None:
        name, t0 = self.phase.pop(rid)
        sid = f"{self.ids}{rid}" if self.ids else rid
        self.out.append(
            {
                "ph": "b",
                "cat": "request",
                "id": sid,
                "pid": self.pid,
                "name": name,
                "ts": t0 * _US,
                "args": {"request": rid},
            }
        )
        self.out.append({"ph": "e", "cat": "request", "id": sid, "pid": self.pid, "name": name, "ts": t * _US})

    def open(self, rid: int, name: str, t: float) -> None:
        if rid in self.phase:
            self.close(rid, t)
        self.phase[rid] = (name, t)

    def events(self) -> list[dict]:
        c, phase = self.c, self.phase
        end = self.result.end_time
        evs = self.result.engine.trace_events()
        order = np.argsort(evs[:, 0], kind="stable") if len(evs) else np.empty(0, np.int64)
        queued = set()
        for t, kind, rid, value in evs[order].tolist():
            rid, kind = int(rid), int(kind)
            if rid not in queued:  # its wait from arrival to its first admission
                queued.add(rid)
                phase[rid] = ("queued", float(c["arrival"][rid]))
            self._on_event(rid, kind, t, value, end)
        for rid in range(len(c["arrival"])):
            if c["status"][rid] == RequestStatus.REJECTED:
                self.out.append(
                    {
                        "ph": "i",
                        "s": "p",
                        "pid": self.pid,
                        "name": f"rejected {rid}",
                        "ts": float(c["arrival"][rid]) * _US,
                    }
                )
            elif rid not in queued:  # never admitted
                phase[rid] = ("queued", float(c["arrival"][rid]))
        for rid in list(phase):  # still open when the run ended
            self.close(rid, end)
        return self.out

    def _on_event(self, rid: int, kind: int, t: float, value: float, end: float) -> None:
        """Open the span a request event starts (closing the one before)."""
        phase = self.phase
        if kind == E.EventKind.NEW:
            self.open(rid, "prefill", t)
        elif kind == E.EventKind.RESUMED:
            recomputing = rid in phase and phase[rid][0] == "preempted"
            self.open(rid, "resumed (recomputing, then decoding)" if recomputing else "resumed", t)
        elif kind == E.EventKind.PREEMPTED:
            self.open(rid, E.PREEMPTION_KINDS[int(value)], t)
            if int(value) == E.PreemptionKind.ABORTED:
                self.close(rid, t)
        elif kind == E.EventKind.FIRST_TOKEN:
            self.open(rid, "decode", t)
        elif kind == E.EventKind.FINISHED and rid in phase:
            shown = float(self.c["finish"][rid])  # its last token reaches the client (through the front-end)
            if not np.isfinite(shown):  # still on its way out when the run ended
                shown = end
            if shown > t:
                self.open(rid, "streaming out (front-end)", t)
            self.close(rid, max(shown, t))


def write_perfetto(result, path: Path) -> Path:
    data = {
        "traceEvents": trace_events(result),
        "displayTimeUnit": "ms",
        "metadata": {"simulator": "servesim", "scenario": result.scenario.name},
    }
    atomic_write_bytes(path, json.dumps(data, separators=(",", ":")).encode())
    return path
