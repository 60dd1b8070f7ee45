"""Where a vLLM server's Python processes spend their time: a stack sampler (standard library only).

Installed as ``sitecustomize.py`` on the device's PYTHONPATH (``device.sh sampler``), it starts in
every Python process of a lane (the API server, the engine core, the benchmark client) when
``SERVESIM_SAMPLE_DIR`` is set. A daemon thread wakes every ``SERVESIM_SAMPLE_MS`` (default 2 ms;
it runs when the GIL lets it, so a thread that holds the GIL in native code is seen when it lets
go) and counts, for every other thread, the stack it is in (file:function per frame, innermost
first, 40 frames at most). Every ``SERVESIM_SAMPLE_WINDOW_S`` (default 10 s) it writes the window's counts, each thread's CPU seconds
(from /proc) and the time spent in the cyclic garbage collector (``gc.callbacks``) to
``$SERVESIM_SAMPLE_DIR/<pid>-<window>.json``. tools/e2e/profile_report.py reads them.
"""

from __future__ import annotations

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
        me = threading.get_ident()
        t_win = time.time()
        while True:
            time.sleep(self.every_s)
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                keys = []
                f = frame
                while f is not None and len(keys) < DEPTH:
                    keys.append(_frame_key(f))
                    f = f.f_back
                k = (names.get(ident, str(ident)), "|".join(keys))
                self.counts[k] = self.counts.get(k, 0) + 1
            now = time.time()
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
