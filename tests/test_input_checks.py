"""What a new user types that used to break servesim, each now one line naming the file, field, rule
and value (exit 2, no traceback), checked before any simulation: sizes beyond memory, numeric
options out of range, malformed sweep values and repeated fields, files in other encodings, vLLM's
own rules, and errors in one of several scenario files."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from simulator import resolve as resolve_module
from simulator import run as run_module
from simulator import size as size_module
from simulator.cli import main, parser
from simulator.errors import ConfigError
from simulator.planning.sweep import parse_param
from simulator.scenario.config import load_scenario
from workloads.lengths import _load_lengths
from workloads.trace import _csv_fast, read_trace

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


def _one_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err[len("error: ") :].strip()


def _nothing_built(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("an engine was built before the size guard")

    monkeypatch.setattr(resolve_module, "build_engine", refuse)


def test_a_fleet_too_large_is_refused_before_any_replica_is_built(monkeypatch, tmp_path):
    """check, run, sweep and plan refuse a fleet beyond memory from the scenario alone: no replica
    engine is built (a million replicas used to be built, 24 GB, before the guard)."""
    _nothing_built(monkeypatch)
    routers = str(ROOT / "scenarios" / "cluster_routers.yaml")
    code, _, err = _main(["check", routers, "--set", "cluster.replicas=1e6"])
    assert code == 2 and _one_line(err).endswith("cluster.replicas must be <= 4096 (got 1000000)")
    monkeypatch.setattr(size_module, "_physical_memory", lambda: 2 << 30)  # a 2 GB machine
    big = [
        "--set",
        "cluster.replicas=[{count: 1000}, {count: 1000, hardware: {gpu: h200}}]",
        "--set",
        "run.duration_s=1",
        "--set",
        "run.warmup_s=0",
    ]
    for args in (["check", routers, *big], ["run", routers, *big, "--out", str(tmp_path / "r")]):
        code, _, err = _main(args)
        assert code == 2 and "cluster.replicas: 2,000 replicas need about" in _one_line(err), err
    assert not (tmp_path / "r").exists()
    code, out, _ = _main(
        [
            "sweep",
            routers,
            "--param",
            "cluster.replicas=1000,2000",
            "--set",
            "run.duration_s=1",
            "--set",
            "run.warmup_s=0",
            "--out",
            str(tmp_path / "s"),
            "--jobs",
            "1",
        ]
    )
    assert code == 1 and out.count("FAILED: cluster.replicas: ") == 2
    code, out, _ = _main(
        [
            "plan",
            routers,
            "--rate",
            "1",
            "--set",
            "cluster.replicas=2000",
            "--no-check",
            "--out",
            str(tmp_path / "p"),
            "--jobs",
            "1",
        ]
    )
    # (the step count is the run's length over the shortest step the host allows: it moves with the host)
    assert re.search(
        r"INFEASIBLE: run\.duration_s: a per-step log of up to [\d,]+ steps \([\d,]+ for each of 2,000 replicas\)", out
    ), out


def test_a_request_limit_without_a_duration_is_sized_by_its_requests(monkeypatch):
    """run.num_requests with run.duration_s null (a run until they are done): refused naming
    run.num_requests, not a TypeError."""
    _nothing_built(monkeypatch)
    code, _, err = _main(["check", "--set", "run.num_requests=1e7", "--set", "run.duration_s=null"])
    msg = _one_line(err)
    assert (
        code == 2
        and msg.startswith("run.num_requests: finishing 10,000,000 requests")
        and msg.endswith("(got 10000000)")
    )
    monkeypatch.setattr(size_module, "_physical_memory", lambda: 8 << 30)
    code, _, err = _main(
        [
            "check",
            "--set",
            "run.num_requests=1e7",
            "--set",
            "run.duration_s=null",
            "--set",
            "run.step_log_bin_s=1",
            "--set",
            "workload.arrival={type: poisson, rate: 100}",
        ]
    )
    assert code == 2 and _one_line(err).startswith("run.num_requests: 10,000,000 requests need about")


def test_metrics_interval_is_checked_before_the_run(monkeypatch):
    """--metrics-interval: zero, negative, not finite or not a number is refused; an interval that
    would write more than a gigabyte is refused before simulating, with the smallest that fits; the
    option without --metrics is an error, not ignored."""
    monkeypatch.setattr(run_module, "simulate", lambda *a, **k: pytest.fail("simulated"))
    for bad, rule in (
        ("0", "must be > 0 s (got 0)"),
        ("-5", "must be > 0 s (got -5)"),
        ("nan", "must be a finite number (got 'nan')"),
        ("x", "must be a finite number (got 'x')"),
    ):
        code, _, err = _main(["run", "--metrics", "openmetrics", "--metrics-interval", bad])
        assert code == 2 and _one_line(err).startswith("--metrics-interval ") and rule in err, err
    code, _, err = _main(
        ["run", "--metrics", "openmetrics", "--metrics-interval", "0.001", "--set", "run.duration_s=70"]
    )
    assert code == 2 and "70,000 samples" in _one_line(err) and "give 0.002 s or more (got 0.001)" in err
    code, _, err = _main(["run", "--metrics-interval", "2"])
    assert code == 2 and _one_line(err) == "--metrics-interval: only with --metrics openmetrics (got 2.0)"


def _numeric_options():
    for name, sub in parser()._subparsers._group_actions[0].choices.items():
        for a in sub._actions:
            if a.option_strings and a.type is not None:
                yield name, a


def test_every_numeric_option_refuses_values_out_of_range():
    """Every numeric option of every command goes through one checked type (no bare int/float), and
    a value just outside its range, NaN and text are each refused in one line naming the option."""
    seen = 0
    for cmd, a in _numeric_options():
        assert a.type not in (int, float), (cmd, a.option_strings)
        if not hasattr(a.type, "least"):
            continue
        seen += 1
        opt = a.option_strings[-1]
        low = a.type.least - 1 if a.type.least is not None else a.type.above
        required = ["--rate", "1"] if cmd == "plan" and opt != "--rate" else []
        positional = ["x.csv"] if cmd == "calibrate" else []
        for bad in (f"{low:g}", "nan", "text"):
            code, _, err = _main([cmd, *positional, *required, opt, bad])
            assert code == 2 and _one_line(err).startswith(f"{opt} must be"), (cmd, opt, bad, err)
    assert seen >= 15


def test_step_time_refuses_what_a_scenario_refuses():
    """step-time: a TP that does not divide the heads, a model that does not fit, a batch of 0, a
    field set twice (by its own option and by --set): refused as a scenario would be."""
    for args, want in (
        (["--tp", "3"], "--tp must divide llama-3.1-8b's 32 attention heads, as vLLM requires (got 3)"),
        (["--model", "llama-3.1-405b"], "model"),
        (["--batch", "0"], "--batch must be >= 1 (got 0)"),
        (["--set", "hardware.tensor_parallel_size=2"], "--set hardware.tensor_parallel_size: give it as --tp"),
        (["--set", "engine.block_size=7"], "engine.block_size must be one of 1, 8, 16, 32, 64, 128"),
    ):
        code, _, err = _main(["step-time", *args])
        assert code == 2 and want in _one_line(err), (args, err)
    assert _main(["step-time", "--tp", "2", "--batch", "8"])[0] == 0


def test_step_time_prices_an_sglang_step():
    """step-time with SGLang: priced from SGLang's own defaults (not the built-in vLLM scenario's
    knobs); a vLLM release given with it is one line naming SGLang's field."""
    code, out, err = _main(["step-time", "--model", "qwen3-8b", "--set", "engine.framework=sglang", "--batch", "4"])
    assert code == 0 and out.strip().endswith(" ms") and float(out.split()[0]) > 0, err
    code, _, err = _main(["step-time", "--set", "engine.framework=sglang", "--vllm-version", "0.26"])
    assert code == 2 and "engine.vllm_version: only for framework 'vllm'" in _one_line(err)
    assert "engine.sglang_version" in err


