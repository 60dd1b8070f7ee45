#!/usr/bin/env bash
# The end-to-end recorder's phases on the device machine (README.md beside this file). One `device`
# call can chain several; the machine keeps /root/e2e while it stays warm between calls.
#
#   stash            copy the xz pieces this call carried (.e2e/part*/) to /root/e2e/pieces
#   install          check the pieces, unpack vLLM and its packages into /root/e2e/site
#   sginstall        likewise SGLang's pieces (pack.py --sglang) into /root/e2e/sgsite, which lanes
#                    of `"framework": "sglang"` search before the vLLM site (vLLM's benchmark client
#                    still drives them)
#   check            import vLLM's server, engine and benchmark; print versions and the GPUs
#   sgcheck          import SGLang's server and scheduler; print versions
#   lanes PLAN L...  start lanes L of PLAN (each on its GPUs, in the background) and return
#   wait SECONDS     wait until every started lane is done, or SECONDS have passed; name every lane
#                    that failed (a run whose prompts or prefix-cache hits were not the plan's: FAILED)
#                    (a call whose last phase is `wait` collects after it, as if `collect` followed)
#   sampler          install stack_sampler.py as the site's sitecustomize: every Python process of a
#                    lane started with SERVESIM_SAMPLE_DIR set records where its threads spend time
#   routing          install uniform_routing.py as the site's sitecustomize instead: dummy-weight
#                    servers started since zero their routers' biases (routing spread as trained)
#   trace            add stack_sampler.py to the site's sitecustomize (after `routing` or alone): a lane
#                    started with SERVESIM_SAMPLE_DIR (and SERVESIM_STALL_S) set samples its processes
#   plain            remove the site's sitecustomize: servers started since run as vLLM ships
#   moesteps CAP     time an MoE model's decode steps, CUDA graphs up to CAP tokens (moe_steps.py)
#   moeprof CAP B,.. the same at batches B, each also traced with torch's profiler (kernels, launches)
#   prefill CAP N,..  time one request's prefill at prompt lengths N (STEPS_MODEL, default Qwen3-30B-A3B;
#                    STEPS_ATTN=TRITON_ATTN: on that attention backend, not vLLM's pick)
#   steps CAP B,.. ASYNC   time any model's decode steps (STEPS_MODEL, default llama-3.1-8b) at batches
#                    B, async scheduling ASYNC (on, off, default)
#                    (moeprof, steps: STEPS_PROMPTS=320,64-576 times each batch with each set of prompt
#                    lengths, moe_steps.py --prompts; default 32 tokens each; steps: STEPS_MAXLEN=N caps
#                    the engine's max_model_len, for a model whose weights leave a card little room)
#   gaps M B,.. ASYNC  where model M's decode steps at batches B leave the GPU idle, async scheduling
#                    ASYNC (on, off, default): vLLM's profiler on its engine core (step_gaps.py;
#                    STEPS_PROMPTS=N: prompts of N tokens, default 1,024)
#   jitprobe M N,..  an offline engine of model M (dummy weights, graphs up to 1,024 tokens) runs one
#                    step of each token count N in order and lists the Triton kernels each compiled
#                    (jit_probe.py)
#   collect          pack /root/e2e/results (and the lanes' logs) into $OUT/results.tar.xz
set -uo pipefail
E2E=${E2E:-/root/e2e}
SITE=$E2E/site
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1
mkdir -p $E2E/pieces $E2E/results $E2E/logs

