"""StackCube-v1: pick cube A, carry it above cube B, lower it onto B, release, back off."""
from __future__ import annotations

from typing import Any

import numpy as np

from embodied_rl.demos.experts.base import (
    GRIPPER_CLOSED,
    GRIPPER_OPEN,
    REACHED,
    Hold,
    Reach,
    StagedExpert,
    position,
)
from embodied_rl.demos.experts.pick_cube import CLOSE_STEPS, HOVER
from embodied_rl.demos.experts.registry import register_expert

CUBE = 0.04  # edge length of both cubes
RELEASE_STEPS = 4


@register_expert("StackCube-v1")
class StackCubeExpert(StagedExpert):
    def stages(self, task: Any, tcp: np.ndarray) -> list[Reach | Hold]:
        a, b = position(task.cubeA), position(task.cubeB)
        above_b = b + np.array([0.0, 0.0, CUBE]) + HOVER
        on_b = b + np.array([0.0, 0.0, CUBE + 0.002])  # 2 mm above contact: let go, not press
        return [Reach(a + HOVER, GRIPPER_OPEN), Reach(a, GRIPPER_OPEN),
                Hold(a, GRIPPER_CLOSED, CLOSE_STEPS), Reach(above_b, GRIPPER_CLOSED),
                # the TCP holds cube A at its centre: A rests on B when the TCP is one cube above B
                Reach(on_b, GRIPPER_CLOSED, tol=REACHED / 2), Hold(tcp, GRIPPER_OPEN, RELEASE_STEPS),
                Reach(on_b + HOVER, GRIPPER_OPEN)]
