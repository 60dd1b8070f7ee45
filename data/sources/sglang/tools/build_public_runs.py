"""Builds public_runs.yaml and the tables of public_runs.md from the data transcribed below.
Numbers are copied from the cited sources (printed bench output, or the source's raw CSV for dstack)."""
import csv, os, re, yaml
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

def bench(**kw):
    return {k: v for k, v in kw.items() if v is not None}

runs = []

# ---------------- gpustack performance lab: DeepSeek-R1-0528 on 8x H200, SGLang v0.5.3 ----------------
GP_DSR1 = dict(
    source="gpustack performance lab, 'Optimizing DeepSeek-R1 Throughput on NVIDIA H200 GPUs'",
    url="https://docs.gpustack.ai/latest/performance-lab/deepseek-r1/h200 (repo file gpustack/gpustack:docs/performance-lab/deepseek-r1/h200.md, blob a5c9fafc3022e81779c2c5ade32c5b703ce2248c)",
    date="2025-11-12", sglang_version="v0.5.3", hardware="8x NVIDIA H200", model="deepseek-ai/DeepSeek-R1-0528 (FP8)",
    client="vllm bench serve (vLLM v0.11.0 CLI) --backend openai-chat --endpoint /v1/chat/completions; no ignore_eos (vLLM client default)",
)
def gp(id_, launch, bench_cmd, workload, res, notes=None, base=GP_DSR1, **over):
    d = dict(base); d.update(over)
    d.update(id=id_, launch=launch, benchmark=bench_cmd, workload=workload, results=res)
    if notes: d["notes"] = notes
    runs.append(d)

SHAREGPT_DS = "vllm bench serve --model deepseek-ai/DeepSeek-R1-0528 --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
def rnd(model, i, o, n): return f"vllm bench serve --model {model} --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"

gp("gpustack-dsr1-h200-tp8-sharegpt",
   "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --host 0.0.0.0 --port 8000 --tp-size 8",
   SHAREGPT_DS, dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", max_concurrency=None, tp=8, dp=1, ep=1, dp_attention=False),
   bench(successful_requests=1000, duration_s=63.28, total_input_tokens=219171, total_generated_tokens=200767, request_throughput=15.80,
         output_throughput=3172.46, peak_output_throughput=9699.00, total_token_throughput=6635.73,
         mean_ttft_ms=6948.08, median_ttft_ms=6793.80, p99_ttft_ms=13674.05, mean_tpot_ms=420.18, median_tpot_ms=216.55, p99_tpot_ms=2473.09,
         mean_itl_ms=138.99, median_itl_ms=51.66, p99_itl_ms=1159.64))
gp("gpustack-dsr1-h200-tp8-dpattn-sharegpt",
   "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --host 0.0.0.0 --port 8000 --tp-size 8 --enable-dp-attention",
   SHAREGPT_DS, dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=8, dp=8, ep=1, dp_attention=True),
   bench(successful_requests=1000, duration_s=58.79, total_input_tokens=219171, total_generated_tokens=200752, request_throughput=17.01,
         output_throughput=3414.99, peak_output_throughput=9601.00, total_token_throughput=7143.30,
         mean_ttft_ms=5992.00, median_ttft_ms=5976.11, p99_ttft_ms=9650.89, mean_tpot_ms=304.71, median_tpot_ms=188.40, p99_tpot_ms=1704.65,
         mean_itl_ms=121.64, median_itl_ms=51.15, p99_itl_ms=464.61),
   notes="CAUTION: --enable-dp-attention without --dp. In the 0.5 line dp_size defaults to 1 and server_args then turns DP attention off (0.5.6.post2 _handle_data_parallelism / 0.5.17 _data_parallelism_defaults: dp_size == 1 -> enable_dp_attention=False), so this run is very likely plain TP8; the +7.6% vs the TP8 run is within run-to-run noise. (In 0.4.x, --enable-dp-attention forced dp_size = tp_size.)")
gp("gpustack-dsr1-h200-tp8-dpattn-compile-sharegpt",
   "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --host 0.0.0.0 --port 8000 --tp-size 8 --enable-dp-attention --enable-torch-compile",
   SHAREGPT_DS, dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=8, dp_attention=True),
   bench(successful_requests=1000, duration_s=61.72, total_input_tokens=219171, total_generated_tokens=200813, request_throughput=16.20,
         output_throughput=3253.37, peak_output_throughput=9287.00, total_token_throughput=6804.17,
         mean_ttft_ms=6978.36, median_ttft_ms=6965.90, p99_ttft_ms=10888.39, mean_tpot_ms=306.37, median_tpot_ms=203.10, p99_tpot_ms=1807.98,
         mean_itl_ms=127.42, median_itl_ms=51.90, p99_itl_ms=596.33))
gp("gpustack-dsr1-h200-tp8-dpattn-mtp-sharegpt",
   "python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1-0528 --host 0.0.0.0 --port 8000 --tp-size 8 --enable-dp-attention --enable-torch-compile --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2",
   SHAREGPT_DS, dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=8, dp_attention=True, speculative="EAGLE(MTP) steps=1 topk=1 draft=2"),
   bench(successful_requests=1000, duration_s=189.43, total_input_tokens=219171, total_generated_tokens=200813, request_throughput=5.28,
         output_throughput=1060.10, peak_output_throughput=1121.00, total_token_throughput=2217.12,
         mean_ttft_ms=95444.76, median_ttft_ms=98104.26, p99_ttft_ms=176418.52, mean_tpot_ms=42.24, median_tpot_ms=42.11, p99_tpot_ms=82.73,
         mean_itl_ms=74.27, median_itl_ms=36.60, p99_itl_ms=200.54),
   notes="Speculative decoding caps the running batch (default max_running_requests with spec is small), hence the huge TTFT.")
