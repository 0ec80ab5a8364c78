"""PushCube-v1: gripper closed, behind the cube (-x), down to cube height, push to the target."""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.demos.experts.base import (
    GRIPPER_CLOSED,
    ScriptedExpert,
    move_toward,
    position,
)
from embodied_rl.demos.experts.registry import register_expert

BEHIND = np.array([-0.06, 0.0, 0.04])  # above and behind, so the TCP does not hit the cube on the way
REACHED = 0.01
STOP_SHORT = np.array([-0.03, 0.0, 0.0])  # the TCP stops before the target's centre: the cube is in front


@register_expert("PushCube-v1")
class PushCubeExpert(ScriptedExpert):
    def reset(self) -> None:
        self.phase = "behind"

    def act(self, task: Any) -> np.ndarray:
        tcp, cube = self.tcp(task), position(task.obj)
        low = cube + BEHIND * np.array([1.0, 1.0, 0.0])
        if self.phase == "behind":
            if np.linalg.norm(cube + BEHIND - tcp) < REACHED:
                self.phase = "lower"
            else:
                return move_toward(tcp, cube + BEHIND, GRIPPER_CLOSED)
        if self.phase == "lower":
            if np.linalg.norm(low - tcp) < REACHED:
                self.phase = "push"
            else:
                return move_toward(tcp, low, GRIPPER_CLOSED)
        goal = position(task.goal_region)
        target = np.array([goal[0], goal[1], cube[2]]) + STOP_SHORT
        return move_toward(tcp, target, GRIPPER_CLOSED)
