"""Writing a demo directory: ManiSkill's trajectory format (HDF5 + JSON) plus our manifest.

    <out>/trajectory.h5    traj_<i>: actions (controller, replayable by ManiSkill's tools),
                           policy_actions, rewards, success, terminated, truncated,
                           env_states/..., obs/sensor_data/<camera>/rgb, obs/state
    <out>/trajectory.json  env_info (env_id, env_kwargs, max_episode_steps), episodes (seeds)
    <out>/manifest.json    see manifest.py

Everything is written into a hidden sibling directory and renamed into place at the end, so
an interrupted run leaves no half-written dataset and an existing one is never touched unless
`overwrite` is given.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from embodied_rl.demos.manifest import (
    MANIFEST,
    TRAJECTORY_H5,
    TRAJECTORY_JSON,
    DemoError,
)
from embodied_rl.demos.recorder import EpisodeRecord


def check_output_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not overwrite:
        raise DemoError(f"{out}: already exists; choose another --out or pass --overwrite to replace it")
    if out.exists() and not out.is_dir():
        raise DemoError(f"{out}: exists and is not a directory")


def _write_tree(group, name: str, tree: dict) -> None:
    sub = group.create_group(name, track_order=True)
    for key, value in tree.items():
        if isinstance(value, dict):
            _write_tree(sub, key, value)
        else:
            sub.create_dataset(key, data=value)


class DemoWriter:
    """Context manager: `add()` episodes in order, then `finish()`; an exception discards everything."""

    def __init__(self, out: Path, *, overwrite: bool = False) -> None:
        import h5py

        self.out, self.overwrite = Path(out), overwrite
        check_output_dir(self.out, overwrite)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.partial-", dir=self.out.parent))
        umask = os.umask(0)
        os.umask(umask)
        self.tmp.chmod(0o777 & ~umask)  # a normal directory once renamed, not mkdtemp's private 0700
        self.h5 = h5py.File(self.tmp / TRAJECTORY_H5, "w", track_order=True)
        self.count = 0

    def __enter__(self) -> DemoWriter:  # noqa: PYI034 - final in practice
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if kind is not None:
            self.abort()

    def add(self, rec: EpisodeRecord, main_camera: str, wrist_camera: str | None) -> int:
        """Store one episode as traj_<n>; returns n."""
        n = self.count
        g = self.h5.create_group(f"traj_{n}", track_order=True)
        g.attrs["reset_id"] = rec.reset_id
        g.create_dataset("actions", data=rec.env_actions)
        g.create_dataset("policy_actions", data=rec.policy_actions)
        g.create_dataset("terminated", data=rec.terminated)
        g.create_dataset("truncated", data=rec.truncated)
        g.create_dataset("success", data=rec.success)
        g.create_dataset("rewards", data=rec.rewards)
        _write_tree(g, "env_states", rec.env_states)
        obs = g.create_group("obs", track_order=True)
        sensors = obs.create_group("sensor_data", track_order=True)
        cams = [(main_camera, rec.main_images)] + ([(wrist_camera, rec.wrist_images)] if wrist_camera else [])
        for cam, images in cams:
            # per-frame chunks: gzip shrinks rendered frames a lot and a frame reads alone
            sensors.create_group(cam).create_dataset("rgb", data=images, chunks=(1, *images.shape[1:]),
                                                     compression="gzip", compression_opts=4)
        obs.create_dataset("state", data=rec.states)
        self.count += 1
        return n

    def finish(self, trajectory_json: dict, manifest_json: str) -> Path:
        """Write the JSON files and move the dataset to `out` (replacing it only with `overwrite`)."""
        self.h5.close()
        (self.tmp / TRAJECTORY_JSON).write_text(json.dumps(trajectory_json, indent=2))
        (self.tmp / MANIFEST).write_text(manifest_json)
        check_output_dir(self.out, self.overwrite)  # it may have appeared while we were recording
        old = None
        if self.out.exists():
            old = self.out.with_name(f".{self.out.name}.replaced-{self.tmp.name.rsplit('-', 1)[-1]}")
            self.out.rename(old)
        self.tmp.rename(self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.out

    def abort(self) -> None:
        try:
            self.h5.close()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def trajectory_metadata(env_id: str, env_kwargs: dict, max_episode_steps: int, control_mode: str,
                        episodes: list[tuple[int, int, int, bool]], source_desc: str) -> dict:
    """ManiSkill's trajectory JSON; episodes are (episode_id, reset_id, length, success)."""
    return {
        "env_info": {"env_id": env_id, "env_kwargs": env_kwargs, "max_episode_steps": max_episode_steps},
        "source_type": "scripted",
        "source_desc": source_desc,
        "episodes": [
            {"episode_id": i, "episode_seed": seed, "reset_kwargs": {"seed": seed}, "control_mode": control_mode,
             "elapsed_steps": length, "success": success, "info": {"success": success}}
            for i, seed, length, success in episodes
        ],
    }
