"""The collapse story against the recorded servers: figures and a table for the docs.

    python tools/e2e/figures.py [--recording h200_2026-11-27] [--out docs/img]

Replays the recorded Llama-3.1-8B runs (fixed output lengths: every client's requests in step;
lognormal lengths: not) in servesim exactly as `servesim validate --recorded` does, and draws:

- recorded_kv_waves.png: KV-cache usage over time at 2,000 clients, server against servesim, both
  length shapes (the server's /metrics once a second; servesim's steps);
- recorded_sweep.png: output throughput, p50 TPOT and preemptions against the clients in flight.

It prints the sweep as a markdown table (docs/validation.md quotes it). With ``--collapse`` it draws
instead the README's collapse case as recorded on two H100 machines (512, 1,028 and 1,200 clients,
two API servers; `h100x2_alone_2026-11-28`, each lane alone on its host, and
`h100x2_collapse_2026-11-27`, two lanes side by side): recorded_collapse_h100.png, KV-cache usage over
time, the servers against servesim, and prints its table. With ``--hosts``: TPOT and throughput
against max_num_seqs on the machines that swept it, servesim on each one's reading and the band across
hosts, one figure per GPU (recorded_host_sweep.png for the H200s, recorded_host_sweep_h100.png for the
H100s), and their table.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.metrics import step_columns, summarize  # noqa: E402
from simulator.run import on_band_hosts, simulate  # noqa: E402
from simulator.validation import validate  # noqa: E402

LANES = {"llama8b_fixed": "fixed lengths (all clients in step)", "llama8b_spread": "lognormal output lengths"}
COLORS = {"llama8b_fixed": "#1f77b4", "llama8b_spread": "#d62728"}


def server_series(run: dict) -> tuple[np.ndarray, np.ndarray]:
    path = ROOT / "data" / "e2e" / run["recording"] / run["lane"] / run["run"] / "metrics.csv"
    rows = [r for r in csv.DictReader(path.open()) if r.get("vllm:kv_cache_usage_perc")]
    t = np.array([float(r["t"]) for r in rows])
    kv = np.array([float(r["vllm:kv_cache_usage_perc"]) for r in rows])
    busy = np.nonzero(np.array([float(r["vllm:num_requests_running"]) for r in rows]) > 0)[0]
    first = busy[0] if len(busy) else 0
    return t[first:] - t[first], kv[first:]


def kv_panel(ax, run: dict, res, color: str, label: str = "vLLM 0.26 server (/metrics, once a second)") -> None:
    """KV-cache usage over time on ``ax``: the recorded server's /metrics against servesim's replay ``res``."""
    t, kv = server_series(run)
    ax.plot(t, 100 * kv, color="black", lw=1.6, label=label)
    st = step_columns(res)
    start = np.asarray(st["start"])
    ax.plot(
        start - start[0],
        100 * np.asarray(st["kv_usage"]),
        color=color,
        lw=1.0,
        alpha=0.85,
        label="servesim (every step)",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recording", default="h200_2026-11-27")
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--collapse", action="store_true", help="the README's collapse case on an H100")
    ap.add_argument(
        "--hosts", action="store_true", help="TPOT and throughput against max_num_seqs, with the band across hosts"
    )
    a = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if a.collapse:
        return collapse(Path(a.out), plt)
    if a.hosts:
        return host_sweep(Path(a.out), plt)

    runs = [
        r
        for r in validate.load(validate.E2E_FILE)["runs"]
        if r["recording"] == a.recording and r["lane"] in LANES and r["arrival"].get("max_concurrency")
    ]
    rows = []
    sims = {}
    for run in runs:
        res = simulate(validate.e2e_scenario(run))
        s = summarize(res)
        sims[run["id"]] = res
        m, srv = run["measured"], run["server"]
        rows.append(
            {
                "lane": run["lane"],
                "clients": run["arrival"]["max_concurrency"],
                "split": run["split"],
                "warm": srv.get("prefix_cache_hit_rate", 0.0) > validate.E2E_WARM_CACHE,
                "thr": (m["output_throughput"], s["output_throughput"]),
                "tpot": (m["median_tpot_ms"], s["median_tpot_ms"]),
                "ttft": (m["median_ttft_ms"], s["median_ttft_ms"]),
                "pre": (srv.get("num_preemptions", 0), s["num_preemptions"]),
                "kv": (srv.get("kv_usage_max", 0.0), s["kv_cache_usage_max"]),
            }
        )
    rows.sort(key=lambda r: (r["lane"], r["clients"]))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    for ax, lane in zip(axes, LANES):
        run = next(r for r in runs if r["lane"] == lane and r["arrival"]["max_concurrency"] == 2000)
        kv_panel(ax, run, sims[run["id"]], COLORS[lane])
        ax.set_title(f"Llama-3.1-8B on an H200, 2,000 clients, {LANES[lane]}", fontsize=10)
        ax.set_xlabel("seconds since the first request")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("KV-cache usage (%)")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "recorded_kv_waves.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for lane in LANES:
        rs = [r for r in rows if r["lane"] == lane]
        c = [r["clients"] for r in rs]
        for ax, key, scale in ((axes[0], "thr", 1e-3), (axes[1], "tpot", 1.0), (axes[2], "pre", 1.0)):
            ax.plot(c, [r[key][0] * scale for r in rs], "o-", color=COLORS[lane], label=f"server, {LANES[lane]}")
            ax.plot(
                c,
                [r[key][1] * scale for r in rs],
                "s--",
                color=COLORS[lane],
                mfc="none",
                label=f"servesim, {LANES[lane]}",
            )
    for ax, lab in zip(axes, ("output throughput (thousand tokens/s)", "p50 TPOT (ms)", "preemptions in the run")):
        ax.set_xlabel("clients in flight (vllm bench serve --max-concurrency)")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(bottom=0)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(
        "Llama-3.1-8B on an H200 (vLLM 0.26): the recorded server against servesim, same requests", fontsize=11
    )
    fig.tight_layout()
    fig.savefig(out / "recorded_sweep.png", dpi=110)
    plt.close(fig)

    print(
        "| lengths | clients | output tok/s server / servesim | p50 TPOT ms | p50 TTFT ms | preemptions | peak KV usage |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        note = " (warm cache)" if r["warm"] else ""
        print(
            f"| {'fixed' if r['lane'].endswith('fixed') else 'lognormal'} | {r['clients']:,}{note} | "
            f"{r['thr'][0]:,.0f} / {r['thr'][1]:,.0f} | {r['tpot'][0]:.1f} / {r['tpot'][1]:.1f} | "
            f"{r['ttft'][0]:,.0f} / {r['ttft'][1]:,.0f} | {r['pre'][0]:,} / {r['pre'][1]:,} | "
            f"{100 * r['kv'][0]:.0f}% / {100 * r['kv'][1]:.0f}% |"
        )
    print(f"wrote {out / 'recorded_kv_waves.png'}, {out / 'recorded_sweep.png'}", file=sys.stderr)
    return 0


# The collapse case was recorded on two cloud machines of the same kind (one H100 of a 2 x H100 host):
# first with a second server beside it on the host's other GPU, then again, lane by lane, alone.
COLLAPSE_RECORDINGS = ("h100x2_alone_2026-11-28", "h100x2_collapse_2026-11-27")


def collapse(out: Path, plt) -> int:
    """The collapse case (scenarios/collapse_c*.yaml) as two H100 servers ran it, against servesim."""
    every = validate.load(validate.E2E_FILE)["runs"]
    alone, first = (
        sorted((r for r in every if r["recording"] == name), key=lambda r: r["arrival"]["max_concurrency"])
        for name in COLLAPSE_RECORDINGS
    )
    fig, axes = plt.subplots(1, len(alone), figsize=(15, 4.0), sharey=True)
    print(
        "| clients | output tok/s: server alone / first server / servesim | p50 TPOT ms | preemptions "
        "| peak KV usage | mean KV usage, busy |"
    )
    print("|---|---|---|---|---|---|")
    for ax, run, other in zip(axes, alone, first):
        res = simulate(validate.e2e_scenario(run))  # the same requests as ``other``'s: the same replay
        s, m, srv = summarize(res), run["measured"], run["server"]
        m1, srv1 = other["measured"], other["server"]
        t, kv = server_series(other)
        ax.plot(t, 100 * kv, color="0.6", lw=1.0, label="vLLM 0.26, first machine (a second server beside it)")
        kv_panel(ax, run, res, "#d62728", "vLLM 0.26, second machine (alone; /metrics once a second)")
        c = run["arrival"]["max_concurrency"]
        ax.set_title(
            f"{c:,} clients: {m['output_throughput']:,.0f} / {s['output_throughput']:,.0f} tok/s, "
            f"{srv['num_preemptions']:,} / {s['num_preemptions']:,} preemptions",
            fontsize=9,
        )
        ax.set_xlabel("seconds since the first request")
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        print(
            f"| {c:,} | {m['output_throughput']:,.0f} / {m1['output_throughput']:,.0f} / {s['output_throughput']:,.0f} | "
            f"{m['median_tpot_ms']:.1f} / {m1['median_tpot_ms']:.1f} / {s['median_tpot_ms']:.1f} | "
            f"{srv['num_preemptions']:,} / {srv1['num_preemptions']:,} / {s['num_preemptions']:,} | "
            f"{100 * srv['kv_usage_max']:.0f}% / {100 * srv1['kv_usage_max']:.0f}% / {100 * s['kv_cache_usage_max']:.0f}% | "
            f"{100 * srv['kv_usage_mean_busy']:.0f}% / {100 * srv1['kv_usage_mean_busy']:.0f}% / "
            f"{100 * s['kv_cache_usage_mean']:.0f}% |"
        )
    axes[0].set_ylabel("KV-cache usage (%)")
    axes[0].legend(fontsize=8, loc="upper right")
    fig.suptitle(
        "The collapse case on an H100 (Llama-3.1-8B, vLLM 0.26, two API servers, lognormal outputs): "
        "server alone on its host / servesim, same requests",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(out / "recorded_collapse_h100.png", dpi=110)
    plt.close(fig)
    print(f"wrote {out / 'recorded_collapse_h100.png'}", file=sys.stderr)
    return 0


# The recordings that swept max_num_seqs over 128-1,024 at 768 clients, each on its own machine, per
# GPU: the first (marker filled, servesim solid, the band drawn around it) and others recorded blind
# after every change (hollow, servesim dashed or dotted).
HOST_SWEEPS = {
    "h200": (("h200x4_2026-11-28", "o", "-"), ("h200_cpu13_2026-12-01", "s", "--")),
    "h100-sxm": (
        ("h100_cpu2_2026-12-05", "o", "-"),
        ("h100_cpu_2026-12-05", "s", "--"),
        ("h100_cpu3_2026-12-06", "^", ":"),
        ("h100_cpu4_2026-12-06", "D", "-."),
        ("h100_kv32_2026-12-06", "v", ":"),
        ("h100_cpu5_2026-12-06", "P", "--"),
    ),
}
# more H200 machines that ran the decode-heavy run three times at 512 and at 1,024, alternating: how
# far one server spreads from itself minutes apart (their marks only: servesim on their readings is in
# the table); the first under the stack sampler, the second as vLLM ships
HOST_REPEATS = {
    "h200": (
        ("h200_repeat_2026-12-02", "x", 1.08, "3 runs each on a third machine, sampled"),
        ("h200_repeat2_2026-12-04", "+", 1.17, "3 runs each on a fourth machine"),
        ("h200_drift_2026-12-04", "1", 0.92, "3 runs each at 128 and 512 on a fifth, alternating"),
    ),
    "h100-sxm": (),
}
GRID = [128, 256, 512, 1024]  # the max_num_seqs each figure's lines are simulated at


def _nearest(runs: list[dict], n: int) -> dict:
    """The run of ``runs`` whose max_num_seqs is nearest ``n`` (in ratio; the smaller of two as near)."""
    return min(runs, key=lambda r: abs(np.log2(r["engine"]["max_num_seqs"] / n)))


def _at(run: dict, n: int) -> dict:
    """``run`` with max_num_seqs ``n``."""
    return {**run, "engine": {**run["engine"], "max_num_seqs": n}}


# each GPU's figure: its file and how its title names the GPU
HOST_FIGURES = {"h200": ("recorded_host_sweep.png", "H200"), "h100-sxm": ("recorded_host_sweep_h100.png", "H100")}
LINE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}
HOST_KINDS = {
    ("kv", 1): ("KV-bound: 1,024 + 256 tokens, one API server", "#1f77b4"),
    ("decode", 1): ("decode-heavy: 64 + 1,024 tokens, one API server", "#d62728"),
    ("decode", 2): ("decode-heavy, two API servers", "#2ca02c"),
}


def host_sweep(out: Path, plt) -> int:
    """Each GPU's figure (``HOST_FIGURES``) and the markdown table of both."""
    print(
        "| host | run | max_num_seqs | tok/s server / servesim | p50 TPOT ms server / servesim "
        "| p50 TTFT ms server / servesim |"
    )
    print("|---|---|---|---|---|---|")
    for gpu in HOST_FIGURES:
        host_sweep_figure(out, plt, gpu)
    return 0


