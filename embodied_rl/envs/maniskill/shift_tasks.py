"""What each ManiSkill task needs for the task-specific shifts of `init_params.shift`.

Lighting, light colour and camera offset work on any task; the other shifts name task objects
(which actor is the manipulated object, which actors move together), so a task supports them
only through its entry here. Pure data: the config loader reads it without importing ManiSkill.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskShiftSpec:
    #: attribute holding the manipulated object's actor (object_color); None = unsupported
    object: str | None = None
    #: attribute holding the object's half-size in metres that the task's loading, episode
    #: initialisation and success check all read (object_scale); None = unsupported
    size_attr: str | None = None
    #: actors whose initial xy object_xy_offset shifts, all by the same amount so their relation holds
    moved_together: tuple[str, ...] = ()
    #: free table positions (x, y in metres) for distractors, away from every region the task
    #: spawns objects or goals in; () = no distractors
    distractor_slots: tuple[tuple[float, float], ...] = ()
    #: the task takes ManiSkill's `robot_init_qpos_noise` constructor kwarg
    qpos_noise_kwarg: bool = True
    #: attribute holding the TableSceneBuilder whose table table_color recolours; None = no table
    table_scene: str | None = "table_scene"


# Slots beside the 0.2 m x 0.2 m spawn square of PickCube/PushCube (and PushCube's goal disk,
# radius 0.1 m, up to 0.3 m in front): |y| >= 0.25 m, inside the base camera's view.
_BESIDE_SPAWN = ((0.05, 0.27), (0.05, -0.27), (-0.15, 0.3), (-0.15, -0.3), (0.2, 0.3), (0.2, -0.3))
# StackCube spawns its cubes over |x| <= 0.2 m, |y| <= 0.3 m: further out to the sides.
_BESIDE_STACK = ((0.05, 0.45), (0.05, -0.45), (-0.2, 0.45), (-0.2, -0.45))

TASK_SHIFTS: dict[str, TaskShiftSpec] = {
    "PickCube-v1": TaskShiftSpec(object="cube", size_attr="cube_half_size", moved_together=("cube", "goal_site"),
                                 distractor_slots=_BESIDE_SPAWN),
    "PushCube-v1": TaskShiftSpec(object="obj", size_attr="cube_half_size", moved_together=("obj", "goal_region"),
                                 distractor_slots=_BESIDE_SPAWN),
    # The cube to pick up is cubeA (red); StackCube builds its cubes with a literal size.
    "StackCube-v1": TaskShiftSpec(object="cubeA", moved_together=("cubeA", "cubeB"), distractor_slots=_BESIDE_STACK),
    # PegInsertionSide draws its own robot noise, and its peg's white head is part of the task
    # (it goes into the hole): no object colour. Its box sits where distractors would go.
    "PegInsertionSide-v1": TaskShiftSpec(moved_together=("peg", "box"), qpos_noise_kwarg=False),
}


def unsupported_shift(task_id: str, changed: set[str]) -> tuple[str, str] | None:
    """(key, why) of the first changed shift key the task cannot apply, else None."""
    spec = TASK_SHIFTS.get(task_id)
    needs = {
        "object_color": lambda s: s.object is not None,
        "object_scale": lambda s: s.size_attr is not None,
        "object_xy_offset": lambda s: bool(s.moved_together),
        "distractors": lambda s: bool(s.distractor_slots),
        "robot_init_qpos_noise": lambda s: s.qpos_noise_kwarg,
        "table_color": lambda s: s.table_scene is not None,
    }
    for key in sorted(changed & needs.keys()):
        if spec is None:
            return key, f"{task_id} has no entry in embodied_rl/envs/maniskill/shift_tasks.py (known: {', '.join(TASK_SHIFTS)})"
        if not needs[key](spec):
            fit = [t for t, s in TASK_SHIFTS.items() if needs[key](s)]
            return key, f"{task_id} does not support it (tasks that do: {', '.join(fit)})"
    return None


def max_distractors(task_id: str) -> int:
    spec = TASK_SHIFTS.get(task_id)
    return len(spec.distractor_slots) if spec else 0
