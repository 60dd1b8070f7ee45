# Transcribed from gpustack/gpustack docs/performance-lab/gpt-oss-120b/a100.md (commit c0cee89c99d601188c511e53f90d5dff1356c4f1), read 2026-11-29
# also rendered at https://docs.gpustack.ai/latest/performance-lab/gpt-oss-120b/a100/
SRC = dict(url="https://github.com/gpustack/gpustack/blob/c0cee89c99d601188c511e53f90d5dff1356c4f1/docs/performance-lab/gpt-oss-120b/a100.md",
           rendered="https://docs.gpustack.ai/latest/performance-lab/gpt-oss-120b/a100/", read="2026-11-29",
           date="not stated on page (added to the repository on 2025-10-15 with the H100 page; vLLM v0.11.0)")
COMMON = dict(model="openai/gpt-oss-120b", gpu="A100 SXM 80GB", vllm_version="v0.11.0", source=SRC)
SHAREGPT_CMD = "vllm bench serve --model openai/gpt-oss-120b --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
C4_CMD = SHAREGPT_CMD.replace("--num-prompts 1000", "--num-prompts 100 --max-concurrency 4")
def rnd(i,o,n): return f"vllm bench serve --model openai/gpt-oss-120b --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"
K = ["successful_requests","max_concurrency_reported","duration_s","total_input_tokens","total_generated_tokens","request_throughput","output_token_throughput",
     "peak_output_token_throughput","peak_concurrent_requests","total_token_throughput",
     "mean_ttft_ms","median_ttft_ms","p99_ttft_ms","mean_tpot_ms","median_tpot_ms","p99_tpot_ms","mean_itl_ms","median_itl_ms","p99_itl_ms"]
B = "vllm serve openai/gpt-oss-120b --max-model-len 32768"
A = B + " --async-scheduling"
O = A + " --max-num-batched-tokens 4096"
RUNS = [
 # (label, num_gpus, tp, serve, bench, dataset, in, out, nprompts, max_conc, values...)
 ("baseline sharegpt", 1, 1, B, SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,None,86.39,215312,196656,11.58,2276.40,3572.00,1000.00,4768.75,25918.79,24822.43,59731.55,97.57,90.70,206.31,86.67,70.10,210.76]),
 ("async-scheduling sharegpt", 1, 1, A, SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,None,82.35,215312,195312,12.14,2371.67,3615.00,1000.00,4986.20,24787.19,23575.09,56631.39,92.70,86.19,203.05,82.31,65.76,205.68]),
 ("TP2 sharegpt", 2, 2, A + " -tp 2", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,None,52.10,215312,196156,19.19,3765.02,5687.00,1000.00,7897.72,16190.50,15435.84,36099.41,57.98,53.39,132.88,51.20,40.51,134.62]),
 ("async + max-num-batched-tokens 4096 sharegpt", 1, 1, O, SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,None,81.24,215312,195400,12.31,2405.35,3767.00,1000.00,5055.82,24102.33,23200.31,55834.89,94.55,84.96,332.44,81.69,65.37,263.32]),
 ("async + max-num-batched-tokens 8192 sharegpt (serve command not printed: the page prints the 4096 command and heads this result block '# --max-num-batched-tokens 8192')", 1, 1,
  A + " --max-num-batched-tokens 8192", SHAREGPT_CMD, "sharegpt", None, None, 1000, None,
  [1000,None,81.65,215312,196734,12.25,2409.38,4073.00,1000.00,5046.28,24118.79,22914.78,56155.47,95.68,85.26,379.93,81.81,65.77,232.43]),
 ("baseline random 32000/100", 1, 1, B, rnd(32000,100,100), "random", 32000, 100, 100, None,
  [100,None,740.10,3200000,9988,0.14,13.50,176.00,100.00,4337.21,368856.64,368713.30,730947.33,224.58,228.19,231.28,233.21,24.23,676.79]),
 ("baseline random 4000/200", 1, 1, B, rnd(4000,200,500), "random", 4000, 200, 500, None,
  [500,None,269.39,1999249,67259,1.86,249.67,1146.00,500.00,7671.00,133561.13,134006.62,263106.36,112.18,114.77,136.26,117.62,27.99,353.98]),
 ("baseline random 2000/100", 1, 1, B, rnd(2000,100,500), "random", 2000, 100, 500, None,
  [500,None,123.94,999120,48981,4.03,395.21,1696.00,500.00,8456.65,61328.02,61764.97,120670.44,131.94,138.30,150.84,139.51,214.02,432.26]),
 ("baseline random 128/4", 1, 1, B, rnd(128,4,1000), "random", 128, 4, 1000, None,
  [1000,None,14.09,127755,4000,70.99,283.95,273.00,1000.00,9353.12,7813.18,7750.58,13935.99,182.75,189.53,193.12,274.25,196.02,386.54]),
 ("baseline sharegpt concurrency 4", 1, 1, B, C4_CMD, "sharegpt", None, None, 100, 4,
  [100,4,66.52,22946,21691,1.50,326.09,368.00,11.00,671.05,61.91,61.55,112.05,11.67,11.44,15.03,11.74,11.14,38.75]),
 ("optimized random 32000/100", 1, 1, O, rnd(32000,100,100), "random", 32000, 100, 100, None,
  [100,None,696.89,3200000,9828,0.14,14.10,196.00,100.00,4605.91,346799.49,346737.12,687309.14,201.61,203.58,271.48,209.02,20.50,1206.69]),
 ("optimized random 4000/200", 1, 1, O, rnd(4000,200,500), "random", 4000, 200, 500, None,
  [500,None,244.13,1999249,68059,2.05,278.79,1289.00,500.00,8468.21,121158.11,121158.59,238837.53,99.77,102.46,122.61,104.98,25.69,397.17]),
 ("optimized random 2000/100", 1, 1, O, rnd(2000,100,500), "random", 2000, 100, 500, None,
  [500,None,113.32,999120,49103,4.41,433.30,1893.00,500.00,9249.89,55458.38,56144.82,110079.18,117.85,125.32,135.13,125.08,31.45,575.36]),
 ("optimized random 128/4", 1, 1, O, rnd(128,4,1000), "random", 128, 4, 1000, None,
  [1000,None,12.22,127755,4000,81.86,327.44,360.00,1000.00,10785.60,6900.44,6888.59,11990.00,301.66,320.19,323.93,452.71,327.62,652.15]),
 ("optimized sharegpt concurrency 4", 1, 1, O, C4_CMD, "sharegpt", None, None, 100, 4,
  [100,4,62.98,22946,21691,1.59,344.39,387.00,11.00,708.71,71.15,70.23,131.39,11.03,10.78,15.48,11.07,10.49,36.80]),
]
NOTE = ("Request rate inf (not set); the page's exact flags for the concurrency-4 runs are not quoted, only 'ShareGPT batch size 4' and 'Maximum request concurrency: 4' in the output. "
        "--max-num-seqs not set (vLLM default). The page at this commit says only 'NVIDIA A100 GPUs'; its revision 1f37f1b8 (2026-01-06) says "
        "'2 x NVIDIA A100 SXM 80GB GPUs on a single node' and prints the same numbers (and 120B's MXFP4 weights do not fit a 40GB A100 at TP1). "
        "On SM80 TensorRT-LLM v1.2.0rc0 fails ('WFP4A16 MoE is unsupported on SM80') and vLLM's FlashInfer attention fails (no attention sinks); "
        "SGLang v0.5.3's ShareGPT run (689.79 tok/s total) is not a vLLM run.")