def _host_sweep_legend(fig, sweeps, repeats, kinds_drawn: dict[str, str]) -> None:
    """One legend under both panels: the kinds of run (colours), each machine (its mark and the line
    of servesim on its reading) and the repeated runs' marks."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", color=c, ls="none", ms=6, label=k) for k, c in kinds_drawn.items()]
    for i, (recording, marker, line) in enumerate(sweeps):
        mfc = "black" if i == 0 else "white"
        what = f"{recording}: its server (marks), servesim on its reading ({LINE_NAMES[line]})"
        handles.append(Line2D([], [], marker=marker, color="black", mfc=mfc, mew=1.5, ms=6, ls=line, label=what))
    color = HOST_KINDS[("decode", 1)][1]
    for recording, marker, _, what in repeats:
        label = f"decode-heavy, one API server: {what} ({recording})"
        handles.append(Line2D([], [], marker=marker, color=color, mew=1.4, ms=6, ls="none", label=label))
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=7.5, frameon=False)


def host_sweep_figure(out: Path, plt, gpu: str) -> None:
    """max_num_seqs swept on the recorded hosts of one GPU (768 clients, Llama-3.1-8B, one GPU each):
    the servers' output throughput and p50 TPOT against servesim's, servesim given each host's probe
    reading (as `servesim validate --recorded` replays it), with the band between the catalog's
    slowest and fastest host (a scenario that names no host; the first recording's runs); the
    figure, and the table's rows."""
    from simulator.scenario.hosts import band_hosts

    every = validate.load(validate.E2E_FILE)["runs"]
    slow, fast = band_hosts()
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.6))
    rows = []
    sweeps, repeats = HOST_SWEEPS[gpu], HOST_REPEATS[gpu]
    kinds_drawn: dict[str, str] = {}  # label -> color, in the order first drawn
    for i, (recording, marker, line) in enumerate(sweeps):
        # the machine's Llama-3.1-8B runs (h100_kv32_2026-12-06 ran Qwen3-32B's own sweep beside them)
        runs = [r for r in every if r["recording"] == recording and r["model"] == "llama-3.1-8b"]
        for (kind, api), (label, color) in HOST_KINDS.items():
            sel = sorted(
                (r for r in runs if r["run"] == kind and (r.get("frontend") or {}).get("api_server_count", 1) == api),
                key=lambda r: r["engine"]["max_num_seqs"],
            )
            if not sel:
                continue
            # servesim at every max_num_seqs of the grid, each from the nearest run this machine
            # recorded (its requests, its lane's reading), so that a line joins only simulated points
            seqs = [r["engine"]["max_num_seqs"] for r in sel]
            sims = [validate.e2e_scenario(_at(_nearest(sel, n), n)) for n in GRID]
            summaries = [summarize(simulate(sc)) for sc in sims]
            # the band: the first recording's scenarios on the slowest and fastest host, run once each
            band = [
                [summarize(simulate(x)) for x in on_band_hosts(sc)]  # (the replays name their host's reading)
                for sc in sims
            ] if i == 0 else []  # fmt: skip
            for ax, metric, scale in ((axes[0], "median_tpot_ms", 1.0), (axes[1], "output_throughput", 1e-3)):
                if band:
                    ends = [[b[metric] * scale for b in pair] for pair in band]
                    ax.fill_between(GRID, [min(e) for e in ends], [max(e) for e in ends], color=color, alpha=0.13, lw=0)
                ax.plot(GRID, [s[metric] * scale for s in summaries], line, color=color, lw=1.6)
                ax.plot(
                    seqs,
                    [r["measured"][metric] * scale for r in sel],
                    marker,
                    color=color,
                    mfc=color if i == 0 else "white",
                    mew=1.5,
                    ms=6,
                    ls="none",
                )
            kinds_drawn.setdefault(label, color)
            rows += [(recording, label, n, r, summaries[GRID.index(n)]) for n, r in zip(seqs, sel)]
    color = HOST_KINDS[("decode", 1)][1]
    for recording, marker, shift, _ in repeats:
        repeat = sorted(
            (r for r in every if r["recording"] == recording and r["lane"].startswith(("rep_", "drift_"))),
            key=lambda r: (r["engine"]["max_num_seqs"], r["lane"]),
        )
        for r in repeat:
            n, s = r["engine"]["max_num_seqs"], summarize(simulate(validate.e2e_scenario(r)))
            for ax, metric, scale in ((axes[0], "median_tpot_ms", 1.0), (axes[1], "output_throughput", 1e-3)):
                ax.plot([n * shift], [r["measured"][metric] * scale], marker, color=color, mew=1.4, ms=6)
            rows.append((f"{recording} ({r['lane']})", HOST_KINDS[("decode", 1)][0], n, r, s))
    for ax, title in zip(axes, ("p50 TPOT (ms)", "output throughput (k tokens/s)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(GRID, [f"{n:,}" for n in GRID])
        ax.set_xlabel("max_num_seqs (768 clients)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    _host_sweep_legend(fig, sweeps, repeats, kinds_drawn)
    machines = ("two", "three", "four", "five", "six", "seven", "eight")[len(sweeps) + len(repeats) - 2]
    name = HOST_FIGURES[gpu][1]
    fig.suptitle(
        f"Llama-3.1-8B on one {name}, {machines} machines: servesim on each host's probe reading; "
        f"shaded: from the fastest to the slowest catalog host (CPU x{fast.scale:.2f} to x{slow.scale:.2f})",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    out.mkdir(parents=True, exist_ok=True)
    path = out / HOST_FIGURES[gpu][0]
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}", file=sys.stderr)
    for recording, label, n, r, s in rows:
        m = r["measured"]
        print(
            f"| {recording} | {label} | {n:,} | {m['output_throughput']:,.0f} / {s['output_throughput']:,.0f} | "
            f"{m['median_tpot_ms']:.1f} / {s['median_tpot_ms']:.1f} | {m['median_ttft_ms']:,.0f} / {s['median_ttft_ms']:,.0f} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
