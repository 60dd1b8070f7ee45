"""Build public_runs.yaml / public_runs.md from the transcription files in this folder.
Run: python3 raw/build_public_runs.py  (from this folder)"""
import importlib.util, pathlib, yaml, collections

HERE = pathlib.Path(__file__).parent
OUT = HERE.parent

def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m

points = []

def from_gpustack(mod, prefix, engine_notes):
    for i, r in enumerate(mod.RUNS):
        label, ngpu, tp, serve, bench, ds, il, ol, n, conc, vals = r
        res = {k: v for k, v in zip(mod.K, vals) if v is not None}
        pp = 2 if " -pp 2" in serve else 1
        points.append(collections.OrderedDict(
            id=f"{prefix}-{i:02d}", model=mod.COMMON["model"], gpu=mod.COMMON["gpu"], num_gpus=ngpu,
            tp=tp, pp=pp, vllm_version=mod.COMMON["vllm_version"], label=label,
            url=mod.SRC["url"], rendered_url=mod.SRC["rendered"], date=mod.SRC["date"], read=mod.SRC["read"],
            serve_cmd=serve, bench_cmd=bench, dataset=ds, input_len=il, output_len=ol, num_prompts=n,
            max_concurrency=conc, request_rate="inf (not set)", results=res,
            notes=(mod.NOTE + " " + engine_notes).strip()))

from_gpustack(load("runs_gpustack_120b_h100"), "gpustack-gptoss120b-h100",
              "async scheduling is opt-in in v0.10.2 (default False).")
from_gpustack(load("runs_gpustack_20b_h100"), "gpustack-gptoss20b-h100",
              "async scheduling is opt-in in v0.11.0 (default False).")
from_gpustack(load("runs_gpustack_120b_a100"), "gpustack-gptoss120b-a100",
              "async scheduling is opt-in in v0.11.0 (default False).")
from_gpustack(load("runs_gpustack_20b_a100"), "gpustack-gptoss20b-a100",
              "async scheduling is opt-in in v0.11.0 (default False).")
from_gpustack(load("runs_gpustack_dsr1_h200"), "gpustack-dsr1-0528-h200",
              "")

iss = load("runs_issues")
for d in iss.RUNS_ISSUES:
    d = collections.OrderedDict(d); d.setdefault("read", "2026-11-28"); points.append(d)

BLOG = dict(url="https://github.com/vllm-project/vllm-project.github.io/blob/78672b0ff75843c0a043bcfdb411c0e1eedd0c03/_posts/2026-04-22-fp8-kvcache.md",
            rendered_url="https://blog.vllm.ai/2026/04/22/fp8-kvcache.html (rendered path assumed from the post file name)",
            date="2026-04-22", read="2026-11-28")
for cfg, flags, vals in [
    ("BF16 KV", "", (468.9, 8.09, 364.2, 831.6)),
    ("FP8 KV", "--kv-cache-dtype fp8", (451.7, 7.90, 355.1, 853.0)),
    ("FP8 KV skip sliding-window layers", "--kv-cache-dtype fp8 --kv-cache-dtype-skip-layers sliding_window", (456.4, 7.70, 347.4, 871.8)),
]:
    points.append(collections.OrderedDict(
        id=f"vllm-blog-fp8kv-gptoss20b-h100-{cfg.split()[0].lower()}{'-skipsw' if 'skip' in cfg else ''}",
        model="openai/gpt-oss-20b", gpu="H100", num_gpus=1, tp=1, pp=1,
        vllm_version="v0.19.1 (the post's 'after' version for its H100 FA3 work; the load test does not restate it)",
        label=f"Table 5, {cfg}", **BLOG,
        serve_cmd=f"vllm serve gpt-oss-20b {flags}".strip() + "  (only the quick-start form is quoted in the post)",
        bench_cmd="not quoted; described as 'vllm bench serve' throughput benchmark: 150 requests at concurrency 8, ~20k input and ~2k output tokens (±15% variance)",
        dataset="synthetic (~20k in / ~2k out, ±15%)", input_len=20000, output_len=2000, num_prompts=150, max_concurrency=8,
        request_rate="not stated", results=dict(median_ttft_ms=vals[0], median_itl_ms=vals[1], duration_s=vals[2], output_token_throughput=vals[3]),
        notes="FlashAttention-3 backend on H100. Same post gives concurrency-1 ITL fits (see public_runs.md)."))