for (i, o, n, r) in [
    (32000, 100, 100, bench(successful_requests=100, duration_s=199.47, total_input_tokens=3199900, total_generated_tokens=9952, request_throughput=0.50,
        output_throughput=49.89, peak_output_throughput=521.00, total_token_throughput=16091.68, mean_ttft_ms=98133.46, median_ttft_ms=97539.39, p99_ttft_ms=196094.04,
        mean_tpot_ms=198.62, median_tpot_ms=198.45, p99_tpot_ms=365.31, mean_itl_ms=209.45, median_itl_ms=35.27, p99_itl_ms=1680.63)),
    (4000, 200, 500, bench(successful_requests=500, duration_s=130.31, total_input_tokens=1997530, total_generated_tokens=100000, request_throughput=3.84,
        output_throughput=767.42, peak_output_throughput=3227.00, total_token_throughput=16096.80, mean_ttft_ms=62808.37, median_ttft_ms=61113.90, p99_ttft_ms=122763.87,
        mean_tpot_ms=107.91, median_tpot_ms=105.31, p99_tpot_ms=179.79, mean_itl_ms=115.81, median_itl_ms=46.40, p99_itl_ms=155.40)),
    (2000, 100, 500, bench(successful_requests=500, duration_s=55.11, total_input_tokens=998393, total_generated_tokens=50000, request_throughput=9.07,
        output_throughput=907.31, peak_output_throughput=5778.00, total_token_throughput=19024.33, mean_ttft_ms=27248.86, median_ttft_ms=25136.93, p99_ttft_ms=49876.53,
        mean_tpot_ms=154.49, median_tpot_ms=148.01, p99_tpot_ms=294.80, mean_itl_ms=159.34, median_itl_ms=48.78, p99_itl_ms=801.82)),
    (128, 4, 1000, bench(successful_requests=1000, duration_s=6.40, total_input_tokens=126882, total_generated_tokens=4000, request_throughput=156.24,
        output_throughput=624.94, peak_output_throughput=2769.00, total_token_throughput=20448.42, mean_ttft_ms=3626.25, median_ttft_ms=3413.13, p99_ttft_ms=4879.78,
        mean_tpot_ms=802.48, median_tpot_ms=940.27, p99_tpot_ms=1182.88, mean_itl_ms=481.68, median_itl_ms=139.56, p99_itl_ms=3031.24)),
]:
    gp(f"gpustack-dsr1-h200-tp8-dpattn-random-{i}-{o}",
       "python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1-0528 --tp 8 --enable-dp-attention",
       rnd("deepseek-ai/DeepSeek-R1-0528", i, o, n) + "   # only the 4000/200 line is printed in the doc; the others are inferred from its dataset list and request counts",
       dict(dataset="random", input_len=i, output_len=o, num_prompts=n, request_rate="inf", tp=8, dp_attention=True), r,
       notes="launched with --enable-dp-attention but no --dp: very likely plain TP8 in v0.5.3 (see gpustack-dsr1-h200-tp8-dpattn-sharegpt)")

# ---------------- gpustack: Qwen3-14B on one H100 SXM, SGLang v0.5.5.post1 ----------------
GP_Q14 = dict(source="gpustack performance lab, 'Optimizing Qwen3-14B Throughput on NVIDIA H100 GPUs'",
    url="https://docs.gpustack.ai/latest/performance-lab/qwen3-14b/h100 (repo file gpustack/gpustack:docs/performance-lab/qwen3-14b/h100.md, blob 7ae332aaf05783e657560ef927c527b156e2536d)",
    date="undated doc (engines vLLM v0.11.0 / SGLang v0.5.5.post1, i.e. late 2025)", sglang_version="v0.5.5.post1", hardware="1x NVIDIA H100 SXM",
    client="vllm bench serve --backend openai-chat --endpoint /v1/chat/completions (no ignore_eos)")
SHAREGPT_Q14 = "vllm bench serve --model Qwen/Qwen3-14B --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
gp("gpustack-qwen3-14b-h100-bf16-sharegpt", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-14B", SHAREGPT_Q14,
   dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=1),
   bench(successful_requests=1000, duration_s=49.86, total_input_tokens=217393, total_generated_tokens=201628, request_throughput=20.06, output_throughput=4043.89,
         peak_output_throughput=12059.00, total_token_throughput=8403.97, mean_ttft_ms=9230.85, median_ttft_ms=8812.15, p99_ttft_ms=19581.07,
         mean_tpot_ms=235.33, median_tpot_ms=118.67, p99_tpot_ms=1462.03, mean_itl_ms=91.54, median_itl_ms=51.39, p99_itl_ms=442.65),
   base=GP_Q14, model="Qwen/Qwen3-14B (bf16)")
