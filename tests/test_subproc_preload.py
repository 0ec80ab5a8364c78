"""The sub-env pool's fork server imports a factory's heavy modules once (its `preload`), so a
child starts with them loaded instead of importing them itself.

The fork server is one per process and takes its preload list when it starts, so each case runs
in a fresh interpreter. `colorsys` stands in for a heavy simulator package: nothing this module
imports loads it.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from embodied_rl.envs.backend import SubEnv

REPO = Path(__file__).resolve().parents[1]


class _ReportingSubEnv(SubEnv):
    """Its state is 1 where `colorsys` was already imported when the child built it."""

    action_dim = 1

    def __init__(self) -> None:
        self.preloaded = float("colorsys" in sys.modules)

    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        return {"main_image": np.zeros((2, 2, 3), np.uint8), "state": np.array([self.preloaded], np.float32)}

    def step(self, action: np.ndarray, render: bool = True):  # not stepped here
        raise NotImplementedError

    def task(self) -> tuple[str, str]:
        return "preload", "report"

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ReportingFactory:
    preload: ClassVar[tuple[str, ...]] = ("colorsys",)

    def __call__(self, rank: int) -> _ReportingSubEnv:
        return _ReportingSubEnv()


_CHILD = """
import json, sys
from embodied_rl.config.schema.env import SubprocConfig
from embodied_rl.envs.subproc_pool import SubprocEnvPool
from tests.test_subproc_preload import ReportingFactory
pool = SubprocEnvPool(ReportingFactory(), 2, SubprocConfig(start_method=sys.argv[1]))
obs, failed = pool.reset([0, 1], [0, 1])
pool.close()
print(json.dumps({"parent": "colorsys" in sys.modules, "children": [float(o["state"][0]) for o in obs]}))
"""


def _children_saw_preload(start_method: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, start_method], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("start_method, preloaded", [("forkserver", 1.0), ("spawn", 0.0)])
def test_fork_server_children_start_with_the_factory_preload(start_method: str, preloaded: float) -> None:
    seen = _children_saw_preload(start_method)
    assert seen == {"parent": False, "children": [preloaded, preloaded]}


def test_maniskill_factory_preloads_an_installed_module() -> None:
    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory

    assert ManiSkillSubEnvFactory.preload and all(importlib.util.find_spec(m) for m in ManiSkillSubEnvFactory.preload)
