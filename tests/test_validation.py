"""The public measurements servesim is checked against, and the checks themselves."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_png_drawn

from simulator.outputs import notes
from simulator.scenario import versions
from simulator.scenario.models import load_model
from simulator.validation import validate

ROOT = Path(__file__).resolve().parents[1]
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
        assert r["vllm_version"] and versions.release_name(r["servesim_version"]) == r["servesim_version"]
        assert r["results"]["output_token_throughput"] > 0, r["id"]
        assert r["results"].get("mean_ttft_ms", 1.0) > 0, r["id"]
    # three sources quote a throughput alone (vLLM issue #30326, the vLLM blog's FP8 KV-cache runs)
    assert sum("mean_ttft_ms" not in r["results"] for r in runs) == 3
    assert sum(r["split"] == "heldout" for r in runs) >= 10
    assert RUNS["rejected"] and all(x.get("reason") and x.get("url") for x in RUNS["rejected"])


def test_every_run_simulates_and_errors_are_summarised_per_split(tmp_path, monkeypatch):
    """All runs simulate (none fails), the report and plot are written, and the errors stay where
    they were when the constants were fitted (a regression guard, not the targets); the plot shows
    every run as a point (measured, simulated) per metric, and the medians in its titles. The gpt-oss
    runs, added held out after the fit (one since fits a Harmony chat's fixed delay), are guarded apart at their own
    errors: 25-40% median per metric (short chat requests are served far faster than servesim's
    host costs allow; TP2 and TP4 ShareGPT bursts are underestimated, long-prompt bursts overestimated),
    and GPUStack's A100 runs of them, added later still, at theirs."""
    results = validate.run_all(RUNS["runs"], jobs=1)
    assert not [r.id for r in results if r.error]
    s = validate.error_summary(results)
    # GPUStack's gpt-oss on A100s (vLLM 0.11, MXFP4 through weight-only kernels), added held out later still
    a100 = {r["id"] for r in RUNS["runs"] if r["model"].startswith("gpt-oss") and r["gpu"].startswith("a100")}
    gpt_oss = {
        r["id"] for r in RUNS["runs"] if r["model"].startswith("gpt-oss") and r["source"].startswith("GPUStack")
    } - a100
    # added from the 2026 collection (tools/validation/add_public_2026.py): DeepSeek-R1 on 8 H200s,
    # gpt-oss-120b on 8 B200s and 8 H200s, gpt-oss-20b on an H100, DeepSeek-R1 on 8 MI300Xs (the vLLM
    # recipes' guide); each within 1.5x in throughput; and llm-d's Llama-3.3-70B FP8 rows on 8 MI355Xs (vLLM 0.15.1 on ROCm), guarded apart below
    mi355x = {r["id"] for r in RUNS["runs"] if r["gpu"] == "mi355x"}
    later = {r["id"] for r in RUNS["runs"] if any("models-gpus-2026" in n for n in r.get("notes", []))} - a100 - mi355x
    assert len(later) == 9 and len(a100) == 27 and len(mi355x) == 12
    for r in results:
        if r.id in later:
            assert 1 / 1.5 < 1 + r.rel_error("output_throughput") < 1.5, (r.id, r.rel_error("output_throughput"))
    fitted_era = validate.error_summary([r for r in results if r.id not in gpt_oss | later | a100 | mi355x])
    for split in ("calibrate", "heldout"):
        assert fitted_era[(split, "output_throughput")]["runs"] >= 10
        assert fitted_era[(split, "output_throughput")]["median_abs_error"] < 0.25
        assert fitted_era[(split, "mean_ttft_ms")]["median_abs_error"] < 0.35
        assert fitted_era[(split, "mean_tpot_ms")]["median_abs_error"] < 0.20
    oss = validate.error_summary([r for r in results if r.id in gpt_oss])
    # one of them, the H100's chat at 4 in flight, since fits gpt-oss's Harmony chat its own fixed delay
    assert (
        oss[("heldout", "output_throughput")]["runs"] == len(gpt_oss) - 1 == 24
        and oss[("calibrate", "mean_ttft_ms")]["runs"] == 1
    )
    assert oss[("heldout", "output_throughput")]["median_abs_error"] < 0.45
    # GPUStack's H100 gpt-oss runs at their errors once the MXFP4 prefill on Hopper took the rate measured
    # on vLLM 0.26 (cost.MXFP4_WEIGHT_ONLY_MOE_COMPUTE): 37% / 39% / 43% (34% / 29% / 33% before; their
    # long-prompt bursts 34-81% fast, as this machine's dense-model bursts are: docs/validation.md)
    assert oss[("heldout", "mean_ttft_ms")]["median_abs_error"] < 0.42
    assert oss[("heldout", "mean_tpot_ms")]["median_abs_error"] < 0.47
    # the A100 runs at their own errors, once vLLM's Triton attention (gpt-oss's sinks) is priced at the
    # rate one of them fits (cost.TRITON_ATTN_COMPUTE): 9.5% in throughput, 18% in mean TTFT, 20% in
    # mean TPOT over the other 26 (14%, 29% and 16% over 27 at FlashAttention-2's rate, the 32k-token
    # prompts 66-81% fast; 26%, 43% and 16% before gpt-oss's Harmony chat was taken in as a completion)
    amp = validate.error_summary([r for r in results if r.id in a100])
    assert amp[("heldout", "output_throughput")]["runs"] == 26 and amp[("calibrate", "output_throughput")]["runs"] == 1
    assert amp[("heldout", "output_throughput")]["median_abs_error"] < 0.12
    assert amp[("heldout", "mean_ttft_ms")]["median_abs_error"] < 0.22
    assert amp[("heldout", "mean_tpot_ms")]["median_abs_error"] < 0.22
    # the MI355X's six held-out rows at their errors once its per-layer time and vLLM's Triton attention
    # rates were fitted on three others (12% in throughput, 8% in mean TTFT; blind, 59% and 37%)
    amd = validate.error_summary([r for r in results if r.id in mi355x])
    assert amd[("heldout", "output_throughput")]["runs"] == 6 and amd[("calibrate", "output_throughput")]["runs"] == 3
    assert amd[("heldout", "output_throughput")]["median_abs_error"] < 0.15
    assert amd[("heldout", "mean_ttft_ms")]["median_abs_error"] < 0.12
    lines = validate.write_runs_report(RUNS["runs"], results, tmp_path)
    assert (tmp_path / "runs.csv").read_text().count("\n") == len(results) + 1 and "heldout" in "\n".join(lines)
    from matplotlib.collections import PathCollection
    from matplotlib.figure import Figure

    saved: list = []
    savefig = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), savefig(fig, *a, **k))[1])
    assert_png_drawn(validate.plot_runs(RUNS["runs"], results, tmp_path / "v.png"))
    (fig,) = saved
    for ax, m in zip(fig.axes, validate.METRICS):
        points = np.concatenate([c.get_offsets() for c in ax.collections if isinstance(c, PathCollection)])
        want = [(r.measured[m], r.simulated[m]) for r in results if r.measured.get(m) and r.simulated.get(m)]
        np.testing.assert_allclose(sorted(map(tuple, points.tolist())), sorted(want))
        held = 100 * s[("heldout", m)]["median_abs_error"]
        assert f"{held:.0f}% held out" in ax.get_title() and ax.get_xlabel().startswith("measured ")


