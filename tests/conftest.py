"""Factories for tests: a tiny simulation with a hand-sized pool and a constant step cost, on either
engine step (the readable reference or the compiled production step)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import settings

from simulator.engine.compiled import layout as L
from simulator.engine.compiled.engine import CompiledEngine
from simulator.engine.cost import ConstantCost
from simulator.engine.events import step_records
from simulator.engine.reference.engine import ReferenceEngine
from simulator.engine.requests import RequestTable
from simulator.engine.rules import SchedulerConfig
from simulator.engine.submission import Submission

# CI explores the same examples every run (reproducible results); locally Hypothesis keeps exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ENGINES = {"reference": ReferenceEngine, "compiled": CompiledEngine}


def _untraced_child() -> None:
    """A process forked by a test (the host band's runs, the plots' child, a sweep's or
    validation's pool) stops tracing: coverage never saves what such a child records (it leaves
    through os._exit), so tracing it only made it slower."""
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]  # None removes it, as for sys.settrace


os.register_at_fork(after_in_child=_untraced_child)


# Set by the process that hands the tests out (``-n``) while the compiled step is being built: its
# workers, started meanwhile, give the build the CPU first (``pytest_configure``).
_BUILDING = "SERVESIM_TESTS_BESIDE_BUILD"
_build: subprocess.Popen | None = None


def pytest_configure(config) -> None:
    """With ``-n``, a fresh clone's first test run builds the compiled engine step in a child process
    (``compiled.start_build``; outside coverage's tracer, under which a build takes about twice as
    long) while the workers start on the tests that need no step (``STEP_FREE``, handed out first);
    a test that needs the step waits for the build. The workers lower their priority meanwhile: the
    build is what the rest waits for. A build already under way elsewhere (``.ci/run`` starts one
    before the tests) is waited for the same way."""
    global _build
    if hasattr(config, "workerinput"):
        if os.environ.get(_BUILDING):
            os.nice(10)
        return
    if not config.getoption("numprocesses", None):
        return
    from simulator.engine import compiled

    note = compiled.first_compile_note()
    if not note:
        return
    print(f"{note} (the tests that need no step run meanwhile)", flush=True)
    _build = compiled.start_build()
    os.environ[_BUILDING] = "1"


def pytest_unconfigure(config) -> None:
    """A build no test waited for (a run of a few step-free tests) is stopped with the run."""
    if _build is not None:
        if _build.poll() is None:
            _build.terminate()
        _build.wait()


# Test modules that load no engine step, found by logging ``compiled.load``'s callers over a whole
# run; with the tests of the other modules that run on the readable reference step alone, they are
# about 115 CPU-seconds of the suite. One that comes to need the step only waits for the build.
STEP_FREE = frozenset(
    {
        "test_bad_inputs.py",
        "test_background_plots.py",
        "test_calibrate.py",
        "test_cost_terms.py",
        "test_docs.py",
        "test_e2e_tools.py",
        "test_function_length.py",
        "test_harness.py",
        "test_layers.py",
    }
)


def _needs_no_step(item) -> bool:
    params = getattr(item, "callspec", None) and item.callspec.params
    return item.path.name in STEP_FREE or any(isinstance(v, str) and v == "reference" for v in (params or {}).values())


# The longest tests (15-35 s each under coverage on a 2-core machine), handed out right after the
# step-free ones: one of them left to the end would keep one worker busy while the other idles.
LONGEST = frozenset(
    {
        "test_every_run_simulates_and_errors_are_summarised_per_split",
        "test_recorded_runs_replay_within_their_errors",
        "test_every_numeric_field_takes_every_extreme_value",
        "test_sweep_recomputes_damaged_and_stale_points_and_says_why",
        "test_random_scenarios_are_byte_identical",
        "test_the_same_plan_on_a_local_ray_cluster_is_identical",
        "test_a_small_plan_end_to_end_resumes_and_reports_a_bad_candidate",
        "test_random_sglang_scenarios_are_byte_identical",
        "test_validate_features_reports_every_set",
        "test_the_fleet_follows_hpa_rules_over_a_ramp",
    }
)


def pytest_collection_modifyitems(items) -> None:
    """The tests that need no step first, so that they are what the workers start on while the step
    is built; then the longest. A stable sort: the rest keep their order."""
    items.sort(key=lambda item: (not _needs_no_step(item), getattr(item, "originalname", item.name) not in LONGEST))


@contextmanager
def _coverage_paused():
    """Coverage's tracer stopped in this process for the block, if it is running here (nothing
    traces without the test extras)."""
    try:
        import coverage

        tracer = coverage.Coverage.current()
    except ImportError:
        tracer = None
    if tracer is not None:
        tracer.stop()
    try:
        yield
    finally:
        if tracer is not None:
            tracer.start()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    """Run a ``no_cover`` test untraced in a test worker too. pytest-cov pauses coverage for such a
    test only in a plain run: under ``-n`` (pytest-xdist) its workers kept tracing them, so the
    readable step's differential cases ran three times slower than untraced (the collapse case 32 s
    instead of 11). Innermost of the wrappers: where pytest-cov has paused, nothing traces here."""
    traced = item.get_closest_marker("no_cover") is not None and sys.gettrace() is not None
    with _coverage_paused() if traced else nullcontext():
        yield


@pytest.fixture(params=list(ENGINES))
def engine(request) -> str:
    """Run the test on each engine step."""
    return request.param


class Sim:
    """A simulation driven by an explicit request list: (arrival_s, prompt_len, max_tokens[, group, group_len
    [, priority]]) on one engine step, every step costing ``step_s`` (plus swap traffic at ``swap_bw`` bytes/s).

    ``steps``: one ``simulator.engine.events.StepRecord`` per step (what it scheduled, preempted, admitted...).
    """

    def __init__(
        self,
        requests,
        num_gpu_blocks: int = 11,
        engine: str = "reference",
        step_s: float = 1.0,
        swap_bw: float = 1000.0,
        max_model_len=10**6,
        **overrides,
    ):
        cfg = replace(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=8, block_size=4), **overrides)
        self.env = simpy.Environment()
        self.engine = ENGINES[engine](
            self.env,
            cfg,
            num_gpu_blocks,
            ConstantCost(step_s, swap_bw),
            RequestTable(8),
            max_model_len=max_model_len,
            trace=2,
        )
        if engine == "reference":  # the pool's invariants after every step's scheduling
            sched = self.engine.sched
            schedule = sched.schedule

            def checked(now):
                plan = schedule(now)
                sched.pool.check()
                return plan

            sched.schedule = checked
        self.env.process(self._arrivals(sorted(requests, key=lambda r: r[0])))

    def _arrivals(self, requests):
        for r in requests:
            t = r[0]
            if t > self.env.now:
                yield self.env.timeout(t - self.env.now)
            extra = {"group": r[3], "group_len": r[4]} if len(r) > 3 else {}
            if len(r) > 5:
                extra["priority"] = r[5]
            self.engine.submit(Submission(r[1], r[2], **extra))

    def run(self, until=None):
        self.env.run(until=until)
        self.engine.finish_run()
        if isinstance(self.engine, CompiledEngine):
            check_compiled_state(self.engine)
        self.steps = step_records(self.engine.trace_events(), self.engine.log.columns())
        return self

    @property
    def reqs(self):
        return self.engine.reqs

    def free_blocks(self) -> int:
        return self.engine.queues()[3]


def check_compiled_state(eng: CompiledEngine) -> None:
    """Invariants of the compiled step's block pool: a block is in the free queue exactly when nobody
    holds it, the free count matches, every running request's table holds its blocks, and the
    reference counts equal the number of tables holding each block."""
    st = eng.st
    ctl, blocks = st.ctl, st.blocks
    ref = blocks[:, L.B_REF]
    assert (ref >= 0).all()
    h, t = int(ctl[L.Q_HEAD]), int(ctl[L.Q_TAIL])
    q = st.queue[:, h:t]
    valid = (ref[q[0]] == 0) & (blocks[q[0], L.B_SERIAL] == q[1])
    assert int(valid.sum()) == int(ctl[L.FREE]) == int((ref == 0).sum())
    assert len(set(q[0][valid].tolist())) == int(valid.sum())  # no block queued twice
    held = np.zeros(len(blocks), np.int64)
    for s in range(int(ctl[L.END])):
        if st.slots[s, L.S_RID] >= 0:
            row, n = st.slots[s, L.S_ROW], st.slots[s, L.S_NBLK]
            np.add.at(held, st.tables[row, :n], 1)
    assert (held == ref).all()


# ---- what a user sees in a plot ----------------------------------------------------------------


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """The figures servesim's plots draw during the test, by file name, captured as each is saved
    (the PNGs are written as usual; plots are drawn in the test's process, not a forked child), so a
    test reads what the user sees: titles, axis labels, the data of every line."""
    from simulator.outputs import plots

    monkeypatch.setenv("SERVESIM_PLOTS_INLINE", "1")
    figures: dict = {}
    save = plots._save

    def capture(fig, path) -> None:
        figures[Path(path).name] = fig
        save(fig, path)

    monkeypatch.setattr(plots, "_save", capture)
    return figures


def assert_png_drawn(path) -> None:
    """The file (a path, or the bytes of one in a file object) decodes as a PNG of a drawn figure,
    not a blank canvas: a fair share of it is ink (lines, text, axes) and it has colours beyond black
    and white."""
    from matplotlib import image

    img = image.imread(path if hasattr(path, "read") else str(path), format="png")
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 300, img.shape
    rgb = np.asarray(img[..., :3], np.float64)
    ink = float((rgb.min(axis=2) < 0.85).mean())
    assert ink > 0.01, f"{path}: {ink:.2%} of the image is drawn"
    colours = len(np.unique((rgb * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert colours > 16, f"{path}: {colours} colours"


def line_of(ax, label: str):
    """The line of ``ax`` drawn with this legend label."""
    lines = [line for line in ax.get_lines() if line.get_label() == label]
    assert len(lines) == 1, [line.get_label() for line in ax.get_lines()]
    return lines[0]


def window_of(title: str) -> float:
    """The throughput windows' width, as the plot's title gives it ("... (5 s windows)")."""
    import re

    m = re.search(r"\(([\d.]+) s windows\)", title.replace("\n", " "))
    assert m, title
    return float(m.group(1))


def shape_grid_throughputs(over: list[str], shapes, loads) -> dict:
    """Public benchmarks' grid for one deployment (``over``: its model, GPU, TP and engine settings):
    for each (prompt, output) of ``shapes``, each closed-loop load of ``loads`` runs 2 x load requests
    to its last one (asserted); returns {(prompt, output): [output tokens a second at each load]}."""
    from simulator.run import simulate
    from simulator.scenario.config import load_scenario

    out: dict = {}
    for p, o in shapes:
        for c in loads:
            sc, _ = load_scenario(
                None,
                [
                    *over,
                    "run.host_band=false",
                    f"workload.arrival={{type: closed_loop, concurrency: {c}}}",
                    f"workload.prompt_tokens={{dist: fixed, value: {p}}}",
                    f"workload.output_tokens={{dist: fixed, value: {o}}}",
                    f"run.num_requests={2 * c}",
                    "run.duration_s=null",
                    "run.warmup_s=0",
                ],
            )
            r = simulate(sc)
            assert r.engine.num_done == 2 * c, (over, p, o, c)
            out.setdefault((p, o), []).append(2 * c * o / r.end_time)
    return out
