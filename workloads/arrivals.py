"""Arrival processes as SimPy processes: closed-loop clients and open-loop arrivals.

Open loop: a gap generator (Poisson, gamma, constant, time-varying Poisson by inversion of the
cumulative rate) drives one process that calls ``arrive()`` at each arrival, or, for single requests
sent to one engine, hands the engine the next few hundred arrivals at once, each with its own time
(``hand_over_ahead``). Closed loop: one process per client, each running ``job(client)`` (submit and
wait for the end; or a whole session), thinking, and repeating; a concurrency schedule starts extra
clients and lets surplus ones stop after their current request. A client that only sends single
requests back to back (no think time, no schedule) is the same thing without the generator: each
request's completion event carries a callback that sends the next one, which SimPy runs exactly
where it would have resumed the process (or, with one engine, the engine runs the turns of all the
clients whose requests end at one moment).
Events are per request at most, never per token or per step.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterator
from typing import NamedTuple, cast

import numpy as np
import simpy
from simpy.events import URGENT

from simulator.engine.simtime import TimeoutAt
from simulator.engine.submission import DirectTarget, DrawAhead

_BATCH = 4096
# Arrivals handed to an engine ahead of their time at once (hand_over_ahead).
AHEAD = 256


class Budget:
    """How many requests may still be submitted (None: unlimited)."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            return False
        self.left -= 1
        return True

    def take_many(self, k: int) -> int:
        """How many of ``k`` requests may be submitted, taken at once (as ``take`` k times)."""
        if self.left is None:
            return k
        n = min(k, max(self.left, 0))
        self.left -= n
        return n

    def give_back(self) -> None:
        if self.left is not None:
            self.left += 1


# ---- open loop ----------------------------------------------------------------------------------


def poisson_gaps(rate: float, rng: np.random.Generator) -> Iterator[float]:
    """Exponential gaps with mean 1/rate, drawn 4096 at a time."""
    while True:
        for g in rng.exponential(1.0 / rate, size=_BATCH):
            yield float(g)


def gamma_gaps(rate: float, cv: float, rng: np.random.Generator) -> Iterator[float]:
    """Gamma gaps with mean 1/rate and coefficient of variation cv (shape 1/cv^2)."""
    k = 1.0 / cv**2
    while True:
        for g in rng.gamma(k, 1.0 / (rate * k), size=_BATCH):
            yield float(g)


def constant_gaps(rate: float) -> Iterator[float]:
    while True:
        yield 1.0 / rate


class RateFunction:
    """A rate lambda(t) >= 0 from (t, rate) points: piecewise constant ("step") or linear between points.

    Before the first point the rate is the first point's; after the last, the last point's.
    ``inverse(S)`` solves Lambda(t) = S for the cumulative rate Lambda(t) = integral_0^t lambda.
    """

    def __init__(self, points: list[tuple[float, float]], interpolation: str) -> None:
        segs = []  # (start, length, rate at start, rate at end); the last one is open-ended
        t0, r0 = points[0]
        if t0 > 0:
            segs.append((0.0, t0, r0, r0))
        for (ta, ra), (tb, rb) in itertools.pairwise(points):
            segs.append((ta, tb - ta, ra, rb if interpolation == "linear" else ra))
        tl, rl = points[-1]
        segs.append((tl, math.inf, rl, rl))
        self.segs = segs
        self.cum = [0.0]
        for _, d, ra, rb in segs[:-1]:
            self.cum.append(self.cum[-1] + 0.5 * (ra + rb) * d)

    def rate(self, t: float) -> float:
        i = max(0, bisect.bisect_right([s[0] for s in self.segs], t) - 1)
        s, d, ra, rb = self.segs[i]
        return ra if math.isinf(d) else ra + (rb - ra) * (t - s) / d

    def inverse(self, S: float) -> float:
        i = bisect.bisect_right(self.cum, S) - 1
        s, d, ra, rb = self.segs[i]
        left = S - self.cum[i]
        if math.isinf(d) or ra == rb:
            return s + left / ra if ra > 0 else math.inf
        a = (rb - ra) / (2 * d)
        disc = ra * ra + 4 * a * left
        x = 2 * left / (ra + math.sqrt(max(disc, 0.0)))
        return s + min(x, d)