def test_sweep_values_may_be_lists_or_mappings_and_a_field_is_given_once(tmp_path):
    """--param values split at the commas outside brackets and quotes (a mapping is one value); an
    unbalanced bracket, an empty value, a field given twice, or swept and --set: one line each."""
    key, vals = parse_param("workload.arrival={type: poisson, rate: 5},{type: poisson, rate: 10}")
    assert key == "workload.arrival" and vals == [{"type": "poisson", "rate": 5}, {"type": "poisson", "rate": 10}]
    assert parse_param("x=[1, 2],'a,b',3") == ("x", [[1, 2], "a,b", 3])
    out = str(tmp_path / "s")
    for args, want in (
        (["--param", "engine.max_num_seqs=[1"], "--param engine.max_num_seqs: a bracket or brace left open"),
        (["--param", "engine.max_num_seqs=1]"], "--param engine.max_num_seqs: ']' closes nothing"),
        (["--param", "engine.max_num_seqs=8,,16"], "an empty value between commas"),
        (
            ["--param", "engine.max_num_seqs=8", "--param", "engine.max_num_seqs=16"],
            "--param engine.max_num_seqs given twice",
        ),
        (
            ["--param", "engine.max_num_seqs=8,16", "--set", "engine.max_num_seqs=4"],
            "--set engine.max_num_seqs: the field is also swept",
        ),
        (
            ["--param", "engine.max_num_seqs=8", "--set", "engine.block_size=16", "--set", "engine.block_size=32"],
            "--set engine.block_size given twice",
        ),
    ):
        code, _, err = _main(["sweep", *args, "--out", out, *SHORT])
        assert code == 2 and want in _one_line(err), (args, err)
    code, _, err = _main(
        ["plan", "--rate", "1", "--search", "hardware.gpu=h100-sxm", "--search", "hardware.gpu=h200", "--out", out]
    )
    assert code == 2 and "--search hardware.gpu given twice" in _one_line(err)
    assert not Path(out).exists()


