"""Real simulator backends shared by the configs of a long test: each distinct constructor input
builds one simulator, kept (least recently used first out, within a memory budget) until the
test ends. A config that changes what the constructor reads gets a new simulator, so a key
that acts on the simulator still shows its effect."""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

# Memory of the simulators kept alive, in GB per sub-env process by simulator (measured RSS);
# the least recently used simulators go first.
MAX_SIM_GB = 8
SIM_PROCESS_GB = {"libero": 2}


_CACHE_LOCK = threading.Lock()
_FAILED: dict[str, Exception] = {}


def _caching_backend(name: str, real_cls: type, cache: OrderedDict[str, Any]) -> type:
    from embodied_rl.envs.backend import SimulatorBackend

    class Shared(SimulatorBackend):
        params_cls = real_cls.params_cls

        def __init__(self, cfg, params, num_envs: int, *, seed: int) -> None:
            key = repr((real_cls.__name__, dataclasses.asdict(params), cfg.task_description,
                        dataclasses.asdict(cfg.subproc), num_envs, seed))
            with _CACHE_LOCK:  # the first simulator is built in the background
                if key in _FAILED:  # the same inputs fail the same way: not built again
                    raise _FAILED[key]
                if key not in cache:
                    gb = num_envs * SIM_PROCESS_GB.get(name, 1)
                    while cache and sum(b.walk_gb for b in cache.values()) + gb > MAX_SIM_GB:
                        cache.popitem(last=False)[1].close()
                    try:
                        cache[key] = real_cls(cfg, params, num_envs, seed=seed)
                    except Exception as err:
                        _FAILED[key] = err
                        raise
                    cache[key].walk_gb = gb
                cache.move_to_end(key)
                self.key, self.inner, self.num_envs = key, cache[key], num_envs

        def _guard(self, fn, *args):
            try:
                return fn(*args)
            except BaseException:  # a broken simulator is rebuilt on next use
                with _CACHE_LOCK:
                    cache.pop(self.key, None)
                self.inner.close()
                raise

        def reset(self, env_ids, reset_ids):
            return self._guard(self.inner.reset, env_ids, reset_ids)

        def step(self, actions, env_ids=None, render=True):
            return self._guard(self.inner.step, actions, env_ids, render)

        @property
        def renders_on_demand(self) -> bool:
            return self.inner.renders_on_demand

        def observe(self, env_ids):
            return self._guard(self.inner.observe, env_ids)

        @property
        def action_dim(self) -> int:
            return self.inner.action_dim

        def num_reset_ids(self):
            return self.inner.num_reset_ids()

        @classmethod
        def reset_id_space(cls, params, split: str):
            return real_cls.reset_id_space(params, split)

        def task_of(self, env_index: int):
            return self.inner.task_of(env_index)

        def close(self) -> None:  # shared: closed when the walk ends
            pass

    return Shared


@contextlib.contextmanager
def cached_simulators() -> Iterator[OrderedDict[str, Any]]:
    """Swap every registered simulator backend for its caching wrapper; restore and close on exit."""
    from embodied_rl.envs import backend as registry

    registry.available_simulators()  # imports the built-in backends
    real = dict(registry._SIMULATORS)
    cache: OrderedDict[str, Any] = OrderedDict()
    registry._SIMULATORS.update({name: _caching_backend(name, cls, cache) for name, cls in real.items()})
    try:
        yield cache
    finally:
        registry._SIMULATORS.update(real)
        _FAILED.clear()
        for b in cache.values():
            b.close()
