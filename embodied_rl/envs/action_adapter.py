"""Policy actions -> controller actions, configured per env config (`action_adapter`).

Order, per action vector a [A]:
  1. out = a * scale + offset            (per-dimension or one shared value)
  2. gripper dimension: if the convention is not `none`, out[g] = convention(a[g]) on the raw
     policy value (a binarised gripper must not be rescaled afterwards)
  3. clip to [low, high] when `clip` is set.
Gripper conventions live in a registry, so a new robot/model pairing is one function, never a
model-type switch.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from embodied_rl.config.schema.env import ActionAdapterConfig
from embodied_rl.errors import ConfigError

GripperFn = Callable[[np.ndarray, float], np.ndarray]

_GRIPPER_CONVENTIONS: dict[str, GripperFn | None] = {}


def register_gripper_convention(name: str, fn: GripperFn | None) -> None:
    """fn(raw_gripper [...], threshold) -> controller gripper [...]; None = leave to scale/offset."""
    if name in _GRIPPER_CONVENTIONS:
        raise ValueError(f"gripper convention {name!r} registered twice")
    _GRIPPER_CONVENTIONS[name] = fn


register_gripper_convention("none", None)
# policy gripper in [0, 1] (1 = open, bridge/ManiSkill) -> controller -1 closed / +1 open
register_gripper_convention("binarize", lambda g, thr: np.where(g > thr, 1.0, -1.0))
# OFT trained on LIBERO data outputs 1 = close in [0, 1]; LIBERO's controller wants -1 = open.
register_gripper_convention("flip_binarize", lambda g, thr: -np.sign(2.0 * g - 1.0))


def gripper_conventions() -> list[str]:
    return sorted(_GRIPPER_CONVENTIONS)


def _per_dim(values: list[float], action_dim: int, key: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float32)
    if arr.ndim != 1 or arr.size not in (1, action_dim):
        raise ConfigError(
            f"env.action_adapter.{key} has {arr.size} values; give 1 (shared) or {action_dim} (one per action dim)"
        )
    return np.broadcast_to(arr, (action_dim,)).copy()


class ActionAdapter:
    """Callable: policy actions float [..., A] -> float32 controller actions [..., A]."""

    def __init__(self, cfg: ActionAdapterConfig, action_dim: int) -> None:
        self.action_dim = action_dim
        self.scale = _per_dim(cfg.scale, action_dim, "scale")
        self.offset = _per_dim(cfg.offset, action_dim, "offset")
        self.identity = bool(np.all(self.scale == 1.0) and np.all(self.offset == 0.0))
        self.clip: tuple[float, float] | None = None
        if cfg.clip is not None:
            if len(cfg.clip) != 2 or cfg.clip[0] >= cfg.clip[1]:
                raise ConfigError(f"env.action_adapter.clip={cfg.clip!r} must be [low, high] with low < high, or null")
            self.clip = (float(cfg.clip[0]), float(cfg.clip[1]))
        name = cfg.gripper.convention
        if name not in _GRIPPER_CONVENTIONS:
            raise ConfigError(
                f"env.action_adapter.gripper.convention={name!r} is unknown; valid: {', '.join(gripper_conventions())}"
            )
        self.gripper_fn = _GRIPPER_CONVENTIONS[name]
        if not -action_dim <= cfg.gripper.index < action_dim:
            raise ConfigError(f"env.action_adapter.gripper.index={cfg.gripper.index} is outside an action of {action_dim} dims")
        self.gripper_index = cfg.gripper.index % action_dim
        self.threshold = float(cfg.gripper.threshold)

    def __call__(self, actions: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        if actions.shape[-1] != self.action_dim:
            raise ValueError(f"actions have {actions.shape[-1]} dims, the controller expects {self.action_dim}")
        if out is None:
            out = np.empty(actions.shape, dtype=np.float32)
        if self.identity:
            np.copyto(out, actions, casting="same_kind")
        else:
            np.multiply(actions, self.scale, out=out, casting="same_kind")
            out += self.offset
        if self.gripper_fn is not None:
            g = self.gripper_index
            out[..., g] = self.gripper_fn(actions[..., g], self.threshold)
        if self.clip is not None:
            np.clip(out, self.clip[0], self.clip[1], out=out)
        return out
