"""Request traffic for servesim: length distributions and arrival processes (SimPy processes)."""
