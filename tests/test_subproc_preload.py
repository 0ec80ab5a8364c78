"""The sub-env pool's fork server imports a factory's heavy modules once (its `preload`), so a
child starts with them loaded instead of importing them itself.

The fork server is one per process and takes its preload list when it starts, so each case runs
in a fresh interpreter. `colorsys` stands in for a heavy simulator package: nothing this module
imports loads it.
"""
from __future__ import annotations

import importlib.util
import json
import os
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
    """Its state: 1 where `module` was already imported when the child built it; then 1 where
    the child started with a frozen heap (embodied_rl/heap.py)."""

    action_dim = 1

    def __init__(self, module: str) -> None:
        import gc

        self.preloaded, self.frozen = float(module in sys.modules), float(gc.get_freeze_count() > 0)

    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        return {"main_image": np.zeros((2, 2, 3), np.uint8), "state": np.array([self.preloaded, self.frozen], np.float32)}

    def step(self, action: np.ndarray, render: bool = True):  # not stepped here
        raise NotImplementedError

    def task(self) -> tuple[str, str]:
        return "preload", "report"

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class ReportingFactory:
    preload: ClassVar[tuple[str, ...]] = ("colorsys",)
    module: str = "colorsys"  # what the sub-envs report as imported

    def __call__(self, rank: int) -> _ReportingSubEnv:
        return _ReportingSubEnv(self.module)


_CHILD = """
import json, sys
from embodied_rl.config.schema.env import SubprocConfig
from embodied_rl.envs.subproc_pool import SubprocEnvPool
from tests.test_subproc_preload import ReportingFactory
pool = SubprocEnvPool(ReportingFactory(), 2, SubprocConfig(start_method=sys.argv[1]))
obs, failed = pool.reset([0, 1], [0, 1])
pool.close()
print(json.dumps({"parent": "colorsys" in sys.modules, "children": [float(o["state"][0]) for o in obs],
                  "frozen": [float(o["state"][1]) for o in obs]}))
"""


def _children_saw_preload(start_method: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, start_method], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("start_method, preloaded", [("forkserver", 1.0), ("spawn", 0.0)])
def test_fork_server_children_start_with_the_factory_preload(start_method: str, preloaded: float) -> None:
    """...and, from a fork server, with its heap settled: their full collections skip what it preloaded."""
    seen = _children_saw_preload(start_method)
    assert seen == {"parent": False, "children": [preloaded, preloaded], "frozen": [preloaded, preloaded]}


_SCRIPT = """
import json
from embodied_rl.config.schema.env import SubprocConfig
from embodied_rl.envs.fork_server import main_script_module
from embodied_rl.envs.subproc_pool import SubprocEnvPool
from tests.test_subproc_preload import ReportingFactory

if __name__ == "__main__":
    pool = SubprocEnvPool(ReportingFactory(module="pkg.script"), 1, SubprocConfig(start_method="forkserver"))
    obs, failed = pool.reset([0], [0])
    pool.close()
    print(json.dumps({"main": main_script_module(), "children": [float(o["state"][0]) for o in obs]}))
"""


def test_fork_server_imports_the_main_script_of_a_package(tmp_path: Path) -> None:
    """A process whose main is a script of a package (as a Ray worker's is Ray's default_worker.py):
    its fork server imports that module, so a child does not import what the script imports again."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "script.py").write_text(_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = subprocess.run([sys.executable, str(tmp_path / "pkg" / "script.py")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"main": "pkg.script", "children": [1.0]}


def test_maniskill_factory_preloads_an_installed_module() -> None:
    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory

    assert ManiSkillSubEnvFactory.preload and all(importlib.util.find_spec(m) for m in ManiSkillSubEnvFactory.preload)
