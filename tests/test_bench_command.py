"""``servesim bench``: a `vllm bench serve --save-result` file replayed, servesim's figures beside it."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from simulator.cli import main
from simulator.commands.bench import requests_kept, scenario_data
from simulator.errors import ConfigError
from simulator.outputs.bench_table import compare_rows


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def _result(**kw) -> dict:
    r = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 16, "request_rate": "inf",
         "burstiness": 1.0, "max_concurrency": 4, "completed": 16, "total_input_tokens": 16 * 256,
         "total_output_tokens": 16 * 64, "request_throughput": 3.0, "output_throughput": 190.0,
         "mean_ttft_ms": 40.0, "median_ttft_ms": 38.0, "mean_tpot_ms": 6.0, "median_tpot_ms": 6.0}  # fmt: skip
    r.update(kw)
    return r


def test_the_requests_are_sent_as_the_benchmark_sent_them():
    """A cap on concurrency: that many closed-loop clients; no cap and no rate: every request at once;
    a rate: Poisson, gamma with the burstiness's cv; each request's lengths where the file kept them
    (in order for the clients, drawn from them for a rate), else the totals' means."""
    d = scenario_data(_result(), "b", None, "l.csv")
    assert d["workload"]["arrival"] == {"type": "closed_loop", "concurrency": 4}
    assert d["workload"]["prompt_tokens"] == {"dist": "fixed", "value": 256}
    assert d["workload"]["output_tokens"] == {"dist": "fixed", "value": 64}
    assert d["run"] == {"num_requests": 16, "duration_s": None, "warmup_s": 0, "seed": 0}
    d = scenario_data(_result(max_concurrency=None), "b", [(0.0, 256, 64)] * 16, "l.csv")
    assert d["workload"]["arrival"] == {"type": "closed_loop", "concurrency": 16}
    assert d["workload"]["trace"] == "l.csv" and d["workload"]["trace_arrivals"] == "closed_loop"
    d = scenario_data(_result(max_concurrency=None, request_rate=8), "b", [(0.0, 256, 64)] * 16, "l.csv")
    assert d["workload"]["arrival"] == {"type": "poisson", "rate": 8.0}
    assert d["workload"]["prompt_tokens"] == {"dist": "empirical", "file": "l.csv", "column": "prompt_tokens"}
    sent = [(k / 8, 256, 64) for k in range(16)]  # the file kept each request's send time: replayed as sent
    d = scenario_data(_result(max_concurrency=None, request_rate=8), "b", sent, "l.csv")
    assert d["workload"] == {"trace": "l.csv", "trace_arrivals": "recorded"}
    d = scenario_data(_result(max_concurrency=None, request_rate=8, burstiness=0.25), "b", None, "l.csv")
    assert d["workload"]["arrival"] == {"type": "gamma", "rate": 8.0, "cv": 2.0}
    assert scenario_data(_result(backend="openai-chat"), "b", None, "l.csv")["frontend"]["endpoint"] == "chat"
    with pytest.raises(ConfigError, match=r"^bench: request_rate must be a number > 0 or 'inf' \(got 'fast'\)$"):
        scenario_data(_result(request_rate="fast"), "b", None, "l.csv")
    with pytest.raises(ConfigError, match=r"^bench: max_concurrency must be a number > 0 or null \(got -1\)$"):
        scenario_data(_result(max_concurrency=-1), "b", None, "l.csv")


def test_the_requests_kept_are_the_completed_ones_with_their_send_times():
    """A failed request (an error, no output) is left out; send times count from the first; a file
    whose lists do not add up to its completed count gives none."""
    r = _result(completed=3, input_lens=[10, 20, 30, 40], output_lens=[5, 0, 7, 9], errors=["", "boom", "", ""],
                start_times=[100.5, 100.7, 101.0, 102.5])  # fmt: skip
    assert requests_kept(r) == [(0.0, 10, 5), (0.5, 30, 7), (2.0, 40, 9)]
    assert requests_kept({**r, "completed": 4}) is None
    assert requests_kept({**r, "start_times": None}) == [(0.0, 10, 5), (0.0, 30, 7), (0.0, 40, 9)]


