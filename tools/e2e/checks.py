"""Whether a recorded run sent what its plan asked (standard library only; lane.py runs it after each
run on the device, ingest.py again on every run it ingests).

A run passes when
- every planned request was sent and succeeded;
- the server counted, for every request, exactly the planned prompt tokens (the `usage` of its
  response, which `vllm bench serve` keeps as the request's `input_lens`) and produced the planned
  output tokens;
- the server's own counter of prompt tokens (`vllm:prompt_tokens_total`, read before and after the
  run) rose by the planned total;
- unless the plan shares prefixes, the server's prefix cache found nothing
  (`vllm:prefix_cache_hits_total` and `vllm:prompt_tokens_cached_total` did not rise), or, on a
  server whose retracted requests find their own prompts again (SGLang: a retracted request's
  prompt stays in its radix tree; ``sglang``), nothing unless it retracted some.

vLLM counts a request's prompt tokens and its prefix-cache hits once, when it is first scheduled or
first answered; a preempted request's second prefill is not counted again (vLLM 0.26,
`PrefixCacheStats.record`, `IterationStats.update_from_output`), so both totals are exact whatever
the cache did.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import statistics
from collections.abc import Sequence

PROMPT = "vllm:prompt_tokens_total"
HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
CACHED = "vllm:prompt_tokens_cached_total"
PREEMPTED = "vllm:num_preemptions_total"
COUNTERS = (PROMPT, HITS, QUERIES, CACHED, PREEMPTED)


def serves_sglang(lane: dict) -> bool:
    """Whether a plan's lane serves with SGLang (``"framework": "sglang"``) rather than vLLM."""
    return lane.get("framework") == "sglang"


def read_csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def planned_csv(rows: list[tuple[int, int, int, int, int]]) -> str:
    """planned.csv: a row per request (client, index: its place in that client's dataset; the prompt
    and output tokens the plan asks; the shared prefix's group, -1 for none)."""
    return "client,index,prompt_tokens,output_tokens,group\n" + "".join(
        f"{c},{i},{p},{o},{g}\n" for c, i, p, o, g in rows
    )


def _delta(counters: dict | None, name: str, absent: float | None = None) -> float | None:
    """How much a counter rose over the run; ``absent``: its value when the page lacked it (SGLang's
    labelled counters appear at their first increment)."""
    if not counters:
        return None
    a, b = (counters.get("before") or {}).get(name, absent), (counters.get("after") or {}).get(name, absent)
    return None if a is None or b is None else b - a


def counters_from_metrics(rows: list[dict]) -> dict | None:
    """Before and after from a run's metrics.csv (its first and last readable sample of each counter):
    for runs recorded before lane.py read the counters itself."""
    out: dict = {"before": {}, "after": {}}
    for name in COUNTERS:
        values = [float(r[name]) for r in rows if r.get(name) not in (None, "")]
        if values:
            out["before"][name], out["after"][name] = values[0], values[-1]
    return out if out["before"] else None


def _examples(bad: list[tuple[str, int, int]], what: str) -> str:
    shown = "; ".join(f"{key}: {want} planned, {got} recorded" for key, want, got in bad[:3])
    return f"{len(bad)} requests with {what} other than planned ({shown})"


