"""One LIBERO simulator (robosuite OffScreenRenderEnv) behind the SubEnv contract.

Runs inside a worker process of the shared subprocess pool. Building a LIBERO env costs
4-7 s and ~2.8 GB, so one env is built per task and reused for every episode of that task
(soft reset + `set_init_state`, ~0.4 s); a reset id of another task rebuilds it.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from embodied_rl.envs.backend import SubEnv
from embodied_rl.envs.libero.observation import (
    ACTION_DIM,
    MAIN_CAMERA,
    NOOP_ACTION,
    WRIST_CAMERA,
    convert,
)
from embodied_rl.envs.libero.params import LiberoParams
from embodied_rl.envs.libero.setup import ensure_libero_ready
from embodied_rl.envs.libero.suites import LiberoTask, TaskIndex, load_init_states
from embodied_rl.envs.libero.visual_lod import simplify_visual_meshes

#: robosuite ends episodes itself at `horizon` and then raises on the next step; episode length is
#: the vector env's job (max_episode_steps), so robosuite's own limit is switched off.
_ROBOSUITE_KWARGS = {"ignore_done": True, "hard_reset": False}


def _clear_gripper_command(env) -> None:
    """Zero the gripper's rate-limited command, which a soft reset keeps from the last episode.

    robosuite integrates gripper actions into `gripper.current_action` and only zeroes it when
    the model is rebuilt, so without this the first steps of an episode depend on the last one.
    """
    for robot in env.env.robots:
        if getattr(robot, "has_gripper", False):
            robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)


def fixture_seed(task: LiberoTask, init_state_id: int) -> int:
    """32-bit numpy seed of the fixture placement of one (task, init state): the same scene in
    every process, worker layout, run seed and `task_ids` selection."""
    return int(np.random.SeedSequence([zlib.crc32(task.name.encode()), init_state_id]).generate_state(1)[0])


class LiberoSubEnv(SubEnv):
    """Episodes of the tasks selected by `params`, started from flat reset ids (see suites.py)."""

    action_dim = ACTION_DIM

    def __init__(self, params: LiberoParams):
        ensure_libero_ready()
        self.params = params
        self.index = TaskIndex(params.task_suite_name, params.task_ids)
        self._env = None
        self._env_task: LiberoTask | None = None
        self._task: LiberoTask | None = None
        self.init_state_id: int | None = None

    # -- simulator lifecycle -------------------------------------------------------------
    def _build(self, task: LiberoTask):
        from libero.libero.envs import OffScreenRenderEnv

        cameras = [MAIN_CAMERA, WRIST_CAMERA] if self.params.wrist_camera else [MAIN_CAMERA]
        env = OffScreenRenderEnv(
            bddl_file_name=task.bddl_file,
            camera_names=cameras,
            camera_heights=self.params.camera_heights,
            camera_widths=self.params.camera_widths,
            control_freq=self.params.control_freq,
            **_ROBOSUITE_KWARGS,
        )
        if self.params.visual_mesh_cell is not None:
            # robosuite's MjSim holds the compiled MjModel and the offscreen context made from it;
            # the upload goes to that context's GL context (robosuite draws with the current one).
            sim = env.sim
            context = sim._render_context_offscreen
            if context is not None:
                context.gl_ctx.make_current()
            simplify_visual_meshes(sim.model._model, self.params.visual_mesh_cell, None if context is None else context.con)
        return env

    def _env_for(self, task: LiberoTask):
        if self._env is None or self._env_task != task:
            self.close()
            self._env = self._build(task)
            self._env_task = task
        return self._env

    @property
    def sim(self):
        """The MuJoCo sim of the current task (for tests and diagnostics)."""
        if self._env is None:
            raise RuntimeError("LiberoSubEnv.sim before the first reset")
        return self._env.sim

    def close(self) -> None:
        # Explicit close: robosuite's EGL context destructor otherwise prints an EGLError at exit.
        if self._env is not None:
            env, self._env, self._env_task = self._env, None, None
            env.close()

    # -- SubEnv contract -----------------------------------------------------------------
    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        task, init_state_id = self.index.locate(reset_id)
        env = self._env_for(task)
        # LIBERO places fixtures (cabinets, stoves, ...) by writing model.body_pos from the global
        # numpy RNG during reset; that is not part of the recorded init state. Seeding it from
        # (task, init state id) makes a reset id name one exact initial scene.
        np.random.seed(fixture_seed(task, init_state_id))
        env.reset()  # soft reset: sim, controllers and observables; the MJCF is not rebuilt
        _clear_gripper_command(env)
        raw = env.set_init_state(load_init_states(task.init_states_file)[init_state_id])
        # Settle with the no-op (zero motion, gripper open) exactly as the public OFT evaluation
        # does, cameras on: skipping their rendering shifts robosuite's observation sampling
        # phase, and the first policy frames would then differ from the protocol's.
        for _ in range(self.params.num_steps_wait):
            raw, _, _, _ = env.step(NOOP_ACTION)
        self._task, self.init_state_id = task, init_state_id
        return convert(raw, self.params.image_orientation, self.params.wrist_camera)

    def step(self, action: np.ndarray, render: bool = True) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        # render is not honoured: robosuite renders its cameras inside every step
        if self._task is None:
            raise RuntimeError("LiberoSubEnv.step before reset")
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape != (ACTION_DIM,) or not np.all(np.isfinite(a)):
            raise ValueError(f"LIBERO expects a finite {ACTION_DIM}-D controller action, got {np.asarray(action)!r}")
        raw, _, done, _ = self._env.step(a)
        # LIBERO's `done` is its goal predicate (_check_success) evaluated after the step.
        success = bool(done)
        return convert(raw, self.params.image_orientation, self.params.wrist_camera), float(success), success, success

    def task(self) -> tuple[str, str]:
        if self._task is None:
            raise RuntimeError("LiberoSubEnv.task before reset")
        return self._task.task_id, self._task.language


@dataclass(frozen=True)
class LiberoSubEnvFactory:
    """Picklable `(rank) -> LiberoSubEnv` for the subprocess pool (the rank does not matter:
    reset ids alone determine episodes)."""

    params: LiberoParams

    def __call__(self, rank: int) -> LiberoSubEnv:
        return LiberoSubEnv(self.params)
