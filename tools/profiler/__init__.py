"""Measure real forward-step latencies of a dense decoder model on one GPU.

The simulator's step-latency model is a roofline cost function; this package
produces the measurements it is calibrated against.  It builds a random-weight
model of a dense Llama/Qwen3-style architecture straight from a Hugging Face
style ``config.json`` (the presets in ``simulator/data/models``), puts it on
the GPU in bf16 and times one forward step over a grid of batch shapes:

* decode: ``new_tokens = 1`` for every sequence, ``context`` tokens already in
  the KV cache;
* prefill / chunked prefill: ``new_tokens`` per sequence on top of
  ``context`` cached tokens (``context = 0`` is a plain prefill).

One step is: token embedding, for every layer RMSNorm, fused QKV projection,
(per-head q/k RMSNorm for Qwen3), rotary embedding, write of the new keys and
values into a per-layer KV cache, attention of the new tokens over
``context + new_tokens`` keys (grouped-query, causal among the new tokens,
through ``torch.nn.functional.scaled_dot_product_attention``), output
projection, RMSNorm, fused gate/up projection, SwiGLU, down projection; then
the final norm and the LM head on the last token of each sequence.

Every step is captured once in a CUDA graph and replayed, as serving engines
do for decode; the latency of a point is the median over replays timed with
CUDA events.  Points whose KV cache and activations would not fit in the GPU
memory left after the weights are skipped (and listed in the sidecar).

Usage::

    python -m tools.profiler --model simulator/data/models/llama-3.1-8b.json \\
        --gpu-name h100-sxm --out data/profiles/h100-sxm_llama-3.1-8b.csv [--quick]

Output: a CSV with columns ``gpu,model,batch,new_tokens,context,ms`` and a
sidecar ``<out>.meta.json`` (software versions, device, grid, skipped points,
per-point spread).

``--streaming`` measures instead how fast the GPU streams weights through a
matrix-vector product (the work of a decode step's linear layers), with no model:

    python -m tools.profiler --streaming --gpu-name h100-sxm \
        --out data/profiles/streaming/h100-sxm.csv

For each weight shape it captures, in one CUDA graph, a chain of ``F.linear``
calls on distinct copies of the matrix (together larger than any cache, so every
call reads its weights from HBM) and reports the time per call; a chain of tiny
elementwise kernels gives the per-kernel floor. Columns:
``gpu,op,out_features,in_features,batch,bytes,copies,ms``. The slope of time
over bytes is the achievable weight-streaming bandwidth, which pins the cost
model's ``matmul_memory`` efficiency during calibration (``simulator/validation/calibrate.py``).

``--mode`` adds nine measurements of what vLLM-style serving adds on top (each writes a CSV
and a ``<out>.meta.json`` with versions, device, method and per-point spread; see
``data/profiles/README-measurements.md`` for the results and the exact commands):

* ``compare`` (with ``--model``): the same step as the default mode, timed as ``compiled_graph``
  (:class:`PiecewiseForward`: tokens on one axis, residual add fused into the next RMSNorm, pieces
  between attentions compiled once by ``torch.compile``/Inductor with a dynamic token axis, whole
  step captured in a CUDA graph per shape), ``graph`` (the default mode's step in a CUDA graph),
  ``eager`` (the default mode's step launched from Python) and, via ``--modes``, ``compiled`` and
  ``graph_pieces``; decode batches 1..512 at contexts 512 and 2048, the same at half the layers
  for four batches (per-layer slope and per-step intercept), batch-1 prefills of 512..8192 tokens.
  Columns ``gpu,model,mode,layers,batch,new_tokens,context,ms,ms_sync,host_ms``; the meta also
  holds kernels per step and per layer of each way of running the step.
* ``moe``: the routed-expert FFN of one MoE layer (``--moe-models PRESET.json[:TP]``) as
  ``torch._grouped_mm`` and as a loop of per-expert matmuls, with uniform random top-k routing,
  for 1..4096 tokens.
* ``fp8``: ``torch._scaled_mm`` (tensor-wise, row-wise) and ``F.scaled_mm`` (1x128 x 128x128
  blocks) against bf16 ``F.linear``, M = 1..8192.
* ``allreduce``: NCCL all-reduce of bf16 buffers of 2 KiB..256 MiB over the host's GPUs
  (one process per GPU, ``torch.multiprocessing.spawn``), eager and in a CUDA graph.
* ``tp`` (with ``--model``, ``--tp N``, default 2): tensor-parallel steps, one process per GPU
  (``torch.multiprocessing.spawn``), NCCL, the Megatron/vLLM layout (:class:`TPForward`): column-parallel
  fused QKV and gate/up, row-parallel output and down projections each followed by an all-reduce of the
  hidden states, KV heads split (``max(1, kv_heads // tp)`` per GPU, replicated past the KV-head
  count), vocabulary-parallel embedding and LM head. The pieces of ``compare``'s compiled step are
  compiled per rank and the whole step, collectives included, is captured in one CUDA graph per shape
  (falling back to the uncompiled pieces, then to eager, if that fails); decode batches 1..256 at
  contexts 512 and 2048 and batch-1 prefills of 512..8192 tokens, timed with CUDA events on rank 0
  after a barrier. ``--layers L`` builds the first L layers only (a model too large for the GPUs);
  ``--gpu-name auto`` labels the rows from the device name. Columns
  ``gpu,model,tp,layers,batch,new_tokens,context,ms``.
* ``sustained``: minutes of the same work back to back (``--budget-s`` seconds of a 40-layer
  Qwen3-14B step's linear layers at 8,192 tokens, then 40 s of the same at 64 tokens over distinct
  weight copies), a row per ~1 s window with nvidia-smi's SM clock, power, temperature and
  throttle reasons: whether power and heat pull the rate down over a long burst. Columns
  ``gpu,workload,t_s,replays,ms_per_replay,tflops,gbps,sm_clock_mhz,power_w,temp_c,throttle_reasons``.
* ``mixed_attention``: one variable-length flash-attention call over N one-token requests and a
  prefill chunk (a mixed step, as vLLM's FlashAttention backend batches it) against each part
  alone, for three head layouts. Columns ``gpu,case,decodes,decode_context,prefill_tokens,heads,
  kv_heads,head_dim,ms,ms_decodes_alone,ms_prefill_alone``.
* ``vllm_attention`` (with ``--fa-dir``, a copy of a vLLM wheel's ``vllm_flash_attn`` folder): vLLM's
  own FlashAttention-2 and -3 kernels over a paged KV cache of 16-token blocks: decodes alone,
  prefill chunks alone, and decodes batched with a chunk against each part alone. Columns
  ``gpu,kernel,case,decodes,decode_context,prefill_tokens,prefill_context,heads,kv_heads,head_dim,ms,
  ms_decodes_alone,ms_prefill_alone,kv_gbps,tflops``.
* ``vllm_moe`` (with ``--moe-src``, a vLLM wheel's ``fused_moe.py``, and ``--moe-configs``): vLLM's
  Triton fused-MoE kernel run as vLLM runs a layer's routed experts, with the wheel's tuned tiles
  for the GPU where it ships them, for 1..8192 tokens, launched one by one and in a CUDA graph.
  Columns ``gpu,case,experts,top_k,hidden,intermediate,tokens,config,ms,ms_gate_up,ms_down,ms_graph,
  touched_experts,tflops,weight_gbps``.

::

    python -m tools.profiler --mode compare --model simulator/data/models/llama-3.1-8b.json \
        --gpu-name h100-sxm --out data/profiles/compiled/h100-sxm_llama-3.1-8b.csv

Run it from the repository root. Beyond torch it needs numpy, PyYAML and the package's own
:mod:`simulator.validation.calibrate` (for the CSV headers that calibration reads). torch is imported only
once a mode runs, so ``--help`` and every module's import work without it.

One module per mode or family of modes: ``steps`` (the default mode and ``--streaming``),
``compare``, ``moe`` (``moe`` and ``vllm_moe``), ``fp8``, ``allreduce``, ``tp`` (with the sharded
step in ``tp_layout``), ``sustained``, ``attention`` (``mixed_attention`` and ``vllm_attention``);
``model`` holds the model they time, ``pieces`` the step cut as vLLM compiles it, ``common`` the
timing, metadata and CSV helpers, and ``__main__`` the command line.
"""
