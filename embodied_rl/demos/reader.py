"""`load_demos`: a demo directory -> validated SFT samples (an observation and the next C actions).

Every problem is a one-line `DemoError` naming the file and the mismatch: a missing or
truncated file, demos of another task, another image size or control mode, a model whose
action_dim or chunk length differs, or a state vector of another size.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from embodied_rl.demos.manifest import (
    MANIFEST,
    TRAJECTORY_H5,
    TRAJECTORY_JSON,
    DemoError,
    DemoManifest,
)


@dataclass
class DemoChunks:
    """N training samples, one per recorded step t of every episode.

    main_images / wrist_images: uint8 [N, H, W, 3] the observation at t (wrist None if not recorded).
    states: float32 [N, D] the policy's state vector at t (layout: manifest.state_layout).
    actions: float32 [N, C, A] policy actions t .. t+C-1; past the episode end the last action
        is repeated and `action_mask` is False there (the RL loss masks those steps too).
    episode_index / step_index: int64 [N] where each sample comes from.
    instructions: the language instruction of each sample (the one its demos were recorded with).
    manifest: the manifest of the directory (the first one's, for demos concatenated from several).
    """

    main_images: np.ndarray
    wrist_images: np.ndarray | None
    states: np.ndarray
    actions: np.ndarray
    action_mask: np.ndarray
    episode_index: np.ndarray
    step_index: np.ndarray
    instructions: list[str]
    manifest: DemoManifest

    def __len__(self) -> int:
        return int(self.actions.shape[0])


def read_manifest(path: str | Path) -> DemoManifest:
    root = Path(path)
    if not root.is_dir():
        raise DemoError(f"{root}: no such demo directory")
    return DemoManifest.read(root / MANIFEST)


def _expect(file: Path, what: str, got, want) -> None:
    if want is not None and got != want:
        raise DemoError(f"{file}: demos have {what} {got}, expected {want}")


def check_demos(path: str | Path, *, chunk_len: int, action_dim: int | None = None, task_id: str | None = None,
                image_size: tuple[int, int] | None = None, control_mode: str | None = None,
                state_dim: int | None = None) -> DemoManifest:
    """Check a demo directory's manifest against what its reader expects (`None` skips a check);
    reads no episode data, so the config checks run it before anything starts."""
    root = Path(path)
    manifest = read_manifest(root)
    file = root / MANIFEST
    _expect(file, "task", manifest.task_id, task_id)
    _expect(file, "control mode", manifest.control_mode, control_mode)
    _expect(file, "image size (height x width)", tuple(manifest.image_size), None if image_size is None else tuple(image_size))
    _expect(file, "action_dim", manifest.action_dim, action_dim)
    _expect(file, "chunk length (num_action_chunks)", manifest.num_action_chunks, chunk_len)
    _expect(file, "state dim", manifest.state_dim, state_dim)
    for name in (TRAJECTORY_JSON, TRAJECTORY_H5):
        if not (root / name).is_file():
            raise DemoError(f"{root / name}: missing")
    return manifest


def load_demos(path: str | Path, *, chunk_len: int, images: bool = True, **expect) -> DemoChunks:
    """Read and check a directory written by `embodied-rl demos` (`expect`: see `check_demos`).
    images=False skips the cameras (their arrays are then empty), e.g. for action statistics."""
    manifest = check_demos(path, chunk_len=chunk_len, **expect)
    episodes = _read_episodes(Path(path) / TRAJECTORY_H5, manifest, images)
    return _chunk(episodes, manifest, chunk_len)


def maniskill_params(env_cfg):
    """An env config's `init_params` as ManiSkillParams (a loaded config may hold them as a dict)."""
    from embodied_rl.envs.maniskill.params import ManiSkillParams

    params = env_cfg.init_params
    return params if isinstance(params, ManiSkillParams) else ManiSkillParams(**params)


def _task_for(cfg, path: str | Path):
    """(config path, env config) of the env.train task a demo directory was recorded for:
    env.train itself, or the mixture task of the demos' task id (the first, if the mixture runs
    that id twice)."""
    if not cfg.env.train.tasks:
        return "env.train", cfg.env.train
    task_id = read_manifest(path).task_id
    tasks = [(k, t) for k, t in cfg.env.train.task_configs("env.train") if t.env_type == "maniskill"]
    ids = [maniskill_params(t).id for _, t in tasks]
    if task_id not in ids:
        raise DemoError(f"{Path(path) / MANIFEST}: demos of {task_id}, but env.train's mixture runs "
                        f"{', '.join(ids) or 'no ManiSkill task'}; record them with `embodied-rl demos CONFIG --task I`")
    return tasks[ids.index(task_id)]


def _expectations(cfg, env_cfg) -> dict:
    """What an experiment config (`actor.model`, and `env_cfg` of env.train) expects of its demos."""
    params = maniskill_params(env_cfg)
    model = cfg.actor.model
    return {"chunk_len": model.num_action_chunks, "action_dim": model.action_dim, "task_id": params.id,
            "image_size": (params.camera_heights, params.camera_widths), "control_mode": params.control_mode,
            "state_dim": model.proprio_dim if model.use_proprio else None}


def check_demos_for(cfg, path: str | Path) -> DemoManifest:
    """`check_demos` against an experiment config: its policy, and the task of env.train (or of
    its mixture) that the demos were recorded in."""
    key, env_cfg = _task_for(cfg, path)
    manifest = check_demos(path, **_expectations(cfg, env_cfg))
    _check_visuals(Path(path) / MANIFEST, manifest, env_cfg, key)
    return manifest


def load_demos_for(cfg, path: str | Path, *, images: bool = True) -> DemoChunks:
    """`load_demos` checked against an experiment config (`env.train` and `actor.model`)."""
    manifest = check_demos_for(cfg, path)  # the manifest read and checked once
    episodes = _read_episodes(Path(path) / TRAJECTORY_H5, manifest, images)
    return _chunk(episodes, manifest, cfg.actor.model.num_action_chunks)


def _check_visuals(file: Path, manifest: DemoManifest, env_cfg, key: str) -> None:
    """The demos' images show the robot's meshes as the config renders them (robot_visual_cell;
    a manifest without the key was rendered with the full meshes)."""
    got = (manifest.env_config.get("init_params") or {}).get("robot_visual_cell")
    want = maniskill_params(env_cfg).robot_visual_cell
    if got != want:
        raise DemoError(f"{file}: demos were rendered with init_params.robot_visual_cell={got} (null = the full meshes), "
                        f"the config renders with {'null' if want is None else want}; record them again with this config, or set "
                        f"{key}.init_params.robot_visual_cell={'null' if got is None else got}")


@dataclass
class _Episode:
    main: np.ndarray
    wrist: np.ndarray | None
    states: np.ndarray
    actions: np.ndarray


def _camera(group, camera: str, length: int, images: bool) -> np.ndarray:
    """uint8 [length, H, W, 3] of one camera of an episode group; [length, 0, 0, 3] without images."""
    return group[f"obs/sensor_data/{camera}/rgb"][:length] if images else np.zeros((length, 0, 0, 3), np.uint8)


def _read_episodes(file: Path, manifest: DemoManifest, images: bool = True) -> list[_Episode]:
    import h5py

    main_cam, wrist_cam = manifest.cameras["main"], manifest.cameras.get("wrist")
    h, w = manifest.image_size
    out = []
    try:
        with h5py.File(file, "r") as h5:
            for entry in manifest.episodes:
                name, t = f"traj_{entry.episode_id}", entry.length
                if name not in h5:
                    raise DemoError(f"{file}: {name} is missing (the manifest lists {manifest.num_demos} episodes)")
                g = h5[name]
                ep = _Episode(
                    main=_camera(g, main_cam, t, images),
                    wrist=_camera(g, wrist_cam, t, images) if wrist_cam else None,
                    states=g["obs/state"][:t],
                    actions=g["policy_actions"][:],
                )
                shapes = {"policy_actions": (ep.actions.shape, (t, manifest.action_dim)),
                          "obs/state": (ep.states.shape, (t, manifest.state_dim)),
                          "main camera": (ep.main.shape, (t, h, w, 3) if images else (t, 0, 0, 3))}
                if ep.wrist is not None and images:
                    shapes["wrist camera"] = (ep.wrist.shape, (t, h, w, 3))
                for what, (got, want) in shapes.items():
                    if tuple(got) != want:
                        raise DemoError(f"{file}: {name} {what} has shape {tuple(got)}, the manifest implies {want}")
                out.append(ep)
    except (OSError, KeyError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise DemoError(f"{file}: unreadable (truncated or corrupt HDF5): {first}") from None
    return out


def _chunk(episodes: list[_Episode], manifest: DemoManifest, chunk_len: int) -> DemoChunks:
    if chunk_len < 1:
        raise DemoError(f"chunk_len must be >= 1, got {chunk_len}")
    if not episodes:
        raise DemoError("the manifest lists no episodes")
    actions, masks, ep_idx, step_idx = [], [], [], []
    offsets = np.arange(chunk_len)
    for e, ep in enumerate(episodes):
        t = ep.actions.shape[0]
        idx = np.arange(t)[:, None] + offsets[None, :]  # [T, C]
        actions.append(ep.actions[np.minimum(idx, t - 1)])
        masks.append(idx < t)
        ep_idx.append(np.full(t, e, np.int64))
        step_idx.append(np.arange(t, dtype=np.int64))
    wrist = None if episodes[0].wrist is None else np.concatenate([ep.wrist for ep in episodes])
    return DemoChunks(
        main_images=np.concatenate([ep.main for ep in episodes]),
        wrist_images=wrist,
        states=np.concatenate([ep.states for ep in episodes]).astype(np.float32),
        actions=np.concatenate(actions).astype(np.float32),
        action_mask=np.concatenate(masks),
        episode_index=np.concatenate(ep_idx),
        step_index=np.concatenate(step_idx),
        instructions=[manifest.instruction] * sum(ep.actions.shape[0] for ep in episodes),
        manifest=manifest,
    )
