"""PushCube-v1: gripper closed, behind the cube (-x), down to cube height, push to the target."""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.demos.experts.base import (
    GRIPPER_CLOSED,
    Hold,
    Reach,
    StagedExpert,
    position,
)
from embodied_rl.demos.experts.registry import register_expert

BEHIND = np.array([-0.06, 0.0, 0.04])  # above and behind, so the TCP does not hit the cube on the way
STOP_SHORT = np.array([-0.03, 0.0, 0.0])  # the TCP stops before the target's centre: the cube is in front


@register_expert("PushCube-v1")
class PushCubeExpert(StagedExpert):
    def stages(self, task: Any, tcp: np.ndarray) -> list[Reach | Hold]:
        cube, goal = position(task.obj), position(task.goal_region)
        low = cube + BEHIND * np.array([1.0, 1.0, 0.0])
        target = np.array([goal[0], goal[1], cube[2]]) + STOP_SHORT
        return [Reach(cube + BEHIND, GRIPPER_CLOSED), Reach(low, GRIPPER_CLOSED),
                Reach(target, GRIPPER_CLOSED)]
