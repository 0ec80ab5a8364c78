"""ManiSkill3 backend (`env_type: maniskill`). Importing this registers it."""
from embodied_rl.envs.maniskill.backend import ManiSkillBackend, ManiSkillCPUBackend
from embodied_rl.envs.maniskill.make import MissingAssetError
from embodied_rl.envs.maniskill.params import ManiSkillParams

__all__ = ["ManiSkillBackend", "ManiSkillCPUBackend", "ManiSkillParams", "MissingAssetError"]