for tag, extra, r in [
    ("fp8-default", "", bench(successful_requests=1000, duration_s=40.21, total_input_tokens=217393, total_generated_tokens=201833, request_throughput=24.87, output_throughput=5019.64,
        peak_output_throughput=14199.00, total_token_throughput=10426.27, mean_ttft_ms=7320.60, median_ttft_ms=7110.49, p99_ttft_ms=13187.08,
        mean_tpot_ms=251.67, median_tpot_ms=94.53, p99_tpot_ms=1678.80, mean_itl_ms=77.06, median_itl_ms=48.45, p99_itl_ms=383.61)),
    ("fp8-fa3", " --attention-backend=fa3", bench(successful_requests=1000, duration_s=40.18, total_input_tokens=217393, total_generated_tokens=201833, request_throughput=24.89, output_throughput=5023.58,
        peak_output_throughput=13005.00, total_token_throughput=10434.44, mean_ttft_ms=7304.47, median_ttft_ms=7081.19, p99_ttft_ms=13629.09,
        mean_tpot_ms=242.72, median_tpot_ms=94.43, p99_tpot_ms=1559.90, mean_itl_ms=76.97, median_itl_ms=47.55, p99_itl_ms=359.57)),
    ("fp8-flashinfer", " --attention-backend=flashinfer", bench(successful_requests=1000, duration_s=45.91, total_input_tokens=217393, total_generated_tokens=201462, request_throughput=21.78, output_throughput=4388.17,
        peak_output_throughput=15814.00, total_token_throughput=9123.34, mean_ttft_ms=13440.31, median_ttft_ms=13197.52, p99_ttft_ms=19982.69,
        mean_tpot_ms=246.57, median_tpot_ms=95.09, p99_tpot_ms=1613.59, mean_itl_ms=76.95, median_itl_ms=48.29, p99_itl_ms=367.15)),
    ("fp8-triton", " --attention-backend=triton", bench(successful_requests=1000, duration_s=41.67, total_input_tokens=217393, total_generated_tokens=201602, request_throughput=24.00, output_throughput=4838.09,
        peak_output_throughput=14024.00, total_token_throughput=10055.13, mean_ttft_ms=7297.40, median_ttft_ms=6973.27, p99_ttft_ms=14354.40,
        mean_tpot_ms=268.09, median_tpot_ms=100.54, p99_tpot_ms=1810.20, mean_itl_ms=82.50, median_itl_ms=51.79, p99_itl_ms=379.98)),
]:
    gp(f"gpustack-qwen3-14b-h100-{tag}-sharegpt", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-14B-FP8" + extra, SHAREGPT_Q14,
       dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=1), r, base=GP_Q14, model="Qwen/Qwen3-14B-FP8")
for (i, o, n, r) in [
    (32000, 100, 100, bench(successful_requests=100, duration_s=320.54, total_input_tokens=3200000, total_generated_tokens=9964, request_throughput=0.31, output_throughput=31.09,
        peak_output_throughput=250.00, total_token_throughput=10014.29, mean_ttft_ms=158068.68, median_ttft_ms=157591.30, p99_ttft_ms=313702.45,
        mean_tpot_ms=215.93, median_tpot_ms=212.59, p99_tpot_ms=326.36, mean_itl_ms=211.53, median_itl_ms=41.38, p99_itl_ms=5675.37)),
    (4000, 200, 500, bench(successful_requests=500, duration_s=171.14, total_input_tokens=1997942, total_generated_tokens=99814, request_throughput=2.92, output_throughput=583.23,
        peak_output_throughput=1950.00, total_token_throughput=12257.62, mean_ttft_ms=82073.47, median_ttft_ms=85092.81, p99_ttft_ms=165401.79,
        mean_tpot_ms=84.93, median_tpot_ms=83.43, p99_tpot_ms=131.23, mean_itl_ms=84.30, median_itl_ms=41.87, p99_itl_ms=89.35)),
    (2000, 100, 500, bench(successful_requests=500, duration_s=70.99, total_input_tokens=998175, total_generated_tokens=50000, request_throughput=7.04, output_throughput=704.28,
        peak_output_throughput=3496.00, total_token_throughput=14764.26, mean_ttft_ms=33245.08, median_ttft_ms=33169.68, p99_ttft_ms=68799.73,
        mean_tpot_ms=143.22, median_tpot_ms=146.25, p99_tpot_ms=216.28, mean_itl_ms=140.52, median_itl_ms=45.98, p99_itl_ms=1987.27)),
    (128, 4, 1000, bench(successful_requests=1000, duration_s=7.80, total_input_tokens=127698, total_generated_tokens=4000, request_throughput=128.21, output_throughput=512.83,
        peak_output_throughput=3784.00, total_token_throughput=16884.75, mean_ttft_ms=4489.43, median_ttft_ms=4057.99, p99_ttft_ms=7239.77,
        mean_tpot_ms=927.88, median_tpot_ms=962.87, p99_tpot_ms=1793.61, mean_itl_ms=556.73, median_itl_ms=82.38, p99_itl_ms=5043.60)),
]:
    gp(f"gpustack-qwen3-14b-fp8-h100-random-{i}-{o}", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-14B-FP8",
       rnd("Qwen/Qwen3-14B", i, o, n) + "   # only the 4000/200 line is printed in the doc; the others are inferred",
       dict(dataset="random", input_len=i, output_len=o, num_prompts=n, request_rate="inf", tp=1), r, base=GP_Q14, model="Qwen/Qwen3-14B-FP8")

