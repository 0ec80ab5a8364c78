"""StackCube-v1: pick cube A, carry it above cube B, lower it onto B, release, back off."""
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

HOVER = np.array([0.0, 0.0, 0.06])
CUBE = 0.04  # edge length of both cubes
REACHED = 0.01
CLOSE_STEPS = 6
RELEASE_STEPS = 4


@register_expert("StackCube-v1")
class StackCubeExpert(ScriptedExpert):
    def reset(self) -> None:
        self.phase, self.count = "hover", 0

    def act(self, task: Any) -> np.ndarray:
        tcp, a, b = self.tcp(task), position(task.cubeA), position(task.cubeB)
        above_b = b + np.array([0.0, 0.0, CUBE]) + HOVER
        on_b = b + np.array([0.0, 0.0, CUBE + 0.002])  # 2 mm above contact: let go, not press
        if self.phase == "hover":
            if np.linalg.norm(a + HOVER - tcp) < REACHED:
                self.phase = "descend"
            else:
                return move_toward(tcp, a + HOVER, GRIPPER_OPEN)
        if self.phase == "descend":
            if np.linalg.norm(a - tcp) < REACHED:
                self.phase = "close"
            else:
                return move_toward(tcp, a, GRIPPER_OPEN)
        if self.phase == "close":
            if self.count < CLOSE_STEPS:
                self.count += 1
                return move_toward(tcp, a, GRIPPER_CLOSED)
            self.phase, self.count = "lift", 0
        if self.phase == "lift":
            if np.linalg.norm(above_b - tcp) < REACHED:
                self.phase = "lower"
            else:
                return move_toward(tcp, above_b, GRIPPER_CLOSED)
        if self.phase == "lower":
            # the TCP holds cube A at its centre: A rests on B when the TCP is one cube above B
            if np.linalg.norm(on_b - tcp) < REACHED / 2:
                self.phase = "release"
            else:
                return move_toward(tcp, on_b, GRIPPER_CLOSED)
        if self.phase == "release" and self.count < RELEASE_STEPS:
            self.count += 1
            return move_toward(tcp, tcp, GRIPPER_OPEN)
        self.phase = "retreat"
        return move_toward(tcp, on_b + HOVER, GRIPPER_OPEN)
