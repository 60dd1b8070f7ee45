"""Sweeps: a grid over any scenario fields, points in parallel, resumable, with a recommendation.

Each point is an ordinary run written to ``OUT/points/<slug>/``; a point whose directory already
holds a ``summary.json`` for the same resolved scenario is reused, so an interrupted sweep resumes
where it stopped. A point that fails is reported and recorded; the others finish.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from simulator.errors import ConfigError
from simulator.outputs.figures import share
from simulator.outputs.outdir import NAME_MAX, Outputs, Writing, check_folder, folder_name
from simulator.outputs.writers import atomic_write_text, write_csv
from simulator.planning.executor import Progress, check_executor, cores, run_tasks
from simulator.progress import compile_step
from simulator.scenario import yamlio
from simulator.scenario.config import apply_overrides, load_scenario_data, scenario_error, scenario_from_dict


def parse_param(text: str, flag: str = "--param") -> tuple[str, list]:
    """``engine.max_num_seqs=128,256`` -> ("engine.max_num_seqs", [128, 256]). Values are YAML, split
    at the commas outside brackets, braces and quotes, so a value may be a list or a mapping
    (``workload.arrival={type: poisson, rate: 5},{type: poisson, rate: 10}``)."""
    if "=" not in text:
        raise ConfigError(f"{flag} must look like section.key=v1,v2,... (got {text!r})")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"{flag} must look like section.key=v1,v2,... (got {text!r})")
    parts = _split_values(raw, f"{flag} {key}")
    if not any(v.strip() for v in parts):
        raise ConfigError(f"{flag} {key}: give at least one value (got {raw!r})")
    values = []
    for v in parts:
        if not v.strip():
            raise ConfigError(f"{flag} {key}: an empty value between commas; write null for the default (got {raw!r})")
        try:
            values.append(yamlio.load(v, f"{flag} {key}"))
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"{flag} {key}: {v.strip()!r} is not a YAML value ({problem})") from None
    return key, values


def _split_values(raw: str, where: str) -> list[str]:
    """``raw`` split at its commas outside brackets, braces and quotes."""
    cur: list[str]
    parts, cur, depth, quote = [], [], 0, ""
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth < 0:
                raise ConfigError(f"{where}: {ch!r} closes nothing (got {raw!r})")
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth or quote:
        what = f"a quote {quote}" if quote else "a bracket or brace"
        raise ConfigError(
            f"{where}: {what} left open; values are split at the commas outside brackets, braces and "
            f"quotes (got {raw!r})"
        )
    return parts + ["".join(cur)]


def parse_grid(params: list[str], overrides: list[str], flag: str, block: dict | None = None) -> dict[str, list]:
    """The swept fields and their values: the scenario's ``sweep:`` block (``block``), then ``params``
    (``--param``/``--search``). A field given twice, or also set by ``--set``, is an error rather
    than one silently winning; a field of the block given again on the command line replaces it."""
    from simulator.scenario.config import parse_override

    space: dict[str, list] = {}
    for k, v in (block or {}).items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"sweep.{k} must be a non-empty list of values (got {v!r})")
        space[k] = v
    given: set[str] = set()
    for text in params:
        k, vals = parse_param(text, flag)
        if k in given:
            raise ConfigError(f"{flag} {k} given twice; give all its values in one {flag} {k}=v1,v2,...")
        if k in space:
            print(f"sweep: {flag} {k} replaces the scenario's sweep.{k} values", file=sys.stderr)
        given.add(k)
        space[k] = vals
    for text in overrides:
        k, _ = parse_override(text)
        if k in space:
            raise ConfigError(f"--set {k}: the field is also swept ({flag} or sweep:); give it one way (got {text!r})")
    return space


def grid(params: dict[str, list]) -> list[dict]:
    keys = list(params)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(params[k] for k in keys))]


def check_fields(base: dict, space: dict[str, list], flag: str) -> None:
    """Every varied field must be one the scenario has: otherwise every point would fail alike, so
    say it once, before any work."""
    for k, vals in space.items():
        try:
            scenario_from_dict(apply_overrides(base, [f"{k}={json.dumps(vals[0])}"]))
        except ConfigError as e:
            if "unknown key" in str(e):
                raise ConfigError(f"{flag} {k}: {e}") from None


def slug(point: dict) -> str:
    """A point's name, and its folder's: ``max_num_seqs=256__router=score`` (one folder name, made
    safe; a long one cut, with a hash of the whole keeping it unique)."""
    parts = []
    for k, v in point.items():
        short = k.split(".")[-1]
        parts.append(f"{short}={v}")
    name = folder_name("__".join(parts).replace("/", "_").replace(" ", ""))
    if len(name) >= NAME_MAX:
        name = name[: NAME_MAX - 10] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


def _point_data(base: dict, point: dict) -> dict:
    data = apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in point.items()])
    data.pop("sweep", None)
    data["name"] = slug(point)
    return data


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """A hash of the simulator's code and built-in data (every file of the two packages)."""
    h = hashlib.sha256()
    for pkg in ("simulator", "workloads"):
        root = Path(__file__).resolve().parents[2] / pkg
        for f in sorted(root.rglob("*")):
            if f.is_file() and f.suffix in (".py", ".yaml", ".json") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def point_key(data: dict) -> str:
    """What decides a point's result: the scenario as run, the simulator's code, and the content of
    every file the scenario names (a trace, a model's config.json, a calibration, a length file)."""
    h = hashlib.sha256(yaml.safe_dump(data, sort_keys=True).encode())
    h.update(code_hash().encode())

    def files(v):
        if isinstance(v, dict):
            for x in v.values():
                yield from files(x)
        elif isinstance(v, list):
            for x in v:
                yield from files(x)
        elif isinstance(v, str) and len(v) < 4096 and Path(v).is_file():
            yield Path(v)

    for f in sorted(set(files(data))):
        h.update(str(f).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:24]


