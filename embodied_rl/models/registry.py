"""Model registry keyed by `actor.model.model_type`; the only place policies are looked up by name."""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from embodied_rl.errors import ConfigError, DuplicateRegistration
from embodied_rl.registry import shadows_builtin

if TYPE_CHECKING:
    from embodied_rl.config.schema.model import ModelConfig
    from embodied_rl.models.base import BasePolicy

_POLICIES: dict[str, type[BasePolicy]] = {}

PRECISION_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def register_policy(name: str) -> Callable[[type[BasePolicy]], type[BasePolicy]]:
    def deco(cls: type[BasePolicy]) -> type[BasePolicy]:
        if _POLICIES.get(name, cls) is not cls or shadows_builtin(name, cls, BUILTIN_POLICIES):
            raise DuplicateRegistration(f"policy {name!r} registered twice")
        _POLICIES[name] = cls
        return cls
    return deco


# Built-in policies by the module that registers them, imported on first use: the config rules
# check a model type against these names without importing transformers and peft.
BUILTIN_POLICIES = {"openvla_oft": "embodied_rl.models.openvla_oft.policy",
                    "cnn_gaussian": "embodied_rl.models.cnn_gaussian.policy"}


def check_policy_type(model_type: str) -> None:
    """ConfigError unless a policy is registered, or built in, under `model_type` (imports nothing)."""
    if model_type not in _POLICIES and model_type not in BUILTIN_POLICIES:
        known = ", ".join(sorted(set(_POLICIES) | set(BUILTIN_POLICIES)))
        raise ConfigError(f"actor.model.model_type={model_type!r} is unknown; available: {known}")


def policy_class(model_type: str) -> type[BasePolicy]:
    check_policy_type(model_type)
    if model_type not in _POLICIES:
        importlib.import_module(BUILTIN_POLICIES[model_type])
    return _POLICIES[model_type]


def build_policy(model_cfg: ModelConfig, *, device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
                 warn_untrained_value_head: bool = True, init_seed: int = 0) -> BasePolicy:
    """Load `model_cfg.model_path` into the registered policy class. dtype None = model_cfg.precision.

    warn_untrained_value_head=False where the loaded value head is never used as is (see from_checkpoint)."""
    cls = policy_class(model_cfg.model_type)
    return cls.from_checkpoint(model_cfg.model_path, model_cfg, device=device, dtype=dtype or PRECISION_DTYPES[model_cfg.precision],
                               warn_untrained_value_head=warn_untrained_value_head, init_seed=init_seed)
