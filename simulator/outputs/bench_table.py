"""A ``servesim bench`` replay's figures beside the benchmark's: which figures, in the order and with
the labels `vllm bench serve` prints them, and the table of both (the command prints it, the run's
report page shows it)."""

from __future__ import annotations

import math

# The figures set side by side: (the benchmark's key, which summary.json shares, its line's label).
ROWS = (
    ("request_throughput", "Request throughput (req/s)"),
    ("output_throughput", "Output token throughput (tok/s)"),
    ("total_token_throughput", "Total token throughput (tok/s)"),
    ("mean_ttft_ms", "Mean TTFT (ms)"),
    ("median_ttft_ms", "Median TTFT (ms)"),
    ("p99_ttft_ms", "P99 TTFT (ms)"),
    ("mean_tpot_ms", "Mean TPOT (ms)"),
    ("median_tpot_ms", "Median TPOT (ms)"),
    ("p99_tpot_ms", "P99 TPOT (ms)"),
    ("mean_itl_ms", "Mean ITL (ms)"),
    ("median_itl_ms", "Median ITL (ms)"),
    ("p99_itl_ms", "P99 ITL (ms)"),
    ("mean_e2el_ms", "Mean E2EL (ms)"),
    ("median_e2el_ms", "Median E2EL (ms)"),
    ("p99_e2el_ms", "P99 E2EL (ms)"),
)
SECTIONS = {"mean_ttft_ms": "Time to First Token", "mean_tpot_ms": "Time per Output Token (excl. 1st)",
            "mean_itl_ms": "Inter-token Latency", "mean_e2el_ms": "End-to-end Latency"}  # fmt: skip


def compare_rows(measured: dict, simulated: dict) -> list[tuple[str, str, float, float | None, float | None]]:
    """(key, label, the benchmark's figure, servesim's, servesim's error) for each figure the file has."""
    out = []
    for key, label in ROWS:
        m = measured.get(key)
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m):
            continue
        s = simulated.get(key)
        out.append((key, label, float(m), s, error(m, s)))
    return out


def error(measured, simulated) -> float | None:
    """servesim's figure over the benchmark's, less 1 (None where either is missing or the measured is 0)."""
    ok = isinstance(simulated, (int, float)) and isinstance(measured, (int, float)) and measured > 0
    return simulated / measured - 1.0 if ok else None


def format_rows(rows: list, title: str) -> str:
    """The comparison in the benchmark's layout, a column each."""
    w = 40
    lines = [f"{' ' + title + ' ':=^{w + 36}}", f"{'':<{w}}{'vllm bench':>12}{'servesim':>12}{'error':>12}"]
    for key, label, m, s, err in rows:
        if key in SECTIONS:
            lines.append(f"{' ' + SECTIONS[key] + ' ':-^{w + 36}}")
        sv = f"{s:,.2f}" if isinstance(s, (int, float)) else "-"
        ev = f"{err:+.1%}" if err is not None else "-"
        lines.append(f"{label:<{w}}{m:>12,.2f}{sv:>12}{ev:>12}")
    lines.append("=" * (w + 36))
    return "\n".join(lines)
