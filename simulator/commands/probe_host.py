"""``servesim probe-host``: how fast this machine's CPU runs the kind of Python a vLLM server spends
its CPU time on, as one number a scenario can carry (``hardware.host: {probe_us: X}``).

A vLLM engine core and its API server do, for every running request and every step, a few dozen
attribute reads and writes, dict and list operations, a small object made, a JSON chunk encoded and
an asyncio hand-off. ``kernel`` runs a fixed, deterministic mix of those and times it in microseconds
per request-step: ``--repeat`` timings after one to warm up, then one on each CPU in turn; the
reading is the tenth percentile of them all (``reading_of``). Every host
servesim was measured on carries the same reading (``simulator/data/hosts.yaml``; the recorder takes
it before and after every lane, ``tools/e2e/host_probe.py``), so a user's reading and theirs compare
directly.

Nothing here imports anything beyond the standard library, so on a GPU server without servesim
installed, this one file runs on its own: ``python3 probe_host.py`` (add ``--json`` for the
machine's own description). Run it on the idle server, with the Python that serves.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where the probe runs: every other command starts without it)
    import asyncio

N_REQ = 512  # requests in flight in the kernel's batch
STEPS = 150  # steps per timing
REPEAT = 15


class _Req:
    __slots__ = ("blocks", "computed", "finished", "rid", "text", "tokens")

    def __init__(self, rid: int):
        self.rid = f"cmpl-{rid:08x}"
        self.tokens = [rid & 0xFFFF] * 32
        self.computed = 32
        self.blocks = [rid * 4 + i for i in range(2)]
        self.finished = False
        self.text = ""


def _step(reqs: list[_Req], free: list[int], chunks: list[str]) -> None:
    """One engine step and its streaming, for every request: schedule, append a token, make the
    output, encode the chunk."""
    scheduled: dict[str, int] = {}
    for r in reqs:  # schedule: one new token each, a block when the last one is full
        if r.computed % 16 == 0:
            r.blocks.append(free.pop() if free else 0)
        scheduled[r.rid] = 1
    outputs = []
    for r in reqs:  # update from the model's output
        r.computed += scheduled[r.rid]
        tok = (r.computed * 2654435761 + len(r.blocks)) & 0xFFFF
        r.tokens.append(tok)
        r.finished = len(r.tokens) > 10_000
        outputs.append((r.rid, tok, r.finished))
    for rid, tok, fin in outputs:  # the API server: detokenize (a stand-in) and stream
        piece = "w" + str(tok)
        chunks.append(
            "data: "
            + json.dumps(
                {
                    "id": rid,
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": " " + piece, "finish_reason": "length" if fin else None}],
                }
            )
            + "\n\n"
        )


async def _handoff(n: int) -> int:
    """The asyncio side: each request's output put on its queue and taken by its handler."""
    import asyncio

    queues: list[asyncio.Queue] = [asyncio.Queue() for _ in range(64)]
    got = 0

    async def consumer(q: asyncio.Queue) -> None:
        nonlocal got
        while True:
            item = await q.get()
            if item is None:
                return
            got += 1

    tasks = [asyncio.ensure_future(consumer(q)) for q in queues]
    for i in range(n):
        queues[i % 64].put_nowait(i)
        if i % 256 == 255:
            await asyncio.sleep(0)
    for q in queues:
        q.put_nowait(None)
    await asyncio.gather(*tasks)
    return got


def kernel() -> float:
    """Microseconds per request-step of the mix (one timing)."""
    import asyncio

    reqs = [_Req(i) for i in range(N_REQ)]
    free = list(range(100_000))
    chunks: list[str] = []
    t0 = time.perf_counter()
    for _ in range(STEPS):
        _step(reqs, free, chunks)
        chunks.clear()
    asyncio.run(_handoff(N_REQ * STEPS))
    return (time.perf_counter() - t0) / (N_REQ * STEPS) * 1e6


def timings(repeat: int = REPEAT) -> list[float]:
    """``repeat`` timings of the kernel, after one to warm up."""
    kernel()
    return [kernel() for _ in range(repeat)]


FAST = 0.1  # the reading's quantile of a reading's timings: the machine's speed when nothing slows it


