"""Sanity checks on recorded parity fixtures (plain Python, no vLLM needed).

    python tools/parity/check_fixtures.py [FIXTURE_DIR]

Checks, per scenario: every request is new exactly once and finishes exactly
once; tokens scheduled per request add up to prompt + output - 1 plus whatever
was recomputed after preemption; generated tokens add up to the outputs;
kv_usage == 1 - num_free_blocks / (num_gpu_blocks - 1); budgets and
max_num_seqs are respected; closed-loop traces never run more than
`concurrency` requests at once.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent.parent / "simulator" / "data" / "parity"


def pairs(s: str) -> list[tuple[str, int]]:
    out = []
    for item in s.split():
        k, v = item.rsplit(":", 1)
        out.append((k, int(v)))
    return out


def check(json_path: Path) -> list[str]:
    errs: list[str] = []
    sc = json.loads(json_path.read_text())
    with open(json_path.with_suffix(".csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    eng = sc["engine"]
    reqs = {r["id"]: r for r in sc["requests"]}
    n_blocks = eng["num_gpu_blocks"]
    if sc["initial_free_blocks"] != n_blocks - 1:
        errs.append(f"initial_free_blocks {sc['initial_free_blocks']} != {n_blocks - 1}")
    new_c: Counter[str] = Counter()
    fin_c: Counter[str] = Counter()
    sched_tok: dict[str, int] = defaultdict(int)
    generated = 0
    active = 0
    for i, row in enumerate(rows):
        if int(row["step"]) != i:
            errs.append(f"row {i}: step {row['step']}")
        sched = pairs(row["scheduled"])
        if sum(n for _, n in sched) != int(row["num_scheduled_tokens"]):
            errs.append(f"step {i}: num_scheduled_tokens mismatch")
        if int(row["num_scheduled_tokens"]) > eng["max_num_batched_tokens"]:
            errs.append(f"step {i}: token budget exceeded")
        if int(row["num_running"]) > eng["max_num_seqs"]:
            errs.append(f"step {i}: max_num_seqs exceeded")
        for rid, n in sched:
            sched_tok[rid] += n
        for rid in row["new"].split():
            new_c[rid] += 1
        for rid, _hit in pairs(row["prefix_hits"]):
            if rid in row["resumed"].split():
                # a resumed request recomputes everything it had, minus hits
                pass
        for rid in row["finished"].split():
            fin_c[rid] += 1
        generated += int(row["num_generated"])
        free = int(row["num_free_blocks"])
        usage = 1.0 - free / (n_blocks - 1)
        if abs(usage - float(row["kv_usage"])) > 1e-12:
            errs.append(f"step {i}: kv_usage {row['kv_usage']} != 1 - free/(N-1) = {usage}")
        active += len(row["new"].split())
        if sc["workload"]["mode"] == "closed_loop" and active > sc["workload"]["concurrency"]:
            errs.append(f"step {i}: more than concurrency requests active")
        active -= len(row["finished"].split())
    for rid in reqs:
        if new_c[rid] != 1:
            errs.append(f"request {rid}: new {new_c[rid]} times")
        if fin_c[rid] != 1:
            errs.append(f"request {rid}: finished {fin_c[rid]} times")
    # scheduled tokens: prompt + output - 1 (the last sampled token is never fed
    # back) minus prefix hits plus recomputation after preemption; just check
    # the lower bound without preemptions and hits.
    total_out = sum(r["output_len"] for r in reqs.values())
    if generated != total_out:
        errs.append(f"generated {generated} != sum(output_len) {total_out}")
    any_pre = any(r["preempted"] for r in rows)
    any_hit = any(h for r in rows for _, h in pairs(r["prefix_hits"]) if h)
    # With speculative decoding a request's last step may carry drafts past its last output token
    # (verified, then dropped): at most num_speculative_tokens more.
    spare = (eng.get("speculative_config") or {}).get("num_speculative_tokens", 0)
    if not any_pre and not any_hit:
        for rid, r in reqs.items():
            want = r["prompt_len"] + r["output_len"] - 1
            if not want <= sched_tok[rid] <= want + spare:
                errs.append(f"request {rid}: scheduled {sched_tok[rid]} tokens, want {want}")
    return errs


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    d = Path(argv[0]) if argv else DEFAULT
    bad = 0
    files = sorted(d.glob("*.json"))
    for jp in files:
        if not jp.with_suffix(".csv").exists():
            print(f"{jp.stem}: no csv")
            bad += 1
            continue
        errs = check(jp)
        if errs:
            bad += 1
            print(f"{jp.stem}: {len(errs)} problem(s)")
            for e in errs[:10]:
                print("   ", e)
    print(f"{len(files) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
