"""What a ManiSkill env shows after resets (pixels, segmentation, actor poses, joints), and the
checks that a distribution-shift factor changed it as it says: tests/test_env_shifts.py's
simulator-level part. Not a test module."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embodied_rl.envs.maniskill.params import ManiSkillParams, parse_color
from embodied_rl.envs.maniskill.shift_tasks import TASK_SHIFTS

RESET_IDS = [2**30 + k for k in range(5)]  # held-out (eval split) seeds; the first is the one compared on pixels


@dataclass
class Seen:
    """What one env config's env shows after a reset with each of RESET_IDS."""

    instruction: str
    images: list[np.ndarray]  # main camera RGB, uint8 [H, W, 3]
    segs: list[np.ndarray]  # main camera per-pixel segmentation id [H, W]
    seg_ids: dict[str, int]  # actor name -> segmentation id
    poses: dict[str, np.ndarray]  # actor name -> [len(RESET_IDS), 7] initial pose (xyz m, quaternion wxyz)
    obj: str  # name of the manipulated object's actor ('' if the task registers none)
    moved: tuple[str, ...]  # names of the actors object_xy_offset moves
    half_size: np.ndarray  # the object's collision box half-size (m; zeros without an object)
    camera: np.ndarray  # main camera's world pose (xyz m, quaternion wxyz)
    qpos: np.ndarray  # [len(RESET_IDS), dof] initial robot joint positions (rad; fingers m)

    def pixels(self, actor: str) -> np.ndarray:
        """RGB of every pixel showing `actor` over all resets, [N, 3] float."""
        return np.concatenate([img[seg == self.seg_ids[actor]] for img, seg in zip(self.images, self.segs)]).astype(float)


# SAPIEN frees its Vulkan device with the last render system and sets it up again (~7 s) for
# the next env: one render system kept for the module makes every further build take ~0.3 s.
_RENDER_KEEPER: list[object] = []


def observe(params: ManiSkillParams, instruction: str, reset_ids: list[int] = RESET_IDS) -> Seen:
    """Build an env through ManiSkillSubEnv (make_gym_env) and reset it with each reset id."""
    import sapien

    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv

    sub = ManiSkillSubEnv(params, instruction)
    try:
        u, spec = sub.env.unwrapped, TASK_SHIFTS[params.id]
        if not _RENDER_KEEPER:
            _RENDER_KEEPER.append(sapien.render.RenderSystem(u._render_device))
        camera = u._sensors[sub.main_cam]
        task_attrs = (*spec.moved_together, *([spec.object] if spec.object else []))
        images, segs, poses, qpos = [], [], {}, []
        for rid in reset_ids:
            obs = sub.reset(rid)  # renders the main camera; its segmentation comes from the same picture
            # Scene actors by name, and the registry's (PegInsertionSide rebuilds its scene on every
            # reset and merges its per-scene peg into one actor)
            actors = {a.name: a for a in u.scene.actors.values()} | {getattr(u, a).name: getattr(u, a) for a in task_attrs}
            segs.append(camera.get_obs(rgb=False, depth=False, segmentation=True, position=False)["segmentation"][0, ..., 0].numpy())
            images.append(obs["main_image"])
            for actor_name, actor in actors.items():
                poses.setdefault(actor_name, []).append(actor.pose.raw_pose[0].numpy().copy())
            qpos.append(u.agent.robot.get_qpos()[0].numpy().copy())
        obj = getattr(u, spec.object) if spec.object else None
        body = obj._objs[0].find_component_by_type(sapien.physx.PhysxRigidDynamicComponent) if obj else None
        return Seen(
            instruction=sub.task()[1], images=images, segs=segs,
            seg_ids={getattr(v, "name", ""): k for k, v in u.segmentation_id_map.items()},
            poses={k: np.stack(v) for k, v in poses.items()}, obj=obj.name if obj else "",
            moved=tuple(getattr(u, a).name for a in spec.moved_together),
            half_size=np.asarray(body.collision_shapes[0].half_size, dtype=float) if body else np.zeros(3),
            camera=camera.camera.get_global_pose().raw_pose[0].numpy().copy(), qpos=np.stack(qpos),
        )
    finally:
        sub.close()


def chroma(rgb: np.ndarray) -> np.ndarray:
    """Mean colour with brightness divided out (r, g, b summing to 1)."""
    mean = np.asarray(rgb, dtype=float).reshape(-1, 3).mean(axis=0)
    return mean / mean.sum()


def check_light_scale(v: float, base: Seen, shifted: Seen) -> None:
    ratio = shifted.images[0].mean() / base.images[0].mean()
    assert ratio < (1 + v) / 2 if v < 1 else ratio > 1 + (v - 1) / 4, f"mean brightness ratio {ratio:.2f} for light_scale {v}"


