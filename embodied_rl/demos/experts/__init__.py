"""Scripted experts on privileged simulator state, one per task, in a registry by env id."""
from embodied_rl.demos.experts import pick_cube, push_cube, stack_cube  # noqa: F401 - register the experts
from embodied_rl.demos.experts.base import ScriptedExpert
from embodied_rl.demos.experts.registry import (
    expert_tasks,
    make_expert,
    register_expert,
)

__all__ = ["ScriptedExpert", "expert_tasks", "make_expert", "register_expert"]
