"""Compile the step: the compiled step's plain-Python functions, with the rules and cost functions they
call, compiled by numba, ahead of time into an extension module (one import, no numba at run time)
or, where that cannot be built, just in time.

The functions are written once, as plain Python. Compiling one means compiling a copy of it whose
globals see the compiled copies of the others (``_compiled_copies``); the modules themselves are
left untouched, so the reference keeps calling the plain ``rules`` and ``cost`` functions. Each
function is typed and lowered once, on its own, and LLVM inlines it into its callers (numba's
``forceinline``) except those a module lists in ``COLD`` (rare paths): a call that passes the state
passes every field of every array in it, hundreds of values. Only the entry points get the wrappers
Python calls through. (numba's own inlining, ``inline="always"``, gives a step as fast but types
the whole step as one function: its build took 3.8x as long, benchmarks/RESULTS.md.) Run
with ``NUMBA_DISABLE_JIT=1`` and nothing is compiled: the step runs as plain Python, which a
debugger or a print can follow (``compiled.load``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine import cost, host, host_tier, params, rules
from simulator.engine.compiled import (
    adapters,
    clients,
    intake,
    layout,
    lazy,
    pool,
    queues,
    schedule,
    sglang,
    state,
    text,
    trace,
    update,
)
from simulator.scenario import limits

MODULES = (
    rules,
    host,
    cost,
    host_tier,
    trace,
    pool,
    queues,
    adapters,
    lazy,
    intake,
    clients,
    schedule,
    sglang,
    update,
    text,
)
SOURCES = (*MODULES, params, layout, state, limits, sys.modules[__name__])  # state: the array types it is compiled for
# What the engine and the result writer call: name -> the plain function.
ENTRY_POINTS: dict[str, Callable[..., object]] = {
    "advance": update.advance,
    "write_back_all": lazy.write_back_all,
    "tell": clients.tell,
    "format_rows": text.format_rows,
}


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """What the compiled module depends on: the step's sources, numba, numpy and Python."""
    h = hashlib.sha256()
    for m in SOURCES:
        assert m.__file__ is not None  # modules of this package, each from its file
        h.update(Path(m.__file__).read_bytes())
    h.update(f"{_numba_install()} {np.__version__} {sys.version} {target_cpu()} {_cpu()}".encode())
    return h.hexdigest()[:16]


def target_cpu() -> str:
    """The CPU the module is compiled for: this machine's (``host``, the default: its vector
    instructions), or a name LLVM knows (``SERVESIM_TARGET_CPU=generic`` for a module any x86-64 runs,
    e.g. under valgrind)."""
    return os.environ.get("SERVESIM_TARGET_CPU", "host")


def _cpu() -> str:
    """This machine's processor and instruction-set extensions: a module built for one host must not
    be loaded on another (a cache directory shared between machines, say) that lacks them."""
    try:
        with open("/proc/cpuinfo") as f:
            info = [line for line in f if line.startswith(("model name", "flags", "Features"))][:2]
        return "".join(info)
    except OSError:
        import platform

        return f"{platform.machine()} {platform.processor()}"


def _numba_install() -> str:
    """Which numba is installed, without importing it (or importlib.metadata: both slow to import):
    the name of its dist-info directory, which carries the version. Not where it is installed: two
    environments with the same numba, numpy and Python (a checkout's and its wheel's) share a build."""
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        return "no numba"
    pkg = Path(spec.origin).parent
    return f"{sorted(p.name for p in pkg.parent.glob('numba-*.dist-info'))}"


def _compiled_copies(njit) -> dict[str, Any]:
    """The entry points compiled: a compiled copy of every function of ``MODULES``, each seeing the
    compiled copies of the others."""
    compiled: dict[Callable[..., object], Any] = {}
    entry = set(ENTRY_POINTS.values())
    scopes = []
    for m in MODULES:
        scope = dict(vars(m))
        scopes.append(scope)
        cold = set(getattr(m, "COLD", ()))
        for name, fn in vars(m).items():
            if isinstance(fn, types.FunctionType) and fn.__module__ == m.__name__:
                copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
                internal = fn not in entry  # called only from compiled code: no wrapper for Python
                compiled[fn] = njit(
                    forceinline=name not in cold, no_cpython_wrapper=internal, no_cfunc_wrapper=internal
                )(copy)
    for scope in scopes:
        for name, obj in scope.items():
            if isinstance(obj, types.FunctionType) and obj in compiled:
                scope[name] = compiled[obj]
    return {name: compiled[fn] for name, fn in ENTRY_POINTS.items()}


def state_type(st: layout.State):
    """numba's type of a ``State`` (what the ahead-of-time entry points take)."""
    from numba import typeof

    return typeof(st)


def build_extension(path: Path, name: str, example: layout.State) -> None:
    """Compile the entry points ahead of time into the extension module ``name``, written to ``path``."""
    import warnings

    from numba import njit
    from numba.core.errors import NumbaPendingDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC

    fns = _compiled_copies(lambda **kw: njit(_nrt=False, **kw))  # type: ignore[call-overload]  # private _nrt
    st_t = state_type(example)
    cc = CC(name)
    cc.output_dir = str(path.parent)
    cc.output_file = path.name
    cc.target_cpu = target_cpu()
    cc.verbose = False
    cc.use_nrt = False  # the step allocates nothing: no reference counting on its arrays
    _export(cc, fns, st_t)


def _export(cc, fns, st_t) -> None:
    from numba import types as nt

    cc.export("advance", nt.int64(st_t))(fns["advance"].py_func)
    cc.export("write_back_all", nt.void(st_t))(fns["write_back_all"].py_func)
    cc.export("tell", nt.int64(st_t, nt.float64))(fns["tell"].py_func)
    cc.export("format_rows", nt.int64(nt.float64[:, :], nt.int64[:], nt.uint8[:], nt.int64[:], nt.uint8[:]))(
        fns["format_rows"].py_func
    )
    cc.compile()


def load_extension(path: Path):
    spec = importlib.util.spec_from_file_location(module_name(path), path)
    assert spec is not None and spec.loader is not None  # an extension module's suffix has a loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def module_name(path: Path) -> str:
    return path.name.split(".")[0]


def jit_functions():
    """The entry points compiled just in time (when no extension can be built), cached on disk in a
    directory of their own sources' hash (numba's cache does not notice a change in a callee)."""
    import numba
    from numba import njit

    numba.config.CACHE_DIR = str(  # type: ignore[attr-defined]  # numba sets its options at import
        cache_dir() / f"numba_{source_hash()}"
    )
    fns = _compiled_copies(lambda **kw: njit(cache=True, _nrt=False, **kw))  # type: ignore[call-overload]  # private _nrt
    return types.SimpleNamespace(**fns)


def cache_dir() -> Path:
    d = os.environ.get("SERVESIM_CACHE_DIR")
    if d:
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "servesim"
