"""Grafana-style panels of a simulated run, drawn from Prometheus itself.

Loads a run's ``metrics.openmetrics`` (``servesim run --metrics openmetrics``) into a Prometheus
TSDB with promtool, starts Prometheus on it, asks it the PromQL queries of vLLM's own Grafana
dashboard (scheduler state, KV-cache utilisation, token throughput, time to first token) and draws
their answers as a dashboard would. Needs ``promtool`` and ``prometheus`` on PATH (Debian:
``apt-get install prometheus``).

    python tools/grafana/panels.py results/collapse_c1200/metrics.openmetrics -o docs/img/grafana_panels.png
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np

# vLLM's dashboard (examples/online_serving/prometheus_grafana/grafana.json in vLLM), one panel each.
PANELS = [
    (
        "Scheduler State",
        "",
        [
            ("Num Running", "vllm:num_requests_running"),
            ("Num Waiting", "vllm:num_requests_waiting"),
        ],
    ),
    (
        "Cache Utilization",
        "percent",
        [
            ("KV cache usage", "100 * vllm:kv_cache_usage_perc"),
        ],
    ),
    (
        "Token Throughput",
        "tokens/s",
        [
            ("Generation Tokens/Sec", "rate(vllm:generation_tokens_total[30s])"),
            ("Prompt Tokens/Sec", "rate(vllm:prompt_tokens_total[30s])"),
        ],
    ),
    (
        "Time To First Token Latency",
        "seconds",
        [
            ("P99", "histogram_quantile(0.99, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))"),
            ("P50", "histogram_quantile(0.5, sum by(le) (rate(vllm:time_to_first_token_seconds_bucket[30s])))"),
        ],
    ),
]
COLORS = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a"]


def query_range(port: int, q: str, start: float, end: float, step: float) -> list[tuple[np.ndarray, np.ndarray]]:
    args = urllib.parse.urlencode({"query": q, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query_range?{args}", timeout=30) as r:
        data = json.load(r)["data"]["result"]
    out = []
    for series in data:
        v = np.array(series["values"], dtype=object)
        out.append((v[:, 0].astype(float), np.array([float(x) for x in v[:, 1]])))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics", help="a run's metrics.openmetrics")
    ap.add_argument(
        "-o", "--out", default=None, help="the PNG to write (default: grafana_panels.png beside the metrics file)"
    )
    ap.add_argument("--title", default=None)
    ap.add_argument("--port", type=int, default=9099)
    args = ap.parse_args()
    for tool in ("promtool", "prometheus"):
        if shutil.which(tool) is None:
            raise SystemExit(f"error: {tool} not found on PATH (Debian: apt-get install prometheus)")
    text = Path(args.metrics).read_text()
    stamps = [
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running{")
    ]
    start, end = min(stamps), max(stamps)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", args.metrics, f"{tmp}/data"],
            check=True,
            capture_output=True,
        )
        Path(f"{tmp}/prometheus.yml").write_text("global: {}\n")
        prom = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={tmp}/prometheus.yml",
                f"--storage.tsdb.path={tmp}/data",
                "--storage.tsdb.retention.time=100y",
                f"--web.listen-address=127.0.0.1:{args.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(100):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{args.port}/-/ready", timeout=1)
                    break
                except OSError:
                    time.sleep(0.2)
            results = [
                [(lab, query_range(args.port, q, start, end, 5.0)) for lab, q in queries] for _, _, queries in PANELS
            ]
        finally:
            prom.terminate()
            prom.wait()
    plt.rcParams.update(
        {
            "figure.facecolor": "#111217",
            "axes.facecolor": "#181b1f",
            "axes.edgecolor": "#2c3235",
            "text.color": "#ccccdc",
            "axes.labelcolor": "#ccccdc",
            "xtick.color": "#9fa7b3",
            "ytick.color": "#9fa7b3",
            "grid.color": "#2c3235",
            "font.size": 9,
        }
    )
    fig, axes = plt.subplots(2, 2, figsize=(12, 6.8))
    for ax, (title, unit, _), series in zip(axes.ravel(), PANELS, results):
        for i, (label, found) in enumerate(series):
            for t, v in found:
                ax.plot([np.datetime64(int(x), "s") for x in t], v, color=COLORS[i % len(COLORS)], lw=1.4, label=label)
        ax.set_title(title, loc="left", fontsize=10, color="#d8d9da")
        ax.set_ylabel(unit)
        ax.grid(True, lw=0.6)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.1), ncol=2, fontsize=8, frameon=False, labelcolor="#ccccdc")
        ax.set_ylim(bottom=0)
    fig.suptitle(
        args.title
        or f"vLLM dashboard queries on {Path(args.metrics).parent.name} (simulated; Prometheus {Path(args.metrics).name})",
        color="#d8d9da",
        fontsize=11,
    )
    fig.tight_layout()
    out = args.out or Path(args.metrics).parent / "grafana_panels.png"  # beside the run, not wherever this runs
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
