"""How fast a host's CPU runs the kind of Python a vLLM server spends its CPU time on.

A vLLM engine core and its API server do, for every running request and every step, a few dozen
attribute reads and writes, dict and list operations, a small object or dict made, a JSON chunk
encoded and an asyncio hand-off. This script runs a fixed, deterministic mix of those (``kernel``)
and reports microseconds per request-step:

- alone, one process: ``--repeat`` timings, then one pinned to each CPU in turn, and servesim's
  reading of them (``probe_us``: their tenth percentile, as ``servesim probe-host`` gives it);
- with 1, 2, 4, ... copies running at once, one process each (what a busy host leaves per process);
- two copies pinned to one core's two hardware threads, and to two separate cores, where the
  machine's topology says which CPUs share a core.

It also records what the machine says of itself (lscpu, /proc/cpuinfo, load). Nothing but the
standard library; run it with the Python the server uses:

    python3 tools/e2e/host_probe.py --out host.json

`--alone` stops after the first reading (lane.py's quick probe before and after each lane:
`--repeat 15 --alone`, about 5 s), and one more (``wide_ns``): nanoseconds per object to read a
field of each of a million small objects, in allocation order and in a shuffled order, the second
missing the CPU's caches. The kernel above fits in them; a machine whose neighbours crowd its caches
and memory may slow a server's many-request work and not the kernel (``h200_repeat2_2026-12-04``:
one machine's API server 1.7x slower a token within fifteen minutes, the reading unmoved), which
this reading is kept to tell. The numbers compare hosts with each other; they are not vLLM's costs.

`--watch SECONDS` reads the machine while a server runs (lane.py, beside every run from 2026-12-04):
every SECONDS, two timings of the kernel and one pass of each wide order (its million objects made
once), a CSV row each (``watch``), until it is stopped: whether the machine slows under a run as the
server does, where the reading alone, before and after, does not see it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from multiprocessing import get_context
from pathlib import Path

# The kernel is servesim's own (``servesim probe-host``), so a reading here and a user's compare
# directly; it imports nothing beyond the standard library, as the device's Python needs.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from simulator.commands.probe_host import N_REQ, STEPS, kernel, per_cpu, reading_of, samples_of


def _per_cpu_us() -> dict[str, float]:
    """One timing on each CPU in turn (``per_cpu``), keyed by the CPU's number as JSON keeps it."""
    return {str(c): round(v, 3) for c, v in per_cpu().items()}


def _timed(repeat: int, cpu: int | None = None) -> list[float]:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    kernel()  # warm
    return [kernel() for _ in range(repeat)]


WIDE_OBJECTS = 1 << 20  # a million objects, about 90 MB: far beyond a core's L2, a good part of a shared L3


def _wide_objects(n: int) -> tuple[list, list]:
    """``n`` small objects (lists of one int) in the order they were made, and the same in a fixed
    shuffled order."""
    import random

    objs = [[i] for i in range(n)]
    shuffled = objs[:]
    random.Random(0).shuffle(shuffled)
    return objs, shuffled


def _pass_ns(seq: list) -> float:
    """Nanoseconds per object of one pass summing the field of each object of ``seq``."""
    t = time.perf_counter()
    total = 0
    for o in seq:
        total += o[0]
    return (time.perf_counter() - t) / len(seq) * 1e9


def wide(repeat: int = 3, n: int = WIDE_OBJECTS) -> dict[str, float]:
    """Nanoseconds per object to sum a field of ``n`` small objects, in the order they were made and
    in a fixed shuffled order (the median of ``repeat`` passes each): the second waits on memory
    where the first streams it."""
    objs, shuffled = _wide_objects(n)
    out = {
        "in_order_ns": statistics.median(_pass_ns(objs) for _ in range(repeat)),
        "shuffled_ns": statistics.median(_pass_ns(shuffled) for _ in range(repeat)),
    }
    del objs, shuffled
    return {k: round(v, 2) for k, v in out.items()}


def _this_cpu() -> int:
    """The CPU this process last ran on (/proc/self/stat, field 39); -1 where unread."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2 :].split()[36])
    except (OSError, ValueError, IndexError):
        return -1


WATCH_COLUMNS = ("t", "kernel_us", "in_order_ns", "shuffled_ns", "cpu")  # watch's CSV


class _Stopped(Exception):
    """A watch's SIGTERM or SIGINT, raised where the watch is: a reading under way is dropped."""


def _stop(*_) -> None:
    raise _Stopped


