"""The readable reference of the engine step: one request at a time, like vLLM's own scheduler.

``block_pool.py`` (free queue, reference counts, the prefix-cache index), ``kv_cache.py`` (block
tables, prefix lookups), ``scheduler.py`` (one ``schedule()`` and one ``update()`` per step) and
``engine.py`` (the SimPy process around them). Plain Python with no fast paths: it is the oracle the
compiled production step (``simulator/engine/compiled/``) is compared with, byte for byte, and what
``servesim parity`` replays against recorded vLLM traces. ``run.kernel: reference`` runs it.
"""