def test_a_run_that_cannot_be_simulated_is_reported_not_raised():
    """A broken entry keeps its error beside the others' results."""
    bad = dict(RUNS["runs"][0], id="broken", model="no-such-model")
    r = validate.simulate_run(bad)
    assert r.error.startswith("ConfigError: model: unknown model 'no-such-model'") and r.simulated == {}


E2E = validate.load(validate.E2E_FILE)


def test_recorded_runs_carry_their_commands_and_requests():
    """Every recorded run names its serve and bench commands, its split and server facts, and its
    trace holds one row per completed request with the server's prompt counts."""
    runs = E2E["runs"]
    assert len(runs) >= 30 and {r["split"] for r in runs} == {"calibrate", "heldout"}
    assert {r["model"] for r in runs} >= {"llama-3.1-8b", "qwen3-32b", "qwen3-30b-a3b"}
    assert any(r["tensor_parallel_size"] == 2 for r in runs)
    for r in runs:
        # vLLM's benchmark, or tools/e2e/bench_tokens.py: the same benchmark sending token ids
        bench = r["bench_command"]
        assert r["serve_command"].startswith("vllm serve"), r["id"]
        assert "bench serve" in bench or "tools/e2e/bench_tokens.py" in bench, r["id"]
        rows = (validate.DATA / r["trace"]).read_text().splitlines()
        assert rows[0] == "arrival_time_s,prompt_tokens,output_tokens"
        assert len(rows) - 1 == r["measured"]["completed"], r["id"]
        assert r["server"]["kv_cache_tokens"] > 0 and r["measured"]["output_throughput"] > 0