# ---------------- gpustack: Qwen3-32B (H100), Qwen3-235B-A22B (8x H100), SGLang v0.5.5.post1 ----------------
gp("gpustack-qwen3-32b-h100-bf16-sharegpt", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B",
   "vllm bench serve --model Qwen/Qwen3-32B --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000",
   dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=1),
   bench(successful_requests=1000, duration_s=247.94, total_input_tokens=217393, total_generated_tokens=201826, request_throughput=4.03, output_throughput=814.03,
         peak_output_throughput=1329.00, total_token_throughput=1690.84, mean_ttft_ms=115690.30, median_ttft_ms=117738.49, p99_ttft_ms=230503.32,
         mean_tpot_ms=57.86, median_tpot_ms=54.19, p99_tpot_ms=95.84, mean_itl_ms=56.25, median_itl_ms=43.94, p99_itl_ms=207.79),
   base=dict(GP_Q14, source="gpustack performance lab, 'Optimizing Qwen3-32B Throughput on NVIDIA H100 GPUs'",
             url="https://docs.gpustack.ai/latest/performance-lab/qwen3-32b/h100 (repo file gpustack/gpustack:docs/performance-lab/qwen3-32b/h100.md, blob 10e9444a07c73556f2ef0d10d2b2766bbf54c9c0)",
             hardware="NVIDIA H100 (count not printed; the launch has no --tp, i.e. TP1 on one GPU)"), model="Qwen/Qwen3-32B (bf16)",
   notes="bf16 32B on one 80 GB H100 leaves a small KV pool: KV-bound, hence the ~116 s mean TTFT.")
gp("gpustack-qwen3-235b-a22b-8xh100-tp8-sharegpt", "python3 -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B-Instruct-2507 --tp-size 8",
   "vllm bench serve --model Qwen/Qwen3-235B-A22B-Instruct-2507 --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000",
   dict(dataset="sharegpt", num_prompts=1000, request_rate="inf", tp=8),
   bench(successful_requests=984, duration_s=53.18, total_input_tokens=214137, total_generated_tokens=193829, request_throughput=18.50, output_throughput=3644.72,
         peak_output_throughput=8791.00, total_token_throughput=7671.31, mean_ttft_ms=11715.28, median_ttft_ms=6274.12, p99_ttft_ms=32860.14,
         mean_tpot_ms=178.35, median_tpot_ms=102.70, p99_tpot_ms=841.80, mean_itl_ms=88.35, median_itl_ms=44.39, p99_itl_ms=732.90),
   base=dict(GP_Q14, source="gpustack performance lab, 'Optimizing Qwen3-235B-A22B Throughput on NVIDIA H100 GPUs'",
             url="https://docs.gpustack.ai/latest/performance-lab/qwen3-235b-a22b/h100 (repo file gpustack/gpustack:docs/performance-lab/qwen3-235b-a22b/h100.md, blob 10e9444a07c73556f2ef0d10d2b2766bbf54c9c0)",
             hardware="8x NVIDIA H100"), model="Qwen/Qwen3-235B-A22B-Instruct-2507 (bf16)")

# ---------------- dstack: DeepSeek-R1 on 8x H200 (sglang 0.4.3.post2) and 8x MI300X (sglang 0.4.2.post4) ----------------
DSTACK = dict(source="dstack blog 'DeepSeek R1 inference performance: MI300X vs. H200' + raw data in github.com/dstackai/benchmarks (Deepseek-R1/raw_data/online_results.csv, blob 7f37e6697725e58dd09b9ef190b62ce19f01d45e; README blob 209ca6f9c2f940314362d3e8dab59bf129a1a9a9)",
    url="https://dstack.ai/blog/h200-mi300x-deepskeek-benchmark/", date="2025-03-18", model="deepseek-ai/DeepSeek-R1 (FP8)",
    client="SGLang bench_serving.py (dstack copy, Deepseek-R1/bench_serving.py) --backend sglang; ignore_eos default on")
LAUNCH = {"h200": ("python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-R1 --tp 8 --trust-remote-code --enable-dp-attention   # image lmsysorg/sglang:latest, sglang 0.4.3.post2",
                   "0.4.3.post2", "8x NVIDIA H200 SXM5 141GB (Vultr/Lambda)", True),
          "mi300x": ("HSA_NO_SCRATCH_RECLAIM=1 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 8 --trust-remote-code   # image rocm/sglang-staging:20250212, sglang 0.4.2.post4",
                     "0.4.2.post4", "8x AMD MI300X 192GB", False)}
