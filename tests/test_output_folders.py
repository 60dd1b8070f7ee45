"""Results cannot escape their folder or vanish: output paths checked before any simulation, names
that stay inside results/, a folder that holds only its latest run, one writer per folder, and the
wheel carrying every data file."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

from simulator import resolve as resolve_module
from simulator import run as run_module
from simulator.cli import main
from simulator.commands import trace as tracegen  # noqa: F401 - bound to the real simulate before a test replaces it
from simulator.outputs.outdir import LOCK, folder_name

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "run.duration_s=5", "--set", "run.warmup_s=0", "--set", "workload.arrival.concurrency=32"]


def _main(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue(), err.getvalue()


def _no_simulation(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("simulated before the outputs were checked")

    monkeypatch.setattr(run_module, "simulate", refuse)
    monkeypatch.setattr(resolve_module, "build_engine", refuse)


def test_unwritable_outputs_are_refused_before_any_simulation(tmp_path, monkeypatch):
    """Every output option of every command: a file where a folder is wanted, a folder under a file,
    a folder where a file is wanted, a folder that cannot be made: one line naming the option, exit
    2, nothing simulated and nothing written."""
    _no_simulation(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "f").write_text("mine")
    (tmp_path / "d").mkdir()
    (tmp_path / "p.csv").write_text("gpu,model,batch,new_tokens,context,ms\nh100-sxm,llama-3.1-8b,1,1,0,7\n")
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    two = [str(ROOT / "scenarios" / "collapse_c512.yaml"), str(ROOT / "scenarios" / "collapse_c1200.yaml")]
    cases = [
        (["run", "--out", "f"], "--out f"),
        (["run", "--out", "f/sub"], "--out f/sub"),
        (["run", "--out", "/proc/servesim-out"], "--out /proc/servesim-out"),
        (["run", "--out", "r", "--trace", "f/t.json"], "--trace f/t.json"),
        (["run", "--out", "r", "--trace", "./d"], "--trace d"),
        (["run", *two, "--out", "f"], "--out f"),
        (["sweep", "--param", "engine.max_num_seqs=8,16", "--out", "f"], "--out f"),
        (["plan", "--rate", "1", "--out", "f/x"], "--out f/x"),
        (["compare", "done", "--out", "f"], "--out f"),
        (["trace", "generate", "-o", "f/t.csv"], "--out f/t.csv"),
        (["calibrate", "p.csv", "-o", "f/c.yaml"], "--output f/c.yaml"),
        (["validate", "--kv", "--out", "f"], "--out f"),
        (["sweep", "--param", "engine.max_num_seqs=8", "--out", ""], "--out must name a file or folder (got '')"),
        (["trace", "generate", "-o", " "], "--out must name a file or folder (got ' ')"),
    ]
    for args, flag in cases:
        code, _, err = _main([*args, *SHORT] if args[0] in ("run", "sweep") else args)
        assert code == 2, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (args, err)
        assert flag in err, (args, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "done", "f", "p.csv"]
    assert (tmp_path / "f").read_text() == "mine"


def test_scenario_names_become_folders_inside_results(tmp_path, monkeypatch):
    """A name with folders, dots or control characters names one folder inside results/; a name
    with no letter or digit is refused; nothing is written outside results/."""
    monkeypatch.chdir(tmp_path)
    for name, folder in [("../../x", "x"), ("a/b", "a_b"), (".hidden", "hidden"), ("ok\x07y", "ok_y")]:
        (tmp_path / "s.yaml").write_text(json.dumps({"name": name}))
        code, _, err = _main(["run", "s.yaml", *SHORT])
        assert code == 0, err
        assert (tmp_path / "results" / folder / "summary.json").is_file(), name
    for name in ("..", "", "/", " . "):
        (tmp_path / "s.yaml").write_text(json.dumps({"name": name}))
        code, _, err = _main(["run", "s.yaml", *SHORT])
        assert code == 2 and "name must contain a letter or digit" in err, (name, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "s.yaml"]
    assert not (tmp_path.parent / "x").exists()
    assert folder_name("x" * 400) == "x" * 100


def test_a_rerun_leaves_nothing_of_the_earlier_run_but_keeps_what_is_not_its(tmp_path):
    """Run with both exports, then without: the metrics and trace of the first are gone, a file the
    user put in the folder is kept; a run that fails keeps the earlier results whole."""
    out = tmp_path / "r"
    assert _main(["run", "--out", str(out), *SHORT, "--metrics", "openmetrics", "--trace", "t.json"])[0] == 0
    assert (out / "metrics.openmetrics").is_file() and (out / "t.json").is_file()
    (out / "notes.txt").write_text("mine")
    code, stdout, _ = _main(["run", "--out", str(out), *SHORT])
    assert code == 0 and "replaced the earlier run" in stdout
    names = {p.name for p in out.iterdir()}
    assert "metrics.openmetrics" not in names and "t.json" not in names and "notes.txt" in names
    assert {"summary.json", "requests.csv", "steps.csv", "scenario.yaml", "throughput.png"} <= names
    before = (out / "summary.json").read_bytes()
    stall = [
        "--set",
        "frontend.enabled=false",
        "--set",
        "workload.prompt_tokens={dist: fixed, value: 200000}",
        "--set",
        "workload.over_max_model_len=reject",
    ]
    code, _, err = _main(["run", "--out", str(out), *SHORT, *stall])
    assert code == 2 and "SimulationStalled" in err
    assert (out / "summary.json").read_bytes() == before and (out / "requests.csv").is_file()


def test_a_folder_of_runs_holds_only_the_latest_runs(tmp_path):
    """Three scenarios into a folder, then two: the third's results and the old comparison go; two
    files of one name in different folders get a folder each."""
    scen = [str(ROOT / "scenarios" / f"collapse_c{c}.yaml") for c in (512, 1028, 1200)]
    out = tmp_path / "runs"
    assert _main(["run", *scen, "--out", str(out), *SHORT, "--jobs", "1"])[0] == 0
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"collapse_c512", "collapse_c1028", "collapse_c1200"}
    assert _main(["run", *scen[:2], "--out", str(out), *SHORT, "--jobs", "1"])[0] == 0
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"collapse_c512", "collapse_c1028"}
    assert len((out / "comparison.csv").read_text().splitlines()) == 3
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "collapse_c512.yaml").write_text((ROOT / "scenarios" / "collapse_c512.yaml").read_text())
    both = tmp_path / "both"
    assert (
        _main(["run", scen[0], str(tmp_path / "a" / "collapse_c512.yaml"), "--out", str(both), *SHORT, "--jobs", "1"])[
            0
        ]
        == 0
    )
    assert {p.name for p in both.iterdir() if p.is_dir()} == {"collapse_c512_1", "collapse_c512_2"}


def test_one_kind_of_results_is_never_written_over_another(tmp_path, monkeypatch):
    """A comparison, sweep or plan into a run's folder (or a run into a sweep's) is refused before any
    work, and the earlier results stay whole (a comparison into a run's folder used to remove its CSVs)."""
    run = tmp_path / "run"
    assert _main(["run", "--out", str(run), *SHORT])[0] == 0
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    sweep = tmp_path / "sweep"
    assert _main(["sweep", "--param", "engine.max_num_seqs=8", "--out", str(sweep), *SHORT, "--jobs", "1"])[0] == 0
    _no_simulation(monkeypatch)
    for args, what in (
        (["compare", str(run), "--out", str(run)], "holds a run"),
        (["sweep", "--param", "engine.max_num_seqs=8,16", "--out", str(run), *SHORT], "holds a run"),
        (["plan", "--rate", "1", "--out", str(run)], "holds a run"),
        (["run", "--out", str(sweep), *SHORT], "holds a sweep"),
    ):
        code, _, err = _main(args)
        assert code == 2 and what in err and err.count("\n") == 1, (args, err)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
    assert (sweep / "points").is_dir() and (sweep / "sweep.csv").is_file()


def test_files_servesim_did_not_write_are_never_overwritten(tmp_path, monkeypatch):
    """A folder holding a requests.csv of the user's: refused before any simulation, the file untouched."""
    _no_simulation(monkeypatch)
    (tmp_path / "requests.csv").write_text("mine")
    code, _, err = _main(["run", "--out", str(tmp_path), *SHORT])
    assert code == 2 and "requests.csv that servesim did not write" in err
    assert (tmp_path / "requests.csv").read_text() == "mine"


def _hold_lock(folder: Path) -> subprocess.Popen:
    """Another process writing ``folder`` (it holds the lock until killed)."""
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom simulator.outputs.outdir import Writing\n"
        "Writing(Path(sys.argv[1]), '--out').__enter__()\nprint('ready', flush=True)\ntime.sleep(120)\n"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert p.stdout.readline().strip() == "ready"
    return p


def test_a_second_writer_is_refused_and_a_dead_ones_lock_taken_over(tmp_path):
    """While another process writes a folder, a run, sweep or plan into it (or into a folder inside
    it) is refused with one line naming that process; once it dies without cleaning up, its lock is
    taken over and the run writes, leaving no lock behind."""
    out = tmp_path / "shared"
    holder = _hold_lock(out)
    try:
        for args in (
            ["run", "--out", str(out), *SHORT],
            ["sweep", "--param", "engine.max_num_seqs=8,16", "--out", str(out), *SHORT],
            ["plan", "--rate", "1", "--out", str(out)],
            ["run", "--out", str(out / "inner"), *SHORT],
        ):
            code, _, err = _main(args)
            assert code == 2, (args, err)
            assert f"servesim (pid {holder.pid})" in err and err.count("\n") == 1, (args, err)
        assert not (out / "summary.json").exists() and not (out / "points").exists()
    finally:
        holder.kill()
        holder.wait()
    assert (out / LOCK).is_file()  # what a killed writer leaves
    assert _main(["run", "--out", str(out), *SHORT])[0] == 0
    assert (out / "summary.json").is_file() and not (out / LOCK).exists()


def test_outputs_named_without_a_folder_go_under_results(tmp_path, monkeypatch):
    """A bare file name for --trace goes beside the run's results, for trace generate -o into
    results/; nothing lands in the folder the command runs in."""
    monkeypatch.chdir(tmp_path)
    assert _main(["run", *SHORT, "--trace", "trace.json"])[0] == 0
    assert (tmp_path / "results" / "collapse_c1200" / "trace.json").is_file()
    code, out, _ = _main(["trace", "generate", "-o", "trace.csv", *SHORT])
    assert code == 0 and "results/trace.csv" in out and (tmp_path / "results" / "trace.csv").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_the_wheel_carries_every_data_file():
    """Every file under simulator/data/ matches a package-data pattern in pyproject.toml (a file
    left out works from a checkout and fails once installed from the wheel)."""
    text = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]")[1]
    patterns = ast.literal_eval(text[text.index("simulator = ") + len("simulator = ") : text.index("]") + 1])
    pkg = ROOT / "simulator"
    files = [
        p.relative_to(pkg).as_posix() for p in (pkg / "data").rglob("*") if p.is_file() and "__pycache__" not in p.parts
    ]
    assert any(f.startswith("data/validation/e2e/") for f in files)
    missing = [f for f in files if not any(fnmatch(f, pat) and f.count("/") == pat.count("/") for pat in patterns)]
    assert not missing, missing