# Recorded servers whose pool servesim misses by more than 2%, with why; each is also checked on its
# own (below) so that it shows as fixed once it is.
KV_POOL_MISSES = {
    # gpt-oss-120b at 0.52 of an H200 (an H100's memory): vLLM's "Model loading took 61.43 GiB" is
    # 0.37 GiB more than servesim's weights with the MXFP4 kernel's padding; at a 7.3 GiB pool that
    # is +3.8% (the same 0.37 GiB is 0.6% of the pool at 0.92, where every other 120b server ran)
    "h200_gptoss_pool_2026-12-03_gptoss120b_pool": 0.05,
    "h200_gptoss_stall_2026-12-03_gptoss120b_stall": 0.05,  # the same server settings, on another machine
}


def test_recorded_kv_pools_match_the_servers_logs():
    """The KV pool servesim sizes for each recorded server (V2 model runner for dense models, V1 for
    the MoE one, on release line 0.26) is within 2% of the pool the server logged, but for the
    misses named above, each within its own bound."""
    rows = validate.kv_rows_recorded()
    assert len(rows) == len({(r["recording"], r["lane"]) for r in E2E["runs"]}) >= 7
    assert set(KV_POOL_MISSES) <= {r["id"] for r in rows}
    assert all(abs(r["error"]) <= KV_POOL_MISSES.get(r["id"], 0.02) for r in rows), [
        (r["id"], r["error"]) for r in rows
    ]


@pytest.mark.xfail(strict=True, reason="0.37 GiB of gpt-oss-120b's loaded weights not accounted for (KV_POOL_MISSES)")
def test_recorded_kv_pool_misses_are_within_two_percent():
    rows = {r["id"]: r for r in validate.kv_rows_recorded()}
    assert all(abs(rows[k]["error"]) <= 0.02 for k in KV_POOL_MISSES)


def test_a_hybrid_models_printed_pool_counts_the_batches_in_flight_by_hand():
    """gpt-oss-120b (18 sliding-window layers of 128 tokens, 18 full-attention; max_model_len 10,240,
    8,192 tokens a step, 16-token blocks): vLLM prints its pool as the pool's blocks over what one
    request may hold, 640 blocks in the full group and, in the window group, its window plus the
    tokens in flight, capped at 640: 127 + 8,192 tokens (520 + 1 blocks) without async scheduling,
    two steps' (capped: 640 + 1) with it from 0.26.0; one step's before 0.26 either way. So the same
    memory prints (640 + 641) / (640 + 521) = 1.103x the tokens without async scheduling on 0.26
    (the recorded servers: 1,015,691 against 920,544 tokens, h200_sync_2026-12-02)."""
    from simulator.resolve import engine_defaults, load_arch, memory_plan
    from simulator.scenario.config import load_scenario
    from simulator.scenario.hardware import load_gpu

    def printed(version: str, overlap: bool) -> int:
        over = [
            "model=gpt-oss-120b",
            "hardware.gpu=h200",
            "engine.max_model_len=10240",
            f"engine.vllm_version={version}",
        ]
        sc, _ = load_scenario(None, [*over, f"engine.async_scheduling={str(overlap).lower()}"])
        model, gpu = load_arch(sc), load_gpu("h200")
        seqs, tokens = engine_defaults(gpu, sc)
        assert tokens == 8192
        return validate.printed_pool(sc, model, memory_plan(sc, model, gpu, seqs, tokens), tokens)[0]

    assert printed("0.26", False) / printed("0.26", True) == pytest.approx(1281 / 1161, rel=1e-4)
    assert printed("0.25.1", False) == printed("0.25.1", True)