def diurnal_points(mean: float, peak_to_trough: float, peak_hour: float) -> list[tuple[float, float]]:
    """A day's arrival rate as (t, rate) points every 15 minutes for 48 hours (linear between them):
    ``mean x (1 + a cos(2 pi (t/3600 - peak_hour) / 24))`` with ``a`` such that the highest rate is
    ``peak_to_trough`` times the lowest."""
    a = (peak_to_trough - 1.0) / (peak_to_trough + 1.0)
    return [
        (h * 3600.0, mean * (1.0 + a * math.cos(2.0 * math.pi * (h - peak_hour) / 24.0)))
        for h in (k / 4.0 for k in range(48 * 4 + 1))
    ]


def time_varying_gaps(fn: RateFunction, rng: np.random.Generator) -> Iterator[float]:
    """Non-homogeneous Poisson arrivals by inversion: t_n = Lambda^-1(E_1 + ... + E_n), E_i ~ Exp(1)."""
    S, prev = 0.0, 0.0
    while True:
        for e in rng.exponential(1.0, size=_BATCH):
            S += float(e)
            t = fn.inverse(S)
            if math.isinf(t):
                return
            yield t - prev
            prev = t


def open_loop(env: simpy.Environment, gaps: Iterator[float], arrive: Callable[[], None], budget: Budget):
    """One process: wait a gap, call ``arrive()``, repeat while the budget lasts."""
    while budget.take():
        gap = next(gaps, None)
        if gap is None:
            budget.give_back()
            return
        yield env.timeout(gap)
        arrive()


class RunEnd(NamedTuple):
    """When a run stops, for arrivals handed to an engine ahead of their time: at ``t``; ``at_t``:
    whether an arrival at exactly ``t`` still comes. A run that stops at ``t`` alone does so before
    any other event at ``t``; one that stops after a number of requests or at ``t``, whichever
    comes first, once the events queued at ``t`` before it have run, an arrival among them
    (``simulator.run.simulate``)."""

    t: float
    at_t: bool

    def past(self, x: float) -> bool:
        """Whether an arrival at ``x`` comes too late for the run."""
        return x > self.t or (x == self.t and not self.at_t)


def arrival_times(start: float, gaps: Iterator[float]) -> Iterator[float]:
    """The times ``open_loop``'s timeouts reach from ``start``: each the one before plus its gap, in
    the floats SimPy adds them in."""
    return itertools.islice(itertools.accumulate(gaps, initial=start), 1, None)


def hand_over_ahead(
    env: simpy.Environment,
    times: Iterator[float],
    send: Callable[[list[float]], None],
    budget: Budget,
    end: RunEnd | None,
):
    """Arrivals at ``times`` (in order, from now on) for an engine that takes requests ahead of their
    time (``DirectTarget``): one process that takes the next ``AHEAD`` of them while the run lasts
    (``end``) and hands them to ``send(times)`` at once, then waits for the last of them. The engine
    then runs through them without being woken at each arrival; what it computes is the same (its
    intake runs in any stride, ``simulator.engine.compiled.intake``). An open loop's arrivals
    (``arrival_times``), or a trace's (``workloads.trace.replay_ahead``)."""
    while True:
        batch: list[float] = []
        while len(batch) < AHEAD and budget.take():
            t = next(times, None)
            if t is None or (end is not None and end.past(t)):
                budget.give_back()
                break
            batch.append(t)
        if batch:
            send(batch)
        if len(batch) < AHEAD:
            return
        yield TimeoutAt(env, batch[-1])


def poisson(
    env: simpy.Environment,
    submit: Callable,
    factory: Callable,
    rate: float,
    rng: np.random.Generator,
    budget: Budget,
):
    """Open loop: exponential inter-arrival times with mean 1/rate (``factory()`` gives each request's shape)."""
    return open_loop(env, poisson_gaps(rate, rng), lambda: submit(factory()), budget)


# ---- closed loop --------------------------------------------------------------------------------


