"""Plug-ins: a user's own package adds policies, simulators, advantage estimators, training
updates and metric sinks without editing this repository.

A plug-in is a Python module whose import registers its parts with the registries they belong
to (`register_policy` + `register_model_config`, `register_simulator`, `ADVANTAGE_ESTIMATORS`,
`UPDATES`, `METRIC_SINKS`). Two ways to name one:

- the config's top-level `plugins: [my_pkg.embodied, ...]`, for one run;
- an installed distribution's entry point in the group `embodied_rl.plugins`
  (`[project.entry-points."embodied_rl.plugins"] my_pkg = "my_pkg.embodied"`), for every run.

Plug-ins are imported before the config is checked (so their names pass the checks) and again in
every worker process before the worker is built (Ray actors are fresh interpreters; the module
must be importable there, e.g. installed in the same environment or on PYTHONPATH).
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

from embodied_rl.errors import ConfigError, DuplicateRegistration

ENTRY_POINT_GROUP = "embodied_rl.plugins"
_loaded: set[str] = set()


def load_plugins(modules: Sequence[str] = ()) -> list[str]:
    """Import the installed entry-point plug-ins and `modules` (each once per process).

    Returns the modules imported by this call. A module that does not import or registers a
    name that is taken is one ConfigError line naming the module (and the name)."""
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, str) and m for m in modules):
        raise ConfigError(f"plugins: expected a list of module names, got {modules!r}")
    imported = []
    for name, module in _entry_point_modules(tuple(sys.path)):
        if _import_once(module, f"entry point {name!r} of group {ENTRY_POINT_GROUP}"):
            imported.append(module)
    for module in modules:
        if _import_once(module, f"plugins: module {module!r}"):
            imported.append(module)
    return imported


def loaded() -> tuple[str, ...]:
    """The plug-in modules this process has imported (entry points and config `plugins`)."""
    return tuple(sorted(_loaded))


@functools.lru_cache(maxsize=4)
def _entry_point_modules(path: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(entry name, module) of the plug-ins installed on this sys.path. Reading every installed
    distribution's metadata took about half of a config load's time, and a process loads configs
    many times; a distribution installed while it runs is seen by the next process."""
    del path  # the cache key: what importlib.metadata scans
    return tuple((e.name, e.value.split(":")[0]) for e in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _import_once(module: str, where: str) -> bool:
    if module in _loaded:
        return False
    try:
        importlib.import_module(module)
    except DuplicateRegistration as err:
        raise ConfigError(f"{where}: {err}; rename its entry (names must be unique, built-ins included)") from err
    except ImportError as err:
        raise ConfigError(f"{where} does not import ({type(err).__name__}: {err}); install it or put its "
                          "directory on PYTHONPATH") from err
    _loaded.add(module)
    return True
