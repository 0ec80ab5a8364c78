"""A scripted expert: privileged task state -> one controller action per step.

Experts act in the controller's own units (`pd_ee_delta_pose`: xyz deltas normalised to ±1 =
±0.1 m, rotation deltas, gripper -1 closed / +1 open), which have one meaning for every env
config; the recorder maps them to the policy's convention through the env's action adapter.
They read the simulator's ground truth (object poses, the goal), never the images, so they
are cheap and reliable; the policy then learns to do the same from what it is shown.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

GRIPPER_OPEN = 1.0
GRIPPER_CLOSED = -1.0
#: metres per unit of the normalised pd_ee_delta_pose translation action
METRES_PER_UNIT = 0.1
#: metres: close enough to a waypoint to go on to the next stage
REACHED = 0.01


def position(entity: Any) -> np.ndarray:
    """World xyz [3] of a ManiSkill actor/link of a single-env task."""
    return entity.pose.p[0].cpu().numpy().astype(np.float64)


def move_toward(tcp: np.ndarray, target: np.ndarray, gripper: float) -> np.ndarray:
    """Controller action [7]: translate the TCP toward `target` (saturating at ±1), no rotation."""
    delta = np.clip((target - tcp) / METRES_PER_UNIT, -1.0, 1.0)
    return np.concatenate([delta, np.zeros(3), [gripper]]).astype(np.float32)


class ScriptedExpert(ABC):
    """One episode at a time: `reset()` then `act(task)` once per step.

    `task` is the ManiSkill env (`env.unwrapped`) of one CPU-sim episode. Bump `version` when
    the behaviour changes: it is written to every dataset manifest.
    """

    version: ClassVar[int] = 1
    control_mode: ClassVar[str] = "pd_ee_delta_pose"

    def reset(self) -> None:
        """Forget the previous episode (phase, counters)."""

    @abstractmethod
    def act(self, task: Any) -> np.ndarray:
        """Controller action float32 [7] for the current state of `task`."""

    @staticmethod
    def tcp(task: Any) -> np.ndarray:
        return position(task.agent.tcp)


@dataclass(frozen=True)
class Reach:
    """Move toward `target` until the TCP is within `tol` metres of it."""

    target: np.ndarray
    gripper: float
    tol: float = REACHED


@dataclass(frozen=True)
class Hold:
    """Move toward `target` for `steps` steps (closing or opening the gripper in place)."""

    target: np.ndarray
    gripper: float
    steps: int


class StagedExpert(ScriptedExpert):
    """An expert as a sequence of stages, recomputed from the task state at every step.

    A stage that is done hands over to the next within the same step; the last stage never ends.
    """

    def reset(self) -> None:
        self.stage, self.count = 0, 0

    @abstractmethod
    def stages(self, task: Any, tcp: np.ndarray) -> Sequence[Reach | Hold]:
        """The stages of this task, their targets from the current state of `task`."""

    def act(self, task: Any) -> np.ndarray:
        tcp = self.tcp(task)
        stages = self.stages(task, tcp)
        while self.stage < len(stages) - 1:
            s = stages[self.stage]
            if isinstance(s, Hold):
                if self.count < s.steps:
                    self.count += 1
                    return move_toward(tcp, s.target, s.gripper)
                self.count = 0
            elif np.linalg.norm(s.target - tcp) >= s.tol:
                return move_toward(tcp, s.target, s.gripper)
            self.stage += 1
        last = stages[-1]
        return move_toward(tcp, last.target, last.gripper)
