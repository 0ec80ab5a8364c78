"""Fault injection for end-to-end tests: Python imports this module at start-up in every process
whose PYTHONPATH puts tests/faults first (a CLI run and, through inherited environments, its Ray
workers), and it changes nothing unless a fault variable is set.

ERL_FAULT_NAN_GRAD=<marker file>: the first gradient clipping of the run fills one gradient
with NaN, as a numerical blow-up would, then creates the marker, so the fault happens once per
run, restarts of its workers included. The actor's own code sees a non-finite gradient norm.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "embodied_rl.workers.actor.optim"


def _poison_once(clip_gradients, marker: str):
    def clip(sets, clip):
        if not os.path.exists(marker):
            grads = [p.grad for params in sets for p in params if p.grad is not None]
            if grads:
                grads[0].fill_(float("nan"))
                with open(marker, "w") as f:
                    f.write(f"pid {os.getpid()}\n")
        return clip_gradients(sets, clip)

    return clip


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps TARGET's clip_gradients as the module finishes loading, before anything binds it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, marker = spec.loader, self.marker

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                module.clip_gradients = _poison_once(module.clip_gradients, marker)

        spec.loader = _Loader()
        return spec


if os.environ.get("ERL_FAULT_NAN_GRAD"):
    sys.meta_path.insert(0, _Finder(os.environ["ERL_FAULT_NAN_GRAD"]))
