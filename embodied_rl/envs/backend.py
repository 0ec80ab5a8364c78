"""The simulator backend contract and its registry.

A backend owns N independent sub-envs of one simulator and knows nothing about chunks,
auto-reset, reward shaping, grouping or video: those episode semantics are implemented
once in `ChunkedVectorEnv` (envs/vector_env.py) for every simulator.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from embodied_rl.envs.reset_split import seed_split
from embodied_rl.errors import DuplicateRegistration
from embodied_rl.registry import shadows_builtin
from embodied_rl.types import EnvObservation


@dataclass
class BackendStep:
    """Result of one env step of all N sub-envs (controller-space actions in).

    obs:         EnvObservation of all N sub-envs after the step.
    rewards:     float32 [N] raw simulator reward (success reward or dense reward).
    terminated:  bool [N] the simulator ended the episode (usually success).
    success:     bool [N] task success at this step.
    failed:      bool [N] the sub-env crashed and was restarted; its episode counts as failed.
    """

    obs: EnvObservation
    rewards: np.ndarray
    terminated: np.ndarray
    success: np.ndarray
    failed: np.ndarray | None = None


@dataclass(frozen=True)
class EnvSpec:
    """What an env config's sub-envs give the policy and take from it, known from the config alone
    (before any simulator starts); None where only the running simulator knows.

    image_size: (height, width) of every camera image; cameras: images per observation (main,
    plus wrist); state_dim: size of the "state" vector; action_dim: the controller's action size;
    privileged_state_dim: size of EnvObservation.privileged_states (the clock included) where the
    config asks for them.
    """

    image_size: tuple[int, int] | None = None
    cameras: int | None = None
    state_dim: int | None = None
    action_dim: int | None = None
    privileged_state_dim: int | None = None


class SubEnv(ABC):
    """One simulator instance (one episode at a time), hostable in a worker process.

    Observation dicts carry: "main_image" uint8 [H, W, 3] (upright), optional
    "wrist_image" uint8 [H, W, 3], "state" float32 [D]. Simulators with one process per
    sub-env (ManiSkill CPU sim, LIBERO) implement this and run inside the shared
    subprocess pool (envs/subproc_pool.py), which handles crashes, hangs and restarts.
    """

    #: controller action dimension, reported to the pool (set it in __init__ or as a class attribute)
    action_dim: int | None = None

    @abstractmethod
    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        """Start an episode from the initial state named by `reset_id`."""

    #: step(render=False) may leave the images out of its observation; `observe` renders them
    renders_on_demand: bool = False

    @abstractmethod
    def step(self, action: np.ndarray, render: bool = True) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        """Apply a controller-space action [action_dim]; returns (obs, reward, terminated, success).
        render=False: the obs may lack the image entries (when `renders_on_demand`)."""

    def observe(self) -> dict[str, np.ndarray]:
        """The current observation with its images (for `renders_on_demand` sub-envs)."""
        raise NotImplementedError(f"{type(self).__name__} renders on every step")

    @abstractmethod
    def task(self) -> tuple[str, str]:
        """(task_id, instruction) of the current episode."""

    def close(self) -> None:
        """Release the simulator."""


class SimulatorBackend(ABC):
    """N sub-envs of one simulator, reset individually from integer reset ids.

    Construction (what `make_env` calls): `cls(cfg, params, num_envs, seed=seed)` with the
    full `EnvConfig`, its `init_params` parsed into `params_cls`, and the simulator seed.
    Backends whose sub-envs are one process each should subclass `SubprocBackend`
    (envs/subproc_backend.py) and only provide a picklable `SubEnv` factory.
    """

    #: dataclass of this simulator's `init_params` section (validated by the config loader)
    params_cls: ClassVar[type]

    num_envs: int

    @abstractmethod
    def reset(self, env_ids: Sequence[int], reset_ids: Sequence[int]) -> EnvObservation:
        """Reset the given sub-envs to the states named by `reset_ids` (same length).

        Returns an EnvObservation whose rows are those sub-envs, in `env_ids` order.
        A reset id fully determines the initial state (ManiSkill: reset seed;
        LIBERO: index into the suite's (task, init state) pairs).
        """

    #: step(render=False) skips the camera images (the simulator's costliest part on a CPU) and
    #: `observe` renders them on demand; a backend without it renders on every step.
    renders_on_demand: bool = False

    @abstractmethod
    def step(self, actions: np.ndarray, env_ids: Sequence[int] | None = None, render: bool = True) -> BackendStep:
        """Step sub-envs `env_ids` (default: all) with controller-space actions float32 [N, action_dim].

        Rows of the result cover all N sub-envs; rows of sub-envs not in `env_ids` (finished
        episodes waiting for `reset`) repeat their last observation with zero reward and no flags.
        render=False (honoured when `renders_on_demand`): the stepped rows' images are those of
        their last rendered observation; everything else is current.
        """

    def observe(self, env_ids: Sequence[int]) -> EnvObservation:
        """The current observation of sub-envs `env_ids`, images rendered (rows in `env_ids` order)."""
        raise NotImplementedError(f"{type(self).__name__} renders on every step")

    @property
    @abstractmethod
    def action_dim(self) -> int:
        """Dimension of the controller action."""

    @abstractmethod
    def num_reset_ids(self) -> int | None:
        """How many distinct reset ids exist (None = unbounded, e.g. any seed)."""

    @abstractmethod
    def task_of(self, env_index: int) -> tuple[str, str]:
        """(task_id, instruction) the sub-env is currently running."""

    @classmethod
    def reset_id_space(cls, params: Any, split: str) -> Sequence[int]:
        """The reset ids `split` (env.<mode>.reset_id_split) draws from; train and eval are
        disjoint. Default: reset ids are seeds (envs/reset_split.py)."""
        return seed_split(split)

    @classmethod
    def env_spec(cls, params: Any) -> EnvSpec:
        """What sub-envs built from `params` (the backend's params_cls) give and take, as far as
        the config tells (checked against the policy before a run starts). Default: nothing known."""
        return EnvSpec()

    @classmethod
    def check_names(cls, params: Any, key: str) -> None:
        """Raise ConfigError (one line, `key` = the section's init_params path) where `params`
        names something outside the simulator's closed sets (tasks, robots, controllers,
        cameras), read from its registries without starting it. Default: nothing to check."""

    def served_by(self) -> dict[str, Any] | None:
        """Facts of the process that runs the simulator when it is not this one (an env server):
        its interpreter and simulator_facts, for the run's environment.json. Default: None."""
        return None

    def close(self) -> None:
        """Release simulator processes and contexts."""


_SIMULATORS: dict[str, type[SimulatorBackend]] = {}
#: Built-in simulators by the package that registers them, imported on first use: a
#: ManiSkill-only install must not need LIBERO and vice versa.
BUILTIN_SIMULATORS = {"maniskill": "embodied_rl.envs.maniskill", "libero": "embodied_rl.envs.libero"}


def register_simulator(name: str):
    """Class decorator: make a backend available as `env_type: <name>` in env configs."""

    def wrap(cls: type[SimulatorBackend]) -> type[SimulatorBackend]:
        if name in _SIMULATORS or shadows_builtin(name, cls, BUILTIN_SIMULATORS):
            raise DuplicateRegistration(f"simulator {name!r} registered twice")
        _SIMULATORS[name] = cls
        return cls

    return wrap


def get_simulator(name: str) -> type[SimulatorBackend]:
    if name not in _SIMULATORS and name in BUILTIN_SIMULATORS:
        _import_builtin(BUILTIN_SIMULATORS[name])
    if name not in _SIMULATORS:
        raise KeyError(f"unknown env_type {name!r}; valid: {', '.join(available_simulators()) or '(none)'}")
    return _SIMULATORS[name]


def _import_builtin(module: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except ModuleNotFoundError as err:
        if not err.name or not err.name.startswith("embodied_rl"):
            return  # simulator package not installed; get_simulator reports the name
        raise


def spec_of(env_cfg: Any, key: str) -> EnvSpec:
    """The EnvSpec of an env config's sub-envs (`key`: its config path); nothing known for a
    served simulator (env_cfg.server) that this interpreter does not have."""
    from embodied_rl.config.typecheck import build

    try:
        backend = get_simulator(env_cfg.env_type)
    except KeyError:
        if env_cfg.server is not None:
            return EnvSpec()
        raise
    return backend.env_spec(build(backend.params_cls, dict(env_cfg.init_params), f"{key}.init_params"))


def available_simulators() -> list[str]:
    for module in BUILTIN_SIMULATORS.values():
        _import_builtin(module)
    return sorted(_SIMULATORS)