def test_the_comparison_keeps_the_files_figures_and_servesims_error():
    rows = compare_rows(
        {"output_throughput": 200.0, "median_ttft_ms": 40.0, "p99_tpot_ms": None}, {"output_throughput": 210.0}
    )
    assert rows == [
        ("output_throughput", "Output token throughput (tok/s)", 200.0, 210.0, pytest.approx(0.05)),
        ("median_ttft_ms", "Median TTFT (ms)", 40.0, None, None),
    ]


def test_bench_replays_a_detailed_result_end_to_end(tmp_path):
    """The command: the Hugging Face id runs as the built-in model, each request's lengths are
    replayed in order, the table sets both figures side by side and bench_compare.csv keeps them;
    without a GPU, one line says what to give."""
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_result(input_lens=[256] * 16, output_lens=[64] * 8 + [32] * 8)))
    code, _, err = _run(["bench", str(f), "--out", str(tmp_path / "no")])
    assert code == 2 and err.startswith(
        "error: bench: the result does not say what served it; give --set hardware.gpu="
    )
    code, out, err = _run(["bench", str(f), "--set", "hardware.gpu=h100-sxm", "--out", str(tmp_path / "b")])
    assert code == 0, err
    assert "vllm bench    servesim       error" in out and "Output token throughput (tok/s)" in out
    assert "replayed 16 requests with each request's lengths, on h100-sxm x1" in out
    assert "runs as the built-in llama-3.1-8b" in out
    lines = (tmp_path / "b" / "bench_compare.csv").read_text().splitlines()
    assert lines[0] == "metric,vllm_bench,servesim" and lines[2].startswith("output_throughput,190.0,")
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["num_completed"] == 16 and summary["model"] == "llama-3.1-8b"
    code, _, err = _run(["report", str(tmp_path / "b")])  # the run's page shows the comparison too
    page = (tmp_path / "b" / "report.html").read_text()
    assert code == 0 and "<h2>Against vllm bench serve</h2>" in page and "Output token throughput (tok/s)" in page
    trace = (tmp_path / "b" / "bench_lengths.csv").read_text().splitlines()
    assert trace[1] == "0.0,256,64" and trace[-1] == "0.0,256,32"
    served = tmp_path / "served.json"  # a model the server loaded from its own disk
    served.write_text(json.dumps(_result(model_id="/models/Llama-3.1-8B-Instruct")))
    code, _, err = _run(["bench", str(served), "--set", "hardware.gpu=h200", "--out", str(tmp_path / "s")])
    assert code == 2 and "its model_id '/models/Llama-3.1-8B-Instruct' is no built-in model" in err
    assert "give --set model=..." in err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    code, _, err = _run(["bench", str(bad), "--set", "hardware.gpu=h200"])
    assert code == 2 and "not a `vllm bench serve --save-result` file (no 'completed')" in err


def test_bench_over_several_results_gives_one_table_and_goes_on_past_a_bad_file(tmp_path):
    """A benchmark at several loads: a folder per file, one line per file with each headline figure
    measured and servesim's; a file that is not a result is said in one line and the rest still run."""
    files = []
    for c in (2, 8):
        f = tmp_path / f"c{c}.json"
        f.write_text(json.dumps(_result(max_concurrency=c)))
        files.append(str(f))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    code, out, err = _run(["bench", files[0], str(bad), files[1], "--set", "hardware.gpu=h100-sxm",
                           "--out", str(tmp_path / "all")])  # fmt: skip
    assert code == 1 and err.count("error: ") == 1 and "bad.json: not a `vllm bench serve --save-result` file" in err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["result", "load", "out", "tok/s"]
    for line, c in zip(lines[1:3], (2, 8)):  # the file's 190 tok/s beside servesim's, and the error
        cells = line.split()
        assert cells[:4] == [f"c{c}.json", str(c), "in", "flight"] and cells[4] == "190"
        assert re.fullmatch(r"[+-]\d+\.\d%", cells[6])
    assert sorted(p.name for p in (tmp_path / "all").iterdir() if p.is_dir()) == ["c2", "c8"]
    assert (tmp_path / "all" / "c8" / "bench_compare.csv").is_file()
