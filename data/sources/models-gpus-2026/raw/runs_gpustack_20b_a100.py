# Transcribed from gpustack/gpustack docs/performance-lab/gpt-oss-20b/a100.md (commit 7b50d5067ddbdeba0739e7f72d6f40e53d3b9a04), read 2026-11-29
# also rendered at https://docs.gpustack.ai/latest/performance-lab/gpt-oss-20b/a100/
SRC = dict(url="https://github.com/gpustack/gpustack/blob/7b50d5067ddbdeba0739e7f72d6f40e53d3b9a04/docs/performance-lab/gpt-oss-20b/a100.md",
           rendered="https://docs.gpustack.ai/latest/performance-lab/gpt-oss-20b/a100/", read="2026-11-29",
           date="not stated on page (added to the repository on 2025-11-04; vLLM v0.11.0)")
COMMON = dict(model="openai/gpt-oss-20b", gpu="A100 SXM 80GB", vllm_version="v0.11.0", source=SRC)
SHAREGPT_CMD = "vllm bench serve --model openai/gpt-oss-20b --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
def rnd(i,o,n): return f"vllm bench serve --model openai/gpt-oss-20b --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"
K = ["successful_requests","max_concurrency_reported","duration_s","total_input_tokens","total_generated_tokens","request_throughput","output_token_throughput",
     "peak_output_token_throughput","peak_concurrent_requests","total_token_throughput",
     "mean_ttft_ms","median_ttft_ms","p99_ttft_ms","mean_tpot_ms","median_tpot_ms","p99_tpot_ms","mean_itl_ms","median_itl_ms","p99_itl_ms"]
B = "vllm serve openai/gpt-oss-20b"; O = "vllm serve openai/gpt-oss-20b --async-scheduling"
RUNS = [
 ("baseline sharegpt",1,1,B,SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,None,42.03,215312,194171,23.79,4620.12,7484.00,1000.00,9743.28,13654.59,13063.93,30306.72,48.57,45.15,110.58,41.95,33.96,112.27]),
 ("async-scheduling sharegpt",1,1,O,SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,None,37.51,215312,194303,26.66,5179.92,8545.00,1000.00,10919.92,12371.62,11647.98,27040.92,43.25,39.47,105.22,36.85,28.41,106.78]),
 ("async + max-num-batched-tokens 4096 sharegpt (serve command not printed: the page prints the 8192 command and heads this result block '# --max-num-batched-tokens 4096')",1,1,
  O + " --max-num-batched-tokens 4096",SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,None,37.43,215312,194145,26.72,5186.81,8601.00,1000.00,10939.12,12298.27,11609.21,27015.09,44.99,39.55,195.62,37.00,28.57,118.90]),
 ("async + max-num-batched-tokens 8192 sharegpt",1,1,O + " --max-num-batched-tokens 8192",SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,None,37.58,215312,193986,26.61,5161.85,8663.00,1000.00,10891.17,12479.83,11828.63,27160.43,45.94,39.39,234.47,36.95,28.33,101.21]),
 ("baseline random 32000/100",1,1,B,rnd(32000,100,100),"random",32000,100,100,None,
  [100,None,440.85,3200000,9533,0.23,21.62,203.00,100.00,7280.33,219739.77,219663.48,435080.24,268.03,278.17,282.40,276.43,274.32,438.91]),
 ("baseline random 4000/200",1,1,B,rnd(4000,200,500),"random",4000,200,500,None,
  [500,None,128.79,1999249,53530,3.88,415.64,1983.00,500.00,15938.87,62947.13,61941.78,125429.94,123.35,129.79,131.42,130.61,129.50,262.38]),
 ("baseline random 2000/100",1,1,B,rnd(2000,100,500),"random",2000,100,500,None,
  [500,None,58.06,999120,47224,8.61,813.35,4701.00,500.00,18021.34,31669.55,32083.12,55891.47,100.32,119.20,119.71,106.87,119.09,239.78]),
 ("baseline random 128/4",1,1,B,rnd(128,4,1000),"random",128,4,1000,None,
  [1000,None,5.44,127755,4000,183.85,735.40,932.00,1000.00,24223.22,2774.46,1971.28,5298.60,62.10,65.44,106.62,100.20,105.43,213.73]),
 ("optimized random 32000/100",1,1,O,rnd(32000,100,100),"random",32000,100,100,None,
  [100,None,435.88,3200000,9394,0.23,21.55,239.00,100.00,7363.09,217408.40,217388.75,430331.45,264.93,275.04,278.94,274.36,274.48,433.63]),
 ("optimized random 4000/200",1,1,O,rnd(4000,200,500),"random",4000,200,500,None,
  [500,None,123.99,1999249,52857,4.03,426.31,1699.00,500.00,16550.81,60587.64,59590.47,121079.49,119.37,125.63,126.57,126.46,125.29,253.57]),
 ("optimized random 2000/100",1,1,O,rnd(2000,100,500),"random",2000,100,500,None,
  [500,None,55.29,999120,46961,9.04,849.37,4961.00,500.00,18920.16,30030.76,30306.12,53186.39,95.80,114.20,114.34,102.24,114.01,229.30]),
 ("optimized random 128/4",1,1,O,rnd(128,4,1000),"random",128,4,1000,None,
  [1000,None,5.23,127755,4000,191.06,764.23,1302.00,1000.00,25172.82,2682.01,1944.72,5078.68,55.31,46.59,102.22,85.84,100.82,205.12]),
]
NOTE = ("Request rate inf (not set); --max-num-seqs and --max-model-len not set (vLLM defaults). No concurrency-4 runs on this page. "
        "The page at this commit says only 'NVIDIA A100 GPUs'; its revision 1f37f1b8 (2026-01-06) says 'A single NVIDIA A100 SXM 80GB GPU' and prints the same numbers. "
        "On SM80 TensorRT-LLM v1.2.0rc1 fails ('WFP4A16 MoE is unsupported on SM80'; the page's trtllm-serve line names gpt-oss-120b); "
        "SGLang v0.5.4.post2's ShareGPT run (558.76 tok/s total) is not a vLLM run.")
