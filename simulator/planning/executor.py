"""Where the points of a sweep or a plan run: local processes (the default) or a Ray cluster.

``run_tasks(fn, items, ...)`` calls ``fn(item)`` for every item and yields ``(index, result)`` as
each finishes, in completion order. ``fn`` must be a top-level function that never raises (it
returns ``{"error": ...}`` for a failing item), so one bad point never stops the others; a worker
that dies is reported the same way. Both executors run the same function on the same inputs, and
every run is deterministic, so where a point ran never changes its result.

- ``local``: a pool of ``jobs`` processes on this machine (all cores by default).
- ``ray``: tasks on a Ray cluster (``pip install "servesim[ray]"``): ``address=None`` starts a private
  local one with ``jobs`` worker processes (``LOCAL_RAY``), shut down and its folder removed after;
  ``address="auto"`` or ``"ray://head:10001"`` joins an existing cluster, where every node must have
  servesim installed at the same version.

``Progress`` (``simulator.progress``) is the bar a person follows: points done, failures, time left.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import TypeVar

from simulator.errors import ConfigError, missing_extra
from simulator.outputs.background import cores
from simulator.progress import Progress

EXECUTORS = ("local", "ray")
_T = TypeVar("_T")  # an item given to a task
__all__ = ["EXECUTORS", "Progress", "check_executor", "cores", "run_tasks"]


def run_tasks(
    fn: Callable[[_T], dict], items: list[_T], jobs: int = 0, executor: str = "local", address: str | None = None
) -> Generator[tuple[int, dict], None, None]:
    """``(i, fn(items[i]))`` for every item, as they finish (see the module docstring). Closing the
    generator early (an interrupt) cancels what has not started."""
    check_executor(executor)
    if not items:
        return
    if executor == "ray":
        yield from _ray_tasks(fn, items, jobs, address)
        return
    ex = ProcessPoolExecutor(max_workers=max(1, min(jobs or cores(), len(items))), initializer=_leave_interrupts)
    futs = {ex.submit(fn, item): i for i, item in enumerate(items)}
    pending = set(futs)
    try:
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                try:
                    r = f.result()
                except Exception as e:  # the worker process itself died
                    r = {"error": f"{type(e).__name__}: {e}"}
                yield futs[f], r
    finally:
        workers = list((getattr(ex, "_processes", None) or {}).values())  # (the pool's own record of them)
        ex.shutdown(wait=False, cancel_futures=True)
        if pending:  # closed early (an interrupt): nothing may finish after the caller has counted
            _stop(workers)


def check_executor(executor: str) -> None:
    """``executor`` is one servesim has and can use here (Ray installed for ``ray``); else one line,
    before any work."""
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor must be one of {', '.join(EXECUTORS)} (got {executor!r})")
    if executor == "ray":
        try:
            import ray  # noqa: F401
        except ImportError:
            raise missing_extra("--executor ray", "Ray", "ray") from None


def _leave_interrupts() -> None:
    """In a local worker: Ctrl-C is for the command, which stops the workers itself (a worker that
    took it would go on to the next queued item and finish it after the command had counted)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop(workers: list) -> None:
    """End the worker processes now, their items unfinished, and wait until they are gone."""
    for w in workers:
        w.terminate()
    for w in workers:
        w.join(timeout=10)


# A private local Ray cluster: a fresh one however many run on the machine (``address="local"``,
# its own session folder, so it never joins or collides with another's), no dashboard, and an
# object store sized for what the points pass (scenarios in, summaries out), not 30% of memory.
LOCAL_RAY = {"include_dashboard": False, "object_store_memory": 100 * 2**20}


def _ray_tasks(fn, items: list, jobs: int, address: str | None) -> Iterator[tuple[int, dict]]:
    try:
        import ray
    except ImportError:
        raise missing_extra("--executor ray", "Ray", "ray") from None
    started = not ray.is_initialized()
    scratch = None
    if started:
        if address:
            kw: dict = {"address": address}
        else:  # a private cluster of its own, whatever else runs on the machine (see LOCAL_RAY)
            scratch = tempfile.mkdtemp(prefix="servesim-ray-")
            kw = {"address": "local", "num_cpus": jobs or cores(), **LOCAL_RAY, "_temp_dir": scratch}
        # The workers import servesim as this process does (same interpreter, same checkout).
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}}
        try:
            ray.init(log_to_driver=False, runtime_env=env, **kw)
        except Exception as e:  # an address that does not answer, a client package missing, ...
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            raise ConfigError(f"--executor ray: cannot start or join {where}: {_first_line(e)}") from None
    pending: list = []
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = {remote.remote(item): i for i, item in enumerate(items)}
        pending = list(refs)
        while pending:
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                try:
                    r = ray.get(ref)
                except Exception as e:  # the task's worker died
                    r = {"error": f"{type(e).__name__}: {e}"}
                yield refs[ref], r
    finally:
        for ref in pending:  # closed early (an interrupt): nothing may finish after the caller has counted
            ray.cancel(ref, force=True)
        if started:
            ray.shutdown()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
