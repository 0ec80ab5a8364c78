"""Applying `init_params.shift` to a ManiSkill task, the way ManiSkill's docs customise tasks.

A shifted task is a subclass of the registered task class (`ShiftedTask` first in its MRO),
registered with ManiSkill under `SHIFT_NAMESPACE/<task id>` and made with the shift as a
constructor kwarg. Its overrides call the task's own method first and then change one thing:

- `_load_scene`: scales the object's half-size attribute (before), recolours table and object,
  builds the distractors (after);
- `_load_lighting`: scales and tints every light the task added;
- `_setup_sensors`: moves the main camera through ManiSkill's `sensor_configs` pose override;
- `_initialize_episode`: offsets the objects' xy, places the distractors (random draws after
  the task's own, so the task's initial state for a seed is the unshifted one).

`robot_init_qpos_noise` is the task's own gym.make kwarg. Without a shift the registered task
itself is made: the unshifted env is exactly ManiSkill's.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_rl.envs.maniskill.params import ManiSkillParams, ShiftParams, parse_color
from embodied_rl.envs.maniskill.shift_tasks import TASK_SHIFTS, TaskShiftSpec
from embodied_rl.errors import ConfigError

SHIFT_NAMESPACE = "embodied_rl_shift"
# Keys the task's own gym.make kwargs carry; every other changed key needs the subclass.
_KWARG_KEYS = {"robot_init_qpos_noise"}
# Uniform jitter (metres) of a distractor around its slot, and its yaw range (radians).
_JITTER_M = 0.02


@dataclass(frozen=True)
class _Distractor:
    kind: str  # a key of _BUILDERS
    half_extents: tuple[float, float, float]  # metres; cylinders: (radius, radius, half height)
    color: str  # a name of params.COLORS, none of the tasks' own object colours


# In the order they are added: distractors=n uses the first n.
_DISTRACTORS = (
    _Distractor("box", (0.025, 0.025, 0.025), "yellow"),
    _Distractor("cylinder", (0.02, 0.02, 0.035), "purple"),
    _Distractor("box", (0.04, 0.02, 0.015), "cyan"),
    _Distractor("cylinder", (0.025, 0.025, 0.02), "orange"),
    _Distractor("box", (0.02, 0.02, 0.04), "white"),
    _Distractor("box", (0.03, 0.03, 0.01), "black"),
)


@dataclass(frozen=True)
class AppliedShift:
    """What a shifted task needs: the shift, the task's entry and the camera to move."""

    task: str
    shift: ShiftParams
    spec: TaskShiftSpec
    camera: str


def gym_make_args(params: ManiSkillParams) -> tuple[str, dict[str, Any]]:
    """(env id, extra gym.make kwargs) of the params' shift; (params.id, {}) without one."""
    shift, changed = params.shift, params.shift.changed()
    kwargs: dict[str, Any] = {}
    if shift.robot_init_qpos_noise is not None:
        kwargs["robot_init_qpos_noise"] = shift.robot_init_qpos_noise
    if not changed - _KWARG_KEYS:
        return params.id, kwargs
    kwargs["shift"] = AppliedShift(params.id, shift, TASK_SHIFTS.get(params.id, TaskShiftSpec(table_scene=None)), params.main_camera)
    return shifted_task_id(params.id), kwargs


@functools.cache
def shifted_task_id(task_id: str) -> str:
    """Register (once per process) the shifted subclass of a ManiSkill task; returns its id."""
    from mani_skill.utils.registration import REGISTERED_ENVS, register_env

    spec = REGISTERED_ENVS[task_id]
    cls = type(f"Shifted{spec.cls.__name__}", (ShiftedTask, spec.cls), {"__module__": __name__})
    uid = f"{SHIFT_NAMESPACE}/{task_id}"
    register_env(uid, max_episode_steps=spec.max_episode_steps, override=True,
                 asset_download_ids=spec.asset_download_ids, **spec.default_kwargs)(cls)
    return uid


def recolor(actor: Any, rgb: tuple[float, float, float]) -> None:
    """Flat colour on every render shape (and mesh part) of an actor: its texture maps (colour,
    metallic, roughness, normal) removed, so the table's wood grain goes too."""
    import sapien

    for entity in actor._objs:  # one per parallel sub-scene
        body = entity.find_component_by_type(sapien.render.RenderBodyComponent)
        for shape in body.render_shapes:
            for part in getattr(shape, "parts", None) or [shape]:  # meshes have parts, primitives one material
                mat = part.material
                mat.base_color = [*rgb, 1.0]
                mat.base_color_texture = mat.metallic_texture = mat.roughness_texture = mat.normal_texture = None


def _build_box(scene: Any, d: _Distractor, name: str, pose: Any) -> Any:
    import sapien

    builder = scene.create_actor_builder()
    builder.add_box_collision(half_size=d.half_extents)
    builder.add_box_visual(half_size=d.half_extents, material=sapien.render.RenderMaterial(base_color=[*parse_color(d.color), 1]))
    builder.initial_pose = pose
    return builder.build(name=name)