def test_recorded_runs_replay_within_their_errors(tmp_path):
    """Replaying the recorded runs request for request, the held-out medians stay where they were
    when the host costs were fitted (a regression guard: throughput and p50 TPOT within 6%, p50
    TTFT within 27%), p50 TTFT within 25% at the median over every held-out run, every run of the API-server recording (one, two and four API servers) within
    10% in throughput, preemptions within 2x wherever the server preempted, and the report and plot
    are written."""
    results = validate.run_all(E2E["runs"], jobs=2, recorded=True)
    assert not [r.id for r in results if r.error]
    # The guard covers the runs there were when the host costs were first fitted; the third
    # recording (past saturation) is a known miss, pinned below, the fourth (the engine's iteration
    # log) is reported, not guarded, the fifth (API servers) is held to the target, the
    # sixth (the collapse case on an H100 host beside a second server) is a known miss, pinned
    # below, and the recordings of 2026-11-28 (the sixth and the third again, each lane alone on a
    # fresh machine of the same kind) are held to the target in throughput; the profiled
    # runs (tools/e2e/stack_sampler.py) are reported, one of them pinned below.
    overload = [r for r in results if r.id.startswith("h200x2_overload_2026-11-27_")]
    overload_again = [r for r in results if r.id.startswith("h200x2_overload_2026-11-28_")]
    pace = [r for r in results if r.id.startswith("h200x2_pace_")]
    collapse = [r for r in results if r.id.startswith("h100x2_collapse_")]
    alone = [r for r in results if r.id.startswith("h100x2_alone_")]
    steps = [r for r in results if r.id.startswith("h200x2_steps_")]
    profiled = [r for r in results if "_profile_2026-11-28_" in r.id]
    later = overload + overload_again + pace + collapse + alone + steps + profiled
    s = validate.error_summary([r for r in results if r not in later], validate.E2E_METRICS)
    assert s[("heldout", "output_throughput")]["median_abs_error"] < 0.06
    assert s[("heldout", "median_tpot_ms")]["median_abs_error"] < 0.06
    assert s[("heldout", "median_ttft_ms")]["median_abs_error"] < 0.27
    # Every held-out run: p50 TTFT within the 25% at the median (20.8% with the closed loop's
    # turnaround, simulator/engine/host.py; 33.1% without it).
    every = validate.error_summary(results, validate.E2E_METRICS)
    assert every[("heldout", "median_ttft_ms")]["median_abs_error"] < 0.25
    assert len(pace) == 7 and len(overload_again) == 3
    # A known miss, pinned: two and four API servers at 768 clients, whose steps run without a CUDA
    # graph, as the same servers' 840-client runs do: servesim gives both about the same throughput,
    # the servers 10% more at 768, so servesim is 14-17% low there and within 5% at 840
    # (data/e2e/README.md, "h200_overlap4_2026-12-04"; docs/hosts.md, "The catalog", says so too). A change that
    # moves it must move the docs too.
    api4 = [r for r in pace if "_c768" in r.id and ("_api2_" in r.id or "_api4_" in r.id)]
    assert len(api4) == 2 and all(-0.18 < r.rel_error("output_throughput") < -0.12 for r in api4)
    held = [r for r in pace + overload_again if r not in api4]
    assert all(abs(r.rel_error("output_throughput")) < 0.10 for r in held), [
        (r.id, r.rel_error("output_throughput")) for r in held
    ]
    profiled_r60 = "h100_profile_2026-11-28_llama8b_profile_light_r60"
    # Runs shown but not counted (confounded: the verdict leaves them out) are not held to it either:
    # gpt-oss-20b where its cache binds (h200_gptoss_kv_2026-12-01) stalled 15.6 s and preempted 8
    # times to servesim's 28 (data/e2e/README.md says so).
    for r in results:
        m, sim = r.detail["server_preemptions"], r.detail["num_preemptions"]
        if m and r.id != profiled_r60 and not r.confounded:
            assert m / 2 <= sim <= 2 * m, r.id
    # Past saturation on the profiled H100 machine the server took in up to 1,274 requests, filled
    # its KV cache (99%) and preempted 77; servesim's paced engine holds fewer and preempts none
    # (docs/validation.md, "Where the time goes"). A change that moves this must move the docs too.
    (r60,) = [r for r in profiled if r.id == profiled_r60]
    assert r60.detail["server_preemptions"] == 77 and r60.detail["num_preemptions"] < 77 / 2
    # Past saturation this recording's servers gave less than servesim's paced engine (docs/
    # validation.md, "Overload"): it predicts 11-35% more throughput; the same lane alone on another
    # machine gave 17-29% more than here. A change that moves this must move the docs too.
    assert len(overload) == 5
    for r in overload:
        err = r.rel_error("output_throughput")
        assert 0.05 < err < 0.45, (r.id, err)
    # The collapse case on the H100 machine whose server had a second one beside it: servesim is
    # 18-30% fast there, while its KV usage matches within 2 points. The same runs alone on another
    # machine of the same kind (README, "The collapse"): throughput and p50 TPOT within the issue's
    # 10%, KV usage within 3 points, preemptions within 15% (replayed on the machine's probe reading,
    # x1.11, where its own runs fit x1.20: 893 against 1,009 at 1,200 clients).
    assert len(collapse) == len(alone) == 3
    for r in collapse:
        err = r.rel_error("output_throughput")
        assert 0.1 < err < 0.4, (r.id, err)
        assert abs(r.detail["kv_usage_max"] - r.detail["server_kv_usage_max"]) < 0.03, r.id
    for r in alone:
        assert abs(r.rel_error("output_throughput")) < 0.10 and abs(r.rel_error("median_tpot_ms")) < 0.10, r.id
        assert abs(r.detail["kv_usage_max"] - r.detail["server_kv_usage_max"]) < 0.03, r.id
        m, sim = r.detail["server_preemptions"], r.detail["num_preemptions"]
        assert abs(sim - m) <= 0.15 * m, (r.id, m, sim)
    # Runs recorded on more than one machine are set side by side: of the 34, nine differ in
    # throughput and thirteen in p50 TPOT between machines by more than any one figure within 10% of
    # each allows (docs/validation.md, "The host").
    rep = validate.replicate_lines(E2E["runs"], results)
    assert rep[0].startswith("  the same run recorded on different machines") and len(rep) >= 8, rep
    assert rep[-1].endswith("output throughput 9 of 34, p50 TPOT 13 of 34"), rep[-1]
    # What the note on a run paced by one API server quotes (simulator/outputs/notes.py,
    # RECORDED_API_PACED): the decode-heavy runs at 768 running behind one API server, and their range.
    by_id = {r["id"]: r for r in E2E["runs"]}
    at_768 = [
        r
        for r in results
        if by_id[r.id]["run"] == "decode"
        and by_id[r.id]["engine"].get("max_num_seqs") == 1024
        and by_id[r.id]["arrival"].get("max_concurrency") == 768
        and (by_id[r.id].get("frontend") or {}).get("api_server_count", 1) == 1
    ]
    assert (len(at_768), len({by_id[r.id]["recording"] for r in at_768})) == (14, 10)
    thr, tpot = (sorted(r.rel_error(m) for r in at_768) for m in ("output_throughput", "median_tpot_ms"))
    assert (round(thr[0], 2), round(thr[-1], 2), round(float(np.median(thr)), 2)) == (-0.15, 0.21, 0.01), thr
    assert (round(tpot[0], 2), round(tpot[-1], 2), round(float(np.median(tpot)), 2)) == (-0.17, 0.22, -0.04), tpot
    assert "fourteen recorded runs on ten machines" in notes.RECORDED_API_PACED
    # Per host: its runs' medians, and how many hosts meet the issue's 10% in both (docs/hosts.md).
    hosts = validate.host_lines(E2E["runs"], results)
    assert hosts[-1].startswith("  hosts within 10% in both medians: 50 of 60 (not: h100_profile_2026-11-28, "), hosts[
        -1
    ]
    assert len(hosts) == 60 + 2
    # The targets for choosing max_num_seqs, held out (docs/hosts.md, "How close, given the host").
    kinds = [x.rsplit(": ", 1)[-1] for x in validate.target_lines(E2E["runs"], results) if x[4] != " "][1:]
    assert kinds == ["54 of 55 (not:", "29 of 51 (not:", "55 of 63 (not:"], kinds
    lines = validate.write_runs_report(E2E["runs"], results, tmp_path, validate.E2E_METRICS, "recorded.csv", "recorded")
    assert "preemptions" in "\n".join(lines) and (tmp_path / "recorded.csv").read_text().count("\n") == len(results) + 1