def check_run(
    planned: list[dict],
    recorded: list[dict],
    counters: dict | None = None,
    shares_prefix: bool = False,
    sglang: bool = False,
) -> dict:
    """The run's check: planned rows (planned.csv), recorded rows (requests.csv: client, index,
    prompt_tokens, output_tokens, error), the server's counters ({before: {name: value}, after: ...}).
    ``sglang``: the server is SGLang's, whose labelled counters appear at their first increment (an
    absent one is zero) and whose retracted requests find their own prompts again (prefix-cache hits
    are allowed once it retracted one).
    Returns {ok, problems: [...], and the totals compared}."""
    problems: list[str] = []
    want = {(int(r["client"]), int(r["index"])): r for r in planned}
    got = {(int(r["client"]), int(r["index"])): r for r in recorded}
    missing = sorted(set(want) - set(got))
    if missing:
        problems.append(
            f"{len(missing)} of {len(want)} planned requests not recorded (first: client {missing[0][0]} #{missing[0][1]})"
        )
    extra = sorted(set(got) - set(want))
    if extra:
        problems.append(f"{len(extra)} recorded requests the plan does not have")
    failed = [(k, got[k].get("error", "")) for k in sorted(set(want) & set(got)) if (got[k].get("error") or "").strip()]
    if failed:
        problems.append(
            f"{len(failed)} requests failed (client {failed[0][0][0]} #{failed[0][0][1]}: {failed[0][1][:80]})"
        )
    bad_prompt, bad_output = [], []
    for k in sorted(set(want) & set(got)):
        if (got[k].get("error") or "").strip():
            continue
        key = f"client {k[0]} #{k[1]}"
        if int(float(got[k]["prompt_tokens"])) != int(want[k]["prompt_tokens"]):
            bad_prompt.append((key, int(want[k]["prompt_tokens"]), int(float(got[k]["prompt_tokens"]))))
        out = got[k].get("output_tokens")
        if out not in (None, "") and int(float(out)) != int(want[k]["output_tokens"]):
            bad_output.append((key, int(want[k]["output_tokens"]), int(float(out))))
    if bad_prompt:
        problems.append(_examples(bad_prompt, "a prompt length"))
    if bad_output:
        problems.append(_examples(bad_output, "an output length"))
    planned_prompt = sum(int(r["prompt_tokens"]) for r in planned)
    result: dict = {
        "requests": len(want),
        "planned_prompt_tokens": planned_prompt,
        "recorded_prompt_tokens": sum(int(float(r["prompt_tokens"])) for r in recorded if r.get("prompt_tokens")),
    }
    server = _delta(counters, PROMPT)
    if server is None:
        problems.append(f"the server's {PROMPT} was not read before and after the run")
    else:
        result["server_prompt_tokens"] = int(server)
        if int(server) != planned_prompt:
            problems.append(f"the server counted {int(server)} prompt tokens ({PROMPT}), the plan {planned_prompt}")
    absent = 0.0 if sglang and counters and counters.get("after") else None
    hits = {name: d for name in (HITS, CACHED) if (d := _delta(counters, name, absent)) is not None}
    for name, d in hits.items():
        result["server_" + name.removeprefix("vllm:").removesuffix("_total")] = int(d)
    retracted = _delta(counters, PREEMPTED, absent)
    if sglang and retracted:
        result["server_retracted"] = int(retracted)
    if not shares_prefix and not (sglang and retracted):
        if not hits:
            problems.append(f"the server's {HITS} was not read before and after the run")
        elif name_d := next(((n, d) for n, d in hits.items() if d), None):
            name, d = name_d
            q = _delta(counters, QUERIES)
            share = f", {d / q:.1%} of {int(q)} queried" if name == HITS and q else ""
            problems.append(
                f"the server's prefix cache found {int(d)} prompt tokens ({name}{share}): "
                "prompts shared prefixes the plan does not have"
            )
    result["ok"] = not problems
    result["problems"] = problems
    return result


# A pause in the engine's iteration log longer than this, and longer than STALL_RATIO times the steps
# either side of it, while requests were in flight, is a stall: the server stopped for something
# other than the step's own work, which servesim does not price. gpt-oss on vLLM 0.26 (MXFP4 on
# Hopper) stopped so for 1-5 s at a time in most runs of more than one wave: on one gpt-oss-20b
# server the same shapes run again stalled less and then not at all (11.0, 2.3 and 0 s), on a
# gpt-oss-120b server they still stalled after a warm-up run of each shape (3.5-13 s a run);
# data/e2e/README.md, "h200_gptoss_repeat_2026-11-29" and "h200_gptoss_uniform_2026-11-29".
STALL_S = 1.0
STALL_RATIO = 3.0


