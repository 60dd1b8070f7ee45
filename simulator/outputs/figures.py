"""Figures as a reader sees them, written one way wherever they appear (a table, a plot's legend, a
recommendation), so that a printed figure and a plotted one agree to the digits shown."""

from __future__ import annotations

import math


def share(x: float | None, digits: int = 1, most: int = 6) -> str:
    """A share (0.99995) as a percentage with ``digits`` decimals, more where those would round it to
    100% or 0% though it is neither ("99.995%", not "100.0%"); "-" for none."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    d = digits
    while d < most and ((x < 1 and f"{x:.{d}%}" == f"{1:.{d}%}") or (x > 0 and f"{x:.{d}%}" == f"{0:.{d}%}")):
        d += 1
    return f"{x:.{d}%}"
