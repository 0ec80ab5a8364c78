"""Scripted experts by ManiSkill env id: `@register_expert("PickCube-v1")` on a `ScriptedExpert`."""
from __future__ import annotations

from embodied_rl.demos.experts.base import ScriptedExpert
from embodied_rl.errors import ConfigError
from embodied_rl.registry import Registry

_EXPERTS: Registry = Registry("env.train.init_params.id")
register_expert = _EXPERTS.register


def expert_tasks() -> list[str]:
    return _EXPERTS.names()


def make_expert(env_id: str) -> ScriptedExpert:
    if env_id not in _EXPERTS:
        raise ConfigError(
            f"env.train.init_params.id={env_id!r} has no scripted expert; demos exist for {', '.join(expert_tasks())}"
        )
    return _EXPERTS.get(env_id)()
