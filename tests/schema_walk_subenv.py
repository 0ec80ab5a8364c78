"""A millisecond `SubEnv` for the schema walk's `subproc` probe (tests/test_schema_walk.py).

Why a module of its own: the pool's children import the factory's module, and this one imports
only numpy and the SubEnv contract, so a child starts in a fraction of a second and the walk can
watch the real SubprocEnvPool time out, kill and rebuild children without ManiSkill's 5-20 s
start-up per child.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from embodied_rl.envs.backend import SubEnv

# Every call takes this long, so a deadline scaled down by the walk (x 1e-6) always trips
# and the shipped ones (seconds) never do.
CALL_S = 0.005


class CounterSubEnv(SubEnv):
    """State = [reset id, step count, started by the pool's own process (1) or a fork server (0)];
    a step whose action[0] is negative raises (a simulator error: the pool restarts the child)."""

    action_dim = 2

    def __init__(self, rank: int, creator_pid: int) -> None:
        self.rank, self.direct_child = rank, float(os.getppid() == creator_pid)
        self.reset_id, self.t = -1, 0

    def _obs(self) -> dict[str, np.ndarray]:
        state = np.array([self.reset_id, self.t, self.direct_child], np.float32)
        return {"main_image": np.zeros((2, 2, 3), np.uint8), "state": state}

    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        time.sleep(CALL_S)
        self.reset_id, self.t = reset_id, 0
        return self._obs()

    def step(self, action: np.ndarray, render: bool = True) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        time.sleep(CALL_S)
        if action[0] < 0:
            raise RuntimeError(f"sub-env {self.rank}: scripted simulator error")
        self.t += 1
        return self._obs(), float(action[1]), False, False

    def task(self) -> tuple[str, str]:
        return "counter", "count"


@dataclass(frozen=True)
class CounterFactory:
    creator_pid: int

    def __call__(self, rank: int) -> CounterSubEnv:
        return CounterSubEnv(rank, self.creator_pid)