def test_release_lines_follow_what_vllm_did():
    """0.19 and before: gpu_memory_utilization 0.9, the V1 model runner, graphs outside the KV
    budget; 0.26: 0.92, the V2 runner for dense models (graphs outside the budget) and V1 for MoE
    (graphs inside) but for the MoE architectures vLLM lists for V2 (DeepSeek-V2, Qwen2-MoE); 0.32:
    the V2 runner for every model, graphs inside. From 0.26 the API server paces the engine, as the
    recorded servers showed."""
    old, rec, new = versions.version("0.19"), versions.version("0.26"), versions.version("0.32")
    dense, moe = load_model("llama-3.1-8b"), load_model("qwen3-30b-a3b")
    v2_moe = [load_model(m) for m in ("deepseek-v2-lite", "qwen1.5-moe-a2.7b")]
    assert (old.gpu_memory_utilization, old.runner(dense), old.graphs_in_budget(dense)) == (0.9, "v1", False)
    assert (rec.gpu_memory_utilization, rec.runner(dense), rec.graphs_in_budget(dense)) == (0.92, "v2", False)
    assert (rec.runner(moe), rec.graphs_in_budget(moe)) == ("v1", True)
    assert [(rec.runner(m), rec.graphs_in_budget(m)) for m in v2_moe] == [("v2", False)] * 2
    assert load_model("deepseek-r1").is_moe and rec.runner(load_model("deepseek-r1")) == "v1"  # DeepseekV3: not listed
    assert (new.runner(moe), new.graphs_in_budget(dense)) == ("v2", True)
    assert rec.host_set == new.host_set == "recorded" and old.host_set == "public"
    assert rec.paces_engine and new.paces_engine and not old.paces_engine


