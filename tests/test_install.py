"""What a user installing the wheel meets first: the built-in scenarios by name from any folder, a
missing extra's install command, and the first run's compile announced (how long, where it is kept)
by every command that simulates, after its inputs are checked. (.ci/run builds the wheel and runs
these commands from outside the checkout.)"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "run.duration_s=5", "--set", "run.warmup_s=0", "--set", "workload.arrival.concurrency=16"]


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_the_packaged_scenarios_are_the_checkouts():
    """simulator/data/scenarios/ (what the wheel carries) is a copy of scenarios/, file for file and
    byte for byte: edit scenarios/, then copy it over."""
    ours = {p.name: p.read_bytes() for p in (ROOT / "scenarios").glob("*.yaml")}
    packaged = {p.name: p.read_bytes() for p in (ROOT / "simulator" / "data" / "scenarios").glob("*.yaml")}
    assert len(ours) >= 15 and packaged == ours, "cp scenarios/*.yaml simulator/data/scenarios/"


def test_built_in_scenarios_run_by_name_from_any_folder(tmp_path, monkeypatch):
    """`servesim run collapse_c512` (and `sweep`, `check`) anywhere; `servesim scenarios` lists them
    all and prints one whole; a near miss gets a did-you-mean; a file of that name here wins."""
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(["run", "collapse_c512", *SHORT])
    assert code == 0 and (tmp_path / "results" / "c512" / "summary.json").is_file(), err  # (its name: c512)
    assert _main(["check", "collapse_c512.yaml"])[0] == 0
    sweep = ["sweep", "collapse_c512", "--param", "engine.max_num_seqs=8,16", "--out", "sw", "--jobs", "1"]
    assert _main([*sweep, *SHORT])[0] == 0
    code, out, _ = _main(["scenarios"])
    names = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml"))
    assert code == 0 and all(f"  {n} " in out for n in names)
    code, out, _ = _main(["scenarios", "--show", "plan_chat"])
    assert code == 0 and out == (ROOT / "scenarios" / "plan_chat.yaml").read_text()
    code, _, err = _main(["run", "collapse_c1201"])
    assert (
        code == 2
        and err == "error: collapse_c1201: no such scenario file; did you mean the built-in 'collapse_c1200'?\n"
    )
    (tmp_path / "collapse_c512").write_text("name: mine\nrun: {duration_s: 5, warmup_s: 0}\n")
    code, out, _ = _main(["check", "collapse_c512"])
    assert code == 0 and out.startswith("collapse_c512: ok")  # (the file here, named mine)


def test_a_missing_extra_says_how_to_install_it(tmp_path, monkeypatch):
    """--executor ray without Ray, --strategy optuna without Optuna: one line with the command a
    wheel user types (and the one for a checkout), before any work."""
    from simulator.planning.executor import run_tasks

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if not installed
    with pytest.raises(ConfigError) as e:
        list(run_tasks(len, [[1]], executor="ray"))
    assert str(e.value) == (
        '--executor ray: Ray is not installed; pip install "servesim[ray]" '
        '(in a checkout of servesim: pip install -e ".[ray]")'
    )
    sweep = ["sweep", "--param", "engine.max_num_seqs=8,16", "--executor", "ray", "--out", str(tmp_path / "s")]
    code, out, err = _main(sweep)
    assert code == 2 and out == "" and 'pip install "servesim[ray]"' in err and not (tmp_path / "s").exists()
    monkeypatch.setitem(sys.modules, "optuna", None)
    args = ["plan", "--rate", "1", "--strategy", "optuna", "--search", "engine.max_num_seqs=8,16"]
    code, _, err = _main([*args, "--out", str(tmp_path / "p"), "--no-check"])
    assert code == 2 and 'pip install "servesim[search]"' in err and err.count("\n") == 1


def test_the_first_run_announces_the_compile_after_checking_its_inputs(monkeypatch, capsys):
    """Before the engine step is compiled, each command that simulates says so once, with an honest
    estimate and the folder it is kept in, after its inputs are checked (bad input: no notice); once
    compiled, nothing."""
    from simulator import progress
    from simulator.engine import compiled

    state = {"compiled": False, "loads": 0}

    def note() -> str:
        return "" if state["compiled"] else "compiling"

    def load():
        state["compiled"] = True
        state["loads"] += 1
        return real_load()

    real_load = compiled.load
    monkeypatch.setattr(compiled, "first_compile_note", note)
    monkeypatch.setattr(compiled, "load", load)
    for args in (["run", "--set", "engine.max_num_seqs=0"], ["check", "collapse_c12"], ["sweep", "--param", "x"]):
        assert main(args) == 2
        assert "compiling the engine step" not in capsys.readouterr().err, args
    state["compiled"] = False
    assert main(["check", "collapse_c512"]) == 0
    err = capsys.readouterr().err
    assert err.count("compiling the engine step") == 1 and "compiled the engine step in" in err, err
    assert f"{progress.COMPILE_ESTIMATE}; kept in {compiled.extension_path().parent}/" in err
    state["compiled"] = True
    progress.compile_step()
    assert capsys.readouterr().err == ""


def test_the_docs_say_how_long_the_first_compile_and_the_suite_take_and_where_the_step_is_kept():
    """The README and docs/speed.md give the compile's estimate as the notice does, the folder the
    compiled step is kept in (and how to move it), and how long the README's test command takes."""
    from simulator.progress import COMPILE_ESTIMATE

    readme, speed = (ROOT / "README.md").read_text(), (ROOT / "docs" / "speed.md").read_text()
    assert COMPILE_ESTIMATE.startswith("about 1-3 minutes on a 2-core machine")
    for page in (readme, speed):
        assert "1-3 minutes" in page.replace("\n", " ")
        assert "~/.cache/servesim/" in page and "SERVESIM_CACHE_DIR" in page
    assert "About 10-20 minutes on 2 cores" in readme and "takes about 10-20 minutes" in speed.replace("\n", " ")


def test_the_build_compiles_each_function_once_for_llvm_to_inline_and_wraps_only_the_entry_points():
    """Every function of the step is compiled on its own (numba's inliner, which typed the whole step
    as one function, is not asked for), marked for LLVM to inline except a module's ``COLD`` ones,
    and only the entry points get the wrappers Python calls through. (That the compiled step gives
    the reference's answers is the differential and parity tests' job.)"""
    from simulator.engine.compiled import build

    asked: dict[tuple[str, str], dict] = {}

    def njit(**options):
        def compile_(fn):
            asked[(fn.__module__, fn.__name__)] = options
            return fn

        return compile_

    entry_points = build._compiled_copies(njit)
    assert set(entry_points) == set(build.ENTRY_POINTS)
    entry = {(fn.__module__, fn.__name__) for fn in build.ENTRY_POINTS.values()}
    assert len(asked) > 100 and entry <= set(asked)
    for (module, name), options in asked.items():
        assert "inline" not in options, (module, name)
        cold = name in getattr(sys.modules[module], "COLD", ())
        assert options["forceinline"] is not cold, (module, name)
        wrapped = (module, name) in entry
        assert options["no_cpython_wrapper"] is not wrapped and options["no_cfunc_wrapper"] is not wrapped, (
            module,
            name,
        )
    assert not asked[("simulator.engine.compiled.pool", "_compact")]["forceinline"]
    assert asked[("simulator.engine.compiled.update", "update")]["forceinline"]
