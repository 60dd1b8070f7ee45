"""The GPU step profiler (``python -m tools.profiler --help``): measurements the cost model is
calibrated against, taken on a real GPU; see ``__main__.py``."""
