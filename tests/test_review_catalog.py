"""Catalog scanning: run discovery, sources, sidecar-vs-folder disagreements, unsafe links."""
from __future__ import annotations

import json
import os
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from embodied_rl.errors import UserError
from embodied_rl.review.catalog import build_catalog, discover_runs

FRAMES = [np.full((32, 64, 3), 20 * i, np.uint8) for i in range(5)]


def _video(path: Path, codec: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    imageio.mimsave(path, FRAMES, fps=5, codec=codec, pixelformat="yuv420p", macro_block_size=1,
                    ffmpeg_log_level="error")


def _sidecar(path: Path, **fields) -> None:
    data = {"schema_version": 2, "run_name": "r", "mode": "train", "global_step": 4, "policy_version": 4,
            "env_worker": 0, "stage": 0, "simulator": "maniskill", "video": "w.mp4", "fps": 5,
            "num_frames": 5, "grid": {"rows": 1, "cols": 1, "tile_height": 32, "tile_width": 64, "num_envs": 1},
            "episodes": []}
    path.write_text(json.dumps(dict(data, **fields)))


def _catalog(*dirs: Path) -> dict:
    return build_catalog(discover_runs([str(d) for d in dirs]), lambda run, rel: f"{run.id}:{rel}")


def test_sources_and_sidecar_authority(tmp_path):
    step = tmp_path / "runs" / "a" / "video" / "train" / "step_000004"
    _video(step / "w.mp4", "libx264")
    _video(step / "w.webm", "libvpx-vp9")
    _sidecar(step / "w.json", mode="eval")
    (step / "empty.mp4").write_bytes(b"")
    (video,) = [v for v in _catalog(tmp_path / "runs" / "a")["videos"] if v["tag"] == "w"]
    assert [s["type"] for s in video["sources"]] == ["video/mp4", "video/webm"]  # sidecar's file first
    assert video["mode"] == "eval" and "listed as eval" in video["warnings"][0]
    empty = next(v for v in _catalog(tmp_path / "runs" / "a")["videos"] if v["tag"] == "empty")
    assert any("empty.mp4 is empty" in w for w in empty["warnings"])


def test_discovery(tmp_path):
    for parent in ("x", "y"):
        (tmp_path / parent / "runs" / "exp").mkdir(parents=True)
        (tmp_path / parent / "runs" / "exp" / "metrics.jsonl").write_text('{"step": 1, "env/return": 1}\n')
    runs = discover_runs([str(tmp_path / "x" / "runs"), str(tmp_path / "y" / "runs" / "exp"),
                          str(tmp_path / "x" / "runs" / "exp")])  # a folder of runs expands; duplicates drop
    assert [r.name for r in runs] == ["x/runs/exp", "y/runs/exp"] and [r.id for r in runs] == ["0", "1"]
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(UserError, match="is not a directory"):
        discover_runs([str(tmp_path / "file.txt")])


def test_video_dir_link_outside_is_not_followed(tmp_path):
    outside = tmp_path / "elsewhere" / "video" / "train" / "step_000001"
    _video(outside / "w.mp4", "libx264")
    run = tmp_path / "runs" / "b"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("a: 1\n")
    os.symlink(tmp_path / "elsewhere" / "video", run / "video")
    catalog = _catalog(run)
    assert catalog["videos"] == [] and "outside the run directory" in catalog["runs"][0]["warnings"][0]
    assert catalog["runs"][0]["config_url"] == "0:config.yaml"
