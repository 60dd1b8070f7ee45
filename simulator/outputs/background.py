"""Draw a run's plots in a child process forked when the command starts.

Importing matplotlib and drawing two PNGs take longer than simulating a ten-minute run. Forked
before the parent imports anything heavy, the child imports matplotlib while the parent simulates,
then draws while the parent writes the CSV files: on a machine with a second core the plots cost
the user almost nothing. Where there is no fork, or a single core, or the child fails, the plots are
drawn in the calling process instead, so a run's outputs never depend on this.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class BackgroundPlots:
    """``draw(jobs)`` hands plots over, ``wait()`` returns once they are on disk; ``close()`` ends the
    child if no work ever came (use it as a context manager). ``fork=False``: draw in this process."""

    def __init__(self, fork: bool = True) -> None:
        self.pid = 0
        self._jobs: list = []
        self._jobs_w = self._status_r = -1
        self._sender: threading.Thread | None = None
        if not fork or not hasattr(os, "fork") or cores() < 2 or os.environ.get("SERVESIM_PLOTS_INLINE"):
            return
        jobs_r, jobs_w = os.pipe()
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: import matplotlib now, draw what the parent sends, report, exit
            try:
                os.close(jobs_w)
                os.close(status_r)
                status = b"ok"
                try:
                    from simulator.outputs import plots

                    with os.fdopen(jobs_r, "rb") as f:
                        jobs = pickle.load(f)
                    _draw_side_by_side(plots, jobs)
                except EOFError:  # the parent ended without sending any work
                    pass
                except BaseException as e:  # reported to the parent, which draws instead
                    status = f"{type(e).__name__}: {e}".encode()
                os.write(status_w, status)
            finally:  # whatever happens (the parent gone, its pipe closed), the child never returns
                os._exit(0)
        os.close(jobs_r)
        os.close(status_w)
        self.pid, self._jobs_w, self._status_r = pid, jobs_w, status_r

    def draw(self, jobs: list[tuple[str, tuple]]) -> None:
        """Hand the plots over (``(plots function name, args)`` pairs); ``wait`` for them. The pipe
        holds only a little: a thread writes them, so that this process goes on to its CSV files
        while the child may still be importing matplotlib."""
        self._jobs = jobs
        if self.pid:
            data = pickle.dumps(jobs, protocol=pickle.HIGHEST_PROTOCOL)
            fd, self._jobs_w = self._jobs_w, -1
            self._sender = threading.Thread(target=_send, args=(fd, data), daemon=True)
            self._sender.start()

    def __enter__(self) -> BackgroundPlots:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the child and reap it. One that never got work is stopped outright: a process forked
        since (the host band's runs) holds the pipe's other end too, so it might never see the end."""
        if self.pid:
            if self._jobs_w >= 0:
                os.close(self._jobs_w)
                self._jobs_w = -1
                os.kill(self.pid, signal.SIGKILL)
            os.close(self._status_r)
            os.waitpid(self.pid, 0)
            self.pid = 0

    def wait(self) -> None:
        """Return once the plots are on disk (drawing them here if the child could not)."""
        if self._sender is not None:
            self._sender.join()
            self._sender = None
        if self.pid:
            with os.fdopen(self._status_r, "rb") as f:
                status = f.read()
            os.waitpid(self.pid, 0)
            self.pid = 0
            if status == b"ok":
                return
            print(
                f"note: drawing the plots in the background failed ({status.decode() or 'no report'}); "
                "drawing them here",
                file=sys.stderr,
            )
        from simulator.outputs import plots

        for name, args in self._jobs:
            getattr(plots, name)(*args)


def _send(fd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``fd`` and close it (a child gone meanwhile: its status says so)."""
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BrokenPipeError:
        pass


def _draw_side_by_side(plots, jobs: list[tuple[str, tuple]]) -> None:
    """Draw ``jobs`` in this process and, for all but the last, in children forked now (matplotlib
    already imported, so a fork costs next to nothing); raises if one of them failed."""
    children = []
    for name, args in jobs[:-1]:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                getattr(plots, name)(*args)
                code = 0
            finally:
                os._exit(code)
        children.append((pid, name))
    for name, args in jobs[-1:]:
        getattr(plots, name)(*args)
    failed = [name for pid, name in children if os.waitpid(pid, 0)[1] != 0]
    if failed:
        raise RuntimeError(f"{', '.join(failed)} failed")