points.append(collections.OrderedDict(
    id="chinmayhebbal-mi300x-gptoss120b-tp1", model="openai/gpt-oss-120b", gpu="MI300X", num_gpus=1, tp=1, pp=1,
    vllm_version="not stated in the retrieved part (post dated Apr 2026)", label="headline 'serve bench' numbers",
    url="https://chinmayhebbal.com/blogs/vllm-on-amd-mi300x.html", date="2026-04 (post says 'Apr 2026')", read="2026-11-28",
    serve_cmd=("VLLM_ROCM_USE_AITER=1 VLLM_USE_AITER_UNIFIED_ATTENTION=1 VLLM_ROCM_USE_AITER_MHA=0 vllm serve openai/gpt-oss-120b "
               "--port 8000 --tensor-parallel 1 --no-enable-prefix-caching --disable-log-requests --compilation-config '{\"full_cuda_graph\": true}'"),
    bench_cmd="not retrieved (only the page head was readable in the index)", dataset="unknown", input_len=None, output_len=None,
    num_prompts=None, max_concurrency=None, request_rate="unknown",
    results=dict(total_token_throughput=2394, output_token_throughput=479),
    notes="Partial point: headline figures only ('2394 Total tok/s (serve bench)', '479 Output tok/s (serve bench)'). Use only as a sanity check."))

# llm-d's MI355X reference page (Llama-3.3-70B FP8, vLLM 0.15.1 on ROCm)
points.extend(collections.OrderedDict(d) for d in load("runs_llmd_mi355x").points())

# vLLM recipes' DeepSeek-R1 guide for AMD GPUs (8 x MI300X, vLLM 0.9.1 on ROCm)
points.extend(collections.OrderedDict(d) for d in load("runs_recipes_mi300x").points())

meta = dict(
    description="Public vLLM serving benchmark runs (one point = one benchmark invocation / concurrency). Numbers quoted as printed.",
    read="2026-11-28",
    excluded="InferenceX / InferenceMAX (SemiAnalysis) results and anything reproducing them are deliberately excluded.",
    field_units=dict(duration_s="s", request_throughput="req/s", output_token_throughput="tok/s", total_token_throughput="tok/s",
                     ttft_tpot_itl="ms"),
    count=len(points),
    number_format="Values are numbers; vllm bench serve prints them with 2 decimals, and YAML drops trailing zeros (54.10 -> 54.1). public_runs.md shows them as printed.")
with open(OUT / "public_runs.yaml", "w") as f:
    yaml.safe_dump(dict(meta=meta, runs=[dict(p) for p in points]), f, sort_keys=False, width=200, allow_unicode=True)
print(len(points))

# markdown table rows
INTS = {"successful_requests","total_input_tokens","total_generated_tokens"}
def g(d, k):
    v = d.get("results", {}).get(k)
    if v is None: return ""
    pid = d["id"]
    if pid.startswith("chinmay") or k in INTS: return str(int(v))
    if pid.startswith("vllm-blog"):
        return f"{v:.2f}" if k == "median_itl_ms" else f"{v:.1f}"
    if pid.startswith("vllm-issue40838") and k == "request_throughput": return f"{v:.4f}"
    return f"{v:.2f}"   # vllm bench serve prints these with 2 decimals
def conc(p):
    if p.get("max_concurrency"): return str(p["max_concurrency"])
    return "none (rate inf)" if str(p.get("request_rate","")).startswith("inf") else "?"
def short_ver(p):
    v = str(p.get("vllm_version"))
    for key, out in [("#23696","main@PR23696 (0.10.1-0.10.2)"),("#23369","main@PR23369 (0.10.1)"),("#29708","main pre-PR29708 (0.12 era)"),
                     ("TOT","main late-Nov-2025"),("75eb302a","main@75eb302a (Dec 2025)"),
                     ("v0.10.2","0.10.2"),("v0.11.0","0.11.0"),("v0.16.0","0.16.0"),("v0.17.0","0.17.0"),("v0.19.1","0.19.1 (?)")]:
        if key in v: return out
    return "not stated"
rows = []
for p in points:
    rows.append("| " + " | ".join([p["id"], p["model"], p["gpu"], str(p.get("tp")), short_ver(p),
        str(p.get("dataset")), ("" if p.get('input_len') is None else f"{p.get('input_len')}/{p.get('output_len')}"), str(p.get("num_prompts") or ""), conc(p),
        g(p,"request_throughput"), g(p,"output_token_throughput"), g(p,"total_token_throughput"),
        g(p,"mean_ttft_ms"), g(p,"median_ttft_ms"), g(p,"p99_ttft_ms"), g(p,"mean_tpot_ms"), g(p,"median_tpot_ms"), g(p,"p99_tpot_ms"),
        g(p,"mean_itl_ms"), g(p,"median_itl_ms"), g(p,"p99_itl_ms")]) + " |")
(HERE / "table_rows.md").write_text("\n".join(rows) + "\n")
