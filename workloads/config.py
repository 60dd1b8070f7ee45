"""The ``workload:`` section of a scenario: typed and documented like the rest of the config.

The generic loader (``simulator.scenario.config.build``) checks types and bounds field by field. What it cannot
check (schedules of (time, value) points, client classes, files on disk, combinations of fields) is
checked here, in ``WorkloadConfig.__post_init__``, with the same one-line ``ConfigError`` style naming
the field path, the rule and the value. See docs/workloads.md.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Union, cast

from simulator.errors import ConfigError
from simulator.scenario.fields import F, build

PresetName = Literal["chat", "summarisation", "code_completion", "long_context_rag"]


@dataclass(frozen=True)
class ArrivalConfig:
    type: Literal["closed_loop", "poisson", "gamma", "constant", "time_varying", "diurnal"] = F(
        "closed_loop",
        "closed loop (fixed or stepped concurrency), or open loop: Poisson, gamma (bursty), constant rate, time-varying Poisson rate, a day's Poisson rate (diurnal)",
    )
    concurrency: int = F(
        64,
        "closed loop: requests in flight (each client sends its next request when its previous one ends)",
        "requests",
        ge=1,
        only={"type": ("closed_loop",)},
    )
    think_time_s: float = F(
        0.0,
        "closed loop: pause between a response and the client's next request",
        "s",
        ge=0.0,
        only={"type": ("closed_loop",)},
    )
    think_time_dist: Literal["fixed", "exponential"] = F(
        "fixed",
        "closed loop: think time is exactly think_time_s, or exponential with that mean",
        only={"type": ("closed_loop",)},
    )
    ramp_up_s: float = F(
        0.0,
        "closed loop: clients start evenly spread over this time (0: all at once)",
        "s",
        ge=0.0,
        only={"type": ("closed_loop",)},
    )
    client_latency_s: float = F(
        0.0,
        "closed loop: from a response's end to the client's next request reaching the engine (network, client; 0: it makes the engine's very next step)",
        "s",
        ge=0.0,
        only={"type": ("closed_loop",)},
    )
    rate: float = F(
        1.0,
        "poisson, gamma, constant: mean arrival rate; diurnal: the day's mean",
        "requests/s",
        gt=0.0,
        only={"type": ("poisson", "gamma", "constant", "diurnal")},
    )
    peak_to_trough: float = F(
        3.0,
        "diurnal: the day's highest rate over its lowest (a cosine over 24 h)",
        ge=1.0,
        only={"type": ("diurnal",)},
    )
    peak_hour: float = F(
        14.0,
        "diurnal: when the rate is highest (hours after the run's start)",
        "h",
        ge=0.0,
        lt=24.0,
        only={"type": ("diurnal",)},
    )
    cv: float = F(
        1.0,
        "gamma: coefficient of variation of inter-arrival gaps (1: Poisson, > 1: burstier)",
        gt=0.0,
        le=100.0,  # (a gap's shape 1/cv^2 of 1e-4: burstier draws are all zero or past any run)
        only={"type": ("gamma",)},
    )
    schedule: Union[dict, str, None] = F(
        None,
        "time_varying: {t_s: rate} points; closed_loop: {t_s: concurrency} steps (extra clients start, surplus ones stop after their current request); also 't:v, t:v'",
        only={"type": ("time_varying", "closed_loop")},
    )
    interpolation: Literal["step", "linear"] = F(
        "step",
        "time_varying: rate is piecewise constant between points, or a linear ramp between them",
        only={"type": ("time_varying",)},
    )


@dataclass(frozen=True)
class LengthConfig:
    dist: Literal["fixed", "uniform", "lognormal", "normal", "zipf", "empirical"] = F(
        "fixed", "length distribution (samples are rounded and clipped to [min, max])"
    )
    value: int = F(512, "fixed: the length", "tokens", ge=1, only={"dist": ("fixed",)})
    mean: float = F(
        512.0, "lognormal, normal: mean of the distribution", "tokens", gt=0.0, only={"dist": ("lognormal", "normal")}
    )
    sigma: float = F(
        0.5, "lognormal: sigma of the underlying normal", gt=0.0, le=10.0, only={"dist": ("lognormal",)}
    )  # (at 10 the median is e^-50 of the mean: wider is not a length distribution)
    std: float = F(128.0, "normal: standard deviation", "tokens", ge=0.0, only={"dist": ("normal",)})
    min: int = F(1, "smallest length (uniform, zipf: lower bound)", "tokens", ge=1)
    max: int = F(1_000_000, "largest length (uniform, zipf: upper bound)", "tokens", ge=1)
    alpha: float = F(
        1.2, "zipf: exponent s of P(k) proportional to k^-s over [min, max]", gt=0.0, only={"dist": ("zipf",)}
    )
    file: Union[str, None] = F(
        None,
        "empirical: file of lengths (one per line, or a CSV with `column`), sampled uniformly with replacement",
        only={"dist": ("empirical",)},
    )
    column: Union[str, None] = F(
        None, "empirical: CSV column holding the lengths (null: one length per line)", only={"dist": ("empirical",)}
    )


@dataclass(frozen=True)
class SharedPrefixConfig:
    num_groups: int = F(1, "distinct shared prefixes (system prompts)", ge=1, le=1_000_000)
    tokens: int = F(256, "prefix length, put in front of the sampled prompt", "tokens", ge=1)
    fraction: float = F(1.0, "fraction of requests that carry a shared prefix", ge=0.0, le=1.0)


@dataclass(frozen=True)
class LoraConfig:
    adapters: int = F(1, "distinct LoRA adapters the requests ask for", ge=1, le=1_000_000)
    dist: Literal["uniform", "zipf"] = F("uniform", "how often each adapter is asked for")
    zipf_s: float = F(
        1.0, "zipf: adapter k (from 1) is asked for in proportion to 1 / k^zipf_s", gt=0.0, only={"dist": ("zipf",)}
    )
    fraction: float = F(1.0, "share of requests that ask for an adapter (the rest: the base model)", ge=0.0, le=1.0)


@dataclass(frozen=True)
class SessionConfig:
    turns: LengthConfig = F(
        LengthConfig(dist="fixed", value=4), "turns per session (a length distribution over integers)", units="turns"
    )
    user_tokens: Union[LengthConfig, None] = F(
        None, "new user tokens added by each follow-up turn (null: drawn like prompt_tokens)"
    )
    think_time_s: float = F(0.0, "pause between a turn's response and the session's next turn", "s", ge=0.0)
    think_time_dist: Literal["fixed", "exponential"] = F(
        "fixed", "think time is exactly think_time_s, or exponential with that mean"
    )


@dataclass(frozen=True)
class SLOConfig:
    """Latency targets. A client class meets them when its p99 does; goodput counts the requests whose own TTFT and TPOT are within them."""

    p99_ttft_ms: Union[float, None] = F(
        None, "target time to first token (99th percentile of a class; per request for goodput)", "ms", gt=0.0
    )
    p99_tpot_ms: Union[float, None] = F(
        None, "target time per output token (99th percentile of a class; per request for goodput)", "ms", gt=0.0
    )


@dataclass(frozen=True)
class ClassConfig:
    """One client class of ``workload.classes`` (fields left null inherit the workload's)."""

    name: str = F("", "class name (the mapping key when classes are given as a mapping)")
    weight: Union[float, None] = F(
        None, "share of the workload's arrivals (classes without their own arrival; null: 1)", ge=0.0
    )
    arrival: Union[ArrivalConfig, None] = F(
        None, "the class's own arrival process (null: share workload.arrival by weight)"
    )
    preset: Union[PresetName, None] = F(None, "named length preset (see docs/workloads.md)")
    prompt_tokens: Union[LengthConfig, None] = F(None, "prompt length (null: the workload's)")
    output_tokens: Union[LengthConfig, None] = F(None, "output length (null: the workload's)")
    correlation: Union[float, None] = F(
        None, "Gaussian-copula correlation of prompt and output length (null: the workload's)", ge=-1.0, le=1.0
    )
    shared_prefix: Union[SharedPrefixConfig, None] = F(None, "shared-prefix groups (null: the workload's)")
    session: Union[SessionConfig, None] = F(None, "multi-turn sessions (null: the workload's)")
    lora: Union[LoraConfig, None] = F(None, "LoRA adapters the class's requests ask for (null: the workload's)")
    priority: int = F(0, "request priority (engine.scheduling_policy: priority; lower runs first)")
    slo: Union[SLOConfig, None] = F(None, "latency targets, reported per class")


@dataclass(frozen=True)
class WorkloadConfig:
    arrival: ArrivalConfig = F(ArrivalConfig(), "how requests arrive")
    prompt_tokens: LengthConfig = F(LengthConfig(), "prompt length")
    output_tokens: LengthConfig = F(LengthConfig(value=256), "output length (max_tokens with ignore_eos)")
    correlation: float = F(
        0.0, "Gaussian-copula correlation of prompt and output length (0: independent)", ge=-1.0, le=1.0
    )
    shared_prefix: Union[SharedPrefixConfig, None] = F(None, "optional shared-prefix groups (prefix caching hits)")
    session: Union[SessionConfig, None] = F(
        None, "optional multi-turn sessions: each turn re-sends the previous turns' prompt and output"
    )
    lora: Union[LoraConfig, None] = F(
        None, "optional LoRA adapters the requests ask for (needs engine.enable_lora; a session keeps one)"
    )
    preset: Union[PresetName, None] = F(
        None, "named length preset: chat, summarisation, code_completion, long_context_rag (docs/workloads.md)"
    )
    classes: Union[dict, None] = F(
        None, "client classes {name: {weight or arrival, prompt_tokens, output_tokens, priority, slo, ...}}"
    )
    over_max_model_len: Literal["truncate", "resample", "reject"] = F(
        "truncate",
        "a drawn request longer than max_model_len: cut it to fit, draw again, or submit it (the engine rejects it)",
    )
    trace: Union[str, None] = F(
        None,
        "replay a trace file (CSV or JSONL, docs/workloads.md); overrides the lengths, and the arrivals unless trace_arrivals says otherwise",
    )
    trace_arrivals: Literal["recorded", "closed_loop"] = F(
        "recorded",
        "a trace's requests arrive at their recorded times (open loop), or are sent in order by workload.arrival.concurrency closed-loop clients, as `vllm bench serve --max-concurrency` sends a dataset",
    )

    def __post_init__(self) -> None:
        check_workload(self, "workload")

    def class_list(self) -> tuple[ClassConfig, ...]:
        """The configured client classes, in order (empty when ``classes`` is not set)."""
        return _parse_classes(self.classes, "workload.classes") if self.classes is not None else ()


def most_in_flight(w: WorkloadConfig) -> int | None:
    """The most requests ``w`` can have in flight at once: its closed-loop clients (the largest step
    of a stepped concurrency), summed over the classes with an arrival of their own and the shared
    one; None where any arrivals are open loop (a rate, or a trace's recorded times)."""

    def clients(a: ArrivalConfig) -> int | None:
        if a.type != "closed_loop":
            return None
        steps = parse_schedule(a.schedule, "schedule", integer=True) if a.schedule is not None else []
        return max([a.concurrency, *(int(v) for _, v in steps)])

    if w.trace is not None and w.trace_arrivals == "recorded":
        return None
    classes = w.class_list()
    arrivals = [c.arrival for c in classes if c.arrival is not None]
    if not classes or any(c.arrival is None for c in classes):
        arrivals.append(w.arrival)
    bounds = [clients(a) for a in arrivals]
    return None if any(b is None for b in bounds) else sum(b for b in bounds if b is not None)


# ---- checks the generic loader cannot do -------------------------------------------------------


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def parse_schedule(raw: Any, path: str, integer: bool) -> list[tuple[float, float]]:
    """``{t: v}``, ``[[t, v], ...]`` or ``"t:v, t:v"`` -> sorted [(t, v)], values >= 0 (integers if asked)."""
    what = "concurrency" if integer else "rate"
    if isinstance(raw, str):
        pairs = []
        for part in [p for p in raw.replace(";", ",").split(",") if p.strip()]:
            bits = part.split(":")
            if len(bits) != 2:
                raise ConfigError(f"{path} must be 't:{what}, t:{what}, ...' (got {raw!r})")
            try:
                pairs.append((float(bits[0]), float(bits[1])))
            except ValueError:
                raise ConfigError(f"{path} must be 't:{what}, t:{what}, ...' (got {raw!r})") from None
    elif isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, (list, tuple)):
        pairs = []
        for item in raw:
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ConfigError(f"{path} must be a list of [t_s, {what}] pairs (got {item!r})")
            pairs.append(tuple(item))
    else:
        raise ConfigError(f"{path} must be a mapping {{t_s: {what}}} (got {raw!r})")
    if not pairs:
        raise ConfigError(f"{path} must have at least one point (got {raw!r})")
    out = []
    for t, v in pairs:
        if isinstance(t, str):
            try:
                t = float(t)
            except ValueError:
                raise ConfigError(f"{path}: time must be a number of seconds (got {t!r})") from None
        if not _num(t) or t < 0 or t != t or t == float("inf"):
            raise ConfigError(f"{path}: time must be a number >= 0 s (got {t!r})")
        if not _num(v) or v < 0 or v != v or v == float("inf"):
            raise ConfigError(f"{path}.{t:g} must be a number >= 0 (got {v!r})")
        if integer and int(v) != v:
            raise ConfigError(f"{path}.{t:g} must be an integer (got {v!r})")
        out.append((float(t), int(v) if integer else float(v)))
    out.sort()
    for (t0, _), (t1, _) in itertools.pairwise(out):
        if t0 == t1:
            raise ConfigError(f"{path}: time {t0:g} s appears twice (got {raw!r})")
    return out