def test_an_empty_set_value_is_an_error_not_the_default():
    """--set engine.max_num_seqs= (nothing after '=') is refused; =null asks for the default."""
    code, _, err = _main(["check", "--set", "engine.max_num_seqs="])
    assert code == 2 and _one_line(err).startswith("--set engine.max_num_seqs: no value after '='")
    assert _main(["check", "--set", "engine.max_num_seqs=null"])[0] == 0


ROWS = "arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n0.5,120,12\n1.25,90,9\n"


def test_traces_saved_with_a_byte_order_mark_read_as_without(tmp_path):
    """A UTF-8 trace with the byte-order mark spreadsheets write reads exactly as without it, by the
    fast reader and the row reader (a comment line sends it to the latter); JSON lines too."""
    plain = tmp_path / "plain.csv"
    plain.write_text(ROWS)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + ROWS.encode())
    commented = tmp_path / "commented.csv"
    commented.write_bytes(b"\xef\xbb\xbf# exported\n" + ROWS.encode())
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + b'{"arrival_time_s": 0, "prompt_tokens": 100, "output_tokens": 10}\n')
    assert _csv_fast(str(bom)) is not None
    want = read_trace(str(plain))
    for p in (bom, commented):
        got = read_trace(str(p))
        assert np.array_equal(got.arrival, want.arrival) and np.array_equal(got.prompt, want.prompt)
    assert read_trace(str(jsonl)).n == 1


