"""The env layer: simulator backends behind one chunked, vectorised env (`make_env`)."""
from __future__ import annotations

import numpy as np

from embodied_rl.config.schema.env import EnvConfig, MixtureTask
from embodied_rl.envs.backend import (
    SimulatorBackend,
    SubEnv,
    available_simulators,
    get_simulator,
    register_simulator,
)
from embodied_rl.envs.mixture import MixtureVectorEnv, build_mixture
from embodied_rl.envs.vector_env import ChunkedVectorEnv
from embodied_rl.errors import ConfigError
from embodied_rl.types import ChunkStepResult, EnvObservation, EpisodeSummary

__all__ = [
    "ChunkStepResult", "ChunkedVectorEnv", "EnvObservation", "EpisodeSummary", "MixtureVectorEnv", "SimulatorBackend",
    "SubEnv", "available_simulators", "get_simulator", "make_env", "register_simulator",
]


def make_env(env_cfg: EnvConfig, num_envs: int, *, seed_offset: int = 0, video_dir: str | None = None,
             env_worker: int = 0, stage: int = 0) -> ChunkedVectorEnv | MixtureVectorEnv:
    """Build `num_envs` sub-envs of `env_cfg.env_type` behind the shared episode semantics, or
    of each task of a mixture section (`env_cfg.tasks`, envs/mixture.py).

    seed_offset: the env worker/stage index (RLinf: rank * stage_num + stage_id), whose sub-envs
        are the run's seed_offset*num_envs .. +num_envs-1; the simulator seed is
        `env_cfg.seed + seed_offset` and reset ids are drawn from (seed, epoch, run-wide group,
        episode), so they do not depend on the split over workers and stages.
    video_dir: overrides `video_cfg.video_base_dir` (e.g. `<log_path>/video/eval`); a recorder
        exists only when `video_cfg.save_video` is true. Videos are tagged
        `worker<env_worker>_stage<stage>` (a mixture's: `..._task<i>` per task).
    """
    if num_envs < 1:
        raise ConfigError(f"env: num_envs={num_envs} must be >= 1 (check env.total_num_envs and the env worker count)")
    if env_cfg.tasks:
        return build_mixture(env_cfg, num_envs, seed_offset, make_single=lambda task, n, groups, i: _make_single(
            task, n, seed_offset=seed_offset, video_dir=video_dir, env_worker=env_worker, stage=stage, groups=groups,
            tag=f"worker{env_worker}_stage{stage}_task{i}", key=f"env.tasks[{i}]"))
    return _make_single(env_cfg, num_envs, seed_offset=seed_offset, video_dir=video_dir, env_worker=env_worker, stage=stage,
                        tag=f"worker{env_worker}_stage{stage}", key="env")


def _make_single(env_cfg: EnvConfig, num_envs: int, *, seed_offset: int, video_dir: str | None, env_worker: int, stage: int,
                 tag: str, key: str, groups: np.ndarray | None = None) -> ChunkedVectorEnv:
    ChunkedVectorEnv.validate(env_cfg, num_envs)
    backend: SimulatorBackend
    if env_cfg.server is not None:  # the simulator runs in an env server; it knows the reset ids
        from embodied_rl.envs.service.client import ServedBackend

        backend = ServedBackend(env_cfg, num_envs, seed=env_cfg.seed + seed_offset, key=key)
        try:
            space = _sized(env_cfg, backend.split_reset_ids(env_cfg.reset_id_split), key)
        except BaseException:
            backend.close()
            raise
    else:
        backend_cls, params = _backend_class(env_cfg, key)
        space = _sized(env_cfg, backend_cls.reset_id_space(params, env_cfg.reset_id_split), key)
        backend = backend_cls(env_cfg, params, num_envs, seed=env_cfg.seed + seed_offset)
    try:
        recorder = None
        if env_cfg.video_cfg.save_video:
            from embodied_rl.envs.video import VideoRecorder

            recorder = VideoRecorder(
                video_dir or env_cfg.video_cfg.video_base_dir, fps=env_cfg.video_cfg.fps,
                info_on_video=env_cfg.video_cfg.info_on_video, tag=tag,
                simulator=env_cfg.env_type, env_worker=env_worker, stage=stage,
            )
        return ChunkedVectorEnv(backend, env_cfg, reset_id_space=space, seed_offset=seed_offset, recorder=recorder, groups=groups)
    except BaseException:
        backend.close()
        raise


def _backend_class(env_cfg: EnvConfig, key: str) -> tuple[type[SimulatorBackend], object]:
    from embodied_rl.config.typecheck import build

    try:
        backend_cls = get_simulator(env_cfg.env_type)
    except KeyError as err:
        raise ConfigError(f"{key}.env_type: {err.args[0]}") from None
    params = env_cfg.init_params
    if not isinstance(params, backend_cls.params_cls):
        params = build(backend_cls.params_cls, dict(params), f"{key}.init_params")
    return backend_cls, params


def _sized(env_cfg: EnvConfig, space, key: str):
    """A mixture task's first train_size / test_size ids of its split."""
    size = env_cfg.size() if isinstance(env_cfg, MixtureTask) else None
    if size is None:
        return space
    if size > len(space):
        which = "train_size" if env_cfg.reset_id_split == "train" else "test_size"
        raise ConfigError(f"{key}.{which}={size} exceeds the {len(space)} initial states of its {env_cfg.reset_id_split} split; "
                          f"set it to at most {len(space)} or null")
    return space[:size]