def check_arrival(a: ArrivalConfig, path: str) -> None:
    if a.type == "time_varying":
        if a.schedule is None:
            raise ConfigError(f"{path}.schedule: type 'time_varying' needs a schedule {{t_s: rate}} (got null)")
        pts = parse_schedule(a.schedule, f"{path}.schedule", integer=False)
        if pts[-1][1] <= 0:
            raise ConfigError(f"{path}.schedule: the last rate must be > 0 (got {pts[-1][1]:g} at {pts[-1][0]:g} s)")
    elif a.type == "closed_loop" and a.schedule is not None:
        parse_schedule(a.schedule, f"{path}.schedule", integer=True)


def check_length(ln: LengthConfig, path: str) -> None:
    if ln.min > ln.max:
        raise ConfigError(f"{path}.min must be <= {path}.max ({ln.max}) (got {ln.min})")
    if ln.dist == "empirical":
        if ln.file is None:
            raise ConfigError(f"{path}.file: dist 'empirical' needs a file of lengths (got null)")
        from workloads.lengths import load_lengths

        load_lengths(ln.file, ln.column, f"{path}.file")
    if ln.dist == "zipf" and ln.max - ln.min > 50_000_000:
        raise ConfigError(f"{path}.max: zipf needs max - min <= 50000000 (got {ln.max - ln.min})")


