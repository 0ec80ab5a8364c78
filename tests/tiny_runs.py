"""One builder for the tiny training runs the end-to-end tests start through the CLI: PickCube at
64 px, the tiny OFT preset created on first use, PPO with a chunk-level critic, 2 steps. Each test
passes only what its run is about; the YAML a user would write comes out."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

_IMAGES_64 = {"camera_heights": 64, "camera_widths": 64}


def _base(out: Path, model: Path) -> dict[str, Any]:
    return {
        "defaults": ["env/maniskill_pick_cube@env.train", "env/maniskill_pick_cube@env.eval"],
        "cluster": {"component_placement": {"actor": "0", "env": "0", "rollout": "0"}},
        "runner": {"output_dir": str(out), "max_steps": 2, "logger": {"logger_backends": ["console"]}},
        "algorithm": {"adv_type": "gae", "reward_type": "chunk_level"},
        "env": {"train": {"total_num_envs": 4, "auto_reset": True, "max_episode_steps": 16,
                          "init_params": dict(_IMAGES_64), "video_cfg": {"save_video": False}}},
        "actor": {"micro_batch_size": 4, "global_batch_size": 8,
                  "model": {"model_path": str(model), "create_preset": {"name": "tiny", "image_size": 64},
                            "add_value_head": True, "value_type": "chunk_level"}},
    }


#: Mappings a change replaces as a whole, as the config loader does (metadata merge: replace).
_REPLACED = ("component_placement",)


def _merge(into: dict, changes: dict) -> dict:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict) and key not in _REPLACED:
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)
    return into


def tiny_run(out: Path, model: Path, changes: dict[str, Any] | None = None) -> str:
    """The tiny run's YAML with `changes` merged in (nested dicts merge key by key; other values,
    lists included, replace)."""
    return yaml.safe_dump(_merge(_base(Path(out), Path(model)), changes or {}), sort_keys=False)


#: An evaluation section of 64 px episodes without videos (tests add what they check).
EVAL_64 = {"max_episode_steps": 16, "init_params": dict(_IMAGES_64), "video_cfg": {"save_video": False}}
