"""Turn the ``workload:`` section into SimPy processes that submit requests to an engine.

Randomness: one ``numpy.random.SeedSequence(seed)`` per run, split with ``spawn`` so each component
(prompt lengths, output lengths, prefix groups, arrival gaps, copula, session turns, user tokens,
think times, length re-draws, class choice) has its own Generator: adding a component, or drawing
more from one, never shifts another's numbers. Session and client ids are counted per run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
import simpy

from simulator.engine.submission import DirectTarget, DrawnRow, RequestRow, Submission
from workloads.arrivals import (
    Budget,
    RateFunction,
    RunEnd,
    arrival_times,
    closed_loop,
    constant_gaps,
    diurnal_points,
    gamma_gaps,
    hand_over_ahead,
    open_loop,
    poisson_gaps,
    time_varying_gaps,
)
from workloads.config import (
    ArrivalConfig,
    LengthConfig,
    LoraConfig,
    SessionConfig,
    SharedPrefixConfig,
    SLOConfig,
    WorkloadConfig,
    parse_schedule,
)
from workloads.lengths import LengthSampler, PairSampler
from workloads.presets import preset_lengths

_RESAMPLE_TRIES = 100


@dataclass(frozen=True)
class ClassSpec:
    """One client class with everything inherited from the workload resolved."""

    index: int  # client_class of its requests (-1: no classes configured)
    name: str
    weight: float
    arrival: ArrivalConfig | None  # None: shares workload.arrival
    prompt: LengthConfig
    output: LengthConfig
    correlation: float
    shared_prefix: SharedPrefixConfig | None
    session: SessionConfig | None
    priority: int
    slo: SLOConfig | None
    lora: LoraConfig | None = None


def class_specs(w: WorkloadConfig) -> list[ClassSpec]:
    """The workload as a list of classes (one, with index -1, when ``classes`` is not set)."""
    if w.preset is not None:
        wp, wo = preset_lengths(w.preset)
    else:
        wp, wo = w.prompt_tokens, w.output_tokens
    classes = w.class_list()
    if not classes:
        return [ClassSpec(-1, "", 1.0, None, wp, wo, w.correlation, w.shared_prefix, w.session, 0, None, w.lora)]
    out = []
    for i, c in enumerate(classes):
        if c.preset is not None:
            p, o = preset_lengths(c.preset)
        else:
            p, o = c.prompt_tokens or wp, c.output_tokens or wo
        out.append(
            ClassSpec(
                index=i,
                name=c.name,
                weight=1.0 if c.weight is None else c.weight,
                arrival=c.arrival,
                prompt=p,
                output=o,
                correlation=w.correlation if c.correlation is None else c.correlation,
                shared_prefix=w.shared_prefix if c.shared_prefix is None else c.shared_prefix,
                session=w.session if c.session is None else c.session,
                priority=c.priority,
                slo=c.slo,
                lora=w.lora if c.lora is None else c.lora,
            )
        )
    return out


def _some_request_carries(w: WorkloadConfig, trace_column: str, class_field: str) -> bool:
    """Whether a trace row has ``trace_column`` >= 0, or a class sets ``class_field``."""
    if w.trace is not None:
        from workloads.trace import read_trace

        return bool((getattr(read_trace(w.trace), trace_column) >= 0).any())
    return any(getattr(s, class_field) is not None for s in class_specs(w))


def keeps_finished_content(w: WorkloadConfig) -> bool:
    """True when requests re-send earlier requests' content (multi-turn sessions, or a trace with session ids).

    Pass it to ``SchedulerConfig.cache_finished_content`` so a finished turn's blocks stay findable.
    """
    return _some_request_carries(w, "session", "session")


def completion_driven(w: WorkloadConfig) -> bool:
    """True when some request is submitted because an earlier one ended: closed-loop clients (or a
    trace replayed closed loop) and multi-turn sessions (a turn follows the previous one's answer).
    Otherwise every arrival time is fixed before the run, whatever the engines do."""
    if w.trace is not None:
        return w.trace_arrivals == "closed_loop"
    specs = class_specs(w)
    arrivals = [w.arrival] + [s.arrival for s in specs if s.arrival is not None]
    return any(a.type == "closed_loop" for a in arrivals) or any(s.session is not None for s in specs)


def has_shared_prefixes(w: WorkloadConfig) -> bool:
    """True when some request may carry a shared-prefix group (a class with ``shared_prefix``, or a
    trace with prefix groups)."""
    return _some_request_carries(w, "group", "shared_prefix")


class Ids:
    """Per-run counters: session ids and client ids, and the requests ``over_max_model_len`` changed."""

    def __init__(self) -> None:
        self.sessions = 0
        self.clients = 0
        self.truncated = 0  # cut to fit max_model_len
        self.resampled = 0  # drawn again to fit it

    def new_session(self) -> int:
        self.sessions += 1
        return self.sessions - 1

    def new_clients(self, n: int) -> int:
        self.clients += n
        return self.clients - n


class RequestFactory:
    """Draws each new request's prompt length, output length and shared-prefix group (one class)."""

    def __init__(
        self,
        w: WorkloadConfig,
        seed: int,
        *,
        spec: ClassSpec | None = None,
        seeds: np.random.SeedSequence | None = None,
        max_model_len: int | None = None,
        ids: Ids | None = None,
    ) -> None:
        spec = spec or class_specs(w)[0]
        ss = seeds or np.random.SeedSequence(seed)
        r_prompt, r_out, r_prefix, self.arrival_rng = (np.random.default_rng(s) for s in ss.spawn(4))
        r_copula, r_turns, r_user, r_think, r_fit, self.client_think_rng = (
            np.random.default_rng(s) for s in ss.spawn(6)
        )
        self.spec = spec
        self.prompt = LengthSampler(spec.prompt, r_prompt)
        self.output = LengthSampler(spec.output, r_out)
        self.pair = PairSampler(self.prompt, self.output, spec.correlation, r_copula) if spec.correlation != 0 else None
        self.prefix = spec.shared_prefix
        self.prefix_rng = r_prefix
        self.fit_rng = r_fit
        self.max_model_len = max_model_len
        self.rule = w.over_max_model_len
        self.ids = ids or Ids()
        s = spec.session
        self.turns = LengthSampler(s.turns, r_turns) if s else None
        self.user = LengthSampler(s.user_tokens, r_user) if s and s.user_tokens is not None else None
        self.think_rng = r_think
        lc = spec.lora
        # Its own stream, drawn only when adapters are asked for (other runs draw exactly as before).
        self.lora_rng = np.random.default_rng(ss.spawn(1)[0]) if lc else None
        self.lora_cum = None
        if lc is not None and lc.dist == "zipf":
            with np.errstate(over="ignore"):  # k^s past the largest float: weight 0, the limit for a steep s
                w_k = 1.0 / np.arange(1, lc.adapters + 1, dtype=np.float64) ** lc.zipf_s
            self.lora_cum = np.cumsum(w_k / w_k.sum())

    # ---- shapes -------------------------------------------------------------------------------
    def lengths(self) -> tuple[int, int]:
        if self.pair is not None:
            return self.pair()
        return self.prompt(), self.output()

    def group(self) -> tuple[int, int]:
        sp = self.prefix
        if sp is not None and (sp.fraction >= 1.0 or self.prefix_rng.random() < sp.fraction):
            g = int(self.prefix_rng.integers(sp.num_groups)) if sp.num_groups > 1 else 0
            return g, sp.tokens
        return -1, 0

    def adapter(self) -> int:
        """The LoRA adapter a new request (or session) asks for: -1 for the base model."""
        lc, rng = self.spec.lora, self.lora_rng
        if lc is None or rng is None:
            return -1
        if lc.fraction < 1.0 and rng.random() >= lc.fraction:
            return -1
        if self.lora_cum is None:
            return int(rng.integers(lc.adapters))
        return min(int(np.searchsorted(self.lora_cum, rng.random(), side="right")), lc.adapters - 1)

    def fit(self, p: int, o: int, glen: int) -> tuple[int, int]:
        """Apply ``over_max_model_len`` to a drawn (own prompt, output) pair behind a glen-token prefix."""
        L = self.max_model_len
        if L is None or glen + p + o <= L or self.rule == "reject":
            return p, o
        if self.rule == "resample":
            for _ in range(_RESAMPLE_TRIES):
                p, o = self.lengths()
                if glen + p + o <= L:
                    self.ids.resampled += 1
                    return p, o
        # truncate: keep the shared prefix, cap the output so one own prompt token fits, then cut the prompt.
        o2 = min(o, L - glen - 1)
        if o2 < 1:
            return p, o  # cannot fit at all: submitted as drawn, the engine rejects it
        self.ids.truncated += 1
        return min(p, L - glen - o2), o2

    def __call__(self) -> tuple[int, int, int, int]:
        if self.pair is None and self.prefix is None:  # the common shape, without the general path's calls
            p, o = self.prompt(), self.output()
            L = self.max_model_len
            if L is None or p + o <= L:
                return p, o, -1, 0
            p, o = self.fit(p, o, 0)
            return p, o, -1, 0
        p, o = self.lengths()
        g, glen = self.group()
        p, o = self.fit(p, o, glen)
        return p + glen, o, g, glen

    # ---- what one arrival / one closed-loop client turn does ----------------------------------
    def pause(self, mean: float, dist: str) -> float:
        if mean <= 0:
            return 0.0
        return float(self.think_rng.exponential(mean)) if dist == "exponential" else mean

    def arrive(self, env: simpy.Environment, submit: Callable, budget: Budget) -> None:
        """An open-loop arrival (its budget already taken): one request, or a session's first turn."""
        if self.spec.session is not None:
            env.process(self.session(env, submit, budget, -1, None))
        else:
            p, o, g, glen = self()
            submit(Submission(p, o, g, glen, self.spec.priority, client_class=self.spec.index, lora=self.adapter()))

    def job(self, env: simpy.Environment, submit: Callable, budget: Budget, client: int, active: Callable[[], bool]):
        """A closed-loop client's next job (its budget already taken): one request, or a whole session."""
        if self.spec.session is not None:
            yield from self.session(env, submit, budget, client, active)
        else:
            yield self.request(submit, client)

    def request(self, submit: Callable, client: int, want_event: bool = True) -> simpy.Event | None:
        """A closed-loop client's next single request (its budget already taken): its completion
        event (``want_event``; else none)."""
        s = Submission(*self(), self.spec.priority, client=client, client_class=self.spec.index, lora=self.adapter())
        return submit(s, want_event)

    def request_rows(self, clients: list[int]) -> list[RequestRow]:
        """Single requests of ``clients`` (-1: an open loop's arrival), their budget already taken,
        in order, for an engine that takes rows (``DirectTarget.submit_rows``): the fields
        ``request`` and ``arrive`` submit, drawn the same way."""
        priority, index = self.spec.priority, self.spec.index
        return [(*self(), priority, -1, c, index, self.adapter()) for c in clients]

    def rows_ahead(self, k: int) -> list[DrawnRow]:
        """The next ``k`` single requests, drawn as ``request_rows`` draws them, each with what it
        added to the counts of requests truncated and drawn again (``submission.DrawAhead``)."""
        ids, priority, index = self.ids, self.spec.priority, self.spec.index
        out = []
        for _ in range(k):
            truncated, resampled = ids.truncated, ids.resampled
            p, o, g, glen = self()
            out.append(
                (p, o, g, glen, priority, index, self.adapter(), ids.truncated - truncated, ids.resampled - resampled)
            )
        return out

    def unsent(self, truncated: int, resampled: int) -> None:
        """Requests drawn ahead and never sent: their counts taken back."""
        self.ids.truncated -= truncated
        self.ids.resampled -= resampled

    def session(self, env, submit, budget, client, active):
        """Turns one after another; turn k's prompt = prefix + all earlier prompts and outputs + new user tokens.

        The first turn's budget is already taken. A follow-up turn that would not fit max_model_len ends
        the session (the context is full), as does a closed-loop client being stopped.
        """
        s = self.spec.session
        assert s is not None and self.turns is not None  # called only for a class with sessions
        from workloads.trace import SESSION_KEY_BASE

        key = SESSION_KEY_BASE + self.ids.new_session()
        g, glen = self.group()
        n = self.turns()
        lora = self.adapter()  # one adapter a session
        history = 0
        for k in range(n):
            if k == 0:
                u, o = self.lengths()
                u, o = self.fit(u, o, glen)
            else:
                if active is not None and not active():
                    return
                u, o = (self.user(), self.output()) if self.user is not None else self.lengths()
                if self.max_model_len is not None and glen + history + u + o > self.max_model_len:
                    return
                if not budget.take():
                    return
            turn = Submission(
                glen + history + u,
                o,
                g,
                glen,
                self.spec.priority,
                content_key=key,
                client=client,
                client_class=self.spec.index,
                lora=lora,
            )
            yield submit(turn, True)
            history += u + o
            if k < n - 1:
                t = self.pause(s.think_time_s, s.think_time_dist)
                if t > 0:
                    yield env.timeout(t)


def _start_arrival(
    env: simpy.Environment,
    submit: Callable,
    a: ArrivalConfig,
    sources: list[RequestFactory],
    gap_rng: np.random.Generator,
    think_rng: np.random.Generator,
    class_rng: np.random.Generator | None,
    budget: Budget,
    ids: Ids,
    where: str,
    runner: DirectTarget | None = None,
    end: RunEnd | None = None,
) -> None:
    if len(sources) == 1:
        only = sources[0]

        def pick() -> RequestFactory:
            return only
    else:
        assert class_rng is not None  # several sources: the classes sharing workload.arrival, with their rng
        cum = np.cumsum([s.spec.weight for s in sources])
        cum = cum / cum[-1]

        def pick() -> RequestFactory:
            return sources[min(int(np.searchsorted(cum, class_rng.random(), side="right")), len(sources) - 1)]

    if a.type == "closed_loop":
        schedule = (
            cast("list[tuple[float, int]]", parse_schedule(a.schedule, f"{where}.schedule", integer=True))
            if a.schedule is not None
            else None
        )
        most = max([a.concurrency] + [c for _, c in schedule or []])
        base = ids.new_clients(most)

        def job(client, active):
            return pick().job(env, submit, budget, client, active)

        def request(client, want_event=True):
            return pick().request(submit, client, want_event)

        requests = None
        if runner is not None and len(sources) == 1:
            turns_to = runner

            def requests(clients: list[int]) -> None:  # the engine runs the clients' turns
                turns_to.submit_rows(only.request_rows(clients))

        think: Callable[[], float] | None
        if a.think_time_dist == "exponential" and a.think_time_s > 0:

            def think() -> float:
                return float(think_rng.exponential(a.think_time_s))
        else:
            think = None
        plain = all(s.spec.session is None for s in sources)
        closed_loop(
            env,
            submit,
            None,
            a.concurrency,
            a.think_time_s,
            a.ramp_up_s,
            budget,
            job=None if plain else job,
            request=request if plain else None,
            think=think,
            schedule=schedule,
            client_base=base,
            client_latency_s=a.client_latency_s,
            runner=runner,
            requests=requests,
            source=only if requests is not None and plain else None,
        )
        return
    if a.type == "poisson":
        gaps = poisson_gaps(a.rate, gap_rng)
    elif a.type == "gamma":
        gaps = gamma_gaps(a.rate, a.cv, gap_rng)
    elif a.type == "constant":
        gaps = constant_gaps(a.rate)
    elif a.type == "diurnal":
        gaps = time_varying_gaps(RateFunction(diurnal_points(a.rate, a.peak_to_trough, a.peak_hour), "linear"), gap_rng)
    else:
        fn = RateFunction(parse_schedule(a.schedule, f"{where}.schedule", integer=False), a.interpolation)
        gaps = time_varying_gaps(fn, gap_rng)
    if runner is not None and len(sources) == 1 and only.spec.session is None:
        engine = runner

        def send(times: list[float]) -> None:
            engine.submit_rows(only.request_rows([-1] * len(times)), times)

        env.process(hand_over_ahead(env, arrival_times(env.now, gaps), send, budget, end))
    else:
        env.process(open_loop(env, gaps, lambda: pick().arrive(env, submit, budget), budget))


def start_workload(
    env: simpy.Environment,
    submit: Callable,
    w: WorkloadConfig,
    seed: int,
    num_requests: int | None,
    max_model_len: int | None = None,
    ids: Ids | None = None,
    runner: DirectTarget | None = None,
    end: RunEnd | None = None,
) -> int | None:
    """Start the arrival processes. Returns how many requests will be submitted (None: unbounded).

    ``max_model_len``: when given, drawn requests obey ``w.over_max_model_len`` (docs/workloads.md).
    ``ids``: the run's counters (given to read, after the run, how many requests were truncated).
    ``runner``: the target, when it is one engine (``DirectTarget``): a workload of one closed loop of
    clients that react at once has the engine run their turns (``arrivals.closed_loop``), one of
    single requests arriving on their own (or a trace's rows at their times) hands them to it ahead
    of time, while the run lasts: ``end`` (``arrivals.hand_over_ahead``).
    """
    budget = Budget(num_requests)
    if w.trace is not None:  # (the trace module only when a trace is read)
        from workloads.trace import read_trace, replay, replay_ahead, replay_closed_loop

        rows = read_trace(w.trace)
        if w.trace_arrivals == "closed_loop":
            a = w.arrival
            replay_closed_loop(env, submit, rows, budget, a.concurrency, a.client_latency_s, a.ramp_up_s, runner)
        elif runner is not None and bool((rows.client < 0).all()):  # no client waits on an earlier request
            env.process(replay_ahead(env, runner, rows, budget, end))
        else:
            env.process(replay(env, submit, rows, budget))
        return len(rows) if num_requests is None else min(len(rows), num_requests)
    ids = ids or Ids()
    specs = class_specs(w)
    root = np.random.SeedSequence(seed)
    if specs[0].index < 0:
        src = RequestFactory(w, seed, spec=specs[0], seeds=root, max_model_len=max_model_len, ids=ids)
        _start_arrival(
            env,
            submit,
            w.arrival,
            [src],
            src.arrival_rng,
            src.client_think_rng,
            None,
            budget,
            ids,
            "workload.arrival",
            runner,
            end,
        )
        return num_requests
    top = root.spawn(4)  # same layout as the single-class case; child 3 drives workload.arrival's gaps
    extra = root.spawn(2 + len(specs))
    class_rng, think_rng = np.random.default_rng(extra[0]), np.random.default_rng(extra[1])
    sources = [
        RequestFactory(w, seed, spec=s, seeds=extra[2 + i], max_model_len=max_model_len, ids=ids)
        for i, s in enumerate(specs)
    ]
    shared = [s for s in sources if s.spec.arrival is None]
    if shared:
        _start_arrival(
            env,
            submit,
            w.arrival,
            shared,
            np.random.default_rng(top[3]),
            think_rng,
            class_rng,
            budget,
            ids,
            "workload.arrival",
        )
    for s in sources:
        if s.spec.arrival is not None:
            _start_arrival(
                env,
                submit,
                s.spec.arrival,
                [s],
                s.arrival_rng,
                s.client_think_rng,
                None,
                budget,
                ids,
                f"workload.classes.{s.spec.name}.arrival",
            )
    return num_requests
