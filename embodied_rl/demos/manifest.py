"""`manifest.json`: what a demo dataset holds and what it was recorded for, checked on load."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_rl.errors import UserError

FORMAT = "embodied_rl.demos"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TRAJECTORY_H5 = "trajectory.h5"
TRAJECTORY_JSON = "trajectory.json"


class DemoError(UserError):
    """A demo dataset is missing, corrupt or does not fit: one line naming the file and the mismatch."""


@dataclass
class EpisodeEntry:
    episode_id: int  # trajectory group traj_<episode_id> in trajectory.h5
    reset_id: int  # ManiSkill reset seed: env.reset(seed=reset_id) recreates the initial state
    length: int  # actions (env steps); the episode has length + 1 observations
    success: bool
    episode_return: float


@dataclass
class DemoManifest:
    task_id: str
    instruction: str
    control_mode: str
    image_size: list[int]  # [height, width] of every camera
    cameras: dict[str, str | None]  # {"main": sensor, "wrist": sensor or None}
    state_layout: list[str]  # names of the state vector's entries
    privileged_state: list[str]  # entries the cameras do not show (e.g. PickCube's goal)
    action_dim: int
    num_action_chunks: int  # chunk length C of the policy the demos were recorded for
    action_adapter: dict[str, Any]  # the env config's policy -> controller mapping (actions are policy-side)
    max_episode_steps: int
    reward_mode: str
    seed_start: int
    num_attempted: int
    failed_reset_ids: list[int]
    episodes: list[EpisodeEntry]
    statistics: dict[str, Any]  # OpenVLA dataset_statistics block: action / proprio q01, q99, mean, std, min, max, mask
    generator: dict[str, Any]  # package version, expert class and version
    env_config: dict[str, Any]  # the full env.train section the demos were recorded with
    created: str
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    files: dict[str, str] = field(default_factory=lambda: {"trajectory": TRAJECTORY_H5, "metadata": TRAJECTORY_JSON})

    @property
    def num_demos(self) -> int:
        return len(self.episodes)

    @property
    def num_failed(self) -> int:
        return len(self.failed_reset_ids)

    @property
    def state_dim(self) -> int:
        return len(self.state_layout)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["num_demos"], data["num_failed"] = self.num_demos, self.num_failed  # for readers of the file
        return json.dumps(data, indent=2)

    @classmethod
    def read(cls, path: Path) -> DemoManifest:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DemoError(f"{path}: missing; not a directory written by `embodied-rl demos`") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise DemoError(f"{path}: not valid JSON (truncated or corrupt): {err}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DemoError(f"{path}: not an {FORMAT} manifest (format={data.get('format') if isinstance(data, dict) else None!r})")
        if data.get("format_version") != FORMAT_VERSION:
            raise DemoError(f"{path}: format_version {data.get('format_version')} is not supported (this reader: {FORMAT_VERSION})")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(n for n in names if n not in data and n not in ("format", "format_version", "files"))
        if missing:
            raise DemoError(f"{path}: missing keys {', '.join(missing)}")
        try:
            episodes = [EpisodeEntry(**e) for e in data["episodes"]]
            return cls(**{k: v for k, v in data.items() if k in names and k != "episodes"}, episodes=episodes)
        except TypeError as err:
            raise DemoError(f"{path}: malformed entry: {err}") from None


def statistics(actions: np.ndarray, states: np.ndarray, gripper_index: int, num_trajectories: int) -> dict[str, Any]:
    """OpenVLA's dataset_statistics block over all steps (policy actions [N, A], states [N, D]).

    The gripper is masked out of action normalisation, as OpenVLA does for its binary gripper."""

    def block(x: np.ndarray, mask: list[bool]) -> dict[str, list]:
        x = x.astype(np.float64)
        return {"mean": x.mean(0).tolist(), "std": x.std(0).tolist(), "min": x.min(0).tolist(), "max": x.max(0).tolist(),
                "q01": np.quantile(x, 0.01, axis=0).tolist(), "q99": np.quantile(x, 0.99, axis=0).tolist(), "mask": mask}

    action_mask = [True] * actions.shape[1]
    action_mask[gripper_index] = False
    return {"action": block(actions, action_mask), "proprio": block(states, [True] * states.shape[1]),
            "num_transitions": int(actions.shape[0]), "num_trajectories": int(num_trajectories)}