def _build_cylinder(scene: Any, d: _Distractor, name: str, pose: Any) -> Any:
    import sapien
    from transforms3d.euler import euler2quat

    upright = sapien.Pose(q=euler2quat(0, np.pi / 2, 0))  # SAPIEN cylinders lie along x
    builder = scene.create_actor_builder()
    radius, half_height = d.half_extents[0], d.half_extents[2]
    builder.add_cylinder_collision(pose=upright, radius=radius, half_length=half_height)
    builder.add_cylinder_visual(pose=upright, radius=radius, half_length=half_height,
                                material=sapien.render.RenderMaterial(base_color=[*parse_color(d.color), 1]))
    builder.initial_pose = pose
    return builder.build(name=name)


_BUILDERS = {"box": _build_box, "cylinder": _build_cylinder}


class ShiftedTask:
    """Mixin placed before a ManiSkill task class; see the module docstring."""

    def __init__(self, *args: Any, shift: AppliedShift, **kwargs: Any) -> None:
        self._shift = shift
        self._size_scaled = False
        self._distractor_actors: list[Any] = []
        super().__init__(*args, **kwargs)

    def _load_scene(self, options: dict) -> None:
        import sapien

        s, spec = self._shift.shift, self._shift.spec
        if s.object_scale != 1.0 and not self._size_scaled:  # once: some tasks load the scene on every reset
            setattr(self, spec.size_attr, getattr(self, spec.size_attr) * s.object_scale)
            self._size_scaled = True
        super()._load_scene(options)
        if s.table_color is not None:
            recolor(getattr(self, spec.table_scene).table, parse_color(s.table_color))
        if s.object_color is not None:
            recolor(getattr(self, spec.object), parse_color(s.object_color))
        self._distractor_actors = [
            _BUILDERS[d.kind](self.scene, d, f"distractor_{i}", sapien.Pose(p=[2.0 + i, 2.0, d.half_extents[2]]))
            for i, d in enumerate(_DISTRACTORS[:s.distractors])
        ]

    def _load_lighting(self, options: dict) -> None:
        super()._load_lighting(options)
        s = self._shift.shift
        factor = s.light_scale * np.asarray(parse_color(s.light_color) if s.light_color else (1.0, 1.0, 1.0))
        if np.all(factor == 1.0):
            return
        for sub in self.scene.sub_scenes:
            render = sub.render_system
            render.ambient_light = np.asarray(render.ambient_light) * factor
            for light in render.lights:
                light.color = np.asarray(light.color) * factor

    def _setup_sensors(self, options: dict) -> None:
        offset = self._shift.shift.camera_offset
        if any(offset):
            from mani_skill.sensors.camera import parse_camera_configs
            from mani_skill.utils.structs.pose import Pose

            cam = self._shift.camera
            task_cams = parse_camera_configs(self._default_sensor_configs)
            if cam not in task_cams:
                raise ConfigError(
                    f"env.init_params.shift.camera_offset moves a fixed task camera ({', '.join(task_cams) or 'none'} "
                    f"in {self._shift.task}); main_camera={cam!r} is not one, set main_camera to one or remove the offset"
                )
            pose = Pose.create(task_cams[cam].pose)
            moved = Pose.create_from_pq(p=pose.p + pose.p.new_tensor(offset), q=pose.q)
            custom = dict(self._custom_sensor_configs or {})
            custom[cam] = {**custom.get(cam, {}), "pose": moved}
            self._custom_sensor_configs = custom
        super()._setup_sensors(options)

    def _initialize_episode(self, env_idx: Any, options: dict) -> None:
        super()._initialize_episode(env_idx, options)
        import torch

        s, spec = self._shift.shift, self._shift.spec
        with torch.device(self.device):
            if any(s.object_xy_offset):
                for name in spec.moved_together:
                    actor = getattr(self, name)
                    p, q = actor.pose.p[env_idx].clone(), actor.pose.q[env_idx].clone()
                    p[:, :2] += torch.tensor(s.object_xy_offset, dtype=p.dtype)
                    actor.set_pose(_pose(p, q))
            if self._distractor_actors:
                self._place_distractors(len(env_idx), spec)

    def _place_distractors(self, b: int, spec: TaskShiftSpec) -> None:
        """Each distractor on its own slot (a random permutation per env), jittered and yawed."""
        import torch
        from mani_skill.utils.geometry.rotation_conversions import (
            axis_angle_to_quaternion,
        )

        slots = torch.tensor(spec.distractor_slots, dtype=torch.float32)
        order = torch.argsort(torch.rand(b, len(slots)), dim=1)
        for i, (actor, d) in enumerate(zip(self._distractor_actors, _DISTRACTORS)):
            xyz = torch.zeros(b, 3)
            xyz[:, :2] = slots[order[:, i]] + (torch.rand(b, 2) * 2 - 1) * _JITTER_M
            xyz[:, 2] = d.half_extents[2]  # resting on the table (z = 0 is its top)
            yaw = torch.rand(b) * 2 * np.pi
            q = axis_angle_to_quaternion(torch.stack([torch.zeros(b), torch.zeros(b), yaw], dim=1))
            actor.set_pose(_pose(xyz, q))


def _pose(p: Any, q: Any) -> Any:
    from mani_skill.utils.structs.pose import Pose

    return Pose.create_from_pq(p=p, q=q)
