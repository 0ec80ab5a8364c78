"""PickCube-v1: above the cube, down, close, carry the cube to the (hidden) goal."""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.demos.experts.base import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    ScriptedExpert,
    move_toward,
    position,
)
from embodied_rl.demos.experts.registry import register_expert

HOVER = np.array([0.0, 0.0, 0.06])  # approach from above so the open fingers clear the cube
REACHED = 0.01  # metres: close enough to switch phase
CLOSE_STEPS = 6  # the fingers need a few control steps to close before lifting


@register_expert("PickCube-v1")
class PickCubeExpert(ScriptedExpert):
    def reset(self) -> None:
        self.phase, self.closing = "hover", 0

    def act(self, task: Any) -> np.ndarray:
        tcp, cube = self.tcp(task), position(task.cube)
        if self.phase == "hover":
            if np.linalg.norm(cube + HOVER - tcp) < REACHED:
                self.phase = "descend"
            else:
                return move_toward(tcp, cube + HOVER, GRIPPER_OPEN)
        if self.phase == "descend":
            if np.linalg.norm(cube - tcp) < REACHED:
                self.phase = "close"
            else:
                return move_toward(tcp, cube, GRIPPER_OPEN)
        if self.phase == "close" and self.closing < CLOSE_STEPS:
            self.closing += 1
            return move_toward(tcp, cube, GRIPPER_CLOSED)
        self.phase = "carry"
        return move_toward(tcp, position(task.goal_site), GRIPPER_CLOSED)
