"""Controller actions -> the policy's action convention: the inverse of the env's action adapter.

SFT must learn what the policy outputs (e.g. ManiSkill's gripper as a value in [0, 1], 1 =
open, binarised by the adapter), not what the controller receives. Every mapped action is
pushed back through the real `ActionAdapter` and must reproduce the controller action, so a
dataset can never hold actions the policy's env would execute differently.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from embodied_rl.config.schema.env import ActionAdapterConfig
from embodied_rl.envs.action_adapter import ActionAdapter
from embodied_rl.errors import ConfigError

# controller gripper (-1 closed / +1 open) -> a policy value the convention maps back to it
_INVERSE_GRIPPER: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "binarize": lambda g: np.where(g > 0, 1.0, 0.0),  # policy 1 = open
    "flip_binarize": lambda g: np.where(g > 0, 0.0, 1.0),  # policy 1 = close (OFT on LIBERO)
}


class PolicyActionMap:
    """Callable: controller actions float [..., A] -> float32 policy actions [..., A]."""

    def __init__(self, cfg: ActionAdapterConfig, action_dim: int) -> None:
        self.adapter = ActionAdapter(cfg, action_dim)
        if np.any(self.adapter.scale == 0):
            raise ConfigError("env.action_adapter.scale has a 0: controller actions cannot be mapped back to policy actions")
        convention = cfg.gripper.convention
        if convention != "none" and convention not in _INVERSE_GRIPPER:
            raise ConfigError(
                f"env.action_adapter.gripper.convention={convention!r} has no inverse for demos; "
                f"known: none, {', '.join(sorted(_INVERSE_GRIPPER))}"
            )
        self.inverse_gripper = _INVERSE_GRIPPER.get(convention)

    def __call__(self, controller: np.ndarray) -> np.ndarray:
        policy = ((controller - self.adapter.offset) / self.adapter.scale).astype(np.float32)
        if self.inverse_gripper is not None:
            g = self.adapter.gripper_index
            policy[..., g] = self.inverse_gripper(controller[..., g])
        back = self.adapter(policy)
        if not np.allclose(back, controller, atol=1e-5):
            raise ConfigError(
                f"env.action_adapter cannot express the expert's controller action {np.round(controller, 4).tolist()} "
                f"(it maps the policy action back to {np.round(back, 4).tolist()}); check its scale, offset and clip"
            )
        return policy