def test_outputs_never_replace_links_pipes_or_devices(tmp_path, monkeypatch):
    """Every output a user names, and every file servesim writes inside an output folder: a symbolic
    link or a named pipe there is refused with one line naming the option, the rule and the path,
    before any simulation; the link, its target and the pipe stay as they were. (Devices and sockets
    take the same check, ``writers.special_kind``; the tests make only links and pipes.)"""
    import stat

    from simulator.errors import ConfigError
    from simulator.outputs.writers import atomic_write_text, special_kind

    _no_simulation(monkeypatch)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "target").mkdir()
    (tmp_path / "target.txt").write_text("theirs")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "flink.json").symlink_to(tmp_path / "target.txt")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "p.csv").write_text("gpu,model,batch,new_tokens,context,ms\nh100-sxm,llama-3.1-8b,1,1,0,7\n")
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text("{}")
    for folder, name in (("r", "summary.json"), ("s", "sweep.csv"), ("pl", "plan.csv"), ("c", "comparison.csv")):
        (tmp_path / folder).mkdir()
        os.mkfifo(tmp_path / folder / name)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "report.txt").symlink_to(tmp_path / "target.txt")
    (tmp_path / "done" / "report.html").symlink_to(tmp_path / "target.txt")
    cases = [
        (["run", "--out", "link"], "--out link"),
        (["run", "--out", "r"], "--out r/summary.json"),
        (["run", "--out", "m", "--metrics", "openmetrics"], "--out m/metrics.openmetrics"),
        (["run", "--out", "x", "--trace", "./pipe"], "--trace pipe"),
        (["run", "--out", "x", "--trace", "./flink.json"], "--trace flink.json"),
        (["sweep", "--param", "engine.max_num_seqs=8,16", "--out", "link"], "--out link"),
        (["sweep", "--param", "engine.max_num_seqs=8,16", "--out", "s"], "s/sweep.csv"),
        (["plan", "--rate", "1", "--out", "pl"], "pl/plan.csv"),
        (["plan", str(ROOT / "scenarios" / "fleet_day_autoscale.yaml"), "--day", "--out", "link"], "--out link"),
        (["compare", "done", "--out", "c"], "c/comparison.csv"),
        (["compare", "done", "--out", "link"], "--out link"),
        (["report", "done", "-o", "./pipe"], "--output pipe"),
        (["report", "done"], "done/report.html"),
        (["trace", "generate", "-o", "./pipe"], "--out pipe"),
        (["calibrate", "p.csv", "-o", "./flink.json"], "--output flink.json"),
        (["validate", "--kv", "--out", "link"], "--out link"),
        (["validate", "--kv", "--out", "v"], "v/report.txt"),
    ]
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "metrics.openmetrics").symlink_to(tmp_path / "target.txt")
    for args, shown in cases:
        code, _, err = _main([*args, *SHORT] if args[0] in ("run", "sweep") else args)
        assert code == 2, (args, err)
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (args, err)
        assert shown in err and "servesim writes only ordinary files and folders" in err, (args, err)
    assert (tmp_path / "target.txt").read_text() == "theirs" and list((tmp_path / "target").iterdir()) == []
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode) and (tmp_path / "link").is_symlink()
    assert not (tmp_path / "x").exists() and not (tmp_path / "results").exists()
    # Every writer checks again as it writes (a link made after the checks).
    with contextlib.suppress(ConfigError):
        atomic_write_text(tmp_path / "flink.json", "mine")
    assert (tmp_path / "target.txt").read_text() == "theirs" and special_kind(tmp_path / "flink.json")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
