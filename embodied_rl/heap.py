"""Python's cyclic garbage collector while a process starts.

Every process of a run imports torch, and the policy workers transformers and timm, the
simulator processes ManiSkill or LIBERO: several hundred thousand objects that live as long as the
process. While they are made, CPython collects its oldest generation again and again over all of
them (about 1 CPU-s of a policy worker's 5 s of imports), and every later full collection scans
them again (ManiSkill calls gc.collect() at each scene rebuild and close). So a process starts
`quiet()` (Ray workers through the session's worker_process_setup_hook; a collection after START_THRESHOLD new objects instead of CPython's 700) and, once set
up, `settle()`s: one collection, then gc.freeze() moves the survivors to the permanent generation,
which collections skip, and CPython's thresholds come back for the rest of the run (the runtime
settles the driver and every worker once all groups are ready). A process
forked after settle() (a sub-env from the pool's fork server) starts with the frozen heap.
`python benchmarks/heap_start.py` measures both effects.
"""
from __future__ import annotations

import atexit
import gc

#: New container objects between young-generation collections during start-up (CPython: 700).
START_THRESHOLD = 100_000
_RUN_THRESHOLDS = gc.get_threshold()


def quiet() -> None:
    """Collect rarely while the process imports and builds what it keeps (until settle())."""
    gc.set_threshold(START_THRESHOLD, *_RUN_THRESHOLDS[1:])


def settle() -> None:
    """Start-up is over: collect once, exempt what survives from later collections, and collect
    at CPython's usual pace from now on."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_RUN_THRESHOLDS)
    # At exit the frozen objects must be collectable again: extension modules check that their
    # objects were freed (nanobind's, in triton, prints a leak report otherwise).
    atexit.unregister(gc.unfreeze)
    atexit.register(gc.unfreeze)


def settle_worker(_worker: object) -> None:
    """settle() in a Ray worker's process, through `worker.__ray_call__` (runtime/groups.py)."""
    settle()
