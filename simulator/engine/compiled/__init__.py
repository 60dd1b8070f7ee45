"""The production engine step, compiled: the scheduler, block pool, prefix cache, cost model,
step-log row and ITL histogram of ``simulator/engine/reference/``, on arrays, many steps per call.

``layout.py`` the state; ``pool.py`` the free queue and prefix index; ``queues.py`` the waiting and
swapped queues; ``lazy.py`` the running slots (and decode slots kept lazily); ``schedule.py`` one
step's scheduling; ``update.py`` its end and the call loop; ``build.py`` compiles them;
``engine.py`` is the SimPy process that calls them. ``load()`` gives the two entry points.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

_loaded = None


def pure_python() -> bool:
    """``NUMBA_DISABLE_JIT=1``: run the step as plain Python (to debug it; very slow)."""
    return os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


def extension_path() -> Path:
    from simulator.engine.compiled import build

    return build.cache_dir() / f"servesim_step_{build.source_hash()}{importlib.machinery.EXTENSION_SUFFIXES[0]}"


# How long the first compile takes, as the notice says it (measured: 124 s on a 2-core machine
# whose probe read 12.6 us, a slow one; docs/speed.md).
COMPILE_ESTIMATE = "about 1-3 minutes on a 2-core machine, longer beside other work"


def first_compile_note() -> str:
    """A line to print before a run that will compile the step first; "" when it is ready."""
    if pure_python() or _loaded is not None or extension_path().exists():
        return ""
    return f"compiling the engine step (once after installing or upgrading; {COMPILE_ESTIMATE}) ..."


@contextlib.contextmanager
def _lock(path: Path, wait: bool = True):
    """Only one process compiles at a time (the others then find its result). Yields whether this
    process holds the lock: always after waiting for it, and without ``wait`` only if it was free."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks: processes may compile side by side; the rename is atomic
        yield True
        return
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def load():
    """The entry points (``build.ENTRY_POINTS``: ``advance(state)``, ``write_back_all(state)``,
    ``format_rows(...)``): from the compiled extension module (built on first use into the cache
    directory, keyed by the sources it is built from), else compiled just in time, or plain Python
    under ``NUMBA_DISABLE_JIT=1``. ``kind`` says which."""
    global _loaded
    if _loaded is not None:
        return _loaded
    from simulator.engine.compiled import build

    if pure_python():
        _loaded = SimpleNamespace(kind="python", **build.ENTRY_POINTS)
        return _loaded
    path = extension_path()
    if os.environ.get("SERVESIM_JIT"):  # skip the extension module (to exercise the fallback)
        _loaded = SimpleNamespace(kind="jit", **vars(build.jit_functions()))
        return _loaded
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock(path.parent / "build.lock"):
            if not path.exists():
                _build(path)
    try:
        mod = build.load_extension(path)
        _loaded = SimpleNamespace(kind="aot", **{name: getattr(mod, name) for name in build.ENTRY_POINTS})
    except (ImportError, OSError):
        _loaded = SimpleNamespace(kind="jit", **vars(build.jit_functions()))
    return _loaded


def start_build() -> subprocess.Popen | None:
    """Build the step in a child process, for a caller with other work to do meanwhile (the test
    runner, whose workers start on tests that need no step). Returns once the child holds the build
    lock, so that every process's ``load`` waits for its result; None when the step is built, or
    another process is building it (``load`` waits for that one)."""
    if pure_python() or os.environ.get("SERVESIM_JIT") or extension_path().exists():
        return None
    child = subprocess.Popen(
        [sys.executable, "-c", "from simulator.engine import compiled; compiled._build_locked()"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None  # a pipe, asked for above
    if child.stdout.readline().strip() != "locked":
        child.wait()
        return None
    return child


def _build_locked() -> None:
    """``start_build``'s child: take the lock without waiting, say so on stdout, then build."""
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped early: the temporary file goes
    path = extension_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path.parent / "build.lock", wait=False) as mine:
        print("locked" if mine else "busy", flush=True)
        os.dup2(2, 1)  # anything the build prints goes to stderr: nobody reads the pipe from here on
        if mine and not path.exists():
            _build(path)


def _prune(cache: Path, keep: int = 4) -> None:
    """Remove all but the ``keep`` most recent builds (other versions of the sources)."""
    builds = sorted(cache.glob("servesim_step_*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in builds[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def _build(path: Path) -> None:
    """Build the extension into a temporary name and move it into place; on failure (no C
    compiler, say) leave none, and ``load`` compiles just in time instead."""
    from simulator.engine.compiled import build
    from simulator.engine.compiled.state import example_state

    tmp = path.with_name(f".{os.getpid()}.{path.name}")
    try:
        build.build_extension(tmp, build.module_name(path), example_state())
        os.replace(tmp, path)
        _prune(path.parent)
    except Exception as e:
        print(
            f"note: could not build the compiled step ({type(e).__name__}: {e}); compiling it in-process",
            file=sys.stderr,
        )
    finally:
        if tmp.exists():
            tmp.unlink()
