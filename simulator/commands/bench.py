"""``servesim bench``: replay a ``vllm bench serve --save-result`` file and set servesim's figures beside
the benchmark's, metric by metric, in the layout the benchmark prints.

The file says how the requests were sent (``--max-concurrency``, ``--request-rate`` and
``--burstiness``), how many, and their lengths: each request's own with ``--save-detailed``
(``input_lens``, ``output_lens``), else the means of its totals. It does not say what served them: the
GPU, tensor parallelism and engine knobs come from ``--set`` (the model from the file's ``model_id``
where servesim knows it). The scenario the replay ran is written beside its results
(``bench_scenario.yaml``, with ``bench_lengths.csv``), to run again with ``servesim run`` or change."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import yaml

from simulator.commands.args import out_option, set_option
from simulator.errors import ConfigError
from simulator.outputs.bench_table import compare_rows, format_rows
from workloads.bench_client import bench_arrival

MAX_BYTES = 1 << 30  # a detailed result keeps every token's gap: hundreds of MB for a long run


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="replay a `vllm bench serve --save-result` file and set servesim's figures beside its own",
    )
    b.add_argument(
        "result", nargs="+", help="the benchmark's JSON results (--save-result; --save-detailed keeps each length)"
    )
    set_option(b, help="what served the requests, e.g. hardware.gpu=h200 (required: the file does not say)")
    out_option(
        b, "--out", default=None,
        help="results folder (default: results/bench/<result file name>; several files: a folder each under it)",
    )  # fmt: skip
    b.set_defaults(fn=main)


def load_result(path: Path) -> dict:
    """The benchmark's result, checked for what a replay needs; one line naming what is wrong."""
    if not path.is_file():
        raise ConfigError(f"bench: {path}: {'not a regular file' if path.exists() else 'no such file'}")
    if path.stat().st_size > MAX_BYTES:
        raise ConfigError(f"bench: {path}: {path.stat().st_size:,} bytes; servesim reads results up to {MAX_BYTES:,}")
    try:
        r = json.loads(path.read_text())
    except OSError as e:
        raise ConfigError(f"bench: {path}: cannot read it ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"bench: {path}: not a JSON file ({e})") from None
    if isinstance(r, list) and len(r) == 1:  # one result in a list, as some tools keep them
        r = r[0]
    if not isinstance(r, dict) or "completed" not in r:
        raise ConfigError(f"bench: {path}: not a `vllm bench serve --save-result` file (no 'completed')")
    for k in ("completed", "total_input_tokens", "total_output_tokens"):
        v = r.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < (1 if k == "completed" else 0):
            raise ConfigError(f"bench: {path}: {k} must be a number >= {1 if k == 'completed' else 0} (got {v!r})")
    return r


def requests_kept(r: dict) -> list[tuple[float, int, int]] | None:
    """Each completed request's (send time, prompt tokens, output tokens), in the file's order, where
    it kept them (--save-detailed); a failed request (an error, no output) is left out. The send times
    count from the first request's (0 for every request where the file has none)."""
    ins, outs = r.get("input_lens"), r.get("output_lens")
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs) or not ins:
        return None
    starts = r.get("start_times")
    times: list | None = None
    if isinstance(starts, list) and len(starts) == len(ins) and all(isinstance(t, (int, float)) for t in starts):
        times = starts
    errors = r.get("errors") if isinstance(r.get("errors"), list) and len(r["errors"]) == len(ins) else None
    kept = []
    for k, (i, o) in enumerate(zip(ins, outs)):
        if isinstance(i, int) and isinstance(o, int) and i > 0 and o > 0 and not (errors and errors[k]):
            kept.append((float(times[k]) if times is not None else 0.0, i, o))
    if len(kept) != int(r["completed"]):
        return None
    t0 = min(t for t, _, _ in kept)
    return [(t - t0, i, o) for t, i, o in kept]


def timed(kept: list[tuple[float, int, int]] | None) -> bool:
    """Whether the file kept when each request was sent (vLLM's ``start_times``)."""
    return bool(kept) and any(t > 0 for t, _, _ in kept or [])


