"""`init_params` of `env_type: libero` (validated by the config loader via `params_cls`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from embodied_rl.config.typecheck import not_in_set
from embodied_rl.envs.libero.suites import registered_num_tasks
from embodied_rl.errors import ConfigError

#: how raw MuJoCo frames (bottom-up OpenGL rows) are turned into policy images
IMAGE_ORIENTATIONS = ("upright", "rotate180")


@dataclass
class LiberoParams:
    task_suite_name: str = field(
        default="libero_spatial",
        metadata={"help": "LIBERO suite: libero_spatial | libero_object | libero_goal | libero_10 | libero_90 | libero_130 (all five, in that order: spatial, object, goal, 10, 90)."},
    )
    task_ids: list[int] | None = field(
        default=None,
        metadata={"help": "Indices of the suite's tasks to use (null = all). Reset id r = offset(task) + init state id, with offset = 50 x (position in this list)."},
    )
    camera_heights: int = field(default=256, metadata={"help": "Height in pixels of the third-person and wrist images."})
    camera_widths: int = field(default=256, metadata={"help": "Width in pixels of the third-person and wrist images."})
    image_orientation: str = field(
        default="upright",
        metadata={"help": "upright: img[::-1], the true upright, non-mirrored view | rotate180: img[::-1, ::-1], the 180-degree rotated (mirrored) view that OpenVLA/OFT/openpi LIBERO checkpoints were trained on."},
    )
    num_steps_wait: int = field(
        default=10,
        metadata={"help": "Settle steps after each reset with a no-op action (zero motion, gripper open) so objects come to rest; not counted as episode steps (public OFT eval: 10)."},
    )
    wrist_camera: bool = field(default=True, metadata={"help": "Render and return the wrist camera (robot0_eye_in_hand); false saves ~half the rendering time."})
    control_freq: int = field(default=20, metadata={"help": "Controller frequency in Hz (LIBERO's datasets were recorded at 20)."})
    visual_mesh_cell: float | None = field(
        default=None,
        metadata={"help": "Grid cell in metres on which the meshes that only render (no collision) are simplified by vertex clustering, for faster software rendering: 0.008 makes a 64 px step take ~3.5x less CPU; null = LIBERO's meshes as shipped (the evaluation protocol's pixels). Collision shapes and physics never change."},
    )

    def __post_init__(self) -> None:
        suites = registered_num_tasks()
        if self.task_suite_name not in suites:
            raise not_in_set("init_params.task_suite_name", self.task_suite_name, list(suites), "a LIBERO suite")
        if self.image_orientation not in IMAGE_ORIENTATIONS:
            raise ConfigError(
                f"init_params.image_orientation {self.image_orientation!r} is not one of {', '.join(IMAGE_ORIENTATIONS)}"
            )
        for key in ("camera_heights", "camera_widths"):
            value = getattr(self, key)
            if not isinstance(value, int) or not 16 <= value <= 1024:
                raise ConfigError(f"init_params.{key} must be an integer in [16, 1024], got {value!r}")
        if not isinstance(self.num_steps_wait, int) or self.num_steps_wait < 0:
            raise ConfigError(f"init_params.num_steps_wait must be an integer >= 0, got {self.num_steps_wait!r}")
        if not isinstance(self.control_freq, int) or self.control_freq <= 0:
            raise ConfigError(f"init_params.control_freq must be a positive integer, got {self.control_freq!r}")
        cell = self.visual_mesh_cell
        if cell is not None and (isinstance(cell, bool) or not isinstance(cell, (int, float)) or not 0.0 < cell <= 0.05):
            raise ConfigError(f"init_params.visual_mesh_cell must be null or a cell size in metres in (0, 0.05], got {cell!r}")
        if self.task_ids is not None:
            n = suites[self.task_suite_name]
            bad = [i for i in self.task_ids if not isinstance(i, int) or not 0 <= i < n]
            if bad or not self.task_ids or len(set(self.task_ids)) != len(self.task_ids):
                raise ConfigError(f"init_params.task_ids {self.task_ids!r} must be distinct integers in [0, {n}) ({self.task_suite_name} "
                                  f"has {n} tasks in LIBERO's benchmark registry), or null for all tasks")
