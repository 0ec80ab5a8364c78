"""Typed experiment configs: `load_config(name_or_path, overrides)` -> RootConfig.

Names are imported lazily so that importing a schema module (e.g. from a worker) never
pulls the loader in, and schema modules may import their subsystems without cycles.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "load_config": "embodied_rl.config.loader",
    "config_from_dict": "embodied_rl.config.loader",
    "save_resolved_config": "embodied_rl.config.loader",
    "to_dict": "embodied_rl.config.loader",
    "to_yaml": "embodied_rl.config.loader",
    "RootConfig": "embodied_rl.config.schema",
}

__all__ = ["RootConfig", "config_from_dict", "load_config", "save_resolved_config", "to_dict", "to_yaml"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'embodied_rl.config' has no attribute {name!r}")
