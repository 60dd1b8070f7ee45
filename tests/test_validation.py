"""The public measurements servesim is checked against, and the checks themselves."""

from __future__ import annotations

import re

from simulator import validate

RUNS = validate.load(validate.RUNS_FILE)
KV = validate.load(validate.KV_FILE)


def test_kv_lines_quote_what_they_claim_and_the_pool_matches_them():
    """Every KV-pool entry quotes its 'GPU KV cache size' line with the printed number; servesim's
    pool is within 2% of at least 25 of the 31 (within 1% of the median), held-out lines included."""
    for e in KV["lines"]:
        quoted = " ".join(e["quote"])
        assert f"GPU KV cache size: {e['printed']['kv_cache_tokens']:,} tokens" in quoted, e["id"]
        assert e["url"].startswith("https://") and e["split"] in ("calibrate", "heldout")
    rows = validate.kv_rows()
    errs = [abs(r["error"]) for r in rows]
    assert len(rows) == len(KV["lines"]) >= 15
    assert sum(e <= 0.02 for e in errs) >= 25 and validate.median(errs) < 0.01
    held = [abs(r["error"]) for r in rows if r["split"] == "heldout"]
    assert len(held) >= 10 and sum(e <= 0.02 for e in held) >= len(held) - 2


def test_run_collection_covers_what_it_must():
    """At least 25 runs from at least 3 sources, 2+ GPU types, an MoE model, tensor parallelism of
    4 or more, bursts and fixed concurrency; each with its URL, quoted commands, version and results."""
    runs = RUNS["runs"]
    assert len(runs) >= 25
    assert len({r["source"] for r in runs}) >= 3 and len({r["gpu"] for r in runs}) >= 2
    assert any(r["model"] in ("qwen3-235b-a22b", "glm-4.5-air", "deepseek-v3") for r in runs)
    assert any(r["tensor_parallel_size"] >= 4 for r in runs)
    assert any(r["bench"]["max_concurrency"] for r in runs)
    assert any(r["bench"]["request_rate"] == "inf" and not r["bench"]["max_concurrency"] for r in runs)
    for r in runs:
        assert r["url"].startswith("https://") and r["split"] in ("calibrate", "heldout")
        assert re.search(r"vllm (serve|bench)|benchmark_serving|serve", r["serve_command"] + r["bench_command"])
        assert r["vllm_version"] and r["servesim_version"] in ("0.10", "0.11", "0.19", "0.32")
        for k in ("output_token_throughput", "mean_ttft_ms"):
            assert r["results"][k] > 0, (r["id"], k)
    assert sum(r["split"] == "heldout" for r in runs) >= 10
    assert RUNS["rejected"] and all(x.get("reason") and x.get("url") for x in RUNS["rejected"])


def test_every_run_simulates_and_errors_are_summarised_per_split(tmp_path):
    """All runs simulate (none fails), the report and plot are written, and the errors stay where
    they were when the constants were fitted (a regression guard, not the targets)."""
    results = validate.run_all(RUNS["runs"], jobs=1)
    assert not [r.id for r in results if r.error]
    s = validate.error_summary(results)
    for split in ("calibrate", "heldout"):
        assert s[(split, "output_throughput")]["runs"] >= 10
        assert s[(split, "output_throughput")]["median_abs_error"] < 0.25
        assert s[(split, "mean_ttft_ms")]["median_abs_error"] < 0.35
        assert s[(split, "mean_tpot_ms")]["median_abs_error"] < 0.20
    lines = validate.write_runs_report(RUNS["runs"], results, tmp_path)
    assert (tmp_path / "runs.csv").read_text().count("\n") == len(results) + 1 and "heldout" in "\n".join(lines)
    assert validate.plot_runs(RUNS["runs"], results, tmp_path / "v.png").stat().st_size > 10_000


def test_a_run_that_cannot_be_simulated_is_reported_not_raised():
    """A broken entry keeps its error beside the others' results."""
    bad = dict(RUNS["runs"][0], id="broken", model="no-such-model")
    r = validate.simulate_run(bad)
    assert r.error.startswith("ConfigError: model: unknown model 'no-such-model'") and r.simulated == {}