def arrival_of(r: dict) -> dict:
    """How the file's requests were sent, as a scenario's ``workload.arrival``."""
    return bench_arrival(int(r["completed"]), r.get("request_rate"), r.get("max_concurrency"), r.get("burstiness"))


def load_label(r: dict, arrival: dict) -> str:
    """The load a result was measured at, as the table across results shows it."""
    if "rate" in arrival:
        return f"{arrival['rate']:g} req/s"
    return f"{arrival['concurrency']} in flight" if r.get("max_concurrency") else "all at once"


def scenario_data(r: dict, name: str, detailed: list[tuple[float, int, int]] | None, lengths_file: str) -> dict:
    """The scenario that sends the file's requests as the benchmark sent them."""
    n = int(r["completed"])
    workload: dict = {"arrival": arrival_of(r)}
    if detailed and workload["arrival"]["type"] == "closed_loop":
        workload.update(trace=lengths_file, trace_arrivals="closed_loop")  # each request's lengths, in order
    elif detailed and timed(detailed):  # open loop: each request when it was sent, with its lengths
        workload = {"trace": lengths_file, "trace_arrivals": "recorded"}
    elif detailed:  # open loop, no send times kept: the lengths drawn from the file's
        workload["prompt_tokens"] = {"dist": "empirical", "file": lengths_file, "column": "prompt_tokens"}
        workload["output_tokens"] = {"dist": "empirical", "file": lengths_file, "column": "output_tokens"}
    else:
        workload["prompt_tokens"] = {"dist": "fixed", "value": max(1, round(r["total_input_tokens"] / n))}
        workload["output_tokens"] = {"dist": "fixed", "value": max(1, round(r["total_output_tokens"] / n))}
    chat = "chat" in str(r.get("endpoint_type") or r.get("backend") or "")
    data: dict = {"name": name, "frontend": {"endpoint": "chat" if chat else "completions"}, "workload": workload}
    if r.get("model_id"):
        data["model"] = str(r["model_id"])
    data["run"] = {"num_requests": n, "duration_s": None, "warmup_s": 0, "seed": 0}
    return data


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import RESULTS, Outputs, Writing, check_folder, folder_name
    from simulator.scenario.config import apply_overrides

    apply_overrides({}, args.set)  # a malformed --set: said before anything is read
    given = {o.split("=", 1)[0].strip() for o in args.set}
    if not given & {"hardware.gpu", "hardware"}:
        raise ConfigError(
            "bench: the result does not say what served it; give --set hardware.gpu=... (and "
            "hardware.tensor_parallel_size, the engine's knobs as the server had them)"
        )
    paths = [Path(p) for p in args.result]
    if len(paths) == 1:
        out = Path(args.out) if args.out else RESULTS / "bench" / folder_name(paths[0].stem)
        check_folder(out, "--out")
        one = replay(paths[0], args.set, given, out)
        print(format_rows(one["rows"], f"{paths[0].name} against servesim"))
        print(one["how"])
        for line in one["more"]:
            print(line)
        kept = [f for f in BENCH_FILES if (out / f).is_file()]
        print(f"\nresults in {out}/ ({', '.join(kept)}, summary.json, requests.csv, steps.csv)")
        return 0
    # Several results (a benchmark at several loads): each in a folder of its own, one table across them.
    out = Path(args.out) if args.out else RESULTS / "bench"
    check_folder(out, "--out")
    names = _folders(paths)
    done, failed = [], 0
    with Writing(out, "--out"):
        top = Outputs(out, names, "--out", "bench")
        for path, name in zip(paths, names):
            try:
                done.append((path, replay(path, args.set, given, out / name, lock=False)))
            except ConfigError as e:  # one bad file does not stop the rest
                print(f"error: {e}", file=sys.stderr)
                failed += 1
        top.done([out / n for n in names if (out / n).is_dir()])
    if done:
        print(across_table(done))
        for _, one in done:
            for line in one["more"]:
                print(line)
        print(
            f"\nresults in {out}/<result>/: each file's full table in bench_compare.csv, its scenario in "
            "bench_scenario.yaml"
        )
    return 2 if failed and not done else (1 if failed else 0)