def test_files_in_another_encoding_are_one_line_naming_file_and_line(tmp_path):
    """A Latin-1 trace, length file, scenario or calibration profile: one error naming the file, the
    line and the byte, not a UnicodeDecodeError."""
    trace = tmp_path / "latin.csv"
    trace.write_bytes(ROWS.encode() + b"2,50,5 # caf\xe9\n")
    with pytest.raises(ConfigError, match=r"^latin.csv line 5: not UTF-8 text \(byte 0xe9\)"):
        read_trace(str(trace))
    lengths = tmp_path / "lengths.txt"
    lengths.write_bytes(b"\xef\xbb\xbf12\n40\n")
    assert list(_load_lengths(str(lengths), str(lengths), None, 0, 0)) == [12, 40]
    lengths.write_bytes(b"12\n\xff40\n")
    with pytest.raises(ConfigError, match=r"^lengths.txt line 2: not UTF-8 text"):
        _load_lengths(str(lengths), str(lengths), None, 1, 1)
    scen = tmp_path / "s.yaml"
    scen.write_bytes(b"\xef\xbb\xbfengine: {max_num_seqs: 8}\n")
    assert load_scenario(str(scen))[0].engine.max_num_seqs == 8
    scen.write_bytes(b"name: caf\xe9\n")
    code, _, err = _main(["check", str(scen)])
    assert code == 2 and _one_line(err).startswith(f"{scen} line 1: not UTF-8 text (byte 0xe9)")
    prof = tmp_path / "p.csv"
    prof.write_bytes(b"gpu,model,batch,new_tokens,context,ms\nh100-sxm,llama-3.1-8b,1,1,0,7 \xe9\n")
    code, _, err = _main(["calibrate", str(prof), "-o", str(tmp_path / "c.yaml")])
    assert code == 2 and "p.csv line 2: not UTF-8 text" in _one_line(err)


def test_vllm_rules_the_scenario_must_follow(tmp_path):
    """A block size vLLM does not accept; a model whose sliding window is shorter than its requests
    can be (not modelled; accepted once max_model_len keeps requests inside the window)."""
    code, _, err = _main(["check", "--set", "engine.block_size=7"])
    assert code == 2 and _one_line(err) == "engine.block_size must be one of 1, 8, 16, 32, 64, 128 tokens (got 7)"
    assert _main(["check", "--set", "engine.block_size=8"])[0] == 0
    cfg = json.loads((ROOT / "simulator" / "data" / "models" / "llama-3.1-8b.json").read_text())
    model = tmp_path / "windowed" / "config.json"
    model.parent.mkdir()
    model.write_text(json.dumps({**cfg, "sliding_window": 4096, "max_position_embeddings": 32768}))
    code, _, err = _main(["check", "--set", f"model={model}"])
    msg = _one_line(err)
    assert (
        code == 2
        and "sliding_window 4096 (config.json) is not modelled" in msg
        and msg.endswith("(got max_model_len 32768)")
    )
    assert _main(["check", "--set", f"model={model}", "--set", "engine.max_model_len=4096"])[0] == 0


def test_swap_preemption_is_noted_as_vllm_v0_behaviour(tmp_path):
    """Swap preemption under a V1 release line runs, with a note that V1 has no swap (check and run)."""
    code, out, _ = _main(["check", "--set", "engine.preemption_mode=swap"])
    assert code == 0 and "has no swap preemption" in out
    code, out, _ = _main(["run", "--out", str(tmp_path), *SHORT, "--set", "engine.preemption_mode=swap"])
    assert code == 0 and "note: collapse_c1200: engine.preemption_mode 'swap'" in out
    code, out, _ = _main(["check"])
    assert "swap" not in out


def test_a_pool_that_cannot_hold_one_max_length_request_is_noted(tmp_path):
    """vLLM refuses to start when its KV pool cannot hold one request of max_model_len (and did for
    Qwen3-32B on one H100, whose pool servesim puts 0.9% above it): servesim runs, and says so."""
    code, out, _ = _main(["run", "--out", str(tmp_path / "a"), *SHORT, "--set", "engine.num_gpu_blocks_override=1000"])
    assert code == 0 and "vLLM would not start this server: its KV pool (15,984 tokens)" in out
    assert "set engine.max_model_len <= 15,984" in out
    trace = tmp_path / "burst.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n" + "0,4000,20\n" * 4)
    q32 = tmp_path / "q32.yaml"  # the recorded server's settings (data/e2e/h100_long_2026-11-28), vLLM's defaults
    q32.write_text(
        "model: qwen3-32b\nhardware: {gpu: h100-sxm}\nengine: {vllm_version: '0.26'}\n"
        f"workload: {{trace: {trace}}}\nrun: {{duration_s: null, warmup_s: 0}}\n"
    )
    code, out, _ = _main(["run", str(q32), "--out", str(tmp_path / "b")])
    assert code == 0 and "vLLM may not start this server: its KV pool (41,328 tokens)" in out
    code, out, _ = _main(["run", "--out", str(tmp_path / "c"), *SHORT])
    assert "start this server" not in out
    # SGLang starts with any pool (a request is capped at the pool's tokens less one): no such note
    sgl = [str(ROOT / "scenarios" / "sglang_collapse.yaml"), "--set", "engine.mem_fraction_static=0.3"]
    code, out, _ = _main(["run", *sgl, "--out", str(tmp_path / "d"), *SHORT])
    assert code == 0 and "KV pool" not in out and "start this server" not in out


