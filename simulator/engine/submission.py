"""What a client sends: one request, as the workloads hand it to an engine or a fleet.

A leaf module (it imports nothing of the project), so the workloads layer builds submissions
without importing the engine. ``Target`` is what the workloads send them to: an engine
(``simulator.engine.core.Engine``) or a fleet (``simulator.fleet.cluster.Cluster``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol


class Submission(NamedTuple):
    """One request (a named tuple: immutable, and built in a fraction of a frozen dataclass's time,
    which counts at one per request): its prompt and output lengths (``max_tokens``: the output it will produce),
    the shared-prefix group its prompt starts with (-1: none) and that prefix's length, its
    priority (lower first, with priority scheduling), its own content's key for the prefix cache
    (-1: the request's id; a session's turns share the session's), the closed-loop client that sent
    it and its client class (-1: none), the prompt tokens whose KV arrives with it (a disaggregated
    decode), the LoRA adapter it asks for (-1: the base model), and when it was sent if earlier than
    the moment it is handed over (None: now)."""

    prompt_len: int
    max_tokens: int
    group: int = -1
    group_len: int = 0
    priority: int = 0
    content_key: int = -1
    client: int = -1
    client_class: int = -1
    external: int = 0
    lora: int = -1
    sent: float | None = None


class Target(Protocol):
    """Where the workloads send requests: an engine or a fleet."""

    max_model_len: int

    def submit(self, s: Submission, want_event: bool = False) -> Any:
        """Hand over ``s`` now; with ``want_event``, an event that fires when the request ends."""
        ...


# A request as ``DirectTarget.submit_rows`` takes it: (prompt_len, max_tokens, group, group_len,
# priority, content_key, client, client_class, lora), the Submission fields a workload's single
# request or a trace's row sets.
RequestRow = tuple[int, int, int, int, int, int, int, int, int]

# A single request drawn ahead of its sending (``DrawAhead``): (prompt_len, max_tokens, group,
# group_len, priority, client_class, lora), then what drawing it added to the workload's counts of
# requests truncated and drawn again to fit max_model_len.
DrawnRow = tuple[int, int, int, int, int, int, int, int, int]


class DrawAhead(Protocol):
    """The single requests of one source, drawn ahead of their sending in the order they would have
    been drawn one at a time (``workloads.factory.RequestFactory``): ``rows_ahead(k)`` draws the next
    ``k``; ``unsent(truncated, resampled)`` takes back the counts of those never sent."""

    def rows_ahead(self, k: int) -> list[DrawnRow]: ...

    def unsent(self, truncated: int, resampled: int) -> None: ...


class DirectTarget(Protocol):
    """An engine the workloads hand requests to directly (``simulator.engine.core.Engine``; a fleet
    routes each one instead): ``chain(client, turns)`` has it call ``turns(clients)`` with the
    closed-loop clients whose requests just ended, once they learn of it; ``submit_rows(rows,
    times)`` takes requests in order without an event each, sent now or (``times``) each at its
    own time from now on; ``run_turns`` has the engine run a closed loop's turns itself."""

    def chain(self, client: int, turns: Callable[[list[int]], None]) -> None: ...

    def submit_rows(self, rows: list[RequestRow], times: list[float] | None = None) -> None: ...

    def run_turns(self, clients: range, source: DrawAhead) -> Callable[[list[int]], None] | None:
        """Run the turns of closed-loop ``clients`` inside the engine: clients that send their next
        request the moment they learn of their last one's end, with no limit on their number, the
        workload's only source, their requests drawn from ``source``. Returns what sends the given
        clients' first requests now (None: the engine does not run turns; ``chain`` them)."""
        ...
