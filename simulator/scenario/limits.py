"""Bounds a scenario's fields share with the engine's fixed-size state (the compiled step's slots
are sized by them, and the scenario refuses what would not fit)."""

SPEC_MAX_TOKENS = 16  # most draft tokens a step may propose per request
