"""Record vLLM V1 scheduler traces for the servesim parity fixtures.

For every scenario (see scenarios.py) this builds an in-process vLLM engine
on a tiny random-weight Llama, feeds it the scenario's requests as prompt
token ids, steps it one engine step at a time and writes, per step, what the
scheduler decided (``NAME.csv``) next to the scenario itself (``NAME.json``).

Run it with the virtual environment made by setup.sh, e.g.::

    tools/parity/record_all.sh                # every scenario
    tools/parity/.venv/bin/python tools/parity/record.py --only overload_pc_on

The environment must be set before vLLM is imported, so this module sets it
at the top.
"""

from __future__ import annotations

import contextlib
import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine core in-process
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

import argparse
import csv
import gc
import importlib.util
import json
import random
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "simulator" / "data" / "parity"
DEFAULT_WORK = HERE / "work"


def _load_scenarios():
    """tools/parity/scenarios.py, loaded by path: this script runs in the recorder's own environment,
    where the repository is not on the path (and its top-level ``scenarios/`` folder is not this)."""
    spec = importlib.util.spec_from_file_location("parity_scenarios", HERE / "scenarios.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scenario_mod = _load_scenarios()

CSV_COLUMNS = [
    "step",
    "num_scheduled_tokens",
    "scheduled",
    "new",
    "resumed",
    "preempted",
    "finished",
    "prefix_hits",
    "num_running",
    "num_waiting",
    "num_free_blocks",
    "kv_usage",
    "num_generated",
]

# Token ids are drawn from [TOKEN_LO, VOCAB); ids below TOKEN_LO are left
# alone (BOS/EOS and friends of a real vocabulary).
VOCAB_SIZE = 4096
TOKEN_LO = 16


# --------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------
def make_tiny_llama(model_dir: Path) -> Path:
    """Write a tiny random-weight Llama (no tokenizer) to model_dir."""
    if (model_dir / "config.json").exists() and any(model_dir.glob("*.safetensors")):
        return model_dir
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # head_dim = hidden / heads = 32: the CPU attention backend supports
    # head sizes 32, 64, 80, ... only.
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(model_dir), safe_serialization=True)
    return model_dir


# --------------------------------------------------------------------------
# Token content
# --------------------------------------------------------------------------
def build_prompts(scenario: dict) -> dict[str, list[int]]:
    """Deterministic prompt token ids for every request of a scenario.

    Requests of one prefix_group share their first prefix_len ids (one fixed
    sequence per group, the longest prefix_len in the group decides its
    length); everything else is random per request.  Ids are drawn from
    ~4k values, 32-token blocks of random ids therefore never collide by
    accident.
    """
    seed = scenario.get("token_seed", 0)
    group_len: dict[str, int] = {}
    for r in scenario["requests"]:
        g = r.get("prefix_group")
        if g is not None:
            group_len[str(g)] = max(group_len.get(str(g), 0), int(r["prefix_len"]))
    group_tokens: dict[str, list[int]] = {}
    for g in sorted(group_len):
        rng = random.Random(f"{seed}/group/{g}")
        group_tokens[g] = [rng.randrange(TOKEN_LO, VOCAB_SIZE) for _ in range(group_len[g])]
    prompts: dict[str, list[int]] = {}
    for r in scenario["requests"]:
        rid = str(r["id"])
        rng = random.Random(f"{seed}/req/{rid}")
        n = int(r["prompt_len"])
        g = r.get("prefix_group")
        p = int(r.get("prefix_len") or 0) if g is not None else 0
        assert p < n, f"request {rid}: prefix_len must be < prompt_len"
        head = group_tokens[str(g)][:p] if g is not None else []
        prompts[rid] = head + [rng.randrange(TOKEN_LO, VOCAB_SIZE) for _ in range(n - p)]
    return prompts


