# Transcribed from gpustack/gpustack docs/performance-lab/deepseek-r1/h200.md (commit a5c9fafc3022e81779c2c5ade32c5b703ce2248c), read 2026-11-28
SRC = dict(url="https://github.com/gpustack/gpustack/blob/a5c9fafc3022e81779c2c5ade32c5b703ce2248c/docs/performance-lab/deepseek-r1/h200.md",
           rendered="https://docs.gpustack.ai/latest/performance-lab/deepseek-r1/h200/", read="2026-11-28",
           date="not stated on page (vLLM v0.11.0 era)")
COMMON = dict(model="deepseek-ai/DeepSeek-R1-0528 (FP8)", gpu="H200", vllm_version="v0.11.0", source=SRC)
M="deepseek-ai/DeepSeek-R1-0528"
SHAREGPT_CMD = f"vllm bench serve --model {M} --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
def rnd(i,o,n): return f"vllm bench serve --model {M} --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"
K = ["successful_requests","duration_s","total_input_tokens","total_generated_tokens","request_throughput","output_token_throughput","total_token_throughput",
     "mean_ttft_ms","median_ttft_ms","p99_ttft_ms","mean_tpot_ms","median_tpot_ms","p99_tpot_ms","mean_itl_ms","median_itl_ms","p99_itl_ms"]
B=f"vllm serve {M} -tp 8"
RUNS = [
 ("vLLM baseline sharegpt (peak output 7451.00)",8,8,B,SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,76.59,219171,200752,13.06,2621.05,5482.59,17743.08,17698.39,24371.87,227.45,177.90,568.18,119.29,66.09,384.38]),
 ("vLLM baseline random 32000/100",8,8,B,rnd(32000,100,100),"random",32000,100,100,None,
  [100,206.90,3199900,10000,0.48,48.33,15514.57,101351.99,101163.80,200267.68,365.79,400.72,404.78,362.20,459.96,614.75]),
 ("vLLM baseline random 4000/200",8,8,B,rnd(4000,200,500),"random",4000,200,500,None,
  [500,132.68,1997530,100000,3.77,753.67,15808.55,63058.71,61952.74,124112.96,164.23,177.37,195.80,163.74,57.87,383.79]),
 ("vLLM baseline random 2000/100",8,8,B,rnd(2000,100,500),"random",2000,100,500,None,
  [500,59.26,998393,50000,8.44,843.71,17690.89,28911.90,27559.21,53497.07,237.02,276.56,322.76,235.10,357.74,379.46]),
 ("vLLM baseline random 128/4",8,8,B,rnd(128,4,1000),"random",128,4,1000,None,
  [1000,22.07,126882,4000,45.32,181.27,5931.25,19392.11,18992.42,21440.63,351.83,389.74,432.12,263.87,368.43,470.22]),
 ("vLLM baseline sharegpt concurrency 4",8,8,B,SHAREGPT_CMD.replace("--num-prompts 1000","--num-prompts 100 --max-concurrency 4"),"sharegpt",None,None,100,4,
  [100,108.42,22836,21338,0.92,196.81,407.45,123.30,117.53,258.12,19.36,19.13,22.67,19.41,18.84,48.61]),
]
NOTE = "Same page reports SGLang v0.5.3 (best: --tp 8 --enable-dp-attention, ShareGPT total 7143.30 tok/s) and TRT-LLM v1.0.0 (3385.88 tok/s); only vLLM runs recorded here."
