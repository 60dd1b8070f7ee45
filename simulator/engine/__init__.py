"""The engine: the step (compiled and reference), the rules both follow, what a step costs, and the SimPy process that runs it."""