with open(os.path.join(ROOT, "raw", "dstack_deepseek_r1_online_sglang_rows.csv")) as f:
    for row in csv.DictReader(f):
        gpu = row["GPU"]; launch, ver, hw, dpa = LAUNCH[gpu]
        c = int(row["max_concurrency"])
        if row["dataset_name"] == "random":
            i, o = int(row["random_input_len"]), int(row["random_output_len"])
            bcmd = f"python3 bench_serving.py --backend sglang --dataset-name random --num-prompts 500 --random-input {i} --random-output {o} --random-range-ratio 1 --max-concurrency {c}"
            wl = dict(dataset="random", input_len=i, output_len=o, range_ratio=1, num_prompts=500, request_rate="inf", max_concurrency=c, tp=8, dp_attention=dpa)
            rid = f"dstack-dsr1-{gpu}-random-{i}-{o}-c{c}"
        else:
            bcmd = f"python3 bench_serving.py --backend sglang --dataset-name generated-shared-prefix --gsp-num-groups 10 --gsp-prompts-per-group 50 --gsp-system-prompt-len 2000 --gsp-question-len 1200 --gsp-output-len 800 --num-prompts 500 --max-concurrency {c}"
            wl = dict(dataset="generated-shared-prefix", groups=10, prompts_per_group=50, system_prompt_len=2000, question_len=1200, output_len=800,
                      num_prompts=500, request_rate="inf", max_concurrency=c, tp=8, dp_attention=dpa)
            rid = f"dstack-dsr1-{gpu}-gsp-c{c}"
        f2 = lambda k: round(float(row[k]), 2)
        res = dict(successful_requests=int(row["completed"]), duration_s=f2("duration"), total_input_tokens=int(row["total_input_tokens"]),
                   total_generated_tokens=int(row["total_output_tokens"]), request_throughput=f2("request_throughput"), input_throughput=f2("input_throughput"),
                   output_throughput=f2("output_throughput"), mean_e2e_latency_ms=f2("mean_e2e_latency_ms"), median_e2e_latency_ms=f2("median_e2e_latency_ms"),
                   p99_e2e_latency_ms=f2("p99_e2e_latency_ms"), mean_ttft_ms=f2("mean_ttft_ms"), median_ttft_ms=f2("median_ttft_ms"), p99_ttft_ms=f2("p99_ttft_ms"),
                   mean_tpot_ms=f2("mean_tpot_ms"), median_tpot_ms=f2("median_tpot_ms"), p99_tpot_ms=f2("p99_tpot_ms"), mean_itl_ms=f2("mean_itl_ms"),
                   median_itl_ms=f2("median_itl_ms"), p99_itl_ms=f2("p99_itl_ms"), concurrency=f2("concurrency"))
        d = dict(DSTACK); d.update(id=rid, sglang_version=ver, hardware=hw, launch=launch, benchmark=bcmd, workload=wl, results=res,
                                   notes="values from the JSONL fields bench_serving writes (rounded here to 2 decimals, as the printed block would show)")
        if row["dataset_name"] != "random":
            d["notes"] += "; the CSV records random_input_len/output_len 1024 for these rows (script defaults); the gsp settings above are the README's command"
        runs.append(d)

# ---------------- sglang GitHub PRs (printed bench_serving blocks) ----------------
runs.append(dict(id="sglang-pr2643-dsv3-tp8-dpattn-sharegpt5000", source="sgl-project/sglang PR #2643 'chore: bump v0.4.1.post2' (zhyncs)",
    url="https://github.com/sgl-project/sglang/pull/2643", date="2024-12-29", sglang_version="v0.4.1.post2",
    hardware="8 GPUs; model not stated in the text read (the team's DeepSeek-V3 day-one runs were on 8x H200)", model="deepseek-ai/DeepSeek-V3 (FP8)",
    launch="python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code --enable-dp-attention",
    benchmark="python3 -m sglang.bench_serving --backend sglang --num-prompts 5000",
    workload=dict(dataset="sharegpt", num_prompts=5000, request_rate="inf", tp=8, dp_attention=True),
    results=bench(successful_requests=5000, duration_s=366.11, total_input_tokens=1146018, total_generated_tokens=978825, request_throughput=13.66,
        input_throughput=3130.21, output_throughput=2673.55, total_token_throughput=5803.76, mean_e2e_latency_ms=196528.46, median_e2e_latency_ms=193378.59),
    notes="TTFT/ITL lines of this block were cut off in the excerpt read. Same PR: batch 1/8/32 with input 128, output 256: 30.29 / 206.32 / 760.52 token/s."))
runs.append(dict(id="sglang-pr4918-dsv3-tp8-sharegpt300-rr4", source="sgl-project/sglang PR #4918 'Add DeepSeek V3/R1 shared experts fusion' (BBuf), baseline run",
    url="https://github.com/sgl-project/sglang/pull/4918", date="2025-03/04 (PR merged spring 2025)", sglang_version="main ~v0.4.4",
    hardware="8 GPUs, type not stated in the text read", model="DeepSeek-V3 (FP8)",
    launch="python3 -m sglang.launch_server --model /DeepSeek-V3 --tp 8 --trust-remote-code --port 30001 --disable-shared-experts-fusion",
    benchmark="python3 -m sglang.bench_serving --backend sglang --num-prompts 300 --request-rate 4 --port 30001",
    workload=dict(dataset="sharegpt", num_prompts=300, request_rate=4.0, tp=8),
    results=bench(successful_requests=300, duration_s=143.03, total_input_tokens=95293, total_generated_tokens=60411, request_throughput=2.10,
        input_throughput=666.23, output_throughput=422.36, total_token_throughput=1088.59, concurrency=70.99, mean_e2e_latency_ms=33845.89,
        median_e2e_latency_ms=26233.23, mean_ttft_ms=2630.26, median_ttft_ms=997.26, p99_ttft_ms=13312.57)))