def check_session(s: SessionConfig, path: str) -> None:
    check_length(s.turns, f"{path}.turns")
    if s.user_tokens is not None:
        check_length(s.user_tokens, f"{path}.user_tokens")


def _default(cls: type, name: str) -> Any:
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return f.default if f.default is not dataclasses.MISSING else cast(Callable[[], Any], f.default_factory)()


def _check_preset(obj: Any, path: str) -> None:
    if obj.preset is None:
        return
    for name in ("prompt_tokens", "output_tokens", "correlation"):
        value = getattr(obj, name)
        if value is not None and value != _default(type(obj), name):
            got = f"dist {value.dist!r}" if isinstance(value, LengthConfig) else repr(value)
            raise ConfigError(f"{path}.{name}: cannot be set together with {path}.preset ({obj.preset!r}) (got {got})")


def check_workload(w: WorkloadConfig, path: str) -> None:
    check_arrival(w.arrival, f"{path}.arrival")
    check_length(w.prompt_tokens, f"{path}.prompt_tokens")
    check_length(w.output_tokens, f"{path}.output_tokens")
    if w.session is not None:
        check_session(w.session, f"{path}.session")
    _check_preset(w, path)
    if w.classes is not None:
        _parse_classes(w.classes, f"{path}.classes")
    if w.trace is not None:
        from workloads.trace import read_trace

        read_trace(w.trace)
    if w.trace_arrivals == "closed_loop" and w.arrival.type != "closed_loop":
        raise ConfigError(
            f"{path}.trace_arrivals: closed_loop sends the trace with "
            f"{path}.arrival.type: closed_loop clients (got arrival type {w.arrival.type!r})"
        )


