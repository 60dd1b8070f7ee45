"""The API server in front of the engine: when a request reaches the engine, when a token reaches
its client.

vLLM's OpenAI server runs one asyncio event loop per API-server process. On it, each request is a
task that takes itself in (HTTP parsing, validation, the chat template, tokenization, the request
to the engine), and after each engine step the step's outputs are processed (detokenizing every new
token, building and writing the stream's chunks). The engine runs in its own process; a busy
front-end delays requests on their way in and tokens on their way out, and, from vLLM 0.26 on
(``paces_engine``), the engine itself: it starts no step while the outputs of the step before it
still wait for the front-end (``step_start``). A recorded 0.26 engine generated 9.6k tokens/s
behind one API server and 13.1k behind four at the same 60 requests/s, and the rule fits the
recorded servers better than an engine that runs ahead (docs/validation.md, "Overload"), with one
set of host costs for every machine. It is a stand-in: profiled past saturation, the server's
engine never waited for its API server; it took every request in and ran ahead, and with that
machine's own host costs an engine that runs ahead matches it (docs/validation.md, "Where the time
goes, profiled"). The public runs of 0.10-0.19 fit an engine that runs ahead. Modelled as one
server whose costs the ``api_server_count`` processes share (``cost.FrontendCosts``, already
divided by them):

* intake is a first-come-first-served queue of work, one piece at a time. A request's intake
  comes in two passes (``intake_passes``): the share done before its task first yields the loop
  (``first_pass``: parsing, validation, the chat template), queued when it arrives; and the rest
  (the tokenizer's result, the hand-off to the engine), queued when the first pass ends, behind
  everything queued meanwhile. It reaches the engine when its second pass ends, plus a fixed
  latency (network, process hops) that occupies nothing;
* a client that sends its next request as its last one ends (a closed loop) has it taken in only
  ``rounds`` rounds of its API server's streams later (``turnaround``; a round: one step's outputs
  for every request in flight, shared by the API servers). The recorded 0.26 servers' own TTFT
  (stamped when rendering starts) was shorter than their closed-loop clients' by 7.9-10.4 such
  rounds on the calibration runs of 256-3,200 clients (median 9.17,
  tools/validation/intake_rounds.py; 6.8-22.5 on the held-out ones), and by 0.5-1.3 for Poisson
  arrivals at the same loads; the benchmark client's own loop is a tenth of it
  (data/e2e/client_loop_2026-11-27). Which of the API server's steps makes the wait is not known;
  it occupies nothing the model counts as work (``engine.with_turnaround`` applies it);
* a step's outputs are one batch of work, processed after the step ends, after the batches before
  them and the piece of intake in progress (``intake_busy``), ahead of the intake still queued: the
  loop streams tokens while a burst is still being taken in;
* a piece of intake waits for the outputs queued when they are one batch at most, and otherwise
  goes ahead of the batches not started (``intake_start``): the backlog waits in the engine's output
  socket until the loop's output task takes the next batch, while a new request's task runs as soon
  as the loop comes round to it. The batches it overtakes are pushed back by its work
  (``after_intake``). When streaming alone is more than the loop can do, the outputs fall behind the
  engine by seconds while requests still reach it: as the recorded 0.26 servers show (data/e2e/: at
  1,000-3,000 clients the engine's own decode times were a third shorter than the clients', and its
  queues stayed short).

A burst of N requests sent at once thus reaches the engine from about N first passes on, one by
one, its first tokens streamed in between; its TTFTs spread evenly from there to the end of its
intake, as the public bursts show (TTFT median close to the mean, p99 well under twice it, the
earliest late): not from zero (``first_pass`` 1), nor all at the end.

These functions read the front-end's constants from the cost model's parameter vector and are
compiled into the production step with the rest of it (``simulator.engine.compiled.build``).
"""

from __future__ import annotations

from simulator.engine.params import P


def intake_passes(cp, prompt_tokens):
    """Seconds of front-end work to take in a request of ``prompt_tokens``: (first pass, second
    pass); (0, 0) without a front-end."""
    if cp[P.FE_ON] == 0.0:
        return 0.0, 0.0
    work = cp[P.FE_REQUEST_S] + cp[P.FE_PROMPT_TOKEN_S] * prompt_tokens
    first = cp[P.FE_FIRST_PASS] * work
    return first, work - first


def busy_until(outputs_free, intake_busy):
    """When the one server is next free for new work: the outputs queued before it and the piece of
    intake in progress are done (queued intake waits behind new outputs, so it does not count)."""
    return max(outputs_free, intake_busy)


def queued_end(free_at, now, work):
    """When work queued at ``now`` behind the queue's work (done at ``free_at``) is done."""
    return max(now, free_at) + work


def reaches_engine(cp, intake_done):
    """When a request taken in at ``intake_done`` reaches the engine (after the fixed latency)."""
    return intake_done + cp[P.FE_LATENCY_S]


def turnaround(cp, previous_end, streams):
    """When the API server starts taking in a request whose client's previous request ended at
    ``previous_end``: ``rounds`` rounds of its loop later, each the work of one step's outputs for
    ``streams`` requests in flight (shared by the API servers)."""
    return previous_end + cp[P.FE_ROUNDS] * (cp[P.FE_STEP_S] + cp[P.FE_TOKEN_S] * streams)


def delivered(cp, free_at, intake_busy, t_end, num_tokens, num_finished):
    """(start, end) of the batch of outputs of a step that ends at ``t_end``: its ``num_tokens``
    tokens reach their clients at the end, the last ones of ``num_finished`` requests among them;
    it starts after the batches before it (done at ``free_at``) and the piece of intake in progress
    (done at ``intake_busy``). The front-end's outputs are then busy until its end, if it processed
    any. Without a front-end (or tokens), both are ``t_end``."""
    if cp[P.FE_ON] == 0.0 or num_tokens == 0:
        return t_end, t_end
    start = max(t_end, busy_until(free_at, intake_busy))
    return start, start + cp[P.FE_STEP_S] + cp[P.FE_TOKEN_S] * num_tokens + cp[P.FE_FINISH_S] * num_finished


def step_start(cp, now, batch_start):
    """When the engine may start its next step: at once, unless the front-end paces it
    (``paces_engine``): then not before the front-end starts on the outputs of the step before
    (``batch_start``, the start of the last batch queued). The engine is thus at most one step of
    outputs ahead of its API server: while the API server keeps up, the GPU's step and the API
    server's processing of the step before overlap; once it does not, the engine steps at its pace.
    Without a front-end, ``now``."""
    if cp[P.FE_PACE] == 0.0 or batch_start <= now:
        return now
    return batch_start


def intake_start(now, intake_busy, free_at, batch_start):
    """When a piece of intake queued at ``now`` can start: after the piece of intake in progress,
    then after the outputs queued if they are one batch at most (the last one queued runs from
    ``batch_start`` to ``free_at``); with more queued than that, at once, ahead of the batches not
    started: the output task takes one batch at a time off the engine's socket, while a new
    request's task runs as soon as the loop comes round to it, so a backlog of outputs does not hold
    the intake back."""
    t = max(now, intake_busy)
    if free_at - t > free_at - batch_start:  # more than the last batch still to do
        return t
    return max(t, free_at)


def after_intake(free_at, batch_start, start, work):
    """The output batches' (end, last start) once a piece of intake of ``work`` seconds has run from
    ``start``: the batches not yet started then wait for it."""
    if free_at > start:
        return free_at + work, max(batch_start, start) + work
    return free_at, batch_start