runs.append(dict(id="sglang-pr5571-dsv3-tp8-sm90-random30000-100-rr10", source="sgl-project/sglang PR #5571 'enable DeepSeek V3 shared_experts_fusion in sm90' (BBuf)",
    url="https://github.com/sgl-project/sglang/pull/5571", date="2025-04 (PR)", sglang_version="main ~v0.4.5",
    hardware="8x SM90 GPUs (H100/H200/H20 class; exact model not stated in the text read)", model="DeepSeek-V3 (FP8)",
    launch="python3 -m sglang.launch_server --model /DeepSeek-V3 --tp 8 --trust-remote-code   # (exact flags of this block not in the excerpt read)",
    benchmark="python3 -m sglang.bench_serving --backend sglang-oai --dataset-name random --random-input-len 30000 --random-output-len 100 --random-range-ratio 1.0 --request-rate 10 --num-prompts 50",
    workload=dict(dataset="random", input_len=30000, output_len=100, range_ratio=1.0, num_prompts=50, request_rate=10.0, tp=8),
    results=bench(request_throughput=0.85, input_throughput=8526.46, output_throughput=426.32, total_token_throughput=8952.78, concurrency=48.06,
        mean_e2e_latency_ms=56360.43, median_e2e_latency_ms=56619.03, mean_ttft_ms=19303.59, median_ttft_ms=20385.84, p99_ttft_ms=34325.18,
        mean_itl_ms=74.63, median_itl_ms=44.12, p95_itl_ms=45.90, p99_itl_ms=329.94, max_itl_ms=31297.97),
    notes="Namespace line shows random_input_len=30000, random_output_len=100, range 1.0, rate 10, 50 prompts; the block's header lines were outside the excerpt."))
runs.append(dict(id="sglang-pr3493-dsv3-tp8-sharegpt1000-rr8", source="sgl-project/sglang PR #3493 'use sgl_per_token_group_quant_fp8 kernel' (BBuf), main-branch run",
    url="https://github.com/sgl-project/sglang/pull/3493", date="2025-02-11", sglang_version="main ~v0.4.3",
    hardware="8 GPUs, type not stated in the text read", model="deepseek-ai/DeepSeek-V3 (FP8)",
    launch="python3 -m sglang.launch_server --model deepseek-ai/DeepSeek-V3 --tp 8 --trust-remote-code --port 30000",
    benchmark="python3 -m sglang.bench_serving --backend sglang --num-prompts 1000 --request-rate 8",
    workload=dict(dataset="sharegpt", num_prompts=1000, request_rate=8.0, tp=8),
    results=bench(successful_requests=1000, duration_s=234.70, total_input_tokens=301701, total_generated_tokens=188375, request_throughput=4.26,
        input_throughput=1285.46, output_throughput=802.61, total_token_throughput=2088.07, concurrency=262.34, mean_e2e_latency_ms=61571.47,
        median_e2e_latency_ms=52159.16, mean_ttft_ms=2047.59, median_ttft_ms=630.04)))
runs.append(dict(id="sglang-issue3812-dsv3-tp16-2x8h800", source="sgl-project/sglang issue #3812 'Benchmark results of Expert Parallelism on DeepSeek-v3/R1'",
    url="https://github.com/sgl-project/sglang/issues/3812", date="2025-02-24", sglang_version="main with EP PR #3602 (~v0.4.3)",
    hardware="2 nodes x 8 H800, RoCE v2 RDMA", model="DeepSeek-V3 FP8",
    launch="python -m sglang.launch_server --model-path /dsv3_fp8_weight --dist-init-addr x.x.x.x:5000 --nnodes 2 --node-rank {0,1} --tp 16 --trust-remote-code",
    benchmark="python3 -m sglang.bench_serving --backend sglang --host 127.0.0.1 --port 30000 --dataset-name random --num-prompts 600 --random-input 180 --random-output 400 --request-rate 40",
    workload=dict(dataset="random", input_len=180, output_len=400, range_ratio=0.0, num_prompts=600, request_rate=40.0, tp=16),
    results=dict(duration_s=109.94, successful_requests=600),
    notes="Only the header of the TP16 block was in the excerpt (duration 109.94 s); the issue also has EP16 runs. H800 is an H100 variant with reduced NVLink."))

# ---------------- LMSYS blog: PD disaggregation + large-scale EP on 96 H100 ----------------
runs.append(dict(id="lmsys-2025-05-05-large-scale-ep-h100", source="LMSYS blog 'Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs'",
    url="https://lmsys.org/blog/2025-05-05-large-scale-ep/ (repo lm-sys/lm-sys.github.io blog/2025-05-05-large-scale-ep.md)", date="2025-05-05",
    sglang_version="main, May 2025 (~v0.4.6); reproduction commands in https://github.com/sgl-project/sglang/issues/6017",
    hardware="12 nodes x 8 H100 (Atlas Cloud), PD disaggregation: 3 prefill nodes + 9 decode nodes", model="DeepSeek-V3 (FP8)",
    launch="see issue #6017: --disaggregation-mode prefill|decode, --enable-dp-attention, --moe-a2a-backend deepep (then --enable-deepep-moe), --moe-dense-tp-size 1, EPLB, two-batch overlap",
    benchmark="prefill-only / decode-only load tests with 2000-token inputs (decode: batch 256 per device, KV length 2000)",
    workload=dict(input_len=2000, decode_batch_per_device=256),
    results=dict(input_throughput_per_node=52300, output_throughput_per_node=22300, decode_throughput_per_node_default=22282,
                 decode_throughput_per_node_simulated_mtp=17373, ttft_s="2-5", itl_ms="~100"),
    notes="Not a single bench_serving block; numbers are the blog's table/text. TBO gives +25.5% decode at 256 tokens/device (22,310 tok/s)."))

