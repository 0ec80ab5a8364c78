"""Typed experiment configs: the schema, composition of YAML files and overrides, and the
registry of cross-key rules. Nothing here imports algorithms, envs, models or workers; the
validated `load_config` that runs every subsystem's rules is `embodied_rl.configure.load_config`.

Names are imported lazily so that importing a schema module (e.g. from a worker) never
pulls the loader in.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "save_resolved_config": "embodied_rl.config.loader",
    "to_dict": "embodied_rl.config.loader",
    "to_yaml": "embodied_rl.config.loader",
    "RootConfig": "embodied_rl.config.schema",
}

__all__ = ["RootConfig", "save_resolved_config", "to_dict", "to_yaml"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'embodied_rl.config' has no attribute {name!r}")