# --------------------------------------------------------------------------
# Engine
# --------------------------------------------------------------------------
def make_lora_adapter(adapter_dir: Path, rank: int = 8) -> Path:
    """Write a random LoRA adapter (PEFT format, rank ``rank``, on the attention projections) for the
    tiny Llama; every adapter id of a scenario loads it (the scheduler tells adapters apart by id)."""
    if (adapter_dir / "adapter_config.json").exists():
        return adapter_dir
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(0)
    shapes = {"q_proj": (128, 128), "k_proj": (128, 64), "v_proj": (128, 64), "o_proj": (128, 128)}
    weights = {}
    for layer in range(2):
        for name, (fan_in, fan_out) in shapes.items():
            key = f"base_model.model.model.layers.{layer}.self_attn.{name}"
            weights[f"{key}.lora_A.weight"] = torch.randn(rank, fan_in) * 0.01
            weights[f"{key}.lora_B.weight"] = torch.randn(fan_out, rank) * 0.01
    adapter_dir.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(adapter_dir / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(shapes),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "base_model_name_or_path": "tiny-llama",
    }
    (adapter_dir / "adapter_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return adapter_dir


def make_engine(model_dir: Path, eng: dict):
    from vllm import EngineArgs, LLMEngine

    kwargs = dict(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        enforce_eager=True,
        block_size=eng["block_size"],
        num_gpu_blocks_override=eng["num_gpu_blocks"],
        # Generous byte budget so the startup memory check passes; the block
        # count itself comes from num_gpu_blocks_override.
        kv_cache_memory_bytes=256 * 1024 * 1024,
        max_num_batched_tokens=eng["max_num_batched_tokens"],
        max_num_seqs=eng["max_num_seqs"],
        max_model_len=eng["max_model_len"],
        enable_prefix_caching=eng["enable_prefix_caching"],
        enable_chunked_prefill=True,
        long_prefill_token_threshold=eng.get("long_prefill_token_threshold", 0),
        async_scheduling=False,
        disable_log_stats=False,
        scheduler_reserve_full_isl=eng["full_prompt_admission"],
        scheduling_policy=eng.get("scheduling_policy", "fcfs"),
    )
    if eng.get("speculative_config"):  # the draft model is the tiny Llama itself
        kwargs["speculative_config"] = {**eng["speculative_config"], "model": str(model_dir)}
    if eng.get("enable_lora"):
        kwargs.update(enable_lora=True, max_loras=eng["max_loras"], max_lora_rank=eng["max_lora_rank"])
    args = EngineArgs(**kwargs)
    return LLMEngine.from_engine_args(args)


@dataclass
class StepRecord:
    scheduled: list[tuple[str, int]]
    new: list[str]
    resumed: list[str]
    preempted: list[str]
    prefix_hits: list[tuple[str, int]]
    num_running: int
    num_waiting: int
    num_free_blocks: int
    kv_usage: float
    finished: list[str] = field(default_factory=list)
    num_generated: int = 0


class SchedulerTap:
    """Wraps schedule() / update_from_output() of the live scheduler."""

    def __init__(self, scheduler):
        self.sched = scheduler
        self.records: list[StepRecord] = []
        # Scheduled steps whose outputs are not in yet, oldest first (one at most without async
        # scheduling; with it, the next step is scheduled before the last one's outputs are in).
        # None: a step that scheduled nothing.
        self.pending: deque[StepRecord | None] = deque()
        self.empty_steps = 0
        # vLLM's LLMEngine appends a random suffix to each request id;
        # traces use the scenario's ids.
        self.ext: dict[str, str] = {}
        # Optional per-step detail (block ids, queues), for debugging only.
        self.debug: list[dict] | None = None
        self._orig_schedule = scheduler.schedule
        self._orig_update = scheduler.update_from_output
        scheduler.schedule = self._schedule
        scheduler.update_from_output = self._update

    def _schedule(self, *a, **kw):
        sched = self.sched
        # Requests waiting before this call; whichever of them gets scheduled
        # was admitted in this step (new, or resumed if it was preempted).
        waiting_before = {
            r.request_id: r.num_preemptions > 0
            for q in (sched.waiting, getattr(sched, "kv_holding_waiting", ()))
            for r in q
        }
        out = self._orig_schedule(*a, **kw)
        pool = sched.kv_cache_manager.block_pool
        scheduled = [(rid, int(n)) for rid, n in out.num_scheduled_tokens.items()]
        new_ids: list[str] = []
        resumed_ids: list[str] = []
        hits: list[tuple[str, int]] = []
        for rid, n in scheduled:
            if rid in waiting_before:
                (resumed_ids if waiting_before[rid] else new_ids).append(rid)
                # num_computed_tokens was advanced by the scheduled tokens in
                # _update_after_schedule; what is left is the admission hit.
                hits.append((rid, int(sched.requests[rid].num_computed_tokens) - n))
        preempted = list(self._preempted_this_step)
        self._preempted_this_step.clear()
        x = self.ext
        rec = StepRecord(
            scheduled=[(x[rid], n) for rid, n in scheduled],
            new=[x[rid] for rid in new_ids],
            resumed=[x[rid] for rid in resumed_ids],
            preempted=[x[rid] for rid in preempted],
            prefix_hits=[(x[rid], n) for rid, n in hits],
            num_running=len(sched.running),
            num_waiting=sched.get_request_counts()[1],
            num_free_blocks=pool.get_num_free_blocks(),
            kv_usage=sched.get_kv_cache_usage(),
        )
        # Cross-check against what the SchedulerOutput itself says.
        out_new = {r.req_id for r in out.scheduled_new_reqs}
        out_resumed = set(out.scheduled_cached_reqs.resumed_req_ids)
        if out_new | out_resumed != set(new_ids) | set(resumed_ids):
            raise RuntimeError(
                f"admission mismatch: output new={sorted(out_new)} "
                f"resumed={sorted(out_resumed)} vs {new_ids} {resumed_ids}"
            )
        if self.debug is not None and out.total_num_scheduled_tokens > 0:
            mgr = sched.kv_cache_manager
            self.debug.append(
                {
                    "step": len(self.records),
                    "running": [
                        {
                            "id": x[r.request_id],
                            "num_computed_tokens": int(r.num_computed_tokens),
                            "num_tokens": int(r.num_tokens),
                            "block_ids": list(mgr.get_block_ids(r.request_id)[0]),
                        }
                        for r in sched.running
                    ],
                    "waiting": [x[r.request_id] for r in sched.waiting],
                    "free_queue": [b.block_id for b in pool.free_block_queue.get_all_free_blocks()],
                }
            )
        self.pending.append(rec if out.total_num_scheduled_tokens > 0 else None)
        if out.total_num_scheduled_tokens == 0:
            self.empty_steps += 1
        return out

    def _update(self, scheduler_output, model_output):
        result = self._orig_update(scheduler_output, model_output)
        rec = self.pending.popleft()
        if rec is not None:
            fin = []
            ngen = 0
            for eco in result.values():
                for o in eco.outputs:
                    ngen += len(o.new_token_ids)
                    if o.finish_reason is not None:
                        fin.append(self.ext[o.request_id])
            rec.finished = fin
            rec.num_generated = ngen
            self.records.append(rec)
        return result

    # preemption order
    _preempted_this_step: list[str]

    def install_preempt_hook(self):
        self._preempted_this_step = []
        orig = self.sched._preempt_request

        def hook(request, *a, **kw):
            self._preempted_this_step.append(request.request_id)
            return orig(request, *a, **kw)

        self.sched._preempt_request = hook


def make_async(sched) -> None:
    """Turn the live scheduler into vLLM's ``AsyncScheduler``, its extra state set as its
    ``__init__`` sets it. The CPU platform forces async scheduling off (its model runner does not
    run a step ahead), but the scheduler's rules do not depend on the platform: ``AsyncStepper``
    then drives it as the engine core's batch queue does, with the model's outputs made up."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    sched.__class__ = AsyncScheduler
    sched._spec_token_placeholders = [-1] * sched.num_spec_tokens
    sched.pp_size = sched.parallel_config.pipeline_parallel_size
    sched.decode_stagger = sched.pp_size


class AsyncStepper:
    """One ``step()`` of ``EngineCore.step_with_batch_queue`` with a batch queue of two (async
    scheduling): schedule a step while the one before is in flight, then take in the oldest step's
    outputs. The model is not run: a request whose scheduled tokens reach the end of what it has
    (not a partial prefill chunk) samples token ``TOKEN_LO`` (under ``ignore_eos`` the scheduler
    reads nothing else of it), as the model runner would report it."""

    def __init__(self, sched) -> None:
        self.sched = sched
        self.queue: deque = deque()  # (scheduler output, requests that sample), newest first

    def step(self) -> None:
        from vllm.v1.outputs import ModelRunnerOutput

        sched = self.sched
        if sched.has_requests():
            out = sched.schedule()
            samples = {rid for rid in out.num_scheduled_tokens if not sched.requests[rid].is_prefill_chunk}
            self.queue.appendleft((out, samples))
            if len(self.queue) < 2 and (out.total_num_scheduled_tokens > 0 or sched.has_requests()):
                return
        if not self.queue:
            return
        out, samples = self.queue.pop()
        ids = list(out.num_scheduled_tokens)
        sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={rid: i for i, rid in enumerate(ids)},
                sampled_token_ids=[[TOKEN_LO] if rid in samples else [] for rid in ids],
            ),
        )


def run_scenario(scenario: dict, model_dir: Path, debug: list | None = None) -> tuple[list[StepRecord], dict]:
    from vllm import SamplingParams
    from vllm.lora.request import LoRARequest

    eng = scenario["engine"]
    lora_dir = make_lora_adapter(model_dir.parent / "lora-adapter") if eng.get("enable_lora") else None
    engine = make_engine(model_dir, eng)
    core = engine.engine_core.engine_core  # InprocClient -> EngineCore
    sched = core.scheduler
    pool = sched.kv_cache_manager.block_pool
    info = {
        "num_gpu_blocks": int(core.vllm_config.cache_config.num_gpu_blocks),
        "block_pool_blocks": int(pool.num_gpu_blocks),
        "initial_free_blocks": int(pool.get_num_free_blocks()),
        "initial_kv_usage": float(sched.get_kv_cache_usage()),
        "block_size": int(core.vllm_config.cache_config.block_size),
        "max_num_batched_tokens": int(core.vllm_config.scheduler_config.max_num_batched_tokens),
        "max_num_seqs": int(core.vllm_config.scheduler_config.max_num_seqs),
        "async_scheduling": bool(core.vllm_config.scheduler_config.async_scheduling),
        "scheduler_reserve_full_isl": bool(
            getattr(core.vllm_config.scheduler_config, "scheduler_reserve_full_isl", False)
        ),
        "scheduler_cls": type(sched).__module__ + "." + type(sched).__qualname__,
        "policy": str(core.vllm_config.scheduler_config.policy),
        "enable_chunked_prefill": bool(core.vllm_config.scheduler_config.enable_chunked_prefill),
        "long_prefill_token_threshold": int(core.vllm_config.scheduler_config.long_prefill_token_threshold),
    }
    sc = core.vllm_config.scheduler_config
    for knob in (
        "watermark",
        "max_num_active_seqs",
        "max_num_scheduled_tokens",
        "long_prefill_token_threshold_adaptive",
        "prefill_schedule_interval",
    ):
        if hasattr(sc, knob):
            v = getattr(sc, knob)
            info[knob] = v if isinstance(v, (int, float, bool, type(None))) else str(v)
    stepper = None
    if eng.get("async_scheduling"):
        if scenario["workload"]["mode"] != "batch":
            # (a closed-loop client learns of an end one step later than without async scheduling,
            # which servesim's step-domain replay does not model: batch scenarios only)
            raise ValueError("async scheduling is recorded for batch scenarios only")
        make_async(sched)
        stepper = AsyncStepper(sched)
        info["async_scheduling"] = True
        info["scheduler_cls"] = type(sched).__module__ + "." + type(sched).__qualname__
    tap = SchedulerTap(sched)
    tap.install_preempt_hook()
    tap.debug = debug

    prompts = build_prompts(scenario)
    reqs = scenario["requests"]
    order = [str(r["id"]) for r in reqs]
    by_id = {str(r["id"]): r for r in reqs}

    def add(rid: str) -> None:
        r = by_id[rid]
        sp = SamplingParams(
            temperature=0.0,
            max_tokens=int(r["output_len"]),
            ignore_eos=True,
            detokenize=False,
        )
        adapter = r.get("lora")
        lora_request = LoRARequest(f"adapter{adapter}", int(adapter), str(lora_dir)) if adapter else None
        internal = engine.add_request(
            rid, {"prompt_token_ids": prompts[rid]}, sp, priority=int(r.get("priority", 0)), lora_request=lora_request
        )
        tap.ext[internal] = rid

    wl = scenario["workload"]
    if wl["mode"] == "batch":
        next_idx = len(order)
        for rid in order:
            add(rid)
    elif wl["mode"] == "closed_loop":
        c = int(wl["concurrency"])
        next_idx = min(c, len(order))
        for rid in order[:next_idx]:
            add(rid)
    else:
        raise ValueError(wl["mode"])

    finished: set[str] = set()
    empty_in_a_row = 0
    max_steps = 100000
    n_calls = 0
    while len(finished) < len(order):
        n_calls += 1
        if n_calls > max_steps:
            raise RuntimeError("too many steps")
        before = len(tap.records)
        if stepper is None:
            engine.step()
        else:
            stepper.step()
        if len(tap.records) > before:
            rec = tap.records[-1]
            step_fin = rec.finished
        else:
            step_fin = []
            empty_in_a_row += 1
            if empty_in_a_row > 20:
                raise RuntimeError("engine scheduled nothing for 20 steps (stuck)")
        if step_fin or len(tap.records) > before:
            empty_in_a_row = 0
        for rid in step_fin:
            finished.add(rid)
        if wl["mode"] == "closed_loop":
            fin_set = set(step_fin)
            for rid in order:
                if rid in fin_set and next_idx < len(order):
                    add(order[next_idx])
                    next_idx += 1
    info["empty_steps"] = tap.empty_steps
    info["engine_step_calls"] = n_calls
    # drain: let the engine tidy up finished requests
    with contextlib.suppress(Exception):
        engine.engine_core.shutdown()
    engine = core = sched = tap.sched = None  # release the engine before the next scenario
    gc.collect()
    return tap.records, info


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------
def _pairs(items) -> str:
    return " ".join(f"{a}:{b}" for a, b in items)


def write_csv(path: Path, records: list[StepRecord]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CSV_COLUMNS)
        for i, r in enumerate(records):
            w.writerow(
                [
                    i,
                    sum(n for _, n in r.scheduled),
                    _pairs(r.scheduled),
                    " ".join(r.new),
                    " ".join(r.resumed),
                    " ".join(r.preempted),
                    " ".join(r.finished),
                    _pairs(r.prefix_hits),
                    r.num_running,
                    r.num_waiting,
                    r.num_free_blocks,
                    repr(float(r.kv_usage)),
                    r.num_generated,
                ]
            )


def write_json(path: Path, scenario: dict, info: dict, vllm_version: str) -> None:
    eng = dict(scenario["engine"])
    doc = {
        "name": scenario["name"],
        "vllm_version": vllm_version,
        "description": scenario.get("description", ""),
        "engine": eng,
        "initial_free_blocks": info["initial_free_blocks"],
        "workload": scenario["workload"],
        "token_seed": scenario.get("token_seed", 0),
        "requests": [
            {
                "id": str(r["id"]),
                "prompt_len": int(r["prompt_len"]),
                "output_len": int(r["output_len"]),
                "prefix_group": r.get("prefix_group"),
                "prefix_len": int(r.get("prefix_len") or 0),
                **({"priority": int(r["priority"])} if "priority" in r else {}),
                **({"lora": int(r["lora"])} if r.get("lora") else {}),
            }
            for r in scenario["requests"]
        ],
        "recorded": {k: v for k, v in info.items() if k != "initial_free_blocks"},
        "notes": scenario.get("notes", ""),
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK)
    ap.add_argument("--only", nargs="*", help="scenario names to record")
    ap.add_argument("--skip-existing", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument(
        "--debug",
        action="store_true",
        help="also write WORK/debug/NAME.jsonl with block ids and queues per step",
    )
    args = ap.parse_args(argv)

    all_scenarios = scenario_mod.all_scenarios()
    if args.list:
        for s in all_scenarios:
            print(s["name"])
        return 0
    chosen = [s for s in all_scenarios if not args.only or s["name"] in args.only]
    if args.only:
        missing = set(args.only) - {s["name"] for s in chosen}
        if missing:
            print("unknown scenarios:", " ".join(sorted(missing)), file=sys.stderr)
            return 2

    import vllm

    version = vllm.__version__
    model_dir = make_tiny_llama(args.work / "tiny-llama")
    args.out.mkdir(parents=True, exist_ok=True)
    failures = []
    for s in chosen:
        name = s["name"]
        csv_path = args.out / f"{name}.csv"
        if args.skip_existing and csv_path.exists():
            continue
        t0 = time.time()
        try:
            debug: list[dict] | None = [] if args.debug else None
            records, info = run_scenario(s, model_dir, debug)
            if debug is not None:
                dd = args.work / "debug"
                dd.mkdir(parents=True, exist_ok=True)
                with open(dd / f"{name}.jsonl", "w") as f:
                    for d in debug:
                        f.write(json.dumps(d) + "\n")
        except Exception:
            traceback.print_exc()
            failures.append(name)
            print(f"[FAIL] {name}", flush=True)
            continue
        scheduled_eng = s["engine"]
        if info["num_gpu_blocks"] != scheduled_eng["num_gpu_blocks"]:
            print(f"[warn] {name}: engine has {info['num_gpu_blocks']} blocks", flush=True)
        write_json(args.out / f"{name}.json", s, info, version)
        write_csv(csv_path, records)
        n_pre = sum(len(r.preempted) for r in records)
        print(
            f"[ok] {name}: {len(records)} steps, {n_pre} preemptions, {time.time() - t0:.1f}s",
            flush=True,
        )
    if failures:
        print("failed:", " ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
