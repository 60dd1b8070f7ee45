"""What a recorded server's processes spent on the CPU, from the cpu.csv lane.py reads once a second
(/proc, unprofiled), against the tokens its /metrics counted; lanes with one API server (the
server's session leader), others skipped.

    python tools/e2e/cpu_report.py data/e2e/NAME/LANE [...] [--window 5]

Per run: the API server's and the engine core's CPU seconds per output token over the run, and the
share of the wall time the API server was on the CPU (near 1: it is the limit), and the benchmark's
clients' (summed over their processes; nan where the lane did not read them), and the CPU the API
server was found on most often with that CPU's timing in the lane's probe (``per_cpu_us``). Over every window of
``--window`` seconds of the runs given, a least-squares fit of the API server's CPU seconds in the
window to its output tokens, those tokens times the requests open (running and waiting: the streams
it holds), and the prompts it took in (the prompt tokens counted over the run's prompt length):
whether a streamed token costs more with more streams open, and by how much. Under a run whose lane
read them: the CPUs' steal and the probe's readings under load (``machine``).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np


def series(run: Path, server_pid: int) -> dict[str, np.ndarray]:
    """The run's readings on one clock (metrics.csv's seconds): the API server's and the engine
    core's CPU seconds, and the server's counters, at each CPU reading."""
    cpu = list(csv.DictReader((run / "cpu.csv").open()))
    api = [(float(r["t"]), float(r["cpu_s"])) for r in cpu if int(r["pid"]) == server_pid]
    # the CPU the API server last ran on at each reading, where the lane read it (from 2026-12-04)
    api_cpu = [int(r["cpu"]) if r.get("cpu") not in (None, "") else -1 for r in cpu if int(r["pid"]) == server_pid]
    eng = [(float(r["t"]), float(r["cpu_s"])) for r in cpu if r["process"].startswith("VLLM::Engine")]
    # the benchmark's clients, where the lane read them (from 2026-12-04): their CPU seconds summed
    by_t: dict[float, float] = {}
    for r in cpu:
        if r["process"].startswith("client:"):
            by_t[float(r["t"])] = by_t.get(float(r["t"]), 0.0) + float(r["cpu_s"])
    rows = [m for m in csv.DictReader((run / "metrics.csv").open()) if m.get("vllm:generation_tokens_total")]
    mt = np.array([float(m["t"]) for m in rows])

    def at(name: str, t: np.ndarray) -> np.ndarray:
        return np.interp(t, mt, np.array([float(m[name] or 0) for m in rows]))

    t = np.array([a[0] for a in api])
    return {
        "t": t,
        "api": np.array([a[1] for a in api]),
        "engine": np.interp(t, [e[0] for e in eng], [e[1] for e in eng]) if eng else np.zeros_like(t),
        "client": np.interp(t, sorted(by_t), [by_t[k] for k in sorted(by_t)]) if by_t else np.full_like(t, np.nan),
        "tokens": at("vllm:generation_tokens_total", t),
        "prompt_tokens": at("vllm:prompt_tokens_total", t),
        "open": at("vllm:num_requests_running", t) + at("vllm:num_requests_waiting", t),
        "api_cpu": np.array(api_cpu),
    }


def main_cpu(cpus: np.ndarray, probe: dict) -> str:
    """The CPU the API server was found on most often, the share of readings, and that CPU's
    timing in the lane's probe before it (``per_cpu_us``): "cpu 5 (80%, 4.12 us)"; "" where unread."""
    cpus = cpus[cpus >= 0]
    if cpus.size == 0:
        return ""
    k = int(np.bincount(cpus).argmax())
    us = (probe.get("per_cpu_us") or {}).get(str(k))
    wide = (probe.get("wide_ns") or {}).get("shuffled_ns")  # where the probe read it (from 2026-12-04)
    return f"cpu {k} ({np.mean(cpus == k):.0%}{f', {us:.2f} us' if us is not None else ''})" + (
        f"; probe wide {wide:.0f} ns" if wide is not None else ""
    )