def _chained_client(
    env: simpy.Environment,
    request: Callable[..., simpy.Event | None],
    budget: Budget,
    client: int,
    delay: float | None,
    latency: float = 0.0,
    turns: Callable[[list[int]], None] | None = None,
) -> None:
    """A closed-loop client that sends requests back to back, as callbacks on their completion events.

    It does what ``closed_loop``'s process does for such a client, event for event: it starts on
    an urgent event as a process does, waits ``delay`` with a timeout created then, and each
    request's completion runs the next turn where the process would have been resumed (after a
    timeout of ``latency``, if any). ``turns`` (for a client that reacts at once, whose engine runs
    its turns: ``DirectTarget.chain``): what runs the turns of a list of clients; the client's first
    turn goes through it too, and its requests carry no event.
    """
    if turns is not None:

        def turn(_event: simpy.Event | None = None) -> None:
            turns([client])
    else:

        def turn(_event: simpy.Event | None = None) -> None:
            if budget.take():
                cast(simpy.Event, request(client)).callbacks.append(react if latency > 0 else turn)

    def react(_event: simpy.Event) -> None:
        env.timeout(latency).callbacks.append(turn)

    def start(_event: simpy.Event) -> None:
        if delay is None:
            turn()
        else:
            env.timeout(delay).callbacks.append(turn)

    ev = simpy.Event(env)
    ev._ok, ev._value = True, None
    ev.callbacks.append(start)
    env.schedule(ev, URGENT)


def closed_loop(
    env: simpy.Environment,
    submit: Callable,
    factory: Callable | None,
    concurrency: int,
    think_time_s: float,
    ramp_up_s: float,
    budget: Budget,
    *,
    job: Callable | None = None,
    request: Callable[..., simpy.Event | None] | None = None,
    think: Callable[[], float] | None = None,
    schedule: list[tuple[float, int]] | None = None,
    client_base: int = 0,
    client_latency_s: float = 0.0,
    runner: DirectTarget | None = None,
    requests: Callable[[list[int]], None] | None = None,
    source: DrawAhead | None = None,
) -> None:
    """Start ``concurrency`` clients; each sends a request, waits for its end, reacts (after
    ``client_latency_s``), thinks, repeats.

    ``job(client, active)``: a generator that submits one request (or runs one session) and waits for
    it; or ``request(client)``: submits one request and returns its completion event; default: submit
    ``factory()``'s shape. ``think()``: the next pause (default ``think_time_s``).
    ``schedule``: [(t, concurrency)] steps; at each, clients below the new concurrency that are not
    running start at once, and clients at or above it stop after their current request.
    ``runner``: the engine, when it runs the turns of clients that react at once and send single
    requests back to back (``DirectTarget``); ``requests(clients)`` then sends those clients' next
    requests at once (their budget taken; default: ``request(client, False)`` for each).
    ``source``: where those requests are drawn, when they are the workload's only ones: with no
    limit on their number, the engine may run the turns inside its step (``DirectTarget.run_turns``).
    """
    target = [concurrency]
    alive: set[int] = set()

    if job is None and request is None:

        def request(client, want_event=True):
            return submit(cast(Callable, factory)()._replace(client=client), want_event)

    if job is None and think is None and think_time_s <= 0 and not schedule:
        assert request is not None  # given, or defined above when job is None
        turns = None
        if runner is not None and client_latency_s <= 0:
            one = request
            send = requests or (lambda clients: [one(c, False) for c in clients])
            if source is not None and budget.left is None:
                send = runner.run_turns(range(client_base, client_base + concurrency), source) or send

            def turns(clients: list[int]) -> None:
                k = budget.take_many(len(clients))
                if k:
                    send(clients if k == len(clients) else clients[:k])

        for cid in range(concurrency):
            if turns is not None:
                cast(DirectTarget, runner).chain(client_base + cid, turns)
            _chained_client(
                env,
                request,
                budget,
                client_base + cid,
                ramp_up_s * cid / concurrency if ramp_up_s > 0 else None,
                client_latency_s,
                turns,
            )
        return

    if job is None:

        def job(client, active):
            assert request is not None  # given, or defined above when job is None
            yield request(client)

    if think is None:

        def think():
            return think_time_s

    def active(cid: int) -> Callable[[], bool]:
        return lambda: cid < target[0]

    def client(cid: int, delay: float | None):
        alive.add(cid)
        if delay is not None:
            yield env.timeout(delay)
        while cid < target[0] and budget.take():
            yield from job(client_base + cid, active(cid))
            if client_latency_s > 0:
                yield env.timeout(client_latency_s)
            if cid >= target[0]:
                break
            pause = think()
            if pause > 0:
                yield env.timeout(pause)
        alive.discard(cid)

    def controller():
        assert schedule is not None  # started only with a schedule
        for t, c in schedule:
            if t > env.now:
                yield env.timeout(t - env.now)
            target[0] = c
            for cid in range(c):
                if cid not in alive:
                    env.process(client(cid, None))

    for cid in range(concurrency):
        env.process(client(cid, ramp_up_s * cid / concurrency if ramp_up_s > 0 else None))
    if schedule:
        env.process(controller())
