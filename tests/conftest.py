"""Shared pytest settings for the whole suite.

Subsystem fixtures live in their own `tests/fixtures_*.py` modules (import them explicitly)
so this file stays small. Every test process gets the same simulator environment variables
as the CLI (private Vulkan ICD, MUJOCO_GL), set before any simulator is imported.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import embodied_rl  # noqa: F401  (import order: torchvision shim before timm/torchvision)
from embodied_rl.process_env import configure_process_env

configure_process_env()
# Tests never talk to the wandb service or wait on a prompt.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout under test."""
    return REPO_ROOT
