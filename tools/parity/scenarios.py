"""Scenario list for the vLLM scheduler parity fixtures.

Each scenario is a plain dict in the fixture's JSON shape (see README.md):
``name``, ``description``, ``engine``, ``workload``, ``requests`` and
optionally ``token_seed`` / ``notes``.  Everything here is deterministic:
random request mixes use their own seeded ``random.Random``.

Constraints of vLLM 0.32 (CPU build) that every scenario respects:
- block_size is a multiple of 32;
- max_model_len <= (num_gpu_blocks - 1) * block_size (the startup memory
  check plans against the usable blocks, i.e. without the null block);
- max_num_batched_tokens >= max_num_seqs;
- prompt_len + output_len <= max_model_len.
"""

from __future__ import annotations

import random

VLLM_NOTES = (
    "vLLM 0.32.0 has the admission gate: SchedulerConfig.scheduler_reserve_full_isl "
    "(engine arg --[no-]scheduler-reserve-full-isl, default True); "
    "engine.full_prompt_admission is its value. Other scheduler knobs left at their "
    "defaults (see 'recorded'): watermark=0.0, max_num_active_seqs=None, "
    "long_prefill_token_threshold_adaptive=False, policy=fcfs, chunked prefill on, "
    "async scheduling off."
)


def engine(
    num_gpu_blocks: int = 64,
    block_size: int = 32,
    max_num_batched_tokens: int = 256,
    max_num_seqs: int = 16,
    enable_prefix_caching: bool = True,
    max_model_len: int | None = None,
    long_prefill_token_threshold: int = 0,
    full_prompt_admission: bool = True,
    scheduling_policy: str = "fcfs",
    max_loras: int = 0,
    num_speculative_tokens: int = 0,
    async_scheduling: bool = False,
) -> dict:
    if max_model_len is None:
        max_model_len = min(2048, (num_gpu_blocks - 1) * block_size)
    eng: dict[str, object] = {
        "num_gpu_blocks": num_gpu_blocks,
        "block_size": block_size,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_num_seqs": max_num_seqs,
        "enable_prefix_caching": enable_prefix_caching,
        "max_model_len": max_model_len,
        "long_prefill_token_threshold": long_prefill_token_threshold,
        "full_prompt_admission": full_prompt_admission,
    }
    if scheduling_policy != "fcfs":  # written only when set, so the FCFS fixtures stay as recorded
        eng["scheduling_policy"] = scheduling_policy
    if max_loras:  # --enable-lora --max-loras N (rank 8: the recorder's adapter)
        eng.update(enable_lora=True, max_loras=max_loras, max_lora_rank=8)
    if num_speculative_tokens:  # the tiny Llama drafts for itself: greedy, every draft is accepted
        eng["speculative_config"] = {"method": "draft_model", "num_speculative_tokens": num_speculative_tokens}
    if async_scheduling:  # the next step scheduled before the last one's outputs are in (record.py's AsyncStepper)
        eng["async_scheduling"] = True
    return eng


def req(i, prompt_len, output_len, prefix_group=None, prefix_len=0) -> dict:
    return {
        "id": str(i),
        "prompt_len": int(prompt_len),
        "output_len": int(output_len),
        "prefix_group": prefix_group,
        "prefix_len": int(prefix_len) if prefix_group is not None else 0,
    }


def with_priorities(requests: list[dict], seed: int, levels: int = 3) -> list[dict]:
    """The requests with a seeded random priority each, 0 to ``levels - 1`` (vLLM: lower runs first)."""
    rng = random.Random(f"priority/{seed}")
    return [{**r, "priority": rng.randrange(levels)} for r in requests]


def with_adapters(requests: list[dict], seed: int, adapters: int, base_share: float = 0.25) -> list[dict]:
    """The requests with a seeded random LoRA adapter each (1 to ``adapters``, vLLM's lora_int_id),
    about ``base_share`` of them on the base model (no ``lora`` key)."""
    rng = random.Random(f"lora/{seed}")
    out = []
    for r in requests:
        out.append(dict(r) if rng.random() < base_share else {**r, "lora": rng.randint(1, adapters)})
    return out


def uniform(n, prompt_len, output_len) -> list[dict]:
    return [req(i, prompt_len, output_len) for i in range(n)]


