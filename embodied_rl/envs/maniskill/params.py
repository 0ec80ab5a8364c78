"""`init_params` of `env_type: maniskill` env configs."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Literal

from embodied_rl.envs.maniskill.shift_tasks import max_distractors, unsupported_shift
from embodied_rl.errors import ConfigError

# Named colours of the shift keys (RGB in [0, 1]); any other as 'r,g,b'. Not '#rrggbb': in
# YAML an unquoted '#' starts a comment, which would silently leave the key null (no shift).
COLORS: dict[str, tuple[float, float, float]] = {
    "green": (0.1, 0.65, 0.15), "yellow": (0.95, 0.8, 0.05), "purple": (0.5, 0.15, 0.7),
    "orange": (1.0, 0.45, 0.05), "cyan": (0.05, 0.75, 0.8), "blue": (0.05, 0.15, 0.85),
    "red": (0.9, 0.05, 0.05), "white": (0.95, 0.95, 0.95), "gray": (0.45, 0.45, 0.45),
    "black": (0.05, 0.05, 0.05), "warm": (1.0, 0.75, 0.45), "cool": (0.55, 0.75, 1.0),
}
_COLOR_HELP = " | ".join(COLORS) + " or 'r,g,b' (three numbers in [0, 1])"
_NUMBER = r"\s*(?:0|1|0?\.\d+|1\.0*)\s*"
_RGB = re.compile(rf"^{_NUMBER},{_NUMBER},{_NUMBER}$")


def parse_color(value: str) -> tuple[float, float, float]:
    """RGB in [0, 1] of a COLORS name or of 'r,g,b'; ValueError otherwise."""
    if value in COLORS:
        return COLORS[value]
    if _RGB.match(value):
        r, g, b = (float(x) for x in value.split(","))
        return r, g, b
    raise ValueError(f"{value!r} is not a colour; use {_COLOR_HELP}")


@dataclass
class ShiftParams:
    """Distribution shifts for evaluation, one factor per key; the defaults change nothing."""

    # metadata "family": the kind of shift (vision, semantics, execution), as in RL4VLA's evaluation
    light_scale: float = field(default=1.0, metadata={"family": "vision", "help": "Multiplier of every light's intensity (ambient and directional), in (0, 4]: < 1 dims the scene, > 1 brightens it."})
    light_color: str | None = field(default=None, metadata={"family": "vision", "help": f"Tint multiplied into every light's colour: {_COLOR_HELP}. null = white light."})
    table_color: str | None = field(default=None, metadata={"family": "vision", "help": f"Flat colour replacing the table's wood texture: {_COLOR_HELP}. null = the texture."})
    distractors: int = field(default=0, metadata={"family": "vision", "help": "Primitive objects (boxes, upright cylinders, other colours) placed on the table beside the task's objects, at free slots and with jitter drawn per episode; 0 to the task's number of slots (6 on PickCube/PushCube, 4 on StackCube)."})
    camera_offset: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0], metadata={"family": "vision", "help": "Translation (x, y, z in metres, world frame, each within ±0.5) of the main camera, set through ManiSkill's sensor_configs pose override; its orientation is kept."})
    object_color: str | None = field(default=None, metadata={"family": "semantics", "help": f"Colour of the task's manipulated object (PickCube/PushCube: the cube, StackCube: cubeA, the one to pick up): {_COLOR_HELP}. null = the task's colour."})
    object_scale: float = field(default=1.0, metadata={"family": "semantics", "help": "Multiplier, in [0.5, 2], of the manipulated object's half-size (PickCube/PushCube: cube_half_size, 0.02 m), which the task's loading, initial height and success check all read."})
    robot_init_qpos_noise: float | None = field(default=None, metadata={"family": "execution", "help": "Std (radians, in [0, 0.5]) of the Gaussian noise ManiSkill adds to the robot's initial joint positions (the task's robot_init_qpos_noise kwarg). null = the task's default (0.02)."})
    object_xy_offset: list[float] = field(default_factory=lambda: [0.0, 0.0], metadata={"family": "execution", "help": "Offset (x, y in metres, each within ±0.2) added to the initial xy of the task's objects and goal together, so their relation holds (PickCube: cube and goal, PushCube: cube and target, StackCube: both cubes, PegInsertionSide: peg and box)."})

    def __post_init__(self) -> None:
        # ValueError: the config loader prefixes the section's key (env.<mode>.init_params.shift)
        if not 0.0 < self.light_scale <= 4.0:
            raise ValueError(f"light_scale={self.light_scale} must be in (0, 4] (1 = unchanged)")
        for key in ("light_color", "table_color", "object_color"):
            value = getattr(self, key)
            if value is not None:
                try:
                    parse_color(value)
                except ValueError as err:
                    raise ValueError(f"{key}={err}") from None
        if self.distractors < 0:
            raise ValueError(f"distractors={self.distractors} must be >= 0")
        if not 0.5 <= self.object_scale <= 2.0:
            raise ValueError(f"object_scale={self.object_scale} must be in [0.5, 2] (1 = unchanged)")
        if self.robot_init_qpos_noise is not None and not 0.0 <= self.robot_init_qpos_noise <= 0.5:
            raise ValueError(f"robot_init_qpos_noise={self.robot_init_qpos_noise} must be in [0, 0.5] radians (or null)")
        for key, n, bound in (("camera_offset", 3, 0.5), ("object_xy_offset", 2, 0.2)):
            value = getattr(self, key)
            if len(value) != n or any(abs(v) > bound for v in value):
                raise ValueError(f"{key}={value} must be {n} numbers, each within ±{bound} m")

    @staticmethod
    def family(key: str) -> str:
        """vision | semantics | execution of a shift key; an instruction paraphrase
        (env.task_description) is semantics."""
        return "semantics" if key == "task_description" else next(f for f in fields(ShiftParams) if f.name == key).metadata["family"]

    def changed(self) -> set[str]:
        """Keys set to something other than their default."""
        default = ShiftParams()
        return {f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)}


@dataclass
class ManiSkillParams:
    id: str = field(default="PickCube-v1", metadata={"help": "ManiSkill3 task id (any registered task whose assets are installed)."})
    obs_mode: Literal["rgb"] = field(default="rgb", metadata={"help": "Observation mode; only `rgb` (camera images + proprio state) is supported."})
    control_mode: str = field(default="pd_ee_delta_pose", metadata={"help": "Controller: pd_ee_delta_pose (normalised ±1 = ±0.1 m / ±0.1 rad, gripper -1 closed, +1 open) or another ManiSkill control mode."})
    sim_backend: Literal["cpu", "gpu"] = field(default="cpu", metadata={"help": "cpu: one process per sub-env; gpu: all sub-envs batched in one GPU process (needs CUDA)."})
    render_backend: Literal["cpu", "gpu"] = field(default="cpu", metadata={"help": "SAPIEN render device. cpu: the software Vulkan driver (Mesa lavapipe) that scripts/setup.sh installs on every node, GPU nodes included, so a config renders the same pixels everywhere and its sub-env processes take no GPU memory. gpu: the GPU's Vulkan driver, faster, needs CUDA GPUs where the env workers run, and its pixels differ slightly from cpu's."})
    reward_mode: Literal["sparse", "dense", "normalized_dense"] = field(default="sparse", metadata={"help": "sparse | dense | normalized_dense (ManiSkill's reward modes)."})
    camera_heights: int = field(default=128, metadata={"help": "Height in pixels of the cameras (main and wrist)."})
    camera_widths: int = field(default=128, metadata={"help": "Width in pixels of the cameras (main and wrist)."})
    robot_visual_cell: float | None = field(default=None, metadata={"help": "Render the robot's visual meshes simplified by vertex clustering on a grid of this cell size (metres, in (0, 0.05]); collision shapes, physics and every other object stay the task's own. Software Vulkan spends most of a small picture on the Panda's ~135k triangles: at 0.008 a 64 px picture costs ~5x less CPU and differs by ~0.5 intensity levels on average (docs/BENCHMARKS.md). null = the assets' full meshes. CPU sim only."})
    main_camera: str = field(default="base_camera", metadata={"help": "Sensor used as the main (third-person) image."})
    wrist_camera: str = field(default="auto", metadata={"help": "Wrist sensor: auto (hand_camera when the robot has one) | none | a sensor name."})
    robot_uids: str | None = field(default=None, metadata={"help": "Robot to load (null = the task's default, e.g. panda_wristcam for StackCube)."})
    append_goal_to_state: bool = field(default=False, metadata={"help": "Append the task's goal position (`extra/goal_pos`, xyz in metres, 3 values) to the state vector. Privileged information: PickCube-v1's goal is hidden from every camera, so an image policy can only solve it with this (and actor.model.use_proprio). Tasks without a goal position in their rgb observation (PushCube-v1, StackCube-v1) reject it."})
    privileged_state: bool = field(default=False, metadata={"help": "Also read the task's privileged state (ManiSkill's `state_dict` observation: robot qpos and qvel, then the task's extras such as TCP, object and goal poses, flattened; PushCube-v1: 35 values) into EnvObservation.privileged_states, with the episode clock (elapsed steps / max_episode_steps) appended. Only an asymmetric critic reads it (actor.model.value_input: privileged_state); the policy never sees it."})
    shift: ShiftParams = field(default_factory=ShiftParams)

    def __post_init__(self) -> None:
        if self.obs_mode != "rgb":
            raise ConfigError(f"env.init_params.obs_mode={self.obs_mode!r} is not supported; use 'rgb'")
        if self.sim_backend not in ("cpu", "gpu"):
            raise ConfigError(f"env.init_params.sim_backend={self.sim_backend!r}; use 'cpu' or 'gpu'")
        if self.render_backend not in ("cpu", "gpu"):
            raise ConfigError(f"env.init_params.render_backend={self.render_backend!r}; use 'cpu' or 'gpu'")
        if self.reward_mode not in ("sparse", "dense", "normalized_dense"):
            raise ConfigError(f"env.init_params.reward_mode={self.reward_mode!r}; use sparse, dense or normalized_dense")
        for key in ("camera_heights", "camera_widths"):
            if not 8 <= getattr(self, key) <= 2048:
                raise ConfigError(f"env.init_params.{key}={getattr(self, key)} must be between 8 and 2048")
        if self.robot_visual_cell is not None:  # ValueError: the config loader prefixes env.<mode>.init_params
            if not 0.0 < self.robot_visual_cell <= 0.05:
                raise ValueError(f"robot_visual_cell={self.robot_visual_cell} must be in (0, 0.05] metres, or null for the full meshes")
            if self.sim_backend == "gpu":
                raise ValueError(f"robot_visual_cell={self.robot_visual_cell} simplifies the CPU sim's meshes; with sim_backend gpu set it to null")
        if isinstance(self.shift, dict):  # built by hand rather than by the config loader
            self.shift = ShiftParams(**self.shift)
        self._check_shift()

    def _check_shift(self) -> None:
        # ValueError: the config loader prefixes the section's key (env.<mode>.init_params)
        bad = unsupported_shift(self.id, self.shift.changed())
        if bad is not None:
            raise ValueError(f"shift.{bad[0]} is not supported: {bad[1]}; remove it")
        most = max_distractors(self.id)
        if self.shift.distractors > most:
            raise ValueError(f"shift.distractors={self.shift.distractors}: {self.id} has {most} free table slots; use at most {most}")


def shift_keys(env_config: dict, base_config: dict) -> set[str]:
    """Keys in which an env config (a plain mapping, as `read_env_config` gives it) shifts its
    base: its changed `init_params.shift` keys, plus `task_description` if reworded."""
    shift = (env_config.get("init_params") or {}).get("shift") or {}
    base_shift = (base_config.get("init_params") or {}).get("shift") or {}
    keys = {k for k, v in shift.items() if base_shift.get(k, getattr(ShiftParams(), k, None)) != v}
    if env_config.get("task_description") != base_config.get("task_description"):
        keys.add("task_description")
    return keys
