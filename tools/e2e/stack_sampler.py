"""Where a vLLM server's Python processes spend their time: a stack sampler (standard library only).

Installed as ``sitecustomize.py`` on the device's PYTHONPATH (``device.sh sampler``), it starts in
every Python process of a lane (the API server, the engine core, the benchmark client) when
``SERVESIM_SAMPLE_DIR`` is set. A daemon thread wakes every ``SERVESIM_SAMPLE_MS`` (default 2 ms;
it runs when the GIL lets it, so a thread that holds the GIL in native code is seen when it lets
go) and counts, for every other thread, the stack it is in (file:function per frame, innermost
first, 40 frames at most). Every ``SERVESIM_SAMPLE_WINDOW_S`` (default 10 s) it writes the window's counts, each thread's CPU seconds
(from /proc) and the time spent in the cyclic garbage collector (``gc.callbacks``) to
``$SERVESIM_SAMPLE_DIR/<pid>-<window>.json``. tools/e2e/profile_report.py reads them.

With ``SERVESIM_STALL_S`` set (seconds), it also writes what a process does during a pause, to
``$SERVESIM_SAMPLE_DIR/<pid>-stalls.txt``, timestamped (epoch seconds): a thread whose stack stays
the same for that long (waiting for the GPU, a lock, a queue) is written once with how long it
stayed, and where the sampler itself could not run for that long (a thread holding the GIL in native
code) a line says how late it woke. With ``SERVESIM_STALL_DUMP_AFTER_S`` also set, from that many
seconds after sampling starts ``faulthandler``'s watchdog, re-armed at every sample, writes every
thread's Python stack from C while such a pause lasts. Arm it only once the server serves: a dump
taken while torch.compile traces the model killed vLLM's engine core (the first try of
``gptoss_stall_h200``). ``SERVESIM_SAMPLE_AFTER_S`` holds the whole sampler back that many seconds
after the process starts: sampled while it starts, the same engine core estimated its CUDA graphs'
memory at 5.72 GiB where it had estimated 0.82 unsampled, and had no memory left for the KV cache.
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import sys
import threading
import time

DEPTH = 40


def _frame_key(f) -> str:
    c = f.f_code
    return f"{os.path.basename(c.co_filename)}:{c.co_name}"


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each of this process's threads, by thread id (Linux)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    base = f"/proc/{os.getpid()}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{base}/{tid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[tid] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


class StackSampler(threading.Thread):
    def __init__(self, out_dir: str, every_s: float, window_s: float) -> None:
        super().__init__(name="stack-sampler", daemon=True)
        self.out_dir = out_dir
        self.every_s = every_s
        self.window_s = window_s
        self.counts: dict[tuple[str, str], int] = {}
        self.gc_s = 0.0
        self.gc_runs = [0, 0, 0]
        self._gc_t0 = 0.0
        self.window = 0
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self.gc_s += time.perf_counter() - self._gc_t0
            self.gc_runs[info.get("generation", 0)] += 1

    def run(self) -> None:
        time.sleep(float(os.environ.get("SERVESIM_SAMPLE_AFTER_S", "0") or 0))
        me = threading.get_ident()
        t_win = time.time()
        stall_s = float(os.environ.get("SERVESIM_STALL_S", "0") or 0)
        trail = StallTrail(self.out_dir, stall_s) if stall_s > 0 else None
        while True:
            if trail:
                trail.arm()
            time.sleep(self.every_s)
            names = {t.ident: t.name for t in threading.enumerate()}
            now = time.time()
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                keys = []
                f = frame
                while f is not None and len(keys) < DEPTH:
                    keys.append(_frame_key(f))
                    f = f.f_back
                name = names.get(ident, str(ident))
                k = (name, "|".join(keys))
                self.counts[k] = self.counts.get(k, 0) + 1
                if trail:
                    trail.see(name, k[1], frame.f_lineno, now)
            if trail:
                trail.woke(now, self.every_s)
            if now - t_win >= self.window_s:
                self.dump(t_win, now)
                t_win = now

    def dump(self, t0: float, t1: float) -> None:
        rec = {
            "pid": os.getpid(),
            "argv": sys.argv[:6],
            "t0": t0,
            "t1": t1,
            "gc_s": self.gc_s,
            "gc_runs": self.gc_runs,
            "thread_cpu_s": _thread_cpu(),
            "native_ids": {t.name: t.native_id for t in threading.enumerate()},
            "stacks": [[n, s, c] for (n, s), c in self.counts.items()],
        }
        self.counts, self.gc_s, self.gc_runs = {}, 0.0, [0, 0, 0]
        path = os.path.join(self.out_dir, f"{os.getpid()}-{self.window:05d}.json")
        self.window += 1
        try:
            with open(path, "w") as fh:
                json.dump(rec, fh)
        except OSError:
            pass


class StallTrail:
    """A process's pauses: threads whose stack stays put, and the sampler's own late wake-ups."""

    def __init__(self, out_dir: str, stall_s: float) -> None:
        self.stall_s = stall_s
        after = os.environ.get("SERVESIM_STALL_DUMP_AFTER_S")
        self.dump_from = time.time() + float(after) if after else float("inf")
        self.fh = open(os.path.join(out_dir, f"{os.getpid()}-stalls.txt"), "a", buffering=1)  # noqa: SIM115 (held open: faulthandler writes to it)
        self.fh.write(f"# pid {os.getpid()} argv {sys.argv[:6]} stall_s {stall_s}\n")
        self.since: dict[str, tuple[str, int, float, bool]] = {}
        self.last = time.time()

    def arm(self) -> None:
        self.fh.flush()
        if time.time() >= self.dump_from:
            faulthandler.dump_traceback_later(self.stall_s, repeat=True, file=self.fh)

    def see(self, name: str, stack: str, line: int, now: float) -> None:
        prev = self.since.get(name)
        if prev and prev[0] == stack and prev[1] == line:
            if not prev[3] and now - prev[2] >= self.stall_s:
                self.fh.write(f"{prev[2]:.3f} still {name} since then, {now - prev[2]:.2f} s: {stack}:{line}\n")
                self.since[name] = (stack, line, prev[2], True)
            return
        if prev and prev[3]:
            self.fh.write(f"{now:.3f} moved {name} after {now - prev[2]:.2f} s\n")
        self.since[name] = (stack, line, now, False)

    def woke(self, now: float, every_s: float) -> None:
        late = now - self.last - every_s
        if late >= self.stall_s:
            self.fh.write(f"{now:.3f} sampler woke {late:.2f} s late (a thread held the GIL)\n")
        self.last = now


def start() -> None:
    out = os.environ.get("SERVESIM_SAMPLE_DIR")
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    every_s = float(os.environ.get("SERVESIM_SAMPLE_MS", "2")) / 1e3
    StackSampler(out, every_s, float(os.environ.get("SERVESIM_SAMPLE_WINDOW_S", "10"))).start()


def _after_fork() -> None:  # a forked child has no sampler thread: start its own
    for cb in list(gc.callbacks):
        if getattr(cb, "__self__", None).__class__.__name__ == "StackSampler":
            gc.callbacks.remove(cb)
    start()


start()
os.register_at_fork(after_in_child=_after_fork)
if os.environ.get("SERVESIM_STALL_S"):  # a forked child must not inherit an armed watchdog
    os.register_at_fork(before=faulthandler.cancel_dump_traceback_later)