def reading_of(samples: list[float]) -> float:
    """The probe's reading from its timings (microseconds per request-step, serial and per CPU
    together): their tenth percentile, the speed the machine gives a process when nothing slows it.
    On the shared cloud machines servesim was recorded on, a reading's timings came in two speeds,
    about 4 and 8 us, mixed differently from one minute to the next, while their servers ran at the
    fast one: a median read up to twice slow (one machine 8.1 us while its server ran as fast as its
    siblings, read at 3.9). Replayed on their tenth percentiles, 11 of the 16 probed recordings are
    within 10% in median throughput and p50 TPOT, against 9 on their medians (docs/hosts.md)."""
    ordered = sorted(samples)
    return ordered[int(len(ordered) * FAST)]


def samples_of(report: dict) -> list[float]:
    """Every timing of a reading's report (``--json``'s, or tools/e2e/host_probe.py's): the serial
    ones and the per-CPU pass."""
    serial = report.get("timings_us") or report.get("alone_us") or []
    return [*serial, *(report.get("per_cpu_us") or {}).values()]


CPU_PASS = 16  # CPUs the per-CPU pass reads (spread evenly over the machine's), one timing each


def per_cpu() -> dict[int, float]:
    """One timing pinned to each of up to ``CPU_PASS`` CPUs in turn (Linux; elsewhere nothing). On a
    shared virtual machine one vCPU can run this kernel 1.8x slower than another, and the same vCPU
    a few seconds apart (data/e2e/host_probe_noise_2026-11-29): a reading that stays on one CPU
    cannot show it."""
    if not hasattr(os, "sched_setaffinity"):
        return {}
    mine = sorted(os.sched_getaffinity(0))
    cpus = mine if len(mine) <= CPU_PASS else [mine[i * len(mine) // CPU_PASS] for i in range(CPU_PASS)]
    out = {}
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            out[cpu] = kernel()
    finally:
        os.sched_setaffinity(0, mine)
    return out


def _cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The fields of the first processor in ``path`` ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                if not line.strip():  # the first processor's block ends
                    break
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def _cpu_name(path: str = "/proc/cpuinfo") -> str:
    return _cpuinfo(path).get("model name") or platform.processor() or platform.machine()


def cpu_kind(vendor: str, family: str, model: str) -> str:
    """How servesim names a CPU's kind: its vendor and its family and model numbers as the kernel
    reports them (a cloud machine's model name is often no more than "Intel(R) Xeon(R) Processor");
    "" when any is unknown."""
    return f"{vendor} family {family} model {model}" if vendor and family and model else ""


def _cpu_kind(path: str = "/proc/cpuinfo") -> str:
    """This machine's CPU kind (``cpu_kind``), from the first processor of ``path``; an Arm CPU (a
    Grace, say), which names no vendor, family or model there, by its implementer and part numbers."""
    fields = _cpuinfo(path)
    if "vendor_id" not in fields and fields.get("CPU implementer") and fields.get("CPU part"):
        return f"Arm implementer {fields['CPU implementer']} part {fields['CPU part']}"
    return cpu_kind(fields.get("vendor_id", ""), fields.get("cpu family", ""), fields.get("model", ""))


def describe(values: list[float], cpus: dict[int, float] | None = None) -> dict:
    """The reading, the per-CPU pass (``per_cpu``) and what the machine says of itself."""
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    report = {
        "timings_us": [round(v, 4) for v in values],
        "per_cpu_us": {str(c): round(v, 4) for c, v in (cpus or {}).items()},
        "cpu": _cpu_name(),
        "cpu_kind": _cpu_kind(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "loadavg": [round(x, 2) for x in load],
    }
    return {"probe_us": round(reading_of(samples_of(report)), 4), **report}


def _context(probe_us: float) -> str:
    """Where the reading falls among the catalog's hosts (when servesim is installed)."""
    try:
        from simulator.scenario.hosts import catalog
    except ImportError:  # this file run on its own
        return ""
    cat = catalog()
    hosts = cat.by_speed()
    return (
        f"; CPU costs x{cat.scale(probe_us):.2f} against servesim's reference host (catalog hosts: "
        f"x{hosts[0].scale:.2f}-x{hosts[-1].scale:.2f})"
    )


def _unmeasured_cpu(kind: str) -> str:
    """A note when no machine servesim's hosts were measured on has a CPU of ``kind`` ("": it has one,
    the kind is unknown, or this file runs on its own)."""
    try:
        from simulator.scenario.hosts import cpu_kinds
    except ImportError:
        return ""
    kinds = cpu_kinds()
    if not kind or not kinds or kind in kinds:
        return ""
    seen = "; ".join(
        f"{k}: {len(v.get('catalog', []))} in the catalog, {len(v.get('held_out', []))} held out"
        for k, v in kinds.items()
    )
    return (
        f"note: no machine servesim was measured on has this CPU ({kind}; its machines: {seen}): the rule "
        "fitted on the catalog's turns the reading into host costs, unchecked on this kind; leave hardware.host "
        "out as well to see the whole host band"
    )


def _slowest_read() -> float | None:
    """The slowest idle reading of the catalog's probed hosts (None: this file run on its own)."""
    try:
        from simulator.scenario.hosts import catalog
    except ImportError:
        return None
    readings = [float(h["probe_us"]) for h in catalog().hosts.values() if h.get("probe_us")]
    return max(readings) if readings else None


def add_parser(sub) -> None:
    from simulator.commands.args import number  # servesim's own checked type (this file alone: a plain int)

    p = sub.add_parser(
        "probe-host",
        help="read this machine's CPU speed for serving (give it as hardware.host: {probe_us: X})",
    )
    _options(p, number("--repeat", int, least=1))
    p.set_defaults(fn=main)


def _options(p: argparse.ArgumentParser, repeat_type=int) -> None:
    p.add_argument("--json", action="store_true", help="the reading and what the machine says of itself, as JSON")
    p.add_argument(
        "--repeat",
        type=repeat_type,
        default=REPEAT,
        help=f"timings of the kernel before the per-CPU pass (default {REPEAT})",
    )


def main(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        print(f"error: --repeat must be >= 1 (got {args.repeat})", file=sys.stderr)
        return 2
    report = describe(timings(args.repeat), per_cpu())
    if args.json:
        print(json.dumps(report))
        return 0
    p = report["probe_us"]
    spread = max(report["timings_us"]) / min(report["timings_us"])
    n = len(samples_of(report))
    print(
        f"probe_us {p:.2f} (tenth percentile of {n} timings, spread x{spread:.2f}{_context(p)}): "
        f"set hardware.host: {{probe_us: {p:.2f}}}"
    )
    busy = report["loadavg"][0] > 0.5 * (report["cpu_count"] or 1)
    if busy or spread > 1.3:
        why = f"load {report['loadavg'][0]:.1f} on {report['cpu_count']} cores" if busy else f"spread x{spread:.2f}"
        print(f"note: the machine was busy while probed ({why}); read it again on the idle server")
    slowest = _slowest_read()
    if slowest is not None and p > slowest:
        print(
            f"note: slower than every probed host in servesim's catalog (the slowest read {slowest:.2f} us): a "
            "cloud machine can read slow for minutes while its server runs as fast as the others (one read "
            "4.5-8.2 us over twenty minutes, its server steady within 4%: data/e2e/h200_drift_2026-12-04); "
            "read it again a few minutes apart and give the fastest, or leave hardware.host out for the host band"
        )
    if note := _unmeasured_cpu(report["cpu_kind"]):
        print(note)
    cpus = list(report["per_cpu_us"].values())
    if len(cpus) > 1 and max(cpus) / min(cpus) > 1.3:
        print(
            f"note: its CPUs read {min(cpus):.2f}-{max(cpus):.2f} us one after another: a shared or throttled "
            "machine, whose speed moves with the CPU and the minute (an H200 cloud host read 4.3-8.9 us "
            "within a minute, data/e2e/host_probe_noise_2026-11-29); the reading is its fast end, where the "
            "servers recorded on such machines ran; leave hardware.host unset to see the whole host band"
        )
    return 0


if __name__ == "__main__":  # run on its own: python3 probe_host.py [--json]
    ap = argparse.ArgumentParser(prog="probe_host.py", description=__doc__.split("\n\n")[0])
    _options(ap)
    raise SystemExit(main(ap.parse_args()))