def _parse_classes(raw: Any, path: str) -> tuple[ClassConfig, ...]:
    if isinstance(raw, dict):
        items = []
        for name, body in raw.items():
            if body is None:
                body = {}
            if not isinstance(body, dict):
                raise ConfigError(f"{path}.{name} must be a mapping (got {body!r})")
            if "name" in body and body["name"] != name:
                raise ConfigError(f"{path}.{name}.name must match its key {name!r} (got {body['name']!r})")
            items.append((str(name), {**body, "name": str(name)}))
    elif isinstance(raw, (list, tuple)):
        items = []
        for i, body in enumerate(raw):
            if not isinstance(body, dict):
                raise ConfigError(f"{path}[{i}] must be a mapping (got {body!r})")
            items.append((str(body.get("name", i)), {"name": str(body.get("name", i)), **body}))
    else:
        raise ConfigError(f"{path} must be a mapping {{name: {{...}}}} (got {raw!r})")
    if not items:
        raise ConfigError(f"{path} must name at least one class (got {raw!r})")
    out = []
    for name, body in items:
        where = f"{path}.{name}"
        c = build(ClassConfig, body, where)
        if c.arrival is not None:
            if c.weight is not None:
                raise ConfigError(f"{where}.weight: a class with its own arrival takes no weight (got {c.weight!r})")
            check_arrival(c.arrival, f"{where}.arrival")
        for ln in ("prompt_tokens", "output_tokens"):
            if getattr(c, ln) is not None:
                check_length(getattr(c, ln), f"{where}.{ln}")
        if c.session is not None:
            check_session(c.session, f"{where}.session")
        _check_preset(c, where)
        out.append(c)
    shared = [c for c in out if c.arrival is None]
    if shared and sum(1.0 if c.weight is None else c.weight for c in shared) <= 0:
        raise ConfigError(f"{path}: the weights of the classes sharing workload.arrival must not all be 0")
    return tuple(out)