def watch(out: str, every_s: float, n: int = WIDE_OBJECTS) -> None:
    """Until stopped (SIGTERM or SIGINT): every ``every_s`` seconds one CSV row to ``out`` (t: epoch
    seconds; the kernel's microseconds per request-step, the faster of two timings; nanoseconds per
    object of one pass over the wide objects in order and shuffled; the CPU it ran on). A stop ends it
    at once, dropping the reading under way (a row is written whole or not at all), so the lane that
    started it does not wait on a reading's seconds."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    try:
        with open(out, "w", buffering=1) as f:
            f.write(",".join(WATCH_COLUMNS) + "\n")  # first: a watch stopped while it warms leaves its header
            objs, shuffled = _wide_objects(n)
            kernel()  # warm
            while True:
                t0 = time.time()
                k = min(kernel(), kernel())
                row = f"{t0:.3f},{k:.4f},{_pass_ns(objs):.2f},{_pass_ns(shuffled):.2f},{_this_cpu()}\n"
                f.write(row)
                time.sleep(max(0.0, every_s - (time.time() - t0)))
    except _Stopped:
        pass


def _parallel(copies: int, repeat: int, cpus: list[int | None]) -> list[float]:
    ctx = get_context("fork")
    with ctx.Pool(copies) as pool:
        res = pool.starmap(_timed, [(repeat, cpus[i] if i < len(cpus) else None) for i in range(copies)])
    return [statistics.median(r) for r in res]


def _siblings(cpu: int) -> list[int]:
    path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return [cpu]
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def _sh(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout
    except Exception as e:  # a description of the machine, whatever fails
        return f"({e})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--label", default="", help="what this host is (free text, kept in the file)")
    ap.add_argument(
        "--watch", type=float, default=0.0, metavar="SECONDS", help="a row to --out every SECONDS until stopped (CSV)"
    )
    ap.add_argument("--alone", action="store_true", help="only the reading alone (no copies at once, no pinning)")
    ap.add_argument(
        "--per-cpu",
        type=int,
        default=0,
        metavar="PASSES",
        help="only PASSES passes of one timing pinned to each CPU in turn (data/e2e/host_probe_noise_2026-11-29)",
    )
    ap.add_argument(
        "--objects",
        type=int,
        default=WIDE_OBJECTS,
        help="the objects of the wide reading (wide_ns, and --watch's): a million by default (the tests take fewer)",
    )
    args = ap.parse_args()
    if args.objects < 1:
        ap.error(f"--objects must be at least 1 (got {args.objects})")
    if args.watch > 0:
        watch(args.out, args.watch, args.objects)
        return 0
    if args.per_cpu:
        passes = []
        for _ in range(args.per_cpu):
            passes.append({"t": time.time(), "per_cpu": _per_cpu_us()})
            print(passes[-1]["per_cpu"], flush=True)
        with open(args.out, "w") as f:
            json.dump({"model": _sh("grep -m1 'model name' /proc/cpuinfo").strip(), "passes": passes}, f, indent=1)
        return 0

    n = os.cpu_count() or 1
    report: dict = {
        "label": args.label,
        "python": sys.version,
        "platform": platform.platform(),
        "cpu_count": n,
        "lscpu": _sh("lscpu"),
        "model_name": _sh("grep -m1 'model name' /proc/cpuinfo"),
        "mhz": _sh("grep MHz /proc/cpuinfo | head -4"),
        "loadavg_before": _sh("cat /proc/loadavg"),
        "kernel": {"requests": N_REQ, "steps": STEPS},
    }
    alone = _timed(args.repeat)
    report["alone_us"] = alone
    report["alone_us_median"] = statistics.median(alone)
    print(f"alone: {report['alone_us_median']:.3f} us per request-step  (min {min(alone):.3f})", flush=True)
    # one timing on each CPU in turn: a shared machine's vCPUs can read 1.8x apart (host_probe_noise_2026-11-29)
    report["per_cpu_us"] = _per_cpu_us()
    # servesim's reading, as `servesim probe-host` gives it: the tenth percentile of every timing
    report["probe_us"] = reading_of(samples_of(report))
    print(f"reading: {report['probe_us']:.3f} us per request-step", flush=True)
    report["wide_ns"] = wide(min(3, args.repeat), args.objects)
    print(f"wide: {report['wide_ns']} ns per object", flush=True)
    if args.alone:
        report["loadavg_after"] = _sh("cat /proc/loadavg")
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        return 0
    scaling = {}
    k = 1
    while k <= n:
        per = _parallel(k, max(3, args.repeat // 2), [None] * k)
        scaling[k] = {"median_us": statistics.median(per), "max_us": max(per)}
        print(f"{k:3d} copies: median {scaling[k]['median_us']:.3f}, slowest {scaling[k]['max_us']:.3f} us", flush=True)
        k = k * 2 if k * 2 <= n or k == n else n
    report["parallel"] = scaling
    sib = _siblings(0)
    report["cpu0_siblings"] = sib
    if len(sib) > 1:
        far = next((c for c in range(1, n) if c not in sib), None)
        pair_same = _parallel(2, args.repeat, [sib[0], sib[1]])
        report["pinned_same_core_us"] = pair_same
        print(f"two copies on one core's threads {sib[:2]}: {pair_same}", flush=True)
        if far is not None:
            pair_apart = _parallel(2, args.repeat, [0, far])
            report["pinned_two_cores_us"] = pair_apart
            print(f"two copies on cores 0 and {far}: {pair_apart}", flush=True)
    report["loadavg_after"] = _sh("cat /proc/loadavg")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