# steps.csv's t counts from a second before the run's start (lane.py), requests.csv's start_s from it.
STEPS_LEAD_S = 1.0
WAVE_S = 0.05  # requests sent this close together are one wave


def stalls(steps: list[dict], requests: Sequence[dict] = ()) -> list[tuple[float, float]]:
    """The stalls in a run's steps.csv rows (t, ctx_requests, gen_requests, ...): (when, seconds).

    Two kinds. A pause after a step that had requests in flight (the step before it busy), longer
    than STALL_RATIO times what the run's other steps of as many prompt tokens show (a 70B model's
    8k-token prefill step is a 1.1 s pause, and no stall). And, with
    the run's requests.csv rows (start_s, ttft_s, itl_sum_s, prompt_tokens), a pause that a request
    sent to an idle server (no request sent more than ``WAVE_S`` before it still in flight) waited
    through for its first token, from its send to the first step logged after it: longer than
    ``STALL_S`` and ``STALL_RATIO`` times the longest such wait of the run's other requests sent to an
    idle server with as many prompt tokens or more, and not in the same wave (a new shape's first
    prefill compiling: gpt-oss-120b's lone 2k and 4k prompts waited 3.4 and 2.0 s, the next ones 0.08
    and 0.11). A wait with no such request to compare it with is not called a stall."""
    t = [float(r["t"]) for r in steps]
    busy = [int(r["ctx_requests"]) + int(r["gen_requests"]) > 0 for r in steps]
    gaps = [b - a for a, b in itertools.pairwise(t)]  # gaps[i]: from step i to step i + 1
    prefill = [int(r.get("ctx_tokens") or 0) for r in steps]

    # the pause each step's line shows: the gap that ends at it, or the one before (under async
    # scheduling a step's line comes a step late)
    shown = [max((gaps[j] for j in (r - 1, r - 2) if 0 <= j < len(gaps)), default=0.0) for r in range(len(steps))]

    out = []
    for i, g in enumerate(gaps):
        around = [gaps[j] for j in (i - 1, i + 1) if 0 <= j < len(gaps)]
        if not (busy[i] and g > STALL_S and all(g > STALL_RATIO * x for x in around)):
            continue
        # a pause no longer than the run's other steps of as many prompt tokens show is a long
        # prefill (a 70B model's 8k-token step takes 1.1 s on an H200), not a stall
        tokens = max(prefill[i + 1 : i + 3])
        alike = [shown[r] for r in range(1, len(steps)) if r not in (i + 1, i + 2) and prefill[r] >= tokens > 0]
        if alike and g <= STALL_RATIO * statistics.median(alike):
            continue
        out.append((t[i + 1], g))
    if not t or not requests or "itl_sum_s" not in requests[0]:
        return out
    sent = [float(r["start_s"]) + STEPS_LEAD_S for r in requests]
    done = [x + float(r["ttft_s"]) + float(r["itl_sum_s"] or 0) for x, r in zip(sent, requests)]
    waits = []  # (the wave's send, the wait, the request's prompt tokens), of requests sent to an idle server
    for x, r in zip(sent, requests):
        if any(y < x - WAVE_S and d > x for y, d in zip(sent, done)):
            continue
        first = x + float(r["ttft_s"])
        k = bisect.bisect_right(t, x)
        end = min(t[k], first) if k < len(t) else first
        waits.append((x, end - x, int(r["prompt_tokens"])))
    seen: list[float] = []
    for x, g, n in waits:
        others = [w for y, w, m in waits if m >= n and abs(y - x) > WAVE_S]
        if g > STALL_S and others and g > STALL_RATIO * max(others) and all(abs(y - x) > WAVE_S for y in seen):
            seen.append(x)  # a wave's requests waited through the same pause
            out.append((x + g, g))
    return sorted(out)