# ---------------- AMD ROCm blogs (commands exact, numbers only in figures/text) ----------------
runs.append(dict(id="rocm-2025-03-21-dsr1-part2-h200-vs-mi300x", source="AMD ROCm blog 'Supercharge DeepSeek-R1 Inference on AMD Instinct MI300X' (repo ROCm/rocm-blogs blogs/artificial-intelligence/DeepSeekR1-Part2/README.md)",
    url="https://rocm.blogs.amd.com/artificial-intelligence/DeepSeekR1-Part2/README.html", date="2025-03-21",
    sglang_version="H200: lmsysorg/sglang:v0.4.4.post1-cu125; MI300X: rocm/sgl-dev:upstream_20250312_v1", hardware="8x H200 141GB vs 8x MI300X 192GB", model="DeepSeek-R1 (FP8)",
    launch="H200: SGL_ENABLE_JIT_DEEPGEMM=1 python3 -m sglang.launch_server --model /model --trust-remote-code --tp 8 --mem-fraction-static 0.9 --enable-torch-compile --torch-compile-max-bs 256 --chunked-prefill-size 131072 --enable-flashinfer-mla | MI300X: python3 -m sglang.launch_server --model /model --tp 8 --trust-remote-code --chunked-prefill-size 131072 --enable-torch-compile --torch-compile-max-bs 256",
    benchmark="for c in 128 64 32 16 8 4 2 1: python3 -m sglang.bench_serving --dataset-name random --random-range-ratio 1 --num-prompt 500 --random-input 3200 --random-output 800 --max-concurrency $c",
    workload=dict(dataset="random", input_len=3200, output_len=800, range_ratio=1, num_prompts=500, max_concurrency=[128, 64, 32, 16, 8, 4, 2, 1], tp=8),
    results=dict(h200_max_concurrency_with_itl_below_50ms=16, mi300x_max_concurrency_with_itl_below_50ms=128),
    notes="Exact per-point numbers are only in figures; text claims MI300X 2-5x throughput at same latency vs H200 (AMD testing 2025-03-13)."))
runs.append(dict(id="rocm-2025-02-21-dsr1-perf-mi300x", source="AMD ROCm blog 'Unlock DeepSeek-R1 Inference Performance on AMD Instinct MI300X GPU' (repo ROCm/rocm-blogs blogs/artificial-intelligence/DeepSeekR1_Perf/README.md)",
    url="https://rocm.blogs.amd.com/artificial-intelligence/DeepSeekR1_Perf/README.html", date="2025-02-21",
    sglang_version="MI300X: rocm/sglang-staging:20250212 (SGLang 0.4.2); H200: lmsysorg/sglang:v0.4.2.post3/post4-cu125", hardware="8x MI300X (and 8x H200 for comparison)", model="DeepSeek-R1 (FP8)",
    launch="HSA_NO_SCRATCH_RECLAIM=1 python3 -m sglang.launch_server --model /workspace/models/DeepSeek-R1/ --tp 8 --trust-remote-code",
    benchmark="for c in 128 64 32 16 8 4 2 1: python3 -m sglang.bench_serving --dataset-name random --random-range-ratio 1 --num-prompt 500 --random-input 3200 --random-output 800 --max-concurrency $c",
    workload=dict(dataset="random", input_len=3200, output_len=800, range_ratio=1, num_prompts=500, tp=8),
    results=dict(mi300x_max_concurrency_with_tpot_below_50ms=16),
    notes="Numbers only in figures; text: memory-bound up to concurrency 32, compute-bound 32-64."))

# ---------------- SGLang cookbook: printed bench_serving blocks (raw/cookbook_*.txt, cookbook_blocks.py) ----------------
# Each page runs SGLang's own client (--backend sglang: the native /generate endpoint, ignore_eos on)
# on random prompts with no --random-range-ratio, so lengths are drawn uniformly up to the flags'
# lengths (the printed totals give their means), at --max-concurrency 1, 16 and 64 or 100, with five
# prompts a client (ten at 1). The same prompt set (seed 1) on every page: the printed input totals agree.
COOKBOOK = {  # raw file -> (id prefix, hardware, model, SGLang version, date the numbers were added)
    "cookbook_deepseek_r1_b200": ("cookbook-dsr1-b200", "8x NVIDIA B200", "deepseek-ai/DeepSeek-R1-0528 (FP8)", "0.5.6.post1", "2025-12-14"),
    "cookbook_deepseek_v3_1_mi300x": ("cookbook-dsv31-mi300x", "8x AMD MI300X",
                                      "deepseek-ai/DeepSeek-V3.1 (FP8; the page's environment says DeepSeek-V3.1-Terminus, its commands DeepSeek-V3.1)",
                                      "0.5.7", "2026-01-20"),
    "cookbook_qwen3_235b_b200": ("cookbook-qwen3-235b-b200", "8x NVIDIA B200", "Qwen/Qwen3-235B-A22B-Instruct-2507 (bf16)", "0.5.6", "2025-12-14"),
    "cookbook_llama3_1_70b_a100": ("cookbook-llama70b-a100", "8x NVIDIA A100", "Meta-Llama/Llama-3.1-70B (bf16)", "0.5.6", "2026-01-14"),
    "cookbook_gpt_oss_120b_b200": ("cookbook-gptoss120b-b200", "8x NVIDIA B200", "openai/gpt-oss-120b (MXFP4 experts)", "0.5.6", "2025-12-14"),
}
RESULT_LINES = {"Successful requests": "successful_requests", "Benchmark duration (s)": "duration_s",
                "Total input tokens": "total_input_tokens", "Total generated tokens": "total_generated_tokens",
                "Request throughput (req/s)": "request_throughput", "Output token throughput (tok/s)": "output_throughput",
                "Peak output token throughput (tok/s)": "peak_output_throughput", "Total token throughput (tok/s)": "total_token_throughput",
                "Concurrency": "concurrency", "Mean TTFT (ms)": "mean_ttft_ms", "Median TTFT (ms)": "median_ttft_ms", "P99 TTFT (ms)": "p99_ttft_ms",
                "Mean TPOT (ms)": "mean_tpot_ms", "Median TPOT (ms)": "median_tpot_ms", "P99 TPOT (ms)": "p99_tpot_ms",
                "Mean ITL (ms)": "mean_itl_ms", "Median ITL (ms)": "median_itl_ms", "P99 ITL (ms)": "p99_itl_ms"}
