"""The plotting child forked at a command's start (simulator/outputs/background.py) never holds the
command up: a child that got no work is ended even when a process forked after it (the host band's
runs) still holds the other end of its pipe."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from simulator.outputs import background


@pytest.mark.skipif(not hasattr(os, "fork") or background.cores() < 2, reason="the child is forked only with 2 cores")
def test_a_child_that_got_no_work_is_ended_though_a_later_fork_holds_its_pipe(monkeypatch):
    monkeypatch.delenv("SERVESIM_PLOTS_INLINE", raising=False)
    plots = background.BackgroundPlots()
    assert plots.pid
    holder = os.fork()  # as the band's pool does: it inherits the pipe's write end and lives on
    if holder == 0:
        time.sleep(60)
        os._exit(0)
    child = plots.pid
    try:
        closing = threading.Thread(target=plots.close, daemon=True)
        closing.start()
        closing.join(10)  # it waited forever for the child, which waited for end-of-file
        assert not closing.is_alive() and plots.pid == 0
    finally:
        for pid in (holder, child):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.waitpid(holder, 0)
