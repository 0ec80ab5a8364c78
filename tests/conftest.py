"""Shared pytest settings for the whole suite.

Fixtures shared by several test modules live in the plugin modules named in `pytest_plugins`
below, so this file stays small; tests request them by argument name and never import them.
Plain helpers are imported as `from tests.<module> import ...` (tests/ is a package).
Every test process gets the same simulator environment variables as the CLI (private Vulkan
ICD, MUJOCO_GL), set before any simulator is imported.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# pytest imports this file before any test module, so this is the one place that puts the
# package first: importing embodied_rl installs its import hook (embodied_rl/_compat.py), which
# must be in place before anything imports torchvision or timm.
import embodied_rl  # noqa: F401
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory
from embodied_rl.envs.subproc_pool import preload_in_fork_server
from embodied_rl.process_env import configure_process_env

pytest_plugins = ["tests.ray_fixtures"]

configure_process_env()
# The in-process sub-env pools of the whole session fork from one server, started by whichever
# test comes first: have it import the simulator most tests run.
preload_in_fork_server([ManiSkillSubEnvFactory.__module__, *ManiSkillSubEnvFactory.preload])
# Tests never talk to the wandb service or wait on a prompt.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout under test."""
    return REPO_ROOT
