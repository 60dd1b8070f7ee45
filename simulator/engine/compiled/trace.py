"""Request events of the compiled step, recorded when ``cfg[TRACE]`` asks for them (for the step-by-
step parity replay, and for timelines of requests)."""

from __future__ import annotations

import numpy as np

from simulator.engine.compiled.layout import TRACE, TRACE_N

COLD = ()  # not inlined (see build.py)


def record(st, t, kind, rid, value):
    """Append a trace row, if tracing is on (the caller made room for a step's rows)."""
    if st.cfg[TRACE] != 0:
        n = st.ctl[TRACE_N]
        st.trace[n, 0] = t
        # kind (an EventKind) and value (a count, or a PreemptionKind) as plain integers: an IntEnum
        # member does not convert to a float by itself in the compiled step
        st.trace[n, 1] = np.int64(kind)
        st.trace[n, 2] = rid
        st.trace[n, 3] = np.int64(value)
        st.ctl[TRACE_N] = n + 1
