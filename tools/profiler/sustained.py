"""``--mode sustained``: minutes of the same work back to back, with nvidia-smi's clocks, power,
temperature and throttle reasons beside the rate: whether power and heat pull it down over a long
burst."""

from __future__ import annotations

import datetime as _dt
import subprocess
import time
from pathlib import Path

from tools.profiler.common import capture, csv_out, free_memory, measure_device, run_meta, warm_up, write_json

SUSTAINED_COLUMNS = (
    "gpu",
    "workload",
    "t_s",
    "replays",
    "ms_per_replay",
    "tflops",
    "gbps",
    "sm_clock_mhz",
    "power_w",
    "temp_c",
    "throttle_reasons",
)
# The linear layers of one Qwen3-14B layer (out, in): fused QKV, output, fused gate/up, down.
SUSTAINED_LAYER = ((7168, 5120), (5120, 5120), (34816, 5120), (5120, 17408))
SUSTAINED_LAYERS = 40


def _smi_sampler(path: Path):
    """nvidia-smi sampling the SM clock, power, temperature and throttle reasons every 500 ms
    into ``path`` (the process; stop it with ``terminate``)."""
    fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"
    fh = path.open("w")
    return subprocess.Popen(
        ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-lms", "500", "-i", "0"],
        stdout=fh,
        stderr=subprocess.DEVNULL,
    )


def _smi_samples(path: Path) -> list[tuple[float, str, str, str, str]]:
    """(epoch seconds, SM MHz, W, deg C, throttle mask) rows of a ``_smi_sampler`` file."""
    rows = []
    for line in path.read_text().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            t = _dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue
        rows.append((t, parts[1], parts[2], parts[3], parts[4]))
    return rows


def run_sustained(torch, args) -> int:
    """The same work replayed back to back for minutes, as a long burst keeps a serving GPU busy:
    does the rate hold, or do power and heat pull the clocks down? Two workloads, each a CUDA
    graph: ``prefill`` (the linear layers of a 40-layer Qwen3-14B step of 8,192 tokens,
    compute-bound) and ``decode`` (the same layers at 64 tokens over distinct weight copies,
    bandwidth-bound). A row per window of replays, with nvidia-smi's readings of the moment."""
    dev = measure_device(torch)
    torch.cuda.set_device(dev)
    seconds = {"prefill": 20.0 if args.quick else float(args.budget_s or 150.0), "decode": 10.0 if args.quick else 40.0}
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    smi_path = out_path.with_name(out_path.name + ".smi.tmp")
    meta_path = out_path.with_name(out_path.name + ".meta.json")
    meta = run_meta(
        torch,
        args,
        "sustained",
        method="prefill: x[8192, in] W[out, in]^T for the four linear layers of Qwen3-14B, 40 "
        "layers (one set of weights, random N(0, 0.02) bf16; x random), one CUDA graph "
        "per step; decode: the same at 64 tokens over 40 distinct weight copies (HBM-bound). "
        "Replayed back to back; a row per window of replays timed with CUDA events "
        "(window about 1 s); nvidia-smi sampled every 500 ms, the sample nearest the "
        "window's end joined.",
        seconds=seconds,
        columns=list(SUSTAINED_COLUMNS),
    )
    write_json(meta_path, meta)
    smi = _smi_sampler(smi_path)
    rows = []
    try:
        with torch.inference_mode():
            for workload in ("prefill", "decode"):
                rows += _sustained_windows(torch, dev, workload, seconds[workload], args.gpu_name)
                time.sleep(5.0)  # let the clocks recover between workloads
    finally:
        smi.terminate()
        smi.wait()
    samples = _smi_samples(smi_path)
    fh, wr = csv_out(out_path, SUSTAINED_COLUMNS)
    with fh:
        for r in rows:
            t_end = r.pop()
            near = min(samples, key=lambda s: abs(s[0] - t_end)) if samples else ("", "", "", "", "")
            wr.writerow([*r, *near[1:]])
    meta["smi_samples"] = len(samples)
    write_json(meta_path, meta)
    smi_path.unlink(missing_ok=True)
    print(f"wrote {len(rows)} rows to {out_path}", flush=True)
    return 0


def _sustained_windows(torch, dev, workload: str, seconds: float, gpu_name: str) -> list[list]:
    """One workload's rows: its step captured in a CUDA graph and replayed in windows of about 1 s
    for ``seconds``. Each row ends with the window's end (epoch seconds), by which the caller joins
    the nvidia-smi sample nearest to it."""
    import torch.nn.functional as F

    tokens, copies = (8192, 1) if workload == "prefill" else (64, SUSTAINED_LAYERS)
    ws = [
        [torch.empty(o, i, device=dev, dtype=torch.bfloat16).normal_(0, 0.02) for o, i in SUSTAINED_LAYER]
        for _ in range(copies)
    ]
    xs = {i: torch.randn(tokens, i, device=dev, dtype=torch.bfloat16) for _, i in SUSTAINED_LAYER}
    flops = 2.0 * tokens * sum(o * i for o, i in SUSTAINED_LAYER) * SUSTAINED_LAYERS
    wbytes = 2.0 * sum(o * i for o, i in SUSTAINED_LAYER) * SUSTAINED_LAYERS

    def step(ws=ws, xs=xs):
        for layer in range(SUSTAINED_LAYERS):
            for w in ws[layer % len(ws)]:
                F.linear(xs[w.shape[1]], w)

    warm_up(torch, step)
    graph = capture(torch, step)
    graph.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    b.synchronize()
    per_window = max(1, int(1000.0 / max(a.elapsed_time(b), 1e-3)))
    rows = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        a.record()
        for _ in range(per_window):
            graph.replay()
        b.record()
        b.synchronize()
        ms = a.elapsed_time(b) / per_window
        rows.append(
            [
                gpu_name,
                workload,
                round(time.time() - t0, 3),
                per_window,
                f"{ms:.4f}",
                f"{flops / ms / 1e9:.1f}",
                f"{wbytes / ms / 1e6:.1f}",
                time.time(),
            ]
        )
    print(f"{workload}: {len(rows)} windows, first {rows[0][4]} ms, last {rows[-1][4]} ms", flush=True)
    del graph, ws, xs
    free_memory(torch)
    return rows
