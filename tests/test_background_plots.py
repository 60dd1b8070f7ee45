"""The plotting child forked at a command's start (simulator/outputs/background.py) never holds the
command up: a child that got no work is ended even when a process forked after it (the host band's
runs) still holds the other end of its pipe; it draws each plot in a process of its own, and what
fails there is drawn again in the command's process."""

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


@pytest.mark.skipif(not hasattr(os, "fork") or background.cores() < 2, reason="the child is forked only with 2 cores")
def test_the_child_draws_each_plot_in_a_process_of_its_own_and_a_failure_is_drawn_again_here(
    monkeypatch, tmp_path, capsys
):
    from simulator.outputs import plots as plot_functions

    monkeypatch.delenv("SERVESIM_PLOTS_INLINE", raising=False)
    parent = os.getpid()

    def fake_plot(path, fail_away_from_parent=False):
        if fail_away_from_parent and os.getpid() != parent:
            raise ValueError("a plot that fails in the child")
        path.write_text(str(os.getpid()))

    monkeypatch.setattr(plot_functions, "fake_plot", fake_plot, raising=False)
    files = [tmp_path / f"{i}.txt" for i in range(3)]

    drawn = background.BackgroundPlots()  # forked now, the fake plot function in its copy of the module
    drawn.draw([("fake_plot", (f,)) for f in files])
    drawn.wait()
    pids = {int(f.read_text()) for f in files}
    assert len(pids) == 3 and parent not in pids  # three processes, none of them this one

    retried = background.BackgroundPlots()
    retried.draw([("fake_plot", (files[0], True)), ("fake_plot", (files[1],))])  # the first fails, away
    retried.wait()
    assert int(files[0].read_text()) == int(files[1].read_text()) == parent  # both drawn again here
    assert "drawing the plots in the background failed (RuntimeError: fake_plot failed)" in capsys.readouterr().err
