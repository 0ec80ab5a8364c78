"""Fault injection for end-to-end tests: Python imports this module at start-up in every process
whose PYTHONPATH puts tests/faults first (a CLI run and, through inherited environments, its Ray
workers), and it changes nothing unless a fault variable is set.

ERL_FAULT_NAN_GRAD=<marker file>: the first gradient clipping of the run fills one gradient
with NaN, as a numerical blow-up would, then creates the marker, so the fault happens once per
run, restarts of its workers included. The actor's own code sees a non-finite gradient norm.

ERL_FAULT_KILL_ENV_SERVER=<marker file>: an env server (embodied_rl/envs/service/server.py) kills
itself with SIGKILL while it handles its ERL_FAULT_KILL_ENV_SERVER_AT-th step request (default 3),
once per run (the marker), as a simulator crash would kill it mid-step.

ERL_BLOCK_IMPORTS=mani_skill,sapien: those packages look not installed (import: "No module named",
find_spec: None), so a process and the Ray workers that inherit its environment cannot use the simulator.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import signal
import sys

TARGET = "embodied_rl.workers.actor.optim"
SERVER = "embodied_rl.envs.service.server"


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


def _kill_at_step(handle, marker: str, at: int):
    seen = [0]

    def wrapped(self, msg):
        if type(msg).__name__ == "Step":
            seen[0] += 1
            if seen[0] == at and not os.path.exists(marker):
                with open(marker, "w") as f:
                    f.write(f"pid {os.getpid()}\n")
                os.kill(os.getpid(), signal.SIGKILL)
        return handle(self, msg)

    return wrapped


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a module as it finishes loading, before anything binds what it patches."""

    def __init__(self, target: str, patch) -> None:
        self.target, self.patch = target, patch

    def find_spec(self, name, path, target=None):
        if name != self.target:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader, patch = spec.loader, self.patch

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                patch(module)

        spec.loader = _Loader()
        return spec


class _Absent(importlib.abc.MetaPathFinder):
    """`finder` without the packages `names`: to every import and find_spec they are not installed."""

    def __init__(self, names: set[str], finder) -> None:
        self.names, self.finder = names, finder

    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in self.names:
            return None
        return self.finder.find_spec(name, path, target)

    def invalidate_caches(self) -> None:
        if hasattr(self.finder, "invalidate_caches"):
            self.finder.invalidate_caches()

    def find_distributions(self, *args, **kwargs):  # package metadata stays readable (versions in environment.json)
        find = getattr(self.finder, "find_distributions", None)
        return find(*args, **kwargs) if find is not None else iter(())


def _poison(module) -> None:
    module.clip_gradients = _poison_once(module.clip_gradients, os.environ["ERL_FAULT_NAN_GRAD"])


def _killer(module) -> None:
    at = int(os.environ.get("ERL_FAULT_KILL_ENV_SERVER_AT", "3"))
    module.Session.handle = _kill_at_step(module.Session.handle, os.environ["ERL_FAULT_KILL_ENV_SERVER"], at)


if os.environ.get("ERL_FAULT_NAN_GRAD"):
    sys.meta_path.insert(0, _Finder(TARGET, _poison))
if os.environ.get("ERL_FAULT_KILL_ENV_SERVER"):
    sys.meta_path.insert(0, _Finder(SERVER, _killer))
if os.environ.get("ERL_BLOCK_IMPORTS"):
    _names = set(os.environ["ERL_BLOCK_IMPORTS"].split(","))
    sys.meta_path[:] = [_Absent(_names, f) for f in sys.meta_path]