def mixed(n, seed, prompt=(16, 400), output=(1, 160), groups=0, group_prefix=(32, 160)):
    """Seeded random request mix; with groups > 0 about half the requests
    belong to one of `groups` shared-prefix groups."""
    rng = random.Random(seed)
    gp = [rng.randint(*group_prefix) for _ in range(groups)]
    out = []
    for i in range(n):
        pl = rng.randint(*prompt)
        ol = rng.randint(*output)
        if groups and rng.random() < 0.5:
            g = rng.randrange(groups)
            pfx = min(gp[g], pl - 1)
            if pfx <= 0:
                out.append(req(i, pl, ol))
            else:
                out.append(req(i, pl, ol, f"g{g}", pfx))
        else:
            out.append(req(i, pl, ol))
    return out


def grouped(n_groups, per_group, prefix_len, prompt_len, output_len, interleave=True):
    out = []
    order = (
        [(k, g) for k in range(per_group) for g in range(n_groups)]
        if interleave
        else [(k, g) for g in range(n_groups) for k in range(per_group)]
    )
    for i, (_, g) in enumerate(order):
        out.append(req(i, prompt_len, output_len, f"g{g}", prefix_len))
    return out


def batch():
    return {"mode": "batch"}


def closed(c):
    return {"mode": "closed_loop", "concurrency": c}


def S(name, description, eng, workload, requests, token_seed=0, notes=""):
    for r in requests:
        assert r["prompt_len"] + r["output_len"] <= eng["max_model_len"], (name, r)
        assert r["prefix_len"] < r["prompt_len"], (name, r)
    assert eng["max_model_len"] <= (eng["num_gpu_blocks"] - 1) * eng["block_size"], name
    assert eng["max_num_batched_tokens"] >= eng["max_num_seqs"], name
    return {
        "name": name,
        "description": description,
        "engine": eng,
        "workload": workload,
        "requests": requests,
        "token_seed": token_seed,
        "notes": (notes + " " if notes else "") + VLLM_NOTES,
    }


