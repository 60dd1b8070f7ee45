"""Progress on long work (tqdm bars), on a terminal only (or with ``SERVESIM_PROGRESS=1``).

- ``RunProgress``: one run. The engine calls the bar with the simulated time and the requests done
  after each of its calls; the bar appears once a run has taken ``after_s`` seconds of wall time
  (short runs print nothing, and tqdm is not even imported) and shows simulated seconds (hours, for
  a run of three hours or more) against the run's length, or requests against the number asked for.
  ``labelled(label, position)`` names the bars of the runs made inside it and sets their line, for
  runs side by side in worker processes (a day plan's policies).
- ``Progress``: the items of a sweep, a plan or a validation (points, candidates, runs) done, with
  failures and time left; the per-item lines go above it.
- ``compile_step``: the compile of the engine step on a first run, announced.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from simulator.engine.compiled import COMPILE_ESTIMATE  # the first compile's estimate, said once

_LABEL: str | None = None  # (set by ``labelled``)
_POSITION = 0


def shown() -> bool:
    """Whether bars are drawn: on a terminal, or when ``SERVESIM_PROGRESS`` is set."""
    return sys.stderr.isatty() or bool(os.environ.get("SERVESIM_PROGRESS"))


@contextlib.contextmanager
def labelled(label: str, position: int = 0) -> Iterator[None]:
    """Runs made inside show their bar as ``label``, on line ``position`` (0: the first)."""
    global _LABEL, _POSITION
    before = _LABEL, _POSITION
    _LABEL, _POSITION = label, position
    try:
        yield
    finally:
        _LABEL, _POSITION = before


class RunProgress:
    def __init__(self, label: str, until: float | None, expected: int | None, after_s: float = 2.0) -> None:
        self.label, self.until, self.expected = _LABEL or label, until, expected
        self.position = _POSITION
        self.after_s = after_s
        self.t0 = time.perf_counter()
        self.bar: Any = None  # a tqdm bar, once shown
        self.calls = 0
        self.shown = 0.0
        self.enabled = shown()
        # A run of hours counts simulated hours (a day plan's policies), a shorter one seconds.
        self.scale = 3600.0 if until is not None and until >= 3 * 3600 else 1.0

    def __call__(self, now: float, done: int) -> None:
        self.calls += 1
        if not self.enabled or self.calls & 63:
            return
        if self.bar is None:
            if time.perf_counter() - self.t0 < self.after_s:
                return
            from tqdm import tqdm

            by_time = self.until is not None
            hours = self.scale > 1
            self.bar = tqdm(
                total=(self.until or 0.0) / self.scale if by_time else self.expected,
                desc=self.label,
                leave=False,
                position=self.position,
                unit=(" simulated h" if hours else " sim s") if by_time else " requests",
                dynamic_ncols=True,
                mininterval=0.5,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                + ("{n:,.1f}/{total:,.0f}" if hours else "{n:,.0f}/{total:,.0f}")
                + "{unit} [{elapsed}<{remaining}]",
            )
        value = now / self.scale if self.until is not None else done
        if value <= self.shown:  # (the replicas of a fleet report in turn, not in time order)
            return
        self.bar.update(value - self.shown)
        self.shown = value

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class Progress:
    """A bar of items done (``unit``: " points", " runs") with failures and time left, under the
    per-item lines."""

    def __init__(self, total: int, label: str, unit: str = " points") -> None:
        self.failed = 0
        self.bar = None
        if shown():
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                desc=label,
                unit=unit,
                dynamic_ncols=True,
                file=sys.stderr,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n}/{total}{unit}{postfix} [{elapsed}<{remaining}]",
            )

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(text, flush=True)

    def done(self, failed: bool) -> None:
        self.failed += failed
        if self.bar is not None:
            if failed:
                self.bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


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
