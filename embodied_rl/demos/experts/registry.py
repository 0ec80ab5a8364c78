"""Scripted experts by ManiSkill env id: `@register_expert("PickCube-v1")` on a `ScriptedExpert`."""
from __future__ import annotations

from collections.abc import Callable

from embodied_rl.demos.experts.base import ScriptedExpert
from embodied_rl.errors import ConfigError

_EXPERTS: dict[str, type[ScriptedExpert]] = {}


def register_expert(env_id: str) -> Callable[[type[ScriptedExpert]], type[ScriptedExpert]]:
    def wrap(cls: type[ScriptedExpert]) -> type[ScriptedExpert]:
        if env_id in _EXPERTS:
            raise ValueError(f"expert for {env_id!r} registered twice")
        _EXPERTS[env_id] = cls
        return cls

    return wrap


def expert_tasks() -> list[str]:
    return sorted(_EXPERTS)


def make_expert(env_id: str) -> ScriptedExpert:
    if env_id not in _EXPERTS:
        raise ConfigError(
            f"env.train.init_params.id={env_id!r} has no scripted expert; demos exist for {', '.join(expert_tasks())}"
        )
    return _EXPERTS[env_id]()