def check_light_color(v: str, base: Seen, shifted: Seen) -> None:
    tint = np.asarray(parse_color(v))
    per_channel = shifted.images[0].reshape(-1, 3).mean(0) / base.images[0].reshape(-1, 3).mean(0)
    assert per_channel[tint.argmax()] > 1.3 * per_channel[tint.argmin()], f"channel ratios {per_channel} for tint {tint}"


def check_table_color(v: str, base: Seen, shifted: Seen) -> None:
    table = base.seg_ids["table-workspace"]
    region = (base.segs[0] == table) & (shifted.segs[0] == table)  # table pixels in both (objects may have moved)
    assert region.mean() > 0.3, f"the table covers {region.mean():.0%} of both images"
    target = chroma(parse_color(v))
    before, after = (np.abs(chroma(s.images[0][region]) - target).sum() for s in (base, shifted))
    assert after < before / 2, f"table colour distance to {v}: {before:.3f} -> {after:.3f}"


def check_object_color(v: str, base: Seen, shifted: Seen) -> None:
    target = chroma(parse_color(v))
    px_base, px_shift = base.pixels(base.obj), shifted.pixels(shifted.obj)
    assert len(px_base) >= 10 and len(px_shift) >= 10, "the object is in view"
    before, after = (np.abs(chroma(px) - target).sum() for px in (px_base, px_shift))
    assert after < before / 2, f"object colour distance to {v}: {before:.3f} -> {after:.3f}"


def check_object_scale(v: float, base: Seen, shifted: Seen) -> None:
    np.testing.assert_allclose(shifted.half_size, base.half_size * v, rtol=1e-5)  # the collision box
    p0, p1 = base.poses[base.obj], shifted.poses[shifted.obj]
    np.testing.assert_allclose(p1[:, 2], p0[:, 2] * v, rtol=1e-4)  # resting on the table at its new half-size
    np.testing.assert_allclose(p1[:, :2], p0[:, :2], atol=1e-6)
    area = len(shifted.pixels(shifted.obj)) / len(base.pixels(base.obj))
    assert area > (1 + v * v) / 2 if v > 1 else area < (1 + v * v) / 2, f"pixel area ratio {area:.2f} for object_scale {v}"


def check_distractors(v: int, base: Seen, shifted: Seen) -> None:
    names = [f"distractor_{i}" for i in range(v)]
    assert set(names) <= shifted.poses.keys() and not any(n.startswith("distractor") for n in base.poses)
    for n in names:
        assert any((seg == shifted.seg_ids[n]).any() for seg in shifted.segs), f"{n} never in view"
        for m in shifted.moved:  # beside the task's objects and goal, never on them
            gap = np.linalg.norm(shifted.poses[n][:, :2] - shifted.poses[m][:, :2], axis=1)
            assert gap.min() > 0.1, f"{n} within {gap.min():.3f} m of {m}"
        np.testing.assert_allclose(shifted.poses[n][:, 2], shifted.poses[n][0, 2])  # resting on the table
    assert not np.array_equal(shifted.images[0], base.images[0])


def check_camera_offset(v: list[float], base: Seen, shifted: Seen) -> None:
    np.testing.assert_allclose(shifted.camera[:3] - base.camera[:3], v, atol=1e-5)
    np.testing.assert_allclose(shifted.camera[3:], base.camera[3:], atol=1e-5)
    changed = (np.abs(shifted.images[0].astype(int) - base.images[0]).max(axis=-1) > 30).mean()
    assert changed > 0.2, f"only {changed:.0%} of the pixels changed"


def check_qpos_noise(v: float, base: Seen, shifted: Seen) -> None:
    arm = slice(0, 7)  # the Panda's arm joints (the fingers start open whatever the noise)
    spread, before = shifted.qpos[:, arm].std(axis=0).mean(), base.qpos[:, arm].std(axis=0).mean()
    assert spread > 2 * before and 0.5 * v < spread < 1.5 * v, f"initial joint spread {before:.3f} -> {spread:.3f} rad for noise {v}"


def check_xy_offset(v: list[float], base: Seen, shifted: Seen) -> None:
    assert shifted.moved
    for n in shifted.moved:
        np.testing.assert_allclose(shifted.poses[n][:, :2] - base.poses[n][:, :2], np.tile(v, (len(RESET_IDS), 1)), atol=1e-5)
        np.testing.assert_allclose(shifted.poses[n][:, 2:], base.poses[n][:, 2:], atol=1e-6)


def check_instruction(v: str, base: Seen, shifted: Seen) -> None:
    assert shifted.instruction == v and v != base.instruction


CHECKS: dict[str, Callable[[object, Seen, Seen], None]] = {
    "light_scale": check_light_scale, "light_color": check_light_color, "table_color": check_table_color,
    "distractors": check_distractors, "camera_offset": check_camera_offset, "object_color": check_object_color,
    "object_scale": check_object_scale, "robot_init_qpos_noise": check_qpos_noise, "object_xy_offset": check_xy_offset,
    "task_description": check_instruction,
}
