"""The API server in front of the engine: when a request reaches the engine, when a token reaches
its client.

vLLM's OpenAI server runs one asyncio event loop per API-server process. On it, in arrival order,
it takes each request in (HTTP parsing, validation, the chat template, tokenization, the request to
the engine), and after each engine step it processes the step's outputs (detokenizing every new
token, building and writing the stream's chunks). The engine runs in its own process and never
waits for the front-end; a busy front-end delays requests on their way in and tokens on their way
out. Modelled as one first-come-first-served server whose costs the ``api_server_count`` processes
share (``cost.FrontendCosts``, already divided by it): it is free at ``free_at``; a request that
arrives at ``now`` reaches the engine when its intake ends, plus a fixed latency (network, process
hops) that occupies nothing; a step that ends at ``t`` with tokens
delivers them when the server has processed them. A burst of requests thus delays the first
tokens of all of them behind the whole burst's intake, as a real server does.

These functions read the front-end's constants from the cost model's parameter vector and are
compiled into the production step with the rest of it (``simulator.kernel.build``).
"""

from __future__ import annotations

from simulator.cost import P_FE_FINISH, P_FE_LATENCY, P_FE_ON, P_FE_PROMPT_TOKEN, P_FE_REQUEST, P_FE_STEP, P_FE_TOKEN


def intake_end(cp, free_at, now, prompt_tokens):
    """When the front-end has taken in a request that arrives at ``now`` with ``prompt_tokens``
    (it is busy until then)."""
    if cp[P_FE_ON] == 0.0:
        return now
    return max(now, free_at) + cp[P_FE_REQUEST] + cp[P_FE_PROMPT_TOKEN] * prompt_tokens


def reaches_engine(cp, intake_done):
    """When a request taken in at ``intake_done`` reaches the engine (after the fixed latency)."""
    return intake_done + cp[P_FE_LATENCY]


def delivered(cp, free_at, t_end, num_tokens, num_finished):
    """When the ``num_tokens`` tokens of a step that ends at ``t_end`` reach their clients, the last
    ones of ``num_finished`` requests among them (the front-end is then busy until that time, if it
    processed any)."""
    if cp[P_FE_ON] == 0.0 or num_tokens == 0:
        return t_end
    return max(t_end, free_at) + cp[P_FE_STEP] + cp[P_FE_TOKEN] * num_tokens + cp[P_FE_FINISH] * num_finished