def test_a_cache_aware_sglang_policy_without_the_radix_cache_is_noted_as_fcfs(tmp_path):
    """SGLang runs lpm (or dfs-weight) as fcfs when the radix cache is off, and servesim says so."""
    sgl = [str(ROOT / "scenarios" / "sglang_collapse.yaml"), "--set", "engine.schedule_policy=lpm"]
    code, out, _ = _main(
        ["run", *sgl, "--out", str(tmp_path / "a"), *SHORT, "--set", "engine.disable_radix_cache=true"]
    )
    assert code == 0 and "engine.schedule_policy 'lpm' orders the queue by the radix cache" in out
    code, out, _ = _main(["run", *sgl, "--out", str(tmp_path / "b"), *SHORT])
    assert code == 0 and "orders the queue by the radix cache" not in out


def test_errors_in_one_of_several_scenario_files_name_the_file(tmp_path):
    """check and run with several files: each error names its file (a field error, an error found
    when building, malformed YAML); the good files still run."""
    good = tmp_path / "good.yaml"
    good.write_text("run: {duration_s: 5, warmup_s: 0}\nworkload: {arrival: {concurrency: 16}}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: {max_num_seqs: 0}\n")
    tp = tmp_path / "tp.yaml"
    tp.write_text("hardware: {tensor_parallel_size: 3}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("engine: {max_num_seqs: 4\nrun: {}\n")
    code, out, err = _main(["check", str(good), str(bad), str(tp), str(broken)])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 3 and out.startswith(f"{good}: ok")
    assert lines[0] == f"error: {bad}: engine.max_num_seqs must be >= 1 (got 0)"
    assert lines[1].startswith(f"error: {tp}: hardware.tensor_parallel_size must divide")
    assert lines[2].startswith(f"error: {broken}: malformed YAML")
    code, out, err = _main(["run", str(good), str(bad), "--out", str(tmp_path / "runs"), "--jobs", "1"])
    assert code == 1 and f"error: {bad}: engine.max_num_seqs must be >= 1 (got 0)" in err and "good" in out


def test_parser_errors_are_one_line():
    """An unknown option or a missing argument is one line pointing at the command's help."""
    code, _, err = _main(["run", "--outt", "x"])
    assert code == 2 and "unrecognized arguments: --outt (see servesim --help)" in _one_line(err)
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parser().parse_args(["run", "--set"])
    # plan's target rate is required unless it weighs a policy over a day (--day): said in one line.
    code, _, err = _main(["plan"])
    assert code == 2 and "plan: --rate is required" in _one_line(err)
    assert isinstance(parser(), argparse.ArgumentParser)


def test_yaml_is_bounded_and_x_keys_hold_anchors(tmp_path):
    """A scenario file, a --set value and a --param value whose nested aliases would expand past
    ``yamlio.MAX_VALUES`` values, or that refer to themselves, and a file past ``MAX_BYTES``: one
    line, within a second, nothing built. Top-level ``x-`` keys are ignored, so anchors kept there
    give the same scenario as the values written out."""
    import time

    from simulator.scenario import yamlio

    laughs = "".join(
        f"x-{k}: &{k} [{', '.join([f'*{p}'] * 10 if p else ['1'] * 10)}]\n"
        for p, k in zip(["", *"abcdefgh"], "abcdefghi")
    )
    (tmp_path / "laughs.yaml").write_text(laughs + "name: laughs\n")
    (tmp_path / "loop.yaml").write_text("x-a: &a [1, *a]\n")
    (tmp_path / "big.yaml").write_text("# padding\n" * (yamlio.MAX_BYTES // 10 + 1))
    flow = "&a [1,1,1,1,1,1,1,1,1,1]" + "".join(
        f", &{k} [" + ",".join([f"*{p}"] * 10) + "]" for p, k in zip("abcdef", "bcdefg")
    )
    cases = [
        (["check", str(tmp_path / "laughs.yaml")], "expand to more than 1,000,000 values"),
        (["run", str(tmp_path / "laughs.yaml")], "expand to more than 1,000,000 values"),
        (["check", str(tmp_path / "loop.yaml")], "must not refer to itself"),
        (["check", str(tmp_path / "big.yaml")], f"servesim reads YAML files up to {yamlio.MAX_BYTES:,} bytes"),
        (["check", "--set", f"sweep=[{flow}]"], "--set sweep: its aliases expand"),
        (["sweep", "--param", f"engine.max_num_seqs=[{flow}]"], "--param engine.max_num_seqs: its aliases expand"),
    ]
    for args, want in cases:
        t0 = time.perf_counter()
        code, _, err = _main(args)
        assert code == 2 and want in err and err.count("\n") == 1, (args, err)
        assert time.perf_counter() - t0 < 2, args
    (tmp_path / "anchors.yaml").write_text(
        "x-engine: &eng {max_num_seqs: 64, enable_prefix_caching: false}\n"
        "x-notes: anything at all\nengine: *eng\nname: same\n"
    )
    (tmp_path / "plain.yaml").write_text("engine: {max_num_seqs: 64, enable_prefix_caching: false}\nname: same\n")
    a, raw = load_scenario(str(tmp_path / "anchors.yaml"))
    assert a == load_scenario(str(tmp_path / "plain.yaml"))[0] and "x-engine" not in raw


def test_an_moe_models_decode_steps_without_cuda_graphs_are_noted(tmp_path):
    """An MoE model on one GPU whose decode batches outgrow the largest CUDA graph (vLLM's 512 by
    default, SGLang's 256 on an H200) is noted, with the knob that keeps them graphed; capturing
    graphs past max_num_seqs silences it, and so does a dense model."""
    moe = tmp_path / "moe.yaml"
    moe.write_text(
        "model: qwen3-30b-a3b\nhardware: {gpu: h200}\n"
        "workload: {arrival: {type: closed_loop, concurrency: 768}, prompt_tokens: {dist: fixed, value: 64},"
        " output_tokens: {dist: fixed, value: 256}}\nrun: {seed: 0, num_requests: 1536}\n"
    )
    code, out, _ = _main(["run", str(moe), "--out", str(tmp_path / "a")])
    assert code == 0 and "decode more requests than its largest CUDA graph (512) and run without one" in out
    assert "engine.max_cudagraph_capture_size at least max_num_seqs, or max_num_seqs within 512" in out
    code, out, _ = _main(["run", str(moe), "--out", str(tmp_path / "b"), "--set", "engine.framework=sglang"])
    assert code == 0 and "engine.cuda_graph_max_bs at least max_running_requests" in out
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["ungraphed_decode_steps"] > 0.5
    for extra in ("engine.max_cudagraph_capture_size=1024", "model=llama-3.1-8b"):
        code, out, _ = _main(["run", str(moe), "--out", str(tmp_path / "c"), "--set", extra])
        assert code == 0 and "largest CUDA graph" not in out, extra
        assert "ungraphed_decode_steps" not in json.loads((tmp_path / "c" / "summary.json").read_text())
    # a sweep whose recommended point decodes past the largest graph says so beside its recommendation
    code, out, _ = _main(["sweep", str(moe), "--param", "engine.max_num_seqs=64,768", "--out", str(tmp_path / "s")])
    line = next(x for x in out.splitlines() if x.startswith("recommended:"))
    assert code == 0 and "max_num_seqs=768" in line and "decode more requests than the largest CUDA graph" in line
