"""`env_type: maniskill`: CPU sim in the subprocess pool, or the batched GPU sim in-process."""
from __future__ import annotations

from typing import Any, ClassVar

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.backend import EnvSpec, SimulatorBackend, register_simulator
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.envs.maniskill.spec import maniskill_env_spec
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnvFactory
from embodied_rl.envs.subproc_backend import SubprocBackend
from embodied_rl.errors import ConfigError


def instruction_of(cfg: EnvConfig, params: ManiSkillParams) -> str:
    if not cfg.task_description.strip():
        raise ConfigError(
            f"env.task_description is empty: ManiSkill task {params.id} has no language instruction; "
            "set one in the env config, e.g. task_description: pick up the red cube"
        )
    return cfg.task_description


class ManiSkillCPUBackend(SubprocBackend):
    """One CPU-sim ManiSkill env per process (ManiSkill's CPU sim holds one env per process)."""

    params_cls: ClassVar[type] = ManiSkillParams

    def __init__(self, cfg: EnvConfig, params: ManiSkillParams, num_envs: int, *, seed: int) -> None:
        # seed is unused: every episode is seeded by its reset id (ManiSkill reset seed)
        factory = ManiSkillSubEnvFactory(params, instruction_of(cfg, params))
        super().__init__(factory, num_envs, options=cfg.subproc, num_reset_ids=None)


_SIM_BACKENDS: dict[str, str] = {
    "cpu": "embodied_rl.envs.maniskill.backend:ManiSkillCPUBackend",
    "gpu": "embodied_rl.envs.maniskill.gpu_backend:ManiSkillGPUBackend",
}


@register_simulator("maniskill")
class ManiSkillBackend(SimulatorBackend):
    """Entry in the simulator registry; builds the implementation named by `sim_backend`."""

    params_cls: ClassVar[type] = ManiSkillParams

    @classmethod
    def env_spec(cls, params: ManiSkillParams) -> EnvSpec:
        return maniskill_env_spec(params)

    @classmethod
    def check_names(cls, params: ManiSkillParams, key: str) -> None:
        # Imports ManiSkill (seconds): only for configs that use it.
        from embodied_rl.envs.maniskill.registry import check_names

        check_names(params, key)

    def __new__(cls, cfg: EnvConfig, params: ManiSkillParams, num_envs: int, *, seed: int) -> Any:
        import importlib

        module, name = _SIM_BACKENDS[params.sim_backend].split(":")
        impl = getattr(importlib.import_module(module), name)
        return impl(cfg, params, num_envs, seed=seed)
