"""Measurement and maintenance tools that use the simulator package (never imported by it)."""