def test_validate_features_reports_every_set(tmp_path, capsys):
    """`servesim validate --features` runs the feature sets (speculative decoding, multi-LoRA, KV
    offloading) against their published figures, writes features.csv and prints each set's median
    error; a regression guard on where they stood when written (docs/features.md)."""
    from simulator.cli import main

    assert main(["validate", "--features", "--out", str(tmp_path), "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    rows = list(csv.DictReader((tmp_path / "features.csv").open()))
    assert {r["set"] for r in rows} == {
        "SpecDecode-Bench",
        "vLLM #20780",
        "llm-d Qwen3-32B",
        "V1 max_loras sweep",
        "PR #48887 kernels",
        "vLLM blog KV offloading",
    }

    def median(name: str, metric: str) -> float:
        return statistics.median(abs(float(r["error"])) for r in rows if (r["set"], r["metric"]) == (name, metric))

    assert median("SpecDecode-Bench", "throughput speed-up") < 0.12
    assert median("V1 max_loras sweep", "output tok/s") < 0.02
    assert median("vLLM blog KV offloading", "full prefill TTFT ms") < 0.10
    assert median("vLLM blog KV offloading", "host hit TTFT ms") < 0.30
    assert "vLLM blog KV offloading (held out), host hit TTFT ms" in out


def test_replicate_key_is_the_run_not_the_machine():
    """Two recordings of one run (same model, GPU, flags, API servers, arrivals, lengths and
    benchmark seed) share a key whatever their machine, port or explicit default; another seed, or
    another API-server count, is another run."""
    a = {
        "id": "a",
        "recording": "first",
        "model": "llama-3.1-8b",
        "gpu": "h200",
        "tensor_parallel_size": 1,
        "engine": {"max_num_seqs": 4096},
        "arrival": {"max_concurrency": 840},
        "lengths": {"prompt_words": 128},
        "bench_command": "vllm bench serve --base-url http://127.0.0.1:8100 --seed 7 --max-concurrency 840",
    }
    b = {**a, "id": "b", "recording": "second", "frontend": {"api_server_count": 1}}
    b["bench_command"] = a["bench_command"].replace("8100", "8101")
    assert validate.replicate_key(a) == validate.replicate_key(b)
    assert validate.replicate_key(a) != validate.replicate_key({**a, "bench_command": "--seed 8"})
    assert validate.replicate_key(a) != validate.replicate_key({**a, "frontend": {"api_server_count": 2}})


def test_a_verdict_judges_each_check_against_its_target():
    """A median target is met by the median, an 'each' target only by every run; preemptions are a
    factor either way; the largest errors come first, flagged past the tolerance."""
    from simulator.validation import verdict

    c = {x.name: x for x in verdict.CHECKS}
    ttft = verdict.judge(c["recorded servers: p50 TTFT"], [("a", 0.1), ("b", -0.3), ("c", 0.2)])
    assert ttft.met and ttft.within == 2 and ttft.median == pytest.approx(0.2)
    assert [w[0] for w in ttft.worst] == ["b", "c", "a"] and ttft.worst_line().count(" !") == 1
    thr = verdict.judge(c["recorded servers: output throughput"], [("a", 0.05), ("b", -0.11)])
    assert not thr.met and thr.line().startswith("NOT MET") and "1 of 2 within 10%" in thr.line()
    pre = verdict.judge(c["recorded servers: preemptions where the server preempted"], [("a", 0.4), ("b", 1.5)])
    assert not pre.met and pre.within == 1 and pre.worst[0][0] == "a"
    empty = verdict.judge(c["public runs: mean TTFT"], [])
    assert not empty.met  # nothing to judge is not a pass, nor a failure: it says so
    assert empty.line().startswith("no run ") and "nan" not in empty.line()
    head = verdict.report([thr, empty])[0]
    assert head == "Verdict on the held-out runs: 0 of 1 checks meet their targets (1 with no run to judge)"


def test_validate_prints_a_verdict_and_the_readme_quotes_its_counts(tmp_path, capsys):
    """`servesim validate --kv` ends with the verdict (each check met or not, largest errors named)
    and writes it to verdict.txt; the README's validation table ends with the counts line validate
    prints, computed from the same data (the runs' splits and which are confounded)."""
    from simulator.cli import main
    from simulator.validation.validate import RunResult, confounded, counts

    assert main(["validate", "--kv", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    text = (tmp_path / "verdict.txt").read_text()
    assert text.startswith("Verdict on the held-out runs: ") and text.splitlines()[0] in out
    assert "public start-up logs: KV pool: " in text and "largest: " in text
    assert text.count("met    ") + text.count("NOT MET") == 2

    def stub(run: dict, recorded: bool) -> RunResult:
        return RunResult(run["id"], run["split"], {}, {}, "", confounded(run, recorded))

    judged = {
        "recorded": [stub(r, True) for r in E2E["runs"]],
        "public": [stub(r, False) for r in RUNS["runs"]],
        "kv": validate.kv_rows(),
        "kv_recorded": validate.kv_rows_recorded(),
    }
    line = counts(judged, validate.load(validate.OFFLOAD_FILE)["runs"]) + "."
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- results:validation -->")[1].split("<!-- /results:validation -->")[0]
    assert block.strip().splitlines()[-1] == line


def test_the_report_gives_each_gpu_its_held_out_errors():
    """Per GPU: the median absolute error of its held-out runs, calibration runs counted apart, a
    confounded or failed run not at all, and a GPU with none held out says so."""
    R = validate.RunResult
    runs = [{"id": f"r{i}", "gpu": g} for i, g in enumerate(["h200", "h200", "h200", "b200", "b200", "mi300x"])]
    one = {"output_throughput": 100.0, "mean_ttft_ms": 10.0, "mean_tpot_ms": 5.0}

    def sim(f):
        return {k: v * f for k, v in one.items()}

    results = [
        R("r0", "heldout", one, sim(1.10)),
        R("r1", "heldout", one, sim(0.70)),
        R("r2", "calibrate", one, sim(2.00)),
        R("r3", "heldout", one, sim(1.50), confounded=True),
        R("r4", "calibrate", one, sim(1.05)),
        R("r5", "heldout", one, {}, error="ConfigError: x"),
    ]
    lines = validate.gpu_lines(runs, results, validate.METRICS)
    assert lines[0].startswith("  per GPU")
    assert "b200 (0 held out, 1 calibration): none held out" in lines[1]
    # h200's held out: |+10%| and |-30%|, median 20%; its calibration run's +100% not in it
    assert "h200 (2 held out, 1 calibration): output tok/s 20.0%, mean TTFT ms 20.0%, mean TPOT ms 20.0%" in lines[2]
    assert len(lines) == 3  # mi300x's only run failed: no line


def test_a_moe_model_on_vllms_v2_list_gets_the_v2_runners_pool():
    """DeepSeek-V2-Lite is MoE, yet vLLM 0.26 serves it on its V2 model runner (its architecture is
    on vLLM's list): the recorded server's pool (872,656 tokens at a memory share of 0.4) is sized
    within 1%, where the V1 runner's profile (fp32 sampler logits, graphs from the budget) gave 7% less."""
    run = next(r for r in E2E["runs"] if r["id"] == "h200_mla_2026-11-30_vllm_dsv2lite_kv")
    res = validate.simulate_e2e(run)
    pool, server = res.detail["kv_cache_tokens"], res.detail["server_kv_cache_tokens"]
    assert not res.error and server == 872_656 and abs(pool / server - 1) < 0.01
    preempted, server_preempted = res.detail["num_preemptions"], res.detail["server_preemptions"]
    assert server_preempted == 118 and 0.5 <= preempted / server_preempted <= 2.0  # the cache binds in both


def test_the_knob_ratio_pairs_one_recordings_runs_at_128_and_512_and_averages_repeats():
    """p50 TPOT at max_num_seqs 512 over 128, the server's and servesim's: runs of one recording alike
    but for max_num_seqs (and their seeds) pair up; repeats at a setting count by their mean; another
    recording, a calibration run or a confounded one does not join; a miss past 30% is flagged."""
    base = {
        "recording": "r1",
        "model": "llama-3.1-8b",
        "gpu": "h200",
        "tensor_parallel_size": 1,
        "run": "decode",
        "arrival": {"max_concurrency": 768},
        "lengths": {"prompt": 64, "output": 1024},
    }

    def run(i: str, n: int, **kw) -> dict:
        return {**base, "id": i, "engine": {"max_num_seqs": n, "max_num_batched_tokens": 8192}, **kw}

    runs = [
        run("a128", 128, bench_command="--seed 1"),
        run("a512", 512, bench_command="--seed 2"),
        run("b512", 512, bench_command="--seed 3"),  # a repeat at 512: the mean counts
        run("c256", 256),  # not a compared setting
        run("x128", 128, recording="r2"),  # r2 has no 512: no pair
        run("cal512", 512),  # a calibration run: left out
        run("conf512", 512),  # confounded: left out
    ]

    def res(i: str, server: float, sim: float, split: str = "heldout", confounded: bool = False):
        m, s = {"median_tpot_ms": server}, {"median_tpot_ms": sim}
        return validate.RunResult(i, split, m, s, confounded=confounded)

    results = [
        res("a128", 10.0, 10.0),
        res("a512", 40.0, 30.0),
        res("b512", 60.0, 30.0),
        res("c256", 20.0, 20.0),
        res("x128", 10.0, 10.0),
        res("cal512", 500.0, 1.0, split="calibrate"),
        res("conf512", 500.0, 1.0, confounded=True),
    ]
    lines = validate.knob_ratio_lines(runs, results)
    # server: mean(40, 60) / 10 = 5.00; servesim: 30 / 10 = 3.00; 3 / 5 - 1 = -40%: flagged
    assert lines[1] == "    r1 llama-3.1-8b decode (1 API server): server 5.00, servesim 3.00 (-40.0%) !"
    assert lines[-1] == "  within 30%: 0 of 1" and len(lines) == 3
    results[2] = res("b512", 40.0, 30.0)  # server 4.00: -25%, within
    assert validate.knob_ratio_lines(runs, results)[-1] == "  within 30%: 1 of 1"
    assert validate.knob_ratio_lines(runs[:1], results) == []  # nothing to pair


def test_the_targets_count_each_kind_of_run_against_its_own_tolerances():
    """The targets for choosing max_num_seqs, by hand: a recording's "kv" runs at two settings make a
    sweep (a lone "kv" run does not), each point judged at 5% / 5% / 15% and preemptions within 1.5x;
    "decode" runs behind one API server at 256-1,024 at 10% / 20% (two API servers, or 128, do not
    count); closed loops of at most 16 clients at 10% / 15%; calibration and confounded runs never."""
    base = {
        "recording": "r1",
        "model": "llama-3.1-8b",
        "gpu": "h200",
        "tensor_parallel_size": 1,
        "arrival": {"max_concurrency": 768},
        "lengths": {"prompt": 1024, "output": 256},
    }

    def run(i: str, kind: str, n: int, **kw) -> dict:
        return {**base, "id": i, "run": kind, "engine": {"max_num_seqs": n}, **kw}

    runs = [
        run("kv128", "kv", 128),
        run("kv512", "kv", 512),
        run("kv_alone", "kv", 256, recording="r2"),  # no other setting in r2: not a sweep
        run("dec128", "decode", 128),  # below 256: not judged
        run("dec512", "decode", 512),
        run("dec1024", "decode", 1024),
        run("api2_512", "decode", 512, frontend={"api_server_count": 2}),  # two API servers: not judged
        run("c8", "light", 8, arrival={"max_concurrency": 8}),
        run("c32", "light", 32, arrival={"max_concurrency": 32}),  # not light
        run("cal8", "light", 8, arrival={"max_concurrency": 8}),
        run("conf8", "light", 8, arrival={"max_concurrency": 8}),
    ]
    metrics = ("output_throughput", "median_tpot_ms", "median_ttft_ms")

    def res(i: str, errs: tuple[float, float, float], pre: tuple[int, int] = (0, 0), **kw):
        detail = {"server_preemptions": pre[0], "num_preemptions": pre[1]}
        sim = {m: 100.0 * (1 + e) for m, e in zip(metrics, errs)}
        return validate.RunResult(
            i, kw.pop("split", "heldout"), dict.fromkeys(metrics, 100.0), sim, detail=detail, **kw
        )

    results = [
        res("kv128", (0.04, -0.049, 0.14)),  # inside every tolerance
        res("kv512", (0.01, 0.01, 0.01), pre=(100, 151)),  # preemptions 1.51x: a miss
        res("kv_alone", (0.5, 0.5, 0.5)),
        res("dec128", (0.5, 0.5, 0.5)),
        res("dec512", (-0.09, 0.19, 3.0)),  # TTFT is not judged here
        res("dec1024", (0.11, 0.0, 0.0)),
        res("api2_512", (0.5, 0.5, 0.5)),
        res("c8", (0.0, 0.16, 0.0)),
        res("c32", (0.5, 0.5, 0.5)),
        res("cal8", (0.5, 0.5, 0.5), split="calibrate"),
        res("conf8", (0.5, 0.5, 0.5), confounded=True),
    ]
    lines = validate.target_lines(runs, results)
    assert lines[1].endswith("preemptions within 1.5x: 1 of 2 (not:"), lines[1]
    assert lines[2] == "      kv512: preemptions 151 against 100)"
    assert lines[3].endswith("p50 TPOT within 20%: 1 of 2 (not:") and lines[4] == "      dec1024: throughput +11.0%)"
    assert lines[5].endswith("p50 TPOT within 15%: 0 of 1 (not:") and lines[6] == "      c8: p50 TPOT +16.0%)"
    assert len(lines) == 7
    # within 1.5x both ways, and no preemption on either side, meet it; one side alone does not
    for pre, ok in (((151, 101), True), ((0, 0), True), ((0, 3), False), ((3, 0), False)):
        results[1] = res("kv512", (0.01, 0.01, 0.01), pre=pre)
        assert validate.target_lines(runs, results)[1].endswith("1.5x: 2 of 2" if ok else "1.5x: 1 of 2 (not:"), pre
    assert validate.target_lines(runs[2:4], results) == []  # nothing of any kind held out
