"""A progress bar for runs long enough to wait for (tqdm), on a terminal only.

The engine calls the bar with the simulated time and the requests done after each of its calls; the
bar appears once a run has taken ``after_s`` seconds of wall time (short runs print nothing, and
tqdm is not even imported) and shows simulated seconds against the run's length, or requests
against the number asked for.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any


class RunProgress:
    def __init__(self, label: str, until: float | None, expected: int | None, after_s: float = 2.0) -> None:
        self.label, self.until, self.expected = label, until, expected
        self.after_s = after_s
        self.t0 = time.perf_counter()
        self.bar: Any = None  # a tqdm bar, once shown
        self.calls = 0
        self.shown = 0.0
        self.enabled = sys.stderr.isatty() or bool(os.environ.get("SERVESIM_PROGRESS"))

    def __call__(self, now: float, done: int) -> None:
        self.calls += 1
        if not self.enabled or self.calls & 63:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.after_s:
                return
            from tqdm import tqdm

            by_time = self.until is not None
            self.bar = tqdm(
                total=self.until if by_time else self.expected,
                desc=self.label,
                leave=False,
                unit=" sim s" if by_time else " requests",
                dynamic_ncols=True,
                mininterval=0.5,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:,.0f}/{total:,.0f}{unit} [{elapsed}<{remaining}]",
            )
        value = now if self.until is not None else done
        if value <= self.shown:  # (the replicas of a fleet report in turn, not in time order)
            return
        self.bar.update(value - self.shown)
        self.shown = value

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


COMPILE_ESTIMATE = "about 2-3 minutes on a 2-core machine"  # measured: 2-2.5 min with the cores shared


def compile_step() -> None:
    """Compile the engine step now if this installation has not yet (the first simulation after
    installing or upgrading), saying so first: how long it takes and where it is kept. Commands
    call it once their inputs are checked, before their first simulation."""
    from simulator.engine import compiled

    if not compiled.first_compile_note():
        return
    where = compiled.extension_path().parent
    print(
        f"compiling the engine step: once after installing or upgrading servesim, {COMPILE_ESTIMATE}; "
        f"kept in {where}/ (SERVESIM_CACHE_DIR moves it) ...",
        file=sys.stderr,
        flush=True,
    )
    t0 = time.perf_counter()
    compiled.load()
    print(f"compiled the engine step in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