POINT_FILES = ("summary.json", "requests.csv", "steps.csv", "scenario.yaml", "kv_cache_usage.png", "throughput.png")


def _cached(out_dir: Path, key: str) -> tuple[dict | None, str]:
    """A finished point's summary if its directory holds a complete result for ``key`` (None
    otherwise), and why it cannot be reused ("" for a point never run)."""
    scen = out_dir / "scenario.yaml"
    if not scen.is_file():
        return None, ""
    if scen.read_text().splitlines()[:1] != [f"# servesim point {key}"]:
        return None, "computed from another scenario, code or input file"
    missing = [f for f in POINT_FILES if not (out_dir / f).is_file() or (out_dir / f).stat().st_size == 0]
    if missing:
        return None, f"damaged: {', '.join(missing)} missing or empty"
    try:
        summary = json.loads((out_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None, "damaged: summary.json unreadable"
    for f in ("requests.csv", "steps.csv"):
        with open(out_dir / f, "rb") as fh:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                return None, f"damaged: {f} truncated"
    if not isinstance(summary, dict) or "num_steps" not in summary:
        return None, "damaged: summary.json incomplete"
    return summary, ""


def run_point(task: tuple) -> dict:
    """Run one point (in a worker process), or reuse it when its directory holds a complete result
    of the same key (``point_key``). ``task``: (scenario data, folder), and optionally the (label,
    line) of the run's own progress bar (a day plan's policy; a sweep's points have one bar for
    all; None: none) and whether to run the point on the slowest and fastest catalog host too
    (``simulator.run.HostBand``, one after the other: its summary's ``host_band``; a point reused
    without one is run again). Never raises: errors come back as {'error': ...}."""
    from simulator.outputs.results import write_run
    from simulator.progress import labelled
    from simulator.run import HostBand, simulate

    data, out, *rest = task
    bar, band = (rest + [None, False])[:2]
    out_dir = Path(out)
    key = point_key(data)
    summary, why = _cached(out_dir, key)
    if summary is not None and band and "host_band" not in summary:
        wanted = HostBand(scenario_from_dict(data), serial=True)  # (its data was valid when it ran)
        if wanted.scenarios:
            summary, why = None, "run without its band across hosts"
        elif (b := wanted.result(summary)) is not None:
            summary = {**summary, "host_band": b}  # a named host's band needs no run
    if summary is not None:
        return {**summary, "cached": True}
    try:
        sc = scenario_from_dict(data)
        if bar:
            with labelled(*bar):
                result = simulate(sc, progress=True)
        else:
            result = simulate(sc)
        (out_dir / "scenario.yaml").unlink(missing_ok=True)  # no stale key beside a half-written point
        summary = write_run(result, data, out_dir, band=HostBand(sc, serial=True) if band else None)
        atomic_write_text(
            out_dir / "scenario.yaml", f"# servesim point {key}\n" + yaml.safe_dump(data, sort_keys=False)
        )
        return {**summary, "cached": False, "wall_time_s": result.wall_s, "recomputed": why}
    except ConfigError as e:
        return {"error": str(e)}
    except Exception as e:  # a broken point must not kill the sweep; report it in full
        return {"error": f"{type(e).__name__}: {e}"}


# What a user sets (the server: its engine, hardware, front-end, fleet); every other swept field
# (the workload, the run, the cost model, the targets) describes the situation it is set for.
CONTROLLED = ("engine", "hardware", "frontend", "cluster", "disaggregation")


def controlled(field: str) -> bool:
    """Whether the user sets ``field`` (a section of the server, or a field in one)."""
    return field.split(".")[0] in CONTROLLED


def recommend(df: pd.DataFrame, slo: bool) -> dict:
    """What to set, and why. Among the fields the user controls (``CONTROLLED``): the point with the
    most output throughput and no preemption (every point preempting: the most throughput); with an
    SLO, the most goodput too. Where the sweep also varies the situation (the workload's
    concurrency, say), the best setting for each situation; where it varies nothing the user
    controls, no setting, and what the sweep found instead: how far the load goes without preemption."""
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return {"text": "no point finished: nothing to recommend"}
    knobs = [c[len("param:") :] for c in _param_cols(df)]
    ctl = [k for k in knobs if controlled(k)]
    if not ctl:
        return _load_finding(ok, knobs)
    per_gpu = "gpus" in ok and ok["gpus"].nunique() > 1
    cond = [k for k in knobs if not controlled(k)]
    if cond:
        return _ranked(_per_situation(ok, ctl, cond, slo, per_gpu), per_gpu)
    best, text = _best(ok, ctl, len(ok), per_gpu)
    out: dict = {"best_no_preemption": {f"param:{k}": _plain(best[f"param:{k}"]) for k in ctl}, "text": text}
    if slo and "goodput" in ok:
        g = _top(ok, "goodput_per_gpu" if per_gpu else "goodput")
        out["best_goodput"] = {f"param:{k}": _plain(g[f"param:{k}"]) for k in ctl}
        out["text_goodput"] = f"{_point_str(g, ctl)}: the most goodput{_per(per_gpu)}, {_goodput(g, per_gpu)}"
        if "cost_usd" in ok and ok["cost_usd"].notna().any():
            out.update(_cheapest_within_slo(ok))
    return _ranked(out, per_gpu)


def sweep_title(first: str, s0: dict, knobs: list[str]) -> str:
    """What every point of a sweep ran: its first point's title (``first``: the model on its GPUs, or
    the fleet), less what the sweep varies (the model, the GPU, its tensor-parallel size, the fleet)."""
    sized = ("hardware.gpu", "hardware.tensor_parallel_size")
    if not any(k == "model" or k in sized or k.startswith("cluster.") for k in knobs):
        return first
    model = "the models swept" if "model" in knobs else s0["model"]
    return model if "hardware.gpu" in knobs else f"{model} on {s0['gpu']}"


def gpus_held(df: pd.DataFrame) -> pd.Series:
    """The GPUs each point's server holds: a fleet's GPU-hours over its run (an autoscaled fleet's
    mean), else one engine's tensor-parallel group."""
    gpus = pd.to_numeric(df["tensor_parallel_size"], errors="coerce") if "tensor_parallel_size" in df else None
    if "gpu_hours" in df and "simulated_time_s" in df:
        fleet = pd.to_numeric(df["gpu_hours"], errors="coerce") * 3600.0 / pd.to_numeric(df["simulated_time_s"])
        gpus = fleet if gpus is None else fleet.where(fleet.notna(), gpus)
    return gpus if gpus is not None else pd.Series(np.nan, index=df.index)


def _ranked(rec: dict, per_gpu: bool) -> dict:
    """``rec`` with the figure its picks were ranked by, when the points held different numbers of
    GPUs: per GPU, or a larger server would always win."""
    if per_gpu:
        rec["ranked_by"] = "output throughput per GPU (the points hold different numbers of GPUs)"
    return rec


def _per(per_gpu: bool) -> str:
    return " per GPU" if per_gpu else ""


def _tokens(row: pd.Series, per_gpu: bool) -> str:
    """A point's output throughput as a sentence gives it: per GPU (and in all, on how many) where
    the points weighed hold different numbers of GPUs."""
    if per_gpu:
        g = row["gpus"]
        n = f"{g:.0f} GPU{'' if g == 1 else 's'}" if abs(g - round(g)) < 1e-9 else f"{g:.1f} GPUs"
        return f"{row['output_throughput_per_gpu']:,.0f} tok/s per GPU, {row['output_throughput']:,.0f} on {n}"
    return f"{row['output_throughput']:,.0f} tok/s"


def _goodput(row: pd.Series, per_gpu: bool) -> str:
    per = f" ({row['goodput_per_gpu']:.2f} per GPU)" if per_gpu else ""
    return f"{row['goodput']:.2f} req/s{per}, {share(row['slo_attainment'])} of requests meet the SLO"


def _best(ok: pd.DataFrame, ctl: list[str], n: int, per_gpu: bool = False) -> tuple[pd.Series, str]:
    """The point of ``ok`` to recommend and a sentence saying why (``n``: the points weighed;
    ``per_gpu``: rank by output throughput per GPU, the points holding different numbers of GPUs)."""
    col = "output_throughput_per_gpu" if per_gpu else "output_throughput"
    calm = ok[ok["num_preemptions"] == 0]
    among = f"among the {n} points" if n > 2 else "of the two points" if n == 2 else "of the only point"
    if calm.empty:
        best = _top(ok, col)
        return best, (
            f"{_point_str(best, ctl)}: every point preempts; this one has the most output throughput{_per(per_gpu)} "
            f"{among} ({_tokens(best, per_gpu)}, {int(best['num_preemptions']):,} preemptions)"
            + _ungraphed_caveat(best)
        )
    best = _top(calm, col)
    text = (
        f"{_point_str(best, ctl)}: the most output throughput{_per(per_gpu)} with no preemption {among} "
        f"({_tokens(best, per_gpu)}, KV cache {best['kv_cache_usage_mean']:.0%} full on average)"
    )
    worse = ok[ok["num_preemptions"] > 0]
    if not worse.empty:
        w = _top(worse, "num_preemptions")
        loss = 1 - w[col] / best[col]
        if loss >= 0.005:
            verb = f"loses {loss:.0%} of throughput{_per(per_gpu)}"
        elif loss <= -0.005:
            verb = f"has {-loss:.0%} more throughput{_per(per_gpu)}"
        else:  # a rounded "-0%" would read as a change
            verb = "has the same throughput (within 0.5%)"
        text += f"; {_point_str(w, ctl)} preempts {int(w['num_preemptions']):,} times and {verb}"
    if per_gpu:  # a larger server buys latency: say what the shortest TPOT costs
        fast = _top(calm, "median_tpot_ms", lowest=True)
        if fast[col] < best[col] and fast["median_tpot_ms"] < best["median_tpot_ms"]:
            text += (
                f"; the shortest p50 TPOT is {_point_str(fast, ctl)}'s ({fast['median_tpot_ms']:.1f} ms against "
                f"{best['median_tpot_ms']:.1f}, at {fast[col]:,.0f} tok/s per GPU)"
            )
    return best, text + _ungraphed_caveat(best)


def _ungraphed_caveat(point: pd.Series) -> str:
    """A recommended point whose MoE decode steps run without CUDA graphs (``ungraphed_decode_steps``,
    simulator.outputs.notes): servesim prices them at about half their measured time."""
    from simulator.outputs.notes import UNGRAPHED_CLAIM

    share = point.get("ungraphed_decode_steps")
    if share is None or pd.isna(share):
        return ""
    return (
        f"; but {share:.0%} of its steps decode more requests than the largest CUDA graph, and "
        f"{UNGRAPHED_CLAIM} (its run's note): a larger CUDA-graph capture size keeps them graphed"
    )


def _per_situation(ok: pd.DataFrame, ctl: list[str], cond: list[str], slo: bool, per_gpu: bool = False) -> dict:
    """The best setting of the ``ctl`` fields for each combination of the ``cond`` fields."""
    cols = [f"param:{k}" for k in cond]
    picks = []
    for _, group in ok.groupby(cols, sort=False):
        best, _ = _best(group, ctl, len(group), per_gpu)
        picks.append(best)
    winners = [_point_str(b, ctl) for b in picks]
    what = ", ".join(cond)
    theirs = f"{what} {'is' if len(cond) == 1 else 'are'} the workload's, not a setting"
    if len(set(winners)) == 1:
        vals = [_plain(v) for v in ok[cols[0]]]
        span = (
            f"{min(vals):g} to {max(vals):g}"
            if len(cond) == 1 and all(isinstance(v, (int, float)) for v in vals)
            else f"{len(picks)} in all"
        )
        text = (
            f"{winners[0]} at every {what} swept ({span}): the most output throughput{_per(per_gpu)} "
            "with no preemption at each"
        )
    else:
        text = f"the best setting depends on {what}: " + "; ".join(
            f"at {_point_str(b, cond)}, {w} ({_tokens(b, per_gpu)}"
            + (f", {int(b['num_preemptions']):,} preemptions)" if b["num_preemptions"] else ")")
            for b, w in zip(picks, winners)
        )
        text += f"; each the most output throughput{_per(per_gpu)} with no preemption at its " + what
    out: dict = {
        "best_per_situation": [{c: _plain(b[c]) for c in _param_cols(ok)} for b in picks],
        "text": f"{text} ({theirs})",
    }
    if slo and "goodput" in ok:
        gs = [_top(group, "goodput_per_gpu" if per_gpu else "goodput") for _, group in ok.groupby(cols, sort=False)]
        out["text_goodput"] = "; ".join(
            f"at {_point_str(g, cond)}, {_point_str(g, ctl)}: goodput {g['goodput']:.2f} req/s"
            + (f" ({g['goodput_per_gpu']:.2f} per GPU)" if per_gpu else "")
            + ", "
            f"{share(g['slo_attainment'])} meet the SLO"
            for g in gs
        )
    return out


def _load_finding(ok: pd.DataFrame, knobs: list[str]) -> dict:
    """A sweep of the situation alone (the workload's concurrency, say): no setting to recommend;
    how far the load goes without preemption, and what the next step costs."""
    fields = ", ".join(knobs)
    head = f"{fields} {'is' if len(knobs) == 1 else 'are'} the workload's, not a server setting"
    calm = ok[ok["num_preemptions"] == 0]
    if calm.empty:
        best = _top(ok, "output_throughput")
        return {
            "label": "nothing to recommend",
            "text": f"{head}; every point preempts, the most throughput at {_point_str(best, knobs)} "
            f"({best['output_throughput']:,.0f} tok/s)",
        }
    top = _top(calm, "output_throughput")
    text = (
        f"{head}; the most output throughput with no preemption is at {_point_str(top, knobs)} "
        f"({top['output_throughput']:,.0f} tok/s, KV cache {top['kv_cache_usage_mean']:.0%} full on average)"
    )
    worse = ok[ok["num_preemptions"] > 0]
    if not worse.empty:
        w = _top(worse, "num_preemptions", lowest=True)
        change = w["output_throughput"] / top["output_throughput"] - 1
        how = "the same throughput (within 0.5%)" if abs(change) < 0.005 else f"{change:+.0%} throughput"
        text += f"; preemption starts by {_point_str(w, knobs)} ({int(w['num_preemptions']):,} preemptions, {how})"
    return {
        "label": "nothing to recommend",
        "highest_without_preemption": {c: _plain(top[c]) for c in _param_cols(ok)},
        "text": text,
    }


def _top(df: pd.DataFrame, col: str, lowest: bool = False) -> pd.Series:
    """The first row of ``df`` with the most (``lowest``: the least) ``col``."""
    v = df[col].to_numpy(dtype=float)
    return df.iloc[int(np.argmin(v) if lowest else np.argmax(v))]


# A fleet whose share of requests within the SLO is this close to the best point's counts as
# meeting it as well (sampling noise between points is of this order on a day's run).
SLO_SLACK = 0.005


def _cheapest_within_slo(ok: pd.DataFrame) -> dict:
    """Fleets (points with a cost): the cheapest whose SLO attainment is within SLO_SLACK of the best."""
    priced = ok[ok["cost_usd"].notna()]
    top = priced["slo_attainment"].max()
    good = priced[priced["slo_attainment"] >= top - SLO_SLACK]
    c = good.loc[good["cost_usd"].idxmin()]
    b = priced.loc[priced["slo_attainment"].idxmax()]
    text = (
        f"{_point_str(c)}: ${c['cost_usd']:,.2f} ({c['gpu_hours']:,.1f} GPU-hours), "
        f"{share(c['slo_attainment'], 2)} of requests meet the SLO"
    )
    if b.name != c.name and b["cost_usd"] > c["cost_usd"]:
        text += (
            f"; the best attainment, {share(b['slo_attainment'], 2)} at {_point_str(b)}, costs ${b['cost_usd']:,.2f}"
        )
    return {"best_cost": {k: _plain(c[k]) for k in _param_cols(ok)}, "text_cost": text}


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _param_cols(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if c.startswith("param:")]


def _point_str(row, knobs: list[str] | None = None) -> str:
    """A point's values of ``knobs`` (all its swept fields by default): ``engine.max_num_seqs=512``."""
    return ", ".join(
        f"{c[6:]}={_plain(row[c])}" for c in row.index if c.startswith("param:") and (knobs is None or c[6:] in knobs)
    )


def run_sweep(
    path: str | None,
    params: list[str],
    overrides: list[str],
    out: Path,
    jobs: int,
    executor: str = "local",
    address: str | None = None,
    band: bool = False,
) -> int:
    check_executor(executor)
    base = load_scenario_data(path, overrides)
    if base.get("sweep") is not None and not isinstance(base["sweep"], dict):
        raise ConfigError(f"sweep must be a mapping of field path -> list of values (got {base['sweep']!r})")
    grid_spec = parse_grid(params, overrides, "--param", base.get("sweep"))
    if not grid_spec:
        raise ConfigError("sweep: nothing to sweep; give --param field=v1,v2,... or a sweep: block in the scenario")
    base_clean = {k: v for k, v in base.items() if k != "sweep"}
    try:
        scenario_from_dict(base_clean)  # the base itself must be valid before any work starts
    except ConfigError as e:
        raise scenario_error(path, e, overrides) from None
    check_fields(base_clean, grid_spec, "--param")
    points = grid(grid_spec)
    check_folder(out, "--out")
    outputs = Outputs(out, [*SWEEP_FILES, "points"], "--out", "sweep")
    with Writing(out, "--out"):
        return _sweep(points, grid_spec, base_clean, out, outputs, jobs, executor, address, band)


SWEEP_FILES = (
    "sweep.csv",
    "recommendation.json",
    "kv_cache_usage.png",
    "throughput.png",
    "metrics_vs_knob.png",
    "spec_decode_speedup.png",  # (feature sweeps: outputs.plots.feature_plots)
    "kv_offload.png",
)


def _sweep(
    points: list[dict],
    grid_spec: dict,
    base_clean: dict,
    out: Path,
    outputs,
    jobs: int,
    executor: str,
    address: str | None,
    band: bool = False,
) -> int:
    """Run (or reuse) every point and write the sweep's files; ``out`` is locked and checked.
    ``band``: every point on the slowest and fastest catalog host too (``run_point``)."""
    datas = [_point_data(base_clean, pt) for pt in points]
    dirs = [out / "points" / slug(pt) for pt in points]
    results: list[dict | None] = [None] * len(points)
    t0 = time.perf_counter()
    n_workers = max(1, min(jobs or cores(), len(points)))
    where = f"on {n_workers} processes" if executor == "local" else f"on Ray ({address or 'a local cluster'})"
    print(f"sweep: {len(points)} points over {', '.join(grid_spec)} {where} -> {out}", flush=True)
    interrupted = False
    compile_step()  # once, here: the workers then find it compiled
    bar = Progress(len(points), "sweep")
    tasks = run_tasks(run_point, [(d, str(o), None, band) for d, o in zip(datas, dirs)], jobs, executor, address)
    r: dict | None  # a point's result (None: not run)
    try:
        for done_n, (i, r) in enumerate(tasks, 1):
            results[i] = r
            if "error" in r:
                state = "FAILED: " + r["error"]
            elif r.get("cached"):
                state = "cached"
            else:
                state = f"{r['wall_time_s']:.1f} s" + (
                    f" (recomputed, {r['recomputed']})" if r.get("recomputed") else ""
                )
            bar.line(f"[{done_n}/{len(points)}] {slug(points[i])}: {state}")
            bar.done("error" in r)
    except KeyboardInterrupt:
        interrupted = True
        tasks.close()
        print("interrupted: keeping the finished points; run the same command again to resume", file=sys.stderr)
    finally:
        bar.close()

    if interrupted:  # points finished by an earlier run and not reached by this one are kept too
        for i, r in enumerate(results):
            if r is None:
                kept, _ = _cached(dirs[i], point_key(datas[i]))
                if kept is not None:
                    results[i] = {**kept, "cached": True}
    df = pd.DataFrame([_row(pt, r) for pt, r in zip(points, results)])
    if "output_throughput" in df:  # per GPU, to compare servers of different sizes
        df["gpus"] = gpus_held(df)
        df["output_throughput_per_gpu"] = df["output_throughput"] / df["gpus"]
        if "goodput" in df:
            df["goodput_per_gpu"] = df["goodput"] / df["gpus"]
    has_slo = base_clean.get("slo") is not None
    n_ok = sum(1 for r in results if r is not None and "error" not in r)
    n_fail = sum(1 for r in results if r is not None and "error" in r)
    n_left = sum(1 for r in results if r is None)
    rec = recommend(df, has_slo)
    if has_slo and isinstance(base_clean["slo"], dict) and not any(k.startswith("slo") for k in grid_spec):
        targets = {k: v for k, v in base_clean["slo"].items() if v is not None}
        if targets:  # the targets the SLO pick met, for the plot's lines
            rec["slo_targets"] = targets
    if n_ok and n_ok < len(points):  # a recommendation from part of the grid says so
        why = ", ".join(
            part
            for part in (
                f"{n_fail} failed" if n_fail else "",
                f"{n_left} not run ({'interrupted' if interrupted else 'not reached'})" if n_left else "",
            )
            if part
        )
        rec["points_finished"], rec["points"] = n_ok, len(points)
        for k in ("text", "text_goodput", "text_cost"):
            if k in rec:
                rec[k] += f" (from the {n_ok} of {len(points)} points that finished; {why})"
    _host_band(rec, df, datas, points, results)
    written = write_sweep_outputs(out, df, list(grid_spec), rec)
    removed = outputs.done([*written, out / "points"])
    if removed:
        print(f"removed what the earlier run in {out}/ wrote and this one did not: {', '.join(removed)}")
    print(f"\n{rec.get('label', 'recommended')}: {rec['text']}")
    if "text_goodput" in rec:
        print(f"with the SLO: {rec['text_goodput']}")
    if "text_hosts" in rec:
        print(f"{'band' if rec['host_band'].get('named') else 'across hosts'}: {rec['text_hosts']}")
    if "text_every_host" in rec:
        print(f"within the SLO on every host: {rec['text_every_host']}")
    if "text_cost" in rec:
        print(f"cheapest within the SLO: {rec['text_cost']}")
    left = f", {n_left} not run" if n_left else ""
    print(
        f"\n{n_ok} of {len(points)} points ok, {n_fail} failed{left}, {time.perf_counter() - t0:.1f} s; "
        f"wrote {out}/{', '.join(f.name for f in written)}"
    )
    if interrupted:
        return 130
    return 1 if n_fail else 0


def _row(pt: dict, r: dict | None) -> dict:
    """A point's row of sweep.csv: its swept values, its status, and its summary's figures. A fleet's
    per-replica summaries stay in the point's own summary.json; a feature's figures (kv_offload, lora,
    spec_decode) get a column each (kv_offload.host_hit_rate); its band across hosts (``--band``) two
    a figure (band.output_throughput.lo and .hi)."""
    from simulator.run import BAND_METRICS

    row: dict = {f"param:{k}": v for k, v in pt.items()}
    if r is None:
        row["status"] = "not run"
    elif "error" in r:
        row.update(status="failed", error=r["error"])
    else:
        row["status"] = "ok"
        for k, v in r.items():
            if k in ("cached", "wall_time_s", "recomputed", "replicas"):
                continue
            if k == "host_band":
                row.update(
                    {f"band.{m}.{end}": v[m][j] for m in BAND_METRICS if m in v for j, end in enumerate(("lo", "hi"))}
                )
            elif isinstance(v, dict):
                row.update({f"{k}.{kk}": vv for kk, vv in v.items()})
            else:
                row[k] = v
    return row


def _host_band(rec: dict, df: pd.DataFrame, datas: list[dict], points: list[dict], results: list) -> None:
    """The recommended point again on the slowest and fastest catalog host (``simulator.run.HostBand``;
    its point's own band where the sweep ran every point's, ``--band``), when the sweep names no host:
    how wide its figures are, and, with an SLO, whether it still holds on the slowest host. On a named
    host: its figures widened by servesim's own error given the host."""
    from simulator.run import BAND_METRICS, HostBand, band_basis, band_text
    from simulator.scenario.config import scenario_from_dict

    pick = rec.get("best_goodput") or rec.get("best_no_preemption")
    if not pick:
        return
    at = [i for i, pt in enumerate(points) if all(_plain(pt[k[len("param:") :]]) == v for k, v in pick.items())]
    if not at or df.iloc[at[0]]["status"] != "ok":
        return
    sc = scenario_from_dict(datas[at[0]])
    row = df.iloc[at[0]]
    b = (results[at[0]] or {}).get("host_band")
    every = b is not None  # ``--band``: every point has its own
    if b is None:
        band = HostBand(sc)
        if not band.scenarios and band.named is None:
            return
        b = band.result({m: _plain(row[m]) for m in BAND_METRICS if m in row})
    if b is None:  # a run of the band failed: the recommendation stands without it
        return
    rec["host_band"] = b
    text = f"{_point_str(row)} gives {band_text(b)} {band_basis(b)}"
    if b.get("named"):  # one host: no slowest host to check the SLO on
        rec["text_hosts"] = text + ("" if every else " (--band gives every point its band)")
        return
    targets = _slo_targets(sc)
    misses = False
    for key, what in SLO_METRICS:
        slowest = _on_slowest_host(b, key)
        if key in targets and slowest is not None:
            misses = misses or slowest > targets[key]
            text += (
                f"; its {what} target ({targets[key]:g} ms) holds on the slowest host too"
                if slowest <= targets[key]
                else f"; on the slowest host its {what} ({slowest:,.0f} ms) misses the {targets[key]:g} ms target: "
                "it holds only on a faster host"
            )
    if misses and every and "best_goodput" in rec:
        rec["text_every_host"] = _every_host_pick(rec, df, results, targets)
    more = (
        ""
        if every
        else "; --band runs every point on each host and names the setting that holds on all of them"
        if misses
        else "; --band gives every point its band"
    )
    rec["text_hosts"] = f"{text} (set hardware.host to narrow it{more})"


# The SLO's targets a band is checked against on the slowest host (its p99s are the hosts' spread).
SLO_METRICS = (("p99_tpot_ms", "p99 TPOT"), ("p99_ttft_ms", "p99 TTFT"))


def _on_slowest_host(band: dict | None, key: str) -> float | None:
    """A band's figure on the slowest catalog host (the latency's top across the hosts), if it has one."""
    return ((band or {}).get("on_hosts") or {}).get(key, [None, None])[1]


def _slo_targets(sc) -> dict[str, float]:
    """The scenario's latency targets that are set: {metric: ms}."""
    return {k: float(t) for k, _ in SLO_METRICS if sc.slo is not None and (t := getattr(sc.slo, k, None))}


def _every_host_pick(rec: dict, df: pd.DataFrame, results: list, targets: dict[str, float]) -> str:
    """Where the SLO's pick misses its targets on the slowest catalog host (``--band``: every point
    ran on each host): the point with the most goodput on the median host among those whose targets
    hold on every host, kept as ``best_every_host``; a sentence saying so."""
    held = [
        i
        for i, r in enumerate(results)
        if r is not None
        and "error" not in r
        and df.iloc[i]["status"] == "ok"
        and all((hi := _on_slowest_host(r.get("host_band"), k)) is not None and hi <= t for k, t in targets.items())
    ]
    if not held or "goodput" not in df:
        return "no point swept meets the targets on the slowest catalog host"
    per_gpu = "ranked_by" in rec  # ranked per GPU, as ``recommend`` ranked the SLO's pick
    good = df["goodput_per_gpu" if per_gpu else "goodput"].to_numpy(dtype=float)
    i = max(held, key=lambda j: good[j])  # the first of the most, as ``_top`` picks
    g, r = df.iloc[i], results[i]
    ctl = [c[len("param:") :] for c in rec["best_goodput"]]
    rec["best_every_host"] = {f"param:{k}": _plain(g[f"param:{k}"]) for k in ctl}
    worst = ", ".join(
        f"{what} at most {_on_slowest_host(r['host_band'], k):,.0f} ms" for k, what in SLO_METRICS if k in targets
    )
    return (
        f"{_point_str(g, ctl)}, the most goodput of the points that meet the targets on the slowest catalog "
        f"host too ({worst}; goodput {good[i]:.2f} req/s{_per(per_gpu)} on the median host)"
    )


def write_sweep_outputs(out: Path, df: pd.DataFrame, knobs: list[str], rec: dict) -> list[Path]:
    """sweep.csv, recommendation.json and, when some point finished, the overlaid and per-knob
    plots (from the points' own folders); returns the files written."""
    from simulator.outputs.plots import (
        feature_plots,
        plot_kv_offload,
        plot_kv_usage,
        plot_spec_speedup,
        plot_sweep_metrics,
        plot_throughput,
    )
    from simulator.outputs.results import load_run, overlay_series, run_title

    write_csv(df, out / "sweep.csv")
    atomic_write_text(out / "recommendation.json", json.dumps(rec, indent=2) + "\n")
    written = [out / "sweep.csv", out / "recommendation.json"]
    ok = df[df["status"] == "ok"]
    if ok.empty:
        return written
    points = [{k: _plain(row[f"param:{k}"]) for k in knobs} for _, row in ok.iterrows()]
    runs = [load_run(out / "points" / slug(pt)) for pt in points]
    series = [(slug(pt), overlay_series(st, float(s["simulated_time_s"]))) for pt, (s, st) in zip(points, runs)]
    s0 = runs[0][0]
    title = sweep_title(run_title(s0), s0, knobs)
    warm = float(s0["simulated_time_s"]) - float(s0["duration_s"])
    end = max(float(s["simulated_time_s"]) for s, _ in runs)
    plot_kv_usage(series, out / "kv_cache_usage.png", f"KV-cache usage: {title}", warm, end)
    plot_throughput(series, out / "throughput.png", f"Output throughput: {title}", warm, end)
    plot_sweep_metrics(ok, knobs, out / "metrics_vs_knob.png", title, rec)
    written += [out / "kv_cache_usage.png", out / "throughput.png", out / "metrics_vs_knob.png"]
    for name in feature_plots(knobs, ok):
        if name == "spec_decode_speedup.png":
            plot_spec_speedup(ok, knobs, out / name, title)
        else:
            plot_kv_offload(ok, out / name, title)
        written.append(out / name)
    return written


def is_sweep(out: Path) -> bool:
    """Whether ``out`` holds a finished sweep (its table and recommendation)."""
    return (out / "sweep.csv").is_file() and (out / "recommendation.json").is_file()


def redraw_sweep(out: Path) -> list[Path]:
    """Redraw a finished sweep's plots from sweep.csv, recommendation.json and its points."""
    df = pd.read_csv(out / "sweep.csv")
    knobs = [c[len("param:") :] for c in df.columns if c.startswith("param:")]
    rec = json.loads((out / "recommendation.json").read_text())
    return [f for f in write_sweep_outputs(out, df, knobs, rec) if f.suffix == ".png"]
