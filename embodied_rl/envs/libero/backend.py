"""`env_type: libero`: one LIBERO simulator per process in the shared subprocess pool."""
from __future__ import annotations

from typing import ClassVar

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.backend import EnvSpec, register_simulator
from embodied_rl.envs.libero.observation import ACTION_DIM, STATE_DIM
from embodied_rl.envs.libero.params import LiberoParams
from embodied_rl.envs.libero.setup import ensure_libero_ready
from embodied_rl.envs.libero.sub_env import LiberoSubEnvFactory
from embodied_rl.envs.libero.suites import TaskIndex
from embodied_rl.envs.subproc_backend import SubprocBackend
from embodied_rl.errors import ConfigError


@register_simulator("libero")
class LiberoBackend(SubprocBackend):
    """N LIBERO sub-envs; reset id r = (task, init state) pair r of the selected tasks (suites.py).

    `seed` is not used by the simulators: LIBERO episodes start from recorded init states and
    the fixture placement is seeded from (task, init state), so a reset id alone fixes the scene;
    `env.seed` drives the reset-id stream in ChunkedVectorEnv.
    """

    params_cls: ClassVar[type] = LiberoParams

    @classmethod
    def reset_id_space(cls, params: LiberoParams, split: str) -> list[int]:
        """Each selected task's init states split on their own: the last fifth held out for eval."""
        return TaskIndex(params.task_suite_name, params.task_ids).split(split)

    @classmethod
    def env_spec(cls, params: LiberoParams) -> EnvSpec:
        return EnvSpec(image_size=(params.camera_heights, params.camera_widths), cameras=2 if params.wrist_camera else 1,
                       state_dim=STATE_DIM, action_dim=ACTION_DIM)

    def __init__(self, cfg: EnvConfig, params: LiberoParams, num_envs: int, *, seed: int) -> None:
        # In the parent first: config/asset errors surface as one line before any process starts,
        # and the children inherit LIBERO_CONFIG_PATH and MUJOCO_GL.
        ensure_libero_ready()
        if cfg.task_description.strip():
            raise ConfigError(
                "env.task_description is not used by LIBERO (each task's own instruction is the prompt); remove it"
            )
        self.index = TaskIndex(params.task_suite_name, params.task_ids)
        super().__init__(
            LiberoSubEnvFactory(params), num_envs, options=cfg.subproc,
            num_reset_ids=len(self.index), action_dim=ACTION_DIM,
        )