def flag(cmd, name):
    m = re.search(rf"--{name}[ =]+(\S+)", cmd); return m.group(1) if m else None
for raw, (prefix, hw, model, ver, date) in COOKBOOK.items():
    text = open(os.path.join(ROOT, "raw", raw + ".txt")).read()
    src = text.splitlines()[0].lstrip("# ")
    launch = cmd = None
    for block in re.split(r"^=== block \d+\n", text, flags=re.M)[1:]:
        flat = " ".join(x.strip().rstrip("\\").strip() for x in block.strip().splitlines())
        if "Serving Benchmark Result" in block:
            res = {}
            for line in block.splitlines():
                k, _, v = line.partition(":")
                if k.strip() in RESULT_LINES and v.strip():
                    res[RESULT_LINES[k.strip()]] = float(v) if "." in v else int(v)
            n = int(flag(cmd, "num-prompts?"))  # the GPT-OSS page writes --num-prompt
            dataset = flag(cmd, "dataset-name") or "sharegpt"  # bench_serving's default
            m = re.search(r"Max request concurrency:\s+(\d+)", block)
            c = int(m.group(1)) if m else int(flag(cmd, "max-concurrency"))
            assert res["successful_requests"] == n, (raw, cmd)
            if dataset == "random":
                i, o = int(flag(cmd, "random-input-len")), int(flag(cmd, "random-output-len"))
                rid, wl = f"{prefix}-{i}-{o}-c{c}", dict(dataset="random", input_len=i, output_len=o, range_ratio=0)
                note = "no --random-range-ratio: lengths drawn uniformly up to the flags' (their means are the printed totals over the requests)"
            else:
                rid, wl = f"{prefix}-{dataset}-c{c}", dict(dataset=dataset)
                note = "no --dataset-name: bench_serving's default, ShareGPT (the printed totals give the mean lengths)"
            runs.append(dict(id=rid, source=f"SGLang cookbook, {src}", url="https://github.com/sgl-project/sgl-cookbook/blob/main/" + src.split(" of ")[0],
                             date=date, sglang_version=ver, hardware=hw, model=model, client="python -m sglang.bench_serving --backend sglang (native /generate; ignore_eos on)",
                             launch=launch, benchmark=cmd,
                             workload=dict(**wl, num_prompts=n, request_rate="inf", max_concurrency=c, tp=8),
                             results=res, notes=note))
        elif "bench_serving" in flat or ("sglang serve" in flat and "--dataset-name" in flat):
            cmd = flat
        elif "launch_server" in flat or "sglang serve" in flat:
            launch = flat

with open(os.path.join(ROOT, "public_runs.yaml"), "w") as f:
    f.write("# Public SGLang serving benchmark runs (see public_runs.md for context and exclusions).\n"
            "# Generated by tools/build_public_runs.py; numbers transcribed from the cited sources.\n")
    yaml.safe_dump({"runs": runs}, f, sort_keys=False, width=200, allow_unicode=True)

# markdown table
def g(r, k): v = r["results"].get(k); return "" if v is None else str(v)
lines = ["| id | date | sglang | hardware | model | workload | out tok/s | mean / median / p99 TTFT ms | mean / median / p99 TPOT ms | median / p99 ITL ms |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for r in runs:
    w = r["workload"]
    wl = w.get("dataset", "")
    if "input_len" in w: wl += f" {w['input_len']}/{w.get('output_len','')}"
    if "num_prompts" in w: wl += f" n={w['num_prompts']}"
    if w.get("max_concurrency") and not isinstance(w["max_concurrency"], list): wl += f" conc={w['max_concurrency']}"
    if w.get("request_rate") not in (None, "inf"): wl += f" rate={w['request_rate']}"
    par = f"tp{w.get('tp','?')}" + (("+dpattn-flag(no --dp)" if r["id"].startswith("gpustack") else "+dpattn(dp8)") if w.get("dp_attention") else "")
    lines.append(f"| {r['id']} | {r['date'].split(' ')[0]} | {r['sglang_version'].split(' ')[0]} | {r['hardware'].split(' (')[0].split(';')[0]} | {r['model'].split(' ')[0]} | {wl} {par} | "
                 f"{g(r,'output_throughput')} | {g(r,'mean_ttft_ms')} / {g(r,'median_ttft_ms')} / {g(r,'p99_ttft_ms')} | "
                 f"{g(r,'mean_tpot_ms')} / {g(r,'median_tpot_ms')} / {g(r,'p99_tpot_ms')} | {g(r,'median_itl_ms')} / {g(r,'p99_itl_ms')} |")
open(os.path.join(ROOT, "raw", "public_runs_table.md"), "w").write("\n".join(lines) + "\n")
print(len(runs), "runs")
