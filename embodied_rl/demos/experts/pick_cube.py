"""PickCube-v1: above the cube, down, close, carry the cube to the (hidden) goal."""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.demos.experts.base import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    Hold,
    Reach,
    StagedExpert,
    position,
)
from embodied_rl.demos.experts.registry import register_expert

HOVER = np.array([0.0, 0.0, 0.06])  # approach from above so the open fingers clear the cube
CLOSE_STEPS = 6  # the fingers need a few control steps to close before lifting


@register_expert("PickCube-v1")
class PickCubeExpert(StagedExpert):
    def stages(self, task: Any, tcp: np.ndarray) -> list[Reach | Hold]:
        cube = position(task.cube)
        return [Reach(cube + HOVER, GRIPPER_OPEN), Reach(cube, GRIPPER_OPEN),
                Hold(cube, GRIPPER_CLOSED, CLOSE_STEPS), Reach(position(task.goal_site), GRIPPER_CLOSED)]
