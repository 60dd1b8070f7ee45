"""An exact-time SimPy event, shared by the engines (a step's end) and the workloads (a trace's arrival).

A leaf module: it imports SimPy only, so the workloads layer can use it without importing the engine.
"""

from __future__ import annotations

import heapq

import simpy
from simpy.events import NORMAL


class TimeoutAt(simpy.Timeout):
    """A timeout that fires at exactly time ``t`` (>= now).

    ``env.timeout(d)`` fires at ``now + d`` in floats, and no ``d`` may give ``t`` exactly (when
    ``now + d`` falls halfway between two floats, ties-to-even skips every other one). An event has
    to land exactly on a time computed elsewhere (a step's end, a trace's arrival), so this one
    goes on SimPy's event queue at ``t`` itself, with the priority and sequence number a timeout
    created now would get.
    """

    def __init__(self, env: simpy.Environment, t: float) -> None:
        self.env = env
        self.callbacks = []
        self._value = None
        self._delay = t - env.now
        self._ok = True
        heapq.heappush(env._queue, (t, NORMAL, next(env._eid), self))


class StepEnd(TimeoutAt):
    """The end of a run of engine steps: a ``TimeoutAt`` that knows whose steps end (see ``horizon``)."""

    def __init__(self, env: simpy.Environment, t: float, owner: object) -> None:
        self.owner = owner
        super().__init__(env, t)


def horizon(env: simpy.Environment, owner: object) -> float:
    """When something outside the engine ``owner`` may next act on it: the time of the first event on
    SimPy's queue that is not another engine's step end (``env.peek()`` would also stop it there).

    Only valid where no engine's steps can lead to anything reaching another engine: in a fleet whose
    arrivals do not wait on earlier requests' ends (``workloads.factory.completion_driven``), one
    replica's steps never touch another's, and each replica may run ahead to the next arrival.
    """
    return min(
        (t for t, _, _, ev in env._queue if not (type(ev) is StepEnd and ev.owner is not owner)),
        default=float("inf"),
    )