def machine(run: Path) -> str:
    """What the machine did beside the run, where the lane read it (from 2026-12-04): the share of
    all CPUs' time lost to steal (stat.csv; and on the CPU that lost most), and host_probe.py
    --watch's readings under load (watch.csv: the kernel's range and median, the wide objects'
    shuffled range); "" where neither was read."""
    out = []
    if (run / "stat.csv").is_file():
        rows = list(csv.DictReader((run / "stat.csv").open()))
        by_cpu: dict[str, list[dict]] = {}
        for r in rows:
            by_cpu.setdefault(r["cpu"], []).append(r)
        fields = [c for c in rows[0] if c not in ("t", "cpu")] if rows else []  # every kind of time lane.py read
        steal = total = worst = 0.0
        for rs in by_cpu.values():
            s_k = int(rs[-1]["steal"]) - int(rs[0]["steal"])
            t_k = sum(int(rs[-1][f]) - int(rs[0][f]) for f in fields)
            steal, total = steal + s_k, total + t_k
            worst = max(worst, s_k / t_k if t_k else 0.0)
        if total:
            out.append(f"steal {steal / total:.1%} of all CPUs' time (most on one CPU {worst:.1%})")
    if (run / "watch.csv").is_file():
        w = list(csv.DictReader((run / "watch.csv").open()))
        if w:
            k = np.array([float(r["kernel_us"]) for r in w])
            sh = np.array([float(r["shuffled_ns"]) for r in w])
            out.append(
                f"watch: {k.size} readings, kernel {k.min():.2f}-{k.max():.2f} us (median {np.median(k):.2f}),"
                f" wide {sh.min():.0f}-{sh.max():.0f} ns"
            )
    return "; ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lanes", nargs="+", type=Path)
    ap.add_argument("--window", type=int, default=5, help="seconds a window of the fit spans (default 5)")
    a = ap.parse_args()
    X, Y = [], []
    print(
        f"{'run':<32} {'API us/token':>12} {'engine us/token':>15} {'API on CPU':>10} {'tokens/s':>9}"
        f" {'client on CPU':>13}  API server's CPU"
    )
    for lane in a.lanes:
        meta = json.loads((lane / "lane.json").read_text())
        probe_path = lane / "host_probe_before.json"
        probe = json.loads(probe_path.read_text()) if probe_path.is_file() else {}
        args = meta["lane"].get("serve_args", [])
        if "--api-server-count" in args and int(args[args.index("--api-server-count") + 1]) > 1:
            print(f"{lane.name}: skipped (more than one API server: the session's leader is not one of them)")
            continue
        for info in meta["runs"]:
            run = lane / info["name"]
            if not (run / "cpu.csv").is_file() or "server_pid" not in info:
                continue
            s = series(run, int(info["server_pid"]))
            spec = next(r for r in meta["lane"]["runs"] if r["name"] == info["name"])
            prompt = spec["prompt"] if isinstance(spec["prompt"], (int, float)) else spec["prompt"]["mean"]
            busy = np.flatnonzero(np.diff(s["tokens"]) > 0)
            if busy.size == 0:
                continue
            i, j = busy[0], busy[-1] + 1
            tok = s["tokens"][j] - s["tokens"][i]
            print(
                f"{lane.name + '/' + info['name']:<32} {(s['api'][j] - s['api'][i]) / tok * 1e6:>12.1f}"
                f" {(s['engine'][j] - s['engine'][i]) / tok * 1e6:>15.1f}"
                f" {(s['api'][j] - s['api'][i]) / (s['t'][j] - s['t'][i]):>10.2f} {tok / (s['t'][j] - s['t'][i]):>9.0f}"
                f" {(s['client'][j] - s['client'][i]) / (s['t'][j] - s['t'][i]):>13.2f}"
                f"  {main_cpu(s['api_cpu'][i : j + 1], probe)}"
            )
            if beside := machine(run):
                print(f"  the machine beside it: {beside}")
            for k in range(i, j - a.window + 1, a.window):
                d = {n: v[k + a.window] - v[k] for n, v in s.items() if n not in ("open", "client", "api_cpu")}
                if d["tokens"] < 1000:  # a window with hardly any streaming says nothing of a token's cost
                    continue
                streams = s["open"][k : k + a.window + 1].mean()
                X.append((d["tokens"], d["tokens"] * streams, d["prompt_tokens"] / prompt))
                Y.append(d["api"])
    if len(X) < 4:
        return 0
    X, Y = np.array(X), np.array(Y)
    coef = np.linalg.lstsq(X, Y, rcond=None)[0]
    miss = np.median(np.abs(X @ coef / Y - 1))
    print(
        f"API server over {len(Y)} windows of {a.window} s: {coef[0] * 1e6:.1f} us a streamed token"
        f" + {coef[1] * 1e9:.1f} ns a token per stream open + {coef[2] * 1e6:.0f} us a prompt taken in"
        f" (median miss {miss:.1%}); a token with 1,000 streams open: {(coef[0] + 1000 * coef[1]) * 1e6:.1f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
