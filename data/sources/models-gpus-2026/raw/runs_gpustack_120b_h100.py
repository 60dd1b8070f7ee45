# Transcribed from gpustack/gpustack docs/performance-lab/gpt-oss-120b/h100.md (commit 72aee9dd195ff5c9bf3a4886add80038ce79aef8), read 2026-11-28
# also rendered at https://docs.gpustack.ai/latest/performance-lab/gpt-oss-120b/h100/
SRC = dict(url="https://github.com/gpustack/gpustack/blob/72aee9dd195ff5c9bf3a4886add80038ce79aef8/docs/performance-lab/gpt-oss-120b/h100.md",
           rendered="https://docs.gpustack.ai/latest/performance-lab/gpt-oss-120b/h100/", read="2026-11-28",
           date="not stated on page (GPUStack performance lab, vLLM v0.10.2 era, ~Sep-Oct 2025)")
COMMON = dict(model="openai/gpt-oss-120b", gpu="H100 SXM", vllm_version="v0.10.2", source=SRC)
SHAREGPT_CMD = "vllm bench serve --model openai/gpt-oss-120b --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
def rnd(i,o,n): return f"vllm bench serve --model openai/gpt-oss-120b --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"
K = ["successful_requests","duration_s","total_input_tokens","total_generated_tokens","request_throughput","output_token_throughput","total_token_throughput",
     "mean_ttft_ms","median_ttft_ms","p99_ttft_ms","mean_tpot_ms","median_tpot_ms","p99_tpot_ms","mean_itl_ms","median_itl_ms","p99_itl_ms"]
RUNS = [
 # (label, num_gpus, tp, serve, bench, dataset, in, out, nprompts, max_conc, values...)
 ("baseline sharegpt", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,67.40,215312,195544,14.84,2901.05,6095.37,24830.45,25973.43,54033.43,54.10,47.57,193.25,46.65,37.98,121.49]),
 ("async-scheduling sharegpt", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,63.65,215312,187289,15.71,2942.57,6325.41,23629.95,24595.25,51018.93,52.66,46.51,182.00,45.31,36.40,111.51]),
 ("TP2 sharegpt", 2, 2, "vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -tp 2", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,25.65,215312,196205,38.98,7648.67,16042.19,4612.68,4600.39,7587.07,86.54,51.57,215.21,43.02,31.37,223.98]),
 ("TP4 sharegpt", 4, 4, "vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -tp 4", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,17.32,215312,196174,57.74,11327.22,23759.49,2952.04,2871.45,4867.46,55.77,34.49,136.33,28.57,21.75,149.71]),
 ("PP2 sharegpt", 2, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling -pp 2", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,36.74,215312,196089,27.22,5337.65,11198.56,4471.76,4392.85,6960.63,115.37,69.62,371.01,60.87,50.83,374.02]),
 ("max-num-batched-tokens 16384 sharegpt", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768 --async-scheduling --max-num-batched-tokens 16384", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,65.28,215312,187636,15.32,2874.47,6172.93,23977.21,24694.18,51339.38,51.18,45.25,164.63,44.26,35.89,109.05]),
 ("baseline random 32000/100", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", rnd(32000,100,100), "random", 32000, 100, 100, None,
  [100,198.92,3200000,9877,0.50,49.65,16136.57,99444.04,99439.56,196214.22,23.99,23.69,31.32,25.13,7.26,454.68]),
 ("baseline random 4000/200", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", rnd(4000,200,500), "random", 4000, 200, 500, None,
  [500,145.04,1999249,67205,3.45,463.35,14247.47,72954.68,73023.24,141744.03,31.70,32.02,37.43,33.25,12.37,191.40]),
 ("baseline random 2000/100", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", rnd(2000,100,500), "random", 2000, 100, 500, None,
  [500,72.87,999120,49197,6.86,675.11,14385.69,36234.76,35662.58,70634.63,41.35,42.86,48.36,43.61,14.92,309.43]),
 ("baseline random 128/4", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", rnd(128,4,1000), "random", 128, 4, 1000, None,
  [1000,7.72,127755,4000,129.48,517.91,17059.15,4850.46,4987.41,7372.98,304.80,341.94,360.40,467.00,352.58,728.75]),
 ("baseline sharegpt concurrency 4", 1, 1, "vllm serve openai/gpt-oss-120b --max-model-len 32768", SHAREGPT_CMD.replace("--num-prompts 1000","--num-prompts 100 --max-concurrency 4"), "sharegpt", None, None, 100, 4,
  [100,47.88,22946,21691,2.09,453.04,932.29,49.00,47.49,107.46,8.31,8.24,10.12,8.40,7.99,23.32]),
 ("optimized TP2 random 32000/100", 2, 2, "vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", rnd(32000,100,100), "random", 32000, 100, 100, None,
  [100,98.86,3200000,9955,1.01,100.70,32471.01,48826.05,48671.00,96651.74,220.32,252.27,252.79,228.81,246.94,481.43]),
 ("optimized TP2 random 4000/200", 2, 2, "vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", rnd(4000,200,500), "random", 4000, 200, 500, None,
  [500,59.94,1999249,68046,8.34,1135.29,34491.13,29487.34,29235.61,56201.04,164.73,199.03,220.23,171.11,215.59,431.23]),
 ("optimized TP2 random 2000/100", 2, 2, "vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", rnd(2000,100,500), "random", 2000, 100, 500, None,
  [500,30.75,999120,49059,16.26,1595.22,34083.02,15291.77,15170.31,28437.70,139.32,148.04,212.96,147.37,208.40,421.37]),
 ("optimized TP2 random 128/4", 2, 2, "vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", rnd(128,4,1000), "random", 128, 4, 1000, None,
  [1000,4.18,127755,4000,239.21,956.85,31517.47,2800.15,2412.28,3856.95,183.05,208.66,232.15,274.85,267.83,506.27]),
 ("optimized TP2 sharegpt concurrency 4", 2, 2, "vllm serve openai/gpt-oss-120b --async-scheduling -tp 2", SHAREGPT_CMD.replace("--num-prompts 1000","--num-prompts 100 --max-concurrency 4"), "sharegpt", None, None, 100, 4,
  [100,33.60,22946,21691,2.98,645.55,1328.44,37.51,36.68,58.54,5.75,5.74,6.91,5.89,5.54,23.43]),
]
NOTE = "Request rate inf (not set); the page's exact flags for the concurrency-4 runs are not quoted, only 'ShareGPT batch size 4' and 'Maximum request concurrency: 4' in the output. --max-num-seqs not set (vLLM default)."
