# Transcribed from gpustack/gpustack docs/performance-lab/gpt-oss-20b/h100.md (commit 7b50d5067ddbdeba0739e7f72d6f40e53d3b9a04), read 2026-11-28
SRC = dict(url="https://github.com/gpustack/gpustack/blob/7b50d5067ddbdeba0739e7f72d6f40e53d3b9a04/docs/performance-lab/gpt-oss-20b/h100.md",
           rendered="https://docs.gpustack.ai/latest/performance-lab/gpt-oss-20b/h100", read="2026-11-28",
           date="not stated on page (vLLM v0.11.0 era, ~Oct-Nov 2025)")
COMMON = dict(model="openai/gpt-oss-20b", gpu="H100 SXM", vllm_version="v0.11.0", source=SRC)
SHAREGPT_CMD = "vllm bench serve --model openai/gpt-oss-20b --backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000"
def rnd(i,o,n): return f"vllm bench serve --model openai/gpt-oss-20b --backend openai-chat --endpoint /v1/chat/completions --dataset-name random --random-input-len {i} --random-output-len {o} --num-prompts {n} --seed 42"
K = ["successful_requests","duration_s","total_input_tokens","total_generated_tokens","request_throughput","output_token_throughput","total_token_throughput",
     "mean_ttft_ms","median_ttft_ms","p99_ttft_ms","mean_tpot_ms","median_tpot_ms","p99_tpot_ms","mean_itl_ms","median_itl_ms","p99_itl_ms"]
B="vllm serve openai/gpt-oss-20b"; O="vllm serve openai/gpt-oss-20b --async-scheduling"
RUNS = [
 ("baseline sharegpt (peak output tok/s 15953.00)",1,1,B,SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,24.81,215312,193979,40.30,7817.03,16493.75,4881.62,4791.97,8166.01,91.00,55.52,237.48,44.98,31.92,248.25]),
 ("async-scheduling sharegpt (peak output tok/s 22786.00)",1,1,O,SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,21.39,215312,193919,46.74,9064.40,19128.79,4933.91,4761.74,8029.82,86.81,52.23,222.47,38.92,27.02,236.29]),
 ("async + max-num-batched-tokens 16384 sharegpt (page prints 'vllm serve openai/gpt-oss-120b' here, apparently a typo)",1,1,"vllm serve openai/gpt-oss-120b --async-scheduling --max-num-batched-tokens 16384",SHAREGPT_CMD,"sharegpt",None,None,1000,None,
  [1000,21.56,215312,194591,46.39,9027.14,19015.54,4957.11,4698.76,7875.07,104.05,46.28,443.08,38.42,24.01,448.17]),
 ("baseline random 32000/100",1,1,B,rnd(32000,100,100),"random",32000,100,100,None,
  [100,107.95,3200000,9350,0.93,86.62,29730.30,53687.69,53539.25,105655.63,239.44,273.86,275.66,247.74,266.37,513.87]),
 ("baseline random 4000/200",1,1,B,rnd(4000,200,500),"random",4000,200,500,None,
  [500,61.73,1999249,52309,8.10,847.43,33236.17,31245.12,30820.97,58702.17,184.26,225.55,230.22,192.92,227.42,458.94]),
 ("baseline random 2000/100",1,1,B,rnd(2000,100,500),"random",2000,100,500,None,
  [500,32.58,999120,47022,15.35,1443.44,32113.65,16515.86,16363.96,30359.34,149.76,159.20,225.79,159.21,220.69,450.04]),
 ("baseline random 128/4",1,1,B,rnd(128,4,1000),"random",128,4,1000,None,
  [1000,4.70,127755,4000,212.76,851.04,28032.23,3174.14,2892.24,4415.25,178.91,208.03,246.08,274.82,228.45,509.42]),
 ("optimized random 32000/100",1,1,O,rnd(32000,100,100),"random",32000,100,100,None,
  [100,107.99,3200000,9404,0.93,87.08,29718.21,53565.41,53436.03,105793.87,239.49,275.30,276.86,247.68,269.91,515.55]),
 ("optimized random 4000/200",1,1,O,rnd(4000,200,500),"random",4000,200,500,None,
  [500,60.67,1999249,52966,8.24,872.95,33823.34,30513.46,30091.29,58206.28,182.69,224.54,229.32,191.65,226.01,458.93]),
 ("optimized random 2000/100",1,1,O,rnd(2000,100,500),"random",2000,100,500,None,
  [500,31.55,999120,46814,15.85,1483.71,33149.54,16044.42,16014.33,29736.08,146.63,154.39,223.69,155.89,216.15,447.46]),
 ("optimized random 128/4",1,1,O,rnd(128,4,1000),"random",128,4,1000,None,
  [1000,4.04,127755,4000,247.52,990.08,32611.91,2884.78,2641.45,3879.45,75.14,16.98,221.60,156.10,151.36,452.14]),
]
NOTE = "Summary table on the page gives baseline ShareGPT Total TPS 16701.31 / Mean TPOT 91.33 while the detailed run prints 16493.75 / 91.00 (two different runs); quoted as printed."
