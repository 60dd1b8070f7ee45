"""``servesim trace generate``: run a scenario and write every request it submitted as a trace
(the format ``workloads/trace.py`` reads and writes, docs/workloads.md)."""

from __future__ import annotations

from pathlib import Path

from simulator.config import load_scenario
from simulator.run import simulate
from workloads.trace import SESSION_KEY_BASE, write_trace


def trace_rows(result) -> list[dict]:
    """Every submitted request of a finished simulation as trace rows (in submission order)."""
    c = result.reqs.columns()
    rows = []
    for i in range(len(c["arrival"])):
        g, key = int(c["group"][i]), int(c["content_key"][i])
        cls, cl = int(c["client_class"][i]), int(c["client"][i])
        rows.append(
            {
                "arrival_time_s": float(c["arrival"][i]),
                "prompt_tokens": int(c["prompt_len"][i]),
                "output_tokens": int(c["max_tokens"][i]),
                "prefix_group": g if g >= 0 else None,
                "prefix_tokens": int(c["group_len"][i]) if g >= 0 else None,
                "session_id": key - SESSION_KEY_BASE if key >= SESSION_KEY_BASE else None,
                "client_class": cls if cls >= 0 else None,
                "priority": int(c["priority"][i]),
                "client": cl if cl >= 0 else None,
            }
        )
    return rows


def generate_trace(scenario, path: str | Path, overrides: list[str] | None = None) -> int:
    """Run ``scenario`` (a Scenario, or a YAML path) and write every submitted request to ``path``. Returns the count."""
    if scenario is None or isinstance(scenario, (str, Path)):
        scenario, _ = load_scenario(None if scenario is None else str(scenario), overrides)
    rows = trace_rows(simulate(scenario))
    write_trace(rows, path)
    return len(rows)