def all_scenarios() -> list[dict]:
    sc: list[dict] = []
    add = sc.append

    # ---- everything fits -------------------------------------------------
    add(
        S(
            "fits_pc_on",
            "8 equal requests, cache holds them all",
            engine(num_gpu_blocks=64),
            batch(),
            uniform(8, 100, 20),
        )
    )
    add(
        S(
            "fits_pc_off",
            "same as fits_pc_on, prefix caching off",
            engine(num_gpu_blocks=64, enable_prefix_caching=False),
            batch(),
            uniform(8, 100, 20),
        )
    )
    add(
        S(
            "fits_single_long_prompt",
            "one request whose prompt is longer than the token budget",
            engine(num_gpu_blocks=64, max_num_batched_tokens=128),
            batch(),
            [req(0, 700, 10)],
        )
    )
    add(
        S(
            "fits_block_boundaries",
            "prompts on and around block multiples; outputs cross block edges",
            engine(num_gpu_blocks=64),
            batch(),
            [
                req(0, 31, 2),
                req(1, 32, 1),
                req(2, 33, 31),
                req(3, 64, 33),
                req(4, 63, 34),
                req(5, 95, 1),
                req(6, 96, 64),
                req(7, 97, 32),
            ],
        )
    )
    add(
        S(
            "fits_output_len_1",
            "every request wants one output token",
            engine(num_gpu_blocks=64),
            batch(),
            uniform(12, 90, 1),
        )
    )

    # ---- just overflows --------------------------------------------------
    # 8 x (100 + 40) tokens = 8 x 5 blocks = 40 blocks needed at the end.
    for pc in (True, False):
        for fpa in (True, False):
            add(
                S(
                    f"overflow_just_pc_{'on' if pc else 'off'}_fpa_{'on' if fpa else 'off'}",
                    "8 requests needing 40 blocks in total, 36 usable blocks",
                    engine(num_gpu_blocks=37, enable_prefix_caching=pc, full_prompt_admission=fpa),
                    batch(),
                    uniform(8, 100, 40),
                )
            )

    # ---- deep overload (many preemptions) --------------------------------
    for pc in (True, False):
        for fpa in (True, False):
            add(
                S(
                    f"overload_pc_{'on' if pc else 'off'}_fpa_{'on' if fpa else 'off'}",
                    "24 requests, cache holds about a quarter of them at their full length",
                    engine(num_gpu_blocks=40, enable_prefix_caching=pc, full_prompt_admission=fpa),
                    batch(),
                    uniform(24, 100, 60),
                )
            )
    add(
        S(
            "overload_decode_heavy",
            "short prompts, long outputs, small cache",
            engine(num_gpu_blocks=30, max_num_batched_tokens=128),
            batch(),
            uniform(16, 40, 200),
        )
    )
    add(
        S(
            "overload_tiny_cache",
            "cache barely fits one request at full length",
            engine(num_gpu_blocks=12, max_num_batched_tokens=128, max_model_len=352),
            batch(),
            [req(0, 200, 150), req(1, 180, 120), req(2, 60, 100)],
        )
    )

    # ---- shared prefixes -------------------------------------------------
    for pc in (True, False):
        add(
            S(
                f"shared_prefix_pc_{'on' if pc else 'off'}",
                "3 groups x 4 requests, 96-token (3-block) shared prefix, interleaved arrival",
                engine(num_gpu_blocks=80, enable_prefix_caching=pc),
                batch(),
                grouped(3, 4, 96, 150, 16),
            )
        )
    add(
        S(
            "shared_prefix_unaligned",
            "shared prefix of 80 tokens (not a block multiple)",
            engine(num_gpu_blocks=80),
            batch(),
            grouped(2, 4, 80, 130, 8),
        )
    )
    add(
        S(
            "shared_prefix_exact_blocks",
            "prefix exactly 4 blocks; prompts one token past it",
            engine(num_gpu_blocks=80),
            batch(),
            [req(0, 160, 8, "a", 128), req(1, 129, 8, "a", 128), req(2, 129, 8, "a", 128), req(3, 200, 8, "a", 128)],
        )
    )
    add(
        S(
            "shared_prefix_same_step",
            "group members admitted in the same step as the first one",
            engine(num_gpu_blocks=80, max_num_batched_tokens=1024),
            batch(),
            grouped(1, 6, 96, 120, 8),
        )
    )
    add(
        S(
            "shared_prefix_overload",
            "shared prefixes under cache pressure (eviction of cached blocks)",
            engine(num_gpu_blocks=40),
            batch(),
            grouped(2, 8, 64, 110, 40),
        )
    )
    add(
        S(
            "shared_prefix_closed_loop",
            "closed loop, 2 groups, prefix reuse after members finish",
            engine(num_gpu_blocks=48),
            closed(4),
            grouped(2, 8, 96, 140, 24),
        )
    )
    add(
        S(
            "shared_prefix_long_chunked",
            "long shared prefix (640) with chunked prefill",
            engine(num_gpu_blocks=120, max_num_batched_tokens=256),
            batch(),
            grouped(1, 5, 640, 700, 8, interleave=False),
        )
    )

    # ---- chunked prefill -------------------------------------------------
    add(
        S(
            "chunked_long_prompts",
            "prompts 600-900 tokens with a 256-token budget",
            engine(num_gpu_blocks=160),
            batch(),
            [req(0, 600, 20), req(1, 900, 10), req(2, 750, 30), req(3, 640, 5)],
        )
    )
    add(
        S(
            "chunked_small_budget",
            "64-token budget, mixed prompts",
            engine(num_gpu_blocks=96, max_num_batched_tokens=64),
            batch(),
            [req(0, 300, 10), req(1, 40, 30), req(2, 129, 12), req(3, 64, 20), req(4, 500, 4)],
        )
    )
    add(
        S(
            "chunked_long_prefill_threshold",
            "long_prefill_token_threshold=64",
            engine(num_gpu_blocks=128, long_prefill_token_threshold=64),
            batch(),
            [req(0, 400, 10), req(1, 50, 20), req(2, 300, 8), req(3, 100, 16), req(4, 20, 30)],
        )
    )
    add(
        S(
            "chunked_threshold_single",
            "long_prefill_token_threshold=48, one request alone then others",
            engine(num_gpu_blocks=96, long_prefill_token_threshold=48),
            closed(1),
            [req(0, 300, 4), req(1, 200, 4), req(2, 150, 4)],
        )
    )
    for fpa in (True, False):
        add(
            S(
                f"chunked_overflow_fpa_{'on' if fpa else 'off'}",
                "long prompts (500) vs 40-block cache, 128-token budget",
                engine(num_gpu_blocks=40, max_num_batched_tokens=128, full_prompt_admission=fpa),
                batch(),
                uniform(6, 500, 20),
            )
        )

    # ---- max_num_seqs binding --------------------------------------------
    add(
        S(
            "max_seqs_binding",
            "max_num_seqs=4, 16 requests, big cache",
            engine(num_gpu_blocks=128, max_num_seqs=4),
            batch(),
            uniform(16, 80, 12),
        )
    )
    add(
        S(
            "max_seqs_token_budget_binding",
            "32 decoding requests with a 32-token budget",
            engine(num_gpu_blocks=160, max_num_seqs=32, max_num_batched_tokens=32),
            batch(),
            uniform(40, 20, 24),
        )
    )
    add(
        S(
            "max_seqs_2_closed_loop",
            "max_num_seqs=2 under closed loop concurrency 6",
            engine(num_gpu_blocks=64, max_num_seqs=2),
            closed(6),
            uniform(12, 60, 10),
        )
    )

    # ---- seeded random mixes ----------------------------------------------
    add(
        S(
            "mixed_seed1_pc_on",
            "40 random requests, prompt 16-400, output 1-160",
            engine(num_gpu_blocks=96),
            batch(),
            mixed(40, 1),
        )
    )
    add(
        S(
            "mixed_seed1_pc_off",
            "same requests as mixed_seed1_pc_on, prefix caching off",
            engine(num_gpu_blocks=96, enable_prefix_caching=False),
            batch(),
            mixed(40, 1),
        )
    )
    add(
        S(
            "mixed_seed2_groups",
            "40 random requests, half in 3 shared-prefix groups",
            engine(num_gpu_blocks=80),
            batch(),
            mixed(40, 2, groups=3),
            token_seed=2,
        )
    )
    add(
        S(
            "mixed_seed3_fpa_off",
            "random mix under pressure, admission gate off",
            engine(num_gpu_blocks=60, full_prompt_admission=False),
            batch(),
            mixed(30, 3),
        )
    )
    add(
        S(
            "mixed_seed3_fpa_on",
            "random mix under pressure, admission gate on",
            engine(num_gpu_blocks=60, full_prompt_admission=True),
            batch(),
            mixed(30, 3),
        )
    )
    add(
        S(
            "mixed_seed4_block64",
            "block_size 64, random mix with groups",
            engine(num_gpu_blocks=40, block_size=64, max_num_batched_tokens=512),
            batch(),
            mixed(30, 4, prompt=(16, 600), output=(1, 200), groups=2, group_prefix=(64, 256)),
            token_seed=4,
        )
    )

    # ---- closed loop ------------------------------------------------------
    add(
        S(
            "closed_c4_fits",
            "closed loop, concurrency 4, ample cache",
            engine(num_gpu_blocks=64),
            closed(4),
            uniform(16, 100, 20),
        )
    )
    add(
        S(
            "closed_c8_overload",
            "closed loop, concurrency 8, small cache",
            engine(num_gpu_blocks=30),
            closed(8),
            uniform(24, 100, 50),
        )
    )
    add(
        S(
            "closed_c16_mixed",
            "closed loop, concurrency 16, random mix with groups",
            engine(num_gpu_blocks=70),
            closed(16),
            mixed(48, 5, groups=2),
            token_seed=5,
        )
    )
    add(
        S(
            "closed_c6_mixed_fpa_off",
            "closed loop, concurrency 6, random mix, gate off",
            engine(num_gpu_blocks=40, full_prompt_admission=False),
            closed(6),
            mixed(24, 6, prompt=(16, 300), output=(1, 120)),
        )
    )

    # ---- more overload / admission-gate cases ------------------------------
    for pc in (True, False):
        add(
            S(
                f"deep_overload_pc_{'on' if pc else 'off'}",
                "32 short-prompt long-output requests in a 24-block cache (many preemptions)",
                engine(num_gpu_blocks=24, max_num_batched_tokens=128, enable_prefix_caching=pc),
                batch(),
                uniform(32, 40, 150),
            )
        )
    hol = [req(i, 100, 100) for i in range(4)] + [req(4, 800, 10)] + [req(i, 50, 20) for i in range(5, 11)]
    for fpa in (True, False):
        add(
            S(
                f"hol_long_prompt_fpa_{'on' if fpa else 'off'}",
                "an 800-token prompt queued behind running requests, short ones behind it",
                engine(num_gpu_blocks=40, max_num_batched_tokens=128, full_prompt_admission=fpa),
                batch(),
                hol,
            )
        )
    gate_reqs = [req(i, 400, 60, "p", 256) for i in range(6)]
    for fpa in (True, False):
        add(
            S(
                f"gate_cached_prefix_fpa_{'on' if fpa else 'off'}",
                "closed loop 2: 256-token shared prefix, 400-token prompts, cache short of two full requests",
                engine(num_gpu_blocks=20, max_num_batched_tokens=128, full_prompt_admission=fpa),
                closed(2),
                gate_reqs,
            )
        )
    add(
        S(
            "chunked_threshold_overload_fpa_off",
            "long_prefill_token_threshold=64 under overload, gate off",
            engine(
                num_gpu_blocks=40,
                max_num_batched_tokens=192,
                long_prefill_token_threshold=64,
                full_prompt_admission=False,
            ),
            batch(),
            mixed(20, 7, prompt=(50, 500), output=(10, 120)),
        )
    )
    add(
        S(
            "resume_long_recompute",
            "preempted requests with long outputs recompute in chunks",
            engine(num_gpu_blocks=24, max_num_batched_tokens=64),
            batch(),
            uniform(3, 100, 300),
        )
    )
    add(
        S(
            "max_seqs_1_serial",
            "max_num_seqs=1: requests run one after another",
            engine(num_gpu_blocks=40, max_num_seqs=1),
            batch(),
            uniform(5, 70, 6),
        )
    )
    add(
        S(
            "block64_pc_off_overload",
            "block_size 64, prefix caching off, overload",
            engine(num_gpu_blocks=20, block_size=64, max_num_batched_tokens=256, enable_prefix_caching=False),
            batch(),
            uniform(12, 150, 90),
        )
    )
    for fpa in (True, False):
        add(
            S(
                f"mixed_long_prompts_fpa_{'on' if fpa else 'off'}",
                "closed loop 8, prompts 100-1200 with a 256-token budget, 70-block cache",
                engine(num_gpu_blocks=70, max_num_batched_tokens=256, full_prompt_admission=fpa),
                closed(8),
                mixed(24, 8, prompt=(100, 1200), output=(1, 100), groups=2, group_prefix=(64, 512)),
                token_seed=8,
            )
        )
    add(
        S(
            "near_max_model_len",
            "requests that reach max_model_len exactly (prompt + output)",
            engine(num_gpu_blocks=12, max_num_batched_tokens=128),
            batch(),
            [req(0, 300, 52), req(1, 200, 152)],
        )
    )
    add(
        S(
            "mixed_seed9_small_budget",
            "random mix, 64-token budget, max_num_seqs 8",
            engine(num_gpu_blocks=50, max_num_batched_tokens=64, max_num_seqs=8),
            batch(),
            mixed(24, 9, prompt=(8, 300), output=(1, 80), groups=2),
            token_seed=9,
        )
    )
    add(
        S(
            "mixed_seed10_closed_c3_pc_off",
            "closed loop 3, random mix with groups, caching off",
            engine(num_gpu_blocks=32, enable_prefix_caching=False),
            closed(3),
            mixed(20, 10, prompt=(16, 500), output=(1, 200), groups=2),
            token_seed=10,
        )
    )

    # ---- held-out closed loop ----------------------------------------------
    # Recorded to check the simulator on closed-loop traces nobody tuned it on.
    # "ample": num_gpu_blocks - 1 >= the blocks the `concurrency` largest
    # requests need at full length (prompt + output), so nothing can be
    # preempted; "tight": the cache is well short of that and the recorded
    # trace has preemptions.
    add(
        S(
            "heldout_closed_c4_ample",
            "held-out closed loop 4, random mix, ample cache",
            engine(num_gpu_blocks=64),
            closed(4),
            mixed(16, 101),
            token_seed=101,
        )
    )
    add(
        S(
            "heldout_closed_c4_tight",
            "held-out closed loop 4, random mix with 2 prefix groups, 24-block cache",
            engine(num_gpu_blocks=24),
            closed(4),
            mixed(16, 102, groups=2),
            token_seed=102,
        )
    )
    add(
        S(
            "heldout_closed_c8_ample",
            "held-out closed loop 8, random mix with 2 prefix groups, ample cache",
            engine(num_gpu_blocks=128),
            closed(8),
            mixed(32, 103, groups=2),
            token_seed=103,
        )
    )
    add(
        S(
            "heldout_closed_c8_tight_threshold",
            "held-out closed loop 8, random mix, 48-block cache, long_prefill_token_threshold=64",
            engine(num_gpu_blocks=48, long_prefill_token_threshold=64),
            closed(8),
            mixed(32, 104),
            token_seed=104,
        )
    )
    add(
        S(
            "heldout_closed_c16_ample",
            "held-out closed loop 16, random mix with 3 prefix groups, ample cache",
            engine(num_gpu_blocks=160),
            closed(16),
            mixed(48, 105, prompt=(16, 300), output=(1, 80), groups=3),
            token_seed=105,
        )
    )
    add(
        S(
            "heldout_closed_c16_tight_fpa_off",
            "held-out closed loop 16, random mix with 2 prefix groups, 72-block cache, admission gate off",
            engine(num_gpu_blocks=72, full_prompt_admission=False),
            closed(16),
            mixed(48, 106, groups=2),
            token_seed=106,
        )
    )
    add(
        S(
            "heldout_closed_c32_ample_pc_off",
            "held-out closed loop 32, short random requests, max_num_seqs 32, ample cache, caching off",
            engine(num_gpu_blocks=144, max_num_seqs=32, enable_prefix_caching=False),
            closed(32),
            mixed(80, 107, prompt=(16, 120), output=(1, 32)),
            token_seed=107,
        )
    )
    add(
        S(
            "heldout_closed_c32_tight",
            "held-out closed loop 32, short random requests with 2 prefix groups, max_num_seqs 32, 80-block cache",
            engine(num_gpu_blocks=80, max_num_seqs=32),
            closed(32),
            mixed(96, 108, prompt=(16, 200), output=(1, 48), groups=2),
            token_seed=108,
        )
    )

    # ---- priority scheduling (--scheduling-policy priority) ---------------
    # The waiting queue is ordered by (priority, arrival), and a request that cannot get its blocks
    # preempts the running request of the largest (priority, arrival), which may be one already
    # scheduled in this step (its tokens go back to the budget).
    prio = "policy=priority: the waiting queue in (priority, arrival) order, the victim the running request of largest (priority, arrival)."
    add(
        S(
            "priority_batch_fits",
            "priority policy, 12 requests of 3 priorities in one batch, max_num_seqs 4, ample cache",
            engine(num_gpu_blocks=96, max_num_seqs=4, scheduling_policy="priority"),
            batch(),
            with_priorities(mixed(12, 201, output=(8, 80)), 201),
            token_seed=201,
            notes=prio,
        )
    )
    add(
        S(
            "priority_batch_overload",
            "priority policy, 16 requests of 3 priorities in one batch, 24-block cache: preemption by priority",
            engine(num_gpu_blocks=24, max_model_len=736, scheduling_policy="priority"),
            batch(),
            with_priorities(mixed(16, 202, prompt=(16, 300), output=(20, 200)), 202),
            token_seed=202,
            notes=prio,
        )
    )
    add(
        S(
            "priority_batch_overload_pc_off_fpa_off",
            "priority policy, 16 requests of 4 priorities, 24-block cache, caching and admission gate off",
            engine(
                num_gpu_blocks=24,
                max_model_len=736,
                enable_prefix_caching=False,
                full_prompt_admission=False,
                scheduling_policy="priority",
            ),
            batch(),
            with_priorities(mixed(16, 203, prompt=(16, 300), output=(20, 200)), 203, levels=4),
            token_seed=203,
            notes=prio,
        )
    )
    add(
        S(
            "priority_closed_c8_tight",
            "priority policy, closed loop 8, random mix with 2 prefix groups, 32-block cache",
            engine(num_gpu_blocks=32, scheduling_policy="priority"),
            closed(8),
            with_priorities(mixed(32, 204, groups=2), 204),
            token_seed=204,
            notes=prio,
        )
    )
    add(
        S(
            "priority_closed_c16_threshold",
            "priority policy, closed loop 16, random mix, 48-block cache, long_prefill_token_threshold=64",
            engine(num_gpu_blocks=48, long_prefill_token_threshold=64, scheduling_policy="priority"),
            closed(16),
            with_priorities(mixed(48, 205, prompt=(16, 300), output=(1, 120)), 205),
            token_seed=205,
            notes=prio,
        )
    )

    # ---- multi-LoRA (--enable-lora --max-loras N) --------------------------
    # A step serves at most max_loras adapters: a waiting request for another one is passed over
    # (requests behind it may be admitted); nothing is preempted for an adapter.
    lora = "enable_lora: each request's adapter in 'lora' (vLLM lora_int_id; none: the base model)."
    add(
        S(
            "lora_max_loras_1_batch",
            "multi-LoRA, max_loras 1, 12 requests over 3 adapters and the base model in one batch, ample cache",
            engine(num_gpu_blocks=96, max_loras=1),
            batch(),
            with_adapters(mixed(12, 301, output=(8, 80)), 301, adapters=3),
            token_seed=301,
            notes=lora,
        )
    )
    add(
        S(
            "lora_max_loras_2_closed_c8",
            "multi-LoRA, max_loras 2, closed loop 8 over 4 adapters and the base model, 40-block cache",
            engine(num_gpu_blocks=40, max_loras=2),
            closed(8),
            with_adapters(mixed(32, 302), 302, adapters=4),
            token_seed=302,
            notes=lora,
        )
    )
    add(
        S(
            "lora_max_loras_2_overload_pc_off",
            "multi-LoRA, max_loras 2, 16 requests over 3 adapters in one batch, 24-block cache, caching off",
            engine(num_gpu_blocks=24, max_model_len=736, enable_prefix_caching=False, max_loras=2),
            batch(),
            with_adapters(mixed(16, 303, prompt=(16, 300), output=(20, 200)), 303, adapters=3, base_share=0.0),
            token_seed=303,
            notes=lora,
        )
    )

    # ---- speculative decoding (--speculative-config, a draft model) --------
    # The draft model is the target itself, so under greedy sampling every draft is accepted: the
    # scheduling of drafts (budget, slots, the last tokens) is recorded without a random acceptance.
    spec = "speculative_config: method draft_model with the target model itself; greedy, so every draft is accepted."
    add(
        S(
            "spec_draft3_batch_fits",
            "speculative decoding, 3 drafts a step, 12 requests in one batch, ample cache",
            engine(num_gpu_blocks=96, num_speculative_tokens=3),
            batch(),
            mixed(12, 401, output=(1, 80)),
            token_seed=401,
            notes=spec,
        )
    )
    add(
        S(
            "spec_draft2_closed_c8_tight",
            "speculative decoding, 2 drafts a step, closed loop 8, random mix with 2 prefix groups, 32-block cache",
            engine(num_gpu_blocks=32, num_speculative_tokens=2),
            closed(8),
            mixed(32, 402, groups=2),
            token_seed=402,
            notes=spec,
        )
    )

    # ---- async scheduling (vLLM's AsyncScheduler, driven as the engine core's batch queue drives it) --
    # A request that ends in a step keeps its place and blocks through the next step's scheduling.
    asy = (
        "async scheduling: vLLM's AsyncScheduler, stepped as EngineCore.step_with_batch_queue steps it "
        "(the next step scheduled before the last one's outputs are in), the model's outputs made up "
        "(record.py, AsyncStepper); the CPU platform would force async scheduling off for a served model."
    )
    for name, description, eng, requests, seed in (
        (
            "async_max_seqs_binding",
            "async scheduling, max_num_seqs=4, 16 requests of mixed output lengths, big cache",
            engine(num_gpu_blocks=128, max_num_seqs=4, async_scheduling=True),
            mixed(16, 501, prompt=(16, 120), output=(1, 24)),
            501,
        ),
        (
            "async_mixed_groups",
            "async scheduling, 40 random requests with 3 prefix groups, max_num_seqs 16, 96-block cache",
            engine(num_gpu_blocks=96, async_scheduling=True),
            mixed(40, 502, groups=3),
            502,
        ),
        (
            "async_overload_pc_on",
            "async scheduling, 24 requests over a 40-block cache: preemption, recompute, prefix caching on",
            engine(num_gpu_blocks=40, async_scheduling=True),
            mixed(24, 503, prompt=(100, 400), output=(40, 200), groups=2),
            503,
        ),
        (
            "async_chunked_small_budget",
            "async scheduling, long prompts chunked by a 64-token budget, max_num_seqs 6, output 1-12",
            engine(num_gpu_blocks=80, max_num_batched_tokens=64, max_num_seqs=6, async_scheduling=True),
            mixed(14, 504, prompt=(40, 300), output=(1, 12)),
            504,
        ),
    ):
        add(S(name, description, eng, batch(), requests, token_seed=seed, notes=asy))
    return sc


if __name__ == "__main__":
    for s in all_scenarios():
        print(s["name"], len(s["requests"]), s["workload"]["mode"])
