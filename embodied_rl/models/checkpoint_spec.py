"""What a checkpoint directory fixes about the observations and actions it takes, read from its
JSON files alone (no torch, no transformers: the config checks use it). A policy type reads its
own config.json (input side, cameras) and passes it to `checkpoint_spec`, which reads the files
every checkpoint here shares:

dataset_statistics.json: the sizes of the actions and of the proprio state its statistics
normalise; demos_manifest.json, beside a policy trained on demonstrations (models/README.md):
the cameras, state and controller of those demos.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATS_FILE = "dataset_statistics.json"
DEMOS_MANIFEST = "demos_manifest.json"


@dataclass(frozen=True)
class DemosSeen:
    """What the demos a checkpoint learned from were recorded with (its demos_manifest.json)."""

    image_size: tuple[int, int]
    control_mode: str | None


@dataclass(frozen=True)
class CheckpointSpec:
    """None where the checkpoint does not say (e.g. an official checkpoint's camera count)."""

    image_size: int
    cameras: int | None
    stats_key: str | None
    action_dim: int | None
    proprio_dim: int | None
    demos: DemosSeen | None


def _block_dim(entry: dict[str, Any], block: str) -> int | None:
    values = (entry.get(block) or {}).get("q01")
    return len(values) if isinstance(values, list) else None


def stats_entry(stats: dict[str, Any], unnorm_key: str | None) -> str | None:
    """The entry a policy reads (the key, else '<key>_no_noops', else the only one); None where
    that is ambiguous or absent, which the policy reports itself when it loads."""
    if unnorm_key is None:
        return next(iter(stats)) if len(stats) == 1 else None
    return next((k for k in (unnorm_key, f"{unnorm_key}_no_noops") if k in stats), None)


def checkpoint_spec(path: str | Path, unnorm_key: str | None, *, image_size: int, cameras: int | None) -> CheckpointSpec:
    """The spec of the checkpoint at `path` whose own config.json gave `image_size` and `cameras`."""
    path = Path(path)
    key = action_dim = proprio_dim = None
    if (path / STATS_FILE).is_file():
        stats = json.loads((path / STATS_FILE).read_text())
        key = stats_entry(stats, unnorm_key) if isinstance(stats, dict) else None
        if key is not None and isinstance(stats[key], dict):
            action_dim, proprio_dim = _block_dim(stats[key], "action"), _block_dim(stats[key], "proprio")
    demos = None
    if (path / DEMOS_MANIFEST).is_file():
        manifest = json.loads((path / DEMOS_MANIFEST).read_text())
        h, w = manifest["image_size"]
        demos = DemosSeen(image_size=(int(h), int(w)), control_mode=manifest.get("control_mode"))
    return CheckpointSpec(image_size=image_size, cameras=None if cameras is None else int(cameras), stats_key=key,
                          action_dim=action_dim, proprio_dim=proprio_dim, demos=demos)