collect() {  # pack /root/e2e/results (the lanes' logs beside, servers' logs without step lines)
  for lane in $(ls $E2E/results); do
    [ -f $E2E/results/$lane/server.log ] && grep -v "Iteration(" $E2E/results/$lane/server.log > $E2E/results/$lane/server_lines.log
  done
  cp $E2E/logs/*.log $E2E/results/ 2>/dev/null
  tar -C $E2E/results --exclude='server.log' -cJf ${OUT:-/tmp}/results.tar.xz . && ls -la ${OUT:-/tmp}/results.tar.xz
}

while [ $# -gt 0 ]; do
  phase=$1; shift
  echo "=== $phase $(date +%T)"
  case $phase in
    stash)
      for f in .e2e/part*/bundle.* .e2e/sgpart*/sgbundle.*; do [ -f "$f" ] && cp -f "$f" $E2E/pieces/; done; ls -la $E2E/pieces ;;
    install)
      ( cd $E2E/pieces && sha256sum -c bundle.sha256 ) || { echo "pieces missing or damaged"; exit 3; }
      rm -rf $E2E/unpack && mkdir -p $E2E/unpack
      cat $E2E/pieces/bundle.tar.xz.* | xz -d -T0 | tar -x -C $E2E/unpack || exit 3
      rm -rf $SITE && mv $E2E/unpack/site $SITE
      python3 -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12 --target $SITE $E2E/unpack/wheels/*.whl 2>&1 | tail -3
      du -sh $SITE ;;
    sginstall)
      ( cd $E2E/pieces && sha256sum -c sgbundle.sha256 ) || { echo "SGLang pieces missing or damaged"; exit 3; }
      rm -rf $E2E/sgunpack && mkdir -p $E2E/sgunpack
      cat $E2E/pieces/sgbundle.tar.xz.* | xz -d -T0 | tar -x -C $E2E/sgunpack || exit 3
      rm -rf $E2E/sgsite && mv $E2E/sgunpack/site $E2E/sgsite
      # one wheel a package (a second file of one version, another platform tag, stops pip)
      python3 -m pip install -q --no-index --no-deps --no-compile --only-binary=:all: --python-version 3.12 --target $E2E/sgsite $(ls $E2E/sgunpack/wheels/*.whl | awk -F/ '{split($NF, w, "-"); if (!seen[w[1]]++) print}') 2>&1 | tail -3
      # transformers' own qwen3_asr config stands where SGLang registers one again (sglang_compat.py)
      cp -f tools/e2e/sglang_compat.py $E2E/sgsite/sitecustomize.py
      du -sh $E2E/sgsite ;;
    sgcheck)
      PYTHONPATH=$E2E/sgsite:$PYTHONPATH python3 -c "import sglang, sgl_kernel, flashinfer, transformers; print('sglang', sglang.__version__, 'sgl_kernel', sgl_kernel.__version__, 'flashinfer', flashinfer.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -5
      PYTHONPATH=$E2E/sgsite:$PYTHONPATH python3 -c "import sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, sglang.srt.models.llama, sglang.srt.models.qwen3_moe, sglang.srt.models.deepseek_v2, sglang.srt.layers.attention.flashattention_backend, sglang.srt.layers.sampler; from sgl_kernel import flash_ops; print('sglang imports ok')" 2>&1 | tail -8 ;;
    check)
      python3 -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__, 'gpus', torch.cuda.device_count())" 2>&1 | tail -3
      python3 -c "import vllm.entrypoints.openai.api_server, vllm.v1.engine.core, vllm.benchmarks.serve; print('imports ok')" 2>&1 | tail -3
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
      nproc; free -g | head -2 ;;
    sampler)
      cp -f tools/e2e/stack_sampler.py $SITE/sitecustomize.py && echo "sampler installed in $SITE" ;;
    routing)
      cp -f tools/e2e/uniform_routing.py $SITE/sitecustomize.py && echo "uniform routing installed in $SITE" ;;
    trace)
      cp -f tools/e2e/stack_sampler.py $SITE/servesim_sampler.py
      echo "import servesim_sampler  # device.sh trace" >> $SITE/sitecustomize.py && echo "sampler added to $SITE/sitecustomize.py" ;;
    plain)
      rm -f $SITE/servesim_sampler.py
      rm -f $SITE/sitecustomize.py && echo "no sitecustomize in $SITE" ;;
    lanes)
      plan=$1; shift
      while [ $# -gt 0 ] && [ "${1#-}" = "$1" ] && ! [[ "$1" =~ ^(stash|install|sginstall|check|sgcheck|sampler|routing|trace|plain|lanes|wait|moesteps|moeprof|prefill|steps|gaps|jitprobe|collect)$ ]]; do
        lane=$1; shift
        rm -f $E2E/results/$lane/DONE $E2E/results/$lane/FAILED
        setsid nohup python3 tools/e2e/lane.py --plan "$plan" --lane "$lane" --root $E2E > $E2E/logs/$lane.log 2>&1 < /dev/null &
        echo "started $lane (pid $!)"; sleep 4
        echo $lane >> $E2E/logs/started
      done ;;
    wait)
      limit=$1; shift; t0=$(date +%s)
      while true; do
        pending=0
        for lane in $(sort -u $E2E/logs/started 2>/dev/null); do
          [ -f $E2E/results/$lane/DONE ] || pending=$((pending + 1))
        done
        [ $pending -eq 0 ] && { echo "all lanes done"; break; }
        [ $(( $(date +%s) - t0 )) -ge $limit ] && { echo "$pending lane(s) still running"; break; }
        sleep 5
      done
      for f in $E2E/logs/*.log; do echo "--- $f"; tail -4 $f; done
      for lane in $(sort -u $E2E/logs/started 2>/dev/null); do
        [ -f $E2E/results/$lane/FAILED ] && echo "!!! FAILED $lane: $(cat $E2E/results/$lane/FAILED)"
      done ;;
    moesteps)
      cap=$1; shift
      python3 tools/e2e/moe_steps.py --capture $cap --root $E2E --out $E2E/results/moe_steps_$cap.json > $E2E/logs/moe_steps_$cap.log 2>&1
      tail -12 $E2E/logs/moe_steps_$cap.log | cut -c1-300 ;;
    moeprof)
      cap=$1; batches=$2; shift 2
      python3 tools/e2e/moe_steps.py --model ${STEPS_MODEL:-qwen3-30b-a3b} --capture $cap --batches $batches --profile $batches --prompts ${STEPS_PROMPTS:-32} --root $E2E --out $E2E/results/moe_prof_${STEPS_MODEL:-qwen3-30b-a3b}_$cap${STEPS_PROMPTS:+_spread}.json > $E2E/logs/moe_prof_$cap.log 2>&1
      tail -12 $E2E/logs/moe_prof_$cap.log | cut -c1-600 ;;
    prefill)
      cap=$1; lengths=$2; shift 2; model=${STEPS_MODEL:-qwen3-30b-a3b}
      attn=${STEPS_ATTN:+_$STEPS_ATTN}
      python3 tools/e2e/moe_steps.py --model $model --capture $cap --prefill $lengths ${STEPS_ATTN:+--attention-backend $STEPS_ATTN} --root $E2E --out $E2E/results/prefill_${model}_$cap$attn.json > $E2E/logs/prefill_${model}_$cap$attn.log 2>&1
      grep -i -m3 "attention backend\|Using .*backend" $E2E/logs/prefill_${model}_$cap$attn.log | cut -c1-200
      tail -8 $E2E/logs/prefill_${model}_$cap$attn.log | cut -c1-300 ;;
    steps)
      cap=$1; batches=$2; async=$3; shift 3; model=${STEPS_MODEL:-llama-3.1-8b}
      python3 tools/e2e/moe_steps.py --model $model --capture $cap --batches $batches --async-scheduling $async --prompts ${STEPS_PROMPTS:-32} ${STEPS_MAXLEN:+--max-model-len $STEPS_MAXLEN} --root $E2E --out $E2E/results/steps_${model}_${cap}_$async${STEPS_PROMPTS:+_spread}.json > $E2E/logs/steps_${model}_${cap}_$async.log 2>&1
      tail -12 $E2E/logs/steps_${model}_${cap}_$async.log | cut -c1-300 ;;
    gaps)
      model=$1; batches=$2; async=$3; shift 3
      python3 tools/e2e/step_gaps.py --model $model --batches $batches --async-scheduling $async --prompt ${STEPS_PROMPTS:-1024} --root $E2E --out $E2E/results/step_gaps_${model}_$async.json > $E2E/logs/step_gaps_${model}_$async.log 2>&1
      grep -v "^INFO\|^WARNING\|^(EngineCore" $E2E/logs/step_gaps_${model}_$async.log | tail -30 | cut -c1-400 ;;
    jitprobe)
      model=$1; tokens=$2; shift 2
      python3 tools/e2e/jit_probe.py --model $model --tokens $tokens --root $E2E --out $E2E/results/jit_probe_$model.json > $E2E/logs/jit_probe_$model.log 2>&1
      grep -v "^INFO\|^WARNING\|^(EngineCore" $E2E/logs/jit_probe_$model.log | tail -20 | cut -c1-400 ;;
    collect)
      collect || exit 4 ;;
    *)
      echo "unknown phase $phase"; exit 2 ;;
  esac
  last=$phase
done
# A call whose last phase waited collects too: the machine may go back before the next call comes,
# and the runs finished so far with it.
if [ "${last:-}" = wait ]; then echo "=== collect (after wait) $(date +%T)"; collect || exit 4; fi