BENCH_FILES = ("bench_compare.csv", "bench_scenario.yaml", "bench_lengths.csv")


def _folders(paths: list[Path]) -> list[str]:
    """A results folder for each file: its name, numbered where two files share one."""
    from simulator.outputs.outdir import folder_name

    names = [folder_name(p.stem) for p in paths]
    return [f"{n}_{i + 1}" if names.count(n) > 1 else n for i, n in enumerate(names)]


def replay(path: Path, overrides: list[str], given: set[str], out: Path, lock: bool = True) -> dict:
    """Replay one result file into ``out``: its comparison rows, how it was replayed, and the lines to
    print under it (the band across hosts, the notes)."""
    from simulator.commands.run import band_lines, run_one
    from simulator.outputs.outdir import Writing, folder_name
    from simulator.outputs.writers import atomic_write_text

    r = load_result(path)
    if "model" not in given:
        if not r.get("model_id"):
            raise ConfigError(f"bench: {path} names no model (model_id); give --set model=...")
        from simulator.scenario.models import load_model

        try:
            load_model(str(r["model_id"]))
        except ConfigError:
            raise ConfigError(
                f"bench: {path}: its model_id {r['model_id']!r} is no built-in model, Hugging Face id of one or "
                "config.json here; give --set model=... (a built-in name or a config.json's path)"
            ) from None
    detailed = requests_kept(r)
    with Writing(out, "--out") if lock else contextlib.nullcontext():
        out.mkdir(parents=True, exist_ok=True)
        if detailed:
            csv = "".join(f"{t!r},{p},{o}\n" for t, p, o in detailed)
            atomic_write_text(out / "bench_lengths.csv", "arrival_time_s,prompt_tokens,output_tokens\n" + csv)
        else:
            (out / "bench_lengths.csv").unlink(missing_ok=True)  # an earlier replay's, not this one's
        data = scenario_data(r, folder_name(path.stem), detailed, "bench_lengths.csv")
        atomic_write_text(out / "bench_scenario.yaml", yaml.safe_dump(data, sort_keys=False))
        summary = run_one(str(out / "bench_scenario.yaml"), overrides, out)
        if "error" in summary:
            raise ConfigError(summary["error"])
        rows = compare_rows(r, summary)
        text = "\n".join(f"{k},{m!r},{'' if s is None else repr(s)}" for k, _, m, s, _ in rows)
        atomic_write_text(out / "bench_compare.csv", "metric,vllm_bench,servesim\n" + text + "\n")
    how = (
        ("each request's lengths and send time" if timed(detailed) else "each request's lengths")
        if detailed
        else "the mean lengths (no --save-detailed)"
    )
    return {
        "rows": rows,
        "load": load_label(r, arrival_of(r)),
        "how": f"replayed {int(r['completed'])} requests with {how}, on {summary['gpu']} x{summary['tensor_parallel_size']}",
        "more": band_lines([summary]) + [f"note: {n}" for n in summary.get("_notes", [])],
    }


# The figures the table across several results shows, one column pair each.
ACROSS = (("output_throughput", "out tok/s"), ("median_ttft_ms", "TTFT p50 ms"), ("median_tpot_ms", "TPOT p50 ms"))


def across_table(done: list[tuple[Path, dict]]) -> str:
    """One line per result file: its load, and each headline figure measured, servesim's and the error."""
    head = ["result", "load"] + [h for _, h in ACROSS for h in (h, "servesim", "error")]
    rows = []
    for path, one in done:
        by = {k: (m, s, e) for k, _, m, s, e in one["rows"]}
        cells = [path.name, one["load"]]
        for key, _ in ACROSS:
            m, s, e = by.get(key, (None, None, None))
            cells += [_num(m), _num(s), f"{e:+.1%}" if e is not None else "-"]
        rows.append(cells)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join(fmt(r) for r in [head, *rows])


def _num(v) -> str:
    return "-" if not isinstance(v, (int, float)) else f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"
