"""Exports to the tools people use on real servers: OpenMetrics under vLLM's metric names (parsed by
the reference OpenMetrics parser, and loaded by promtool where it is installed) and Chrome/Perfetto
trace events (checked against the trace-event format)."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from collections import defaultdict

import numpy as np
import pytest

from simulator.cli import main
from simulator.outputs.export import DEFAULT_START_EPOCH, openmetrics_text, trace_events
from simulator.run import simulate
from simulator.scenario.config import load_scenario

ARGS = ["run.duration_s=60", "run.warmup_s=10", "engine.num_gpu_blocks_override=6000"]


@pytest.fixture(scope="module")
def run():
    sc, _ = load_scenario("scenarios/collapse_c1200.yaml", ARGS)
    return simulate(sc, trace=1)


def _parse_each_scrape(text: str) -> dict:
    """Parse the file with prometheus_client's OpenMetrics parser, one scrape (timestamp) at a time:
    the file holds many points per series (as backfilling needs), which that parser, written for a
    live /metrics page, checks one point at a time. Returns the families with every scrape's samples."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    headers: list[str] = []
    by_time: dict[str, list[str]] = defaultdict(list)
    family = None
    for line in text.splitlines():
        if line.startswith("#"):
            if line.startswith("# TYPE"):
                family = line
            if line != "# EOF":
                headers.append(line)
            continue
        by_time[line.rsplit(" ", 1)[1]].append((family, line))
    fams: dict = {}
    for _ts, lines in by_time.items():
        doc, last = [], None
        for fam, line in lines:
            if fam != last:
                name = fam.split()[2]
                doc += [h for h in headers if h.split()[2] == name]
                last = fam
            doc.append(line)
        for f in text_string_to_metric_families("\n".join(doc) + "\n# EOF\n"):
            if f.name in fams:
                fams[f.name].samples.extend(f.samples)
            else:
                fams[f.name] = f
    return fams


def test_openmetrics_parses_with_vllms_names_types_and_consistent_values(run):
    text = openmetrics_text(run, interval_s=1.0).decode()
    assert text.endswith("# EOF\n")
    fams = _parse_each_scrape(text)
    want = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    }
    for name, kind in want.items():
        assert fams[name].type == kind, name
    log = run.engine.log.columns()
    series = defaultdict(list)
    for f in fams.values():
        for s in f.samples:
            series[(s.name, tuple(sorted(s.labels.items())))].append((s.timestamp, s.value))
    for (name, _), pts in series.items():
        ts = [float(t) for t, _ in pts]
        assert ts == sorted(ts) and ts[0] == DEFAULT_START_EPOCH + 1.0, name  # one sample a second, in order
        if name.endswith(("_total", "_count", "_sum", "_bucket")):
            vals = [v for _, v in pts]
            assert vals == sorted(vals), f"{name} decreases"
    last = {name: pts[-1][1] for (name, _), pts in series.items()}
    assert last["vllm:generation_tokens_total"] == log["num_generated"].sum()
    assert last["vllm:num_preemptions_total"] == log["num_preemptions"].sum() > 0
    finished = int((run.reqs.status[: run.reqs.n] == 3).sum())
    assert last["vllm:request_success_total"] == finished == last["vllm:e2e_request_latency_seconds_count"]
    assert (
        min(v for _, v in series[("vllm:kv_cache_usage_perc", (("engine", "0"), ("model_name", "llama-3.1-8b")))]) >= 0
    )
    # A histogram's buckets are cumulative over le, the +Inf bucket equals the count.
    ttft = [
        s for s in fams["vllm:time_to_first_token_seconds"].samples if float(s.timestamp) == DEFAULT_START_EPOCH + 60
    ]
    buckets = [s.value for s in ttft if s.name.endswith("_bucket")]
    assert buckets == sorted(buckets) and buckets[-1] == next(s.value for s in ttft if s.name.endswith("_count"))


# CI installs promtool and sets SERVESIM_REQUIRE_PROMTOOL, so there the test runs or fails, never skips.
@pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("SERVESIM_REQUIRE_PROMTOOL"),
    reason="promtool not installed (Debian: apt-get install prometheus)",
)
def test_promtool_turns_the_openmetrics_into_prometheus_blocks(run, tmp_path):
    assert shutil.which("promtool"), "SERVESIM_REQUIRE_PROMTOOL is set but promtool is not on the PATH"
    (tmp_path / "m.om").write_bytes(openmetrics_text(run))
    out = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "m.om"), str(tmp_path / "data")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert any((tmp_path / "data").iterdir())


def test_perfetto_trace_follows_the_trace_event_format(run):
    evs = trace_events(run)
    json.dumps(evs)  # serialisable
    open_spans: dict = {}
    spans = defaultdict(list)
    steps = 0
    for e in evs:
        assert e["ph"] in {"M", "X", "C", "b", "e", "i"} and "pid" in e and "name" in e
        if e["ph"] == "M":
            continue
        assert isinstance(e["ts"], float) and e["ts"] >= 0
        if e["ph"] == "X":
            steps += 1
            assert e["dur"] >= 0 and "tid" in e and set(e["args"]) >= {"num_seqs", "prefill_tokens", "decode_tokens"}
        elif e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values())
        elif e["ph"] == "b":
            assert e["cat"] == "request" and (e["id"], e["name"]) not in open_spans
            open_spans[(e["id"], e["name"])] = e["ts"]
        elif e["ph"] == "e":
            t0 = open_spans.pop((e["id"], e["name"]))
            assert e["ts"] >= t0
            spans[e["id"]].append((t0, e["ts"], e["name"]))
    assert not open_spans and steps == run.engine.num_steps
    c = run.reqs.columns()
    for rid in range(run.reqs.n):  # each request's spans tile its life from arrival, in order
        s = sorted(spans[rid])
        assert s[0][0] == c["arrival"][rid] * 1e6 and s[0][2] == "queued"
        assert all(a[1] == b[0] for a, b in itertools.pairwise(s))
        if c["status"][rid] == 3:
            assert s[-1][1] == c["finish"][rid] * 1e6
    names = {n for v in spans.values() for _, _, n in v}
    assert {"queued", "prefill", "decode", "preempted"} <= names


def test_cli_writes_both_exports(tmp_path, capsys):
    args = [
        "run",
        "--out",
        str(tmp_path / "r"),
        "--set",
        "run.duration_s=20",
        "--set",
        "run.warmup_s=0",
        "--metrics",
        "openmetrics",
        "--trace",
        str(tmp_path / "t.json"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'r' / 'metrics.openmetrics'}" in out and f"wrote {tmp_path / 't.json'}" in out
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["traceEvents"] and (tmp_path / "r" / "metrics.openmetrics").read_bytes().endswith(b"# EOF\n")
    assert main([*args[:-4], "--metrics-start", "yesterday"]) == 2
    assert "--metrics-start must be an ISO 8601 time" in capsys.readouterr().err
    assert np.isfinite(json.loads((tmp_path / "r" / "summary.json").read_text())["output_throughput"])
