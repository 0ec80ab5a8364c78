"""LIBERO backend (`env_type: libero`). Importing this registers it; LIBERO itself is imported
only when a sub-env is built, after `ensure_libero_ready()` made that import non-interactive."""
from embodied_rl.envs.libero.backend import LiberoBackend
from embodied_rl.envs.libero.params import LiberoParams
from embodied_rl.envs.libero.setup import LiberoSetupError, ensure_libero_ready
from embodied_rl.envs.libero.sub_env import LiberoSubEnv, LiberoSubEnvFactory
from embodied_rl.envs.libero.suites import (
    SUITE_MAX_EPISODE_STEPS,
    SUITES,
    LiberoTask,
    TaskIndex,
    suite_tasks,
)

__all__ = [
    "SUITES", "SUITE_MAX_EPISODE_STEPS", "LiberoBackend", "LiberoParams", "LiberoSetupError", "LiberoSubEnv",
    "LiberoSubEnvFactory", "LiberoTask", "TaskIndex", "ensure_libero_ready", "suite_tasks",
]
